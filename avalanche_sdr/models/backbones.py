"""Feature backbones E0: torchvision ResNet18, He et al.'s CIFAR ResNets, a small CNN.

Every builder returns a plain ``nn.Module`` with an int attribute ``feature_dim``
whose forward maps images [N, C, H, W] (float32 in [0, 1]) to globally
average-pooled penultimate features [N, feature_dim]. Input normalisation (and the
grey-to-RGB repeat for ``in_channels=1``) happens inside the module, so callers
always pass [0, 1] images. Pretrained weights are an explicit argument, never a
side effect of construction.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Dict, Optional, Sequence, Tuple, Union

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from avalanche_sdr._checks import check_int

IMAGENET_MEAN: Tuple[float, float, float] = (0.485, 0.456, 0.406)
IMAGENET_STD: Tuple[float, float, float] = (0.229, 0.224, 0.225)

CIFAR_RESNET_WEIGHTS_HELP = (
    "The CIFAR-10 ResNet-20/32/44/56 checkpoints (resnet20-12fca82f.th, resnet32-d509ac18.th, "
    "resnet44-014dd654.th, resnet56-4bfd9763.th) are published by the "
    "akamaster/pytorch_resnet_cifar10 project (GitHub release assets); pass the path of "
    "a downloaded copy."
)


def _check_in_channels(in_channels: int, allowed: Sequence[int]) -> int:
    if isinstance(in_channels, bool) or not isinstance(in_channels, int) or in_channels not in allowed:
        raise ValueError(f"in_channels must be one of {tuple(allowed)}, got {in_channels!r}")
    return in_channels


class InputNormalization(nn.Module):
    """Maps [0, 1] images to the network's input space.

    Checks the channel count, repeats a grey channel to the model's channel count
    when needed, then applies ``(x - mean) / std`` per channel.

    :param in_channels: channels of the images the caller passes (C).
    :param mean: per-channel mean of the network's training inputs (length 1 or the
        model's channel count); ``None`` skips normalisation.
    :param std: per-channel std, same length as ``mean``.
    :param model_channels: channels the network expects; a 1-channel input is
        repeated to this many channels.
    """

    def __init__(
        self,
        in_channels: int,
        mean: Optional[Sequence[float]],
        std: Optional[Sequence[float]],
        model_channels: Optional[int] = None,
    ):
        super().__init__()
        self.in_channels = in_channels
        self.model_channels = in_channels if model_channels is None else model_channels
        if in_channels != self.model_channels and in_channels != 1:
            raise ValueError(
                f"cannot map {in_channels} input channels to {self.model_channels}: only grey (1) is repeated"
            )
        if (mean is None) != (std is None):
            raise ValueError("mean and std must both be given or both be None")
        if mean is not None:
            m = torch.tensor(mean, dtype=torch.float32).view(1, -1, 1, 1)
            s = torch.tensor(std, dtype=torch.float32).view(1, -1, 1, 1)
            if m.shape != s.shape or m.shape[1] not in (1, self.model_channels):
                raise ValueError(f"mean/std must have 1 or {self.model_channels} entries, got {mean} / {std}")
            # Constants, not state: kept out of state_dict.
            self.register_buffer("mean", m, persistent=False)
            self.register_buffer("std", s, persistent=False)
        else:
            self.mean = None
            self.std = None

    def forward(self, x: Tensor) -> Tensor:
        """:param x: [N, in_channels, H, W] in [0, 1]. :return: [N, model_channels, H, W]."""
        if x.dim() != 4 or x.shape[1] != self.in_channels:
            raise ValueError(f"expected images [N, {self.in_channels}, H, W], got shape {tuple(x.shape)}")
        if self.in_channels != self.model_channels:
            x = x.expand(-1, self.model_channels, -1, -1)
        if self.mean is not None:
            x = (x - self.mean) / self.std
        return x

    def extra_repr(self) -> str:
        return f"in_channels={self.in_channels}, model_channels={self.model_channels}"


class ImageBackbone(nn.Module):
    """``body(normalize(x))``: a feature network behind its input normalisation.

    :param normalize: an :class:`InputNormalization`.
    :param body: network mapping normalised images to [N, feature_dim].
    :param feature_dim: size of the output features.
    """

    def __init__(self, normalize: InputNormalization, body: nn.Module, feature_dim: int):
        super().__init__()
        self.normalize = normalize
        self.body = body
        self.feature_dim = int(feature_dim)

    def forward(self, x: Tensor) -> Tensor:
        """:param x: [N, C, H, W] float32 in [0, 1]. :return: [N, feature_dim]."""
        return self.body(self.normalize(x))


class WeightsFileError(ValueError):
    """A weights file exists but cannot be used: not loadable by ``torch.load``, no
    ``state_dict`` in it, or one that does not fit the architecture. The message names
    the file."""


def _strip_prefix(state_dict: Dict[str, Tensor], prefix: str = "module.") -> Dict[str, Tensor]:
    return {k[len(prefix):] if k.startswith(prefix) else k: v for k, v in state_dict.items()}


def _load_file(path: Union[str, os.PathLike], what: str, how: str) -> object:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{what} weights file not found: {str(path)!r}. {how}")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # pickle, zip or tensor-format errors of a damaged or foreign file
        raise WeightsFileError(
            f"{str(path)!r} cannot be read as {what} weights ({type(err).__name__}: {err}). {how}"
        ) from err


# ---------------------------------------------------------------- ResNet18 (torchvision)
def resnet18_backbone(weights=None, in_channels: int = 3) -> ImageBackbone:
    """torchvision ResNet18 without its classifier: [N, C, H, W] -> [N, 512].

    :param weights: ``None`` (random initialisation, no input normalisation: inputs
        enter as [0, 1]); a ``torchvision.models.ResNet18_Weights`` enum (downloaded
        by torchvision, or read from its cache); or a path (str / PathLike) to a local
        ``state_dict`` file of ``torchvision.models.resnet18`` (optionally wrapped as
        ``{"state_dict": ...}`` and/or with a ``module.`` prefix; ``fc.*`` is
        ignored), loaded with ``weights_only=True``. With weights, ImageNet
        normalisation (mean (0.485, 0.456, 0.406), std (0.229, 0.224, 0.225)) is
        applied inside.
    :param in_channels: 3, or 1 to repeat a grey channel to RGB (paper: EMNIST).
    :raises FileNotFoundError: a weights path that does not exist.
    :raises WeightsFileError: a weights file that cannot be read or does not fit.
    :raises RuntimeError: enum weights that cannot be downloaded (no network).
    :raises TypeError: ``weights`` of another type.
    """
    from torchvision.models import ResNet18_Weights, resnet18

    _check_in_channels(in_channels, (1, 3))
    if weights is None:
        net = resnet18(weights=None)
    elif isinstance(weights, ResNet18_Weights):
        try:
            net = resnet18(weights=weights)
        except Exception as err:  # URLError, OSError, ... from the download
            raise RuntimeError(
                f"could not obtain torchvision weights {weights} for resnet18 ({type(err).__name__}: {err}). "
                "The download from download.pytorch.org failed (no network on this machine?) and the "
                "weights are not in torch's hub cache ($TORCH_HOME/hub/checkpoints). Download them on a "
                "machine with network access, save the state_dict "
                "(torch.save(resnet18(weights=...).state_dict(), 'resnet18.pth')) and pass that local "
                "file's path as weights=."
            ) from err
    elif isinstance(weights, (str, os.PathLike)):
        state = _load_file(
            weights,
            "ResNet18",
            "Pass a state_dict file saved from torchvision.models.resnet18, or weights=None.",
        )
        if isinstance(state, dict) and "state_dict" in state:
            state = state["state_dict"]
        if not isinstance(state, dict):
            raise WeightsFileError(f"{weights!r} does not hold a state_dict (got {type(state).__name__})")
        state = {k: v for k, v in _strip_prefix(state).items() if not k.startswith("fc.")}
        net = resnet18(weights=None)
        net.fc = nn.Identity()
        try:
            net.load_state_dict(state, strict=True)
        except RuntimeError as err:
            raise WeightsFileError(f"{str(weights)!r} does not fit torchvision's resnet18: {err}") from err
    else:
        raise TypeError(
            f"weights must be None, a torchvision ResNet18_Weights or a file path, got {type(weights).__name__}"
        )
    net.fc = nn.Identity()
    if weights is None:
        normalize = InputNormalization(in_channels, None, None, model_channels=3)
    else:
        normalize = InputNormalization(in_channels, IMAGENET_MEAN, IMAGENET_STD, model_channels=3)
    return ImageBackbone(normalize, net, 512)


# ---------------------------------------------------------------- CIFAR ResNets (He et al.)
class ZeroPadShortcut(nn.Module):
    """He et al.'s option-A shortcut: spatial subsampling plus zero channel padding.

    [N, C, H, W] -> [N, C + 2 * pad, ceil(H / stride), ceil(W / stride)]; no parameters.

    :param stride: spatial subsampling factor.
    :param pad: zero channels added on each side of the channel dimension.
    """

    def __init__(self, stride: int, pad: int):
        super().__init__()
        self.stride, self.pad = stride, pad

    def forward(self, x: Tensor) -> Tensor:
        if self.stride != 1:
            x = x[:, :, :: self.stride, :: self.stride]
        if self.pad:
            x = F.pad(x, (0, 0, 0, 0, self.pad, self.pad))
        return x

    def extra_repr(self) -> str:
        return f"stride={self.stride}, pad={self.pad}"


class CifarBasicBlock(nn.Module):
    """conv3x3-BN-ReLU-conv3x3-BN, plus the (option-A) shortcut, then ReLU."""

    def __init__(self, in_planes: int, planes: int, stride: int = 1):
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        if stride != 1 or in_planes != planes:
            if (planes - in_planes) % 2:
                raise ValueError(f"option-A shortcut needs an even channel increase, got {in_planes}->{planes}")
            self.shortcut: nn.Module = ZeroPadShortcut(stride, (planes - in_planes) // 2)
        else:
            self.shortcut = nn.Identity()

    def forward(self, x: Tensor) -> Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class CifarResNet(nn.Module):
    """He et al. (2016) CIFAR ResNet body: 3x3 stem, three stages of 16/32/64 channels.

    Module names match the published checkpoints (``conv1``, ``bn1``,
    ``layer{1,2,3}.{i}.{conv,bn}{1,2}``). Forward: normalised [N, 3, H, W] ->
    [N, 64] (global average pool). The classifier (``linear``) is not part of it.

    :param depth: 6n + 2 (20, 32, 44, 56, ...), n blocks per stage.
    """

    def __init__(self, depth: int = 20):
        super().__init__()
        n = (depth - 2) // 6
        self.depth = depth
        self.conv1 = nn.Conv2d(3, 16, 3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        in_planes = 16
        for i, (planes, stride) in enumerate(((16, 1), (32, 2), (64, 2)), start=1):
            blocks = []
            for j in range(n):
                blocks.append(CifarBasicBlock(in_planes, planes, stride if j == 0 else 1))
                in_planes = planes
            setattr(self, f"layer{i}", nn.Sequential(*blocks))
        self.feature_dim = 64
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight)

    def forward(self, x: Tensor) -> Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.layer3(self.layer2(self.layer1(out)))
        return out.mean(dim=(2, 3))


def load_cifar_resnet_state(path: Union[str, os.PathLike]) -> Dict[str, Tensor]:
    """Read a CIFAR ResNet checkpoint: ``torch.load(path)["state_dict"]``, ``module.`` stripped.

    The classifier (``linear.weight`` [10, 64], ``linear.bias`` [10]) is kept.

    :raises FileNotFoundError: if ``path`` does not exist (message says how to get it).
    :raises WeightsFileError: (a ``ValueError``) if the file cannot be read or has no
        ``state_dict``.
    """
    ckpt = _load_file(path, "CIFAR ResNet", CIFAR_RESNET_WEIGHTS_HELP)
    if not isinstance(ckpt, dict) or "state_dict" not in ckpt:
        raise WeightsFileError(f"{str(path)!r} is not a CIFAR ResNet checkpoint: no 'state_dict' key")
    return _strip_prefix(ckpt["state_dict"])


def cifar_resnet_backbone(
    depth: int = 20, weights_path: Optional[Union[str, os.PathLike]] = None, in_channels: int = 3
) -> ImageBackbone:
    """He et al.'s CIFAR ResNet (option-A shortcuts) as a feature extractor: -> [N, 64].

    Input normalisation with mean (0.485, 0.456, 0.406) and std (0.229, 0.224, 0.225)
    (the checkpoints' training normalisation) is always applied inside.

    :param depth: 20, 32, 44, 56 (the published checkpoints) or any other 6n + 2.
    :param weights_path: ``.th`` checkpoint (``{"best_prec1", "state_dict"}`` with
        ``module.`` key prefixes); the ``linear.*`` classifier is dropped, everything
        else must match exactly. ``None``: random (Kaiming) initialisation.
    :param in_channels: 3, or 1 to repeat a grey channel to RGB.
    :raises ValueError: bad ``depth``/``in_channels``; :class:`WeightsFileError` (a
        ``ValueError``) for a checkpoint that cannot be read or does not match the
        architecture. :raises FileNotFoundError: missing ``weights_path``.
    """
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 8 or (depth - 2) % 6:
        raise ValueError(f"depth must be 6n + 2 with n >= 1 (20, 32, 44, 56 have weights), got {depth!r}")
    _check_in_channels(in_channels, (1, 3))
    net = CifarResNet(depth)
    if weights_path is not None:
        state = {k: v for k, v in load_cifar_resnet_state(weights_path).items() if not k.startswith("linear.")}
        try:
            net.load_state_dict(state, strict=True)
        except RuntimeError as err:
            raise WeightsFileError(f"{str(weights_path)!r} does not fit a depth-{depth} CIFAR ResNet: {err}") from err
    normalize = InputNormalization(in_channels, IMAGENET_MEAN, IMAGENET_STD, model_channels=3)
    return ImageBackbone(normalize, net, 64)


# ---------------------------------------------------------------- small CNN
class SmallCNN(nn.Module):
    """conv3x3-BN-ReLU blocks (stride 1, then 2), global average pool: -> [N, widths[-1]]."""

    def __init__(self, in_channels: int, widths: Sequence[int]):
        super().__init__()
        layers = []
        prev = in_channels
        for i, w in enumerate(widths):
            layers += [
                nn.Conv2d(prev, w, 3, stride=1 if i == 0 else 2, padding=1, bias=False),
                nn.BatchNorm2d(w),
                nn.ReLU(inplace=True),
            ]
            prev = w
        self.features = nn.Sequential(*layers)
        self.feature_dim = int(widths[-1])

    def forward(self, x: Tensor) -> Tensor:
        return self.features(x).mean(dim=(2, 3))


def small_cnn_backbone(in_channels: int = 1, widths: Sequence[int] = (32, 64, 64)) -> ImageBackbone:
    """A small CNN for CPU runs: [N, in_channels, H, W] -> [N, widths[-1]].

    One conv3x3-BN-ReLU block per width; the first keeps the resolution, each later
    one halves it (stride 2), so 8x8 inputs (scikit-learn digits) end at 2x2 and
    28x28 / 32x32 at 7x7 / 8x8 with the default three blocks. Inputs are mapped to
    [-1, 1] (mean 0.5, std 0.5) inside.

    :param in_channels: image channels (any positive int).
    :param widths: output channels of the blocks (non-empty, positive ints).
    """
    check_int(in_channels, "in_channels")
    widths = tuple(widths)
    if not widths or any(isinstance(w, bool) or not isinstance(w, int) or w < 1 for w in widths):
        raise ValueError(f"widths must be a non-empty sequence of positive ints, got {widths!r}")
    normalize = InputNormalization(in_channels, [0.5], [0.5])
    return ImageBackbone(normalize, SmallCNN(in_channels, widths), widths[-1])


__all__ = [
    "WeightsFileError",
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "InputNormalization",
    "ImageBackbone",
    "resnet18_backbone",
    "ZeroPadShortcut",
    "CifarBasicBlock",
    "CifarResNet",
    "load_cifar_resnet_state",
    "cifar_resnet_backbone",
    "SmallCNN",
    "small_cnn_backbone",
]
