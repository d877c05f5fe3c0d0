"""Fitting one generator entry G_m (a VAE) on a task's inputs, with early stopping.

The paper trains each VAE with Adam, batch 64, lr 1e-4, for up to 2000 epochs with
early stopping (supplementary §A.1) but does not say on what it stops. Here a held-out
fraction of the task's *training* inputs is scored after every epoch; training stops
when its mean ELBO has not improved for ``patience`` epochs and the best state is
restored. No test or validation data of the stream is touched.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable, List, Optional, Tuple

import torch
from torch import Tensor


@dataclass
class GeneratorFitReport:
    """What one generator fit did (JSON-safe via ``vars``).

    :ivar epochs_run: epochs actually trained.
    :ivar best_epoch: 1-based epoch whose state was kept.
    :ivar best_holdout_elbo: mean held-out ELBO of the kept state, nats per image.
    :ivar holdout_elbo: mean held-out ELBO after each epoch, nats per image.
    :ivar reference_elbo: (mean, std) per-image ELBO of the kept state on the hold-out,
        nats, with ``reference_samples`` Monte-Carlo samples; stored in the bank by
        ``bank.set_reference_elbo`` (NaN without a hold-out). The calibrated decision rule
        compares a new task's ELBO under this entry with it.
    :ivar seconds: wall time of the fit.
    """

    epochs_run: int = 0
    best_epoch: int = 0
    best_holdout_elbo: float = float("nan")
    holdout_elbo: List[float] = field(default_factory=list)
    reference_elbo: Tuple[float, float] = (float("nan"), float("nan"))
    seconds: float = 0.0


def _entry_state(bank, key: int) -> List[Tensor]:
    return [p.detach().clone() for p in bank.entry_parameters(key)]


def fit_generator(
    bank,
    key: int,
    x: Tensor,
    *,
    epochs: int,
    lr: float,
    batch_size: int,
    patience: int,
    holdout_fraction: float = 0.1,
    generator: Optional[torch.Generator] = None,
    reference_samples: int = 8,
    on_epoch: Optional[Callable[[int], None]] = None,
) -> GeneratorFitReport:
    """Train the generator entry ``key`` of ``bank`` on inputs ``x``.

    Only ``bank.entry_parameters(key)`` are updated (Adam). With fewer than 10
    inputs there is no hold-out: all epochs run and the last state is kept.

    :param bank: a generator bank (``elbo(x, key)``, ``entry_parameters(key)``).
    :param key: entry id.
    :param x: [N, C, H, W] inputs in [0, 1].
    :param epochs: maximum number of epochs.
    :param lr: Adam learning rate.
    :param batch_size: mini-batch size.
    :param patience: epochs without held-out improvement before stopping.
    :param holdout_fraction: fraction of ``x`` held out for early stopping.
    :param generator: RNG for the split and the batch order (``None``: global RNG).
    :param reference_samples: Monte-Carlo samples per ELBO of the final hold-out
        reference (:attr:`GeneratorFitReport.reference_elbo`); its sampling uses a
        private RNG seeded with 0, so the global RNG is not advanced by it.
    :param on_epoch: called with the epoch number (1-based) after each epoch, e.g. to
        advance a progress bar; it must not touch the bank or the RNGs.
    :return: a :class:`GeneratorFitReport`.
    """
    start = time.perf_counter()
    params = list(bank.entry_parameters(key))
    for p in params:
        p.requires_grad_(True)
    optimizer = torch.optim.Adam(params, lr=lr)
    n = x.shape[0]
    order = torch.randperm(n, generator=generator)
    n_hold = int(math.floor(n * holdout_fraction)) if n >= 10 else 0
    hold, fit = x[order[:n_hold]], x[order[n_hold:]]
    report = GeneratorFitReport()
    best_state, best_score, stale = None, -math.inf, 0
    was_training = bank.training
    for epoch in range(1, epochs + 1):
        bank.train()
        perm = torch.randperm(fit.shape[0], generator=generator)
        for i in range(0, fit.shape[0], batch_size):
            batch = fit[perm[i : i + batch_size]]
            optimizer.zero_grad(set_to_none=True)
            loss = -bank.elbo(batch, key).mean()
            loss.backward()
            optimizer.step()
        report.epochs_run = epoch
        if on_epoch is not None:
            on_epoch(epoch)
        if n_hold == 0:
            continue
        bank.eval()
        with torch.no_grad():
            score = float(torch.cat([bank.elbo(hold[i : i + 512], key) for i in range(0, n_hold, 512)]).mean())
        report.holdout_elbo.append(score)
        if score > best_score:
            best_score, best_state, stale = score, _entry_state(bank, key), 0
            report.best_epoch, report.best_holdout_elbo = epoch, score
        else:
            stale += 1
            if stale >= patience:
                break
    if best_state is not None:
        with torch.no_grad():
            for p, v in zip(params, best_state):
                p.copy_(v)
    else:
        report.best_epoch = report.epochs_run
    if n_hold >= 2 and hasattr(bank, "set_reference_elbo"):
        bank.eval()
        reference_rng = torch.Generator(device=hold.device).manual_seed(0)
        with torch.no_grad():
            per_image = torch.cat([
                bank.elbo(hold[i : i + 512], key, n_samples=reference_samples, generator=reference_rng)
                for i in range(0, n_hold, 512)
            ]).double()
        report.reference_elbo = (float(per_image.mean()), float(per_image.std()))
        bank.set_reference_elbo(key, *report.reference_elbo)
    for p in params:
        p.requires_grad_(False)
        p.grad = None
    bank.train(was_training)
    report.seconds = time.perf_counter() - start
    return report


__all__ = ["GeneratorFitReport", "fit_generator"]
