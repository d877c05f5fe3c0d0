"""A label-aware repeat test with a level fixed in advance (beyond the paper).

SDR must decide, before training, whether a new task t repeats the task that created
a repository entry e: for every class j, t's class-j inputs and e's class-j inputs
come from the same distribution. This module tests exactly that, class by class, on
a seeded random projection of E0's features against reference features each entry
stores per class (:func:`hotelling_pvalue` or :func:`energy_pvalue`), combines the
classes by Bonferroni, keeps the best candidate when its p-value reaches a level
``alpha`` chosen before any run, and declares the task new when a power check on
decoy tasks shows the test could not have told the entry apart from different data.
With ``match_classes=True`` a repeat whose classes come in another order is matched
too (:func:`bottleneck_matching`), at the same level, and the power check tests the
chosen pairing as the unmatched rule tests the identity. An entry of a warm-start task
on whose images E0 was pretrained takes its reference from images left out of that
pretraining (:class:`ReferenceHoldout`): features of E0's own training images are not
distributed like fresh ones. Why: the paper's relative votes always find a nearest
entry; this rule's false-new rate is ``alpha`` by construction.

The steps, the validity argument for class matching and the costs: docs/method.rst,
section "The two-sample repeat test, step by step"; evidence: docs/results/detection.md.
"""
from __future__ import annotations

import math
import sys
import textwrap
import time
import warnings
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import torch
from scipy import stats
from scipy.optimize import linear_sum_assignment
from torch import Tensor

from avalanche_sdr._checks import check_int
from avalanche_sdr._draws import subsample, task_generator
from avalanche_sdr.detection.base import FeatureRuleDetector
from avalanche_sdr.detection.decision import DetectionRecord
from avalanche_sdr.detection.level import Level, make_level
from avalanche_sdr.models.task_data import TaskData

TESTS = ("hotelling", "energy")
"""Per-class two-sample tests of :class:`TwoSampleDetector`."""

FEATURE_SPACES = ("e0", "entry")
"""Feature spaces of :class:`TwoSampleSettings`: E0's, or each candidate entry's own encoder."""

PROJECTION_SEED = 20221031
"""Seed of the fixed random projection (a constant: references depend on it)."""


@dataclass(frozen=True)
class TwoSampleSettings:
    """The settings of the two-sample rule, fixed before any run.

    :param alpha: level of the repeat test (false-new rate of a true repeat at most
        ``alpha``, Bonferroni over classes): a number (the same level at every task
        size; 0.01, fixed in advance), or a :class:`~avalanche_sdr.detection.level.Level`
        or its name in :data:`~avalanche_sdr.detection.level.LEVELS` (``"by_size"``: 1 %
        up to 40 images a class, 0.01 % from 100, fixed in advance:
        docs/results/detection/level/alpha_rule_fixed_in_advance.md; ``"by_paired_power"``:
        the same, raised where the entry's reference is too small for its power), stored as the
        object. :meth:`level` gives the level of a task.
    :param min_power: least estimated power against known-distinct decoys for a
        reuse; below it the task is new. 0.9, fixed in advance (the conventional
        beta = 0.1).
    :param test: ``"hotelling"`` or ``"energy"``.
    :param dim: dimension of the random projection of E0's features.
    :param reference_per_class: reference images kept per class of an entry.
    :param max_per_class: images per class of a new task used by the test (a seeded
        subsample above it; bounds the cost of tasks of thousands of images).
    :param n_decoys: decoy tasks of the power check.
    :param n_permutations: permutations of the energy test (p-value resolution
        1 / (n_permutations + 1) must be below ``alpha / c``).
    :param class_count_filter: compare only with entries of the same class count
        (recorded as :attr:`~avalanche_sdr.detection.DetectionRecord.class_count_filter`).
    :param feature_space: ``"e0"`` (default): E0's frozen features, shared by every
        entry (one forward pass per task; references stored when an entry is
        created); ``"entry"``: each candidate's own encoder E_e (one forward pass per
        candidate; references stored after the entry's training; decoys only from the
        candidate's other classes, the only references in the same space).
    :param seed: seed of the private RNGs (subsamples, decoys, permutations); each
        task mixes its task id in, so decisions do not depend on the stream's past
        RNG use.
    :param match_classes: ``False`` (default, every measured result of the project):
        new class j is tested against the entry's class j only. ``True``: the classes
        of a new task may repeat the entry's in another order; each candidate's
        combined p-value is maximised over the class matchings
        (:func:`bottleneck_matching`, module doc step 7: still a level-``alpha`` test),
        the power check tests the chosen matching as a fixed pairing (the power the
        unmatched test has on the same task, step 7), and a reuse records the matching
        as ``class_permutation``. Costs c^2 per-class tests per candidate instead of c.
    """

    alpha: Union[float, Level] = 0.01
    min_power: float = 0.9
    test: str = "hotelling"
    dim: int = 16
    reference_per_class: int = 100
    max_per_class: int = 500
    n_decoys: int = 32
    n_permutations: int = 999
    class_count_filter: bool = True
    feature_space: str = "e0"
    seed: int = 0
    match_classes: bool = False

    def __post_init__(self):
        if not isinstance(self.class_count_filter, bool):
            raise ValueError(f"class_count_filter must be a bool, got {self.class_count_filter!r}")
        if isinstance(self.alpha, (str, Level)):
            object.__setattr__(self, "alpha", make_level(self.alpha))
        elif isinstance(self.alpha, bool) or not isinstance(self.alpha, (int, float)) or not 0.0 < self.alpha < 1.0:
            raise ValueError(f"alpha must lie in (0, 1), or be a Level or a level's name, got {self.alpha!r}")
        if not 0.0 <= self.min_power <= 1.0:
            raise ValueError(f"min_power must lie in [0, 1], got {self.min_power}")
        if self.feature_space not in FEATURE_SPACES:
            raise ValueError(f"feature_space must be one of {FEATURE_SPACES}, got {self.feature_space!r}")
        if not isinstance(self.match_classes, bool):
            raise ValueError(f"match_classes must be a bool (True or False), got {self.match_classes!r}")
        if self.test not in TESTS:
            raise ValueError(f"test must be one of {TESTS}, got {self.test!r}")
        for name in ("dim", "reference_per_class", "max_per_class", "n_decoys", "n_permutations"):
            check_int(getattr(self, name), name)
        if self.reference_per_class < 2 or self.max_per_class < 2:
            raise ValueError("reference_per_class and max_per_class must be >= 2")

    def level(self, per_class: int, reference_per_class: Optional[int] = None, classes: Optional[int] = None) -> float:
        """The level of the test for a task whose smallest class has ``per_class`` images
        (``alpha`` itself when it is a number); with ``reference_per_class`` (the smallest
        stored reference class of the ``classes``-class entry tested), the level of that
        pairing in this rule's ``dim`` (:meth:`~avalanche_sdr.detection.level.Level.for_test`:
        the same unless ``alpha`` is a :class:`~avalanche_sdr.detection.level.LevelByPairedPower`)."""
        if not isinstance(self.alpha, Level):
            return float(self.alpha)
        if reference_per_class is None:
            return self.alpha.at(per_class)
        if classes is None:
            raise ValueError("the level of a pairing needs the task's number of classes (Bonferroni over them): "
                             "pass classes= with reference_per_class=")
        return self.alpha.for_test(per_class, reference_per_class, classes, self.dim)

    def to_dict(self) -> Dict[str, object]:
        """JSON-safe dict of the settings (a :class:`~avalanche_sdr.detection.level.Level`
        ``alpha`` as its ``to_dict()``)."""
        out = dict(self.__dict__)
        if isinstance(self.alpha, Level):
            out["alpha"] = self.alpha.to_dict()
        return out


