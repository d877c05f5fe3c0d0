"""Distributional consistency of SDR (paper eq. 5).

For the ``n`` training inputs ``x_i`` of a new task and ``C`` candidate generators
``G_j`` (one per unique repository entry),

.. math::

    p(P_t = P_j) = \\frac{1}{n} \\sum_{i=1}^{n}
        \\frac{\\pi_j\\, p(x_i | \\phi_j)}{\\sum_{j'} \\pi_{j'}\\, p(x_i | \\phi_{j'})},

i.e. the mean over inputs of the posterior responsibility of each candidate, with
``log p(x_i | phi_j)`` approximated by the ELBO of ``G_j`` (nats). The inner ratio is a
softmax over candidates of ``log pi_j + log p(x_i | phi_j)``, computed with the
log-sum-exp shift, so ELBOs of -1e5 nats or differences of thousands of nats are
handled exactly (no underflow to 0/0). SDR picks ``argmax_j``.
"""

from __future__ import annotations

import torch


def distribution_consistency(
    log_likelihoods: torch.Tensor,
    log_prior: torch.Tensor | None = None,
) -> torch.Tensor:
    """Mean posterior responsibility of each candidate over the task's inputs (eq. 5).

    :param log_likelihoods: ``[n, C]`` log-likelihoods ``log p(x_i | phi_j)`` in nats
        (typically per-image ELBOs), any real floating dtype; computed in float64.
        ``-inf`` means candidate ``j`` gives input ``i`` zero likelihood and is
        allowed as long as some candidate has a finite value for that input. ``+inf``
        is rejected (an infinite density makes the ratio undefined).
    :param log_prior: ``[C]`` log mixture weights ``log pi_j``, or ``None`` for the
        uniform prior. Need not be normalised (only differences matter); ``-inf``
        (zero weight) is allowed for some but not all candidates.
    :return: ``[C]`` float64 tensor on the input's device, entries in [0, 1] that sum
        to 1 (up to rounding).
    :raises ValueError: on a wrong shape, an empty input (``n == 0`` or ``C == 0``),
        NaN or ``+inf`` values, or an input for which every candidate has
        ``log pi_j + log p(x_i | phi_j) = -inf`` (the message gives the number of such
        rows).
    :raises TypeError: if the inputs are not real floating tensors.
    """
    if not isinstance(log_likelihoods, torch.Tensor):
        raise TypeError(
            f"log_likelihoods must be a torch.Tensor [n, C], got {type(log_likelihoods).__name__}"
        )
    if not log_likelihoods.is_floating_point():
        raise TypeError(f"log_likelihoods must be a floating tensor, got dtype {log_likelihoods.dtype}")
    if log_likelihoods.dim() != 2:
        raise ValueError(
            f"log_likelihoods must have shape [n, C], got {tuple(log_likelihoods.shape)}"
        )
    n, c = log_likelihoods.shape
    if n == 0 or c == 0:
        raise ValueError(
            f"log_likelihoods must be non-empty [n, C] with n >= 1 and C >= 1, got {(n, c)}"
        )
    ll = log_likelihoods.detach().to(torch.float64)
    _reject_nan_and_posinf(ll, "log_likelihoods")

    if log_prior is None:
        logits = ll  # a uniform prior adds the same constant to every candidate
    else:
        if not isinstance(log_prior, torch.Tensor):
            raise TypeError(
                f"log_prior must be a torch.Tensor [C] or None, got {type(log_prior).__name__}"
            )
        if not log_prior.is_floating_point():
            raise TypeError(f"log_prior must be a floating tensor, got dtype {log_prior.dtype}")
        if log_prior.shape != (c,):
            raise ValueError(
                f"log_prior must have shape [{c}] (one per candidate), got {tuple(log_prior.shape)}"
            )
        prior = log_prior.detach().to(device=ll.device, dtype=torch.float64)
        _reject_nan_and_posinf(prior, "log_prior")
        if bool(torch.isneginf(prior).all()):
            raise ValueError("log_prior is -inf for every candidate; at least one weight must be > 0")
        logits = ll + prior

    dead_rows = int(torch.isneginf(logits).all(dim=1).sum())
    if dead_rows:
        raise ValueError(
            f"{dead_rows} of {n} inputs have log-likelihood + log-prior = -inf for every "
            "candidate; the posterior over candidates is undefined for them"
        )
    # softmax subtracts the row maximum (finite here), so it is log-sum-exp stable.
    return torch.softmax(logits, dim=1).mean(dim=0)


def _reject_nan_and_posinf(values: torch.Tensor, name: str) -> None:
    """Raise ValueError naming how many entries of ``values`` are NaN or +inf."""
    n_nan = int(torch.isnan(values).sum())
    n_posinf = int(torch.isposinf(values).sum())
    if n_nan or n_posinf:
        raise ValueError(
            f"{name} contains {n_nan} NaN and {n_posinf} +inf entries; expected finite "
            "values or -inf"
        )


__all__ = ["distribution_consistency"]
