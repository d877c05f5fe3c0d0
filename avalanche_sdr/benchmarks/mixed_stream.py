"""Mixed similar/dissimilar task streams T_{k,r} (paper Sec. 4, Tables 3-4).

Tasks: the classes of ``groups[k]`` form task family k; the images of each class are
shuffled (seeded) and cut into ``n_splits`` disjoint parts, and task (k, r) holds part r
of every class of group k. Tasks with the same k are *similar* (same label set, same
input distribution); tasks of different groups are *dissimilar*. The T = K * R tasks
are put in a seeded random order whose first ``n_warm_start`` tasks come from pairwise
distinct groups (the warm-start tasks SDR trains without detection).

The result is an Avalanche 0.6.0 benchmark built on the non-deprecated path
(``TaskAwareClassificationDataset`` with ``targets`` and ``TaskLabels`` ->
``benchmark_from_datasets``, experiences given the ``TaskAware`` and classes-timeline
attributes) with ``train_stream``, ``valid_stream`` and ``test_stream`` of length T.
Optional train and eval transforms become the datasets' Avalanche transform groups.
With ``shuffle_repeat_labels=True``, every task that is not the first of its group in
the stream carries its local labels in a seeded other order (a repeat whose classes
come in another order); ``label_permutations`` records the ground truth.
"""

import re
from copy import copy
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch
from torch.utils.data import Dataset

from avalanche.benchmarks.scenarios.dataset_scenario import benchmark_from_datasets
from avalanche.benchmarks.scenarios.generic_scenario import (
    CLScenario,
    EagerCLStream,
    ExperienceAttribute,
)
from avalanche.benchmarks.utils.classification_dataset import TaskAwareClassificationDataset
from avalanche.benchmarks.utils.data_attribute import DataAttribute, TaskLabels
from avalanche.benchmarks.utils.flat_data import ConstantSequence
from avalanche.benchmarks.utils.transform_groups import TransformGroups

from .image_arrays import (
    DatasetView,
    ImageArrayDataset,
    ImageTransform,
    _has_transforms,
    gather_images,
    targets_array,
)

PerTask = Optional[Union[int, Sequence[int]]]

# Purposes mixed into the seed so each random draw has its own independent stream
# (3 is MixedDigits' train/test division).
_ORDER, _TRAIN, _TEST = 0, 1, 2
_SHUFFLE = 4