DEFAULT_TWO_SAMPLE = TwoSampleSettings()
"""The settings every run of the table used (fixed before any harness run)."""


# ---------------------------------------------------------------------- tests


def random_projection(feature_dim: int, dim: int, seed: int = PROJECTION_SEED) -> Tensor:
    """A fixed [feature_dim, min(dim, feature_dim)] float64 matrix with orthonormal columns.

    QR of a seeded Gaussian matrix (private generator; the global RNG is untouched).
    """
    k = min(int(dim), int(feature_dim))
    g = torch.Generator().manual_seed(int(seed))
    gaussian = torch.randn(int(feature_dim), k, generator=g, dtype=torch.float64)
    q, r = torch.linalg.qr(gaussian)
    return q * torch.sign(torch.diagonal(r))  # unique: positive diagonal of R


def _check_pair(x: Tensor, ref: Tensor) -> None:
    if x.dim() != 2 or ref.dim() != 2 or x.shape[1] != ref.shape[1]:
        raise ValueError(f"two-sample tests take [n, d] and [m, d] matrices, got {tuple(x.shape)} and {tuple(ref.shape)}")
    if x.shape[0] < 1 or ref.shape[0] < 1 or x.shape[0] + ref.shape[0] < 3:
        raise ValueError(f"need >= 1 sample on each side and >= 3 in all, got {x.shape[0]} and {ref.shape[0]}")
    if not (torch.isfinite(x).all() and torch.isfinite(ref).all()):
        raise ValueError("two-sample test inputs contain NaN or Inf")


def hotelling_pvalue(x: Tensor, ref: Tensor, rank_tol: float = 1e-9) -> float:
    """p-value of Hotelling's two-sample T-squared test of equal means.

    T^2 = n m / (n + m) * (mean_x - mean_ref)^T S^-1 (mean_x - mean_ref) with the
    pooled covariance S; under H0 (same Gaussian, any covariance)
    (n + m - k - 1) / (k (n + m - 2)) T^2 ~ F(k, n + m - k - 1).

    Singular covariances are handled in two data-independent or mean-independent
    steps: with fewer samples than dimensions (``n + m - 2 < d``), only the first
    ``n + m - 3`` coordinates are used (the coordinates of the fixed random projection
    are exchangeable, so this is a fixed choice that keeps the F law exact); features
    that are collinear in the data (e.g. dead ReLU units) are then dropped by keeping
    S's eigen-directions with eigenvalues above ``rank_tol`` times the largest (k is
    that rank; a conservative choice when it removes a direction).

    :param x: [n, d] new samples (n >= 1).
    :param ref: [m, d] reference samples (m >= 2).
    :return: p in [0, 1] (1.0 when S is zero: no spread, nothing to test).
    """
    _check_pair(x, ref)
    n, m = x.shape[0], ref.shape[0]
    if n + m - 3 < 1:
        return 1.0  # one degree of freedom for the covariance: nothing can be tested
    x, ref = x.double()[:, : n + m - 3], ref.double()[:, : n + m - 3]
    diff = x.mean(0) - ref.mean(0)
    scatter = (x - x.mean(0)).T @ (x - x.mean(0)) + (ref - ref.mean(0)).T @ (ref - ref.mean(0))
    pooled = scatter / (n + m - 2)
    evals, evecs = torch.linalg.eigh(pooled)
    top = float(evals[-1])
    if not top > 0.0:
        return 1.0
    k = int((evals > rank_tol * top).sum())
    evals, evecs = evals[-k:], evecs[:, -k:]
    z = evecs.T @ diff
    t2 = (n * m / (n + m)) * float((z * z / evals).sum())
    f = (n + m - k - 1) / (k * (n + m - 2)) * t2
    return float(stats.f.sf(f, k, n + m - k - 1))


