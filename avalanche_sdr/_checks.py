"""Argument checks shared across the package, so that every constructor words the same
mistake the same way.

Written here rather than taken from a library: the checks are a few lines each, and the
package's error messages (which tests match) must stay under its own control.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional, Sequence

if TYPE_CHECKING:
    import torch

__all__ = ["PIXEL_SLACK", "check_images", "check_int", "check_positive"]

PIXEL_SLACK = 0.1
"""How far below 0 or above 1 an image's values may lie before :func:`check_images`
refuses it: resampling [0, 1] images (bilinear, bicubic) overshoots by a few hundredths,
while 0-255 pixels or normalised images (mean 0, standard deviation 1) lie far outside."""


def check_int(value: Any, name: str, *, minimum: int = 1, hint: str = "") -> int:
    """``value`` if it is a plain ``int`` (not a ``bool``) of at least ``minimum``.

    :param value: the argument to check.
    :param name: its name, as the user spells it, for the message.
    :param minimum: the smallest value allowed (default 1: a positive int).
    :param hint: text appended to the requirement in the message, e.g.
        ``" (detection needs entries to compare to)"``.
    :returns: ``value`` unchanged.
    :raises ValueError: ``name must be a positive int`` (``minimum`` 1) or ``name must be
        an int >= minimum``, with the value given.
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        what = "a positive int" if minimum == 1 else f"an int >= {minimum}"
        raise ValueError(f"{name} must be {what}{hint}, got {value!r}")
    return value


def check_positive(value: Any, name: str, *, hint: str = "") -> float:
    """``value`` if it is a real number (``int`` or ``float``, not a ``bool``) above 0 and
    finite, e.g. a learning rate.

    :param value: the argument to check.
    :param name: its name, as the user spells it, for the message.
    :param hint: text appended to the requirement in the message.
    :returns: ``value`` unchanged.
    :raises ValueError: ``name must be a positive number``, with the value given.
    """
    if (isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0
            or value == float("inf")):
        raise ValueError(f"{name} must be a positive number{hint}, got {value!r}")
    return value


def check_images(x: Any, name: str = "x", *, shape: Optional[Sequence[int]] = None,
                 dtype: Optional["torch.dtype"] = None, device: Optional["torch.device"] = None) -> None:
    """Refuse a batch of images a model of this package cannot take as it is, saying
    what to do: every model takes float ``[N, C, H, W]`` images in [0, 1] (E0 normalises
    inside, docs/api.rst).

    :param x: the images: a tensor [N, C, H, W], floating point, values in [0, 1]
        (up to :data:`PIXEL_SLACK`), finite.
    :param name: the argument's name, as the user spells it, for the messages.
    :param shape: the (C, H, W) the model takes; ``None`` skips the check.
    :param dtype: the floating dtype the model computes in (e.g. ``torch.float32``);
        ``None``: any floating dtype.
    :param device: the device the model is on; ``None`` skips the check.
    :raises TypeError: ``x`` is not a tensor; integer or bool images (divide 0-255
        pixels by 255); another floating dtype than ``dtype`` (convert them).
    :raises ValueError: not [N, C, H, W] (one image [C, H, W]: ``x.unsqueeze(0)``);
        another (C, H, W) than ``shape``; another device than ``device``; NaN or Inf;
        values far outside [0, 1] (0-255 pixels, normalised images).
    """
    import torch

    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of images [N, C, H, W], got {type(x).__name__}")
    if x.dim() != 4:
        one = x.dim() == 3 and (shape is None or tuple(x.shape) == tuple(shape))
        raise ValueError(f"{name} must be a batch of images [N, C, H, W], got shape {tuple(x.shape)}"
                         + (f"; for one image write {name}.unsqueeze(0)" if one else ""))
    if shape is not None and tuple(x.shape[1:]) != tuple(shape):
        c, h, w = (int(v) for v in shape)
        what = (f"{int(x.shape[1])}-channel images" if int(x.shape[1]) != c
                else f"{int(x.shape[2])}x{int(x.shape[3])} images")
        raise ValueError(f"{name} holds {what} but the model takes {c}-channel {h}x{w} images ([N, {c}, {h}, {w}]: "
                         "what E0 was built for); give the images in the stream's shape")
    if not x.is_floating_point():
        raise TypeError(f"{name} is {x.dtype}: give float images in [0, 1], e.g. {name}.float() / 255 for "
                        "0-255 pixels")
    if dtype is not None and x.dtype != dtype:
        raise TypeError(f"{name} is {x.dtype} but the model computes in {dtype}: convert it with {name}.to({dtype})")
    want = None if device is None else torch.device(device)
    if want is not None and (x.device.type != want.type or want.index not in (None, x.device.index)):
        raise ValueError(f"{name} is on {x.device} but the model is on {device}: move it with {name}.to('{device}')")
    if not bool(torch.isfinite(x).all()):
        raise ValueError(f"{name} contains NaN or Inf values")
    if x.numel():
        low, high = float(x.min()), float(x.max())
        if low < -PIXEL_SLACK or high > 1.0 + PIXEL_SLACK:
            raise ValueError(
                f"{name} has values in [{low:.4g}, {high:.4g}], far outside [0, 1], the range every model of this "
                f"package takes (E0 normalises inside): divide 0-255 pixels by 255 ({name} / 255) and leave out "
                "normalising transforms (e.g. torchvision's Normalize)")