class MixedSimilarityBenchmark(CLScenario):
    """An Avalanche benchmark of mixed similar/dissimilar tasks T_{k,r}.

    Streams: ``train_stream``, ``valid_stream``, ``test_stream``, each of length T.
    Experience i of every stream holds task ``(stream_groups[i], stream_splits[i])``:

    - ``task_label == i`` and ``task_labels == [i]`` (task-aware: one head per task);
    - labels local to the task, 0..c-1 in the order of ``groups[k]`` (default), or,
      for a benchmark built with ``original_class_ids=True``, the dataset's original
      class ids: local label j is stored as ``groups[k][j]``
      (:meth:`task_class_ids`), the same images in the same order otherwise; for a
      benchmark built with ``shuffle_repeat_labels=True``, the class ``groups[k][j]``
      of experience i carries the local label ``label_permutations[i][j]`` (the
      identity for the first task of each group), the same images in the same order
      otherwise;
    - ``classes_in_this_experience``: sorted list of the labels present (a list, not a
      set, so ``MultiHeadClassifier.adaptation`` works); ``previous_classes``,
      ``classes_seen_so_far``, ``future_classes``: sorted lists too (of the same kind
      of labels: local, or original ids);
    - ``group`` (k) and ``split`` (r), 0-based, stored as ``ExperienceAttribute`` with
      ``use_in_train=False, use_in_eval=False``: readable on the experience as handed
      out by the stream (logging mode) and on ``exp.logging()``; reading them on
      ``exp.train()`` / ``exp.eval()`` raises ``MaskedAttributeError``;
    - batches ``(x, y, t)``: x float32 [N, C, H, W] in [0, 1] (or what the transform
      groups make of it), y int64 [N], t int64 [N]; samples are stored class by class
      (in the order of ``groups[k]``, which is the local label order unless
      ``shuffle_repeat_labels``): shuffle in the loader.

    Benchmark-level description (plain attributes, JSON-safe except ``sample_indices``):

    - ``groups``: list of K lists of original class ids (``groups[k]``);
    - ``class_names``: list of K lists of class names, or None when unknown;
    - ``group_names``: list of K names of the groups (e.g. CIFAR-100 superclasses), or
      None;
    - ``n_splits`` (R), ``n_warm_start``, ``seed``;
    - ``original_class_ids``: bool, whether the labels are the original class ids
      (see above) rather than local ones;
    - ``shuffle_repeat_labels``: bool, whether the tasks after the first of each group
      carry their local labels in another order;
    - ``label_permutations``: list of T lists (stream order), c ints each: experience
      i stores the images of class ``groups[k][j]`` under the local label
      ``label_permutations[i][j]`` (a permutation of 0..c-1; the identity for every
      task without ``shuffle_repeat_labels``); see :meth:`label_matching`;
    - ``stream_groups`` / ``stream_splits``: list of T ints, k and r at each position;
    - ``task_sizes``: list of T dicts (stream order) with ``train``, ``valid``, ``test``
      (images in the task), ``train_per_class``, ``valid_per_class``,
      ``test_per_class`` (lists indexed by local label) and ``scaled`` (True when
      ``scale_to_available`` reduced this task's sizes below the requested ones);
    - ``sample_indices``: list of T dicts of int64 arrays ``train``, ``valid`` (indices
      into the train dataset) and ``test`` (indices into the test dataset), in the
      order of the samples in the experience datasets.
    """

    def __init__(self, streams, **description):
        super().__init__(streams)
        self.groups: List[List[int]] = description["groups"]
        self.class_names: Optional[List[List[str]]] = description["class_names"]
        self.group_names: Optional[List[str]] = description["group_names"]
        self.n_splits: int = description["n_splits"]
        self.n_warm_start: int = description["n_warm_start"]
        self.seed: int = description["seed"]
        self.original_class_ids: bool = description["original_class_ids"]
        self.shuffle_repeat_labels: bool = description["shuffle_repeat_labels"]
        self.label_permutations: List[List[int]] = description["label_permutations"]
        self.stream_groups: List[int] = description["stream_groups"]
        self.stream_splits: List[int] = description["stream_splits"]
        self.task_sizes: List[Dict[str, Any]] = description["task_sizes"]
        self.sample_indices: List[Dict[str, np.ndarray]] = description["sample_indices"]

    @property
    def n_tasks(self) -> int:
        """T, the number of tasks (length of every stream)."""
        return len(self.stream_groups)

    @property
    def n_classes_total(self) -> int:
        """The number of original class ids: the largest id of ``groups`` + 1 (the output
        size of one shared head over original ids; ids of the dataset that no group
        uses are counted too)."""
        return max(max(group) for group in self.groups) + 1

    def task_class_ids(self, i: int) -> List[int]:
        """The original class ids of experience ``i``'s local labels, in local-label
        order: ``groups[stream_groups[i]]`` (local label j is class id
        ``task_class_ids(i)[j]``, whichever labels the streams carry), reordered by
        ``label_permutations[i]`` (local label ``label_permutations[i][j]`` is class
        ``groups[k][j]``).

        :raises IndexError: ``i`` outside ``0..n_tasks - 1``.
        """
        self._check_experience(i)
        group = self.groups[self.stream_groups[i]]
        ids = [0] * len(group)
        for j, label in enumerate(self.label_permutations[i]):
            ids[label] = group[j]
        return ids

    def label_matching(self, i: int, earlier: int) -> List[int]:
        """How experience ``i``'s local labels map to those of experience ``earlier`` of
        the same group: element k is the local label that ``earlier`` gives to the class
        ``i`` labels k (the ground truth of a detector's ``class_permutation`` when ``i``
        reuses the entry ``earlier`` created; the identity without
        ``shuffle_repeat_labels``).

        :raises IndexError: an experience outside ``0..n_tasks - 1``.
        :raises ValueError: the two experiences are of different groups (no matching).
        """
        self._check_experience(i)
        self._check_experience(earlier)
        if self.stream_groups[i] != self.stream_groups[earlier]:
            raise ValueError(
                f"experiences {i} and {earlier} are of groups {self.stream_groups[i]} and "
                f"{self.stream_groups[earlier]}; only tasks of one group have a label matching"
            )
        mine, theirs = self.label_permutations[i], self.label_permutations[earlier]
        out = [0] * len(mine)
        for j, label in enumerate(mine):
            out[label] = theirs[j]
        return out

    def _check_experience(self, i: int) -> None:
        if not 0 <= i < self.n_tasks:
            raise IndexError(f"experience {i} outside 0..{self.n_tasks - 1}")


def warm_start_order(
    n_groups: int, n_splits: int, n_warm_start: int, seed: int
) -> List[Tuple[int, int]]:
    """The stream order of the tasks (k, r), k < n_groups, r < n_splits.

    Rule: draw a uniformly random permutation of the K * R tasks (numpy
    ``default_rng`` seeded with ``SeedSequence([seed, 0])``). Walking that
    permutation from the front, the first task of each not-yet-seen group is taken
    until ``n_warm_start`` tasks are taken; these tasks come first, in the order they
    were met, followed by all the other tasks in permutation order. The first
    ``n_warm_start`` tasks therefore have pairwise distinct groups.

    :raises ValueError: if ``n_warm_start`` is negative or exceeds ``n_groups``.
    """
    if n_groups < 1 or n_splits < 1:
        raise ValueError(
            f"n_groups and n_splits must be >= 1; got {n_groups} and {n_splits}"
        )
    if not 0 <= n_warm_start <= n_groups:
        raise ValueError(
            f"n_warm_start={n_warm_start} must lie in [0, {n_groups}]: the warm-start "
            f"tasks need pairwise distinct groups and there are {n_groups} groups"
        )
    tasks = [(k, r) for k in range(n_groups) for r in range(n_splits)]
    rng = np.random.default_rng(np.random.SeedSequence([seed, _ORDER]))
    permuted = [tasks[i] for i in rng.permutation(len(tasks))]
    warm: List[Tuple[int, int]] = []
    seen = set()
    for task in permuted:
        if len(warm) == n_warm_start:
            break
        if task[0] not in seen:
            seen.add(task[0])
            warm.append(task)
    chosen = set(warm)
    return warm + [task for task in permuted if task not in chosen]


