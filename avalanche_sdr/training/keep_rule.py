"""The no-loss keep rule of a learning-reuse update: held-out sets and the decision.

A learning-reuse update (``reuse="accumulate"``) trains a reused entry on a repeat, so it
can change every task the entry serves. The keep rule decides, from held-out evidence,
whether an update stays; otherwise the entry is restored and the repeat gets the head-only
result. The rule, its sizes, its margin and its level were fixed before any run
(docs/results/learning_reuse/keep_rule/rule_fixed_in_advance.md, with the exact error
rates of its accuracy check from :mod:`benchmarks.studies.learning_reuse.keep_rule`):

1. every task an entry serves keeps :func:`heldout_per_class` images of each class, drawn
   by :func:`split_heldout` (seeded by the task), never trained on by an update;
2. on each task's held-out set the candidate (the updated entry) may not lose an image
   net against the reference (the repeat: the head head-only would have trained; an
   earlier task: the entry before the update), ``L_s - G_s <= ACCURACY_MARGIN``
   (:class:`SetComparison`);
3. over all the sets' images pooled, the change of the true class's log-probability
   (candidate minus reference) is positive on more images than chance allows: the exact
   one-sided sign test (:func:`scipy.stats.binomtest`), p <= ``SIGN_LEVEL``, ties dropped;
4. keep where 2 holds on every set and 3 holds (:func:`decide`).

This module holds the rule's definition and decision only (pure functions of per-image
outcomes); the learning reuse computes the outcomes and acts on the decision.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Sequence, Tuple

import torch
from torch import Tensor

from avalanche_sdr._draws import subsample, task_generator

HELDOUT_CAP = 20
"""Most held-out images kept per class of a task (fixed in advance)."""

HELDOUT_FRACTION_DENOMINATOR = 5
"""A task keeps at most one image in this many of each class held out (fixed in advance:
a fifth, so a 10-image class keeps 2 and trains on 8)."""

ACCURACY_MARGIN = 0
"""Net held-out images a task's set may lose (L - G) and still pass (fixed in advance)."""

SIGN_LEVEL = 0.05
"""Level of the one-sided sign test on the pooled log-probability changes (fixed in
advance): where an update does not raise the median log-probability of the true class, it
is kept with probability at most this."""

KEEP_SEED = 0x6B5
"""Base seed of the held-out draws (:func:`split_heldout`)."""
_HELDOUT = 0


