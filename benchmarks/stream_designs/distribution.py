"""The distribution of stream designs: :func:`draw_design` turns a seed into a design.

A design is a plain, JSON-serialisable dict (no data is read to draw it): the source,
the groups (class sets), every task of the stream in order with its class order, class
counts and balance, the warm-start count, E0's recipe and the seeds of the data
sampling and of training. The distribution, step by step, is :data:`DISTRIBUTION`
(also in docs/results/stream_designs.md); the ground truth is :func:`ground_truth`.
The seed ranges are fixed here, before any run: :data:`VALIDATION_SEEDS` for every
choice, :data:`REPORT_SEEDS` for the report only.

Hand-written: the draw is the definition of the validation set, so it must be
readable line by line against :data:`DISTRIBUTION`; no library draws such streams.
"""
from __future__ import annotations

import math
from collections import Counter
from typing import Any, Dict, List, Sequence, Tuple

import numpy as np

DESIGN_VERSION = 2
"""The version of the distribution; a changed draw changes it (and the committed list). Version 1 was the
draft without the budget of step 9, on which the budget was measured (docs/results/stream_designs.md)."""

VALIDATION_SEEDS: Tuple[int, ...] = tuple(range(0, 30))
"""Designs for every choice (tuning, caps, thresholds): these and no others."""

REPORT_SEEDS: Tuple[int, ...] = tuple(range(1000, 1030))
"""Designs of the report, fixed before any run and never used for a choice."""

NEXT_REPORT_SEEDS: Tuple[int, ...] = tuple(range(2000, 2030))
"""Designs of the next report, fixed (and listed) before any run: the report of a recommended method
chosen after the first report was read. :data:`REPORT_SEEDS` were run with the recommended method of
commit ``fdf806c``; a method changed after that report is reported on these, so that the first
report's outcome cannot have chosen it. Never used for a choice."""

SECOND_VALIDATION_SEEDS: Tuple[int, ...] = tuple(range(30, 60))
"""Designs for choices made after every one of :data:`VALIDATION_SEEDS` had been used (each choice's
rule names the designs it reads), fixed and listed before any run on them. Never reported."""

THIRD_VALIDATION_SEEDS: Tuple[int, ...] = tuple(range(60, 120))
"""Designs for choices made after :data:`SECOND_VALIDATION_SEEDS` had been used too (the paired level and the
confirmation, docs/results/stream_designs/paired_level/rule_fixed_in_advance.md), fixed and listed before any
run on them. Never reported."""

THIRD_REPORT_SEEDS: Tuple[int, ...] = tuple(range(3000, 3060))
"""Designs of the report of a method chosen on :data:`THIRD_VALIDATION_SEEDS`, fixed and listed before any run
on them; every earlier report range has been read. Never used for a choice."""

FOURTH_VALIDATION_SEEDS: Tuple[int, ...] = tuple(range(120, 220))
"""Designs for choices made after :data:`THIRD_VALIDATION_SEEDS` had been used too (the projection's
dimension, docs/results/stream_designs/projection_dim/rule_fixed_in_advance.md), fixed and listed before any
run on them. Never reported."""

FOURTH_REPORT_SEEDS: Tuple[int, ...] = tuple(range(4000, 4100))
"""Designs of the report of a choice made on :data:`FOURTH_VALIDATION_SEEDS` or, that choice having changed
nothing and these designs having never run, on :data:`FIFTH_VALIDATION_SEEDS`; fixed and listed before any run
on them; every earlier report range has been read. Never used for a choice."""

FIFTH_VALIDATION_SEEDS: Tuple[int, ...] = tuple(range(220, 320))
"""Designs for choices made after :data:`FOURTH_VALIDATION_SEEDS` had been used too (the fallback's false-reuse
level, docs/results/stream_designs/fallback_level/rule_fixed_in_advance.md), fixed and listed before any run on
them. Never reported."""

REPORT_RANGES: Tuple[Tuple[int, ...], ...] = (REPORT_SEEDS, NEXT_REPORT_SEEDS, THIRD_REPORT_SEEDS, FOURTH_REPORT_SEEDS)
"""Every report range: the seeds the runner refuses without ``--report-seeds`` (for the report, never for a
choice)."""

