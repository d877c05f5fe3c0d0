"""In-memory image datasets, conversion of torchvision-style datasets to arrays, and
lazy views of such datasets.

In memory (the fast path), every image leaving this module is a float32 tensor in
[0, 1] of shape [C, H, W]. Images are *stored* compactly (uint8 where the source is
8-bit) together with the value that maps to 1.0 (``max_value``: 255 for 8-bit images,
16 for scikit-learn's digits, 1 for float images), and converted to float32 one sample
at a time. A :class:`DatasetView` instead reads a dataset's samples on demand, through
the dataset's own transforms; :class:`ImageTransform` turns what a transform returns
into a float32 tensor.
"""

from typing import Any, List, Optional, Sequence, Tuple

import numpy as np
import torch
from torch.utils.data import Dataset

ArrayLike = Any


def _as_tensor(array: ArrayLike) -> torch.Tensor:
    """A tensor sharing memory with ``array`` where possible (copies read-only arrays)."""
    if torch.is_tensor(array):
        return array
    array = np.asarray(array)
    if not (array.flags.writeable and array.flags.c_contiguous):
        array = np.array(array)
    return torch.from_numpy(array)


def _check_stored_range(data: torch.Tensor, max_value: float) -> None:
    """Refuse stored images that do not map to [0, 1] by ``/ max_value`` (see
    :class:`ImageArrayDataset`); uint8 images with ``max_value >= 255`` need no pass."""
    if data.numel() == 0 or (data.dtype == torch.uint8 and max_value >= 255):
        return
    if data.is_floating_point() and not bool(torch.isfinite(data).all()):
        raise ValueError("images contain NaN or Inf values")
    low, high = float(data.min()), float(data.max())
    if data.is_floating_point() and max_value > 1.0 and 0.0 <= low and 0.0 < high <= 1.0:
        raise ValueError(f"the float images lie in [{low:.4g}, {high:.4g}] but max_value={max_value:g} would map "
                         f"them to [0, {1.0 / max_value:.4g}]: pass max_value=1.0 for images in [0, 1]")
    if low < 0.0 or high > max_value:
        raise ValueError(f"images must lie in [0, max_value={max_value:g}] (images / max_value in [0, 1]); got values "
                         f"in [{low:.4g}, {high:.4g}]: pass the stored value of a white pixel as max_value (255 for "
                         "0-255 pixels) and leave out normalising transforms (e.g. Normalize)")


class ImageArrayDataset(Dataset):
    """A torchvision-style classification dataset held in memory.

    ``dataset[i]`` returns ``(x, y)``: ``x`` a float32 tensor [C, H, W] in [0, 1]
    (``images[i] / max_value``), ``y`` a Python int.

    :param images: [N, C, H, W] uint8 or floating array/tensor (stored as given:
        uint8 stays uint8, floats become float32), values in [0, ``max_value``].
    :param targets: [N] integer class labels.
    :param max_value: the stored value that maps to 1.0 (255 for 8-bit images, 1.0
        for float images in [0, 1]).
    :param classes: optional class names, ``classes[label]`` (torchvision convention).
    :raises ValueError: images not [N, C, H, W]; targets of another length; a
        ``max_value`` that is not positive; NaN or Inf; values outside
        [0, ``max_value``] (e.g. normalised images, or 0-255 pixels with
        ``max_value=1.0``); float images in [0, 1] given with ``max_value`` above 1
        (the default 255 would darken them 255 times: pass ``max_value=1.0``).

    Attributes: ``data`` (the stored [N, C, H, W] tensor), ``targets`` (int64 tensor
    [N]), ``max_value`` (float), ``classes`` (list of str or None).
    """

    def __init__(
        self,
        images: ArrayLike,
        targets: ArrayLike,
        *,
        max_value: float = 255.0,
        classes: Optional[Sequence[str]] = None,
    ):
        data = _as_tensor(images)
        if data.dim() != 4:
            raise ValueError(
                f"images must have shape [N, C, H, W]; got shape {tuple(data.shape)}"
            )
        if data.dtype != torch.uint8:
            data = data.to(torch.float32)
        labels = _as_tensor(targets).to(torch.int64).reshape(-1)
        if len(labels) != len(data):
            raise ValueError(
                f"images and targets differ in length: {len(data)} images, "
                f"{len(labels)} targets"
            )
        if isinstance(max_value, bool) or not isinstance(max_value, (int, float)) or not 0 < max_value < float("inf"):
            raise ValueError(f"max_value must be positive; got {max_value}")
        _check_stored_range(data, float(max_value))
        self.data: torch.Tensor = data
        self.targets: torch.Tensor = labels
        self.max_value: float = float(max_value)
        self.classes: Optional[List[str]] = list(classes) if classes is not None else None

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, index: int) -> Tuple[torch.Tensor, int]:
        x = self.data[index].to(torch.float32) / self.max_value
        return x, int(self.targets[index])

    def images(self, indices: Optional[ArrayLike] = None) -> torch.Tensor:
        """All (or the selected) images at once: float32 [n, C, H, W] in [0, 1]."""
        data = self.data if indices is None else self.data[torch.as_tensor(indices)]
        return data.to(torch.float32) / self.max_value


