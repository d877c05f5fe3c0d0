"""The learning reuse (``SDRSettings(reuse="accumulate")``): a repeat keeps training its entry.

The paper's reuse (``reuse="head"``) freezes a reused entry and trains a new head, so
the repeat's data improves nothing that stays. Here a detected repeat answers through
the head of the entry's creating task (classes matched by the detector's
``class_permutation``) and trains the entry's adapters, BatchNorm copies and that
head, so every task mapped to the entry gains. Why a guard (``reuse_guard``, on by
default): a wrong reuse would now damage those tasks, so the head must first classify
the repeat's data at least midway between chance and its accuracy on the entry's
stored images (:func:`gate`, else a new entry), and those images are replayed in every
update mini-batch (:class:`ExemplarReplay`). Draws use generators seeded by task and
purpose, so a resumed run draws the same.

An update must not hurt the entry's earlier tasks (``update_balance``,
``update_rollback``, on by default). A balanced update weights the repeat's
mini-batches so that every class counts equally and keeps the entry's BatchNorm copies
on their stored statistics (an 85/15 repeat moves neither the head's class balance nor
the statistics). A :class:`BalanceRule` (:data:`BALANCE_RULES`) says which updates are
balanced: every one (``"always"``), or every one but a repeat whose class counts match
both its entry's creating task's and equal counts within sampling noise
(``"when_shifted"``, the default: that repeat gets the plain update). An update that
lowers the entry's accuracy on images of its creating task kept beside the replayed
ones and never used by an update is undone (:class:`EntrySnapshot`,
:func:`rollback_check`). With ``update_early_stop`` (off by default) the update stops
once a held-out share of the repeat no longer improves (:class:`EarlyStop`).

Gate, replay, balance, early stop, rollback and the entries never updated:
docs/method.rst, section "The learning reuse: gate, replay and entries never updated".
"""
from __future__ import annotations

import abc
import math
from dataclasses import dataclass, field, fields
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import torch
from torch import Tensor, nn

from avalanche_sdr._draws import subsample, task_generator
from avalanche_sdr.detection.decision import json_float
from avalanche_sdr.models.stored import float_images, stored_images

EXEMPLAR_SEED = 0x5D3
"""Base seed of the learning reuse's generators (stored images, replay draws,
held-out images, the repeat's held-out share)."""
_STORE, _REPLAY, _HELDOUT, _SPLIT = 0, 1, 2, 3

GUARD_HELDOUT_PER_CLASS = 10
"""Held-out images kept per class of a new entry (``update_rollback``): drawn from its
creating task's training images outside the replayed ones, never trained on after the
entry's creation; what :func:`rollback_check` measures. Fixed in advance (not tuned):
with 2-class tasks 20 images, so one image is 5 points of accuracy."""

REPEAT_HOLDOUT_SHARE = 0.2
"""Share of each class of a repeat held out of its update (``update_early_stop``): the
data :class:`EarlyStop` scores after every epoch. Fixed in advance (not tuned)."""

EARLY_STOP_PATIENCE = 1
"""Epochs without a lower held-out loss after which an update stops (then the best
epoch's state is kept). Fixed in advance (not tuned)."""