def label_permutations(
    order: Sequence[Tuple[int, int]], groups: Sequence[Sequence[int]], seed: int, shuffle: bool
) -> List[List[int]]:
    """The local-label order of every task of the stream (``label_permutations``).

    Without ``shuffle``: the identity for every task. With it, every task that is not
    the first of its group in ``order`` gets a uniformly random permutation of
    0..c-1 other than the identity (c >= 2; a one-class task keeps [0]), drawn in
    stream order from one numpy generator seeded with ``SeedSequence([seed, 4])``
    (its own purpose; the global RNG is untouched).

    :param order: the stream's tasks (k, r) in stream order (:func:`warm_start_order`).
    :param groups: K lists of class ids.
    :return: one list per task, element j the local label of class ``groups[k][j]``.
    """
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), _SHUFFLE]))
    seen = set()
    out: List[List[int]] = []
    for k, _ in order:
        c = len(groups[k])
        permutation = list(range(c))
        if shuffle and k in seen and c >= 2:
            while permutation == list(range(c)):
                permutation = [int(v) for v in rng.permutation(c)]
        seen.add(k)
        out.append(permutation)
    return out


def _round_half_up(value: float) -> int:
    return int(np.floor(value + 0.5))


def sizes_from_class_counts(
    groups: Sequence[Sequence[int]],
    train_images_per_class: int,
    test_images_per_class: int,
    n_splits: int,
    valid_fraction: float = 0.1,
) -> Tuple[List[int], List[int], List[int]]:
    """Per-task sizes that use a balanced dataset completely (paper Table 3 rule).

    Each class's ``train_images_per_class`` images give ``pool = train_images_per_class
    // n_splits`` per split, of which ``round(valid_fraction * pool)`` are
    validation images and the rest training images; the test images give
    ``test_images_per_class // n_splits`` per split. Per-task sizes are these
    per-class counts times the group's number of classes (e.g. CIFAR-10, 5000/1000
    images per class, 2 splits, 2 classes: 4500/500/1000).

    :return: ``(train_per_task, valid_per_task, test_per_task)``, one int per group.
    """
    if not 0.0 < valid_fraction < 1.0:
        raise ValueError(f"valid_fraction must lie in (0, 1); got {valid_fraction}")
    pool = train_images_per_class // n_splits
    n_valid = _round_half_up(valid_fraction * pool)
    n_train = pool - n_valid
    n_test = test_images_per_class // n_splits
    sizes = [len(g) for g in groups]
    return (
        [n_train * c for c in sizes],
        [n_valid * c for c in sizes],
        [n_test * c for c in sizes],
    )


