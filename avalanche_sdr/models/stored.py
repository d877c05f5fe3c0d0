"""Stored tensors: how the repository keeps images and named buffers (a leaf module).

The formats every part of SDR stores its tensors in, so that a router, a detector or
the learning reuse reads them from here and not from the repository model:

- :func:`stored_images` / :func:`float_images`: images kept as uint8 ``round(x * 255)``
  when they lie in [0, 1] (4x smaller), and read back as float32;
- :class:`TensorSet`: one named set of buffers (an entry's detection state, a router's
  state, an entry's stored images), in the ``state_dict`` and every memory count;
- :class:`TensorStore`: the sets of one kind by key (``"3"``, ``"lda_base"``), written
  only through its methods.

Imports torch alone: nothing of SDR.
"""
from __future__ import annotations

from typing import Any, Dict, List, Mapping

import torch
from torch import Tensor, nn


def stored_images(images: Tensor) -> Tensor:
    """Images as the repository stores them: uint8 ``round(x * 255)`` when every value
    lies in [0, 1] (4x smaller), else float32 (uint8 input is kept as it is).

    :param images: [n, C, H, W] float or uint8 images.
    """
    if images.is_floating_point() and images.numel() and float(images.min()) >= 0.0 and float(images.max()) <= 1.0:
        return (images * 255.0).round().to(torch.uint8)
    return images if images.dtype == torch.uint8 else images.float()


def float_images(images: Tensor) -> Tensor:
    """Stored images (:func:`stored_images`) back as float32: uint8 ones divided by 255."""
    return images.float() / 255.0 if images.dtype == torch.uint8 else images.float()


class TensorSet(nn.Module):
    """A named set of buffers (no parameters): one entry's detection state, or a router's.

    Buffers are part of the ``state_dict`` (so checkpoints keep them) and of every
    memory count, and move with ``.to(device)``.
    """

    def __init__(self, tensors: Mapping[str, Tensor]):
        super().__init__()
        for name, tensor in tensors.items():
            self.register_buffer(name, tensor.detach().clone())

    def as_dict(self) -> Dict[str, Tensor]:
        """The buffers by name."""
        return dict(self.named_buffers())

    def shapes(self) -> Dict[str, List[Any]]:
        """``{name: [shape list, dtype name]}`` (JSON-safe), what a layout records."""
        return {name: [list(t.shape), str(t.dtype).replace("torch.", "")] for name, t in self.named_buffers()}

    @staticmethod
    def zeros(shapes: Mapping[str, Any]) -> Dict[str, Tensor]:
        """Zero tensors of the shapes and dtypes :meth:`shapes` recorded (values to load next)."""
        return {name: torch.zeros(shape, dtype=getattr(torch, dtype)) for name, (shape, dtype) in shapes.items()}


class TensorStore(nn.ModuleDict):
    """:class:`TensorSet` s by key (a ``ModuleDict``: ``state_dict`` keys ``<key>.<name>``),
    written only through :meth:`put` and :meth:`add`, read through :meth:`read`."""

    def put(self, key: str, tensors: Mapping[str, Tensor], device) -> None:
        """Store (or replace) the set ``key``: ``tensors`` copied, without gradients, on ``device``.

        :param tensors: name -> tensor (names without dots).
        """
        self[key] = TensorSet(tensors).to(device)

    def add(self, key: str, tensors: Mapping[str, Tensor]) -> None:
        """Add ``tensors`` to (or replace them in) the existing set ``key``, on its device.

        :raises KeyError: no set ``key``.
        """
        state = self[key]
        device = next(iter(state.buffers())).device
        self.put(key, dict(state.as_dict(), **tensors), device)

    def read(self, key: str) -> Dict[str, Tensor]:
        """The tensors of the set ``key`` by name (empty when there is none)."""
        return self[key].as_dict() if key in self else {}

    def layout(self) -> List[List[Any]]:
        """``[[key, {name: [shape, dtype]}], ...]``: what :meth:`restore` needs (JSON-safe)."""
        return [[key, state.shapes()] for key, state in self.items()]

    def restore(self, layout, device) -> None:
        """Sets of zeros of the shapes of :meth:`layout` (values to load next)."""
        for key, shapes in layout:
            self.put(str(key), TensorSet.zeros(shapes), device)


__all__ = ["TensorSet", "TensorStore", "float_images", "stored_images"]
