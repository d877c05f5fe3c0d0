"""Efficient feature transformations (EFT) of a frozen CNN (paper §3.2).

After Verma et al., "Efficient Feature Transformations for Discriminative and
Generative Continual Learning" (CVPR 2021). For a convolution with K output maps F
(shape [N, K, H, W]) an adapter produces the task-specific maps

    W = W^s(F) + gamma * W^d(F),

where W^s is a grouped 3x3 convolution with ``a`` channels per group (K / a groups)
and W^d a grouped 1x1 convolution with ``b`` channels per group (K / b groups), both
with biases. One adapter costs ``K * (9a + b + 2)`` parameters (``K * (9a + 1)`` when
gamma is 0 and W^d is dropped).

The frozen backbone E0 is shared by every entry; an *entry* (one per unique task) is
the set of adapters on every convolution plus, optionally, a copy of every BatchNorm
layer. :class:`EFTEncoder` wraps a backbone in place and switches between entries.
Entry keys are ints for :class:`EFTEncoder` and are stored as strings in the
``nn.ModuleDict`` of each wrapped layer.
"""
from __future__ import annotations

import copy
import operator
from typing import Callable, Dict, Iterable, List, Optional, Union

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from avalanche_sdr._checks import check_int

EntryKey = Union[int, str]

_INITS = ("identity", "random")


def _group_size(channels: int, size: int, name: str) -> int:
    """Channels per group actually used: ``min(size, channels)``, validated."""
    check_int(size, f"EFT group size {name}")
    eff = min(size, channels)
    if channels % eff != 0:
        raise ValueError(
            f"EFT group size {name}={size} does not divide the {channels} channels of the "
            f"layer; choose {name} so that channels % min({name}, channels) == 0"
        )
    return eff


