"""``MixedFashionMNIST``: mixed streams over Fashion-MNIST (Debian package or torchvision root)."""

from typing import Callable, Optional, Sequence

from . import sources
from .mixed_stream import MixedSimilarityBenchmark, PerTask, _stream_options_doc, _table3_benchmark

#: Default grouping, consecutive labels: (T-shirt/top, Trouser), (Pullover, Dress),
#: (Coat, Sandal), (Shirt, Sneaker), (Bag, Ankle boot).
FASHION_MNIST_GROUPS = [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9]]


@_stream_options_doc
def MixedFashionMNIST(
    root: str = "/usr/share/datasets/fashion-mnist",
    *,
    n_splits: int = 2,
    seed: int = 0,
    n_warm_start: int = 3,
    download: bool = False,
    groups: Optional[Sequence[Sequence[int]]] = None,
    train_per_task: PerTask = None,
    valid_per_task: PerTask = None,
    test_per_task: PerTask = None,
    scale_to_available: bool = False,
    train_transform: Optional[Callable] = None,
    eval_transform: Optional[Callable] = None,
    original_class_ids: bool = False,
    shuffle_repeat_labels: bool = False,
) -> MixedSimilarityBenchmark:
    """Mixed similar/dissimilar stream over Fashion-MNIST (1x28x28).

    5 groups of 2 classes (:data:`FASHION_MNIST_GROUPS`) x ``n_splits`` splits: 10
    tasks (``n_splits=2``) or 50 tasks (``n_splits=10``). Default sizes use all the
    data (6,000 train / 1,000 test images a class) with the paper's 9:1
    train:validation rule (:func:`sizes_from_class_counts`): per task
    5400 / 600 / 1000 train/validation/test for 2 splits, 1080 / 120 / 200 for 10
    splits (the EMNIST sizes of paper Table 3).

    :param root: directory with the idx files (Debian ``dataset-fashion-mnist`` layout,
        default ``/usr/share/datasets/fashion-mnist``) or a torchvision root
        (``root/FashionMNIST/raw``); see :func:`sources.load_fashion_mnist`.
    {stream options}
    :param download: fetch the files with torchvision when missing.
    :param groups: lists of labels 0..9; default :data:`FASHION_MNIST_GROUPS`.
    :param scale_to_available: see :func:`mixed_similarity_benchmark`.
    :raises sources.DatasetNotFoundError: if the files are missing.
    """
    groups = FASHION_MNIST_GROUPS if groups is None else groups
    train, test = sources.load_fashion_mnist(root, download=download)
    return _table3_benchmark(train, test, groups, (6000, 1000), locals())


__all__ = ["FASHION_MNIST_GROUPS", "MixedFashionMNIST"]
