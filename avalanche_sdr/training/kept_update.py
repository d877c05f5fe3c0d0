"""A learning-reuse update kept only where held-out evidence shows no loss (:class:`NoLossReuse`, "no_loss").

The steps of the kept update (issue #45, "a learning reuse that cannot fall below
head-only"); :func:`kept_update` runs steps 3-6 for one repeat:

1. Every task an entry serves keeps a held-out set (:func:`remember_task`, sizes
   :func:`~avalanche_sdr.training.keep_rule.split_heldout`) and a new entry a few replay
   images of its creating task drawn from its training share; an update never trains on
   a held-out set. They are stored with the entry (``model.set_exemplars``: counted in
   memory, checkpointed).
2. The repeat is trained exactly as the paper's head-only reuse trains it, a head of its
   own on the frozen entry, on all its images: the **reference** for the repeat, and the
   result it keeps if the update is refused. (Its held-out images were in that training,
   so the comparison leans towards the reference: it errs towards refusing.)
3. Before the update, every task the entry serves is scored on its held-out set
   (:func:`score_task`): the reference of the earlier tasks.
4. The update (:func:`train_entry`) trains the entry's adapters and BatchNorm copies' affine
   parameters (their running statistics stay as stored: the copies run in eval mode) and
   the head of the entry's creating task, on the repeat's training share through the
   detector's class matching, with class-balanced cross-entropy and a replay mini-batch of
   the entry's replay images at every step; a generator seeded by the task orders it.
5. Candidate scores: the repeat through the creating task's head (its classes matched),
   every earlier task through the head it answers through, on the same held-out sets; the
   keep rule (:func:`~avalanche_sdr.training.keep_rule.decide`) decides.
6. Kept: the repeat drops its own head and answers through the creating task's. Refused:
   the entry's adapters, BatchNorm copies and that head are restored exactly
   (:class:`~avalanche_sdr.training.learning_reuse.EntrySnapshot`); the repeat keeps its
   head-only head, the head-only result. No update is tried where the entry's head has
   another class count than the repeat (a subset or superset task).

The rule, its sizes and the choice of this version (version A of the rule's page: the
repeat's reference trained on all its images) are in
docs/results/learning_reuse/keep_rule/rule_fixed_in_advance.md and its validation in
docs/results/learning_reuse/keep_rule/validation.md.

The update is hand-written rather than a second Avalanche training loop because it runs
after Avalanche's loop, on a share of the experience and a replay set that Avalanche's loop
does not see; it is a few lines of plain torch.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from avalanche_sdr._batching import eval_batch_size
from avalanche_sdr._checks import check_int, check_positive
from avalanche_sdr._draws import subsample, task_generator
from avalanche_sdr.models.stored import stored_images
from avalanche_sdr.training.keep_rule import KEEP_SEED, KeepDecision, compare_set, decide, split_heldout
from avalanche_sdr.training.learning_reuse import EntrySnapshot, balanced_weights, head_logits, kept_images
from avalanche_sdr.training.reuse import Reuse, ReuseRecord

_REPLAY, _ORDER, _REPLAY_DRAW = 1, 2, 3

UPDATE_EPOCHS = 3
"""Epochs of an update (fixed in advance: the count chosen for the learning reuse's updates on
validation streams, docs/results/learning_reuse.md, "Fewer epochs per update")."""

REPLAY_IMAGES, REPLAY_LABELS = "kept_replay_images", "kept_replay_labels"
"""Keys of an entry's replay images ([r, C, H, W], uint8 when in [0, 1]) and their labels
([r] int64, outputs of the creating task's head) in ``model.exemplars(entry)``."""


def heldout_keys(task: int) -> Tuple[str, str]:
    """Keys of ``task``'s held-out images and local labels in its entry's exemplars."""
    return f"kept_heldout_images_{int(task)}", f"kept_heldout_labels_{int(task)}"


def _put(model, entry: int, tensors: Dict[str, Tensor]) -> None:
    model.set_exemplars(entry, tensors, replace=not model.exemplars(entry))


def remember_task(model, entry: int, task: int, x: Tensor, y: Tensor, num_classes: int,
                  replay_per_class: int = 0) -> Tensor:
    """Keep ``task``'s held-out set with ``entry`` (and, with ``replay_per_class > 0``, the
    entry's replay images drawn from the task's training share).

    :param x: [n, C, H, W] float images in [0, 1]; ``y``: [n] int64 local labels.
    :param num_classes: the task's classes.
    :param replay_per_class: replay images per class to keep (a new entry's creating task).
    :returns: the training share's indices ([n - m] int64, sorted): what an update may train on.
    """
    train, held = split_heldout(y, num_classes, task)
    images_key, labels_key = heldout_keys(task)
    tensors = {images_key: stored_images(x[held].detach().cpu()), labels_key: y.cpu()[held].long()}
    if replay_per_class > 0:
        g = task_generator(KEEP_SEED, task, _REPLAY)
        y_train = y.cpu()[train]
        picked = [train[torch.nonzero(y_train == k).flatten()] for k in range(num_classes)]
        picked = torch.sort(torch.cat([idx[subsample(len(idx), replay_per_class, g)] for idx in picked])).values
        tensors.update({REPLAY_IMAGES: stored_images(x[picked].detach().cpu()), REPLAY_LABELS: y.cpu()[picked].long()})
    _put(model, entry, tensors)
    return train


def heldout_set(model, entry: int, task: int) -> Tuple[Tensor, Tensor]:
    """``task``'s held-out set kept with ``entry``: float32 [m, C, H, W] and int64 local labels [m]
    (m = 0 when none is kept)."""
    return kept_images(model, entry, *heldout_keys(task))


def served_tasks(model, entry: int) -> List[int]:
    """The trained tasks mapped to ``entry``, in training order."""
    return [t for t in model.trained_tasks if model.entry_of(t) == int(entry)]


def _correct_and_log_prob(logits: Tensor, y: Tensor) -> Tuple[Tensor, Tensor]:
    log_p = F.log_softmax(logits.double(), dim=1)
    return logits.argmax(dim=1) == y, log_p.gather(1, y[:, None]).squeeze(1)


@torch.no_grad()
def score_task(model, task: int, x: Tensor, y: Tensor, batch_size: Optional[int] = None) -> Tuple[Tensor, Tensor]:
    """``task``'s answers on images, as the repository predicts it (its entry, the head it
    answers through), everything in eval mode.

    :param x: [m, C, H, W] images in [0, 1]; ``y``: [m] int64 local labels of ``task``.
    :returns: ``(correct [m] bool, log-probability of the true class [m] float64)``, on the CPU.
    """
    if len(y) == 0:
        return torch.zeros(0, dtype=torch.bool), torch.zeros(0, dtype=torch.float64)
    columns = torch.as_tensor(model.heads.class_ids(task), dtype=torch.long)[y.cpu()]
    device = next(model.parameters()).device
    size = eval_batch_size(device, batch_size)
    was_training = model.training
    model.eval()
    try:
        logits = torch.cat([model.forward_single_task(x[i:i + size].to(device), task).float().cpu()
                            for i in range(0, len(y), size)])
    finally:
        model.train(was_training)
    return _correct_and_log_prob(logits, columns)


@torch.no_grad()
def score_through(model, entry: int, owner: int, permutation: Sequence[int], x: Tensor, y: Tensor,
                  batch_size: Optional[int] = None) -> Tuple[Tensor, Tensor]:
    """A repeat's answers through ``owner``'s head on ``entry`` (local class k = head output
    ``permutation[k]``), everything in eval mode: what the repeat would answer if linked.

    :param x: [m, C, H, W] images; ``y``: [m] int64 local labels of the repeat.
    :returns: as :func:`score_task`.
    """
    if len(y) == 0:
        return torch.zeros(0, dtype=torch.bool), torch.zeros(0, dtype=torch.float64)
    logits = head_logits(model, entry, owner, x, batch_size)
    logits = logits.index_select(1, torch.as_tensor(list(permutation), dtype=torch.long))
    return _correct_and_log_prob(logits, y.cpu())


def train_entry(model, entry: int, owner: int, x: Tensor, y: Tensor, *, task: int, epochs: int, lr: float,
                batch_size: int) -> None:
    """Step 4 (module doc): train ``entry``'s adapters, its BatchNorm copies' affine parameters
    and ``owner``'s head on ``(x, y)`` with class-balanced cross-entropy, plus the entry's
    replay images at every step. Everything runs in eval mode (BatchNorm statistics stay);
    all parameters are frozen again afterwards.

    :param x: [n, C, H, W] images in [0, 1]; ``y``: [n] int64 labels as outputs of ``owner``'s head.
    :param task: the repeat (seeds the order and the replay draws).
    """
    head = model.heads.module(owner)
    params = list(model.encoder.entry_parameters(entry)) + list(head.parameters())
    model.freeze_all()
    for p in params:
        p.requires_grad_(True)
    device = next(model.parameters()).device
    width = model.heads.outputs(head)
    weights = balanced_weights(y.cpu(), width).to(device)
    replay_x, replay_y = kept_images(model, entry, REPLAY_IMAGES, REPLAY_LABELS)
    order_g = task_generator(KEEP_SEED, task, _ORDER)
    replay_g = task_generator(KEEP_SEED, task, _REPLAY_DRAW)
    optimizer = torch.optim.Adam(params, lr=lr)
    was_training = model.training
    model.eval()
    try:
        for _ in range(epochs):
            order = torch.randperm(len(y), generator=order_g)
            for i in range(0, len(y), batch_size):
                idx = order[i:i + batch_size]
                logits = head(model.features(x[idx].to(device), entry))
                loss = F.cross_entropy(logits, y[idx].to(device), weight=weights)
                if len(replay_y):
                    r = torch.randperm(len(replay_y), generator=replay_g)[:batch_size]
                    replay_logits = head(model.features(replay_x[r].to(device), entry))
                    loss = loss + F.cross_entropy(replay_logits, replay_y[r].to(device))
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
    finally:
        model.freeze_all()
        model.encoder.set_active(None)
        model.train(was_training)


def kept_update(model, *, task: int, entry: int, permutation: Sequence[int], x: Tensor, y: Tensor,
                train_indices: Tensor, lr: float, batch_size: int,
                epochs: int = UPDATE_EPOCHS) -> Optional[KeepDecision]:
    """Steps 3-6 (module doc) for a repeat ``task`` trained head-only on ``entry``.

    :param permutation: the entry head's output of each local class of the repeat
        (the detector's class matching), length = the repeat's classes.
    :param x: [n, C, H, W] the repeat's images; ``y``: [n] its local labels.
    :param train_indices: the repeat's training share (what :func:`remember_task` returned).
    :returns: the keep rule's decision (``None``: no update was possible, the entry's head has
        another class count or the repeat answers through another head).
    """
    owner = model.entry_creator[int(entry)]
    perm = [int(v) for v in permutation]
    if model.heads.num_classes(owner) != len(perm) or model.heads.owner(task) != task:
        return None
    earlier = [t for t in served_tasks(model, entry) if t != task]
    sets = {t: heldout_set(model, entry, t) for t in [task] + earlier}
    before = {t: score_task(model, t, *sets[t]) for t in sets}  # the repeat: its head-only head
    snapshot = EntrySnapshot(model, entry, owner)
    train_y = torch.as_tensor(perm, dtype=torch.long)[y.cpu()[train_indices]]
    train_entry(model, entry, owner, x[train_indices], train_y, task=task, epochs=epochs, lr=lr,
                batch_size=batch_size)
    after = {task: score_through(model, entry, owner, perm, *sets[task])}
    after.update({t: score_task(model, t, *sets[t]) for t in earlier})
    comparisons = [compare_set(t, before[t][0], after[t][0]) for t in [task] + earlier]
    changes = torch.cat([after[t][1] - before[t][1] for t in [task] + earlier])
    decision = decide(comparisons, changes)
    if decision.keep:
        model.heads.remove_own(task)
        model.link_head(task, owner, perm)
    else:
        snapshot.restore()
    return decision


class NoLossReuse(Reuse):
    """The learning reuse under the keep rule (``"no_loss"``, beyond the paper; module doc):
    a repeat is trained as the head-only reuse trains it, then an update of its entry is
    tried (:func:`kept_update`) and kept only where held-out evidence shows no loss;
    otherwise the head-only result stays.

    :param lr: Adam learning rate of an update (default 0.001).
    :param replay_exemplars: replay images kept per class of a new entry's creating task,
        drawn from its training share (default 5).
    :param epochs: epochs of an update (default :data:`UPDATE_EPOCHS`).
    :raises ValueError: an option out of range (the message names it).
    """

    name = "no_loss"
    OPTIONS = ("lr", "replay_exemplars", "epochs")

    def __init__(self, *, lr: float = 0.001, replay_exemplars: int = 5, epochs: int = UPDATE_EPOCHS):
        check_positive(lr, "lr", hint=" (Adam's learning rate of an update)")
        check_int(replay_exemplars, "replay_exemplars", minimum=0)
        check_int(epochs, "epochs", minimum=1)
        self.lr, self.replay_exemplars, self.epochs = float(lr), int(replay_exemplars), int(epochs)
        self._share: Optional[Tensor] = None

    def start(self) -> None:
        self._share = None

    def new_entry(self, model, entry: int, data, settings) -> None:
        """Keep the task's held-out set and the entry's replay images (:func:`remember_task`)."""
        remember_task(model, entry, data.task, data.x, data.y, data.num_classes,
                      replay_per_class=self.replay_exemplars)

    def repeat(self, model, record, data) -> None:
        """Keep the repeat's held-out set with its entry; the rest is what an update trains on."""
        self._share = remember_task(model, record.reused_entry, data.task, data.x, data.y, data.num_classes)

    def end(self, model, record, reuse: ReuseRecord, data, settings) -> None:
        """After the repeat's head-only training: try the entry's update and keep it where the
        keep rule says so (recorded in ``reuse``: ``entry_updated``, ``update_rolled_back``
        for a refused one, ``keep_p_value``, ``keep_sets``). A repeat the entry's head cannot
        take (another class count) gets no update."""
        share, self._share = self._share, None
        if share is None:
            return
        model.end_entry_training()
        permutation = record.class_permutation or list(range(model.heads.num_classes(record.task)))
        decision = kept_update(model, task=record.task, entry=record.entry, permutation=permutation, x=data.x,
                               y=data.y, train_indices=share, lr=self.lr, batch_size=settings.train_mb_size,
                               epochs=self.epochs)
        if decision is not None:
            reuse.entry_updated = True
            reuse.update_rolled_back = not decision.keep
            reuse.keep_p_value = decision.p_value
            reuse.keep_sets = [[s.task, s.images, s.losses, s.gains] for s in decision.sets]


__all__ = ["NoLossReuse", "REPLAY_IMAGES", "REPLAY_LABELS", "UPDATE_EPOCHS",
           "heldout_keys", "heldout_set", "kept_update", "remember_task", "score_task", "score_through",
           "served_tasks", "train_entry"]
