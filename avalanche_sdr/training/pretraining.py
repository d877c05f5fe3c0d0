"""Offline pretraining of the backbone E0 and the base VAE on warm-start tasks.

The paper starts from an ImageNet-pretrained ResNet18 (and an ImageNette VAE). Where
no such weights exist (offline machines, CPU runs), E0 — and the base VAE of the "EFT
for E and G" variant — may instead be pretrained on the warm-start tasks' *training*
data only (option (b) of :ref:`method-backbone`). These functions do that, explicitly,
before the stream starts; results produced this way must say so (the examples record
it in their JSON). Pretraining is task-aware like the stream: one temporary linear
head per warm-start experience, discarded afterwards. Nothing of a later task is
seen. By default :func:`pretrain_backbone` leaves half of each warm-start class out
(``holdout=``; :func:`hold_out_references`) and records on the backbone what it trained
on (:class:`~avalanche_sdr.detection.two_sample.PretrainingRecord`, attribute
``sdr_pretraining``): the two-sample rule then takes those tasks' entries' references
from images E0 was not trained on, with no further step
(:class:`~avalanche_sdr.detection.two_sample.ReferenceHoldout`; why:
docs/results/detection.md, "Warm-start references").

Progress (``verbose=True``) goes to stderr, so a script's stdout stays the same from
run to run; its format: docs/method.rst, section "Pretraining E0 and the base VAE:
progress output".
"""
from __future__ import annotations

import math
import sys
import time
from typing import Callable, Optional, Sequence, Union

import torch
from torch import nn

from avalanche_sdr._batching import eval_batch_size
from avalanche_sdr._checks import check_int, check_positive
from avalanche_sdr.detection.two_sample import (DEFAULT_HOLDOUT_SHARE, PRETRAINING_RECORD, PretrainingRecord,
                                                ReferenceHoldout, pretraining_record)
from avalanche_sdr.training.data import read_task_data


def _task_label(experience) -> int:
    labels = list(experience.task_labels)
    if len(labels) != 1:
        raise ValueError(f"a warm-start experience holds one task, got task labels {labels}")
    return int(labels[0])


def hold_out_references(experiences: Sequence, share: float, seed: int = 0) -> ReferenceHoldout:
    """Draw, per warm-start experience and class, ``round(share * n)`` of its ``n``
    training images to leave out of E0's pretraining (:meth:`ReferenceHoldout.draw`).

    :param experiences: the warm-start training experiences (one task label each).
    :param share: fraction held out per class, in (0, 1).
    :param seed: seed of the draw.
    :return: the holdout, for :func:`pretrain_backbone` (``holdout=``) and the
        :class:`~avalanche_sdr.detection.TwoSampleDetector` (``reference_holdout=``).
    :raises ValueError: no experience, a share outside (0, 1), two experiences with one
        task label, or a class too small to hold out from (before any image is read
        twice).
    """
    if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0.0 < float(share) < 1.0:
        raise ValueError(f"the held-out share must lie in (0, 1), got {share!r} (e.g. 0.25)")
    if len(experiences) == 0:
        raise ValueError("a reference holdout needs at least one warm-start experience")
    tasks = [_task_label(exp) for exp in experiences]
    if len(set(tasks)) != len(tasks):
        raise ValueError(f"warm-start experiences must carry distinct task labels, got {tasks}")
    return ReferenceHoldout.draw({t: read_task_data(exp)[1] for t, exp in zip(tasks, experiences)}, share, seed)


def _warm_start_tensors(experiences: Sequence, holdout: Optional[ReferenceHoldout] = None):
    if len(experiences) == 0:
        raise ValueError("pretraining needs at least one warm-start experience")
    if holdout is not None:
        if not isinstance(holdout, ReferenceHoldout):
            raise TypeError(f"holdout must be a ReferenceHoldout (hold_out_references), got {type(holdout).__name__}")
        tasks = [_task_label(exp) for exp in experiences]
        if sorted(tasks) != sorted(holdout.rows):
            raise ValueError(f"the holdout was drawn for tasks {sorted(holdout.rows)}, the warm-start experiences "
                             f"are tasks {sorted(tasks)}: draw it from the same experiences")
    xs, ys, ts = [], [], []
    for i, exp in enumerate(experiences):
        x, y = read_task_data(exp)
        if holdout is not None:
            keep = holdout.kept(_task_label(exp), len(y))
            x, y = x[keep], y[keep]
        xs.append(x)
        ys.append(y)
        ts.append(torch.full_like(y, i))
    return torch.cat(xs), torch.cat(ys), torch.cat(ts)


