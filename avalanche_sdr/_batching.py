"""Batch sizes of evaluation-mode passes (features, evaluation, detection, routing), chosen
for the device that runs them: the one definition every ``batch_size=None`` /
``eval_mb_size=None`` default of the package resolves through.

A batch in eval mode changes nothing but speed (BatchNorm reads its running statistics),
so the choice is the fastest measured one: on a CPU a small batch keeps a forward pass's
activations in cache (a larger one costs up to twice as much per image); an accelerator
wants large batches to fill its cores. The measurements: docs/results/where_the_time_goes.md.
A leaf module (torch only).
"""
from __future__ import annotations

from typing import Any, Optional

import torch

from avalanche_sdr._checks import check_int

CPU_EVAL_BATCH = 64
"""Images per evaluation-mode pass on a CPU (the fastest per image measured on 1x28x28 and
1x8x8 images; 256 cost up to twice as much per image)."""

ACCELERATOR_EVAL_BATCH = 256
"""Images per evaluation-mode pass on any other device (CUDA, MPS, ...)."""


def eval_batch_size(device: Any = None, batch_size: Optional[int] = None, name: str = "batch_size") -> int:
    """The batch size of an evaluation-mode pass on ``device``: ``batch_size`` when given,
    else :data:`CPU_EVAL_BATCH` on a CPU and :data:`ACCELERATOR_EVAL_BATCH` elsewhere.

    :param device: a ``torch.device``, a device string (``"cpu"``, ``"cuda"``,
        ``"cuda:1"``, ...) or ``None`` (the CPU, torch's default device).
    :param batch_size: images per pass chosen by the caller, or ``None``.
    :param name: the caller's name of ``batch_size``, for the error message.
    :return: images per pass, a positive int.
    :raises ValueError: ``batch_size`` is not ``None`` or a positive int, or ``device`` is
        not a device torch knows.
    """
    if batch_size is not None:
        return check_int(batch_size, name, hint=" or None (chosen for the device)")
    try:
        kind = torch.device("cpu" if device is None else device).type
    except (RuntimeError, TypeError) as err:
        raise ValueError(f"device must be a torch.device or a device string such as 'cpu' or 'cuda', "
                         f"got {device!r}") from err
    return CPU_EVAL_BATCH if kind == "cpu" else ACCELERATOR_EVAL_BATCH


def check_batch_size(batch_size: Optional[int], name: str = "batch_size") -> Optional[int]:
    """``batch_size`` if it is ``None`` (chosen for the device when used: :func:`eval_batch_size`)
    or a positive int.

    :raises ValueError: anything else, naming ``name``.
    """
    if batch_size is None:
        return None
    return check_int(batch_size, name, hint=" or None (chosen for the device)")


__all__ = ["ACCELERATOR_EVAL_BATCH", "CPU_EVAL_BATCH", "check_batch_size", "eval_batch_size"]