def energy_pvalue(x: Tensor, ref: Tensor, n_permutations: int, generator: torch.Generator,
                  chunk: int = 256) -> float:
    """Permutation p-value of the energy distance between two samples.

    E = 2 E|X - Y| - E|X - X'| - E|Y - Y'| (Szekely & Rizzo), Euclidean distances;
    p = (1 + #{E_perm >= E_obs}) / (n_permutations + 1): an exact level for any
    distribution under exchangeability.

    :param x: [n, d] new samples; :param ref: [m, d] reference samples.
    :param n_permutations: random relabellings (drawn from ``generator``).
    """
    _check_pair(x, ref)
    z = torch.cat([x, ref]).double()
    n, total = x.shape[0], z.shape[0]
    m = total - n
    dist = torch.cdist(z, z)
    dist_sum = dist.sum()

    def statistic(members: Tensor) -> Tensor:  # members: [B, N] 0/1 float64, n ones per row
        within = (members @ dist) * members
        s_xx = within.sum(1)
        s_xy = ((members @ dist) * (1 - members)).sum(1)
        s_yy = dist_sum - 2 * s_xy - s_xx
        return 2 * s_xy / (n * m) - s_xx / (n * n) - s_yy / (m * m)

    observed = statistic(torch.cat([torch.ones(n), torch.zeros(m)]).double()[None])[0]
    exceed = 0
    done = 0
    while done < n_permutations:
        b = min(chunk, n_permutations - done)
        order = torch.argsort(torch.rand(b, total, generator=generator, dtype=torch.float64), dim=1)
        members = (order < n).double()
        exceed += int((statistic(members) >= observed - 1e-12 * abs(float(observed))).sum())
        done += b
    return (1 + exceed) / (n_permutations + 1)


def smallest_class(references: Sequence[Tensor]) -> int:
    """Vectors in the smallest of an entry's stored reference classes (at least 1), the
    ``reference_per_class`` of :meth:`TwoSampleSettings.level`."""
    return max(1, min((len(r) for r in references), default=1))


def bonferroni(pvalues: Sequence[float]) -> float:
    """``min(1, c * min p)``: a valid p-value for "every null holds" from c p-values."""
    if not pvalues:
        raise ValueError("bonferroni needs at least one p-value")
    return min(1.0, len(pvalues) * min(pvalues))


def reference_halves(rows: Tensor, seed: int, key: Tuple[int, int], purpose: int) -> Tuple[Tensor, Tensor]:
    """A fixed random split of one stored class into two halves, the same on every call.

    :param rows: [n, d] the class's stored reference rows.
    :param seed: the rule's seed; ``key``: ``(entry, class)`` of the rows; ``purpose``: the
        caller's :func:`~avalanche_sdr._draws.task_generator` purpose.
    :return: ``(first [n // 2, d], second [n - n // 2, d])``.
    """
    g = task_generator(seed, key[0] * 1009 + key[1], purpose)
    order = torch.randperm(len(rows), generator=g)
    half = len(rows) // 2
    return rows[order[:half]], rows[order[half:]]


# ---------------------------------------------------------------------- class matching


def _has_perfect_matching(allowed: np.ndarray) -> bool:
    """Whether the bipartite graph of the [c, c] bool matrix ``allowed`` (row k may be
    paired with column j) pairs every row with its own column (maximum matching of
    size c, by ``linear_sum_assignment`` on the 0/1 matrix)."""
    rows, cols = linear_sum_assignment(allowed.astype(np.float64), maximize=True)
    return bool(allowed[rows, cols].all())


def bottleneck_matching(pvalues) -> Tuple[List[int], float]:
    """The class matching that maximises the Bonferroni-combined p-value.

    Over the c! permutations sigma, maximises ``bonferroni([P[k, sigma[k]] for k])`` =
    ``min(1, c * min_k P[k, sigma[k]])``, a bottleneck assignment, solved exactly: a
    binary search over the distinct values of ``min(1, c * P)`` for the largest
    threshold whose 0/1 matrix ``min(1, c * P) >= threshold`` holds a perfect matching
    (``scipy.optimize.linear_sum_assignment``). Among the permutations that reach the
    maximum: the identity when it is one; otherwise the one with the largest sum of
    ``log P[k, sigma[k]]`` (``linear_sum_assignment`` restricted to the pairs that reach
    the maximum: deterministic). O(c^3 log c).

    :param pvalues: [c, c] p-values (array-like of floats in [0, 1], c >= 1):
        ``pvalues[k][j]`` tests "new class k repeats the entry's class j".
    :return: ``(sigma, combined)``: ``sigma`` a list of c ints, a permutation of
        0..c-1, ``sigma[k]`` the entry class matched to new class k; ``combined`` the
        largest combined p-value, equal to ``bonferroni`` of the matched p-values.
    :raises ValueError: if ``pvalues`` is not a square matrix of numbers in [0, 1].
    """
    p = np.asarray(pvalues, dtype=np.float64)
    if p.ndim != 2 or p.shape[0] != p.shape[1] or p.shape[0] < 1:
        raise ValueError(f"bottleneck_matching takes a [c, c] matrix of p-values (c >= 1), got shape {p.shape}")
    if not (np.all(p >= 0.0) and np.all(p <= 1.0)):  # also False for NaN
        raise ValueError(f"p-values must lie in [0, 1], got {p.tolist()}")
    c = p.shape[0]
    contribution = np.minimum(1.0, c * p)  # bonferroni of a matching = its smallest entry here
    levels = np.unique(contribution)  # ascending; the smallest is always reached
    lo, hi = 0, len(levels) - 1
    while lo < hi:  # invariant: levels[lo] is reached by some matching, levels[hi + 1:] by none
        mid = (lo + hi + 1) // 2
        if _has_perfect_matching(contribution >= levels[mid]):
            lo = mid
        else:
            hi = mid - 1
    best = float(levels[lo])
    identity = list(range(c))
    if float(np.diagonal(contribution).min()) >= best:
        return identity, best
    allowed = contribution >= best
    cost = -np.log(np.maximum(p, np.finfo(np.float64).tiny))  # <= 708.4 each
    rows, cols = linear_sum_assignment(np.where(allowed, cost, 1e6))  # 1e6 > any c * 708.4: never taken
    sigma = [int(j) for j in cols[np.argsort(rows)]]
    if not allowed[np.arange(c), sigma].all():  # pragma: no cover - a perfect matching exists at `best`
        raise RuntimeError("bottleneck_matching: the tie-break left the optimal matchings")
    return sigma, best


# ---------------------------------------------------------------------- detector


_SUBSAMPLE, _REFERENCE, _DECOY, _PERMUTE, _HOLDOUT = range(5)

MIN_HELD_OUT_PER_CLASS = 2
"""Least held-out images per class of a :class:`ReferenceHoldout` (a reference of one
image has no covariance)."""


