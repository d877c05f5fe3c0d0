"""A design as an Avalanche benchmark: the sources' images, each task's samples, task labels, ground truth.

:func:`load_source` reads a design's image source with the library's readers
(:mod:`avalanche_sdr.benchmarks.sources`, ``ImageArrayDataset``) from a path it is given, and raises
:class:`SourceUnavailable` (a clear message, no traceback needed) where the files are absent.
:func:`build_benchmark` cuts each class's training images into disjoint blocks, one per task holding the
class in stream order, draws each task's test images, and builds a :class:`DesignBenchmark` through
Avalanche's ``benchmark_from_datasets``: task ``i`` has task label ``i``, local labels 0..c-1 in the
design's label order, and the ground-truth ``group`` / ``split`` (the group's occurrence) attributes that
:func:`avalanche_sdr.training.stream_runner.run_sdr_stream` scores decisions with.

Why not ``mixed_similarity_benchmark``: it needs disjoint groups, equal sizes and balanced classes; designs
have nested and overlapping class sets, per-task sizes and flipped class balance.
"""
from __future__ import annotations

import math
import os
from copy import copy
from pathlib import Path
from typing import Any, Dict, List, Optional

import numpy as np
from avalanche.benchmarks.scenarios.dataset_scenario import benchmark_from_datasets
from avalanche.benchmarks.scenarios.generic_scenario import CLScenario, EagerCLStream, ExperienceAttribute
from avalanche.benchmarks.utils.classification_dataset import TaskAwareClassificationDataset
from avalanche.benchmarks.utils.data_attribute import DataAttribute, TaskLabels
from avalanche.benchmarks.utils.flat_data import ConstantSequence

from avalanche_sdr.benchmarks import DatasetNotFoundError, ImageArrayDataset, gather_images, load_fashion_mnist
from benchmarks.stream_designs.distribution import SOURCE_FACTS, ground_truth

EMNIST_FILE = "emnist/emnist_bymerge_test.npz"
"""The EMNIST bymerge file under the shared data folder (``x``, ``y``, ``train_index``, ``test_index``)."""

CIFAR10_FILE = "cifar10/cifar10_jpeg.npz"
"""The JPEG-re-encoded CIFAR-10 file under the shared data folder (``x_train``, ``y_train``, ``x_test``,
``y_test``; images [N, 32, 32, 3] uint8)."""

FASHION_MNIST_ROOT = "/usr/share/datasets/fashion-mnist"
"""Default Fashion-MNIST folder (the Debian package's; :func:`avalanche_sdr.benchmarks.load_fashion_mnist`)."""


def default_data_root() -> str:
    """The shared data folder: ``SDR_SHARED_DATA`` if set, else ``../shared/data`` beside the checkout."""
    return os.environ.get("SDR_SHARED_DATA", str(Path(__file__).resolve().parents[3] / "shared" / "data"))


class SourceUnavailable(RuntimeError):
    """A design's image source is absent here; the message says which file and which option points to it."""


def _npz(path: Path, source: str, option: str):
    if not path.is_file():
        raise SourceUnavailable(f"{source} designs need {path}, which does not exist; pass {option} (the folder "
                                f"holding {path.parent.name}/{path.name}) or skip these designs")
    return np.load(path)