def _check_budget(module: nn.Module, what: str, *, epochs: int, lr: float, batch_size: int, device) -> None:
    """Refuse a pretraining budget that cannot act, before any data is read.

    ``epochs=0`` is allowed: the module is then frozen as it is (E0 as initialised or as
    loaded, the examples' ``--pretrain-epochs 0``), which is a choice, not a mistake.
    """
    if not isinstance(module, nn.Module):
        raise TypeError(f"{what} must be a torch.nn.Module, got {type(module).__name__}")
    check_int(epochs, "epochs", minimum=0, hint=" (0: no pretraining, the module is only frozen)")
    check_positive(lr, "lr", hint=" (Adam's learning rate, e.g. 1e-3)")
    check_int(batch_size, "batch_size")
    eval_batch_size(device)  # a device torch knows


def _set_trainable(module: nn.Module, trainable: bool) -> None:
    """Unfreeze ``module``'s parameters, or freeze them and drop their gradients."""
    for p in module.parameters():
        p.requires_grad_(trainable)
        if not trainable:
            p.grad = None


def _run_epochs(n: int, *, epochs: int, batch_size: int, step: Callable[[torch.Tensor], float],
                desc: str, quantity: str, verbose: bool, n_tasks: int) -> None:
    """``epochs`` passes over ``n`` samples in random mini-batches (indices from the global
    torch RNG, as every training loop of a seeded script); ``step(indices)`` trains on one
    mini-batch and returns the batch's summed ``quantity`` (loss or ELBO). ``verbose``:
    progress as the module docstring says, labelled ``[desc]``; ``n_tasks``: warm-start
    tasks, for the summary line."""
    from tqdm import tqdm

    # disable=None: tqdm disables the bar where stderr is not a terminal.
    bar = tqdm(total=epochs, desc=desc, unit="epoch", file=sys.stderr, leave=False, dynamic_ncols=True,
               disable=None if verbose else True)
    lines = verbose and bar.disable  # plain progress lines instead of the bar
    every = max(1, math.ceil(epochs / 5))
    start = time.perf_counter()
    mean = math.nan
    try:
        for epoch in range(1, epochs + 1):
            perm = torch.randperm(n)
            total = 0.0
            for i in range(0, n, batch_size):
                total += step(perm[i : i + batch_size])
            mean = total / n
            bar.set_postfix({quantity: f"{mean:.4g}"})
            bar.update(1)
            if lines and epoch % every == 0 and epoch < epochs:
                print(f"[{desc}] epoch {epoch}/{epochs}: {quantity} {mean:.4g}", file=sys.stderr, flush=True)
    finally:
        bar.close()
    if verbose:
        print(f"[{desc}] {epochs} epochs on {n_tasks} warm-start tasks ({n} images): {quantity} {mean:.4g} | "
              f"{time.perf_counter() - start:.1f}s", file=sys.stderr, flush=True)