def targets_array(dataset: Any) -> np.ndarray:
    """The ``targets`` of a torchvision-style dataset as an int64 array [N].

    :raises TypeError: if the dataset has no ``targets`` attribute.
    """
    targets = getattr(dataset, "targets", None)
    if targets is None:
        raise TypeError(
            f"{type(dataset).__name__} has no `targets` attribute; a classification "
            "dataset with `targets` (one label per sample) is expected"
        )
    if torch.is_tensor(targets):
        targets = targets.cpu().numpy()
    array = np.asarray(list(targets) if not isinstance(targets, np.ndarray) else targets)
    return array.astype(np.int64).reshape(-1)


def _to_nchw_uint8(data: ArrayLike) -> Optional[torch.Tensor]:
    """A uint8 [N, H, W] / [N, H, W, C] / [N, C, H, W] array as [N, C, H, W], or None."""
    tensor = _as_tensor(data)
    if tensor.dtype != torch.uint8:
        return None
    if tensor.dim() == 3:
        return tensor.unsqueeze(1)
    if tensor.dim() == 4:
        if tensor.shape[-1] in (1, 3, 4):
            return tensor.permute(0, 3, 1, 2)
        if tensor.shape[1] in (1, 3, 4):
            return tensor
    return None


def _has_transforms(dataset: Any) -> bool:
    return any(
        getattr(dataset, name, None) is not None
        for name in ("transform", "target_transform", "transforms")
    )


def _image_to_tensor(image: Any) -> torch.Tensor:
    """One image (PIL, numpy HW/HWC, tensor CHW/HW) as a uint8 or float32 [C, H, W] tensor."""
    try:
        from PIL import Image
    except ImportError:  # pragma: no cover - Pillow ships with torchvision
        Image = None
    if Image is not None and isinstance(image, Image.Image):
        if image.mode not in ("L", "RGB", "RGBA"):
            image = image.convert("RGB")
        image = np.array(image)  # a writable copy (np.asarray of a PIL image is read-only)
    if isinstance(image, np.ndarray):
        if image.ndim == 2:
            image = image[None]
        elif image.ndim == 3 and image.shape[-1] in (1, 3, 4):
            image = image.transpose(2, 0, 1)
        elif not (image.ndim == 3 and image.shape[0] in (1, 3, 4)):
            raise ValueError(
                f"cannot read a numpy image of shape {image.shape}: expected [H, W], "
                "[H, W, C] or [C, H, W] with C in (1, 3, 4)"
            )
        tensor = torch.from_numpy(np.ascontiguousarray(image))
    elif torch.is_tensor(image):
        tensor = image.detach().cpu()
        if tensor.dim() == 2:
            tensor = tensor.unsqueeze(0)
        elif tensor.dim() != 3:
            raise ValueError(
                f"cannot read a tensor image of shape {tuple(tensor.shape)}: expected "
                "[C, H, W] or [H, W]"
            )
    else:
        raise TypeError(
            f"cannot read an image of type {type(image).__name__}: expected a PIL "
            "image, a numpy array or a torch tensor"
        )
    if tensor.dtype == torch.uint8:
        return tensor
    return tensor.to(torch.float32)