def load_source(source: str, *, data_seed: int, data_root: Optional[str] = None,
                fashion_root: str = FASHION_MNIST_ROOT):
    """The training and test images of a source, as the library's ``ImageArrayDataset`` s.

    :param source: a name of :data:`~benchmarks.stream_designs.distribution.SOURCES`.
    :param data_seed: the design's ``data_seed`` (digits only: which fifth of each digit is test data).
    :param data_root: the shared data folder holding :data:`EMNIST_FILE` and :data:`CIFAR10_FILE`
        (default :func:`default_data_root`).
    :param fashion_root: the Fashion-MNIST folder (:func:`avalanche_sdr.benchmarks.load_fashion_mnist`).
    :return: ``(train, test)``, images [N, C, H, W] uint8 (digits: values 0..16, ``max_value`` 16).
    :raises SourceUnavailable: the source's files are absent.
    :raises ValueError: the data's class counts differ from
        :data:`~benchmarks.stream_designs.distribution.SOURCE_FACTS` (the designs were drawn for those).
    """
    root = Path(data_root if data_root is not None else default_data_root())
    if source == "fashion_mnist":
        try:
            train, test = load_fashion_mnist(fashion_root)
        except DatasetNotFoundError as err:
            raise SourceUnavailable(f"fashion_mnist designs need Fashion-MNIST: {err} (--fashion-root)") from err
    elif source == "emnist":
        d = _npz(root / EMNIST_FILE, source, "--data-root")
        x, y = d["x"][:, None], d["y"].astype(np.int64)
        train = ImageArrayDataset(x[d["train_index"]], y[d["train_index"]])
        test = ImageArrayDataset(x[d["test_index"]], y[d["test_index"]])
    elif source == "cifar10":
        d = _npz(root / CIFAR10_FILE, source, "--data-root")
        train = ImageArrayDataset(d["x_train"].transpose(0, 3, 1, 2), d["y_train"].astype(np.int64))
        test = ImageArrayDataset(d["x_test"].transpose(0, 3, 1, 2), d["y_test"].astype(np.int64))
    elif source == "digits":
        from sklearn.datasets import load_digits

        digits = load_digits()
        images = np.rint(digits.images).astype(np.uint8)[:, None]
        labels = digits.target.astype(np.int64)
        rng = np.random.default_rng(np.random.SeedSequence([int(data_seed), 0]))
        train_idx, test_idx = [], []
        for v in range(10):
            idx = np.flatnonzero(labels == v)
            idx = idx[rng.permutation(len(idx))]
            n_test = int(math.floor(0.2 * len(idx) + 0.5))
            test_idx.append(idx[:n_test])
            train_idx.append(idx[n_test:])
        train_idx, test_idx = np.sort(np.concatenate(train_idx)), np.sort(np.concatenate(test_idx))
        train = ImageArrayDataset(images[train_idx], labels[train_idx], max_value=16)
        test = ImageArrayDataset(images[test_idx], labels[test_idx], max_value=16)
    else:
        raise ValueError(f"unknown source {source!r}; the sources are {sorted(SOURCE_FACTS)}")
    facts = SOURCE_FACTS[source]
    for name, data in (("train", train), ("test", test)):
        counts = np.bincount(data.targets.numpy(), minlength=len(facts[name])).tolist()
        if tuple(counts) != tuple(facts[name]) or list(data.data.shape[1:]) != facts["shape"]:
            raise ValueError(f"{source}'s {name} data holds {counts} images per class of shape "
                             f"{list(data.data.shape[1:])}; the designs were drawn for {list(facts[name])} of shape "
                             f"{facts['shape']} (SOURCE_FACTS): use the data named in docs/results/stream_designs.md")
    return train, test


def sample_indices(design: Dict[str, Any], train_targets: np.ndarray, test_targets: np.ndarray
                   ) -> List[Dict[str, List[np.ndarray]]]:
    """The samples of every task: per task, ``train`` and ``test``, one int64 index array per local label.

    Each class's training images are shuffled (``default_rng(data_seed)``, classes in ascending id) and cut
    into consecutive blocks, one per task holding the class, in stream order: disjoint across tasks. Each
    task's test images of a class are drawn without replacement from the class's test images, afresh per
    task (the same generator, after the training shuffles).

    :raises ValueError: a class asked for more images than the source holds.
    """
    rng = np.random.default_rng(int(design["data_seed"]))
    classes = sorted({v for t in design["tasks"] for v in t["classes"]})
    pools = {}
    for v in classes:
        idx = np.flatnonzero(train_targets == v)
        pools[v] = idx[rng.permutation(len(idx))]
    taken = {v: 0 for v in classes}
    out = []
    for t in design["tasks"]:
        train = []
        for v, n in zip(t["classes"], t["train_per_class"]):
            block = pools[v][taken[v]:taken[v] + n]
            if len(block) < n:
                raise ValueError(f"class {v} holds {len(pools[v])} training images; design {design['seed']} asks "
                                 f"{taken[v] + n} by task {t['position']}")
            taken[v] += n
            train.append(block.astype(np.int64))
        test = []
        for v, n in zip(t["classes"], t["test_per_class"]):
            idx = np.flatnonzero(test_targets == v)
            if len(idx) < n:
                raise ValueError(f"class {v} holds {len(idx)} test images; task {t['position']} asks {n}")
            test.append(np.sort(rng.choice(idx, size=n, replace=False)).astype(np.int64))
        out.append({"train": train, "test": test})
    return out


