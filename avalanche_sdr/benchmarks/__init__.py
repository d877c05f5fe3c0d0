"""Mixed similar/dissimilar task streams for SDR (paper Sec. 4, Tables 3-4).

- :func:`mixed_similarity_benchmark`: the generic generator over any torchvision-style
  classification dataset (groups of classes, disjoint image splits, a seeded order).
- Presets (Avalanche's CamelCase convention): :func:`MixedDigits` (offline),
  :func:`MixedFashionMNIST`, :func:`MixedEMNIST`, :func:`MixedCIFAR10`,
  :func:`MixedCIFAR100`; ``original_class_ids=True`` and ``shuffle_repeat_labels=True``
  on each give class-incremental labels and repeats with classes in another order.
- :func:`class_incremental_stream`: the task-label-free test stream that
  ``SDRStrategy(eval_router=...)`` evaluates; :func:`dataset_tensors` /
  :func:`experience_tensors` / :func:`stream_tensors`: an experience, or a whole stream,
  as tensors.
- :class:`DatasetNotFoundError`, :class:`CorruptDatasetError`: a preset's files are
  missing, or one is unreadable.
"""

from .cifar import CIFAR10_TABLE4_GROUPS, CIFAR100_TABLE4_GROUPS, MixedCIFAR10, MixedCIFAR100
from .class_incremental import class_incremental_stream
from .digits import DIGITS_GROUPS, MixedDigits
from .emnist import EMNIST_TABLE4_GROUPS, MixedEMNIST, emnist_groups
from .fashion_mnist import FASHION_MNIST_GROUPS, MixedFashionMNIST
from .image_arrays import ImageArrayDataset, gather_images
from avalanche_sdr.dataset_tensors import dataset_tensors, experience_tensors, stream_tensors

from .mixed_stream import (
    MixedSimilarityBenchmark,
    mixed_similarity_benchmark,
    sizes_from_class_counts,
    warm_start_order,
)
from .sources import (
    EMNIST_CLASSES,
    CorruptDatasetError,
    DatasetNotFoundError,
    load_cifar10,
    load_cifar100,
    load_emnist,
    load_fashion_mnist,
)

__all__ = [
    "CIFAR100_TABLE4_GROUPS",
    "CIFAR10_TABLE4_GROUPS",
    "CorruptDatasetError",
    "DIGITS_GROUPS",
    "DatasetNotFoundError",
    "EMNIST_CLASSES",
    "EMNIST_TABLE4_GROUPS",
    "FASHION_MNIST_GROUPS",
    "ImageArrayDataset",
    "MixedCIFAR10",
    "MixedCIFAR100",
    "MixedDigits",
    "MixedEMNIST",
    "MixedFashionMNIST",
    "MixedSimilarityBenchmark",
    "class_incremental_stream",
    "dataset_tensors",
    "emnist_groups",
    "experience_tensors",
    "gather_images",
    "load_cifar10",
    "load_cifar100",
    "load_emnist",
    "load_fashion_mnist",
    "mixed_similarity_benchmark",
    "sizes_from_class_counts",
    "stream_tensors",
    "warm_start_order",
]