def pretrain_backbone(
    backbone: nn.Module,
    experiences: Sequence,
    *,
    epochs: int,
    lr: float = 1e-3,
    batch_size: int = 64,
    device: str = "cpu",
    verbose: bool = True,
    holdout: Union[ReferenceHoldout, float, None] = DEFAULT_HOLDOUT_SHARE,
) -> nn.Module:
    """Train ``backbone`` jointly on the warm-start experiences (one head each), without
    the held-out images, and record what it trained on.

    :param backbone: module with ``feature_dim``; [N, C, H, W] -> [N, feature_dim].
    :param experiences: the warm-start training experiences (e.g. ``train_stream[:3]``).
    :param epochs: passes over the union of their training data; 0: none (the backbone
        is only frozen, e.g. weights loaded elsewhere).
    :param lr: Adam learning rate.
    :param batch_size: mini-batch size (images).
    :param device: torch device.
    :param verbose: show progress with each epoch's mean loss and a summary line on stderr
        (see the module doc).
    :param holdout: the images to leave out, the two-sample rule's references of these
        tasks' entries: a share of each class, in (0, 1) (default
        :data:`~avalanche_sdr.detection.two_sample.DEFAULT_HOLDOUT_SHARE`, 0.5, drawn by
        :func:`hold_out_references` with seed 0), or a holdout of the same experiences
        (:func:`hold_out_references`); ``None``: train on every image (the two-sample rule
        then warns that its level does not hold for repeats of these tasks).
    :return: the same backbone, trained, in eval mode, with its
        :class:`~avalanche_sdr.detection.two_sample.PretrainingRecord` (the tasks and the
        holdout) in the attribute ``sdr_pretraining``, which copies of it carry
        (:func:`~avalanche_sdr.detection.two_sample.pretraining_record` reads it; a backbone
        pretrained twice records both: :meth:`PretrainingRecord.then
        <avalanche_sdr.detection.two_sample.PretrainingRecord.then>`). With ``epochs=0``
        nothing is trained and the record is left as it was.
    :raises ValueError: ``epochs`` not an int >= 0 (0 only freezes the backbone),
        ``lr`` not a positive number, ``batch_size`` not a positive int, an unknown
        ``device``, no experience, a share outside (0, 1); all before any data is read.
    :raises TypeError: ``backbone`` is not a module with an int ``feature_dim``; ``holdout``
        neither a share, a holdout nor ``None``.
    """
    _check_budget(backbone, "backbone", epochs=epochs, lr=lr, batch_size=batch_size, device=device)
    feature_dim = getattr(backbone, "feature_dim", None)
    if isinstance(feature_dim, bool) or not isinstance(feature_dim, int):
        raise TypeError(f"backbone needs an int attribute feature_dim, got {feature_dim!r} on "
                        f"{type(backbone).__name__}")
    previous = pretraining_record(backbone)
    if holdout is not None and not isinstance(holdout, ReferenceHoldout):
        if isinstance(holdout, bool) or not isinstance(holdout, (int, float)):
            raise TypeError(f"holdout must be a share in (0, 1), a ReferenceHoldout (hold_out_references) or None, "
                            f"got {type(holdout).__name__}")
        holdout = hold_out_references(experiences, holdout)
    x, y, t = _warm_start_tensors(experiences, holdout)
    n_tasks = int(t.max()) + 1
    heads = nn.ModuleList(
        nn.Linear(backbone.feature_dim, int(y[t == i].max()) + 1) for i in range(n_tasks)
    )
    backbone.to(device).train()
    heads.to(device).train()
    _set_trainable(backbone, True)
    optimizer = torch.optim.Adam(list(backbone.parameters()) + list(heads.parameters()), lr=lr)
    loss_fn = nn.CrossEntropyLoss()

    def step(idx: torch.Tensor) -> float:
        xb, yb, tb = x[idx].to(device), y[idx].to(device), t[idx]
        feats = backbone(xb)
        loss = sum(
            loss_fn(heads[task](feats[tb == task]), yb[tb == task]) * (tb == task).sum()
            for task in torch.unique(tb).tolist()
        ) / len(idx)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        return loss.item() * len(idx)

    _run_epochs(x.shape[0], epochs=epochs, batch_size=batch_size, step=step, desc="pretrain E0",
                quantity="loss", verbose=verbose, n_tasks=len(experiences))
    _set_trainable(backbone, False)
    if epochs > 0:
        trained = PretrainingRecord(tuple(_task_label(exp) for exp in experiences), holdout)
        setattr(backbone, PRETRAINING_RECORD, trained if previous is None else previous.then(trained))
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
    :param epochs: passes over their inputs; 0: none (the VAE is only frozen).
    :param lr: Adam learning rate.
    :param batch_size: mini-batch size (images).
    :param device: torch device.
    :param verbose: show progress with each epoch's mean ELBO (nats per image) and a
        summary line on stderr (see the module doc).
    :return: the same VAE, trained, frozen, in eval mode.
    :raises ValueError: ``epochs`` not an int >= 0 (0 only freezes the VAE), ``lr`` not
        a positive number, ``batch_size`` not a positive int, an unknown ``device``, no
        experience; all before any data is read.
    """
    _check_budget(vae, "vae", epochs=epochs, lr=lr, batch_size=batch_size, device=device)
    x, _, _ = _warm_start_tensors(experiences)
    vae.to(device).train()
    _set_trainable(vae, True)
    optimizer = torch.optim.Adam(vae.parameters(), lr=lr)

    def step(idx: torch.Tensor) -> float:
        elbo = vae.elbo(x[idx].to(device))
        optimizer.zero_grad(set_to_none=True)
        (-elbo.mean()).backward()
        optimizer.step()
        return elbo.sum().item()

    _run_epochs(x.shape[0], epochs=epochs, batch_size=batch_size, step=step, desc="pretrain VAE",
                quantity="elbo (nats)", verbose=verbose, n_tasks=len(experiences))
    _set_trainable(vae, False)
    return vae.eval()


__all__ = ["hold_out_references", "pretrain_backbone", "pretrain_vae"]