class EFTAdapter(nn.Module):
    """One EFT feature transformation ``F -> W^s(F) + gamma * W^d(F)``.

    Shapes are preserved: [N, K, H, W] -> [N, K, H, W], float32.

    :param channels: K, the number of feature maps of the wrapped layer.
    :param a: channels per group of the 3x3 convolution W^s (``min(a, K)`` is used).
    :param b: channels per group of the 1x1 convolution W^d (``min(b, K)`` is used).
    :param gamma: weight of the 1x1 branch; 0 drops W^d entirely (no parameters).
    :param init: ``"identity"`` (default): W^s is the identity at its centre tap and
        W^d is zero, so ``W == F`` at the start; ``"random"``: PyTorch's default
        (Kaiming-uniform) convolution initialisation for both branches.
    :raises ValueError: if K is not a multiple of ``min(a, K)`` or ``min(b, K)``, or
        ``init`` is unknown.
    """

    def __init__(self, channels: int, a: int = 8, b: int = 16, gamma: float = 1.0, init: str = "identity"):
        super().__init__()
        check_int(channels, "channels")
        if init not in _INITS:
            raise ValueError(f"init must be one of {_INITS}, got {init!r}")
        self.channels = channels
        self.a = _group_size(channels, a, "a")
        self.b = _group_size(channels, b, "b")
        self.gamma = float(gamma)
        self.spatial = nn.Conv2d(channels, channels, 3, padding=1, groups=channels // self.a, bias=True)
        self.pointwise: Optional[nn.Conv2d] = None
        if self.gamma != 0.0:
            self.pointwise = nn.Conv2d(channels, channels, 1, groups=channels // self.b, bias=True)
        if init == "identity":
            self.reset_to_identity()

    @torch.no_grad()
    def reset_to_identity(self) -> None:
        """Set the adapter to the identity map (W^s = centre-tap identity, W^d = 0)."""
        self.spatial.weight.zero_()
        self.spatial.bias.zero_()
        # Output channel c of a group sees that group's inputs; c % a is its own index.
        idx = torch.arange(self.channels)
        self.spatial.weight[idx, idx % self.a, 1, 1] = 1.0
        if self.pointwise is not None:
            self.pointwise.weight.zero_()
            self.pointwise.bias.zero_()

    def forward(self, features: Tensor) -> Tensor:
        """:param features: F, [N, K, H, W]. :return: W, [N, K, H, W]."""
        out = self.spatial(features)
        if self.pointwise is not None:
            out = out + self.gamma * self.pointwise(features)
        return out

    def extra_repr(self) -> str:
        return f"channels={self.channels}, a={self.a}, b={self.b}, gamma={self.gamma}"


def _key(key: EntryKey) -> str:
    if isinstance(key, bool) or not isinstance(key, (int, str)):
        raise TypeError(f"entry key must be an int or str, got {key!r} ({type(key).__name__})")
    return str(key)


class _PerEntryLayer(nn.Module):
    """A frozen layer plus one trainable module per entry: the entry bookkeeping
    shared by :class:`EFTConv2d` (adapters) and :class:`TaskBatchNorm2d` (BatchNorm
    copies).

    Subclasses set ``_store`` (the name of their ``nn.ModuleDict`` of per-entry
    modules, keyed by ``str(entry key)``), ``_noun`` and ``_a_noun`` (what one such
    module is called in error messages), and keep the routed entry's key (a str, or
    ``None``) in ``self.active``.
    """

    _store: str
    _noun: str
    _a_noun: str

    def _add(self, key: EntryKey, init_from: Optional[EntryKey], make: Callable[[], nn.Module]) -> nn.Module:
        """Store entry ``key``'s module: ``make()`` when ``init_from`` is ``None``,
        else a deep copy of entry ``init_from``'s; it is made trainable.

        :raises ValueError: if ``key`` has a module. :raises KeyError: if
            ``init_from`` has none.
        """
        modules = getattr(self, self._store)
        k = _key(key)
        if k in modules:
            raise ValueError(f"entry {key!r} already has {self._a_noun}")
        if init_from is None:
            module = make()
        else:
            src = _key(init_from)
            if src not in modules:
                raise KeyError(f"init_from entry {init_from!r} has no {self._noun}; entries: {list(modules)}")
            module = copy.deepcopy(modules[src])
        module.requires_grad_(True)
        modules[k] = module
        return module


class EFTConv2d(_PerEntryLayer):
    """A frozen convolution followed by the active entry's EFT adapter.

    :param conv: the ``nn.Conv2d`` or ``nn.ConvTranspose2d`` to wrap; its parameters
        are frozen (``requires_grad=False``) and it is kept as ``self.conv``.
    :param a: channels per group of each adapter's 3x3 convolution.
    :param b: channels per group of each adapter's 1x1 convolution.
    :param gamma: weight of each adapter's 1x1 branch.

    ``adapters`` is an ``nn.ModuleDict`` keyed by ``str(entry key)``. With no active
    entry (``active is None``) the layer computes exactly the frozen convolution.
    """

    _store, _noun, _a_noun = "adapters", "adapter", "an adapter"

    def __init__(self, conv: nn.Module, a: int = 8, b: int = 16, gamma: float = 1.0):
        super().__init__()
        if not isinstance(conv, (nn.Conv2d, nn.ConvTranspose2d)):
            raise TypeError(f"EFTConv2d wraps nn.Conv2d or nn.ConvTranspose2d, got {type(conv).__name__}")
        # Fail at wrap time, not at the first add_entry, on a channel count a/b cannot split.
        _group_size(conv.out_channels, a, "a")
        _group_size(conv.out_channels, b, "b")
        self.conv = conv.requires_grad_(False)
        self.a, self.b, self.gamma = a, b, float(gamma)
        self.adapters = nn.ModuleDict()
        self.active: Optional[str] = None

    @property
    def out_channels(self) -> int:
        """K, output maps of the wrapped convolution."""
        return self.conv.out_channels

    def add_adapter(self, key: EntryKey, init_from: Optional[EntryKey] = None, init: str = "identity") -> EFTAdapter:
        """Create the adapter of entry ``key``.

        :param key: entry key (stored as ``str(key)``).
        :param init_from: existing entry whose adapter values are copied; ``None``
            initialises according to ``init``.
        :param init: ``"identity"`` or ``"random"`` (see :class:`EFTAdapter`).
        :return: the new adapter (trainable).
        """

        def fresh() -> EFTAdapter:
            weight = self.conv.weight
            return EFTAdapter(self.out_channels, self.a, self.b, self.gamma, init=init).to(
                device=weight.device, dtype=weight.dtype
            )

        return self._add(key, init_from, fresh)

    def set_active(self, key: Optional[EntryKey]) -> None:
        """Route the forward pass through entry ``key``'s adapter (``None``: none)."""
        if key is None:
            self.active = None
            return
        k = _key(key)
        if k not in self.adapters:
            raise KeyError(f"entry {key!r} has no adapter; entries: {list(self.adapters)}")
        self.active = k

    def forward(self, x: Tensor) -> Tensor:
        """:param x: [N, C_in, H, W]. :return: [N, K, H', W'] (the conv's output shape)."""
        out = self.conv(x)
        if self.active is not None:
            out = self.adapters[self.active](out)
        return out


class TaskBatchNorm2d(_PerEntryLayer):
    """A frozen BatchNorm2d plus one trainable copy per entry.

    The base layer always normalises with its stored running statistics and never
    updates them, whatever the module's train/eval mode. An entry's copy starts as an
    exact copy of the base (affine parameters and running statistics), has trainable
    affine parameters, and keeps its own running statistics (updated in train mode,
    used in eval mode) — so training one entry never changes E0 or another entry.

    :param bn: the ``nn.BatchNorm2d`` to wrap (kept frozen as ``self.base``).
    """

    _store, _noun, _a_noun = "copies", "BatchNorm copy", "a BatchNorm copy"

    def __init__(self, bn: nn.BatchNorm2d):
        super().__init__()
        if not isinstance(bn, nn.BatchNorm2d):
            raise TypeError(f"TaskBatchNorm2d wraps nn.BatchNorm2d, got {type(bn).__name__}")
        self.base = bn.requires_grad_(False).eval()
        self.copies = nn.ModuleDict()
        self.active: Optional[str] = None

    @property
    def num_features(self) -> int:
        """Number of channels C."""
        return self.base.num_features

    def add_copy(self, key: EntryKey, init_from: Optional[EntryKey] = None) -> nn.BatchNorm2d:
        """Create entry ``key``'s BatchNorm copy, from the base or from ``init_from``."""
        bn = self._add(key, init_from, self._copy_of_base)
        bn.train(self.training)
        return bn

    def _copy_of_base(self) -> nn.BatchNorm2d:
        """A new ``nn.BatchNorm2d`` (affine) with the base's values: affine parameters
        and running statistics, on the base's device and dtype."""
        base = self.base
        bn = nn.BatchNorm2d(base.num_features, eps=base.eps, momentum=base.momentum, affine=True)
        ref = base.weight if base.weight is not None else base.running_mean
        if ref is not None:
            bn.to(device=ref.device, dtype=ref.dtype)
        with torch.no_grad():
            if base.affine:
                bn.weight.copy_(base.weight)
                bn.bias.copy_(base.bias)
            if base.track_running_stats:
                bn.running_mean.copy_(base.running_mean)
                bn.running_var.copy_(base.running_var)
                bn.num_batches_tracked.copy_(base.num_batches_tracked)
        return bn

    def set_active(self, key: Optional[EntryKey]) -> None:
        """Use entry ``key``'s copy; ``None`` or an entry without a copy uses the base."""
        self.active = None if key is None or _key(key) not in self.copies else _key(key)

    def train(self, mode: bool = True) -> "TaskBatchNorm2d":
        super().train(mode)
        self.base.eval()
        return self

    def forward(self, x: Tensor) -> Tensor:
        """:param x: [N, C, H, W]. :return: normalised [N, C, H, W]."""
        if self.active is not None:
            return self.copies[self.active](x)
        base = self.base
        # Functional call with training=False: the base statistics cannot move even if
        # someone switched ``self.base`` to train mode directly.
        use_batch_stats = base.running_mean is None
        return F.batch_norm(
            x, base.running_mean, base.running_var, base.weight, base.bias, use_batch_stats, 0.0, base.eps
        )


def check_entry_key(key) -> int:
    """An entry key as an int; ``TypeError`` for bools and non-integers."""
    if isinstance(key, bool):
        raise TypeError(f"entry key must be an int, got {key!r}")
    try:
        return operator.index(key)
    except TypeError:
        raise TypeError(f"entry key must be an int, got {key!r} ({type(key).__name__})") from None


class EntryBookkeeping(nn.Module):
    """Entry keys (ints, in creation order) and the active entry: the bookkeeping
    shared by :class:`EFTEncoder` and the generator banks of
    :mod:`avalanche_sdr.models.vae`.

    ``_entry_noun`` is what an entry is called in error messages.
    """

    _entry_noun = "entry"

    def __init__(self):
        super().__init__()
        self._entries: List[int] = []
        self._active: Optional[int] = None

    @property
    def entries(self) -> List[int]:
        """Entry keys, in creation order."""
        return list(self._entries)

    @property
    def active(self) -> Optional[int]:
        """The entry the forward pass uses (``None``: none; for :class:`EFTEncoder`
        plain E0, for :class:`~avalanche_sdr.models.vae.EFTVAEBank` the plain base)."""
        return self._active

    def _known(self, key) -> int:
        """``key`` as an int (:func:`check_entry_key`). :raises KeyError: if it is not an entry."""
        key = check_entry_key(key)
        if key not in self._entries:
            raise KeyError(f"{self._entry_noun} {key} does not exist; entries: {self._entries}")
        return key

    def _new(self, key) -> int:
        """``key`` as an int (:func:`check_entry_key`). :raises ValueError: if it is an entry."""
        key = check_entry_key(key)
        if key in self._entries:
            raise ValueError(f"{self._entry_noun} {key} already exists; entries: {self._entries}")
        return key

    def _routed_layers(self) -> Iterable[nn.Module]:
        """The wrapped layers that :meth:`set_active` switches (each has its own
        ``set_active(key)``); none by default."""
        return ()

    def set_active(self, key: Optional[int]) -> None:
        """Route the forward pass through entry ``key`` (``None``: no entry, i.e. plain
        E0 for :class:`EFTEncoder`, the plain base VAE for
        :class:`~avalanche_sdr.models.vae.EFTVAEBank`).

        :raises KeyError: if ``key`` is not an entry.
        """
        if key is not None:
            key = self._known(key)
        for layer in self._routed_layers():
            layer.set_active(key)
        self._active = key


class EFTEncoder(EntryBookkeeping):
    """A frozen backbone E0 with per-entry EFT adapters on every convolution.

    Every ``nn.Conv2d`` / ``nn.ConvTranspose2d`` of ``backbone`` (downsample and
    shortcut convolutions included) is replaced in place by an :class:`EFTConv2d`,
    and every ``nn.BatchNorm2d`` by a :class:`TaskBatchNorm2d`. All backbone
    parameters get ``requires_grad=False``; only entry parameters are trainable. The
    frozen BatchNorm statistics never change (see :class:`TaskBatchNorm2d`).

    :param backbone: module with an int attribute ``feature_dim`` mapping
        [N, C, H, W] in [0, 1] to [N, feature_dim]; modified in place
        (:func:`~avalanche_sdr.models.build_sdr_model` gives it its own copy of the
        user's E0).
    :param a: channels per group of the adapters' 3x3 convolutions (paper: 8).
    :param b: channels per group of the adapters' 1x1 convolutions (paper: 16).
    :param gamma: weight of the 1x1 branch (paper: 1; 0 drops it).
    :param task_batchnorm: give each entry its own BatchNorm copies (trainable
        affine, own running statistics). ``False``: every entry uses E0's frozen
        BatchNorm layers.
    """

    def __init__(
        self, backbone: nn.Module, a: int = 8, b: int = 16, gamma: float = 1.0, task_batchnorm: bool = True
    ):
        super().__init__()
        feature_dim = getattr(backbone, "feature_dim", None)
        if isinstance(feature_dim, bool) or not isinstance(feature_dim, int):
            raise TypeError(
                f"backbone needs an int attribute feature_dim, got {feature_dim!r} on {type(backbone).__name__}"
            )
        self.feature_dim = feature_dim
        self.a, self.b, self.gamma = a, b, float(gamma)
        self.task_batchnorm = bool(task_batchnorm)
        backbone.requires_grad_(False)
        # Plain lists (not ModuleLists): references to layers registered under backbone.
        self.convs: List[EFTConv2d] = []
        self.norms: List[TaskBatchNorm2d] = []
        self._wrap(backbone, {})
        if not self.convs:
            raise ValueError(f"backbone {type(backbone).__name__} has no Conv2d layer to adapt")
        self.backbone = backbone
        self.train(self.training)

    def _wrap(self, module: nn.Module, done: Dict[int, nn.Module]) -> None:
        for name, child in list(module.named_children()):
            if isinstance(child, (EFTConv2d, TaskBatchNorm2d)):
                raise ValueError(f"backbone already contains a {type(child).__name__} ({name}); wrap a plain backbone")
            if id(child) in done:  # a layer shared by two parents is wrapped once
                setattr(module, name, done[id(child)])
                continue
            if isinstance(child, (nn.Conv2d, nn.ConvTranspose2d)):
                wrapped = EFTConv2d(child, self.a, self.b, self.gamma)
                self.convs.append(wrapped)
            elif isinstance(child, nn.BatchNorm2d):
                wrapped = TaskBatchNorm2d(child)
                self.norms.append(wrapped)
            else:
                self._wrap(child, done)
                continue
            done[id(child)] = wrapped
            setattr(module, name, wrapped)

    @staticmethod
    def eft_parameter_count(out_channels: Iterable[int], a: int = 8, b: int = 16, gamma: float = 1.0) -> int:
        """Adapter parameters of one entry: ``sum_K K * (9 a' + b' + 2)``.

        ``a' = min(a, K)``, ``b' = min(b, K)``; with ``gamma == 0`` the 1x1 branch is
        absent and each layer costs ``K * (9 a' + 1)``. BatchNorm copies are not
        included (they add ``2 K`` per BatchNorm layer).

        :param out_channels: K of every adapted convolution.
        """
        total = 0
        for k in out_channels:
            a_eff, b_eff = _group_size(int(k), a, "a"), _group_size(int(k), b, "b")
            total += k * (9 * a_eff + 1) + (k * (b_eff + 1) if gamma != 0 else 0)
        return int(total)

    @property
    def out_channels(self) -> List[int]:
        """K of every adapted convolution, in module order."""
        return [c.out_channels for c in self.convs]

    def add_entry(self, key: int, init_from: Optional[int] = None, init: str = "identity") -> None:
        """Create entry ``key``: one adapter per convolution (and BatchNorm copies).

        :param key: new entry key (int).
        :param init_from: existing entry whose adapter and BatchNorm values (running
            statistics included) initialise the new one (forward transfer);
            ``None``: identity adapters (so E_key == E0) and BatchNorm copies of E0.
        :param init: ``"identity"`` or ``"random"`` when ``init_from`` is ``None``.
        :raises ValueError: if ``key`` exists. :raises KeyError: unknown ``init_from``.
        """
        key = self._new(key)
        if init_from is not None:
            init_from = check_entry_key(init_from)
            if init_from not in self._entries:
                raise KeyError(f"init_from entry {init_from} does not exist; entries: {self._entries}")
        for conv in self.convs:
            conv.add_adapter(key, init_from, init=init)
        if self.task_batchnorm:
            for norm in self.norms:
                norm.add_copy(key, init_from)
        self._entries.append(key)
        self.train(self.training)

    def _routed_layers(self) -> Iterable[nn.Module]:
        """Every wrapped convolution and BatchNorm layer."""
        return (*self.convs, *self.norms)

    def entry_modules(self, key: int) -> List[nn.Module]:
        """The adapters and BatchNorm copies of entry ``key`` (for memory accounting)."""
        key = self._known(key)
        mods: List[nn.Module] = [c.adapters[str(key)] for c in self.convs]
        if self.task_batchnorm:
            mods += [n.copies[str(key)] for n in self.norms]
        return mods

    def top_entry_modules(self, key: int, convolutions: int) -> List[nn.Module]:
        """Entry ``key``'s modules of its top: the adapters of the last ``convolutions``
        adapted convolutions and the BatchNorm copies of the layers registered after the
        first of them, in module order (the backbone's registration order, which is its
        forward order for the library's backbones). What an update that trains only the
        top of an entry trains (``LearningReuse(top_layers=...)``).

        :param convolutions: how many adapted convolutions, counted from the last (>= 1;
            more than the encoder has: all of them).
        """
        key = self._known(key)
        check_int(convolutions, "convolutions")
        layers = [m for m in self.backbone.modules() if isinstance(m, (EFTConv2d, TaskBatchNorm2d))]
        convs = [i for i, m in enumerate(layers) if isinstance(m, EFTConv2d)]
        first = convs[max(len(convs) - convolutions, 0)]
        mods: List[nn.Module] = []
        for layer in layers[first:]:
            if isinstance(layer, EFTConv2d):
                mods.append(layer.adapters[str(key)])
            elif self.task_batchnorm:
                mods.append(layer.copies[str(key)])
        return mods

    def entry_parameters(self, key: int, include_batchnorm: bool = True) -> List[nn.Parameter]:
        """Trainable parameters of entry ``key`` (adapters, then BatchNorm affines)."""
        mods = self.entry_modules(key)
        if not include_batchnorm:
            mods = [m for m in mods if isinstance(m, EFTAdapter)]
        return [p for m in mods for p in m.parameters()]

    def entry_parameter_count(self, key: int, include_batchnorm: bool = True) -> int:
        """Number of scalar parameters of entry ``key``."""
        return sum(p.numel() for p in self.entry_parameters(key, include_batchnorm))

    def train(self, mode: bool = True) -> "EFTEncoder":
        """Set train/eval mode; frozen E0 BatchNorm layers stay in eval mode."""
        super().train(mode)
        for norm in self.norms:
            norm.base.eval()
        return self

    def forward(self, x: Tensor) -> Tensor:
        """:param x: [N, C, H, W] float32 in [0, 1]. :return: [N, feature_dim] features."""
        return self.backbone(x)


__all__ = ["EFTAdapter", "EFTConv2d", "TaskBatchNorm2d", "EFTEncoder"]
