"""One call that makes a script's run repeatable: :func:`seed_everything`.

The benchmarks and the detectors draw from their own seeded generators; everything
else (initial weights, mini-batch order, VAE noise, dropout) draws from the global
generators of torch, numpy and Python's ``random``. The library never seeds those
global generators itself (that would silently change a user's other draws); a script
seeds them once, at its start, with :func:`seed_everything`. After that the same
script with the same torch thread count on the same machine prints the same
decisions and accuracies; the thread count changes floating-point rounding and, now
and then, a close decision. Checkpoints save and restore these generators.

Importing this module imports neither torch nor numpy; :func:`seed_everything` does.
Each source of randomness and how it is seeded: docs/method.rst, section "What an
SDR run draws at random, and from where".
"""
from __future__ import annotations

import numbers

MAX_SEED = 2**32 - 1
"""Largest seed numpy's legacy seeding (``np.random.seed``) accepts."""


def _integer(value, name: str) -> int:
    """``value`` as an int; :class:`TypeError` naming ``name`` for anything else (a bool or a float too)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    return int(value)


def _checked_seed(seed) -> int:
    """``seed`` as an int in ``[0, MAX_SEED]`` (:func:`seed_everything`'s errors)."""
    seed = _integer(seed, "seed")
    if not 0 <= seed <= MAX_SEED:
        raise ValueError(f"seed must be in [0, {MAX_SEED}] (what numpy accepts), got {seed}")
    return seed


def seed_everything(seed: int) -> None:
    """Seed every global generator an SDR run draws from: Python's ``random``, numpy's
    legacy ``np.random`` and torch's (CPU and every CUDA device).

    Call it once at the start of a script, before building the benchmark's backbone
    or anything with weights (see the module docstring for what it covers and what
    has its own seed).

    :param seed: an int in ``[0, 2**32 - 1]`` (:data:`MAX_SEED`).
    :raises TypeError: ``seed`` is not an integer (a bool or a float is refused too;
        numpy integers are accepted).
    :raises ValueError: ``seed`` is outside ``[0, 2**32 - 1]``.
    """
    seed = _checked_seed(seed)
    import random

    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # seeds every CUDA device too


def task_seed(seed: int, position: int) -> int:
    """The seed of the global generators for the experience at ``position`` of a run seeded
    ``seed`` (:func:`~avalanche_sdr.training.stream_runner.run_sdr_stream`'s
    ``seed_each_task``): ``(seed * 1_000_003 + position) mod 2**32``, so that each task's
    training draws depend on the run's seed and the task's position only.

    :param seed: an int in ``[0, 2**32 - 1]``; ``position``: an int >= 0.
    :raises TypeError: either is not an integer.
    :raises ValueError: ``seed`` outside ``[0, 2**32 - 1]`` or ``position`` negative.
    """
    seed, position = _checked_seed(seed), _integer(position, "position")
    if position < 0:
        raise ValueError(f"position must be >= 0, got {position}")
    return (seed * 1_000_003 + position) % (MAX_SEED + 1)


__all__ = ["MAX_SEED", "seed_everything", "task_seed"]