def _is_count(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _per_group(value: PerTask, groups: List[List[int]], name: str, minimum: int = 0) -> List[Optional[int]]:
    """Per-class counts for each group from a per-task size (int or one per group), each
    at least ``minimum`` images per task (1: a task's training or test images)."""
    if value is None:
        return [None] * len(groups)
    if _is_count(value):
        values = [int(value)] * len(groups)
    else:
        if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__") or not all(map(_is_count, value)):
            raise ValueError(f"{name} must be an int, or a sequence of ints with one per group; got {value!r}")
        values = [int(v) for v in value]
        if len(values) != len(groups):
            raise ValueError(
                f"{name} has {len(values)} entries; one per group ({len(groups)}) "
                "or a single int is expected"
            )
    counts = []
    for k, (total, group) in enumerate(zip(values, groups)):
        if total < minimum or total % len(group) != 0:
            what = "a non-negative" if minimum == 0 else "a positive"
            raise ValueError(
                f"{name}={total} for group {k} must be {what} multiple of its "
                f"{len(group)} classes (the per-class count is {name} / {len(group)})"
            )
        counts.append(total // len(group))
    return counts


def _class_label(c: int, names: Optional[Dict[int, str]]) -> str:
    if names and c in names:
        return f"class {c} ({names[c]!r})"
    return f"class {c}"


def _check_groups(groups: Sequence[Sequence[int]]) -> List[List[int]]:
    if isinstance(groups, (str, bytes)) or len(groups) == 0:
        raise ValueError(f"groups must be a non-empty list of lists of class ids; got {groups!r}")
    out: List[List[int]] = []
    seen: Dict[int, int] = {}
    for k, group in enumerate(groups):
        if isinstance(group, (str, bytes)) or len(group) == 0:
            raise ValueError(f"group {k} must be a non-empty list of class ids; got {group!r}")
        ids = []
        for c in group:
            if not isinstance(c, (int, np.integer)) or isinstance(c, bool):
                raise TypeError(f"class ids must be ints; group {k} holds {c!r}")
            c = int(c)
            if c < 0:
                raise ValueError(f"class ids must be non-negative; group {k} holds {c}")
            if c in seen:
                raise ValueError(
                    f"class {c} appears in group {seen[c]} and again in group {k}; "
                    "groups must be disjoint"
                )
            seen[c] = k
            ids.append(c)
        out.append(ids)
    return out


def _class_indices(targets: np.ndarray, c: int, purpose: int, seed: int) -> np.ndarray:
    """Indices of class c, shuffled by a generator seeded with (seed, purpose, c)."""
    idx = np.flatnonzero(targets == c)
    rng = np.random.default_rng(np.random.SeedSequence([seed, purpose, c]))
    return idx[rng.permutation(len(idx))]


def _count_per_split(
    perms: Dict[int, np.ndarray],
    group: List[int],
    k: int,
    n_splits: int,
    need: int,
    scale: bool,
    names: Optional[Dict[int, str]],
    kind: str,
    request: str,
    advice: str,
) -> Tuple[int, bool, str]:
    """Images a class per split for a request of ``need``, for every class of group k.

    :param kind: ``"training"`` or ``"test"``, for messages.
    :param request: how ``need`` was made up, for messages (e.g. ``"(8 train + 2 valid)"``).
    :param advice: what to request instead, for messages.
    :return: ``(count, scaled, head)``: ``need`` and False when the group's rarest class
        (fewest images; the first in group order on ties) holds ``n_splits * need``;
        otherwise, with ``scale``, what the rarest class holds per split and True.
        ``head`` opens a message about the rarest class ("class 3 ('c3') of group 1 has
        13 training images").
    :raises ValueError: when the rarest class holds too few images and ``scale`` is False.
    """
    rarest = min(group, key=lambda c: len(perms[c]) // n_splits)
    capacity = len(perms[rarest]) // n_splits
    head = f"{_class_label(rarest, names)} of group {k} has {len(perms[rarest])} {kind} images"
    if capacity >= need:
        return need, False, head
    if not scale:
        raise ValueError(
            f"{head}; {n_splits} splits x {request} = {n_splits * need} are needed. "
            f"Request {advice} or pass scale_to_available=True"
        )
    return capacity, True, head


def _split_parts(
    perms: Dict[int, np.ndarray], group: List[int], n_splits: int, size: Optional[int] = None
) -> List[List[np.ndarray]]:
    """Index arrays [split][class]: each class's shuffled indices cut into ``n_splits``
    near-equal parts (``np.array_split``; ``size`` None) or into consecutive blocks of
    ``size`` (the rest unused)."""
    parts: List[List[np.ndarray]] = [[None] * len(group) for _ in range(n_splits)]
    for j, c in enumerate(group):
        cut = (
            np.array_split(perms[c], n_splits)
            if size is None
            else [perms[c][r * size:(r + 1) * size] for r in range(n_splits)]
        )
        for r, part in enumerate(cut):
            parts[r][j] = part
    return parts


def _select_train(
    perms: Dict[int, np.ndarray],
    group: List[int],
    k: int,
    n_splits: int,
    n_train: Optional[int],
    n_valid: Optional[int],
    valid_fraction: float,
    scale: bool,
    names: Optional[Dict[int, str]],
) -> Tuple[List[List[np.ndarray]], List[List[np.ndarray]], bool]:
    """Train/valid indices [split][class] for one group, and whether sizes were scaled."""
    scaled = False
    if n_train is None:
        # All the data: each class cut into n_splits near-equal parts.
        parts = _split_parts(perms, group, n_splits)
        n_valid_parts = [
            [n_valid if n_valid is not None else _round_half_up(valid_fraction * len(p)) for p in split]
            for split in parts
        ]
        for j, c in enumerate(group):
            for r in range(n_splits):
                part, nv = parts[r][j], n_valid_parts[r][j]
                if len(part) - nv < 1:
                    raise ValueError(
                        f"{_class_label(c, names)} of group {k} has {len(perms[c])} training "
                        f"images: split {r} holds {len(part)}, too few for {nv} validation "
                        "images plus at least 1 training image"
                    )
    else:
        if n_valid is None:
            n_valid = _round_half_up(n_train * valid_fraction / (1.0 - valid_fraction))
        need = n_train + n_valid
        capacity, scaled, head = _count_per_split(
            perms, group, k, n_splits, need, scale, names,
            "training", f"({n_train} train + {n_valid} valid)", "smaller per-task sizes",
        )
        if scaled:
            n_valid = _round_half_up(capacity * n_valid / need) if need > 0 else 0
            n_train = capacity - n_valid
            if n_train < 1:
                raise ValueError(f"{head}, too few for {n_splits} splits even after scaling")
            need = capacity
        parts = _split_parts(perms, group, n_splits, need)
        n_valid_parts = [[n_valid] * len(group) for _ in range(n_splits)]
    valid = [[p[:nv] for p, nv in zip(split, nvs)] for split, nvs in zip(parts, n_valid_parts)]
    train = [[p[nv:] for p, nv in zip(split, nvs)] for split, nvs in zip(parts, n_valid_parts)]
    return train, valid, scaled


def _select_test(
    perms: Dict[int, np.ndarray],
    group: List[int],
    k: int,
    n_splits: int,
    n_test: Optional[int],
    scale: bool,
    names: Optional[Dict[int, str]],
) -> Tuple[List[List[np.ndarray]], bool]:
    """Test indices [split][class] for one group, and whether sizes were scaled."""
    if n_test is None:
        parts = _split_parts(perms, group, n_splits)
        for j, c in enumerate(group):
            if any(len(parts[r][j]) == 0 for r in range(n_splits)):
                raise ValueError(
                    f"{_class_label(c, names)} of group {k} has {len(perms[c])} test "
                    f"images, fewer than the {n_splits} splits"
                )
        return parts, False
    n_test, scaled, head = _count_per_split(
        perms, group, k, n_splits, n_test, scale, names,
        "test", str(n_test), "a smaller test_per_task",
    )
    if scaled and n_test < 1:
        raise ValueError(f"{head}, fewer than the {n_splits} splits")
    return _split_parts(perms, group, n_splits, n_test), scaled


def _names_by_class(
    dataset: Any, class_names: Optional[Dict[int, str]]
) -> Optional[Dict[int, str]]:
    if class_names is not None:
        return {int(c): str(n) for c, n in class_names.items()}
    classes = getattr(dataset, "classes", None)
    if isinstance(classes, (list, tuple)) and all(isinstance(n, str) for n in classes):
        return {c: n for c, n in enumerate(classes)}
    return None


def _uses_memory(dataset: Any, in_memory: Optional[bool], with_transforms: bool) -> bool:
    """Whether a source dataset is read into memory (see ``in_memory`` of
    :func:`mixed_similarity_benchmark`)."""
    if in_memory is not None:
        return bool(in_memory)
    if isinstance(dataset, ImageArrayDataset):
        return True
    return not (with_transforms or _has_transforms(dataset))


def _transform_groups(
    train_transform: Optional[Callable],
    eval_transform: Optional[Callable],
    in_memory: bool,
) -> Optional[TransformGroups]:
    """Avalanche transform groups ``train`` / ``eval`` of one task dataset; None (no
    groups: today's in-memory datasets) when nothing is to be transformed."""
    if in_memory and train_transform is None and eval_transform is None:
        return None

    def group(transform):
        # In memory, samples already are float32 tensors: a missing transform is none.
        return None if in_memory and transform is None else ImageTransform(transform)

    return TransformGroups({"train": group(train_transform), "eval": group(eval_transform)})


def _task_dataset(
    data: Dataset, labels: np.ndarray, task_label: int, transforms: Optional[TransformGroups]
) -> TaskAwareClassificationDataset:
    """An experience's dataset: ``data`` (samples ``(image, label)``) with the
    ``targets`` and task-label attributes and the optional transform groups.

    Task-aware (``task_set``, ``targets_task_labels``), as Avalanche's task-incremental
    benchmarks' datasets are: plugins such as ``LwFPlugin`` read them."""
    label_list = [int(v) for v in labels]
    return TaskAwareClassificationDataset(
        [data],
        data_attributes=[
            DataAttribute(label_list, "targets"),
            TaskLabels(ConstantSequence(task_label, len(label_list))),
        ],
        transform_groups=transforms,
    )


def _decorate(stream, positions: List[Tuple[int, int]], classes: List[List[int]]):
    """Copies of the stream's experiences with sorted class lists and hidden k, r."""
    exps = []
    previous: set = set()
    all_classes = sorted(set().union(*map(set, classes)))
    for exp, (k, r), present in zip(stream, positions, classes):
        new = copy(exp)
        new.task_label = exp.current_experience
        new.task_labels = [exp.current_experience]
        new.classes_in_this_experience = list(present)
        new.previous_classes = sorted(previous)
        previous |= set(present)
        new.classes_seen_so_far = sorted(previous)
        new.future_classes = [c for c in all_classes if c not in previous]
        new.group = ExperienceAttribute(k, use_in_train=False, use_in_eval=False)
        new.split = ExperienceAttribute(r, use_in_train=False, use_in_eval=False)
        exps.append(new)
    return EagerCLStream(stream.name, exps)


def mixed_similarity_benchmark(
    train_dataset: Any,
    test_dataset: Any,
    groups: Sequence[Sequence[int]],
    n_splits: int,
    *,
    seed: int = 0,
    n_warm_start: int = 3,
    train_per_task: PerTask = None,
    valid_per_task: PerTask = None,
    test_per_task: PerTask = None,
    valid_fraction: float = 0.1,
    scale_to_available: bool = False,
    class_names: Optional[Dict[int, str]] = None,
    group_names: Optional[Sequence[str]] = None,
    train_transform: Optional[Callable] = None,
    eval_transform: Optional[Callable] = None,
    in_memory: Optional[bool] = None,
    original_class_ids: bool = False,
    shuffle_repeat_labels: bool = False,
) -> MixedSimilarityBenchmark:
    """Build a stream of similar and dissimilar tasks T_{k,r} over a classification dataset.

    Two data paths, chosen per source dataset by ``in_memory``:

    - in memory (the fast path, default for :class:`ImageArrayDataset` s such as the
      presets' data, and for datasets without any transform): the selected images are
      read once into one tensor (uint8 where the source is 8-bit; for torchvision's
      MNIST family and CIFAR straight from their ``data`` array) and each sample is
      served as float32 [C, H, W] in [0, 1];
    - lazy (default for other datasets when the dataset has a transform of its own or
      ``train_transform`` / ``eval_transform`` is given): each experience indexes the
      source dataset (``torchvision.datasets.FashionMNIST``, ``CIFAR10``,
      ``ImageFolder``, ...) and reads ``dataset[i][0]`` at every access, through the
      dataset's own ``transform``; only the labels come from ``targets``.

    ``train_transform`` and ``eval_transform`` become the experiences' Avalanche
    transform groups ``"train"`` and ``"eval"``: Avalanche strategies apply the first
    while training (``dataset.train()``) and the second while evaluating
    (``dataset.eval()``), and SDR's detection reads a task through the eval group
    (:func:`avalanche_sdr.training.read_task_data`). Train-stream datasets start in the
    train group, validation and test datasets in the eval group. Random transforms draw
    from torch's global generator (per ``DataLoader`` worker), as in torchvision: seed
    it for repeatable augmentation; the generator itself never draws from it.

    :param train_dataset: torchvision-style dataset (``targets`` and
        ``dataset[i] = (image, label)``; images PIL, numpy or tensors; in memory 8-bit or
        float in [0, 1]). Source of each task's training and validation images.
    :param test_dataset: the same kind of dataset; source of each task's test images.
    :param groups: K lists of original class ids; group k is the label set of tasks
        (k, r), local label j is ``groups[k][j]``. Groups must be disjoint.
    :param n_splits: R, the number of disjoint image splits per class (tasks per group).
    :param seed: non-negative int; fixes the stream order and every sample index.
        Class c's train images are shuffled with ``SeedSequence([seed, 1, c])``, its
        test images with ``SeedSequence([seed, 2, c])``, the order with
        ``SeedSequence([seed, 0])`` (see :func:`warm_start_order`).
    :param n_warm_start: number of leading tasks with pairwise distinct groups
        (0..K).
    :param train_per_task: training images per task, an int for every group or a
        sequence with one int per group; each class contributes
        ``train_per_task / c`` images (must divide exactly; at least one). None: all the class's
        images in the split minus the validation images.
    :param valid_per_task: validation images per task (same forms). None: a
        ``valid_fraction`` share of each class's train+validation images
        (``round(valid_fraction * part)`` for all-data splits, or
        ``round(n_train * valid_fraction / (1 - valid_fraction))`` per class on top of
        a given ``train_per_task``).
    :param test_per_task: test images per task (same forms; at least one per class). None: all the class's
        test images in the split (``np.array_split`` of the class's test images).
    :param valid_fraction: in [0, 1), see ``valid_per_task``.
    :param scale_to_available: when a class holds too few images for the requested
        sizes, shrink the per-class train+validation count of its whole group to what
        the group's rarest class holds per split (keeping the train:validation ratio),
        and likewise the test count; sizes stay equal across the group's classes and
        splits. The sizes used are in ``benchmark.task_sizes`` (``scaled=True``).
        False: raise ``ValueError``.
    :param class_names: optional ``{class id: name}``; default: ``train_dataset.classes``
        when it is a list of str.
    :param group_names: optional name of each group (e.g. CIFAR-100 superclasses).
    :param train_transform: optional callable on one image, the ``"train"`` transform
        group (e.g. a random augmentation). It receives what the data path serves: in
        memory a float32 tensor [C, H, W] in [0, 1], lazily ``dataset[i][0]`` (a PIL
        image for torchvision datasets without a transform of their own). None: no
        transform. Whatever it returns that is not a floating-point tensor (a PIL
        image, a uint8 tensor) is converted to float32 [C, H, W], uint8 values / 255.
    :param eval_transform: the same for the ``"eval"`` group (deterministic, e.g. a
        centre crop; a normalisation such as ``Normalize`` suits other models only:
        SDR's take [0, 1] images and normalise inside). None: no transform (not ``train_transform``).
    :param in_memory: True: read every selected image into memory (through the
        dataset's ``__getitem__`` when it has transforms; images must share one shape
        and lie in [0, 1]); False: lazy; None: the default above.
    :param original_class_ids: False (default): every stream's labels (``targets``,
        the batches' y, int64) are local to the task, 0..c-1 in the order of
        ``groups[k]``. True: they are the original class ids, ``groups[k][j]`` in
        place of local label j (for class-incremental, task-free use: one shared head
        over ``benchmark.n_classes_total`` outputs); the images, their order, the task
        labels, the splits and ``sample_indices`` are the same as with False, and the
        experiences' class lists hold original ids too.
    :param shuffle_repeat_labels: False (default): class ``groups[k][j]`` has local
        label j in every task. True: every task that is not the first of its group in
        the stream relabels its classes by a seeded permutation other than the
        identity (:func:`label_permutations`; the same for its train, validation and
        test data): class ``groups[k][j]`` of experience i has local label
        ``benchmark.label_permutations[i][j]``, so a repeat's classes come in another
        order than those of the group's first task. Images, their order, task labels,
        groups, splits and ``sample_indices`` are those of the default stream; only
        the labels (and the per-class lists of ``task_sizes``, indexed by label)
        change. Local labels only: raises ``ValueError`` with ``original_class_ids``.
    :return: a :class:`MixedSimilarityBenchmark` (an Avalanche ``CLScenario``).
    :raises ValueError: bad groups/sizes, a class with too few images,
        ``n_warm_start`` > K, or ``shuffle_repeat_labels`` with ``original_class_ids``.
    :raises TypeError: a dataset without ``targets``.
    """
    groups = _check_groups(groups)
    if not isinstance(n_splits, (int, np.integer)) or n_splits < 1:
        raise ValueError(f"n_splits must be an int >= 1; got {n_splits!r}")
    n_splits = int(n_splits)
    if not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative int; got {seed!r}")
    seed = int(seed)
    if not 0.0 <= valid_fraction < 1.0:
        raise ValueError(f"valid_fraction must lie in [0, 1); got {valid_fraction}")
    if group_names is not None and len(group_names) != len(groups):
        raise ValueError(
            f"group_names has {len(group_names)} entries; one per group ({len(groups)}) "
            "is expected"
        )
    if not isinstance(shuffle_repeat_labels, bool):
        raise ValueError(f"shuffle_repeat_labels must be a bool, got {shuffle_repeat_labels!r}")
    if shuffle_repeat_labels and original_class_ids:
        raise ValueError(
            "shuffle_repeat_labels=True reorders the local labels 0..c-1 of repeated tasks; "
            "with original_class_ids=True the labels are the dataset's class ids, which have "
            "no order to shuffle. Pass one of the two options, not both"
        )
    order = warm_start_order(len(groups), n_splits, n_warm_start, seed)
    permutations = label_permutations(order, groups, seed, shuffle_repeat_labels)
    n_train = _per_group(train_per_task, groups, "train_per_task", minimum=1)
    n_valid = _per_group(valid_per_task, groups, "valid_per_task")
    n_test = _per_group(test_per_task, groups, "test_per_task", minimum=1)
    names = _names_by_class(train_dataset, class_names)

    train_targets = targets_array(train_dataset)
    test_targets = targets_array(test_dataset)
    train_perms: Dict[int, np.ndarray] = {}
    test_perms: Dict[int, np.ndarray] = {}
    for group in groups:
        for c in group:
            train_perms[c] = _class_indices(train_targets, c, _TRAIN, seed)
            test_perms[c] = _class_indices(test_targets, c, _TEST, seed)
            if len(train_perms[c]) == 0 or len(test_perms[c]) == 0:
                raise ValueError(
                    f"{_class_label(c, names)} has {len(train_perms[c])} training and "
                    f"{len(test_perms[c])} test images; every class of `groups` needs both"
                )

    selections: Dict[Tuple[int, int], Dict[str, List[np.ndarray]]] = {}
    scaled_group: List[bool] = []
    for k, group in enumerate(groups):
        tr, va, scaled_tr = _select_train(
            train_perms, group, k, n_splits, n_train[k], n_valid[k], valid_fraction,
            scale_to_available, names,
        )
        te, scaled_te = _select_test(
            test_perms, group, k, n_splits, n_test[k], scale_to_available, names
        )
        scaled_group.append(scaled_tr or scaled_te)
        for r in range(n_splits):
            selections[(k, r)] = {"train": tr[r], "valid": va[r], "test": te[r]}

    # In memory: gather every selected image once per source dataset, then slice per task.
    sources = {"train": train_dataset, "test": test_dataset}
    with_transforms = train_transform is not None or eval_transform is not None
    memory = {
        name: _uses_memory(dataset, in_memory, with_transforms)
        for name, dataset in sources.items()
    }
    gathered: Dict[str, Tuple[torch.Tensor, float]] = {}
    offsets: Dict[Tuple[str, int], int] = {}
    for source_name, parts in (("train", ("train", "valid")), ("test", ("test",))):
        if not memory[source_name]:
            continue
        chunks = []
        position = 0
        for i, task in enumerate(order):
            for part in parts:
                idx = np.concatenate(selections[task][part]).astype(np.int64)
                offsets[(part, i)] = position
                position += len(idx)
                chunks.append(idx)
        gathered[source_name] = gather_images(sources[source_name], np.concatenate(chunks))

    # The label stored for local label j of group k.
    label_of = [list(group) if original_class_ids else list(range(len(group))) for group in groups]
    datasets: Dict[str, List[TaskAwareClassificationDataset]] = {"train": [], "valid": [], "test": []}
    task_sizes: List[Dict[str, Any]] = []
    sample_indices: List[Dict[str, np.ndarray]] = []
    present: List[List[int]] = []
    for i, task in enumerate(order):
        k, _ = task
        # The label of group position j in this task (label_of[k] unless shuffled).
        task_labels = [label_of[k][label] for label in permutations[i]]
        sizes: Dict[str, Any] = {}
        indices: Dict[str, np.ndarray] = {}
        for part in ("train", "valid", "test"):
            per_class = selections[task][part]
            idx = np.concatenate(per_class).astype(np.int64)
            labels = np.concatenate(
                [np.full(len(p), label, dtype=np.int64) for label, p in zip(task_labels, per_class)]
            )
            source_name = "test" if part == "test" else "train"
            if memory[source_name]:
                images, max_value = gathered[source_name]
                start = offsets[(part, i)]
                data = ImageArrayDataset(
                    images[start:start + len(idx)], labels, max_value=max_value
                )
            else:
                data = DatasetView(sources[source_name], idx, labels)
            transforms = _transform_groups(train_transform, eval_transform, memory[source_name])
            dataset = _task_dataset(data, labels, i, transforms)
            if transforms is not None and part != "train":
                dataset = dataset.eval()
            datasets[part].append(dataset)
            sizes[part] = int(len(idx))
            per_label = [0] * len(per_class)
            for label, p in zip(permutations[i], per_class):
                per_label[label] = int(len(p))
            sizes[f"{part}_per_class"] = per_label
            indices[part] = idx
        sizes["scaled"] = scaled_group[k]
        task_sizes.append(sizes)
        sample_indices.append(indices)
        present.append(
            sorted(label for label, p in zip(task_labels, selections[task]["train"]) if len(p) > 0)
        )
    del gathered

    # Task-aware attributes are set in _decorate (Avalanche's with_task_labels reads
    # them from the data and fails on an empty dataset, e.g. valid_fraction=0).
    scenario = benchmark_from_datasets(
        train=datasets["train"], valid=datasets["valid"], test=datasets["test"]
    )
    streams = [_decorate(s, order, present) for s in scenario.streams.values()]
    group_class_names = (
        [[names.get(c, str(c)) for c in group] for group in groups] if names else None
    )
    return MixedSimilarityBenchmark(
        streams,
        groups=groups,
        class_names=group_class_names,
        group_names=list(map(str, group_names)) if group_names is not None else None,
        n_splits=n_splits,
        n_warm_start=int(n_warm_start),
        seed=seed,
        original_class_ids=bool(original_class_ids),
        shuffle_repeat_labels=shuffle_repeat_labels,
        label_permutations=permutations,
        stream_groups=[k for k, _ in order],
        stream_splits=[r for _, r in order],
        task_sizes=task_sizes,
        sample_indices=sample_indices,
    )


#: The keyword arguments every preset forwards to :func:`mixed_similarity_benchmark`.
_PRESET_STREAM_OPTIONS = (
    "n_splits",
    "seed",
    "n_warm_start",
    "train_per_task",
    "valid_per_task",
    "test_per_task",
    "scale_to_available",
    "train_transform",
    "eval_transform",
    "original_class_ids",
    "shuffle_repeat_labels",
)


_STREAM_OPTIONS_DOC = """\
:param n_splits: splits per class (tasks per group).
:param seed: fixes the splits and the stream order.
:param n_warm_start: leading tasks with pairwise distinct groups.
:param train_per_task: override (int or one per group); default above.
:param valid_per_task: override (int or one per group); default above.
:param test_per_task: override (int or one per group); default above.
:param train_transform: transform group ``"train"`` (e.g. augmentation) on the float32
    [C, H, W] images in [0, 1]; see :func:`mixed_similarity_benchmark`.
:param eval_transform: transform group ``"eval"``, the same way.
:param original_class_ids: True: labels are the original class ids (int64
    ``groups[k][j]``) instead of local 0..c-1, same images; see
    :func:`mixed_similarity_benchmark`.
:param shuffle_repeat_labels: True: every task after the first of its group carries
    its local labels in a seeded other order (``benchmark.label_permutations``), same
    images; not with ``original_class_ids``; see :func:`mixed_similarity_benchmark`.
"""


def _stream_options_doc(preset: Callable) -> Callable:
    """Decorator of the presets: replaces the line ``{stream options}`` of the
    preset's docstring by the descriptions of the stream options it shares with the
    other presets (``n_splits``, ``seed``, ``n_warm_start``, the per-task sizes, the
    transforms, ``original_class_ids`` and ``shuffle_repeat_labels``), indented like
    that line."""
    doc = preset.__doc__ or ""
    match = re.search(r"^( *)\{stream options\}\n", doc, flags=re.MULTILINE)
    if match is None:
        raise ValueError(f"{preset.__name__}'s docstring has no line '{{stream options}}'")
    block = "".join(match.group(1) + line for line in _STREAM_OPTIONS_DOC.splitlines(True))
    preset.__doc__ = doc[:match.start()] + block + doc[match.end():]
    return preset


def _table3_benchmark(
    train_dataset: Any,
    test_dataset: Any,
    groups: Sequence[Sequence[int]],
    images_per_class: Tuple[int, int],
    arguments: Dict[str, Any],
    **extra: Any,
) -> MixedSimilarityBenchmark:
    """A preset's stream: :func:`mixed_similarity_benchmark` with per-task sizes that
    default to the paper's Table 3 rule for a balanced dataset.

    :param train_dataset: the preset's training data (see
        :func:`mixed_similarity_benchmark`).
    :param test_dataset: the preset's test data.
    :param groups: K lists of class ids.
    :param images_per_class: ``(train, test)`` images a class in the full balanced
        dataset (e.g. ``(6000, 1000)`` for Fashion-MNIST), for
        :func:`sizes_from_class_counts`.
    :param arguments: the preset's arguments (its ``locals()``); the entries named in
        ``_PRESET_STREAM_OPTIONS`` are forwarded, and a ``train_per_task``,
        ``valid_per_task`` or ``test_per_task`` of None is replaced by its Table 3
        default.
    :param extra: further keyword arguments of :func:`mixed_similarity_benchmark`
        (e.g. ``group_names``).
    """
    options = {name: arguments[name] for name in _PRESET_STREAM_OPTIONS if name in arguments}
    defaults = sizes_from_class_counts(groups, *images_per_class, options["n_splits"])
    for name, default in zip(("train_per_task", "valid_per_task", "test_per_task"), defaults):
        if options.get(name) is None:
            options[name] = default
    n_splits = options.pop("n_splits")
    return mixed_similarity_benchmark(
        train_dataset, test_dataset, groups, n_splits, **options, **extra
    )


__all__ = [
    "MixedSimilarityBenchmark",
    "label_permutations",
    "mixed_similarity_benchmark",
    "sizes_from_class_counts",
    "warm_start_order",
]