@dataclass
class ReuseRecord:
    """What the strategy's reuse did with one task's entry after the detector's decision
    (JSON-serialisable): the learning reuse's gate, update, early stop, rollback and
    class balance. Beside the task's :class:`~avalanche_sdr.detection.DetectionRecord`,
    which holds the detection's evidence and decision; a run's results and checkpoints
    write both in one dict (:meth:`to_dict` keys after the detection record's).

    :param entry_updated: ``reuse="accumulate"`` (:class:`~avalanche_sdr.training.SDRSettings`):
        the reused entry's adapters, BatchNorm copies and head kept training on this
        task's data (``False``: head-only reuse, the paper's, a new entry, or the guard
        refused the update).
    :param gate_accuracy: ``reuse="accumulate"`` with ``reuse_guard``: accuracy of the
        reused entry's head (through the detector's ``class_permutation``) on this task's
        training data, before any training on it (fraction in [0, 1]); ``None`` when not
        measured. A task the gate refused got a new entry (its decision ``"new"``).
    :param gate_threshold: the accuracy ``gate_accuracy`` had to reach for the update
        to go ahead (midway between chance, 1/c, and the entry's accuracy on its stored
        images); ``None`` when not measured.
    :param update_epochs: an update with ``update_early_stop``: the epochs whose state it
        kept (the best on the repeat's held-out share); ``None`` when not measured.
    :param heldout_accuracy: an update with ``update_rollback``: the entry's head's
        accuracy on the entry's held-out images (its creating task's, never trained on
        since) before and after the update, ``[before, after]`` (fractions in [0, 1]);
        empty when not measured.
    :param update_rolled_back: the update lowered ``heldout_accuracy`` and was undone:
        the entry, its BatchNorm copies and head are as before this task, which still
        answers through the entry's head (``entry_updated`` stays ``True``).
    :param update_balanced: the update was class-balanced (``update_balance``'s rule
        asked for it: class weights, the entry's BatchNorm copies in eval mode).
    :param balance_p_value: an update under the ``"when_shifted"`` balance rule: the
        smallest p-value of its chi-square tests (the repeat's class counts against the
        entry's creating task's and against equal counts, the creating task's against
        equal counts); ``None`` when not tested.
    :param keep_p_value: ``reuse="no_loss"``: the keep rule's pooled sign-test p-value
        (:func:`~avalanche_sdr.training.keep_rule.decide`); ``None`` where no update ran.
    :param keep_sets: ``reuse="no_loss"``: per held-out set compared, ``[task, images,
        losses, gains]`` (the repeat's first); empty where no update ran.
    """

    entry_updated: bool = False
    gate_accuracy: Optional[float] = None
    gate_threshold: Optional[float] = None
    update_epochs: Optional[int] = None
    heldout_accuracy: List[float] = field(default_factory=list)
    update_rolled_back: bool = False
    update_balanced: bool = False
    balance_p_value: Optional[float] = None
    keep_p_value: Optional[float] = None
    keep_sets: List[List[int]] = field(default_factory=list)

    def __post_init__(self) -> None:
        for name in ("entry_updated", "update_rolled_back", "update_balanced"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be a bool, got {getattr(self, name)!r}")
        self.keep_sets = [[int(v) for v in row] for row in self.keep_sets]
        if any(len(row) != 4 for row in self.keep_sets):
            raise ValueError(f"keep_sets rows are [task, images, losses, gains], got {self.keep_sets}")
        for name in ("gate_accuracy", "gate_threshold", "balance_p_value", "keep_p_value"):
            value = getattr(self, name)
            setattr(self, name, None if value is None else float(value))
        if self.update_epochs is not None:
            if isinstance(self.update_epochs, bool) or not hasattr(self.update_epochs, "__index__"):
                raise ValueError(f"update_epochs must be an int or None, got {self.update_epochs!r}")
            self.update_epochs = int(self.update_epochs)
        self.heldout_accuracy = [float(v) for v in self.heldout_accuracy]
        if self.heldout_accuracy and (len(self.heldout_accuracy) != 2 or any(math.isnan(v) for v in
                                                                             self.heldout_accuracy)):
            raise ValueError(f"heldout_accuracy is [before, after], got {self.heldout_accuracy}")
        for name in ("update_rolled_back", "update_balanced"):
            if getattr(self, name) and not self.entry_updated:
                raise ValueError(f"{name} is only set for an update (entry_updated=True)")

    def check_decision(self, decision: str) -> None:
        """Refuse an update recorded for a task that did not reuse an entry.

        :param decision: the task's :attr:`DetectionRecord.decision
            <avalanche_sdr.detection.DetectionRecord.decision>`.
        :raises ValueError: ``entry_updated`` for a decision other than ``"reuse"``.
        """
        if self.entry_updated and decision != "reuse":
            raise ValueError(f"entry_updated is only set for a 'reuse', not {decision!r}")

    def to_dict(self) -> Dict[str, Any]:
        """Plain-python dict that ``json.dumps`` accepts (non-finite floats as strings,
        as :meth:`DetectionRecord.to_dict <avalanche_sdr.detection.DetectionRecord.to_dict>`)."""
        def number(value):
            return None if value is None else json_float(value)

        return {
            "entry_updated": self.entry_updated,
            "gate_accuracy": number(self.gate_accuracy),
            "gate_threshold": number(self.gate_threshold),
            "update_epochs": self.update_epochs,
            "heldout_accuracy": list(self.heldout_accuracy),
            "update_rolled_back": self.update_rolled_back,
            "update_balanced": self.update_balanced,
            "balance_p_value": number(self.balance_p_value),
            "keep_p_value": number(self.keep_p_value),
            "keep_sets": [list(row) for row in self.keep_sets],
        }

    @classmethod
    def field_names(cls) -> Tuple[str, ...]:
        """The record's keys, in :meth:`to_dict` order."""
        return tuple(f.name for f in fields(cls))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "ReuseRecord":
        """Inverse of :meth:`to_dict` (also after a JSON round trip); keys absent from
        ``data`` keep their defaults, other keys are not read (a results or checkpoint
        record holds the detection record's keys too)."""
        return cls(**{name: data[name] for name in cls.field_names() if name in data})

    def describe(self) -> str:
        """The update's part of the task's one-line report (``""`` without an update)."""
        if self.update_rolled_back and self.keep_p_value is not None:
            return f", entry update refused (keep rule p={self.keep_p_value:.3g}: head-only result)"
        if self.update_rolled_back:
            return ", entry update rolled back"
        if self.update_epochs == 0:
            return ", entry update of 0 epochs"
        if self.entry_updated and self.keep_p_value is not None:
            return f", entry update kept (keep rule p={self.keep_p_value:.3g})"
        if self.entry_updated:
            return ", entry updated" + (" (class-balanced)" if self.update_balanced else "")
        return ""

    def describe_gate(self) -> str:
        """The gate's part of the report (``""`` when the gate did not run)."""
        if self.gate_accuracy is None:
            return ""
        return (f" (gate: head accuracy {self.gate_accuracy:.2f} "
                f"{'>=' if self.gate_accuracy >= self.gate_threshold else '<'} {self.gate_threshold:.2f})")


def entry_updatable(model, entry: int) -> bool:
    """Whether every task mapped to ``entry`` answers through its creating task's head,
    so that training the entry (the learning reuse) moves no frozen head's features."""
    creator = model.entry_creator[int(entry)]
    heads = model.heads
    return all(heads.owner(t) == creator for t, e in model.task_to_entry.items()
               if e == int(entry) and heads.is_trained(t))


def select_exemplars(x: Tensor, y: Tensor, num_classes: int, per_class: int, task: int):
    """Up to ``per_class`` images of each class, a seeded draw (sorted indices).

    :param x: [n, C, H, W] images; ``y``: [n] int64 local labels 0..c-1.
    :return: ``(images [m, C, H, W], labels [m])``, m <= c * per_class, on the CPU.
    """
    g = task_generator(EXEMPLAR_SEED, task, _STORE)
    keep = []
    y = y.cpu()
    for j in range(num_classes):
        idx = torch.nonzero(y == j).flatten()
        keep.append(idx[subsample(len(idx), per_class, g)])
    idx = torch.cat(keep) if keep else torch.zeros(0, dtype=torch.long)
    return x.cpu()[idx], y[idx]


def select_heldout(x: Tensor, y: Tensor, num_classes: int, per_class: int, exemplars: int, task: int):
    """Up to ``per_class`` images of each class that :func:`select_exemplars` (with
    ``exemplars`` per class and the same ``task``) does not store: a seeded draw of its own.

    :param x: [n, C, H, W] images; ``y``: [n] int64 local labels 0..c-1.
    :return: ``(images [m, C, H, W], labels [m])`` on the CPU, m <= c * per_class.
    """
    g_store = task_generator(EXEMPLAR_SEED, task, _STORE)
    g = task_generator(EXEMPLAR_SEED, task, _HELDOUT)
    keep = []
    y = y.cpu()
    for j in range(num_classes):
        idx = torch.nonzero(y == j).flatten()
        stored = idx[subsample(len(idx), exemplars, g_store)]  # the same draw select_exemplars makes
        rest = idx[~torch.isin(idx, stored)]
        keep.append(rest[subsample(len(rest), per_class, g)])
    idx = torch.cat(keep) if keep else torch.zeros(0, dtype=torch.long)
    return x.cpu()[idx], y[idx]


def heldout_tensors(images: Tensor, labels: Tensor) -> Dict[str, Tensor]:
    """An entry's held-out images as they are kept beside its stored ones
    (``model.set_exemplars(..., replace=False)``): ``heldout_images`` (uint8 when in
    [0, 1], as :func:`~avalanche_sdr.models.stored.stored_images`) and ``heldout_labels``;
    counted in memory, checkpointed.

    :param images: [m, C, H, W] float images; ``labels``: [m] int64 in the entry's head space.
    """
    return {"heldout_images": stored_images(images.detach().cpu()), "heldout_labels": labels.detach().cpu().long()}


def kept_images(model, entry: int, images_key: str, labels_key: str) -> Tuple[Tensor, Tensor]:
    """Images kept with ``entry`` under ``images_key`` / ``labels_key`` in ``model.exemplars(entry)``:
    float32 [n, C, H, W] (uint8 ones divided by 255) and int64 labels [n]; both empty (n = 0) when
    ``labels_key`` is not kept."""
    state = model.exemplars(entry)
    if labels_key not in state:
        c, h, w = model.input_shape
        return torch.zeros(0, c, h, w), torch.zeros(0, dtype=torch.long)
    return float_images(state[images_key]), state[labels_key]


def stored(model, entry: int) -> Tuple[Tensor, Tensor]:
    """``entry``'s stored images (``model.exemplars``): float32 [n, C, H, W] (uint8 ones
    divided by 255) and int64 labels [n]; both empty (n = 0) when none are stored."""
    return kept_images(model, entry, "images", "labels")


def heldout(model, entry: int) -> Tuple[Tensor, Tensor]:
    """``entry``'s held-out images (:func:`heldout_tensors`): float32 [m, C, H, W] and int64
    labels [m]; both empty (m = 0) when none are kept."""
    return kept_images(model, entry, "heldout_images", "heldout_labels")


def split_repeat(y: Tensor, num_classes: int, share: float, task: int) -> Tuple[Tensor, Tensor]:
    """A stratified seeded split of a repeat's images into what the update trains on and
    what :class:`EarlyStop` scores: ``round(share * n_k)`` images of each class k, at most
    ``n_k - 1`` (a class keeps at least one training image).

    :param y: [n] int64 local labels 0..c-1.
    :return: ``(train indices, held-out indices)``, sorted int64, disjoint, covering 0..n-1.
    """
    g = task_generator(EXEMPLAR_SEED, task, _SPLIT)
    y = y.cpu()
    out = []
    for j in range(num_classes):
        idx = torch.nonzero(y == j).flatten()
        k = min(int(math.floor(share * len(idx) + 0.5)), max(len(idx) - 1, 0))
        out.append(idx[subsample(len(idx), k, g)] if k else idx[:0])
    val = torch.sort(torch.cat(out)).values if out else torch.zeros(0, dtype=torch.long)
    train = torch.arange(len(y))[~torch.isin(torch.arange(len(y)), val)]
    return train, val


def balanced_weights(labels: Tensor, width: int) -> Tensor:
    """Cross-entropy class weights under which every class present in ``labels`` weighs
    the same in total: ``n / (c * n_k)`` for class column k (1 for absent columns).

    :param labels: [n] int64 output columns (local labels, or class ids).
    :param width: number of output columns (logits' width).
    :return: [width] float32.
    """
    counts = torch.bincount(labels.cpu(), minlength=width).float()
    present = counts > 0
    weights = torch.ones(width)
    weights[present] = labels.numel() / (int(present.sum()) * counts[present])
    return weights


BALANCE_LEVEL = 0.01
"""Level of :class:`ShiftedBalance`'s chi-square test: a repeat whose class counts differ
from the entry's creating task's with p < this gets the balanced update. Fixed in
advance (the level of the library's two-sample test), not tuned."""


def class_counts(model, entry: int) -> Optional[Tensor]:
    """The class counts kept for ``entry`` (``class_counts`` beside its stored images, what
    :class:`ShiftedBalance` compares a repeat with): [c] int64 on the CPU, or ``None`` when
    none are kept (an entry stored before counts were kept)."""
    counts = model.exemplars(entry).get("class_counts")
    return None if counts is None else counts.cpu()


def counts_p_value(repeat: Tensor, reference: Tensor) -> float:
    """Pearson's chi-square test of homogeneity (no continuity correction) of two class
    count vectors: p-value of "both are drawn from the same class proportions".

    :param repeat: [c] int64 counts; ``reference``: [c] int64 counts, the same classes in
        the same order. Classes absent from both are left out (df = classes left - 1).
    :return: p in [0, 1]; 1.0 when fewer than two classes are left or either total is 0.
    :raises ValueError: shapes differ, or a count is negative.
    """
    from scipy.stats import chi2_contingency

    repeat, reference = repeat.detach().cpu().double(), reference.detach().cpu().double()
    if repeat.dim() != 1 or repeat.shape != reference.shape:
        raise ValueError(f"class counts must be two [c] vectors of one length, got shapes {tuple(repeat.shape)} "
                         f"and {tuple(reference.shape)}")
    if bool((repeat < 0).any()) or bool((reference < 0).any()):
        raise ValueError(f"class counts must be non-negative, got {repeat.tolist()} and {reference.tolist()}")
    table = torch.stack([repeat, reference])
    table = table[:, table.sum(dim=0) > 0]
    if table.shape[1] < 2 or bool((table.sum(dim=1) == 0).any()):
        return 1.0
    return float(chi2_contingency(table.numpy(), correction=False).pvalue)


def equal_counts_p_value(counts: Tensor) -> float:
    """Pearson's chi-square goodness-of-fit test of class counts against equal class
    proportions: p-value of "drawn with every class equally likely".

    :param counts: [c] int64 counts, every class of the head (an absent class counts).
    :return: p in [0, 1]; 1.0 when c < 2 or the total is 0.
    :raises ValueError: not a [c] vector, or a count is negative.
    """
    from scipy.stats import chisquare

    counts = counts.detach().cpu().double()
    if counts.dim() != 1:
        raise ValueError(f"class counts must be a [c] vector, got shape {tuple(counts.shape)}")
    if bool((counts < 0).any()):
        raise ValueError(f"class counts must be non-negative, got {counts.tolist()}")
    total = float(counts.sum())
    if counts.numel() < 2 or total == 0:
        return 1.0
    return float(chisquare(counts.numpy()).pvalue)


@dataclass(frozen=True)
class BalanceDecision:
    """What a :class:`BalanceRule` decided for one update: ``balanced`` (class weights and
    BatchNorm copies in eval mode) or the plain update, and the test's ``p_value``
    (``None`` when the rule tests nothing)."""

    balanced: bool
    p_value: Optional[float] = None


class BalanceRule(abc.ABC):
    """Which learning-reuse updates are class-balanced (``SDRSettings.update_balance``; the
    rules by name: :data:`BALANCE_RULES`). ``needs_counts``: the rule reads the class
    counts of the entry's creating task (kept at the entry's creation,
    :func:`store_class_counts`)."""

    name = ""
    needs_counts = False

    @abc.abstractmethod
    def decide(self, repeat_counts: Tensor, entry_counts: Optional[Tensor]) -> BalanceDecision:
        """Whether the update of a repeat is balanced.

        :param repeat_counts: [c] int64, the repeat's training images per class of the
            entry's head (the class matching applied).
        :param entry_counts: [c] int64, the creating task's, or ``None`` when none are kept.
        """

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class AlwaysBalance(BalanceRule):
    """``"always"``: every update is balanced (the rule before ``"when_shifted"``; what
    ``update_balance=True`` means)."""

    name = "always"

    def decide(self, repeat_counts: Tensor, entry_counts: Optional[Tensor]) -> BalanceDecision:
        return BalanceDecision(balanced=True)


class ShiftedBalance(BalanceRule):
    """``"when_shifted"``: an update is balanced unless the repeat's class counts match both
    the entry's creating task's and equal counts within sampling noise (two
    :func:`counts_p_value` tests, each at :data:`BALANCE_LEVEL`; the decision's
    ``p_value`` is the smaller). So a balanced repeat of an entry created on balanced
    data trains as the plain update does (mean loss, BatchNorm in training mode), and a
    repeat in another balance, or of an entry created on imbalanced data, cannot move the
    statistics or the head's class balance. An entry without kept counts gets the
    balanced update (as ``"always"``)."""

    name = "when_shifted"
    needs_counts = True

    def __init__(self, level: float = BALANCE_LEVEL):
        if isinstance(level, bool) or not isinstance(level, (int, float)) or not 0 < level < 1:
            raise ValueError(f"level must lie in (0, 1), got {level!r}")
        self.level = float(level)

    def decide(self, repeat_counts: Tensor, entry_counts: Optional[Tensor]) -> BalanceDecision:
        if entry_counts is None:
            return BalanceDecision(balanced=True)
        p = min(counts_p_value(repeat_counts, entry_counts), equal_counts_p_value(repeat_counts),
                equal_counts_p_value(entry_counts))
        return BalanceDecision(balanced=p < self.level, p_value=p)

    def __repr__(self) -> str:
        return f"ShiftedBalance(level={self.level})"


BALANCE_RULES: Dict[str, type] = {AlwaysBalance.name: AlwaysBalance, ShiftedBalance.name: ShiftedBalance}
"""The balance rules by name (``SDRSettings(update_balance=NAME)``)."""


def make_balance_rule(name: str) -> BalanceRule:
    """The :class:`BalanceRule` named ``name`` (:data:`BALANCE_RULES`), with its defaults.

    :raises ValueError: an unknown name (the message lists them).
    """
    if name not in BALANCE_RULES:
        raise ValueError(f"unknown balance rule {name!r}; the rules are {sorted(BALANCE_RULES)} "
                         "(or update_balance=False for the plain update)")
    return BALANCE_RULES[name]()


def entry_batchnorms(model, entry: int) -> List[nn.Module]:
    """``entry``'s BatchNorm copies (the modules a balanced update keeps in eval mode)."""
    return [m for m in model.encoder.entry_modules(entry) if isinstance(m, nn.modules.batchnorm._BatchNorm)]


class EntrySnapshot:
    """A copy of what an update trains: ``entry``'s adapters and BatchNorm copies
    (parameters and buffers, running statistics included) and the head of ``owner``.

    :param model: the repository; ``entry``: the entry; ``owner``: the task whose head
        the entry's tasks answer through (its creating task).
    """

    def __init__(self, model, entry: int, owner: int):
        self._tensors = self._live(model, entry, owner)
        self.saved = [t.detach().clone() for t in self._tensors]

    @staticmethod
    def _live(model, entry: int, owner: int) -> List[Tensor]:
        modules = list(model.encoder.entry_modules(entry)) + [model.heads.module(owner)]
        return [t for m in modules for t in list(m.parameters()) + list(m.buffers())]

    @torch.no_grad()
    def restore(self) -> None:
        """Write the saved values back into the same tensors (exactly, in place)."""
        for live, saved in zip(self._tensors, self.saved):
            live.copy_(saved)

    def take(self) -> None:
        """Save the current values instead."""
        self.saved = [t.detach().clone() for t in self._tensors]


@torch.no_grad()
def balanced_loss(model, entry: int, owner: int, x: Tensor, y: Tensor, batch_size: Optional[int] = None) -> float:
    """Class-balanced mean cross-entropy (nats) of ``owner``'s head on ``entry``'s
    features of ``x`` (eval mode): the mean over classes of each class's mean loss.

    :param x: [n, C, H, W] images; ``y``: [n] int64 labels in the head's output space.
    :return: nats; NaN when ``n == 0``.
    """
    if x.shape[0] == 0:
        return float("nan")
    logits = head_logits(model, entry, owner, x, batch_size)
    losses = nn.functional.cross_entropy(logits, y.cpu(), reduction="none")
    y = y.cpu()
    return float(torch.stack([losses[y == k].mean() for k in torch.unique(y)]).mean())


class EarlyStop:
    """Stops an update when the repeat adds nothing more (``update_early_stop``): after
    every epoch the class-balanced loss (:func:`balanced_loss`) on the repeat's held-out
    share is compared with the best epoch's so far; after :data:`EARLY_STOP_PATIENCE`
    epochs without a strictly lower loss the update stops and the best epoch's state is
    restored. The first epoch is always kept (the state before the update is no
    candidate: whether an update may stay is the rollback's question, asked on the
    entry's own held-out images).

    :param model: the repository; ``entry``, ``owner``: as :class:`EntrySnapshot`.
    :param x: [m, C, H, W] the repeat's held-out images; ``y``: [m] int64 labels in the
        owner head's output space (the permutation applied).
    """

    def __init__(self, model, entry: int, owner: int, x: Tensor, y: Tensor):
        self.entry, self.owner, self.x, self.y = int(entry), int(owner), x, y
        self.best = math.inf
        self.best_epochs = 0
        self.epochs = 0
        self.losses: List[float] = []
        self._best_state: Optional[EntrySnapshot] = None

    def after_epoch(self, model) -> bool:
        """Score the epoch just trained; ``True`` when the update should stop (the best
        epoch's state is then restored)."""
        self.epochs += 1
        loss = balanced_loss(model, self.entry, self.owner, self.x, self.y)
        self.losses.append(loss)
        if loss < self.best or self._best_state is None:
            self.best, self.best_epochs = loss, self.epochs
            if self._best_state is None:
                self._best_state = EntrySnapshot(model, self.entry, self.owner)
            else:
                self._best_state.take()
            return False
        if self.epochs - self.best_epochs >= EARLY_STOP_PATIENCE:
            self._best_state.restore()
            return True
        return False

    def finish(self) -> None:
        """At the end of the update (stopped or not): keep the best epoch's state."""
        if self._best_state is not None and self.best_epochs != self.epochs:
            self._best_state.restore()


@torch.no_grad()
def heldout_correct(model, entry: int, owner: int) -> Optional[int]:
    """Images of ``entry``'s held-out set (:func:`heldout`) its ``owner``'s head classifies
    right (eval mode); ``None`` when none are kept."""
    x, y = heldout(model, entry)
    if len(y) == 0:
        return None
    return int(round(head_accuracy(model, entry, owner, x, y) * len(y)))


def rollback_check(before: Optional[int], after: Optional[int]) -> bool:
    """The rollback rule, fixed in advance: undo the update when it classifies fewer of the
    entry's held-out images right than before it (any net loss; ``False`` without a
    held-out set)."""
    return before is not None and after is not None and after < before


@torch.no_grad()
def head_accuracy(model, entry: int, owner: int, x: Tensor, y: Tensor, batch_size: Optional[int] = None) -> float:
    """Accuracy of ``owner``'s head on ``entry``'s features of ``x`` (eval mode).

    :param x: [n, C, H, W] images; ``y``: [n] labels in the head's output space.
    :return: fraction correct in [0, 1]; NaN when ``n == 0``.
    """
    if x.shape[0] == 0:
        return float("nan")
    predicted = head_logits(model, entry, owner, x, batch_size).argmax(dim=1)
    return float((predicted == y.cpu()).float().mean())


@torch.no_grad()
def head_logits(model, entry: int, owner: int, x: Tensor, batch_size: Optional[int] = None) -> Tensor:
    """Logits of ``owner``'s head on ``entry``'s features of ``x``, head and entry in eval mode.

    :param x: [n, C, H, W] images (n >= 1).
    :return: [n, width] float32 logits, on the CPU.
    """
    feats = model.batched_features(x, entry, batch_size)
    head = model.heads.module(owner)
    was_training = head.training
    head.eval()
    try:
        device = next(head.parameters()).device
        return head(feats.to(device)).cpu()
    finally:
        head.train(was_training)


@dataclass(frozen=True)
class GateResult:
    """What :func:`gate` measured: ``accuracy`` of the entry's head on the repeat
    (through the permutation), the ``threshold`` it had to reach, and ``passed``."""

    accuracy: float
    threshold: float
    passed: bool


def gate(model, entry: int, x: Tensor, y: Tensor, num_classes: int, permutation: Sequence[int]) -> GateResult:
    """The guard's check before an update (module doc): does the entry's head already
    classify the repeat's training data?

    :param x: [n, C, H, W] the repeat's training images; ``y``: [n] its local labels.
    :param permutation: the entry class of each local class of the repeat.
    :return: accuracy, threshold = (1/c + reference) / 2 with reference the head's
        accuracy on the entry's stored images (1.0 when none are stored), and whether
        accuracy >= threshold.
    """
    owner = model.entry_creator[int(entry)]
    perm = torch.as_tensor(list(permutation), dtype=torch.long)
    accuracy = head_accuracy(model, entry, owner, x, perm[y.cpu()])
    stored_x, stored_y = stored(model, entry)
    reference = head_accuracy(model, entry, owner, stored_x, stored_y) if len(stored_y) else 1.0
    threshold = 0.5 * (1.0 / num_classes + reference)
    return GateResult(accuracy=accuracy, threshold=threshold, passed=accuracy >= threshold)


class ExemplarReplay:
    """Draws replay mini-batches from one entry's stored images during an update.

    :param model: the repository; ``entry``: the entry being updated; ``task``: the
        task training it (seeds the draws); ``batch_size``: images per draw (the
        training mini-batch size).
    """

    def __init__(self, model, entry: int, task: int, batch_size: int):
        self.entry = int(entry)
        self.owner = model.entry_creator[self.entry]
        self.images, self.labels = stored(model, self.entry)
        self.batch_size = int(batch_size)
        self._generator = task_generator(EXEMPLAR_SEED, task, _REPLAY)

    def __len__(self) -> int:
        return int(self.labels.shape[0])

    def loss(self, model, criterion, device) -> Optional[Tensor]:
        """Cross-entropy of the entry's head on a seeded draw of the stored images
        (``None`` when none are stored). The entry runs in training mode, as the
        repeat's own mini-batch does."""
        n = len(self)
        if n == 0:
            return None
        idx = torch.randperm(n, generator=self._generator)[: min(n, self.batch_size)]
        feats = model.features(self.images[idx].to(device), self.entry)
        logits = model.heads.module(self.owner)(feats)
        return criterion(logits, self.labels[idx].to(device))


__all__ = ["AlwaysBalance", "BALANCE_LEVEL", "BALANCE_RULES", "BalanceDecision", "BalanceRule",
           "EARLY_STOP_PATIENCE", "EXEMPLAR_SEED", "EarlyStop", "EntrySnapshot", "ExemplarReplay",
           "GUARD_HELDOUT_PER_CLASS", "GateResult", "REPEAT_HOLDOUT_SHARE", "ReuseRecord", "ShiftedBalance",
           "balanced_loss", "balanced_weights", "class_counts", "counts_p_value", "entry_batchnorms", "entry_updatable",
           "equal_counts_p_value", "gate", "head_accuracy", "head_logits", "heldout", "heldout_correct",
           "heldout_tensors", "kept_images", "make_balance_rule", "rollback_check", "select_exemplars", "select_heldout",
           "split_repeat", "stored"]
