"""SDRStrategy on bad or unusual input (docs/reliability.md lists every case).

Bad data is refused with :class:`InvalidTaskDataError` before the repository changes;
unusual but valid streams (one-class tasks, a task with more classes than any head so
far, a stream shorter than the warm start) train and report finite scores.
"""
import json
import math
from copy import copy

import pytest
import torch

from avalanche.benchmarks.scenarios.dataset_scenario import benchmark_from_datasets
from avalanche.benchmarks.utils.classification_dataset import ClassificationDataset
from avalanche.benchmarks.utils.data_attribute import DataAttribute, TaskLabels
from avalanche.benchmarks.utils.flat_data import ConstantSequence
from avalanche.evaluation.metrics import accuracy_metrics
from avalanche.training.plugins import EvaluationPlugin

from avalanche_sdr import SDRStrategy, build_sdr_model
from avalanche_sdr.benchmarks import ImageArrayDataset, mixed_similarity_benchmark
from avalanche_sdr.models import small_cnn_backbone
from avalanche_sdr.training import InvalidTaskDataError, SDRSettings
from avalanche_sdr.training.stream_runner import run_sdr_stream

# Explicit (not a preset): the tests' expectations must not move with the presets.
FAST = SDRSettings(
    new_task_epochs=4, lr_milestones=(3,), new_task_lr=0.01, lr_decay=0.1, reuse_epochs=4, reuse_lr=0.01,
    train_mb_size=32, eval_mb_size=256, vae_epochs=8, vae_lr=5e-3, vae_mb_size=32, vae_patience=3,
)


pytestmark = pytest.mark.usefixtures("one_thread")


def _images(n_per_class: int, seed: int, n_classes: int = 10, channels: int = 1, size: int = 8):
    """Class c = a fixed random binary prototype + fresh noise: [n, C, H, W] in [0, 1], labels [n]."""
    prototypes = torch.rand(n_classes, channels, size, size, generator=torch.Generator().manual_seed(321)) > 0.5
    g = torch.Generator().manual_seed(seed)
    images = torch.cat(
        [
            (prototypes[c].float() * 0.8 + 0.1 + 0.1 * torch.randn(n_per_class, channels, size, size, generator=g))
            .clamp(0, 1)
            for c in range(n_classes)
        ]
    )
    return images, torch.arange(n_classes).repeat_interleave(n_per_class)


class _Served(torch.utils.data.Dataset):
    """``(images[i], int(labels[i]))`` as given, NaN and Inf included (ImageArrayDataset
    refuses those when built; the strategy must refuse them when they arrive otherwise)."""

    def __init__(self, images, labels):
        self.images, self.labels = images, labels

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return self.images[i], int(self.labels[i])


def _experience(images, labels, task: int):
    """The experience of a one-experience Avalanche stream holding exactly these images and labels."""
    targets = [int(v) for v in labels]
    dataset = ClassificationDataset(
        [_Served(images.float(), labels)],
        data_attributes=[DataAttribute(targets, "targets"), TaskLabels(ConstantSequence(task, len(targets)))],
    )
    experience = copy(benchmark_from_datasets(train=[dataset]).train_stream[0])
    experience.task_label, experience.task_labels = task, [task]
    experience.classes_in_this_experience = sorted(set(targets))
    return experience


def _model(channels: int = 1):
    torch.manual_seed(0)
    return build_sdr_model(
        small_cnn_backbone(in_channels=channels, widths=(16, 32)), in_channels=channels, image_size=8,
        latent_dim=4, vae_width=8,
    )


def _strategy(model, **overrides):
    return SDRStrategy(
        model=model, settings=FAST, **overrides,
        evaluator=EvaluationPlugin(accuracy_metrics(experience=True), loggers=[]),
    )


def _assert_untouched(strategy):
    assert strategy.model.num_entries == 0 and len(strategy.model.heads) == 0
    assert strategy.detection_records == []


# ------------------------------------------------------------------ refused before any change
@pytest.mark.parametrize(
    "channels, size, message",
    [
        (3, 8, r"task 0: images are 3x8x8 \(C x H x W\) but the repository takes 1x8x8"),
        (1, 12, r"task 0: images are 1x12x12 \(C x H x W\) but the repository takes 1x8x8"),
    ],
)
def test_images_of_another_shape_are_refused(channels, size, message):
    images, labels = _images(5, seed=1, n_classes=2, channels=channels, size=size)
    strategy = _strategy(_model(channels=1))
    with pytest.raises(InvalidTaskDataError, match=message):
        strategy.train(_experience(images, labels, task=0), eval_streams=[])
    _assert_untouched(strategy)


def test_an_experience_without_samples_is_refused():
    strategy = _strategy(_model())
    empty = _experience(torch.zeros(0, 1, 8, 8), torch.zeros(0, dtype=torch.long), task=0)
    with pytest.raises(InvalidTaskDataError, match="experience 0 holds no samples"):
        strategy.train(empty, eval_streams=[])
    _assert_untouched(strategy)


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_inputs_are_refused(bad):
    images, labels = _images(5, seed=1, n_classes=2)
    images[3, 0, 4, 4] = bad
    strategy = _strategy(_model())
    with pytest.raises(InvalidTaskDataError, match="task 0: 1 of 10 inputs contain NaN or Inf"):
        strategy.train(_experience(images, labels, task=0), eval_streams=[])
    _assert_untouched(strategy)