@dataclass(frozen=True, eq=False)
class ReferenceHoldout:
    """Training images of the warm-start tasks left out of E0's pretraining, to be their
    entries' test references.

    E0 pretrained on a warm-start task's training images maps them differently from
    fresh images of the same classes, so they are no valid reference for a two-sample
    test (docs/results/detection.md, "Warm-start references"). Build one with
    :meth:`draw` (or :func:`avalanche_sdr.training.hold_out_references` from the
    experiences), pass it to :func:`~avalanche_sdr.training.pretrain_backbone`
    (``holdout=``), which trains on the other rows only, and to
    :class:`TwoSampleDetector` (``reference_holdout=``), which stores the entry of each
    of these tasks from its held-out rows only.

    :param share: fraction of each class's images held out, in (0, 1).
    :param seed: seed of the draw (with the task label: :func:`~avalanche_sdr._draws.task_generator`).
    :param rows: task label -> sorted int64 [k] row indices held out, into the task's
        training data in the order :func:`~avalanche_sdr.training.read_task_data` reads it.
    :param sizes: task label -> number of training images of the task (checked on use).
    """

    share: float
    seed: int
    rows: Mapping[int, Tensor]
    sizes: Mapping[int, int]

    @classmethod
    def draw(cls, labels: Mapping[int, Tensor], share: float, seed: int = 0) -> "ReferenceHoldout":
        """Hold out ``round(share * n_j)`` of the ``n_j`` images of every class j of every task.

        :param labels: task label -> int64 [n] class labels of its training images (any
            class ids), in reading order.
        :param share: fraction held out, in (0, 1).
        :param seed: non-negative int.
        :raises ValueError: a share outside (0, 1), no task, or a class that would keep
            fewer than :data:`MIN_HELD_OUT_PER_CLASS` held-out images or no training image.
        """
        if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0.0 < float(share) < 1.0:
            raise ValueError(f"the held-out share must lie in (0, 1), got {share!r} (e.g. 0.25)")
        check_int(seed, "seed", minimum=0)
        if not labels:
            raise ValueError("a reference holdout needs at least one warm-start task")
        rows, sizes = {}, {}
        for task, y in labels.items():
            y = torch.as_tensor(y)
            if y.dim() != 1 or y.numel() == 0:
                raise ValueError(f"task {task}: labels must be a non-empty 1-D tensor, got shape {tuple(y.shape)}")
            g = task_generator(seed, int(task), _HOLDOUT)
            held = []
            for cls_id in torch.unique(y).tolist():
                idx = torch.nonzero(y == cls_id).flatten()
                k = int(round(float(share) * len(idx)))
                if k < MIN_HELD_OUT_PER_CLASS or len(idx) - k < 1:
                    raise ValueError(
                        f"task {task}, class {cls_id}: {len(idx)} images cannot give {MIN_HELD_OUT_PER_CLASS} or more "
                        f"held-out references and keep one for pretraining at share {share} (held out: {k}); "
                        "raise the share, or give the task more images")
                held.append(idx[subsample(len(idx), k, g)])
            rows[int(task)] = torch.sort(torch.cat(held)).values
            sizes[int(task)] = int(y.numel())
        return cls(float(share), int(seed), rows, sizes)

    def _check(self, task: int, n: int) -> None:
        if task not in self.rows:
            raise KeyError(f"task {task} has no held-out rows; held-out tasks: {sorted(self.rows)}")
        if int(n) != self.sizes[task]:
            raise ValueError(f"task {task} has {n} training images, but its holdout was drawn for "
                             f"{self.sizes[task]}: draw the holdout from the same experiences")

    def held_out(self, task: int, n: int) -> Tensor:
        """Sorted int64 row indices of task ``task``'s held-out images (its ``n`` training
        images must be those the holdout was drawn for)."""
        self._check(task, n)
        return self.rows[task]

    def kept(self, task: int, n: int) -> Tensor:
        """Sorted int64 row indices of the images of task ``task`` that pretraining may use."""
        self._check(task, n)
        keep = torch.ones(n, dtype=torch.bool)
        keep[self.rows[task]] = False
        return torch.nonzero(keep).flatten()

    def to_dict(self) -> Dict[str, object]:
        """JSON-safe summary: share, seed, tasks and their held-out counts."""
        return {"share": self.share, "seed": self.seed,
                "held_out": {str(t): int(len(r)) for t, r in sorted(self.rows.items())}}



DEFAULT_HOLDOUT_SHARE = 0.5
"""The share of each warm-start class that :func:`~avalanche_sdr.training.pretrain_backbone`
holds out by default: the share the level study chose on its validation seeds
(docs/results/detection.md, "Warm-start references")."""

PRETRAINING_RECORD = "sdr_pretraining"
"""The attribute :func:`~avalanche_sdr.training.pretrain_backbone` sets on the backbone it
trains: a :class:`PretrainingRecord` (read with :func:`pretraining_record`)."""


class ReferenceWarning(UserWarning):
    """The two-sample rule cannot tell whether its warm-start references hold its level
    (E0 carries no record of its pretraining, or was pretrained on every image of the
    warm-start tasks). The message says what the test then assumes and how to fix it;
    ``warnings.filterwarnings("ignore", category=ReferenceWarning)`` silences it where E0
    saw none of the stream (e.g. ImageNet weights)."""