SOURCES: Tuple[str, ...] = ("fashion_mnist", "emnist", "digits", "cifar10")
"""The image sources, in turn by seed (whether their files are present plays no part)."""

MIN_CLASSES, MAX_CLASSES = 2, 5
"""Classes of a task (a group's class set)."""

MIN_GROUPS, MAX_GROUPS = 3, 20
"""Groups (distinct class sets) of a design."""

MIN_TIMES_SEEN, MAX_TIMES_SEEN = 1, 5
"""Times a group is seen (its tasks in the stream)."""

MAX_TASKS = 40
"""Tasks of a design at most."""

MAX_TRAIN_IMAGES = 8000
"""Training images of a design at most (the budget of step 9): set on validation designs so that a run of any
of the three methods stays near 5 CPU minutes on one core (docs/results/stream_designs.md, "Cost")."""

MIN_PER_CLASS, MAX_PER_CLASS = 10, 300
"""Training images of one class in one task."""

MAX_RATIO = 9.0
"""Largest / smallest class count of a task at most (90/10 on two classes)."""

BALANCED_SHARE = 0.25
"""Share of groups drawn balanced; the others draw a ratio uniform in [:data:`MIN_RATIO`, :data:`MAX_RATIO`]."""

MIN_RATIO = 1.5
"""Smallest ratio of an unbalanced group (60/40 on two classes)."""

NESTED_SHARE = 0.3
"""Share of groups after the first drawn as a strict subset or superset of an earlier group."""

TEST_PER_CLASS = 100
"""Test images per class of a task (fewer where the source's test pool of the class is smaller)."""

N_WARM_START = 3
"""Warm-start tasks: the stream's first tasks, of pairwise distinct groups (the paper's and README's 3)."""

SIZE_BINS: Tuple[Tuple[str, int, int], ...] = (("10-29", 10, 30), ("30-99", 30, 100), ("100-300", 100, 300))
"""Task size bins by mean training images per class: (name, low, high), low <= mean < high (the last bin
includes 300)."""

E0_RECIPE = {"builder": "small_cnn_backbone", "widths": [32, 64, 64], "epochs": 20, "lr": 2e-3, "batch_size": 32}
"""E0 as the README makes it: ``small_cnn_backbone(in_channels=C)`` pretrained on the warm-start tasks with
``pretrain_backbone(epochs=20, lr=2e-3, batch_size=32)``; ``in_channels`` is added per design."""

# Seed purposes: one generator per purpose, each from SeedSequence([seed, purpose]).
PURPOSE_DESIGN, PURPOSE_DATA, PURPOSE_TRAINING = 0, 1, 2

_EMNIST_TRAIN = (
    4924, 5486, 4941, 4995, 4713, 4565, 4960, 5034, 4847, 4844, 907, 559, 1848, 630, 737, 1306, 369, 494, 2068,
    782, 693, 2878, 1701, 1158, 4020, 1553, 356, 716, 3342, 1397, 2167, 1048, 1082, 769, 1024, 793, 1430, 799,
    1464, 3485, 365, 500, 1316, 1605, 457, 2027, 2553)
_EMNIST_TEST = (
    821, 914, 824, 832, 785, 761, 827, 839, 808, 807, 151, 93, 308, 105, 123, 218, 61, 82, 345, 130, 116, 480,
    283, 193, 670, 259, 59, 119, 557, 233, 361, 175, 180, 128, 171, 132, 238, 133, 244, 581, 61, 83, 219, 267, 76,
    338, 426)

SOURCE_FACTS: Dict[str, Dict[str, Any]] = {
    "fashion_mnist": {"shape": [1, 28, 28], "train": (6000,) * 10, "test": (1000,) * 10},
    "emnist": {"shape": [1, 28, 28], "train": _EMNIST_TRAIN, "test": _EMNIST_TEST},
    "digits": {"shape": [1, 8, 8], "train": (142, 146, 142, 146, 145, 146, 145, 143, 139, 144),
               "test": (36, 36, 35, 37, 36, 36, 36, 36, 35, 36)},
    "cifar10": {"shape": [3, 32, 32], "train": (5000,) * 10, "test": (1000,) * 10},
}
"""Per source: image shape [C, H, W] and the training / test images of each class the builder offers
(Fashion-MNIST and CIFAR-10: their splits; EMNIST: the shared bymerge file's ``train_index`` /
``test_index``; digits: each digit's images less a test fifth, ``floor(0.2 n + 0.5)``, seeded by the design's ``data_seed``). The builder checks the data
it loads against these counts."""

