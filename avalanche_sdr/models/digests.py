"""Content digests of the repository's state: what a task's forward reads, and E0.

A digest changes whenever the hashed tensors change, whoever changed them, so a caller
can keep what it derived from them (an evaluation, a router's features of stored
images) until they change. Read-only functions of an
:class:`~avalanche_sdr.models.SDRModel`.
"""
from __future__ import annotations

import hashlib
from typing import List, Tuple

import torch
from torch import Tensor, nn


def task_state_digest(model, task: int) -> str:
    """A content digest of what ``task``'s task-aware forward reads besides E0.

    Hashed, each with its name, dtype and shape: the task's entry number and that entry's
    adapters and BatchNorm copies (parameters and buffers, running statistics included),
    the task whose head it answers through (``model.heads.owner``) and that head's
    parameters, the task's permutation and its class ids (``model.heads``). Other entries
    and heads, generators, detection states, stored images and router states are not read
    by the task's forward and do not enter it; E0, shared by every task, has
    :func:`backbone_state_digest`.

    :param model: an :class:`~avalanche_sdr.models.SDRModel`.
    :param task: a trained task (``model.heads.is_trained(task)``).
    :return: 32 hex characters (BLAKE2b of 16 bytes).
    :raises KeyError: ``task`` has no head.
    """
    heads = model.heads
    if not heads.is_trained(task):
        raise KeyError(f"task {task} has not been trained: the repository knows tasks {model.trained_tasks}")
    task, entry, owner = int(task), model.entry_of(task), heads.owner(task)
    named = [(f"entry{entry}.{i}.{name}", t) for i, module in enumerate(model.encoder.entry_modules(entry))
             for name, t in _named_tensors(module)]
    named += [(f"head{owner}.{name}", t) for name, t in _named_tensors(heads.module(task))]
    for label, store in (("perm", heads.perms), ("ids", heads.ids)):
        if str(task) in store:
            named += [(f"{label}.{name}", t) for name, t in _named_tensors(store[str(task)])]
    return _digest(named)


def backbone_state_digest(model) -> str:
    """A content digest of E0: every parameter and buffer of the encoder that belongs to
    no entry (the frozen convolutions and BatchNorm layers, any other backbone layer), as
    :func:`task_state_digest` hashes them. E0 is frozen, so it stays the same unless
    something outside SDR writes into it.

    :param model: an :class:`~avalanche_sdr.models.SDRModel`.
    :return: 32 hex characters (BLAKE2b of 16 bytes).
    """
    encoder = model.encoder
    entry_tensors = {id(t) for e in encoder.entries for m in encoder.entry_modules(e) for _, t in _named_tensors(m)}
    return _digest([(name, t) for name, t in _named_tensors(encoder) if id(t) not in entry_tensors])


def _named_tensors(module: nn.Module) -> List[Tuple[str, Tensor]]:
    return [*module.named_parameters(), *module.named_buffers()]


def _digest(named: List[Tuple[str, Tensor]]) -> str:
    """BLAKE2b (16 bytes, hex) of every tensor's name, dtype, shape and bytes, in order."""
    h = hashlib.blake2b(digest_size=16)
    for name, tensor in named:
        t = tensor.detach()
        h.update(f"{name}:{t.dtype}:{tuple(t.shape)};".encode())
        h.update(t.cpu().contiguous().reshape(-1).view(torch.uint8).numpy())
    return h.hexdigest()


__all__ = ["backbone_state_digest", "task_state_digest"]
