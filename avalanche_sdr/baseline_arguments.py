"""What the baselines share: Avalanche's strategy keywords, HAT's paper constants and the
closed-form learners' default settings.

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

SLDA_SHRINKAGE: float = 1e-4
"""``slda``'s shrinkage of its covariance towards the identity, Avalanche's
``StreamingLDA`` default (:func:`avalanche_sdr.closed_form.slda_strategy`)."""

RANPAC_DIM: int = 2048
"""``ranpac``'s random projection size M (:func:`avalanche_sdr.closed_form.ranpac_strategy`)."""

RANPAC_RIDGE: float = 1e-2
"""``ranpac``'s ridge, relative to the mean eigenvalue of its Gram matrix."""

KLDA_DIM: int = 2048
"""``klda``'s number of random Fourier features D (:func:`avalanche_sdr.closed_form.klda_strategy`)."""

KLDA_GAMMA: float = 1.0
"""``klda``'s kernel width: the Gaussian kernel's gamma as a multiple of scikit-learn's
``gamma="scale"`` on the first training experience's E0 features (1.0: that rule itself)."""

KLDA_SHRINKAGE: float = 1e-2
"""``klda``'s shrinkage of its shared covariance towards a multiple of the identity."""


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


__all__ = ["HAT_C", "HAT_EMBEDDING_LR", "HAT_S_MAX", "KLDA_DIM", "KLDA_GAMMA", "KLDA_SHRINKAGE", "RANPAC_DIM",
           "RANPAC_RIDGE", "SLDA_SHRINKAGE", "training_arguments"]