DISTRIBUTION = """\
1. Source: fashion_mnist, emnist, digits, cifar10 in turn, SOURCES[seed mod 4] (any 4 consecutive seeds
   hold each source once).
2. Groups: G uniform in 3..20, each a class set. Group 0, and every later group with probability 0.7:
   c classes, c uniform in 2..5, drawn uniformly without replacement from the source's classes. A later
   group with probability 0.3: nested in an earlier group g drawn uniformly, a strict subset (c uniform in
   2..|g|-1, classes uniform from g) or a strict superset (g plus classes uniform from the others, c uniform
   in |g|+1..5), either with equal chance where both exist. A class set equal to an earlier group's is
   drawn again.
3. Times seen: uniform in 1..5 per group. While the tasks exceed 40, a group seen more than once, drawn
   uniformly, is seen once less.
4. Pools: while a class is in more tasks than its training images allow at 10 each, the group holding it
   that is seen most often (the later on ties) is seen once less, and a group seen 0 times is removed
   (only digits, about 140 training images per class, can reach this).
5. Order: a uniform permutation of the tasks; walking it, the first task of each group not met yet is taken
   until 3 are (the warm-start tasks, pairwise distinct groups), then every other task in permutation order.
6. Balance: per group, balanced with probability 0.25, else a ratio rho (largest / smallest class count)
   uniform in [1.5, 9]; its classes in a uniform order get weights rho^(j/(c-1)), j = 0..c-1. The group's
   occurrences alternate: the first, third and fifth as drawn, the second and fourth flipped (weights in
   the reverse order: the majority class becomes the minority).
7. Sizes: per task, the mean training images per class m, log-uniform in [10, 300]; class j gets
   round(c m w_j / sum w), clipped to [10, 300], then at most 9 times the task's smallest count (the ratio
   ends near rho: below it where clipped, a few per cent either side by rounding; never past 90/10).
8. Pools again: for every class (ascending id) whose tasks ask more training images than it holds, the
   mean m of every task holding it is multiplied by the largest common factor that fits, and its counts
   drawn again as in 7 (at least 10 each: step 4 leaves room for that).
9. Budget: while the stream's training images exceed 8,000, a group seen more than once, drawn uniformly,
   loses its last task in the stream (when every group is seen once: the stream's last task, and its
   group, go); groups are then renumbered in order.
10. Label order: per task, a uniform permutation of its classes (local label j is class order[j]).
11. Test: per task and class, min(100, the class's test images), drawn afresh per task.
Training images of a class are disjoint across tasks; test images may recur across tasks.
E0: small_cnn_backbone(in_channels=C), pretrained on the 3 warm-start tasks (20 epochs, lr 2e-3, batch 32).
Seeds: the draw uses one generator, SeedSequence([seed, 0]); the data sampling's seed (data_seed) and the
training seed (E0's pretraining and every method's run) are the first word of SeedSequence([seed, 1]) and
SeedSequence([seed, 2]), modulo 2**31."""
"""The distribution of :func:`draw_design`, step by step (written in the module docs and the results page)."""


def _rng(seed: int, purpose: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([int(seed), int(purpose)]))


def training_seed(seed: int) -> int:
    """The training seed of design ``seed`` (E0's pretraining and every method's run): a
    non-negative int below 2**31 from ``SeedSequence([seed, PURPOSE_TRAINING])``."""
    return int(np.random.SeedSequence([int(seed), PURPOSE_TRAINING]).generate_state(1)[0] % (2 ** 31))


def size_bin(mean_per_class: float) -> str:
    """The :data:`SIZE_BINS` name of a task with ``mean_per_class`` training images per class.

    :raises ValueError: a mean outside [10, 300].
    """
    for name, low, high in SIZE_BINS:
        if low <= mean_per_class < high or mean_per_class == high == MAX_PER_CLASS:
            return name
    raise ValueError(f"a task of {mean_per_class} training images per class lies outside every size bin "
                     f"{[b[0] for b in SIZE_BINS]}")


