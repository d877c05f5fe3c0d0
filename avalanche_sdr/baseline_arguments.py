"""What the baselines share: Avalanche's strategy keywords and HAT's paper constants.

A leaf module (torch only): :mod:`avalanche_sdr.baselines` and :mod:`avalanche_sdr.hat`
both read it, so neither imports the other at module level (``baselines`` builds HAT
through a call-time import of :mod:`avalanche_sdr.hat`, which imports Avalanche).
"""
from __future__ import annotations

from typing import Any, Dict, Optional

import torch
from torch import nn

from avalanche_sdr._batching import eval_batch_size

HAT_S_MAX: float = 400.0
"""HAT's final gate scale ``s_max``, the paper's value (Serra et al., 2018)."""

HAT_C: float = 0.75
"""HAT's attention-regulariser weight ``c``, the paper's value."""

HAT_EMBEDDING_LR: float = 0.05
"""Learning rate of HAT's plain-SGD step on the task embeddings, the paper's (its SGD
learning rate; the network's weights use the baselines' Adam, see :mod:`avalanche_sdr.hat`)."""


def training_arguments(model: nn.Module, *, epochs: int, lr: float, train_mb_size: int, eval_mb_size: Optional[int] = None,
                       evaluator=None, device: Any = "cpu") -> Dict[str, Any]:
    """The keyword arguments of an Avalanche supervised strategy shared by every
    baseline: ``model``, an Adam optimizer over its parameters (``lr``), cross-entropy,
    ``train_mb_size`` / ``eval_mb_size`` (images; ``eval_mb_size=None``: chosen for
    ``device``, :func:`~avalanche_sdr._batching.eval_batch_size`), ``train_epochs`` = ``epochs``,
    ``device`` and ``evaluator`` (an Avalanche ``EvaluationPlugin``; ``None``:
    Avalanche's behaviour for ``None``)."""
    return dict(
        model=model,
        optimizer=torch.optim.Adam(model.parameters(), lr=lr),
        criterion=nn.CrossEntropyLoss(),
        train_mb_size=train_mb_size,
        train_epochs=epochs,
        eval_mb_size=eval_batch_size(device, eval_mb_size, "eval_mb_size"),
        device=device,
        evaluator=evaluator,
    )


__all__ = ["HAT_C", "HAT_EMBEDDING_LR", "HAT_S_MAX", "training_arguments"]
