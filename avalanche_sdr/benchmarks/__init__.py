"""Mixed similar/dissimilar task streams for SDR (paper Sec. 4, Tables 3-4).

- :func:`mixed_similarity_benchmark`: the generic generator over any torchvision-style
  classification dataset (groups of classes k, disjoint image splits r, seeded order
  with pairwise-dissimilar warm-start tasks, train/validation/test per task).
- Presets (Avalanche's CamelCase convention): :func:`MixedDigits` (scikit-learn's
  bundled digits, offline), :func:`MixedFashionMNIST` (Debian package
  ``dataset-fashion-mnist`` or a torchvision root), :func:`MixedEMNIST` (100 tasks),
  :func:`MixedCIFAR10` (10 tasks), :func:`MixedCIFAR100` (40 tasks).
- ``original_class_ids=True`` (the generator and every preset): labels are the
  dataset's original class ids instead of labels local to each task, for
  class-incremental (task-free) learners; same images, tasks and splits
  (``MixedSimilarityBenchmark.task_class_ids``, ``n_classes_total``).
- ``shuffle_repeat_labels=True`` (the generator and every preset): every task after
  the first of its group carries its local labels in a seeded other order (repeats
  whose classes come in another order); ``MixedSimilarityBenchmark.label_permutations``
  and ``label_matching`` give the ground truth.
- :func:`class_incremental_stream`: a stream of such a benchmark (original class ids)
  with task label 0 everywhere, the class-incremental test stream that
  ``SDRStrategy(eval_router=...)`` evaluates with Avalanche's own metrics.
- :func:`dataset_tensors` / :func:`experience_tensors`: a whole experience as tensors.
- :class:`DatasetNotFoundError`: raised when a preset's files are missing;
  :class:`CorruptDatasetError`: raised when one is truncated or unreadable.
"""

from .cifar import CIFAR10_TABLE4_GROUPS, CIFAR100_TABLE4_GROUPS, MixedCIFAR10, MixedCIFAR100
from .class_incremental import class_incremental_stream
from .digits import DIGITS_GROUPS, MixedDigits
from .emnist import EMNIST_TABLE4_GROUPS, MixedEMNIST, emnist_groups
from .fashion_mnist import FASHION_MNIST_GROUPS, MixedFashionMNIST
from .image_arrays import ImageArrayDataset, gather_images
from avalanche_sdr.dataset_tensors import dataset_tensors, experience_tensors

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
    "warm_start_order",
]