def _class_sets(rng: np.random.Generator, n_classes: int, n_groups: int) -> List[List[int]]:
    sets: List[List[int]] = []
    while len(sets) < n_groups:
        candidate = None
        if sets and rng.random() < NESTED_SHARE:
            parent = sets[int(rng.integers(len(sets)))]
            can_sub = len(parent) > MIN_CLASSES
            can_super = len(parent) < MAX_CLASSES and len(parent) < n_classes
            kinds = [k for k, ok in (("subset", can_sub), ("superset", can_super)) if ok]
            if kinds:
                kind = kinds[int(rng.integers(len(kinds)))]
                if kind == "subset":
                    c = int(rng.integers(MIN_CLASSES, len(parent)))
                    candidate = [int(v) for v in rng.choice(parent, size=c, replace=False)]
                else:
                    rest = [v for v in range(n_classes) if v not in parent]
                    c = int(rng.integers(len(parent) + 1, min(MAX_CLASSES, n_classes) + 1))
                    candidate = list(parent) + [int(v) for v in rng.choice(rest, size=c - len(parent), replace=False)]
        if candidate is None:
            c = int(rng.integers(MIN_CLASSES, MAX_CLASSES + 1))
            candidate = [int(v) for v in rng.choice(n_classes, size=c, replace=False)]
        candidate = sorted(candidate)
        if candidate not in sets:
            sets.append(candidate)
    return sets


def _fit_occurrences(times: List[int], sets: List[List[int]], capacity: Sequence[int]) -> Tuple[List[int], List[List[int]]]:
    """Step 4: lower times seen (and drop groups) until every class's pool holds 10 images per task."""
    times, sets = list(times), [list(s) for s in sets]
    while True:
        uses = [0] * len(capacity)
        for s, r in zip(sets, times):
            for v in s:
                uses[v] += r
        over = [v for v in range(len(capacity)) if uses[v] * MIN_PER_CLASS > capacity[v]]
        if not over:
            return times, sets
        holders = [k for k, s in enumerate(sets) if over[0] in s]
        k = max(holders, key=lambda g: (times[g], g))
        times[k] -= 1
        if times[k] == 0:
            del times[k], sets[k]


def _order(rng: np.random.Generator, times: List[int]) -> List[Tuple[int, int]]:
    tasks = [(k, r) for k, n in enumerate(times) for r in range(n)]
    permuted = [tasks[i] for i in rng.permutation(len(tasks))]
    first: Dict[int, int] = {}  # group -> index of its first task in the permutation
    for i, (k, _) in enumerate(permuted):
        first.setdefault(k, i)
    warm = sorted(first.values())[:N_WARM_START]
    # Occurrence numbers follow the stream: the group's r-th task in the stream is occurrence r.
    ordered = [permuted[i] for i in warm] + [t for i, t in enumerate(permuted) if i not in set(warm)]
    seen: Dict[int, int] = {}
    out = []
    for k, _ in ordered:
        out.append((k, seen.get(k, 0)))
        seen[k] = seen.get(k, 0) + 1
    return out


def _counts(mean: float, weights: Sequence[float]) -> List[int]:
    """Steps 7-8: class counts of a task of mean ``mean`` images per class and class weights ``weights``."""
    c, total = len(weights), sum(weights)
    counts = [int(min(MAX_PER_CLASS, max(MIN_PER_CLASS, round(c * mean * w / total)))) for w in weights]
    cap = int(math.floor(MAX_RATIO * min(counts)))  # rounding must not take the ratio past 90/10
    return [min(n, cap) for n in counts]


def _fit_sizes(tasks: List[Dict[str, Any]], capacity: Sequence[int]) -> None:
    """Step 8, in place: scale the mean of every task of an over-asked class (ascending id) by the largest
    common factor that fits (bisection; the counts grow with the mean, so the demand does)."""
    for v in range(len(capacity)):
        holding = [t for t in tasks if v in t["_classes"]]

        def demand(s: float) -> int:
            return sum(_counts(t["_mean"] * s, t["_weights"])[t["_classes"].index(v)] for t in holding)

        if demand(1.0) <= capacity[v]:
            continue
        low, high = 0.0, 1.0
        for _ in range(60):
            mid = (low + high) / 2
            low, high = (mid, high) if demand(mid) <= capacity[v] else (low, mid)
        for t in holding:
            t["_mean"] *= low


