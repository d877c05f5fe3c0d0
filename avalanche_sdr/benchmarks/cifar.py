"""``MixedCIFAR10`` and ``MixedCIFAR100``: the paper's CIFAR streams (Tables 3-4)."""

from typing import Callable, Dict, List, Optional, Sequence

import numpy as np

from . import sources
from .mixed_stream import MixedSimilarityBenchmark, PerTask, _stream_options_doc, _table3_benchmark

#: Paper Table 4, CIFAR-10 groups (local label order as listed).
CIFAR10_TABLE4_GROUPS = [
    ["airplane", "bird"],
    ["automobile", "truck"],
    ["cat", "dog"],
    ["deer", "horse"],
    ["frog", "ship"],
]

#: Paper Table 4, CIFAR-100 groups: the 20 superclasses, in the table's order.
CIFAR100_TABLE4_GROUPS = [
    ["aquarium fish", "flatfish", "ray", "shark", "trout"],
    ["orchid", "poppy", "rose", "sunflower", "tulip"],
    ["beaver", "dolphin", "otter", "seal", "whale"],
    ["bottle", "bowl", "can", "cup", "plate"],
    ["bear", "leopard", "lion", "tiger", "wolf"],
    ["apple", "mushroom", "orange", "pear", "sweet pepper"],
    ["hamster", "mouse", "rabbit", "shrew", "squirrel"],
    ["baby", "boy", "girl", "man", "woman"],
    ["maple tree", "oak tree", "palm tree", "pine tree", "willow tree"],
    ["bicycle", "bus", "motorcycle", "pickup truck", "train"],
    ["clock", "keyboard", "lamp", "telephone", "television"],
    ["bed", "chair", "couch", "table", "wardrobe"],
    ["bee", "beetle", "butterfly", "caterpillar", "cockroach"],
    ["bridge", "castle", "house", "road", "skyscraper"],
    ["cloud", "forest", "mountain", "plain", "sea"],
    ["camel", "cattle", "chimpanzee", "elephant", "kangaroo"],
    ["fox", "porcupine", "possum", "raccoon", "skunk"],
    ["crab", "lobster", "snail", "spider", "worm"],
    ["crocodile", "dinosaur", "lizard", "snake", "turtle"],
    ["lawn mower", "rocket", "streetcar", "tank", "tractor"],
]


def _normalise(name: str) -> str:
    return name.replace("_", " ").replace("-", " ").strip().lower()


def _group_ids(table: Sequence[Sequence[str]], classes: List[str], dataset: str) -> List[List[int]]:
    """Table 4 class names -> the dataset's label ids (names matched ignoring _ / -)."""
    index: Dict[str, int] = {_normalise(n): i for i, n in enumerate(classes)}
    groups = []
    for group in table:
        ids = []
        for name in group:
            if _normalise(name) not in index:
                raise ValueError(
                    f"{dataset}: class {name!r} of paper Table 4 is not among the "
                    f"dataset's class names {classes}"
                )
            ids.append(index[_normalise(name)])
        groups.append(ids)
    return groups


@_stream_options_doc
def MixedCIFAR10(
    root: str,
    *,
    download: bool = False,
    seed: int = 0,
    n_warm_start: int = 3,
    n_splits: int = 2,
    train_per_task: PerTask = None,
    valid_per_task: PerTask = None,
    test_per_task: PerTask = None,
    scale_to_available: bool = False,
    train_transform: Optional[Callable] = None,
    eval_transform: Optional[Callable] = None,
    original_class_ids: bool = False,
    shuffle_repeat_labels: bool = False,
) -> MixedSimilarityBenchmark:
    """The paper's CIFAR-10 stream: 5 groups of 2 (Table 4) x 2 splits = 10 tasks.

    Images float32 [3, 32, 32] in [0, 1]. Default sizes (paper Table 3, all the data:
    5,000 train / 1,000 test images a class): 4500 / 500 / 1000 train/validation/test
    per task.

    :param root: directory holding ``cifar-10-batches-py/`` (torchvision layout).
    :param download: fetch with torchvision when files are missing.
    {stream options}
    :param scale_to_available: see :func:`mixed_similarity_benchmark`.
    :raises sources.DatasetNotFoundError: if the files are missing.
    """
    train, test = sources.load_cifar10(root, download=download)
    groups = _group_ids(CIFAR10_TABLE4_GROUPS, train.classes, "CIFAR-10")
    return _table3_benchmark(train, test, groups, (5000, 1000), locals())


def _superclass_names(train, groups: List[List[int]]):
    """Each group's superclass name from the pickles' coarse labels (None if absent).

    :raises ValueError: if a group's classes do not share one coarse label.
    """
    coarse = getattr(train, "coarse_targets", None)
    if coarse is None:
        return None
    coarse = np.asarray(coarse)
    fine = np.asarray(train.targets)
    names = []
    for k, group in enumerate(groups):
        labels = {int(v) for c in group for v in np.unique(coarse[fine == c])}
        if len(labels) != 1:
            raise ValueError(
                f"CIFAR-100: the classes of Table 4 group {k} "
                f"({CIFAR100_TABLE4_GROUPS[k]}) carry coarse labels {sorted(labels)}; "
                "one shared superclass is expected"
            )
        (label,) = labels
        coarse_names = getattr(train, "coarse_classes", None)
        names.append(coarse_names[label] if coarse_names else str(label))
    return names


@_stream_options_doc
def MixedCIFAR100(
    root: str,
    *,
    download: bool = False,
    seed: int = 0,
    n_warm_start: int = 3,
    n_splits: int = 2,
    train_per_task: PerTask = None,
    valid_per_task: PerTask = None,
    test_per_task: PerTask = None,
    scale_to_available: bool = False,
    train_transform: Optional[Callable] = None,
    eval_transform: Optional[Callable] = None,
    original_class_ids: bool = False,
    shuffle_repeat_labels: bool = False,
) -> MixedSimilarityBenchmark:
    """The paper's CIFAR-100 stream: 20 superclasses (Table 4) x 2 splits = 40 tasks.

    Each group is one CIFAR-100 superclass: its 5 fine classes, local labels in Table
    4's order (fine names matched to the ``meta`` file's ``fine_label_names``; the
    pickles' coarse labels are checked to agree and name the groups,
    ``benchmark.group_names``). Images float32 [3, 32, 32] in [0, 1]. Default sizes
    (paper Table 3, all the data: 500 train / 100 test images a class): 1125 / 125 /
    250 train/validation/test per task.

    :param root: directory holding ``cifar-100-python/`` (torchvision layout).
    :param download: fetch with torchvision when files are missing.
    {stream options}
    :param scale_to_available: see :func:`mixed_similarity_benchmark`.
    :raises sources.DatasetNotFoundError: if the files are missing.
    """
    train, test = sources.load_cifar100(root, download=download)
    groups = _group_ids(CIFAR100_TABLE4_GROUPS, train.classes, "CIFAR-100")
    return _table3_benchmark(
        train, test, groups, (500, 100), locals(), group_names=_superclass_names(train, groups)
    )


__all__ = [
    "CIFAR100_TABLE4_GROUPS",
    "CIFAR10_TABLE4_GROUPS",
    "MixedCIFAR10",
    "MixedCIFAR100",
]
