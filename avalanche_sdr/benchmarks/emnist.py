"""``MixedEMNIST``: the paper's 100-task EMNIST stream (Tables 3-4)."""

from typing import Callable, List, Optional

from . import sources
from .mixed_stream import MixedSimilarityBenchmark, PerTask, _stream_options_doc, _table3_benchmark

#: Paper Table 4, EMNIST groups, exactly as printed: 9 groups of 5 and 1 of 2.
#: EMNIST balanced/bymerge merges the upper and lower case of c, i, j, k, l, m, o, p,
#: s, u, v, w, x, y, z into one class labelled with the capital; the table names those
#: merged classes in lower case (and prints capitals only for letters whose lower case
#: is a class of its own). Read that way the 47 names are exactly the 47 classes.
EMNIST_TABLE4_GROUPS = [
    ["0", "1", "2", "3", "4"],
    ["5", "6", "7", "8", "9"],
    ["A", "B", "D", "E", "F"],
    ["G", "H", "N", "Q", "R"],
    ["T", "a", "b", "c", "d"],
    ["e", "f", "g", "h", "i"],
    ["j", "k", "l", "m", "n"],
    ["o", "p", "q", "r", "s"],
    ["t", "u", "v", "w", "x"],
    ["y", "z"],
]


def emnist_class_id(name: str) -> int:
    """Label (0..46) of a Table 4 character: itself if it is an EMNIST balanced class,
    otherwise its capital (the merged upper/lower-case class)."""
    if name in sources.EMNIST_CLASSES:
        return sources.EMNIST_CLASSES.index(name)
    if name.upper() in sources.EMNIST_CLASSES:
        return sources.EMNIST_CLASSES.index(name.upper())
    raise ValueError(f"{name!r} is not an EMNIST balanced class")


def emnist_groups() -> List[List[int]]:
    """:data:`EMNIST_TABLE4_GROUPS` as labels 0..46 (a partition of all 47 classes)."""
    return [[emnist_class_id(n) for n in group] for group in EMNIST_TABLE4_GROUPS]


@_stream_options_doc
def MixedEMNIST(
    root: str,
    *,
    split: str = "balanced",
    download: bool = False,
    seed: int = 0,
    n_warm_start: int = 3,
    n_splits: int = 10,
    train_per_task: PerTask = None,
    valid_per_task: PerTask = None,
    test_per_task: PerTask = None,
    scale_to_available: Optional[bool] = None,
    train_transform: Optional[Callable] = None,
    eval_transform: Optional[Callable] = None,
    original_class_ids: bool = False,
    shuffle_repeat_labels: bool = False,
) -> MixedSimilarityBenchmark:
    """The paper's EMNIST stream: 10 groups (Table 4) x 10 splits = 100 tasks, 1x28x28.

    Images are upright (the raw EMNIST files store them transposed). Default sizes
    (paper Table 3, from 2,400 train / 400 test images a class): per task 1080 / 120 /
    200 train/validation/test for the 5-class groups and 432 / 48 / 80 for the
    2-class group (216 / 24 / 40 per class).

    ``split="bymerge"`` reads a bymerge root (same 47 classes and labels as balanced,
    unbalanced counts; e.g. the official bymerge test split re-divided into train and
    test). It defaults to ``scale_to_available=True``: a group whose rarest class holds
    fewer than 10 x 240 train+validation (or 10 x 40 test) images gets smaller, still
    equal, per-class sizes; ``benchmark.task_sizes`` reports them.

    :param root: torchvision EMNIST root (``root/EMNIST/raw/emnist-<split>-...``).
    :param split: ``"balanced"`` or ``"bymerge"``.
    :param download: fetch the official archive with torchvision when files are missing.
    {stream options}
    :param scale_to_available: None: True for bymerge, False for balanced.
    :raises sources.DatasetNotFoundError: if the files are missing.
    """
    if split not in ("balanced", "bymerge"):
        raise ValueError(f"split must be 'balanced' or 'bymerge'; got {split!r}")
    if scale_to_available is None:
        scale_to_available = split == "bymerge"
    groups = emnist_groups()
    train, test = sources.load_emnist(root, split=split, download=download)
    return _table3_benchmark(train, test, groups, (2400, 400), locals())


__all__ = ["EMNIST_TABLE4_GROUPS", "MixedEMNIST", "emnist_class_id", "emnist_groups"]