def _fit_budget(rng: np.random.Generator, tasks: List[Dict[str, Any]], groups: List[Dict[str, Any]]
                ) -> List[Dict[str, Any]]:
    """Step 9, ``tasks`` in place: drop tasks until the stream's training images are within
    :data:`MAX_TRAIN_IMAGES`; returns the groups left, renumbered in order (tasks follow)."""
    def total() -> int:
        return sum(sum(t["_counts"]) for t in tasks)

    while total() > MAX_TRAIN_IMAGES:
        times = Counter(t["group"] for t in tasks)
        repeated = sorted(k for k, n in times.items() if n > 1)
        if repeated:
            k = repeated[int(rng.integers(len(repeated)))]
            drop = max(i for i, t in enumerate(tasks) if t["group"] == k)
        else:
            drop = len(tasks) - 1  # every group seen once: the stream's last task (never a warm-start one)
        del tasks[drop]
    kept = sorted({t["group"] for t in tasks})
    number = {k: i for i, k in enumerate(kept)}
    times = Counter(t["group"] for t in tasks)
    for t in tasks:
        t["group"] = number[t["group"]]
    return [dict(groups[k], group=number[k], times_seen=times[k]) for k in kept]


def draw_design(seed: int) -> Dict[str, Any]:
    """Draw design ``seed`` from the distribution (:data:`DISTRIBUTION`); no data is read.

    :param seed: a non-negative int.
    :return: the design, a JSON-serialisable dict: ``version``, ``seed``, ``source``, ``image_shape``
        ([C, H, W]), ``groups`` (per group: ``group``, ``classes`` (sorted class ids), ``times_seen``,
        ``balance_ratio`` (1.0: balanced), ``weight_order`` (the classes from the lightest weight to the
        heaviest as drawn)), ``tasks`` (stream order; per task: ``position``, ``group``, ``occurrence``
        (0-based, in stream order), ``classes`` (class ids in local-label order), ``train_per_class``
        (images of each local label), ``test_per_class`` (images of each local label), ``flipped``
        (balance reversed), ``mean_per_class``, ``size_bin``), ``n_warm_start``, ``e0`` (the E0 recipe),
        ``data_seed`` and ``training_seed``.
    :raises ValueError: a seed that is not a non-negative int.
    """
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"a design seed is a non-negative int, got {seed!r}")
    seed = int(seed)
    rng = _rng(seed, PURPOSE_DESIGN)
    source = SOURCES[seed % len(SOURCES)]
    facts = SOURCE_FACTS[source]
    n_classes = len(facts["train"])
    n_groups = int(rng.integers(MIN_GROUPS, MAX_GROUPS + 1))
    sets = _class_sets(rng, n_classes, n_groups)
    times = [int(v) for v in rng.integers(MIN_TIMES_SEEN, MAX_TIMES_SEEN + 1, size=len(sets))]
    while sum(times) > MAX_TASKS:
        above = [k for k, r in enumerate(times) if r > 1]
        times[above[int(rng.integers(len(above)))]] -= 1
    times, sets = _fit_occurrences(times, sets, facts["train"])
    order = _order(rng, times)

    groups = []
    for k, classes in enumerate(sets):
        ratio = 1.0 if rng.random() < BALANCED_SHARE else float(rng.uniform(MIN_RATIO, MAX_RATIO))
        weight_order = [int(v) for v in rng.permutation(classes)]
        groups.append({"group": k, "classes": classes, "times_seen": times[k], "balance_ratio": ratio,
                       "weight_order": weight_order})

    tasks: List[Dict[str, Any]] = []
    for position, (k, r) in enumerate(order):
        group = groups[k]
        c = len(group["classes"])
        flipped = r % 2 == 1 and group["balance_ratio"] > 1.0
        ranks = list(range(c))[::-1] if flipped else list(range(c))
        weights = {v: group["balance_ratio"] ** (rank / (c - 1)) for v, rank in zip(group["weight_order"], ranks)}
        mean = math.exp(rng.uniform(math.log(MIN_PER_CLASS), math.log(MAX_PER_CLASS)))
        classes = list(group["classes"])
        tasks.append({"position": position, "group": k, "occurrence": r, "flipped": flipped,
                      "_classes": classes, "_weights": [weights[v] for v in classes], "_mean": mean})
    _fit_sizes(tasks, facts["train"])
    for task in tasks:
        task["_counts"] = _counts(task.pop("_mean"), task.pop("_weights"))
    groups = _fit_budget(rng, tasks, groups)
    for position, task in enumerate(tasks):
        task["position"] = position
        classes, counts = task.pop("_classes"), task.pop("_counts")
        label_order = [int(v) for v in rng.permutation(len(classes))]
        task["classes"] = [classes[i] for i in label_order]
        task["train_per_class"] = [counts[i] for i in label_order]
        task["test_per_class"] = [min(TEST_PER_CLASS, facts["test"][v]) for v in task["classes"]]
        task["mean_per_class"] = sum(counts) / len(counts)
        task["size_bin"] = size_bin(task["mean_per_class"])

    return {
        "version": DESIGN_VERSION,
        "seed": seed,
        "source": source,
        "image_shape": list(facts["shape"]),
        "groups": groups,
        "tasks": tasks,
        "n_warm_start": N_WARM_START,
        "e0": dict(E0_RECIPE, in_channels=facts["shape"][0]),
        "data_seed": int(np.random.SeedSequence([seed, PURPOSE_DATA]).generate_state(1)[0] % (2 ** 31)),
        "training_seed": training_seed(seed),
    }


