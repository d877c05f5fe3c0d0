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

Gate, replay and the entries never updated: docs/method.rst, section "The learning
reuse: gate, replay and entries never updated".
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import torch
from torch import Tensor

from avalanche_sdr._draws import subsample, task_generator

EXEMPLAR_SEED = 0x5D3
"""Base seed of the learning reuse's generators (stored images, replay draws)."""
_STORE, _REPLAY = 0, 1


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


@torch.no_grad()
def head_accuracy(model, entry: int, owner: int, x: Tensor, y: Tensor, batch_size: int = 256) -> float:
    """Accuracy of ``owner``'s head on ``entry``'s features of ``x`` (eval mode).

    :param x: [n, C, H, W] images; ``y``: [n] labels in the head's output space.
    :return: fraction correct in [0, 1]; NaN when ``n == 0``.
    """
    if x.shape[0] == 0:
        return float("nan")
    feats = model.batched_features(x, entry, batch_size)
    head = model.heads[str(int(owner))]
    was_training = head.training
    head.eval()
    try:
        device = next(head.parameters()).device
        predicted = head(feats.to(device)).argmax(dim=1).cpu()
    finally:
        head.train(was_training)
    return float((predicted == y.cpu()).float().mean())


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
    stored_x, stored_y = model.exemplars(entry)
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
        self.images, self.labels = model.exemplars(self.entry)
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
        logits = model.heads[str(self.owner)](feats)
        return criterion(logits, self.labels[idx].to(device))


__all__ = ["EXEMPLAR_SEED", "ExemplarReplay", "GateResult", "gate", "head_accuracy",
           "select_exemplars"]
