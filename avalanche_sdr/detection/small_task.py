"""Repeat decisions on tasks of ten images per class, with a false-reuse level (beyond the paper).

At 10 images per class the two-sample rule (:mod:`~avalanche_sdr.detection.two_sample`)
estimates a 16 x 16 covariance from 20 images, its test cannot reject anything, its
power check fails and every repeat gets a new entry. This rule keeps the two-sample
rule's decision wherever that rule has the power to decide (a reuse, or a rejection of
every candidate), so large tasks are decided exactly as before, and adds a fallback
where it lacks power, on tasks of at least ``min_per_class`` images a class:

1. the per-class test becomes Hotelling's T-squared with the within-class covariance
   pooled over every class stored in the repository (and the new task's own classes),
   in a fixed random projection of the input pixels (data-independent, and not shaped
   by E0's few warm-start classes);
2. the best candidate must not be rejected at ``alpha`` (the false-"new" side), and
3. a Monte-Carlo test bounds the false reuse at ``beta``, fixed in advance: decoy tasks
   of the task's sizes, drawn from stored classes known to differ from the candidate's,
   are tested the same way; reuse only when the task looks more like a repeat than all
   but a share ``beta`` of them (``(1 + #{p_decoy >= p_task}) / (n_decoys + 1) <= beta``).

On tasks of fewer than ``confirm_below`` images a class the two-sample rule's reuses
are confirmed by the same fallback (same entry, same class matching) or become new
entries: at that size its power check, estimated from few images, let false reuses
through on the validation streams.

Why: a reuse then has evidence on the side of "same classes" at a known error rate
against the differences the repository can show. The steps, the level argument and
its limits: docs/method.rst, section "Decisions on small tasks"; evidence:
docs/results/small_tasks.md.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

import torch
from scipy import stats
from torch import Tensor

from avalanche_sdr._checks import check_int
from avalanche_sdr._draws import subsample, task_generator
from avalanche_sdr.detection.base import Detector
from avalanche_sdr.detection.decision import DetectionRecord, candidate_entries
from avalanche_sdr.models.task_data import TaskData
from avalanche_sdr.detection.two_sample import (
    DEFAULT_TWO_SAMPLE,
    TwoSampleDetector,
    TwoSampleSettings,
    bonferroni,
    bottleneck_matching,
    random_projection,
    reference_halves,
)

INPUT_PROJECTION_SEED = 20240611
"""Seed of the fixed random projection of the input pixels (a constant: references depend on it)."""

_REFERENCE, _HALVES, _DECOY = 4, 5, 6  # purposes of task_generator (0-3: the two-sample rule's)

STATE_FEATURES = "input_features"
STATE_LABELS = "input_labels"
"""Keys of the projected-input references added to an entry's detection state."""


