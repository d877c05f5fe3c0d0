"""``MixedDigits``: a 10-task mixed stream over scikit-learn's bundled digits (offline)."""

from typing import Callable, Optional, Sequence

import numpy as np

from .image_arrays import ImageArrayDataset
from .mixed_stream import MixedSimilarityBenchmark, mixed_similarity_benchmark

#: Default grouping: consecutive digit pairs.
DIGITS_GROUPS = [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9]]

# Seed purpose for the train/test division (0-2 and 4 are used by the generic generator).
_TEST_DIVISION = 3


def MixedDigits(
    *,
    seed: int = 0,
    n_warm_start: int = 3,
    n_splits: int = 2,
    groups: Optional[Sequence[Sequence[int]]] = None,
    test_fraction: float = 0.2,
    valid_fraction: float = 0.125,
    train_transform: Optional[Callable] = None,
    eval_transform: Optional[Callable] = None,
    original_class_ids: bool = False,
    shuffle_repeat_labels: bool = False,
) -> MixedSimilarityBenchmark:
    """Mixed similar/dissimilar stream over ``sklearn.datasets.load_digits``.

    1,797 images of 8x8 pixels with values 0..16, returned as float32 [1, 8, 8] in
    [0, 1] (value / 16). Default: 5 groups of 2 digits (0,1), (2,3), (4,5), (6,7),
    (8,9) x 2 splits = 10 tasks, all images used.

    Each digit's images (174-183) are first divided, seeded, into a test share
    (``round(test_fraction * n)``) and the rest; then each share is cut into
    ``n_splits`` parts and each training part gives ``round(valid_fraction * part)``
    validation images. Defaults: ~70 % train / 10 % validation / 20 % test, i.e.
    per task (2 digits) about 124-126 train, 18 validation and 34-37 test images
    (exact counts in ``benchmark.task_sizes``). ``benchmark.sample_indices`` index
    the preset's own train and test divisions, not ``load_digits()`` directly.

    :param seed: fixes the train/test division, the splits and the stream order.
    :param n_warm_start: leading tasks with pairwise distinct groups.
    :param n_splits: splits per digit (tasks per group).
    :param groups: lists of digits (0..9); default :data:`DIGITS_GROUPS`.
    :param test_fraction: share of each digit's images used for testing, in (0, 1).
    :param valid_fraction: share of each training part used for validation, in [0, 1).
    :param train_transform: transform group ``"train"`` (e.g. augmentation) on float32
        [1, 8, 8] images in [0, 1]; see :func:`mixed_similarity_benchmark`.
    :param eval_transform: transform group ``"eval"``, the same way.
    :param original_class_ids: True: labels are the digits themselves (int64, the
        original class ids ``groups[k][j]``) instead of local 0..c-1, same images; see
        :func:`mixed_similarity_benchmark`.
    :param shuffle_repeat_labels: True: every task after the first of its group carries
        its local labels in a seeded other order (``benchmark.label_permutations``),
        same images; not with ``original_class_ids``; see
        :func:`mixed_similarity_benchmark`.
    :return: a :class:`MixedSimilarityBenchmark` (see its attributes).
    """
    from sklearn.datasets import load_digits

    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must lie in (0, 1); got {test_fraction}")
    if not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative int; got {seed!r}")
    digits = load_digits()
    images = np.rint(digits.images).astype(np.uint8)[:, None]  # [N, 1, 8, 8], 0..16
    labels = digits.target.astype(np.int64)
    train_idx, test_idx = [], []
    for c in range(10):
        idx = np.flatnonzero(labels == c)
        rng = np.random.default_rng(np.random.SeedSequence([int(seed), _TEST_DIVISION, c]))
        idx = idx[rng.permutation(len(idx))]
        n_test = int(np.floor(test_fraction * len(idx) + 0.5))
        test_idx.append(idx[:n_test])
        train_idx.append(idx[n_test:])
    train_idx = np.sort(np.concatenate(train_idx))
    test_idx = np.sort(np.concatenate(test_idx))
    names = [str(c) for c in range(10)]
    train = ImageArrayDataset(images[train_idx], labels[train_idx], max_value=16, classes=names)
    test = ImageArrayDataset(images[test_idx], labels[test_idx], max_value=16, classes=names)
    return mixed_similarity_benchmark(
        train,
        test,
        DIGITS_GROUPS if groups is None else groups,
        n_splits,
        seed=seed,
        n_warm_start=n_warm_start,
        valid_fraction=valid_fraction,
        train_transform=train_transform,
        eval_transform=eval_transform,
        original_class_ids=original_class_ids,
        shuffle_repeat_labels=shuffle_repeat_labels,
    )


__all__ = ["DIGITS_GROUPS", "MixedDigits"]