def heldout_per_class(n_k: int) -> int:
    """Held-out images the rule keeps of a class with ``n_k`` training images.

    :param n_k: training images of the class (int >= 0).
    :returns: ``min(HELDOUT_CAP, n_k // HELDOUT_FRACTION_DENOMINATOR)``.
    :raises ValueError: ``n_k`` not an int >= 0.
    """
    if not isinstance(n_k, int) or isinstance(n_k, bool) or n_k < 0:
        raise ValueError(f"n_k must be an int >= 0 (training images of a class), got {n_k!r}")
    return min(HELDOUT_CAP, n_k // HELDOUT_FRACTION_DENOMINATOR)


def split_heldout(y: Tensor, num_classes: int, task: int) -> Tuple[Tensor, Tensor]:
    """A task's stratified seeded split into training images and its held-out set:
    :func:`heldout_per_class` images of each class, drawn by a generator seeded by ``task``
    (the same task always holds out the same images).

    :param y: [n] int64 local labels in 0..num_classes-1.
    :param num_classes: classes of the task (int >= 1).
    :param task: the task's index (seeds the draw).
    :returns: ``(train indices [n - m], held-out indices [m])``: sorted int64, disjoint,
        together 0..n-1.
    :raises ValueError: ``y`` not a 1-D integer tensor with labels in range.
    """
    if not isinstance(y, Tensor) or y.dim() != 1 or y.dtype not in (torch.int64, torch.int32):
        raise ValueError(f"y must be a 1-D int64 tensor of local labels, got "
                         f"{type(y).__name__} {getattr(y, 'dtype', '')} of shape {tuple(getattr(y, 'shape', ()))}")
    y = y.cpu().long()
    if len(y) and (int(y.min()) < 0 or int(y.max()) >= num_classes):
        raise ValueError(f"labels must lie in 0..{num_classes - 1}, got {int(y.min())}..{int(y.max())}")
    g = task_generator(KEEP_SEED, task, _HELDOUT)
    held = []
    for j in range(num_classes):
        idx = torch.nonzero(y == j).flatten()
        held.append(idx[subsample(len(idx), heldout_per_class(len(idx)), g)])
    held_idx = torch.sort(torch.cat(held)).values if held else torch.zeros(0, dtype=torch.long)
    everything = torch.arange(len(y))
    return everything[~torch.isin(everything, held_idx)], held_idx


@dataclass(frozen=True)
class SetComparison:
    """One task's held-out set compared image by image (rule 2).

    :param task: the task whose held-out images these are.
    :param images: held-out images of the set.
    :param losses: images the reference classifies right and the candidate wrong (L).
    :param gains: images the candidate classifies right and the reference wrong (G).
    """

    task: int
    images: int
    losses: int
    gains: int

    @property
    def passes(self) -> bool:
        """``losses - gains <= ACCURACY_MARGIN``."""
        return self.losses - self.gains <= ACCURACY_MARGIN

    def to_dict(self) -> Dict[str, int]:
        return {"task": self.task, "images": self.images, "losses": self.losses, "gains": self.gains}


def compare_set(task: int, reference_correct: Tensor, candidate_correct: Tensor) -> SetComparison:
    """Rule 2's counts on one task's held-out set.

    :param task: the task whose held-out images were scored.
    :param reference_correct: [m] bool, the reference's prediction is the true class.
    :param candidate_correct: [m] bool, the candidate's prediction is the true class.
    :raises ValueError: not two boolean vectors of one length.
    """
    for name, value in (("reference_correct", reference_correct), ("candidate_correct", candidate_correct)):
        if not isinstance(value, Tensor) or value.dtype != torch.bool or value.dim() != 1:
            raise ValueError(f"{name} must be a 1-D bool tensor (one entry per held-out image)")
    if reference_correct.shape != candidate_correct.shape:
        raise ValueError(f"reference_correct and candidate_correct must have one length, got "
                         f"{len(reference_correct)} and {len(candidate_correct)}")
    ref, cand = reference_correct.cpu(), candidate_correct.cpu()
    return SetComparison(task=int(task), images=len(ref), losses=int((ref & ~cand).sum()),
                         gains=int((cand & ~ref).sum()))


@dataclass(frozen=True)
class KeepDecision:
    """What the keep rule decided for one update.

    :param sets: rule 2's comparison on each task's held-out set (the repeat's first).
    :param positive: pooled held-out images whose true-class log-probability rose.
    :param nonzero: pooled held-out images whose log-probability changed (ties dropped).
    :param p_value: the one-sided sign test's p-value (1.0 with no non-tied image).
    :param keep: every set passes and ``p_value <= SIGN_LEVEL``.
    """

    sets: Tuple[SetComparison, ...]
    positive: int
    nonzero: int
    p_value: float
    keep: bool

    def to_dict(self) -> Dict[str, Any]:
        return {"sets": [s.to_dict() for s in self.sets], "positive": self.positive, "nonzero": self.nonzero,
                "p_value": self.p_value, "keep": self.keep}


def decide(sets: Sequence[SetComparison], log_prob_changes: Tensor) -> KeepDecision:
    """Rules 3 and 4: keep the update where every set passes and the pooled sign test
    rejects "no rise" at ``SIGN_LEVEL``.

    :param sets: one :class:`SetComparison` per task the entry serves (at least one).
    :param log_prob_changes: [m] float, per pooled held-out image, the candidate's minus
        the reference's log-probability of the true class (nats); m = the sets' images.
    :raises ValueError: no set, a length that is not the sets' total, or a non-finite change.
    """
    from scipy.stats import binomtest

    sets = tuple(sets)
    if not sets:
        raise ValueError("decide needs at least one held-out set (the repeat's)")
    if not isinstance(log_prob_changes, Tensor) or log_prob_changes.dim() != 1:
        raise ValueError("log_prob_changes must be a 1-D float tensor (one change per pooled held-out image)")
    total = sum(s.images for s in sets)
    if len(log_prob_changes) != total:
        raise ValueError(f"log_prob_changes has {len(log_prob_changes)} entries, the sets hold {total} images")
    changes = log_prob_changes.detach().double().cpu()
    if not bool(torch.isfinite(changes).all()):
        raise ValueError("log_prob_changes holds NaN or infinite values: a classifier gave a non-finite "
                         "log-probability; check the entry's outputs before deciding")
    positive, nonzero = int((changes > 0).sum()), int((changes != 0).sum())
    p_value = float(binomtest(positive, nonzero, 0.5, alternative="greater").pvalue) if nonzero else 1.0
    keep = all(s.passes for s in sets) and p_value <= SIGN_LEVEL
    return KeepDecision(sets=sets, positive=positive, nonzero=nonzero, p_value=p_value, keep=keep)


__all__ = ["ACCURACY_MARGIN", "HELDOUT_CAP", "HELDOUT_FRACTION_DENOMINATOR", "KEEP_SEED", "KeepDecision",
           "SIGN_LEVEL", "SetComparison", "compare_set", "decide", "heldout_per_class", "split_heldout"]