def test_negative_labels_are_refused():
    # Labels that are not 0..c-1 but >= 0 are global class ids (tests/training/test_avalanche_loops.py).
    strategy = _strategy(_model())
    with pytest.raises(InvalidTaskDataError, match="labels must be .*>= 0"):
        strategy.train(_experience(torch.rand(4, 1, 8, 8), torch.tensor([0, -1, 0, 1]), task=0), eval_streams=[])
    _assert_untouched(strategy)


def _trained_on_task_0():
    """A strategy whose warm start trained task 0 (2 classes, 8 images each); and that data."""
    images, labels = _images(8, seed=1, n_classes=2)
    strategy = _strategy(_model(), n_warm_start=1)
    strategy.train(_experience(images, labels, task=0), eval_streams=[])
    return strategy, images, labels


def test_evaluation_labels_outside_the_head_are_refused():
    strategy, _, _ = _trained_on_task_0()
    test_images, test_labels = _images(3, seed=2, n_classes=3)
    with pytest.raises(InvalidTaskDataError, match=r"task 0: evaluation labels \[2\] lie outside 0..1"):
        strategy.eval([_experience(test_images, test_labels, task=0)])
    assert strategy.eval([_experience(*_images(3, seed=2, n_classes=2), task=0)])  # a fitting test set runs


def test_a_repeated_task_label_with_other_classes_is_refused():
    """A task label trained again continues its entry (tests/training/test_learning_reuse.py),
    but only with the classes its head was trained on."""
    strategy, images, labels = _trained_on_task_0()
    with pytest.raises(ValueError, match=r"task 0 already has class ids \[0, 1\], got \[5, 6\]"):
        strategy.train(_experience(images, labels + 5, task=0), eval_streams=[])
    assert strategy.model.num_entries == 1 and len(strategy.detection_records) == 1
    strategy.train(_experience(images, labels, task=0), eval_streams=[])
    assert strategy.model.num_entries == 1 and strategy.detection_records[-1].rule == "known_task"


def test_an_experience_with_several_tasks_is_refused():
    images, labels = _images(4, seed=1, n_classes=2)
    experience = _experience(images, labels, task=0)
    experience.task_labels = [0, 1]
    strategy = _strategy(_model())
    with pytest.raises(ValueError, match=r"one task per experience; experience 0 holds task labels \[0, 1\]"):
        strategy.train(experience, eval_streams=[])
    _assert_untouched(strategy)


def test_non_finite_evaluation_inputs_are_refused():
    strategy, _, _ = _trained_on_task_0()
    test_images, test_labels = _images(3, seed=2, n_classes=2)
    test_images[0, 0, 0, 0] = float("nan")  # label 0: argmax of NaN logits would count as correct
    with pytest.raises(InvalidTaskDataError, match="task 0: 1 evaluation inputs of a mini-batch of 6 contain NaN"):
        strategy.eval([_experience(test_images, test_labels, task=0)])


# ------------------------------------------------------------------ unusual streams that must work
def _stream(groups, n_splits, seed, n_warm_start):
    n_classes = 1 + max(c for group in groups for c in group)
    train = ImageArrayDataset(*_images(40, seed=1, n_classes=n_classes), max_value=1.0)
    test = ImageArrayDataset(*_images(10, seed=2, n_classes=n_classes), max_value=1.0)
    return mixed_similarity_benchmark(train, test, groups, n_splits, seed=seed, n_warm_start=n_warm_start)


def test_one_class_tasks_and_a_task_wider_than_every_earlier_head():
    # Group 1 has one class, group 3 five; seed 4 puts group 1 in the warm start, a
    # scored repeat of it later, and group 3 first after the warm start.
    groups = [[0, 1], [2], [3, 4], [5, 6, 7, 8, 9]]
    stream = _stream(groups, n_splits=2, seed=4, n_warm_start=2)
    order = stream.stream_groups
    first_wide = order.index(3)
    assert first_wide >= 2 and 1 in order[:2] and 1 in order[2:]
    strategy = _strategy(_model(), n_warm_start=2)
    results = run_sdr_stream(strategy, stream, seed=4)
    model = strategy.model
    for position, task in enumerate(results["tasks"]):
        assert model.heads.num_classes(position) == len(groups[order[position]])
        assert all(math.isfinite(v) for v in task["detection"]["consistency"] + task["detection"]["complexity"])
    assert model.heads.num_classes(first_wide) > max(model.heads.num_classes(t) for t in range(first_wide))
    for position, task in enumerate(results["tasks"]):
        if order[position] == 1:
            assert task["test_accuracy"] == 1.0  # one output: always the right class
    assert results["tasks"][first_wide]["test_accuracy"] > 0.35  # chance: 0.2
    json.dumps(results, allow_nan=False)


def test_a_stream_shorter_than_the_warm_start_trains_everything_as_warm_start():
    stream = _stream([[0, 1], [2, 3]], n_splits=1, seed=0, n_warm_start=2)
    strategy = _strategy(_model(), n_warm_start=3)
    results = run_sdr_stream(strategy, stream, seed=0)
    assert [t["decision"] for t in results["tasks"]] == ["warm_start", "warm_start"]
    assert results["detection"] == {"correct": 0.0, "miss": 0.0, "incorrect": 0.0, "n_scored": 0}
    assert results["unique_tasks"] == 2
    json.dumps(results, allow_nan=False)
