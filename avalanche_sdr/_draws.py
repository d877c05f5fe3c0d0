"""Seeded random draws that leave the global RNG alone: one :class:`torch.Generator`
per (seed, task, purpose), and a sorted subsample drawn from it.

Shared by the two-sample detector (:mod:`avalanche_sdr.detection.two_sample`: which
images it tests, stores and uses as decoys) and the learning reuse
(:mod:`avalanche_sdr.training.learning_reuse`: which images an entry stores and
replays), so that every such draw is reproducible from its seed, its task and its
purpose alone, whatever ran before it.
"""
from __future__ import annotations

import torch
from torch import Tensor


def task_generator(seed: int, task: int, purpose: int) -> torch.Generator:
    """A CPU generator seeded from ``(seed, task, purpose)`` (distinct purposes of one task
    draw independent streams)."""
    return torch.Generator().manual_seed((int(seed) * 1_000_003 + int(task)) * 7 + purpose)


def subsample(n: int, k: int, generator: torch.Generator) -> Tensor:
    """Sorted int64 indices of ``k`` of ``n`` items, drawn from ``generator`` (all ``n``,
    without a draw, when ``k >= n``)."""
    if k >= n:
        return torch.arange(n)
    return torch.sort(torch.randperm(n, generator=generator)[:k]).values


__all__ = ["subsample", "task_generator"]
