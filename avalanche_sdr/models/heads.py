"""The repository's heads: one classification head per task, its links, permutations and class ids.

:class:`TaskHeads` owns everything that maps an entry's features to a task's classes:

- the head f_t of each task with a head of its own (a linear layer, or one hidden
  layer);
- the links of the learning reuse: a task answering through the head of the entry's
  creating task, with the permutation from its local classes to that head's outputs;
- the class ids of a task trained on global class ids (e.g. ``{4, 7}``): the logits are
  placed at those columns.

The repository (:class:`~avalanche_sdr.models.SDRModel`) holds one, as ``model.heads``,
and maps tasks to entries; every change to the heads goes through the methods here.
"""
from __future__ import annotations

import warnings
from typing import Dict, List, Optional, Sequence, Tuple

import torch
from torch import Tensor, nn

from avalanche_sdr.models.stored import TensorStore

UNTRAINED_HEAD_SEED = 0x5D2
"""Base seed of the untrained heads that answer untrained tasks (task t: this + t)."""


class UntrainedTaskWarning(UserWarning):
    """A task that has not been trained was evaluated: E0 and an untrained head answer it."""


class TaskHeads(nn.Module):
    """The heads of the repository's tasks (module doc).

    ``state_dict`` keys: ``own.<task>.*`` (the heads), ``ids.<task>.ids`` (class ids [c]
    int64) and ``perms.<task>.perm`` (a linked task's permutation [c] int64); the links
    themselves are a plain dict (:attr:`links`), rebuilt from a layout.

    :param feature_dim: D, the width of the features a head reads.
    :param hidden: width of a hidden layer in each head; ``None``: a single linear layer.
    """

    def __init__(self, feature_dim: int, hidden: Optional[int] = None):
        super().__init__()
        self.feature_dim = int(feature_dim)
        self.hidden = hidden
        self.own = nn.ModuleDict()
        """Task (key ``str(task)``) -> its head, for the tasks with a head of their own."""
        self.ids = TensorStore()
        """Per task trained on global class ids: ``ids``, the sorted class ids [c] int64 of
        its head's c outputs (absent for local labels)."""
        self.perms = TensorStore()
        """Per linked task whose classes are in another order than its head owner's:
        ``perm`` [c] int64 (local class k -> owner output perm[k])."""
        self.links: Dict[int, int] = {}
        """Task -> the task whose head it answers through (:meth:`link`); tasks with a
        head of their own are absent."""
        self.register_buffer("_anchor", torch.zeros(0), persistent=False)  # follows .to(device)
        # Untrained tasks (SDRModel.forward_single_task): class ids announced by an evaluation
        # experience, and the untrained heads built for them. Plain attributes: not in the
        # state_dict, the memory or any checkpoint.
        self._announced: Dict[int, List[int]] = {}
        self._untrained: Dict[Tuple[int, Tuple[int, ...]], nn.Module] = {}
        self._warned: set = set()

    def _device(self):
        return self._anchor.device

    def __len__(self) -> int:
        """The number of heads of their own (linked tasks add none)."""
        return len(self.own)

    def __iter__(self):
        """The keys (``str(task)``) of the tasks with a head of their own, in creation order."""
        return iter(self.own)

    def __contains__(self, key) -> bool:
        return key in self.own

    def __getitem__(self, key: str) -> nn.Module:
        """The head of its own of the task with key ``key`` (``str(task)``)."""
        return self.own[key]

    # ------------------------------------------------------------------ heads
    def build(self, num_classes: int) -> nn.Module:
        """A new head with ``num_classes`` outputs, initialised from the global RNG (not stored)."""
        if self.hidden is None:
            return nn.Linear(self.feature_dim, num_classes)
        return nn.Sequential(nn.Linear(self.feature_dim, self.hidden), nn.ReLU(),
                             nn.Linear(self.hidden, num_classes))

    def add(self, task: int, num_classes: int) -> nn.Module:
        """Create the head f_t of ``task`` with ``num_classes`` outputs (idempotent).

        :raises ValueError: ``task`` has a head of another width, or ``num_classes < 1``.
        """
        key = str(int(task))
        if key in self.own:
            existing = self.num_classes(task)
            if existing != num_classes:
                raise ValueError(f"task {task} already has a head with {existing} classes, got {num_classes}")
            return self.own[key]
        if num_classes < 1:
            raise ValueError(f"a head needs at least one class, got {num_classes} for task {task}")
        self.own[key] = self.build(num_classes).to(self._device())
        return self.own[key]

    @staticmethod
    def outputs(head: nn.Module) -> int:
        """The number of outputs of a head module."""
        last = head if isinstance(head, nn.Linear) else head[-1]
        return last.out_features

    def is_trained(self, task: int) -> bool:
        """Whether ``task`` has a head, of its own or linked (trained, or being trained)."""
        return str(int(task)) in self.own or int(task) in self.links

    def owner(self, task: int) -> int:
        """The task whose head ``task`` answers through: itself, or its :meth:`link` owner."""
        return self.links.get(int(task), int(task))

    def module(self, task: int) -> nn.Module:
        """The head ``task`` answers through (its own, or its owner's for a linked task)."""
        return self.own[str(self.owner(task))]

    def num_classes(self, task: int) -> int:
        """Number of outputs of the head of ``task`` (its head owner's, for a linked task)."""
        return self.outputs(self.module(task))

    # ------------------------------------------------------------------ links
    def link(self, task: int, owner: int, permutation: Optional[Sequence[int]] = None) -> None:
        """Let ``task`` answer through ``owner``'s head instead of a head of its own.

        The repository checks that both tasks are mapped to one entry
        (:meth:`~avalanche_sdr.models.SDRModel.link_head`).

        :param permutation: local class k of ``task`` is output ``permutation[k]`` of the
            owner's head; ``None``: the identity.
        :raises ValueError: ``task`` already has a head, ``owner`` has none, or
            ``permutation`` is not a permutation of the owner's outputs.
        """
        task, owner = int(task), int(owner)
        if str(task) in self.own:
            raise ValueError(f"task {task} has a head of its own; it cannot answer through task {owner}'s")
        if str(owner) not in self.own:
            raise ValueError(f"task {owner} has no head of its own to answer through")
        c = self.outputs(self.own[str(owner)])
        perm = list(range(c)) if permutation is None else [int(v) for v in permutation]
        if sorted(perm) != list(range(c)):
            raise ValueError(f"permutation {perm} of task {task} is not a permutation of task {owner}'s "
                             f"{c} head outputs")
        self.links[task] = owner
        if str(task) in self.perms:
            del self.perms[str(task)]
        if perm != list(range(c)):
            self.perms.put(str(task), {"perm": torch.tensor(perm, dtype=torch.long)}, self._device())

    def remove_own(self, task: int) -> None:
        """Remove ``task``'s head of its own, so that it can :meth:`link` to another task's
        head (a learning-reuse update kept for a repeat first trained head-only).

        :raises ValueError: ``task`` has no head of its own, or another task answers through it.
        """
        key = str(int(task))
        if key not in self.own:
            raise ValueError(f"task {task} has no head of its own to remove")
        users = sorted(t for t, owner in self.links.items() if owner == int(task))
        if users:
            raise ValueError(f"tasks {users} answer through task {task}'s head; it cannot be removed")
        del self.own[key]

    def permutation(self, task: int) -> List[int]:
        """For a linked task, the owner output of each of its local classes (identity: [0..c-1])."""
        key = str(int(task))
        if key in self.perms:
            return [int(v) for v in self.perms[key].perm.tolist()]
        return list(range(self.num_classes(task)))

    def labels(self, task: int, y: Tensor) -> Tensor:
        """``task``'s local labels ``y`` ([n] int64, 0..c-1) as outputs of the head it
        answers through (:meth:`permutation`): [n] int64 on the CPU."""
        return torch.as_tensor(self.permutation(task), dtype=torch.long)[y.cpu()]

    # ------------------------------------------------------------------ class ids
    def set_class_ids(self, task: int, class_ids) -> None:
        """Record the class ids of ``task``'s head outputs (before its head is added).

        Local labels (``class_ids`` == 0..c-1) store nothing: the head's output k is
        class k. Other ids (global class ids, e.g. ``[4, 7]``) are kept as a buffer
        (state_dict, checkpoints, memory): output k of the head is class
        ``class_ids[k]`` and :meth:`logits` places the logits at those columns.

        :param class_ids: the task's distinct class ids, in increasing order, >= 0.
        :raises ValueError: ids not strictly increasing or negative, or ``task``
            already has other class ids or a head of another width.
        """
        ids = torch.as_tensor(class_ids, dtype=torch.long).detach().flatten().cpu()
        if ids.numel() == 0 or int(ids.min()) < 0 or bool((ids[1:] <= ids[:-1]).any()):
            raise ValueError(f"task {task}: class ids must be distinct, increasing and >= 0, got {ids.tolist()}")
        key = str(int(task))
        if self.is_trained(task) or key in self.ids:
            if ids.tolist() != self.class_ids(task):
                raise ValueError(f"task {task} already has class ids {self.class_ids(task)}, got {ids.tolist()}")
            return
        if torch.equal(ids, torch.arange(ids.numel())):
            return
        self.ids.put(key, {"ids": ids}, self._device())

    def has_class_ids(self, task: int) -> bool:
        """Whether ``task`` was trained on global class ids (:meth:`set_class_ids` kept some)."""
        return str(int(task)) in self.ids

    def class_ids(self, task: int) -> List[int]:
        """The class id of each output of ``task``'s head (``[0, ..., c-1]`` for local labels).

        Detection records and detector states use local labels 0..c-1; local label k
        of the task is class ``class_ids(task)[k]``.

        :raises KeyError: ``task`` has neither a head nor recorded class ids.
        """
        key = str(int(task))
        if key in self.ids:
            return [int(v) for v in self.ids[key].ids.tolist()]
        if self.is_trained(task):
            return list(range(self.num_classes(task)))
        raise KeyError(f"task {task} has not been trained: it has no head and no class ids")

    # ------------------------------------------------------------------ logits
    def logits(self, task: int, features: Tensor) -> Tensor:
        """f_t on features already computed by ``task``'s entry: [N, D] -> logits [N, c]
        (at the class-id columns, [N, max id + 1], for a task trained on global class
        ids). A linked task's logits are its owner head's outputs in the task's class
        order (column k: output ``permutation[k]``)."""
        key = str(int(task))
        logits = self.module(task)(features)
        if key in self.perms:
            logits = logits.index_select(1, self.perms[key].perm)
        if key in self.ids:
            logits = at_class_ids(logits, self.ids[key].ids)
        return logits


    # ------------------------------------------------------------------ untrained tasks
    def announce(self, task: int, classes: Sequence[int]) -> None:
        """Note the classes of a task without a head that an evaluation experience holds:
        they size the untrained head that answers it (:meth:`untrained_logits`)."""
        self._announced[int(task)] = [int(c) for c in classes]

    def announced(self, task: int) -> bool:
        """Whether an untrained ``task``'s classes were announced (:meth:`announce`)."""
        return int(task) in self._announced

    def forget_untrained(self, task: int) -> None:
        """Drop what was kept to answer ``task`` untrained (it now trains a head)."""
        self._announced.pop(int(task), None)
        for cached in [k for k in self._untrained if k[0] == int(task)]:
            del self._untrained[cached]

    def untrained_logits(self, task: int, features: Tensor) -> Tensor:
        """An untrained task's answer: a fresh, untrained head over its announced classes on
        ``features`` (E0's, [N, D]), seeded with :data:`UNTRAINED_HEAD_SEED` + ``task``
        without touching the global RNG, kept for the next call (not stored), logits at
        the class-id columns; the first answer per task warns (:class:`UntrainedTaskWarning`).

        :raises KeyError: the task's classes were never announced.
        """
        task = int(task)
        classes = tuple(self._announced[task])
        head = self._untrained.get((task, classes))
        if head is None:
            with torch.random.fork_rng(devices=[]):
                torch.random.default_generator.manual_seed(UNTRAINED_HEAD_SEED + task)
                head = self.build(len(classes))
            head.requires_grad_(False)
        if task not in self._warned:
            self._warned.add(task)
            warnings.warn(
                f"task {task} has not been trained: it is answered by E0 features (no adapters) and an "
                f"untrained head over its {len(classes)} classes {list(classes)} (chance-level predictions)",
                UntrainedTaskWarning, stacklevel=3,
            )
        head = head.to(device=features.device)
        self._untrained[(task, classes)] = head
        logits = head(features)
        if list(classes) != list(range(len(classes))):
            logits = at_class_ids(logits, torch.tensor(classes))
        return logits


def at_class_ids(logits: Tensor, ids: Tensor) -> Tensor:
    """Local logits [N, c] -> [N, max id + 1] with column ids[k] = logits[:, k] and the
    lowest finite value of the dtype elsewhere."""
    ids = ids.to(logits.device)
    out = torch.full((logits.shape[0], int(ids.max()) + 1), torch.finfo(logits.dtype).min,
                     device=logits.device, dtype=logits.dtype)
    return out.index_copy(1, ids, logits)


__all__ = ["TaskHeads", "UNTRAINED_HEAD_SEED", "UntrainedTaskWarning", "at_class_ids"]
