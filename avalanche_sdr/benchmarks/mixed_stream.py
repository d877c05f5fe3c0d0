"""Mixed similar/dissimilar task streams T_{k,r} (paper Sec. 4, Tables 3-4).

Tasks: the classes of ``groups[k]`` form task family k; the images of each class are
shuffled (seeded) and cut into ``n_splits`` disjoint parts, and task (k, r) holds part r
of every class of group k. Tasks with the same k are *similar* (same label set, same
input distribution); tasks of different groups are *dissimilar*. The T = K * R tasks
are put in a seeded random order whose first ``n_warm_start`` tasks come from pairwise
distinct groups (the warm-start tasks SDR trains without detection).

The result is an Avalanche 0.6.0 benchmark built on the non-deprecated path
(``ClassificationDataset`` with ``targets`` and ``TaskLabels`` ->
``benchmark_from_datasets``, experiences given the ``TaskAware`` and classes-timeline
attributes) with ``train_stream``, ``valid_stream`` and ``test_stream`` of length T.
"""

from copy import copy
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch
from torch.utils.data import DataLoader

from avalanche.benchmarks.scenarios.dataset_scenario import benchmark_from_datasets
from avalanche.benchmarks.scenarios.generic_scenario import (
    CLScenario,
    EagerCLStream,
    ExperienceAttribute,
)
from avalanche.benchmarks.utils.classification_dataset import ClassificationDataset
from avalanche.benchmarks.utils.data_attribute import DataAttribute, TaskLabels
from avalanche.benchmarks.utils.flat_data import ConstantSequence

from .image_arrays import ImageArrayDataset, gather_images, targets_array

PerTask = Optional[Union[int, Sequence[int]]]

# Purposes mixed into the seed so each random draw has its own independent stream.
_ORDER, _TRAIN, _TEST = 0, 1, 2