@dataclass(frozen=True)
class SmallTaskSettings:
    """The settings of the small-task rule, fixed before any run.

    :param two_sample: the two-sample rule that decides first (its ``alpha``,
        ``match_classes``, ``class_count_filter`` and ``max_per_class`` also apply to
        the fallback).
    :param beta: false-reuse level of the fallback: the largest Monte-Carlo p-value of
        "this task differs from the candidate as the decoys do" that still reuses.
        0.01, fixed in advance (the two-sample rule's ``alpha``: both errors at 1 %).
    :param n_decoys: decoy tasks of the Monte-Carlo test; ``1 / (n_decoys + 1)`` must
        not exceed ``beta`` (99 at the default: the least that can reach it).
    :param dim: dimension of the random projection of the input pixels (32: chosen on
        the validation streams, docs/results/small_tasks.md).
    :param reference_per_class: projected input images stored per class of an entry.
    :param min_per_class: the fallback acts only when every class of the task has at
        least this many images (10: at 5 per class the validation streams gave false
        reuses on up to 47 % of the tasks, docs/results/small_tasks.md); below it the
        two-sample rule's decision stands.
    :param confirm_below: a reuse by the two-sample rule of a task whose smallest class
        has at least ``min_per_class`` and fewer than ``confirm_below`` images stands
        only when the fallback's tests confirm it (the fallback reuses the same entry
        with the same class matching); otherwise the task gets a new entry. 40: chosen
        on the validation streams (confirming cut the two-sample rule's false reuses at
        10 and 20 images a class and cost Correct at 40, docs/results/small_tasks.md).
        ``None``: the two-sample rule's reuses stand at every size (the rule before).
    :param confirm_accepts: how the fallback confirms such a reuse of entry e with class
        matching m. ``False`` (default, every run so far): only when the fallback's own
        best entry and matching are e and m. ``True``: when the fallback does not reject
        e under m: its p-value of the task against e with m fixed is at least the level,
        and the decoy rank of that p-value is at most ``beta``. With two entries of one
        group (after one miss) the two rules' best entries can differ, and the default
        then declares every later repeat of the group new (a chain of misses,
        docs/results/recommended_streams.md); ``True`` asks only whether the fallback's
        evidence supports the reuse chosen. Needs ``confirm_below``. Measured on the
        validation designs (docs/results/stream_designs.md, "The small-task rule's
        confirmation"): not in ``method="recommended"``.
    :param familywise: whether ``beta`` bounds a new task's false reuse over every candidate
        entry rather than per candidate. The fallback tests the task against each of its k
        candidate entries (those with the task's class count) and reuses the best one when its
        decoy rank is at most ``beta``; a new task thus has up to k chances to beat a
        candidate's decoys. ``True``: the best candidate's decoy rank must be at most
        ``beta / k`` (Bonferroni over the candidates, so the bound holds per task), with
        ``max(n_decoys, ceil(k / beta) - 1)`` decoys so that rank can be reached. ``False``
        (default, every run so far): ``beta`` per candidate.
    :param seed: seed of the fallback's private RNGs (reference subsample, decoy draws).
    """

    two_sample: TwoSampleSettings = field(default_factory=lambda: DEFAULT_TWO_SAMPLE)
    beta: float = 0.01
    n_decoys: int = 99
    dim: int = 32
    reference_per_class: int = 100
    min_per_class: int = 10
    confirm_below: Optional[int] = 40
    confirm_accepts: bool = False
    familywise: bool = False
    seed: int = 0

    def __post_init__(self):
        if not isinstance(self.two_sample, TwoSampleSettings):
            raise TypeError(f"two_sample must be a TwoSampleSettings, got {type(self.two_sample).__name__}")
        if isinstance(self.beta, bool) or not isinstance(self.beta, (int, float)) or not 0.0 < self.beta < 1.0:
            raise ValueError(f"beta must lie in (0, 1), got {self.beta!r}")
        for name in ("n_decoys", "dim", "reference_per_class"):
            check_int(getattr(self, name), name)
        check_int(self.seed, "seed", minimum=0)
        check_int(self.min_per_class, "min_per_class", minimum=2)
        if self.confirm_below is not None:
            check_int(self.confirm_below, "confirm_below", minimum=self.min_per_class + 1)
        if not isinstance(self.confirm_accepts, bool):
            raise ValueError(f"confirm_accepts must be a bool, got {self.confirm_accepts!r}")
        if not isinstance(self.familywise, bool):
            raise ValueError(f"familywise must be a bool, got {self.familywise!r}")
        if self.confirm_accepts and self.confirm_below is None:
            raise ValueError("confirm_accepts=True changes how reuses below confirm_below are confirmed; with "
                             "confirm_below=None nothing is confirmed: set confirm_below or leave confirm_accepts "
                             "False")
        if 1.0 / (self.n_decoys + 1) > self.beta:
            raise ValueError(f"with n_decoys={self.n_decoys} the smallest Monte-Carlo p-value is "
                             f"1/{self.n_decoys + 1} > beta={self.beta}: no task could be reused; use "
                             f"n_decoys >= {math.ceil(1.0 / self.beta) - 1}")
        if self.reference_per_class < 2:
            raise ValueError(f"reference_per_class must be >= 2, got {self.reference_per_class}")

    def to_dict(self) -> Dict[str, object]:
        """JSON-safe dict of the settings (the two-sample settings nested)."""
        return dict(two_sample=self.two_sample.to_dict(), beta=self.beta, n_decoys=self.n_decoys, dim=self.dim,
                    reference_per_class=self.reference_per_class, min_per_class=self.min_per_class,
                    confirm_below=self.confirm_below, seed=self.seed,
                    # only where set: the configs (and checkpoint fingerprints) of the default stay as they were
                    **({"confirm_accepts": True} if self.confirm_accepts else {}),
                    **({"familywise": True} if self.familywise else {}))

    def reuse_level(self, candidates: int) -> Tuple[float, int]:
        """The largest decoy rank that reuses, and the number of decoys, for a task with
        ``candidates`` candidate entries (``familywise``: ``beta / k`` with enough decoys to
        reach it; else ``beta`` and ``n_decoys``)."""
        if not self.familywise or candidates <= 1:
            return self.beta, self.n_decoys
        level = self.beta / candidates
        return level, max(self.n_decoys, math.ceil(candidates / self.beta - 1e-9) - 1)


