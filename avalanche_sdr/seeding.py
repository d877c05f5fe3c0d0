"""One call that makes a script's run repeatable: :func:`seed_everything`.

What an SDR run draws at random, and from where:

- the stream's task order and per-task samples: the benchmark's own ``seed=``
  (e.g. ``MixedDigits(seed=0)``), never a global generator;
- the detectors' draws (the two-sample test's projection and decoys, the complexity
  measure's permutations, Expert Gate's autoencoders): their own ``torch.Generator``
  objects, seeded from their settings and the task id, never a global generator;
- everything else — the initial weights of E0, of every head, adapter set and VAE,
  the mini-batch order of every ``DataLoader`` (Avalanche's and the pretraining's), the
  VAEs' reparameterisation noise and dropout — from the **global** generators of
  torch, and where third-party code uses them, of numpy and Python's ``random``.

The library never seeds or re-seeds those global generators itself (a library that
did would silently change a user's other draws); a script seeds them once, at its
start, with :func:`seed_everything`. After that, the same script with the same torch
thread count on the same machine prints the same decisions and accuracies
(``tests/docs/test_readme.py`` runs the README's block twice and compares). The
thread count matters: it changes floating-point rounding, and with it, now and
then, a close decision (record it with every result, as the examples do).

Checkpoints save and restore the states of these generators
(:mod:`avalanche_sdr.training.checkpoint`), so a resumed run continues the same draws.

Importing this module imports neither torch nor numpy; :func:`seed_everything` does.
"""
from __future__ import annotations

import numbers

MAX_SEED = 2**32 - 1
"""Largest seed numpy's legacy seeding (``np.random.seed``) accepts."""


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
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise TypeError(f"seed must be an int, got {type(seed).__name__} {seed!r}")
    seed = int(seed)
    if not 0 <= seed <= MAX_SEED:
        raise ValueError(f"seed must be in [0, {MAX_SEED}] (what numpy accepts), got {seed}")
    import random

    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # seeds every CUDA device too


__all__ = ["MAX_SEED", "seed_everything"]