def gather_images(dataset: Any, indices: ArrayLike) -> Tuple[torch.Tensor, float]:
    """The images ``dataset[i]`` for ``i`` in ``indices``, stacked.

    Fast path: an :class:`ImageArrayDataset`, or a dataset without transforms whose
    ``data`` attribute is a uint8 array of one image per sample ([N, H, W],
    [N, H, W, C] or [N, C, H, W]; torchvision's MNIST family and CIFAR). Otherwise
    every image is read through ``__getitem__`` (PIL images, numpy arrays [H, W(, C)]
    and tensors [C, H, W] are accepted).

    :param dataset: a torchvision-style dataset, ``dataset[i] = (image, label)``.
    :param indices: [n] sample indices.
    :return: ``(images, max_value)``: images [n, C, H, W], uint8 or float32, with
        ``images / max_value`` in [0, 1].
    :raises ValueError: if images differ in shape or float images fall outside [0, 1].
    """
    index = np.asarray(indices, dtype=np.int64).reshape(-1)
    if isinstance(dataset, ImageArrayDataset):
        return dataset.data[torch.from_numpy(index)], dataset.max_value
    data = getattr(dataset, "data", None)
    if data is not None and not _has_transforms(dataset):
        try:
            n_data = len(data)
        except TypeError:
            n_data = -1
        if n_data == len(dataset):
            nchw = _to_nchw_uint8(data)
            if nchw is not None:
                return nchw[torch.from_numpy(index)].contiguous(), 255.0
    tensors = [_image_to_tensor(dataset[int(i)][0]) for i in index]
    if not tensors:
        raise ValueError("no images selected")
    shapes = {tuple(t.shape) for t in tensors}
    if len(shapes) != 1:
        raise ValueError(f"images differ in shape: {sorted(shapes)}; one shape is expected")
    if all(t.dtype == torch.uint8 for t in tensors):
        return torch.stack(tensors), 255.0
    stacked = torch.stack(
        [t.to(torch.float32) / 255.0 if t.dtype == torch.uint8 else t for t in tensors]
    )
    low, high = float(stacked.min()), float(stacked.max())
    if low < 0.0 or high > 1.0:
        raise ValueError(
            f"float images must lie in [0, 1]; got values in [{low:.4g}, {high:.4g}] "
            "(remove normalising transforms from the dataset)"
        )
    return stacked, 1.0


def to_float_image(image: Any) -> torch.Tensor:
    """One image as a float32 tensor [C, H, W]: PIL images, numpy arrays ([H, W],
    [H, W, C] or [C, H, W]) and uint8 tensors are scaled by 1/255 (like torchvision's
    ``ToTensor``); float tensors are returned unchanged (any range, e.g. normalised);
    other tensors are cast to float32. [H, W] inputs get a channel axis."""
    tensor = _image_to_tensor(image)
    if tensor.dtype == torch.uint8:
        return tensor.to(torch.float32) / 255.0
    return tensor


class ImageTransform:
    """A transform whose output is always a float32 tensor [C, H, W].

    ``ImageTransform(t)(image)`` applies ``t`` (if not None) and converts its result
    with :func:`to_float_image` unless it already is a floating-point tensor: a
    torchvision pipeline may therefore end with or without ``ToTensor``.

    :param transform: any callable on one image, or None (conversion only).
    """

    def __init__(self, transform: Optional[Any] = None):
        self.transform = transform

    def __call__(self, image: Any) -> torch.Tensor:
        if self.transform is not None:
            image = self.transform(image)
        if torch.is_tensor(image) and image.is_floating_point():
            return image
        return to_float_image(image)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.transform!r})"


class DatasetView(Dataset):
    """Selected samples of a dataset, read on demand, with new labels.

    ``view[i] = (dataset[indices[i]][0], labels[i])``: the image as the dataset returns
    it (after the dataset's own ``transform``, re-applied at every read), the label
    from ``labels`` (a Python int; the dataset's own label and ``target_transform``
    are ignored).

    :param dataset: a map-style dataset, ``dataset[i] = (image, label)``.
    :param indices: [n] int indices into ``dataset``.
    :param labels: [n] int labels, one per selected sample.
    """

    def __init__(self, dataset: Any, indices: ArrayLike, labels: ArrayLike):
        self.dataset = dataset
        self.indices = np.asarray(indices, dtype=np.int64).reshape(-1)
        self.labels = np.asarray(labels, dtype=np.int64).reshape(-1)
        if len(self.indices) != len(self.labels):
            raise ValueError(
                f"indices and labels differ in length: {len(self.indices)} indices, "
                f"{len(self.labels)} labels"
            )

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, index: int) -> Tuple[Any, int]:
        return self.dataset[int(self.indices[index])][0], int(self.labels[index])


__all__ = [
    "DatasetView",
    "ImageArrayDataset",
    "ImageTransform",
    "gather_images",
    "targets_array",
    "to_float_image",
]