@dataclass(frozen=True, eq=False)
class PretrainingRecord:
    """What a backbone was pretrained on, recorded by
    :func:`~avalanche_sdr.training.pretrain_backbone` on the backbone it trains
    (attribute :data:`PRETRAINING_RECORD`). A deep copy of the backbone carries it (SDR's
    repository keeps its own copy of E0), a ``state_dict`` does not: save
    :meth:`to_tensors` beside it and set the attribute again from :meth:`from_tensors`.

    :param tasks: task labels of the warm-start experiences the backbone was trained on
        (empty: none of the stream's).
    :param holdout: the images of those tasks left out of its training
        (:class:`ReferenceHoldout`), or ``None``: it was trained on every image.
    :raises ValueError: a holdout drawn for other tasks than ``tasks``.
    """

    tasks: Tuple[int, ...]
    holdout: Optional[ReferenceHoldout] = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "tasks", tuple(sorted(int(t) for t in self.tasks)))
        if self.holdout is not None:
            if not isinstance(self.holdout, ReferenceHoldout):
                raise TypeError(f"holdout must be a ReferenceHoldout or None, got {type(self.holdout).__name__}")
            if sorted(self.holdout.rows) != list(self.tasks):
                raise ValueError(f"the holdout was drawn for tasks {sorted(self.holdout.rows)}, the record's tasks "
                                 f"are {list(self.tasks)}")

    def then(self, later: "PretrainingRecord") -> "PretrainingRecord":
        """The record of a backbone trained as this record says, then as ``later`` says.

        ``later`` itself when this record names no task or is the same record (the same
        tasks and held-out rows); otherwise the union of the tasks with no holdout: a
        held-out image of one training may have been trained on by the other, so no
        image is known to be unseen (the two-sample rule then warns,
        :class:`ReferenceWarning`).
        """
        if not self.tasks or _same_record(self, later):
            return later
        return PretrainingRecord(tuple(set(self.tasks) | set(later.tasks)), None)

    def to_dict(self) -> Dict[str, object]:
        """JSON-safe summary: the tasks and the holdout's :meth:`ReferenceHoldout.to_dict` (or ``None``)."""
        return {"tasks": list(self.tasks), "holdout": None if self.holdout is None else self.holdout.to_dict()}

    def to_tensors(self) -> Dict[str, object]:
        """The whole record as tensors and dicts that ``torch.load(weights_only=True)`` reads
        back (to save beside a backbone's ``state_dict``, which does not carry the record):
        ``tasks`` [k] int64 and, with a holdout, ``share`` (float64 scalar), ``seed`` (int64
        scalar), ``rows`` (task as str -> [m] int64 held-out row indices) and ``sizes`` (task
        as str -> int64 scalar). :meth:`from_tensors` is its inverse."""
        out: Dict[str, object] = {"tasks": torch.tensor(list(self.tasks), dtype=torch.long)}
        if self.holdout is not None:
            out.update({"share": torch.tensor(float(self.holdout.share), dtype=torch.float64),
                        "seed": torch.tensor(int(self.holdout.seed)),
                        "rows": {str(t): r.clone() for t, r in self.holdout.rows.items()},
                        "sizes": {str(t): torch.tensor(int(n)) for t, n in self.holdout.sizes.items()}})
        return out

    @classmethod
    def from_tensors(cls, data: Mapping[str, object]) -> "PretrainingRecord":
        """The record :meth:`to_tensors` wrote.

        :raises ValueError: ``data`` has no ``tasks``, or a holdout part without the others.
        """
        if "tasks" not in data:
            raise ValueError(f"not a saved PretrainingRecord (no 'tasks'): keys {sorted(data)}")
        parts = {"share", "seed", "rows", "sizes"}
        present = parts & set(data)
        if present and present != parts:
            raise ValueError(f"a saved PretrainingRecord's holdout needs {sorted(parts)}, got {sorted(present)}")
        holdout = None
        if present:
            holdout = ReferenceHoldout(float(data["share"]), int(data["seed"]),
                                       {int(t): r for t, r in data["rows"].items()},
                                       {int(t): int(n) for t, n in data["sizes"].items()})
        return cls(tuple(int(t) for t in data["tasks"].tolist()), holdout)


def pretraining_record(backbone) -> Optional[PretrainingRecord]:
    """The :class:`PretrainingRecord` :func:`~avalanche_sdr.training.pretrain_backbone` left on
    ``backbone`` (attribute :data:`PRETRAINING_RECORD`), ``None`` when it carries none.

    :raises TypeError: the attribute holds something else.
    """
    record = getattr(backbone, PRETRAINING_RECORD, None)
    if record is not None and not isinstance(record, PretrainingRecord):
        raise TypeError(f"{type(backbone).__name__}.{PRETRAINING_RECORD} must be a PretrainingRecord, got "
                        f"{type(record).__name__}")
    return record


def _same_holdout(a: ReferenceHoldout, b: ReferenceHoldout) -> bool:
    return a is b or (a.to_dict() == b.to_dict() and dict(a.sizes) == dict(b.sizes)
                      and all(torch.equal(a.rows[t], b.rows[t]) for t in a.rows))


def _same_record(a: Optional[PretrainingRecord], b: Optional[PretrainingRecord]) -> bool:
    if a is b:
        return True
    if a is None or b is None or a.tasks != b.tasks:
        return False
    if a.holdout is None or b.holdout is None:
        return a.holdout is b.holdout
    return _same_holdout(a.holdout, b.holdout)


def _user_stacklevel() -> int:
    """The ``stacklevel`` of the first caller outside this package and Avalanche (the user's line)."""
    import avalanche
    import avalanche_sdr

    inside = tuple(str(p) for m in (avalanche_sdr, avalanche) for p in m.__path__)
    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_code.co_filename.startswith(inside):
        frame, level = frame.f_back, level + 1
    return level


