"""The learning reuse (:class:`LearningReuse`, ``reuse="accumulate"``): a repeat keeps training its entry.

The paper's reuse (``reuse="head"``) freezes a reused entry and trains a new head, so
the repeat's data improves nothing that stays. Here a detected repeat answers through
the head of the entry's creating task (classes matched by the detector's
``class_permutation``) and trains the entry's adapters, BatchNorm copies and that
head, so every task mapped to the entry gains. Why a guard (``guard``, on by
default): a wrong reuse would now damage those tasks, so the head must first classify
the repeat's data at least midway between chance and its accuracy on the entry's
stored images (:func:`gate`, else a new entry), and those images are replayed in every
update mini-batch (:class:`ExemplarReplay`). Draws use generators seeded by task and
purpose, so a resumed run draws the same.

An update must not hurt the entry's earlier tasks (``balance``,
``rollback``, on by default). A balanced update weights the repeat's
mini-batches so that every class counts equally and keeps the entry's BatchNorm copies
on their stored statistics (an 85/15 repeat moves neither the head's class balance nor
the statistics). A :class:`BalanceRule` (:data:`BALANCE_RULES`) says which updates are
balanced: every one (``"always"``), or every one but a repeat whose class counts match
both its entry's creating task's and equal counts within sampling noise
(``"when_shifted"``, the default: that repeat gets the plain update). An update that
lowers the entry's accuracy on images of its creating task kept beside the replayed
ones and never used by an update is undone (:class:`EntrySnapshot`,
:func:`rollback_check`). With ``early_stop`` (off by default) the update stops
once a held-out share of the repeat no longer improves (:class:`EarlyStop`).

Gate, replay, balance, early stop, rollback and the entries never updated:
docs/method.rst, section "The learning reuse: gate, replay and entries never updated".
"""
from __future__ import annotations

import abc
import math
import dataclasses
import time
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor, nn

from avalanche_sdr._draws import subsample, task_generator
from avalanche_sdr._checks import check_int, check_positive
from avalanche_sdr.models.stored import float_images, stored_images
from avalanche_sdr.training.reuse import Reuse, ReuseRecord

EXEMPLAR_SEED = 0x5D3
"""Base seed of the learning reuse's generators (stored images, replay draws,
held-out images, the repeat's held-out share)."""
_STORE, _REPLAY, _HELDOUT, _SPLIT = 0, 1, 2, 3

GUARD_HELDOUT_PER_CLASS = 10
"""Held-out images kept per class of a new entry (``rollback``): drawn from its
creating task's training images outside the replayed ones, never trained on after the
entry's creation; what :func:`rollback_check` measures. Fixed in advance (not tuned):
with 2-class tasks 20 images, so one image is 5 points of accuracy."""

REPEAT_HOLDOUT_SHARE = 0.2
"""Share of each class of a repeat held out of its update (``early_stop``): the
data :class:`EarlyStop` scores after every epoch. Fixed in advance (not tuned)."""

EARLY_STOP_PATIENCE = 1
"""Epochs without a lower held-out loss after which an update stops (then the best
epoch's state is kept). Fixed in advance (not tuned)."""


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
    """Which learning-reuse updates are class-balanced (``LearningReuse(balance=...)``; the
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
    ``balance=True`` means)."""

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
"""The balance rules by name (``LearningReuse(balance=NAME)``)."""