class MixedSimilarityBenchmark(CLScenario):
    """An Avalanche benchmark of mixed similar/dissimilar tasks T_{k,r}.

    Streams: ``train_stream``, ``valid_stream``, ``test_stream``, each of length T.
    Experience i of every stream holds task ``(stream_groups[i], stream_splits[i])``:

    - ``task_label == i`` and ``task_labels == [i]`` (task-aware: one head per task);
    - labels local to the task, 0..c-1 in the order of ``groups[k]``;
    - ``classes_in_this_experience``: sorted list of the labels present (a list, not a
      set, so ``MultiHeadClassifier.adaptation`` works); ``previous_classes``,
      ``classes_seen_so_far``, ``future_classes``: sorted lists too;
    - ``group`` (k) and ``split`` (r), 0-based, stored as ``ExperienceAttribute`` with
      ``use_in_train=False, use_in_eval=False``: readable on the experience as handed
      out by the stream (logging mode) and on ``exp.logging()``; reading them on
      ``exp.train()`` / ``exp.eval()`` raises ``MaskedAttributeError``;
    - batches ``(x, y, t)``: x float32 [N, C, H, W] in [0, 1], y int64 [N], t int64 [N];
      samples are stored class by class (local label order): shuffle in the loader.

    Benchmark-level description (plain attributes, JSON-safe except ``sample_indices``):

    - ``groups``: list of K lists of original class ids (``groups[k]``);
    - ``class_names``: list of K lists of class names, or None when unknown;
    - ``group_names``: list of K names of the groups (e.g. CIFAR-100 superclasses), or
      None;
    - ``n_splits`` (R), ``n_warm_start``, ``seed``;
    - ``stream_groups`` / ``stream_splits``: list of T ints, k and r at each position;
    - ``task_sizes``: list of T dicts (stream order) with ``train``, ``valid``, ``test``
      (images in the task), ``train_per_class``, ``valid_per_class``,
      ``test_per_class`` (lists in local label order) and ``scaled`` (True when
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
        self.stream_groups: List[int] = description["stream_groups"]
        self.stream_splits: List[int] = description["stream_splits"]
        self.task_sizes: List[Dict[str, Any]] = description["task_sizes"]
        self.sample_indices: List[Dict[str, np.ndarray]] = description["sample_indices"]

    @property
    def n_tasks(self) -> int:
        """T, the number of tasks (length of every stream)."""
        return len(self.stream_groups)


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


def _per_group(value: PerTask, groups: List[List[int]], name: str) -> List[Optional[int]]:
    """Per-class counts for each group from a per-task size (int or one per group)."""
    if value is None:
        return [None] * len(groups)
    if isinstance(value, (int, np.integer)):
        values = [int(value)] * len(groups)
    else:
        values = [int(v) for v in value]
        if len(values) != len(groups):
            raise ValueError(
                f"{name} has {len(values)} entries; one per group ({len(groups)}) "
                "or a single int is expected"
            )
    counts = []
    for k, (total, group) in enumerate(zip(values, groups)):
        if total < 0 or total % len(group) != 0:
            raise ValueError(
                f"{name}={total} for group {k} must be a non-negative multiple of its "
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
    train = [[None] * len(group) for _ in range(n_splits)]
    valid = [[None] * len(group) for _ in range(n_splits)]
    scaled = False
    if n_train is None:
        # All the data: each class cut into n_splits near-equal parts.
        for j, c in enumerate(group):
            parts = np.array_split(perms[c], n_splits)
            for r, part in enumerate(parts):
                nv = n_valid if n_valid is not None else _round_half_up(valid_fraction * len(part))
                if len(part) - nv < 1:
                    raise ValueError(
                        f"{_class_label(c, names)} of group {k} has {len(perms[c])} training "
                        f"images: split {r} holds {len(part)}, too few for {nv} validation "
                        "images plus at least 1 training image"
                    )
                valid[r][j] = part[:nv]
                train[r][j] = part[nv:]
        return train, valid, scaled
    if n_valid is None:
        n_valid = _round_half_up(n_train * valid_fraction / (1.0 - valid_fraction))
    need = n_train + n_valid
    capacity = {c: len(perms[c]) // n_splits for c in group}
    rarest = min(group, key=lambda c: capacity[c])
    if capacity[rarest] < need:
        if not scale:
            raise ValueError(
                f"{_class_label(rarest, names)} of group {k} has {len(perms[rarest])} "
                f"training images; {n_splits} splits x ({n_train} train + {n_valid} "
                f"valid) = {n_splits * need} are needed. Request smaller per-task sizes "
                "or pass scale_to_available=True"
            )
        m = capacity[rarest]
        n_valid = _round_half_up(m * n_valid / need) if need > 0 else 0
        n_train = m - n_valid
        if n_train < 1:
            raise ValueError(
                f"{_class_label(rarest, names)} of group {k} has {len(perms[rarest])} "
                f"training images, too few for {n_splits} splits even after scaling"
            )
        need, scaled = m, True
    for j, c in enumerate(group):
        for r in range(n_splits):
            part = perms[c][r * need:(r + 1) * need]
            valid[r][j] = part[:n_valid]
            train[r][j] = part[n_valid:]
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
    test = [[None] * len(group) for _ in range(n_splits)]
    scaled = False
    if n_test is None:
        for j, c in enumerate(group):
            parts = np.array_split(perms[c], n_splits)
            for r, part in enumerate(parts):
                if len(part) == 0:
                    raise ValueError(
                        f"{_class_label(c, names)} of group {k} has {len(perms[c])} test "
                        f"images, fewer than the {n_splits} splits"
                    )
                test[r][j] = part
        return test, scaled
    capacity = {c: len(perms[c]) // n_splits for c in group}
    rarest = min(group, key=lambda c: capacity[c])
    if capacity[rarest] < n_test:
        if not scale:
            raise ValueError(
                f"{_class_label(rarest, names)} of group {k} has {len(perms[rarest])} test "
                f"images; {n_splits} splits x {n_test} = {n_splits * n_test} are needed. "
                "Request a smaller test_per_task or pass scale_to_available=True"
            )
        n_test, scaled = capacity[rarest], True
        if n_test < 1:
            raise ValueError(
                f"{_class_label(rarest, names)} of group {k} has {len(perms[rarest])} test "
                f"images, fewer than the {n_splits} splits"
            )
    for j, c in enumerate(group):
        for r in range(n_splits):
            test[r][j] = perms[c][r * n_test:(r + 1) * n_test]
    return test, scaled


def _names_by_class(
    dataset: Any, class_names: Optional[Dict[int, str]]
) -> Optional[Dict[int, str]]:
    if class_names is not None:
        return {int(c): str(n) for c, n in class_names.items()}
    classes = getattr(dataset, "classes", None)
    if isinstance(classes, (list, tuple)) and all(isinstance(n, str) for n in classes):
        return {c: n for c, n in enumerate(classes)}
    return None


def _task_dataset(
    images: torch.Tensor, labels: np.ndarray, max_value: float, task_label: int
) -> ClassificationDataset:
    base = ImageArrayDataset(images, labels, max_value=max_value)
    label_list = [int(v) for v in labels]
    return ClassificationDataset(
        [base],
        data_attributes=[
            DataAttribute(label_list, "targets"),
            TaskLabels(ConstantSequence(task_label, len(label_list))),
        ],
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
) -> MixedSimilarityBenchmark:
    """Build a stream of similar and dissimilar tasks T_{k,r} over a classification dataset.

    :param train_dataset: torchvision-style dataset (``targets`` and
        ``dataset[i] = (image, label)``; images PIL, numpy or tensors, 8-bit or float in
        [0, 1]). Source of each task's training and validation images.
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
        ``train_per_task / c`` images (must divide exactly). None: all the class's
        images in the split minus the validation images.
    :param valid_per_task: validation images per task (same forms). None: a
        ``valid_fraction`` share of each class's train+validation images
        (``round(valid_fraction * part)`` for all-data splits, or
        ``round(n_train * valid_fraction / (1 - valid_fraction))`` per class on top of
        a given ``train_per_task``).
    :param test_per_task: test images per task (same forms). None: all the class's
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
    :return: a :class:`MixedSimilarityBenchmark` (an Avalanche ``CLScenario``).
    :raises ValueError: bad groups/sizes, a class with too few images, or
        ``n_warm_start`` > K.
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
    order = warm_start_order(len(groups), n_splits, n_warm_start, seed)
    n_train = _per_group(train_per_task, groups, "train_per_task")
    n_valid = _per_group(valid_per_task, groups, "valid_per_task")
    n_test = _per_group(test_per_task, groups, "test_per_task")
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

    # Gather every selected image once per source dataset, then slice per task.
    sources = {"train": train_dataset, "valid": train_dataset, "test": test_dataset}
    gathered: Dict[str, Tuple[torch.Tensor, float]] = {}
    offsets: Dict[Tuple[str, int], int] = {}
    for source_name, parts in (("train", ("train", "valid")), ("test", ("test",))):
        chunks = []
        position = 0
        for i, task in enumerate(order):
            for part in parts:
                idx = np.concatenate(selections[task][part]).astype(np.int64)
                offsets[(part, i)] = position
                position += len(idx)
                chunks.append(idx)
        gathered[source_name] = gather_images(sources[source_name], np.concatenate(chunks))

    datasets: Dict[str, List[ClassificationDataset]] = {"train": [], "valid": [], "test": []}
    task_sizes: List[Dict[str, Any]] = []
    sample_indices: List[Dict[str, np.ndarray]] = []
    present: List[List[int]] = []
    for i, task in enumerate(order):
        k, _ = task
        sizes: Dict[str, Any] = {}
        indices: Dict[str, np.ndarray] = {}
        for part in ("train", "valid", "test"):
            per_class = selections[task][part]
            idx = np.concatenate(per_class).astype(np.int64)
            labels = np.concatenate(
                [np.full(len(p), j, dtype=np.int64) for j, p in enumerate(per_class)]
            )
            images, max_value = gathered["test" if part == "test" else "train"]
            start = offsets[(part, i)]
            datasets[part].append(
                _task_dataset(images[start:start + len(idx)], labels, max_value, i)
            )
            sizes[part] = int(len(idx))
            sizes[f"{part}_per_class"] = [int(len(p)) for p in per_class]
            indices[part] = idx
        sizes["scaled"] = scaled_group[k]
        task_sizes.append(sizes)
        sample_indices.append(indices)
        present.append([j for j, p in enumerate(selections[task]["train"]) if len(p) > 0])
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
        stream_groups=[k for k, _ in order],
        stream_splits=[r for _, r in order],
        task_sizes=task_sizes,
        sample_indices=sample_indices,
    )


__all__ = [
    "MixedSimilarityBenchmark",
    "mixed_similarity_benchmark",
    "sizes_from_class_counts",
    "warm_start_order",
]