class TwoSampleDetector(FeatureRuleDetector):
    """Decision rule ``"two_sample"``: reuse an entry only when a level-``alpha``
    test does not reject "this task repeats it" and had the power to (module doc).

    Same contract as :class:`~avalanche_sdr.detection.SimilarTaskDetector`
    (``detect``), plus :meth:`remember`, which stores a new entry's reference
    features. Needs no generators.

    :param settings: :class:`TwoSampleSettings` (default :data:`DEFAULT_TWO_SAMPLE`).
    :param batch_size: batch size of the E0 feature pass.
    :param reference_holdout: the :class:`ReferenceHoldout` E0 was pretrained with
        (``None``: the one E0's :class:`PretrainingRecord` names, read by
        :meth:`use_pretraining` when the strategy is built, if any); the entry of each of
        its tasks stores its reference from the held-out rows only. E0's feature space
        only (``feature_space="e0"``).
    """

    rule = "two_sample"
    settings_type = TwoSampleSettings

    def __init__(self, settings: TwoSampleSettings = DEFAULT_TWO_SAMPLE, batch_size: Optional[int] = None,
                 reference_holdout: Optional[ReferenceHoldout] = None):
        super().__init__(settings, batch_size)
        if reference_holdout is not None:
            if not isinstance(reference_holdout, ReferenceHoldout):
                raise TypeError(f"reference_holdout must be a ReferenceHoldout, got {type(reference_holdout).__name__}")
            if settings.feature_space != "e0":
                raise ValueError("reference_holdout protects E0's features; with feature_space='entry' every "
                                 "reference is taken in the entry's own encoder, trained on all its images")
        self.reference_holdout = reference_holdout
        self._pretraining: Optional[Tuple[Optional[PretrainingRecord]]] = None  # (record,) once use_pretraining ran
        self._projection: Optional[Tensor] = None
        self._distinct: Dict[Tuple[int, int, int, int], bool] = {}
        self._cache_owner = None  # the model the _distinct cache refers to
        self._last: Optional[Tuple[int, Tensor]] = None  # (task, projected features) of the last detect

    # -------------------------------------------------------------- what E0 saw
    def use_pretraining(self, record: Optional[PretrainingRecord]) -> None:
        """Take the warm-start entries' references from what E0 was not trained on.

        The strategy calls it once, when it is built, with the record of its E0
        (:func:`pretraining_record` of the repository's backbone):

        - a record with a holdout (:func:`~avalanche_sdr.training.pretrain_backbone`'s
          default): the entry of each of its tasks stores its reference from the held-out
          images only (as ``reference_holdout=`` does);
        - a record of a backbone trained on none of the stream's images: nothing changes;
        - no record, or a record of a backbone trained on every image of some warm-start
          tasks: the test then assumes E0 saw none of those tasks' images, which breaks its
          level for repeats of them if it did; one :class:`ReferenceWarning` says so, with
          the fix (none when ``reference_holdout`` was given).

        Nothing happens in each entry's own feature space (``feature_space="entry"``).

        :param record: the record, or ``None`` when E0 carries none.
        :raises ValueError: ``reference_holdout`` was given and the record says E0 was
            trained without another holdout, or on those images; the detector already
            serves a strategy whose E0 has another record (build one detector per strategy).
        """
        if record is not None and not isinstance(record, PretrainingRecord):
            raise TypeError(f"record must be a PretrainingRecord or None, got {type(record).__name__}")
        if self._pretraining is not None:
            if _same_record(self._pretraining[0], record):
                return
            raise ValueError("this detector already serves a strategy whose E0 was pretrained otherwise; build one "
                             "detector per strategy")
        if self.settings.feature_space != "e0":
            self._pretraining = (record,)
            return
        given = self.reference_holdout
        if given is not None:
            if record is not None and record.holdout is None and set(record.tasks) & set(given.rows):
                raise ValueError(f"reference_holdout was given, but E0 was pretrained on every image of tasks "
                                 f"{sorted(set(record.tasks) & set(given.rows))} (its record); pretrain it with that "
                                 "holdout (pretrain_backbone(holdout=...)) or drop reference_holdout")
            if record is not None and record.holdout is not None and not _same_holdout(given, record.holdout):
                raise ValueError("reference_holdout differs from the holdout E0 was pretrained without (its record, "
                                 "from pretrain_backbone); drop reference_holdout: the detector takes E0's")
            self._pretraining = (record,)
            return
        if record is None:
            warnings.warn(
                "E0 carries no record of its pretraining (pretrain_backbone leaves one): the two-sample test assumes "
                "E0 was trained on none of this stream's images. If it was trained on the warm-start tasks' images, "
                "their entries' references are images E0 was trained on, and repeats of those tasks are declared new "
                "far more often than the test's level (docs/results/detection.md, 'Warm-start references'). Fix: "
                "pretrain E0 with avalanche_sdr.pretrain_backbone, which holds references out by default, or pass "
                "TwoSampleDetector(reference_holdout=...) with the holdout E0 was pretrained without. If E0 saw none "
                "of the stream (e.g. ImageNet weights), nothing is wrong: warnings.filterwarnings('ignore', "
                "category=ReferenceWarning) silences this.", ReferenceWarning, stacklevel=_user_stacklevel())
        elif record.holdout is None and record.tasks:
            warnings.warn(
                f"E0 was pretrained on every image of the warm-start tasks {list(record.tasks)} "
                "(pretrain_backbone(holdout=None)): their entries' references are images E0 was trained on, and "
                "repeats of those tasks are declared new far more often than the test's level "
                "(docs/results/detection.md, 'Warm-start references'). Fix: pretrain E0 with pretrain_backbone's "
                f"default holdout (holdout={DEFAULT_HOLDOUT_SHARE}).", ReferenceWarning, stacklevel=_user_stacklevel())
        else:
            self.reference_holdout = record.holdout
        self._pretraining = (record,)

    # -------------------------------------------------------------- features
    @property
    def remember_after_training(self) -> bool:
        """References are taken after an entry's training (``feature_space="entry"``):
        the plugin then calls :meth:`remember` at the end of the experience."""
        return self.settings.feature_space == "entry"

    def project(self, model, x: Tensor, entry: Optional[int] = None, data: Optional[TaskData] = None) -> Tensor:
        """Features of ``x`` ([n, C, H, W]) under E0 (``entry=None``) or E_entry, projected:
        [n, dim] float64 on the CPU. ``data``: the task data whose images ``x`` are, so that
        E0's features computed once for it are read (``entry=None`` only)."""
        if entry is None and data is not None:
            feats = data.e0_features(model, self.batch_size).double()
        else:
            feats = model.batched_features(x, entry, self.batch_size).double()
        if self._projection is None or self._projection.shape[0] != feats.shape[1]:
            self._projection = random_projection(feats.shape[1], self.settings.dim)
        out = feats @ self._projection
        if not torch.isfinite(out).all():
            raise ValueError("E0 features of the task contain NaN or Inf; check the inputs and the backbone")
        return out

    def _check_resolution(self, num_classes: int, alpha: float) -> None:
        s = self.settings
        if s.test == "energy" and 1.0 / (s.n_permutations + 1) >= alpha / num_classes:
            raise ValueError(
                f"the energy test with n_permutations={s.n_permutations} cannot reach p < alpha / c = "
                f"{alpha / num_classes:g} for a {num_classes}-class task; use n_permutations >= "
                f"{math.ceil(num_classes / alpha)}"
            )

    def _pvalue(self, x: Tensor, ref: Tensor, generator: torch.Generator) -> float:
        if self.settings.test == "hotelling":
            return hotelling_pvalue(x, ref)
        return energy_pvalue(x, ref, self.settings.n_permutations, generator)

    def _combined(self, samples: Sequence[Tensor], refs: Sequence[Tensor],
                  generator: torch.Generator) -> Tuple[float, List[int]]:
        """Combined p-value of "the task of ``samples`` repeats the entry of ``refs``"
        and the class matching it was reached with.

        :param samples: c tensors [n_k, dim], the task's class-k features.
        :param refs: c tensors [m_j, dim], the entry's class-j references.
        :return: ``(p, sigma)``: without ``match_classes``, Bonferroni over
            ``p(samples[j], refs[j])`` and the identity; with it, the largest
            Bonferroni combination over the class matchings and its matching
            (:func:`bottleneck_matching`).
        """
        c = len(samples)
        if not self.settings.match_classes:
            return bonferroni([self._pvalue(samples[j], refs[j], generator) for j in range(c)]), list(range(c))
        matrix = [[self._pvalue(samples[k], refs[j], generator) for j in range(c)] for k in range(c)]
        sigma, combined = bottleneck_matching(matrix)
        return combined, sigma

    # -------------------------------------------------------------- references
    def remember(self, model, entry: int, data: TaskData) -> None:
        """Store entry ``entry``'s reference: up to ``reference_per_class`` projected
        features per class of its creating task's training data (seeded subsample);
        for a task of :attr:`reference_holdout`, of its held-out images only. The
        projected features of the last :meth:`detect` are reused when it was for this task.

        :param data: the creating task's training data (images, local labels).
        """
        task, x, y, num_classes = data.task, data.x, data.y, data.num_classes
        space = entry if self.settings.feature_space == "entry" else None
        features = self.cached_features(task)
        holdout = self.reference_holdout
        if holdout is not None and int(task) in holdout.rows:
            rows = holdout.held_out(int(task), len(y))
            x, y = x[rows], y[rows]
            features = None if features is None else features[rows]
            feats = self.project(model, x, space) if features is None else features
        elif features is None:
            feats = self.project(model, x, space, data=data)
        else:
            feats = features
        self._forget(model, entry)
        g = task_generator(self.settings.seed, task, _REFERENCE)
        keep_f, keep_y = [], []
        for j in range(num_classes):
            idx = torch.nonzero(y == j).flatten()
            idx = idx[subsample(len(idx), self.settings.reference_per_class, g)]
            keep_f.append(feats[idx].float())
            keep_y.append(torch.full((len(idx),), j, dtype=torch.int64))
        model.set_detection_state(entry, {"features": torch.cat(keep_f), "labels": torch.cat(keep_y)})

    def _forget(self, model, entry: Optional[int] = None) -> None:
        """Drop cached reference comparisons of ``entry`` (all of them for another model)."""
        if self._cache_owner is not model:
            self._distinct.clear()
            self._cache_owner = model
        if entry is not None:
            self._distinct = {k: v for k, v in self._distinct.items() if entry not in (k[0], k[2])}

    @staticmethod
    def _references(model, entry: int) -> List[Tensor]:
        state = model.detection_state(entry)
        if "features" not in state:
            raise RuntimeError(
                f"entry {entry} has no reference features: the two-sample rule must see every "
                "entry's creating task (build the strategy with detector='two_sample' from the start)"
            )
        feats, labels = state["features"].double().cpu(), state["labels"].cpu()
        return [feats[labels == j] for j in range(int(labels.max()) + 1)]

    def smallest_reference(self, model, entry: int) -> int:
        """Vectors in ``entry``'s smallest stored reference class: what the level of a test
        against it is paired with (:meth:`TwoSampleSettings.level`, :func:`smallest_class`)."""
        return smallest_class(self._references(model, entry))

    # -------------------------------------------------------------- power
    def _halves(self, refs, key: Tuple[int, int]) -> Tuple[Tensor, Tensor]:
        """A fixed random split of a stored class reference into two halves: the first
        decides whether it is a known-distinct decoy, the second supplies the decoy
        samples (so the power is not measured on the data that selected the decoys)."""
        return reference_halves(refs[key[0]][key[1]], self.settings.seed, key, _DECOY)

    def _known_distinct(self, key: Tuple[int, int], other: Tuple[int, int], refs, selection: Tensor,
                        level: float) -> bool:
        """Whether ``selection`` (the first half of class ``other``'s reference) is told
        apart from class ``key``'s reference at ``level`` (cached per pair and level)."""
        cache_key = key + other + (level,)
        if cache_key not in self._distinct:
            if len(selection) < 1 or len(selection) + len(refs[key[0]][key[1]]) < 3:
                self._distinct[cache_key] = False
            else:
                g = task_generator(self.settings.seed, 0, _PERMUTE)
                self._distinct[cache_key] = self._pvalue(selection, refs[key[0]][key[1]], g) < level
        return self._distinct[cache_key]

    def decoy_power(self, model, entry: int, sizes: Sequence[int], task: int, refs=None,
                    pairing: Optional[Sequence[int]] = None) -> float:
        """Share of decoy tasks, with the new task's per-class ``sizes``, that the
        combined test of a fixed class pairing rejects against ``entry`` (0.0 when no
        known-distinct decoy exists).

        Every stored class reference is split once, at random, into two halves. A
        decoy class for class j of ``entry`` is any stored class (of any entry) whose
        first half the per-class test distinguishes from entry's class-j reference
        (level alpha / c); decoy samples are drawn from its second half, at most the
        size of the new class paired with j (fewer when that half is smaller: the power
        is then underestimated, which errs towards "new"). The level is the settings'
        level at the smallest of ``sizes`` (:meth:`TwoSampleSettings.level`), without the
        entry's reference: a level raised for a small reference
        (:class:`~avalanche_sdr.detection.level.LevelByPairedPower`) makes the repeat test
        reject more, and must not make this check easier to pass.

        :param sizes: c ints, the new task's class-k sizes.
        :param pairing: c ints, ``pairing[k]`` the entry class new class k is tested
            against (the matching a ``match_classes`` decision chose); ``None``: the
            identity. The power is that of the unmatched test of this pairing (module
            doc, step 7 of docs/method.rst), so the identity gives the unmatched rule's.
        """
        s = self.settings
        refs = refs if refs is not None else {e: self._references(model, e) for e in model.entries}
        c = len(sizes)
        pairing = list(range(c)) if pairing is None else [int(j) for j in pairing]
        if sorted(pairing) != list(range(c)):
            raise ValueError(f"pairing must be a permutation of 0..{c - 1}, got {pairing}")
        sizes = [sizes[pairing.index(j)] for j in range(c)]  # entry class j <- its paired new class's size
        alpha = s.level(max(1, min(sizes)))
        level = alpha / c
        same_space = [entry] if s.feature_space == "entry" else list(refs)
        halves = {(e, j): self._halves(refs, (e, j)) for e in same_space for j in range(len(refs[e]))}
        decoys = []
        for j in range(c):
            options = [o for o, (selection, sampling) in halves.items() if o != (entry, j) and len(sampling) >= 1
                       and self._known_distinct((entry, j), o, refs, selection, level)]
            if not options:
                return 0.0
            decoys.append(options)
        g = task_generator(s.seed, task, _DECOY)
        rejected = 0
        for _ in range(s.n_decoys):
            pvalues = []
            for j in range(c):
                pool_j = halves[decoys[j][int(torch.randint(len(decoys[j]), (1,), generator=g))]][1]
                sample = pool_j[subsample(len(pool_j), max(1, min(sizes[j], len(pool_j))), g)]
                pvalues.append(self._pvalue(sample, refs[entry][j], g))
            rejected += bonferroni(pvalues) < alpha
        return rejected / s.n_decoys

    # -------------------------------------------------------------- decision
    def detect(self, model, data: TaskData) -> DetectionRecord:
        """Test the task of ``data`` against every candidate entry and decide (no model change),
        at the settings' level for the task's smallest class against the best candidate's
        smallest reference class (:meth:`TwoSampleSettings.level`)."""
        start = time.perf_counter()
        task, x, y, num_classes = data.task, data.x, data.y, data.num_classes
        s = self.settings
        self._forget(model)
        g = task_generator(s.seed, task, _SUBSAMPLE)
        rows = []
        for j in range(num_classes):
            idx = torch.nonzero(y == j).flatten()
            rows.append(idx[subsample(len(idx), s.max_per_class, g)])
        sizes = [len(r) for r in rows]
        alpha = s.level(max(1, min(sizes)))
        self._check_resolution(num_classes, alpha)
        entries = self.candidates(model, num_classes)
        refs = {e: self._references(model, e) for e in model.entries}
        if s.feature_space == "e0":
            feats = self.project(model, x, data=data)
            self._last = (int(task), feats)
        combined, matchings = [], []
        identity = list(range(num_classes))
        for e in entries:
            if len(refs[e]) != num_classes:  # another label-set size cannot be a repeat
                combined.append(0.0)
                matchings.append(identity)
                continue
            if s.feature_space == "entry":
                feats = self.project(model, x, e)
            gp = task_generator(s.seed, task * 100_003 + e, _PERMUTE)
            p, sigma = self._combined([feats[r] for r in rows], refs[e], gp)
            combined.append(p)
            matchings.append(sigma)
        best = self.best_candidate(combined)
        power = None
        reused = None
        if best is not None:
            alpha = s.level(max(1, min(sizes)), smallest_class(refs[entries[best]]), num_classes)
        if best is not None and combined[best] >= alpha:
            power = self.decoy_power(model, entries[best], sizes, task, refs, pairing=matchings[best])
            if power >= s.min_power:
                reused = entries[best]
        permutation = matchings[best] if reused is not None and matchings[best] != identity else []
        return DetectionRecord.decided(
            model, task=task, entries=entries, reused=reused, rule=self.rule,
            detection_seconds=time.perf_counter() - start, p_value=combined, power=power,
            class_count_filter=s.class_count_filter, class_permutation=permutation,
        )

    def legend(self) -> List[str]:
        """The p-values, the level (:meth:`Level.describe <avalanche_sdr.detection.level.Level.describe>`)
        and the power check."""
        s = self.settings
        rule = textwrap.wrap("features); rule: reuse the entry with the largest p if p >= "
                             + make_level(s.alpha).describe(), width=94, initial_indent=" " * 22,
                             subsequent_indent=" " * 22)
        return [
            "    Tj:p=..           p-value of the test \"task t repeats task j\" (class by class, on "
            + ("E0's" if s.feature_space == "e0" else "j's"),
            *rule,
            "    power=..          share of known-different decoy tasks the test told apart from that",
            f"                      entry; below {s.min_power:g} the test could not tell, and the task is new",
        ]

    def config(self) -> Dict[str, object]:
        """Everything that changes this detector's decisions (JSON-safe)."""
        config = dict(rule=self.rule, **self.settings.to_dict(), batch_size=self.batch_size)
        if self.reference_holdout is not None:
            config["reference_holdout"] = self.reference_holdout.to_dict()
        return config


__all__ = [
    "smallest_class",
    "DEFAULT_HOLDOUT_SHARE", "DEFAULT_TWO_SAMPLE", "FEATURE_SPACES", "MIN_HELD_OUT_PER_CLASS", "PRETRAINING_RECORD",
    "PROJECTION_SEED", "PretrainingRecord", "ReferenceHoldout", "ReferenceWarning", "TESTS",
    "TwoSampleDetector", "TwoSampleSettings", "pretraining_record",
    "bonferroni", "bottleneck_matching", "energy_pvalue", "hotelling_pvalue", "random_projection",
    "reference_halves",
]