def _task_dataset(images, max_value: float, per_class: List[np.ndarray], task_label: int):
    labels = np.concatenate([np.full(len(p), j, dtype=np.int64) for j, p in enumerate(per_class)])
    data = ImageArrayDataset(images, labels, max_value=max_value)
    return TaskAwareClassificationDataset(
        [data], data_attributes=[DataAttribute([int(v) for v in labels], "targets"),
                                 TaskLabels(ConstantSequence(task_label, len(labels)))])


def _with_ground_truth(stream, design: Dict[str, Any], groups: List[int]):
    """The stream's experiences, copied, with task labels, sorted local class lists and the hidden ground truth."""
    experiences = []
    seen: set = set()
    for experience, task, group in zip(stream, design["tasks"], groups):
        new = copy(experience)
        present = list(range(len(task["classes"])))
        new.task_label = experience.current_experience
        new.task_labels = [experience.current_experience]
        new.classes_in_this_experience = present
        new.previous_classes = sorted(seen)
        seen |= set(present)
        new.classes_seen_so_far = sorted(seen)
        new.future_classes = []
        new.group = ExperienceAttribute(group, use_in_train=False, use_in_eval=False)
        new.split = ExperienceAttribute(task["occurrence"], use_in_train=False, use_in_eval=False)
        experiences.append(new)
    return EagerCLStream(stream.name, experiences)


class DesignBenchmark(CLScenario):
    """A design's benchmark: Avalanche's ``CLScenario`` with ``design`` (the dict), ``ground_truth`` (the
    group of every task, stream order) and ``n_warm_start``.

    :param streams: the train and test streams (experiences with ``group`` and ``split``).
    :param design: the design (:func:`~benchmarks.stream_designs.distribution.draw_design`).
    :param groups: the ground-truth group of every task.
    """

    def __init__(self, streams, design: Dict[str, Any], groups: List[int]):
        super().__init__(streams)
        self.design = design
        self.ground_truth = list(groups)
        self.n_warm_start = int(design["n_warm_start"])


def build_benchmark(design: Dict[str, Any], train, test):
    """Design ``design`` as an Avalanche benchmark over ``train`` / ``test`` (:func:`load_source`).

    :return: a :class:`DesignBenchmark` with ``train_stream`` and ``test_stream``, one experience per task in stream order:
        experience ``i`` has task label ``i``; its batches are ``(x, y, t)``, x float32 [N, C, H, W] in [0, 1],
        y int64 local labels (label j is class ``design["tasks"][i]["classes"][j]``); ``group`` (the ground truth,
        :func:`~benchmarks.stream_designs.distribution.ground_truth`) and ``split`` (the group's occurrence) as
        hidden experience attributes (readable on the stream's experiences, not on ``exp.train()``); and
        ``design``, ``ground_truth`` (group per task) and ``n_warm_start``.
    """
    groups = ground_truth(design)
    samples = sample_indices(design, train.targets.numpy(), test.targets.numpy())
    datasets: Dict[str, list] = {"train": [], "test": []}
    for i, task in enumerate(samples):
        for part, source in (("train", train), ("test", test)):
            images, max_value = gather_images(source, np.concatenate(task[part]))
            datasets[part].append(_task_dataset(images, max_value, task[part], i))
    scenario = benchmark_from_datasets(train=datasets["train"], test=datasets["test"])
    return DesignBenchmark([_with_ground_truth(s, design, groups) for s in scenario.streams.values()], design, groups)


__all__ = ["CIFAR10_FILE", "EMNIST_FILE", "FASHION_MNIST_ROOT", "DesignBenchmark", "SourceUnavailable",
           "build_benchmark", "default_data_root", "load_source", "sample_indices"]
