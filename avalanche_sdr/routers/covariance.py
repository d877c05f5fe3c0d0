"""Ledoit-Wolf shrinkage of a covariance, from residuals or from their running moments.

Shared by the task-free routers (:mod:`avalanche_sdr.routers.gaussian`,
:mod:`avalanche_sdr.routers.lda_router`). Written by hand: neither Avalanche 0.6.0 nor
torch has a Ledoit-Wolf estimator (scikit-learn's is not a dependency of this package),
and the LDA router needs it from moments accumulated over a stream, which no library
estimator takes.
"""
from __future__ import annotations

from typing import Tuple

import torch
from torch import Tensor


def ledoit_wolf_from_moments(scatter: Tensor, n: int, sum_squared_norms_squared: float) -> Tensor:
    """Ledoit-Wolf (2004) shrinkage towards a scaled identity, from running moments.

    :param scatter: [D, D] float, ``sum_i r_i r_i^T`` of n zero-mean residuals.
    :param n: the number of residuals.
    :param sum_squared_norms_squared: ``sum_i ||r_i||^4``.
    :return: [D, D] float64, ``(1 - s) S + (s + 1e-6) (tr S / D) I`` with ``S = scatter / n``
        and the Ledoit-Wolf intensity ``s`` in [0, 1] (the 1e-6 keeps it positive
        definite when S is singular).
    :raises ValueError: fewer than 2 residuals, or residuals that are all zero (the
        target ``tr S / D`` is 0).
    """
    if n < 2:
        raise ValueError(f"a covariance needs at least 2 samples, got {n}")
    s = scatter.detach().to("cpu", torch.float64) / n
    d = s.shape[0]
    mu = float(torch.trace(s)) / d
    if not mu > 0:
        raise ValueError("the features do not vary within classes (zero covariance); "
                         "check the encoder and the task's inputs")
    target = mu * torch.eye(d, dtype=torch.float64)
    dist = float(((s - target) ** 2).sum())
    # mean over samples of ||r_i r_i^T - S||_F^2, without forming the [n, D, D] tensor
    spread = float(sum_squared_norms_squared) / n - float((s**2).sum())
    shrink = shrinkage_intensity(n, dist, spread)
    return (1.0 - shrink) * s + (shrink + 1e-6) * target


def shrinkage_intensity(n: int, dist: float, spread: float) -> float:
    """The Ledoit-Wolf intensity ``s`` in [0, 1]: ``min(max(spread / n, 0), dist) / dist``
    (1 when ``dist`` is 0).

    :param n: the number of residuals.
    :param dist: ``||S - (tr S / D) I||_F^2`` of the sample covariance S.
    :param spread: the mean over the residuals of ``||r_i r_i^T - S||_F^2``.
    """
    return 1.0 if dist <= 0 else min(max(spread / n, 0.0), dist) / dist


def ledoit_wolf_from_gram(gram: Tensor, dim: int) -> Tuple[float, float]:
    """The Ledoit-Wolf covariance of n zero-mean residuals ``r_i`` in ``dim`` dimensions, from
    their Gram matrix alone (``gram[i, j] = r_i . r_j``), as the two numbers of
    ``alpha I + beta R^T R`` (R: the [n, dim] residuals): the same matrix as
    :func:`ledoit_wolf_from_moments` of their moments, without forming a [dim, dim] one
    (``tr S``, ``||S||_F`` and every ``||r_i||^4`` are read from the Gram matrix).

    :param gram: [n, n] float64.
    :param dim: D, the dimension of the residuals.
    :return: ``(alpha, beta)``: ``alpha = (s + 1e-6) tr S / D`` and ``beta = (1 - s) / n``.
    :raises ValueError: fewer than 2 residuals, or residuals that are all zero.
    """
    n = gram.shape[0]
    if n < 2:
        raise ValueError(f"a covariance needs at least 2 samples, got {n}")
    g = gram.detach().to("cpu", torch.float64)
    trace = float(torch.diagonal(g).sum()) / n
    mu = trace / dim
    if not mu > 0:
        raise ValueError("the features do not vary within classes (zero covariance); "
                         "check the encoder and the task's inputs")
    frobenius = float((g**2).sum()) / n**2  # ||S||_F^2: R^T R and R R^T have the same nonzero eigenvalues
    dist = frobenius - 2 * mu * trace + mu**2 * dim
    spread = float((torch.diagonal(g) ** 2).sum()) / n - frobenius
    shrink = shrinkage_intensity(n, dist, spread)
    return (shrink + 1e-6) * mu, (1.0 - shrink) / n


def ledoit_wolf_covariance(residuals: Tensor) -> Tensor:
    """Ledoit-Wolf shrinkage of the covariance of zero-mean ``residuals`` towards a scaled identity.

    :param residuals: [n, D] float, already centred (here: minus each sample's class mean).
    :return: [D, D] float64 (:func:`ledoit_wolf_from_moments` of their moments).
    :raises ValueError: fewer than 2 samples, or all-constant features.
    """
    r = residuals.detach().to("cpu", torch.float64)
    return ledoit_wolf_from_moments(r.T @ r, r.shape[0], float(((r**2).sum(1) ** 2).sum()))


def whitening(cov: Tensor) -> Tensor:
    """``L^{-1}`` for ``cov = L L^T`` (Cholesky): [D, D] float64, lower triangular, so that
    ``||L^{-1} (z - mu)||^2`` is the squared Mahalanobis distance."""
    chol = torch.linalg.cholesky(cov.to(torch.float64))
    return torch.linalg.solve_triangular(chol, torch.eye(cov.shape[0], dtype=torch.float64), upper=False)


__all__ = ["ledoit_wolf_covariance", "ledoit_wolf_from_gram", "ledoit_wolf_from_moments", "shrinkage_intensity",
           "whitening"]