DEFAULT_SMALL_TASK = SmallTaskSettings()
"""The settings of every reported run (fixed before them; docs/results/small_tasks.md)."""


# ---------------------------------------------------------------------- the pooled test


@dataclass(frozen=True)
class PooledCovariance:
    """A within-class covariance pooled over many classes, for Hotelling tests.

    :param whitener: [d, k] float64, ``S^{-1/2}`` on the kept eigen-directions of the
        pooled covariance S of the first ``k_coords`` coordinates (``z = x @ whitener``
        has identity pooled covariance).
    :param df: degrees of freedom of S (images minus classes).
    """

    whitener: Tensor
    df: int

    @property
    def rank(self) -> int:
        """k, the number of whitened directions the test uses."""
        return int(self.whitener.shape[1])


def pooled_covariance(classes: Sequence[Tensor], rank_tol: float = 1e-9) -> PooledCovariance:
    """The within-class covariance pooled over ``classes``.

    S = sum over classes of the centred scatter / (N - K), N images in K classes. With
    few degrees of freedom only the first ``min(d, max(1, (N - K) // 2))``
    coordinates are used (a choice from counts alone; the coordinates of a random
    projection are exchangeable), and eigen-directions below ``rank_tol`` times the
    largest eigenvalue are dropped.

    :param classes: K tensors [n_i, d] (float; n_i >= 1; a class of one image adds no
        scatter but counts as a class).
    :return: a :class:`PooledCovariance`.
    :raises ValueError: on no classes, mismatched widths, non-finite values, or fewer
        than 2 degrees of freedom.
    """
    if not classes:
        raise ValueError("pooled_covariance needs at least one class")
    d = classes[0].shape[1]
    if any(c.dim() != 2 or c.shape[1] != d or c.shape[0] < 1 for c in classes):
        raise ValueError(f"classes must be [n_i >= 1, d] tensors of one width, got {[tuple(c.shape) for c in classes]}")
    if not all(torch.isfinite(c).all() for c in classes):
        raise ValueError("pooled_covariance: the class samples contain NaN or Inf")
    n = sum(c.shape[0] for c in classes)
    df = n - len(classes)
    if df < 2:
        raise ValueError(f"pooled_covariance needs >= 2 degrees of freedom (images - classes), got {df}")
    keep = min(d, max(1, df // 2))
    scatter = torch.zeros(keep, keep, dtype=torch.float64)
    for c in classes:
        z = c.double()[:, :keep]
        z = z - z.mean(0)
        scatter += z.T @ z
    evals, evecs = torch.linalg.eigh(scatter / df)
    top = float(evals[-1])
    if not top > 0.0:
        raise ValueError("pooled_covariance: the classes have no spread within them")
    kept = evals > rank_tol * top
    whitener = torch.zeros(d, int(kept.sum()), dtype=torch.float64)
    whitener[:keep] = evecs[:, kept] / torch.sqrt(evals[kept])
    return PooledCovariance(whitener, df)


def pooled_hotelling_pvalue(x: Tensor, ref: Tensor, covariance: PooledCovariance) -> float:
    """p-value of "``x`` and ``ref`` have one mean", with a pooled covariance.

    ``T^2 = n m / (n + m) ||W^T (mean_x - mean_ref)||^2`` with the whitener ``W`` of
    ``covariance`` (rank k, df degrees of freedom); under H0 (Gaussian classes sharing the
    pooled covariance) ``(df - k + 1) / (k df) T^2 ~ F(k, df - k + 1)``.

    :param x: [n, d] samples (n >= 1); :param ref: [m, d] samples (m >= 1).
    :param covariance: from :func:`pooled_covariance` over classes of width d.
    :return: p in [0, 1].
    """
    w = covariance.whitener
    if x.dim() != 2 or ref.dim() != 2 or x.shape[1] != w.shape[0] or ref.shape[1] != w.shape[0]:
        raise ValueError(f"need [n, {w.shape[0]}] and [m, {w.shape[0]}] samples, got {tuple(x.shape)} "
                         f"and {tuple(ref.shape)}")
    n, m = x.shape[0], ref.shape[0]
    if n < 1 or m < 1:
        raise ValueError(f"need >= 1 sample on each side, got {n} and {m}")
    k, df = covariance.rank, covariance.df
    if df - k + 1 < 1:
        raise ValueError(f"rank {k} leaves no degrees of freedom out of {df}")
    z = (x.double().mean(0) - ref.double().mean(0)) @ w
    t2 = n * m / (n + m) * float(z @ z)
    return float(stats.f.sf((df - k + 1) / (k * df) * t2, k, df - k + 1))


# ---------------------------------------------------------------------- detector


class SmallTaskDetector(Detector):
    """Decision rule ``"small_task"``: the two-sample rule, and where it lacks power, a
    pooled-covariance repeat test with a Monte-Carlo false-reuse bound (module doc).

    Same contract as :class:`~avalanche_sdr.detection.TwoSampleDetector` (``detect``,
    ``remember``); needs no generators. A record decided by the
    fallback has :attr:`~avalanche_sdr.detection.DetectionRecord.decoy_rank_pvalue`
    set (``None`` when the two-sample rule decided) and the fallback's per-candidate
    combined p-values in ``p_value``; ``power`` is the two-sample rule's.

    :param settings: :class:`SmallTaskSettings` (default :data:`DEFAULT_SMALL_TASK`).
    :param batch_size: batch size of the E0 feature pass (images; ``None``: the
        two-sample rule's default for the model's device).
    """

    rule = "small_task"
    needs_generators = False

    def __init__(self, settings: SmallTaskSettings = DEFAULT_SMALL_TASK, batch_size: Optional[int] = None) -> None:
        if not isinstance(settings, SmallTaskSettings):
            raise TypeError(f"settings must be a SmallTaskSettings, got {type(settings).__name__}")
        self.settings = settings
        self.two_sample = TwoSampleDetector(settings.two_sample, batch_size)
        self.batch_size = self.two_sample.batch_size
        self._projection: Optional[Tensor] = None

    @property
    def remember_after_training(self) -> bool:
        """As the two-sample rule's (``feature_space="entry"``: after the entry's training)."""
        return self.two_sample.remember_after_training

    def config(self) -> Dict[str, object]:
        """Everything that changes this detector's decisions (JSON-safe)."""
        config = dict(rule=self.rule, **self.settings.to_dict(), batch_size=self.batch_size)
        if self.two_sample.reference_holdout is not None:
            config["reference_holdout"] = self.two_sample.reference_holdout.to_dict()
        return config

    def use_pretraining(self, record) -> None:
        """The two-sample rule's :meth:`~avalanche_sdr.detection.TwoSampleDetector.use_pretraining`
        (its references; the fallback's projected pixels do not depend on E0)."""
        self.two_sample.use_pretraining(record)

    def legend(self) -> List[str]:
        """The two-sample rule's p-values and power, and the fallback's decoy rank."""
        s = self.settings
        return self.two_sample.legend() + [
            f"    fallback          on tasks of >= {s.min_per_class} images a class where that test lacks power,",
            "                      a test with a within-class covariance pooled over the stored",
            "                      classes decides (p: its p-values); a reuse then needs a decoy",
            f"                      rank <= {s.beta:g}" + (" / k" if s.familywise else "")
            + " (known-different decoys ranked against the task"
            + ("; k: the candidate entries tested)" if s.familywise else ")"),
        ]

    # -------------------------------------------------------------- features
    def project_inputs(self, x: Tensor) -> Tensor:
        """The fixed random projection of the pixels: [n, C, H, W] in [0, 1] -> [n, dim]
        float64 on the CPU."""
        if x.dim() != 4:
            raise ValueError(f"inputs must be [n, C, H, W] images, got shape {tuple(x.shape)}")
        flat = x.detach().cpu().reshape(x.shape[0], -1).double()
        if self._projection is None or self._projection.shape[0] != flat.shape[1]:
            self._projection = random_projection(flat.shape[1], self.settings.dim, INPUT_PROJECTION_SEED)
        out = flat @ self._projection
        if not torch.isfinite(out).all():
            raise ValueError("the task's inputs contain NaN or Inf")
        return out

    def remember(self, model, entry: int, data: TaskData) -> None:
        """Store the two-sample rule's references and up to ``reference_per_class``
        projected inputs per class (seeded subsample) in ``entry``'s detection state."""
        self.two_sample.remember(model, entry, data)
        task, y, num_classes = data.task, data.y, data.num_classes
        projected = self.project_inputs(data.x)
        g = task_generator(self.settings.seed, task, _REFERENCE)
        keep_f, keep_y = [], []
        for j in range(num_classes):
            idx = torch.nonzero(y.cpu() == j).flatten()
            idx = idx[subsample(len(idx), self.settings.reference_per_class, g)]
            keep_f.append(projected[idx].float())
            keep_y.append(torch.full((len(idx),), j, dtype=torch.int64))
        state = dict(model.detection_state(entry))
        state.update({STATE_FEATURES: torch.cat(keep_f), STATE_LABELS: torch.cat(keep_y)})
        model.set_detection_state(entry, state)

    @staticmethod
    def _references(model, entry: int) -> List[Tensor]:
        state = model.detection_state(entry)
        if STATE_FEATURES not in state:
            raise RuntimeError(f"entry {entry} has no projected-input references: the small-task rule must see "
                               "every entry's creating task (build the strategy with detector='small_task' "
                               "from the start)")
        feats, labels = state[STATE_FEATURES].double().cpu(), state[STATE_LABELS].cpu()
        return [feats[labels == j] for j in range(int(labels.max()) + 1)]

    # -------------------------------------------------------------- the fallback
    def _combined(self, samples: Sequence[Tensor], refs: Sequence[Tensor],
                  covariance: PooledCovariance) -> Tuple[float, List[int]]:
        """Bonferroni p-value of "``samples`` repeat ``refs``" and its class matching
        (over every matching with ``match_classes``, :func:`bottleneck_matching`)."""
        c = len(samples)
        if not self.settings.two_sample.match_classes:
            return bonferroni([pooled_hotelling_pvalue(samples[j], refs[j], covariance) for j in range(c)]), \
                list(range(c))
        matrix = [[pooled_hotelling_pvalue(samples[k], refs[j], covariance) for j in range(c)] for k in range(c)]
        sigma, combined = bottleneck_matching(matrix)
        return combined, sigma

    def _halves(self, refs: Dict[int, List[Tensor]], key: Tuple[int, int]) -> Tuple[Tensor, Tensor]:
        """A fixed random split of a stored class into a selection half and a sampling half."""
        return reference_halves(refs[key[0]][key[1]], self.settings.seed, key, _HALVES)

    def decoy_rank_pvalue(self, p_task: float, entry: int, sizes: Sequence[int], task: int,
                          refs: Dict[int, List[Tensor]], covariance: PooledCovariance,
                          n_decoys: Optional[int] = None) -> float:
        """Monte-Carlo p-value of "the task differs from ``entry`` as the decoys do".

        A stored class (of any entry, ``entry``'s other classes included) is a decoy
        for slot k when the pooled test tells its selection half apart from the
        entry's class k at level ``alpha / c`` (with ``match_classes``: from every
        class of the entry, so the decoy differs under every matching). Each of the
        ``n_decoys`` decoy tasks draws one such class per slot and at most ``sizes[k]``
        images of its sampling half (fewer when the half is smaller: the decoy then
        looks less distinct, which errs towards "new"), and is tested as the task was.

        :param p_task: the task's combined p-value against ``entry``.
        :param sizes: the task's images per class (c ints).
        :param n_decoys: decoy tasks to draw (``None``: the settings' ``n_decoys``).
        :return: ``(1 + #{decoys with p >= p_task}) / (n_decoys + 1)``; 1.0 when a slot
            has no decoy class (nothing to compare with).
        """
        s = self.settings
        c = len(sizes)
        level = s.two_sample.level(max(1, min(sizes))) / c
        halves = {(e, j): self._halves(refs, (e, j)) for e in refs for j in range(len(refs[e]))}
        targets = range(c)
        options = []
        for k in range(c):
            wanted = targets if s.two_sample.match_classes else (k,)
            slot = [o for o, (selection, sampling) in halves.items()
                    if len(selection) >= 1 and len(sampling) >= 1 and all(
                        o != (entry, j) and pooled_hotelling_pvalue(selection, refs[entry][j], covariance) < level
                        for j in wanted)]
            if not slot:
                return 1.0
            options.append(slot)
        n_decoys = s.n_decoys if n_decoys is None else int(n_decoys)
        g = task_generator(s.seed, task, _DECOY)
        at_least = 0
        for _ in range(n_decoys):
            samples = []
            for k in range(c):
                pool = halves[options[k][int(torch.randint(len(options[k]), (1,), generator=g))]][1]
                samples.append(pool[subsample(len(pool), max(1, min(sizes[k], len(pool))), g)])
            at_least += self._combined(samples, refs[entry], covariance)[0] >= p_task
        return (1 + at_least) / (n_decoys + 1)

    # -------------------------------------------------------------- decision
    def _confirm_accepted(self, model, first: DetectionRecord, entries: Sequence[int], combined: List[float],
                          samples: Sequence[Tensor], refs: Dict[int, List[Tensor]], covariance: PooledCovariance,
                          level: float, reuse_level: Tuple[float, int], start: float) -> DetectionRecord:
        """``confirm_accepts``: the two-sample rule's reuse of ``first.reused_entry`` with its class matching
        stands when the fallback does not reject it (p-value of the task against that entry with that
        matching fixed >= ``level``, and its decoy rank within ``reuse_level``, the pair of
        :meth:`SmallTaskSettings.reuse_level`); otherwise the task is new."""
        s = self.settings
        entry = first.reused_entry
        c = len(samples)
        matching = list(first.class_permutation) or list(range(c))
        p = bonferroni([pooled_hotelling_pvalue(samples[k], refs[entry][matching[k]], covariance)
                        for k in range(c)]) if len(refs[entry]) == c else 0.0
        rank_p = None
        beta, n_decoys = reuse_level
        if p >= level:
            rank_p = self.decoy_rank_pvalue(p, entry, [len(v) for v in samples], first.task, refs, covariance,
                                            n_decoys)
        reused = entry if rank_p is not None and rank_p <= beta else None
        return DetectionRecord.decided(
            model, task=first.task, entries=entries, reused=reused, rule=self.rule,
            detection_seconds=first.detection_seconds + time.perf_counter() - start, p_value=combined,
            power=first.power, class_count_filter=s.two_sample.class_count_filter,
            class_permutation=list(first.class_permutation) if reused is not None else [],
            decoy_rank_pvalue=rank_p,
        )

    def detect(self, model, data: TaskData) -> DetectionRecord:
        """Decide by the two-sample rule; where it found no rejection but lacked power,
        by the fallback (module doc). No model change.

        :param data: the task's training inputs in [0, 1] and local labels 0..c-1.
        """
        start = time.perf_counter()
        task, x, y, num_classes = data.task, data.x, data.y, data.num_classes
        first = self.two_sample.detect(model, data)
        first.rule = self.rule
        s = self.settings
        y = y.cpu()
        smallest = min(int((y == j).sum()) for j in range(num_classes))
        if smallest < s.min_per_class:
            return first  # too few images for the fallback
        confirm = first.decision == "reuse" and s.confirm_below is not None and smallest < s.confirm_below
        if not confirm and (first.decision == "reuse" or first.power is None):
            return first  # reused (no confirmation asked), rejected, or no candidate
        g = task_generator(s.seed, task, _REFERENCE)
        projected = self.project_inputs(x)
        samples = []
        for j in range(num_classes):
            idx = torch.nonzero(y == j).flatten()
            samples.append(projected[idx[subsample(len(idx), s.two_sample.max_per_class, g)]])
        refs = {e: self._references(model, e) for e in model.entries}
        covariance = pooled_covariance([c for e in refs for c in refs[e]] + samples)
        entries = candidate_entries(model, num_classes, s.two_sample.class_count_filter)
        combined, matchings = [], []
        identity = list(range(num_classes))
        tested = 0  # the candidates tested: those with the task's class count
        for e in entries:
            if len(refs[e]) != num_classes:
                combined.append(0.0)
                matchings.append(identity)
                continue
            p, sigma = self._combined(samples, refs[e], covariance)
            combined.append(p)
            matchings.append(sigma)
            tested += 1
        sizes = [len(v) for v in samples]
        level = s.two_sample.level(max(1, min(sizes)))
        beta, n_decoys = s.reuse_level(tested)
        if confirm and s.confirm_accepts:
            return self._confirm_accepted(model, first, entries, combined, samples, refs, covariance, level,
                                          (beta, n_decoys), start)
        best = max(range(len(combined)), key=lambda i: (combined[i], -i))
        reused, rank_p = None, None
        if combined[best] >= level:
            rank_p = self.decoy_rank_pvalue(combined[best], entries[best], sizes, task, refs, covariance, n_decoys)
            if rank_p <= beta:
                reused = entries[best]
        permutation = matchings[best] if reused is not None and matchings[best] != identity else []
        if confirm and (reused != first.entry or permutation != list(first.class_permutation)):
            reused, permutation = None, []  # the fallback does not confirm the two-sample rule's reuse
        return DetectionRecord.decided(
            model, task=task, entries=entries, reused=reused, rule=self.rule,
            detection_seconds=first.detection_seconds + time.perf_counter() - start, p_value=combined,
            power=first.power, class_count_filter=s.two_sample.class_count_filter,
            class_permutation=permutation, decoy_rank_pvalue=rank_p,
        )


__all__ = [
    "DEFAULT_SMALL_TASK", "INPUT_PROJECTION_SEED", "PooledCovariance", "SmallTaskDetector", "SmallTaskSettings",
    "pooled_covariance", "pooled_hotelling_pvalue",
]