_DESIGN_KEYS = ("version", "seed", "source", "image_shape", "groups", "tasks", "n_warm_start", "e0", "data_seed",
                "training_seed")
_TASK_KEYS = ("position", "group", "occurrence", "classes", "train_per_class", "test_per_class", "flipped",
              "mean_per_class", "size_bin")


def check_design(design: Dict[str, Any]) -> None:
    """Check that ``design`` is consistent (a drawn one always is; a hand-written one may not be).

    :raises ValueError: a missing key, an unknown source, a class id outside the source, a task whose class
        set is not its group's, a class listed twice in a task, a count list of another length than the
        classes or a training count below 1, group class sets that repeat, positions or occurrences out of
        order, or warm-start tasks of the same group; the message says which.
    """
    missing = [k for k in _DESIGN_KEYS if k not in design]
    if missing:
        raise ValueError(f"a design needs the keys {list(_DESIGN_KEYS)}; missing {missing}")
    if design["source"] not in SOURCE_FACTS:
        raise ValueError(f"unknown source {design['source']!r}; the sources are {list(SOURCES)}")
    n_classes = len(SOURCE_FACTS[design["source"]]["train"])
    sets = [tuple(g["classes"]) for g in design["groups"]]
    if len(set(sets)) != len(sets) or any(list(s) != sorted(set(s)) for s in sets):
        raise ValueError(f"group class sets must be sorted, without repeated classes, and pairwise distinct: {sets}")
    if any(g["group"] != k for k, g in enumerate(design["groups"])):
        raise ValueError("groups must be numbered 0..G-1 in order")
    times: Dict[int, int] = {}
    for i, t in enumerate(design["tasks"]):
        absent = [k for k in _TASK_KEYS if k not in t]
        if absent:
            raise ValueError(f"task {i} lacks {absent}")
        where = f"task {i}"
        if t["position"] != i:
            raise ValueError(f"{where} has position {t['position']}; tasks are listed in stream order")
        if not 0 <= t["group"] < len(sets) or tuple(sorted(t["classes"])) != sets[t["group"]]:
            raise ValueError(f"{where}: classes {t['classes']} are not the class set of its group {t['group']}")
        if any(not 0 <= v < n_classes for v in t["classes"]) or len(set(t["classes"])) != len(t["classes"]):
            raise ValueError(f"{where}: classes {t['classes']} must be distinct ids of the source's {n_classes}")
        if (len(t["train_per_class"]) != len(t["classes"]) or len(t["test_per_class"]) != len(t["classes"])
                or min(t["train_per_class"]) < 1 or min(t["test_per_class"]) < 1):
            raise ValueError(f"{where}: one train and one test count (>= 1) per class expected")
        if t["occurrence"] != times.get(t["group"], 0):
            raise ValueError(f"{where}: occurrence {t['occurrence']}, expected {times.get(t['group'], 0)} "
                             "(the group's tasks counted in stream order)")
        times[t["group"]] = t["occurrence"] + 1
    warm = [t["group"] for t in design["tasks"][:design["n_warm_start"]]]
    if len(set(warm)) != len(warm) or len(warm) != design["n_warm_start"]:
        raise ValueError(f"the {design['n_warm_start']} warm-start tasks need pairwise distinct groups; got {warm}")


