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

    The whole task is read at once, in dataset order, through the dataset's ``"eval"``
    transform group (``experience.dataset.eval()``): deterministic, without the
    ``"train"`` group's augmentation, so detection sees the same tensors every time.
    The experience's own dataset is left in its current group. Read with
    :func:`~avalanche_sdr.dataset_tensors.dataset_tensors` (one ``DataLoader`` pass,
    no workers); a :func:`~avalanche_sdr.benchmarks.mixed_similarity_benchmark`'s
    in-memory datasets serve each sample by a uint8-to-float32 conversion.

    :return: x [N, C, H, W] float32, y [N] int64.
    :raises InvalidTaskDataError: if the experience holds no samples.
    """
    dataset = experience.dataset
    if len(dataset) == 0:
        raise InvalidTaskDataError(f"experience {experience.current_experience} holds no samples")
    x, y = dataset_tensors(dataset.eval())[:2]
    return x.float(), y.long()


def check_task_data(x: Tensor, y: Tensor, *, task: int, input_shape: Optional[Sequence[int]] = None,
                    class_ids: bool = False) -> int:
    """Validate one task's training data and return its number of classes c.

    :param x: [N, C, H, W] inputs.
    :param y: [N] labels: local labels, exactly 0..c-1 (each present); with
        ``class_ids=True`` also any c distinct class ids >= 0 (global class ids such
        as Avalanche's ``class_ids_from_zero_in_each_exp=False`` gives, e.g. {4, 7}),
        which :func:`local_labels` maps to 0..c-1.
    :param task: task label, for error messages.
    :param input_shape: (C, H, W) the model takes (``SDRModel.input_shape``);
        ``None`` skips the check.
    :param class_ids: accept labels that are not 0..c-1 as class ids.
    :raises InvalidTaskDataError: no samples; images not [N, C, H, W] or of another
        shape than ``input_shape``; NaN or Inf in x; labels not one-dimensional
        integers; negative labels; non-contiguous labels (unless ``class_ids``).
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
    if y.dim() != 1 or y.shape[0] != x.shape[0] or y.is_floating_point() or y.is_complex():
        raise InvalidTaskDataError(
            f"task {task}: expected {x.shape[0]} integer labels [N], got {tuple(y.shape)} of {y.dtype}"
        )
    if int(y.min()) < 0:
        what = "local class indices >= 0 (or class ids >= 0)" if class_ids else "local class indices >= 0"
        raise InvalidTaskDataError(f"task {task}: labels must be {what}, got {int(y.min())}")
    present = torch.unique(y)
    if class_ids:
        return len(present)
    c = int(present.max()) + 1
    if len(present) != c:
        missing = sorted(set(range(c)) - set(present.tolist()))
        raise InvalidTaskDataError(
            f"task {task}: labels must be contiguous 0..c-1 (local to the task); "
            f"classes {missing} are missing below the largest label {c - 1}"
        )
    return c


def local_labels(y: Tensor) -> Tuple[Tensor, Tensor]:
    """Map a task's labels to local class indices 0..c-1.

    :param y: [N] labels, c distinct values >= 0 (local labels or global class ids).
    :return: ``(local, class_ids)``: ``local`` [N] int64 in 0..c-1 with
        ``class_ids[local] == y``, and ``class_ids`` [c] int64, the task's sorted class
        ids. Labels that already are 0..c-1 come back unchanged (``class_ids`` is
        then ``arange(c)``).
    """
    class_ids = torch.unique(y).long()
    if torch.equal(class_ids, torch.arange(len(class_ids), device=class_ids.device)):
        return y.long(), class_ids
    return torch.searchsorted(class_ids, y.long()), class_ids


__all__ = ["InvalidTaskDataError", "read_task_data", "check_task_data", "local_labels"]
