"""Offline pretraining of the backbone E0 and the base VAE on warm-start tasks.

The paper starts from an ImageNet-pretrained ResNet18 (and an ImageNette VAE). Where
no such weights exist (offline machines, CPU runs), DESIGN.md allows E0 — and the
base VAE of the "EFT for E and G" variant — to be pretrained on the warm-start tasks'
*training* data only. These functions do that, explicitly, before the stream starts;
results produced this way must say so (the examples record it in their JSON).

Pretraining is task-aware like the stream: one temporary linear head per warm-start
experience, discarded afterwards. Nothing of a later task is seen.
"""
from __future__ import annotations

from typing import Sequence

import torch
from torch import nn

from avalanche_sdr.training.data import read_task_data


def _warm_start_tensors(experiences: Sequence):
    if len(experiences) == 0:
        raise ValueError("pretraining needs at least one warm-start experience")
    xs, ys, ts = [], [], []
    for i, exp in enumerate(experiences):
        x, y = read_task_data(exp)
        xs.append(x)
        ys.append(y)
        ts.append(torch.full_like(y, i))
    return torch.cat(xs), torch.cat(ys), torch.cat(ts)


def pretrain_backbone(
    backbone: nn.Module,
    experiences: Sequence,
    *,
    epochs: int,
    lr: float = 1e-3,
    batch_size: int = 64,
    device: str = "cpu",
    verbose: bool = True,
) -> nn.Module:
    """Train ``backbone`` jointly on the warm-start experiences (one head each).

    :param backbone: module with ``feature_dim``; [N, C, H, W] -> [N, feature_dim].
    :param experiences: the warm-start training experiences (e.g. ``train_stream[:3]``).
    :param epochs: passes over the union of their training data.
    :param lr: Adam learning rate.
    :param batch_size: mini-batch size.
    :param device: torch device.
    :param verbose: print one line per epoch (mean loss).
    :return: the same backbone, trained, in eval mode.
    """
    x, y, t = _warm_start_tensors(experiences)
    n_tasks = int(t.max()) + 1
    heads = nn.ModuleList(
        nn.Linear(backbone.feature_dim, int(y[t == i].max()) + 1) for i in range(n_tasks)
    )
    backbone.to(device).train()
    heads.to(device).train()
    for p in backbone.parameters():
        p.requires_grad_(True)
    optimizer = torch.optim.Adam(list(backbone.parameters()) + list(heads.parameters()), lr=lr)
    loss_fn = nn.CrossEntropyLoss()
    for epoch in range(1, epochs + 1):
        perm = torch.randperm(x.shape[0])
        total = 0.0
        for i in range(0, x.shape[0], batch_size):
            idx = perm[i : i + batch_size]
            xb, yb, tb = x[idx].to(device), y[idx].to(device), t[idx]
            feats = backbone(xb)
            loss = sum(
                loss_fn(heads[task](feats[tb == task]), yb[tb == task]) * (tb == task).sum()
                for task in torch.unique(tb).tolist()
            ) / len(idx)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            total += loss.item() * len(idx)
        if verbose:
            print(f"[pretrain E0] epoch {epoch}/{epochs} loss={total / x.shape[0]:.4f}", flush=True)
    for p in backbone.parameters():
        p.requires_grad_(False)
        p.grad = None
    return backbone.eval()


def pretrain_vae(
    vae: nn.Module,
    experiences: Sequence,
    *,
    epochs: int,
    lr: float = 1e-3,
    batch_size: int = 64,
    device: str = "cpu",
    verbose: bool = True,
) -> nn.Module:
    """Train a base VAE on the union of the warm-start experiences' inputs.

    :param vae: a :class:`~avalanche_sdr.models.vae.ConvVAE`.
    :param experiences: the warm-start training experiences.
    :param epochs: passes over their inputs.
    :param lr: Adam learning rate.
    :param batch_size: mini-batch size.
    :param device: torch device.
    :param verbose: print one line per epoch (mean ELBO, nats per image).
    :return: the same VAE, trained, frozen, in eval mode.
    """
    x, _, _ = _warm_start_tensors(experiences)
    vae.to(device).train()
    for p in vae.parameters():
        p.requires_grad_(True)
    optimizer = torch.optim.Adam(vae.parameters(), lr=lr)
    for epoch in range(1, epochs + 1):
        perm = torch.randperm(x.shape[0])
        total = 0.0
        for i in range(0, x.shape[0], batch_size):
            xb = x[perm[i : i + batch_size]].to(device)
            elbo = vae.elbo(xb)
            optimizer.zero_grad(set_to_none=True)
            (-elbo.mean()).backward()
            optimizer.step()
            total += elbo.sum().item()
        if verbose:
            print(f"[pretrain VAE] epoch {epoch}/{epochs} elbo={total / x.shape[0]:.1f} nats", flush=True)
    for p in vae.parameters():
        p.requires_grad_(False)
        p.grad = None
    return vae.eval()


__all__ = ["pretrain_backbone", "pretrain_vae"]