def ground_truth(design: Dict[str, Any]) -> List[int]:
    """The ground-truth group of every task, in stream order.

    A task repeats group g iff its class set equals g's (label order and class balance may differ); a task
    whose class set is a strict subset or superset of another's is of another group (reusing that group's
    entry is Incorrect). Groups are the design's ``groups``, whose class sets are pairwise distinct.
    """
    by_set = {tuple(g["classes"]): g["group"] for g in design["groups"]}
    return [by_set[tuple(sorted(t["classes"]))] for t in design["tasks"]]


def nested_tasks(design: Dict[str, Any]) -> List[int]:
    """Positions of the tasks whose class set is a strict subset or superset of an earlier task's."""
    out, earlier = [], []
    for t in design["tasks"]:
        mine = set(t["classes"])
        if any(mine < other or mine > other for other in earlier):
            out.append(t["position"])
        earlier.append(mine)
    return out


def repeat_features(design: Dict[str, Any]) -> Dict[str, int]:
    """Counts of the design's repeats (tasks after the first of their group): ``repeats``, ``flipped``
    (class balance reversed against the group's first task) and ``permuted`` (classes in another local-label
    order than the group's first task)."""
    first: Dict[int, Dict[str, Any]] = {}
    counts = {"repeats": 0, "flipped": 0, "permuted": 0}
    for t in design["tasks"]:
        if t["group"] not in first:
            first[t["group"]] = t
            continue
        counts["repeats"] += 1
        counts["flipped"] += int(t["flipped"] != first[t["group"]]["flipped"])
        counts["permuted"] += int(t["classes"] != first[t["group"]]["classes"])
    return counts


def summary(design: Dict[str, Any]) -> Dict[str, Any]:
    """One line's worth of a design: ``seed``, ``source``, ``groups``, ``tasks``, ``classes`` (min, max per
    task), ``per_class`` (min, max training images of a class in a task), ``bins`` (tasks per size bin),
    ``nested`` (tasks nested in an earlier task's class set), ``train_images`` (the stream's training
    images) and the counts of :func:`repeat_features`."""
    tasks = design["tasks"]
    per_class = [n for t in tasks for n in t["train_per_class"]]
    sizes = [len(t["classes"]) for t in tasks]
    bins = {name: sum(t["size_bin"] == name for t in tasks) for name, _, _ in SIZE_BINS}
    return {"seed": design["seed"], "source": design["source"], "groups": len(design["groups"]),
            "tasks": len(tasks), "classes": (min(sizes), max(sizes)), "per_class": (min(per_class), max(per_class)),
            "bins": bins, "nested": len(nested_tasks(design)), "train_images": sum(per_class),
            **repeat_features(design)}


__all__ = [
    "DESIGN_VERSION", "DISTRIBUTION", "E0_RECIPE", "MAX_CLASSES", "MAX_GROUPS", "MAX_PER_CLASS", "MAX_RATIO",
    "MAX_TASKS", "MAX_TIMES_SEEN", "MAX_TRAIN_IMAGES", "MIN_CLASSES", "MIN_GROUPS", "MIN_PER_CLASS", "MIN_RATIO", "MIN_TIMES_SEEN",
    "FIFTH_VALIDATION_SEEDS", "FOURTH_REPORT_SEEDS", "FOURTH_VALIDATION_SEEDS", "NEXT_REPORT_SEEDS", "N_WARM_START", "REPORT_RANGES",
    "REPORT_SEEDS", "SECOND_VALIDATION_SEEDS", "THIRD_REPORT_SEEDS", "THIRD_VALIDATION_SEEDS",
    "SIZE_BINS", "SOURCES", "SOURCE_FACTS", "TEST_PER_CLASS", "VALIDATION_SEEDS",
    "check_design", "draw_design", "ground_truth", "nested_tasks", "repeat_features", "size_bin", "summary", "training_seed",
]
