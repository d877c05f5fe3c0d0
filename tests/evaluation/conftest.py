"""Fixtures for the evaluation tests: tiny task-labelled Avalanche datasets and
benchmarks, as factories (fixtures that return the function)."""
import pytest
import torch
from avalanche.benchmarks.scenarios.dataset_scenario import benchmark_from_datasets
from avalanche.benchmarks.scenarios.task_aware import with_task_labels
from avalanche.benchmarks.utils.classification_dataset import TaskAwareClassificationDataset
from avalanche.benchmarks.utils.data_attribute import DataAttribute
from avalanche.benchmarks.utils.flat_data import ConstantSequence
from torch.utils.data import TensorDataset


def _tiny_dataset(n, task=0, seed=0, shape=(1, 4, 4)):
    """n samples: x float32 ``shape`` uniform in [0, 1) (seeded generator), y int64
    ``i % 2``, task label ``task`` (int) -> 4*prod(shape)+8+8 bytes each."""
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, *shape, generator=g)
    y = torch.arange(n) % 2
    return TaskAwareClassificationDataset(
        [TensorDataset(x, y)],
        data_attributes=[
            DataAttribute(y.tolist(), "targets"),
            DataAttribute(ConstantSequence(task, n), "targets_task_labels", use_in_getitem=True),
        ],
    )


def _tiny_benchmark(train_seeds, test_seeds, shape):
    """A task-labelled benchmark: experience t has task label t, 8 training samples
    drawn with seed ``train_seeds[t]`` and 4 test samples with ``test_seeds[t]``, of
    the given sample ``shape`` (see :func:`_tiny_dataset`)."""
    return with_task_labels(
        benchmark_from_datasets(
            train=[_tiny_dataset(8, t, seed, shape) for t, seed in enumerate(train_seeds)],
            test=[_tiny_dataset(4, t, seed, shape) for t, seed in enumerate(test_seeds)],
        )
    )


@pytest.fixture
def tiny_dataset():
    """``tiny_dataset(n, task=0, seed=0, shape=(1, 4, 4))``: see :func:`_tiny_dataset`."""
    return _tiny_dataset


@pytest.fixture
def tiny_benchmark():
    """``tiny_benchmark(train_seeds, test_seeds, shape)``: see :func:`_tiny_benchmark`."""
    return _tiny_benchmark