def make_balance_rule(name: str) -> BalanceRule:
    """The :class:`BalanceRule` named ``name`` (:data:`BALANCE_RULES`), with its defaults.

    :raises ValueError: an unknown name (the message lists them).
    """
    if name not in BALANCE_RULES:
        raise ValueError(f"unknown balance rule {name!r}; the rules are {sorted(BALANCE_RULES)} "
                         "(or balance=False for the plain update)")
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
    """Stops an update when the repeat adds nothing more (``early_stop``): after
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


MOVED_SETTINGS = {"reuse_guard": "guard", "guard_exemplars": "guard_exemplars", "update_balance": "balance",
                  "update_early_stop": "early_stop", "update_rollback": "rollback", "update_epochs": "epochs",
                  "update_lr": "lr"}
"""The former :class:`~avalanche_sdr.training.SDRSettings` fields of the learning reuse, each
mapped to its :class:`LearningReuse` keyword: a strategy keyword of a former name is refused
with a message naming the keyword, and a checkpoint of the former layout loads."""


class _UpdateState:
    """What one update carries between hooks (:meth:`LearningReuse.begin`):
    ``train_indices`` ([n'] int64, the repeat's images it trains on; ``None``: all),
    ``early_stop``, ``weights`` ([width] float32 class weights; ``None``: plain mean),
    ``batchnorms`` (the entry's BatchNorm copies kept in eval mode), ``snapshot`` and
    ``heldout_before`` (the rollback's state and score before the update), ``steps`` (the
    update's mini-batches so far, which ``replay_every`` counts)."""

    def __init__(self):
        self.steps = 0
        self.train_indices: Optional[Tensor] = None
        self.early_stop: Optional[EarlyStop] = None
        self.weights: Optional[Tensor] = None
        self.batchnorms: List[nn.Module] = []
        self.snapshot: Optional[EntrySnapshot] = None
        self.heldout_before: Optional[int] = None


class LearningReuse(Reuse):
    """The learning reuse (``"accumulate"``, beyond the paper; module doc): a detected
    repeat answers through its entry's head and keeps training the entry, so every task
    mapped to the entry answers through the updated entry.

    :param lr: Adam learning rate of an update (default 0.001, the paper's head-only
        rate: the entry and its head are trained already, so they continue at a low rate).
    :param guard: guard the entries against a wrong reuse (default ``True``). Before an
        update the entry's head must classify the repeat's training data at least midway
        between chance and its accuracy on its stored images (:func:`gate`; else the
        repeat gets a new entry), and the stored images are replayed during the update
        (:class:`ExemplarReplay`).
    :param guard_exemplars: with ``guard``: training images kept per class of each entry
        (its creating task's, stored as uint8 when they lie in [0, 1]; counted in memory
        and checkpointed); 0 keeps none (the gate then compares with accuracy 1). Default 5.
    :param balance: which updates are class-balanced (class weights n / (c n_k), the
        entry's BatchNorm copies on their stored statistics): a rule name of
        :data:`BALANCE_RULES` (``"when_shifted"``: every update but a repeat whose class
        counts match both its entry's creating task's and equal counts, chi-square tests
        at :data:`BALANCE_LEVEL`, which needs ``guard`` and ``guard_exemplars > 0``: the
        counts are kept beside the stored images; ``"always"``, as ``True``), ``False``
        (never: the plain mean and train-mode BatchNorm) or ``None`` (default:
        ``"when_shifted"`` where the guard stores images, else ``"always"``).
    :param early_stop: train on all but :data:`REPEAT_HOLDOUT_SHARE` of each class of the
        repeat and stop once the class-balanced loss there has not fallen for
        :data:`EARLY_STOP_PATIENCE` epoch, keeping the best epoch (:class:`EarlyStop`).
        ``None`` (default) or ``False``: off (measured to cost accuracy,
        docs/results/learning_reuse.md).
    :param rollback: a new entry keeps :data:`GUARD_HELDOUT_PER_CLASS` further training
        images per class, never replayed; an update that classifies fewer of them right
        than before it is undone (:class:`EntrySnapshot`). ``None`` (default): on where
        the guard stores images; ``True`` needs that.
    :param epochs: epochs of an update (``None``, default: the budget's ``reuse_epochs``;
        which count keeps the accuracy: docs/results/learning_reuse.md, "Fewer epochs per
        update").
    :param top_layers: an update trains only the entry's top: the adapters of its last
        ``top_layers`` adapted convolutions and the BatchNorm copies after the first of them
        (:meth:`~avalanche_sdr.models.eft.EFTEncoder.top_entry_modules`), with the head; the
        lower adapters stay as they are and their BatchNorm copies run in eval mode (their
        statistics stay), so no gradient flows below the top. ``None`` (default): the whole
        entry. What it saves and costs: docs/results/learning_reuse/top_layers.md.
    :param replay_every: the guard's replay joins one update mini-batch in ``replay_every``
        (the 1st, the ``replay_every + 1``-th, ... of the update), its loss unscaled; the
        other mini-batches train on the repeat alone. 1 (default): every mini-batch. A
        replayed mini-batch costs about twice a plain one, so larger values trade the
        replay's protection of the entry's earlier tasks (the rollback still checks them)
        for compute. What it saves and costs: docs/results/learning_reuse/replay_every.md.
    :raises ValueError: an option out of range, or one that cannot act with the others
        (the message names the keyword and what to pass instead).
    """

    name = "accumulate"
    OPTIONS = ("lr", "guard", "guard_exemplars", "balance", "early_stop", "rollback", "epochs", "top_layers",
               "replay_every")

    def __init__(self, *, lr: float = 0.001, guard: bool = True, guard_exemplars: int = 5,
                 balance: Union[None, bool, str] = None, early_stop: Optional[bool] = None,
                 rollback: Optional[bool] = None, epochs: Optional[int] = None, top_layers: Optional[int] = None,
                 replay_every: int = 1):
        check_positive(lr, "lr", hint=" (Adam's learning rate of an update)")
        if not isinstance(guard, bool):
            raise ValueError(f"LearningReuse: guard must be a bool, got {guard!r}")
        check_int(guard_exemplars, "guard_exemplars", minimum=0)
        for option, value, words in (("balance", balance, sorted(BALANCE_RULES)), ("early_stop", early_stop, []),
                                     ("rollback", rollback, [])):
            if not (value is None or isinstance(value, bool) or (isinstance(value, str) and value in words)):
                raise ValueError(f"LearningReuse: {option} must be None (the default) or a bool"
                                 + (f" or a balance rule name {words}" if words else "") + f", got {value!r}")
        if epochs is not None:
            check_int(epochs, "epochs", minimum=1)
        if top_layers is not None:
            check_int(top_layers, "top_layers", hint=" (adapted convolutions an update trains, counted from the "
                                                       "last; None: all)")
        check_int(replay_every, "replay_every", minimum=1,
                  hint=" (update mini-batches per replayed one; 1: every mini-batch replays)")
        stores = guard and guard_exemplars > 0
        if replay_every != 1 and not stores:
            raise ValueError(f"LearningReuse: replay_every={replay_every} spaces the guard's replay, which needs "
                             "guard=True and guard_exemplars > 0; set replay_every=1")
        if isinstance(balance, str) and BALANCE_RULES[balance].needs_counts and not stores:
            raise ValueError(f"LearningReuse: balance={balance!r} compares a repeat's class counts with those kept "
                             "beside the guard's stored images: it needs guard=True and guard_exemplars > 0; set "
                             "balance='always', False or None")
        if rollback and not stores:
            raise ValueError("LearningReuse: rollback=True needs guard=True and guard_exemplars > 0 (its held-out "
                             "images are kept beside the guard's stored ones); set rollback=False or None")
        self.lr, self.guard, self.guard_exemplars = float(lr), guard, int(guard_exemplars)
        self.balance, self.early_stop, self.rollback = balance, early_stop, rollback
        self.epochs = None if epochs is None else int(epochs)
        self.top_layers = None if top_layers is None else int(top_layers)
        self.replay_every = int(replay_every)
        self._replay: Optional[ExemplarReplay] = None
        self._update: Optional[_UpdateState] = None

    # ------------------------------------------------------------ what the options mean
    @property
    def stores_guard_images(self) -> bool:
        """``guard`` with ``guard_exemplars > 0``: the guard keeps images of each entry's
        creating task, beside which the rollback's held-out images and the balance rule's
        class counts are kept."""
        return self.guard and self.guard_exemplars > 0

    @property
    def rolls_back(self) -> bool:
        """Whether updates are rolled back (``rollback``, ``None``: where the guard stores images)."""
        return self.stores_guard_images if self.rollback is None else self.rollback

    @property
    def stops_early(self) -> bool:
        """Whether updates stop early (``early_stop``; ``None``: off)."""
        return bool(self.early_stop)

    def balance_rule(self) -> Optional[BalanceRule]:
        """The rule deciding which updates are balanced (``balance``), or ``None`` where
        none is (``balance=False``)."""
        value = self.balance
        if value is False:
            return None
        if value is True:
            return AlwaysBalance()
        if value is None:
            value = "when_shifted" if self.stores_guard_images else "always"
        return make_balance_rule(value)

    # ------------------------------------------------------------ hooks
    def start(self) -> None:
        self._replay = None
        self._update = None

    def new_entry(self, model, entry: int, data, settings) -> None:
        """Keep the guard's images of the new entry (``guard_exemplars`` per class), with
        ``rollback`` its held-out images (:data:`GUARD_HELDOUT_PER_CLASS` per class), and
        where the balance rule reads them, its task's class counts ([c] int64)."""
        if not self.stores_guard_images:
            return
        x, y, num_classes, task = data.x, data.y, data.num_classes, data.task
        images, labels = select_exemplars(x, y, num_classes, self.guard_exemplars, task)
        model.set_exemplars(entry, {"images": stored_images(images.detach().cpu()), "labels": labels.detach().cpu().long()})
        if self.rolls_back:
            images, labels = select_heldout(x, y, num_classes, GUARD_HELDOUT_PER_CLASS, self.guard_exemplars, task)
            model.set_exemplars(entry, heldout_tensors(images, labels), replace=False)
        rule = self.balance_rule()
        if rule is not None and rule.needs_counts:
            model.set_exemplars(entry, {"class_counts": torch.bincount(y.cpu(), minlength=num_classes)}, replace=False)

    def known_task(self, model, task: int, entry: int) -> ReuseRecord:
        """A task label trained again updates its entry where every task of the entry
        answers through the entry's head (else its own head only)."""
        updated = model.heads.owner(task) == model.entry_creator[entry] and entry_updatable(model, entry)
        return ReuseRecord(entry_updated=updated)

    def decide(self, model, record, data):
        """Update the entry, reuse it head-only (its heads cannot all follow an update), or,
        refused by the guard's gate, a new entry (the gate's seconds count as detection's)."""
        entry = record.reused_entry
        creator = model.entry_creator[entry]
        num_classes = data.num_classes
        if model.heads.num_classes(creator) != num_classes or not entry_updatable(model, entry):
            return record, ReuseRecord()
        if not self.guard:
            return record, ReuseRecord(entry_updated=True)
        start = time.perf_counter()
        result = gate(model, entry, data.x, data.y, num_classes, record.class_permutation or range(num_classes))
        seconds = record.detection_seconds + time.perf_counter() - start
        measured = dict(gate_accuracy=result.accuracy, gate_threshold=result.threshold)
        if not result.passed:
            return (dataclasses.replace(record, decision="new", entry=-1, reused_entry=None, class_permutation=[],
                                        detection_seconds=seconds), ReuseRecord(**measured))
        return dataclasses.replace(record, detection_seconds=seconds), ReuseRecord(entry_updated=True, **measured)

    def begin(self, model, record, reuse: ReuseRecord, data, settings) -> None:
        """An update: the repeat answers through the creating task's head, the replay, the
        training share and the early stop on the rest, the class weights and BatchNorm
        copies of a balanced update where the balance rule asks for one (recorded in
        ``reuse``: ``update_balanced``, ``balance_p_value``), the state and held-out score
        to roll back to."""
        if not reuse.entry_updated:
            return
        entry, task = record.entry, record.task
        owner = model.entry_creator[entry]
        if not model.heads.is_trained(task):
            model.link_head(task, owner, record.class_permutation or None)
        self._replay = ExemplarReplay(model, entry, task, settings.train_mb_size)
        x, y, num_classes, class_ids = data.x, data.y, data.num_classes, data.class_ids
        state = _UpdateState()
        train = torch.arange(len(y))
        if self.stops_early:
            train, held = split_repeat(y, num_classes, REPEAT_HOLDOUT_SHARE, task)
            if len(held):
                state.train_indices = train
                state.early_stop = EarlyStop(model, entry, owner, x[held], model.heads.labels(task, y[held]))
        rule = self.balance_rule()
        if rule is not None:
            counts = torch.bincount(model.heads.labels(task, y[train]).cpu(), minlength=model.heads.num_classes(owner))
            decision = rule.decide(counts, class_counts(model, entry) if rule.needs_counts else None)
            reuse.update_balanced, reuse.balance_p_value = decision.balanced, decision.p_value
            if decision.balanced:
                state.weights = balanced_weights(class_ids[y[train]], int(class_ids.max()) + 1)
                state.batchnorms = entry_batchnorms(model, entry)
        if not state.batchnorms:  # below the top (top_layers), the statistics stay too
            state.batchnorms = self._lower_batchnorms(model, entry)
        if self.rolls_back:
            state.snapshot = EntrySnapshot(model, entry, owner)
            state.heldout_before = heldout_correct(model, entry, owner)
        self._update = state

    def train_epochs(self, reuse: ReuseRecord, settings) -> int:
        """An update's ``epochs`` (``None``: ``settings.reuse_epochs``); a repeat trained
        head-only: ``settings.reuse_epochs``."""
        if reuse.entry_updated and self.epochs is not None:
            return self.epochs
        return settings.reuse_epochs

    def train_lr(self, reuse: ReuseRecord, settings) -> float:
        return self.lr if reuse.entry_updated else settings.reuse_lr

    def update_parameters(self, model, entry: int) -> List[nn.Parameter]:
        """The entry's parameters an update trains: with ``top_layers``, those of its top
        (:meth:`~avalanche_sdr.models.eft.EFTEncoder.top_entry_modules`), else all."""
        if self.top_layers is None:
            return super().update_parameters(model, entry)
        return [p for m in model.encoder.top_entry_modules(entry, self.top_layers) for p in m.parameters()]

    def _lower_batchnorms(self, model, entry: int) -> List[nn.Module]:
        """With ``top_layers``: the entry's BatchNorm copies below its top (kept in eval mode
        during an update); else none."""
        if self.top_layers is None:
            return []
        top = {id(m) for m in model.encoder.top_entry_modules(entry, self.top_layers)}
        return [bn for bn in entry_batchnorms(model, entry) if id(bn) not in top]

    def training_indices(self) -> Optional[Tensor]:
        return None if self._update is None else self._update.train_indices

    def before_iteration(self) -> None:
        if self._update is not None:
            for bn in self._update.batchnorms:  # a balanced update normalises with the stored statistics
                bn.eval()

    def loss(self, strategy) -> None:
        """A balanced update's class weights (the criterion's plain mean replaced: SDR's
        plugin runs first), then the replay's loss added (on one mini-batch in ``replay_every``)."""
        if self._update is None:
            return
        if self._update.weights is not None:
            strategy.loss = torch.nn.functional.cross_entropy(
                strategy.mb_output, strategy.mb_y, weight=self._update.weights.to(strategy.mb_output.device))
        step, self._update.steps = self._update.steps, self._update.steps + 1
        if self._replay is not None and len(self._replay) and step % self.replay_every == 0:
            strategy.loss = strategy.loss + self._replay.loss(strategy.model, torch.nn.functional.cross_entropy,
                                                              strategy.device)

    def epoch_done(self, model) -> bool:
        early_stop = None if self._update is None else self._update.early_stop
        return early_stop is not None and early_stop.after_epoch(model)

    def end(self, model, record, reuse: ReuseRecord, data, settings) -> None:
        """After the update's last epoch: keep the early stop's best epoch, then roll the
        update back if it lowered the entry's held-out accuracy (both recorded in ``reuse``)."""
        state, self._update, self._replay = self._update, None, None
        if not reuse.entry_updated or state is None:
            return
        if state.early_stop is not None:
            state.early_stop.finish()
            reuse.update_epochs = state.early_stop.best_epochs
        if state.snapshot is not None and state.heldout_before is not None:
            owner = model.entry_creator[record.entry]
            after = heldout_correct(model, record.entry, owner)
            n = len(heldout(model, record.entry)[1])
            reuse.heldout_accuracy = [state.heldout_before / n, after / n]
            if rollback_check(state.heldout_before, after):
                state.snapshot.restore()
                reuse.update_rolled_back = True


__all__ = ["AlwaysBalance", "BALANCE_LEVEL", "BALANCE_RULES", "BalanceDecision", "BalanceRule",
           "EARLY_STOP_PATIENCE", "EXEMPLAR_SEED", "EarlyStop", "EntrySnapshot", "ExemplarReplay",
           "GUARD_HELDOUT_PER_CLASS", "GateResult", "LearningReuse", "MOVED_SETTINGS", "REPEAT_HOLDOUT_SHARE", "ReuseRecord", "ShiftedBalance",
           "balanced_loss", "balanced_weights", "class_counts", "counts_p_value", "entry_batchnorms", "entry_updatable",
           "equal_counts_p_value", "gate", "head_accuracy", "head_logits", "heldout", "heldout_correct",
           "heldout_tensors", "kept_images", "make_balance_rule", "rollback_check", "select_exemplars", "select_heldout",
           "split_repeat", "stored"]
