"""A benchmark's stream as a class-incremental stream: the same experiences, task label 0.

A class-incremental (task-free) test stream gives no task labels: Avalanche's
class-incremental benchmarks (``nc_benchmark(..., task_labels=False)``,
``SplitMNIST()``) give every sample the task label 0 and label it with the dataset's
original class id. :func:`class_incremental_stream` makes such a stream from a
task-aware benchmark of this package (or any Avalanche benchmark) trained on original
class ids, experience by experience, so that the per-experience metrics still say
which task's test data they score.

Written here because Avalanche 0.6.0 has the opposite step only
(``task_incremental_benchmark`` adds task labels) and its ``class_incremental_benchmark``
splits a dataset by classes, which cannot express a stream whose tasks repeat classes.
"""
from __future__ import annotations

from typing import Any, Optional

from avalanche.benchmarks.scenarios.dataset_scenario import DatasetExperience
from avalanche.benchmarks.scenarios.generic_scenario import EagerCLStream, ExperienceAttribute
from avalanche.benchmarks.utils.data_attribute import TaskLabels
from avalanche.benchmarks.utils.flat_data import ConstantSequence

_CLASS_LISTS = ("classes_in_this_experience", "previous_classes", "classes_seen_so_far", "future_classes")


def _without_task_labels(experience: Any, position: int) -> DatasetExperience:
    """A copy of ``experience`` whose samples and attributes carry task label 0."""
    dataset = experience.dataset
    dataset = dataset.update_data_attribute("targets_task_labels", TaskLabels(ConstantSequence(0, len(dataset))))
    new = DatasetExperience(dataset=dataset, current_experience=position)
    new.task_label = 0
    new.task_labels = [0]
    for name in _CLASS_LISTS:
        if hasattr(experience, name):
            setattr(new, name, list(getattr(experience, name)))
    for name, value in vars(experience).items():  # hidden ground truth (group, split): kept hidden
        if isinstance(value, ExperienceAttribute) and not name.startswith("_"):
            setattr(new, name, ExperienceAttribute(value.value, use_in_train=value.use_in_train,
                                                   use_in_eval=value.use_in_eval))
    return new


def class_incremental_stream(benchmark: Any, stream: str = "test", name: Optional[str] = None) -> EagerCLStream:
    """``benchmark``'s ``<stream>_stream`` without task labels, labelled by original class ids.

    Experience i holds the same samples, in the same order, with the same transforms
    and labels as experience i of the source stream; every sample's task label is 0
    (``(x, y, 0)``), ``task_label == 0`` and ``task_labels == [0]``, as in Avalanche's
    class-incremental benchmarks. The class lists (``classes_in_this_experience``, ...)
    and the hidden ground truth (``group``, ``split``: logging mode only) are kept.

    Evaluate it with ``SDRStrategy(..., routers=("gaussian",), eval_router="gaussian")``
    (:mod:`avalanche_sdr.evaluation.class_incremental`): Avalanche's accuracy on it is
    the task-free accuracy.

    :param benchmark: an Avalanche benchmark whose labels are the dataset's original
        class ids: this package's benchmarks with ``original_class_ids=True``, or
        Avalanche's with ``class_ids_from_zero_in_each_exp=False`` (its default).
    :param stream: the source stream's name (``"test"``: ``benchmark.test_stream``).
    :param name: the new stream's name, which Avalanche's metric names use
        (``Top1_Acc_Stream/eval_phase/<name>_stream/Task000``); default: ``stream``.
    :return: an ``EagerCLStream`` of ``DatasetExperience`` s whose ``origin_stream.benchmark``
        is ``benchmark`` (so an evaluation reads its class count, ``n_classes_total`` or
        ``n_classes``).
    :raises ValueError: labels local to each task (``original_class_ids=False`` or
        ``class_ids_from_zero_in_each_exp=True``): class 0 of one task and of another
        would be one class.
    :raises AttributeError: the benchmark has no such stream.
    """
    if getattr(benchmark, "original_class_ids", True) is False or \
            getattr(benchmark, "class_ids_from_zero_in_each_exp", False) is True:
        raise ValueError(
            "a class-incremental stream needs labels that are the dataset's original class ids, but this benchmark's "
            "labels are local to each task (0..c-1); build it with original_class_ids=True (Avalanche: "
            "class_ids_from_zero_in_each_exp=False)"
        )
    source = getattr(benchmark, f"{stream}_stream")
    experiences = [_without_task_labels(experience, i) for i, experience in enumerate(source)]
    return EagerCLStream(stream if name is None else name, experiences, benchmark=benchmark)


__all__ = ["class_incremental_stream"]
