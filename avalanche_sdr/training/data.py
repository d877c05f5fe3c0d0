"""Checks SDR makes on a task's data before using it."""
from __future__ import annotations

from typing import Optional, Sequence, Tuple

import torch
from torch import Tensor

from avalanche_sdr.dataset_tensors import dataset_tensors


class InvalidTaskDataError(ValueError):
    """An experience's data cannot be used: empty, wrong image shape, non-finite inputs, or bad labels."""


def read_task_data(experience) -> Tuple[Tensor, Tensor]:
    """Inputs and labels of an experience's training data, with eval transforms.

    :return: x [N, C, H, W] float32, y [N] int64.
    :raises InvalidTaskDataError: if the experience holds no samples.
    """
    dataset = experience.dataset
    if len(dataset) == 0:
        raise InvalidTaskDataError(f"experience {experience.current_experience} holds no samples")
    x, y = dataset_tensors(dataset.eval())[:2]
    return x.float(), y.long()


def check_task_data(x: Tensor, y: Tensor, *, task: int, input_shape: Optional[Sequence[int]] = None) -> int:
    """Validate one task's training data and return its number of classes c.

    :param x: [N, C, H, W] inputs.
    :param y: [N] local labels, expected to be exactly 0..c-1 (each present).
    :param task: task label, for error messages.
    :param input_shape: (C, H, W) the model takes (``SDRModel.input_shape``);
        ``None`` skips the check.
    :raises InvalidTaskDataError: no samples; images not [N, C, H, W] or of another
        shape than ``input_shape``; NaN or Inf in x; negative or non-contiguous
        labels.
    """
    if x.shape[0] == 0:
        raise InvalidTaskDataError(f"task {task}: the experience holds no samples")
    if x.dim() != 4:
        raise InvalidTaskDataError(f"task {task}: expected images [N, C, H, W], got shape {tuple(x.shape)}")
    if input_shape is not None and tuple(x.shape[1:]) != tuple(input_shape):
        c, h, w = input_shape
        raise InvalidTaskDataError(
            f"task {task}: images are {'x'.join(map(str, x.shape[1:]))} (C x H x W) but the repository "
            f"takes {c}x{h}x{w} (its backbone and generators were built for {c}-channel {h}x{w} images)"
        )
    bad = (~torch.isfinite(x.flatten(1))).any(dim=1)
    if bool(bad.any()):
        raise InvalidTaskDataError(
            f"task {task}: {int(bad.sum())} of {x.shape[0]} inputs contain NaN or Inf values"
        )
    if int(y.min()) < 0:
        raise InvalidTaskDataError(f"task {task}: labels must be local class indices >= 0, got {int(y.min())}")
    present = torch.unique(y)
    c = int(present.max()) + 1
    if len(present) != c:
        missing = sorted(set(range(c)) - set(present.tolist()))
        raise InvalidTaskDataError(
            f"task {task}: labels must be contiguous 0..c-1 (local to the task); "
            f"classes {missing} are missing below the largest label {c - 1}"
        )
    return c


__all__ = ["InvalidTaskDataError", "read_task_data", "check_task_data"]
