"""Convolutional VAE generators G_j and per-entry generator banks (paper §3.3, §5).

The ELBO of an entry's VAE approximates log p(x | phi_j) in the distributional
consistency score (paper eq. 5). The likelihood is a continuous density on the [0, 1]
pixel values — a Gaussian around the decoder's mean image with a learned per-channel
scale — so every ELBO is a lower bound on log p(x) in nats per image, comparable
across entries that see the same images.

Randomness: every sampling method takes an optional ``torch.Generator``; with
``None`` it draws from torch's global RNG (seed it with ``torch.manual_seed``).
There are no dropout or BatchNorm layers, so train and eval modes compute the same
function: given the RNG state, ``elbo`` is deterministic.
"""
from __future__ import annotations

import copy
import math
from typing import Dict, Iterable, List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from avalanche_sdr._checks import check_int
from avalanche_sdr.models.eft import EFTConv2d, EntryBookkeeping

LOG_SCALE_MIN = math.log(0.01)
"""Smallest pixel log-std (std 0.01 of [0, 1] pixels): bounds the density at ~3.7 nats/pixel."""
LOG_SCALE_MAX = 0.0
"""Largest pixel log-std (std 1, the whole pixel range)."""
LOG_SCALE_INIT = math.log(0.1)
"""Initial pixel log-std."""
LOGVAR_RANGE = (-12.0, 8.0)
"""Range the encoder's posterior log-variance is clamped to (numerical safety)."""

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


def _randn(shape, like: Tensor, generator: Optional[torch.Generator]) -> Tensor:
    if generator is None:
        return torch.randn(shape, device=like.device, dtype=like.dtype)
    return torch.randn(shape, generator=generator, device=generator.device, dtype=like.dtype).to(like.device)


def _std_normal_log_prob(z: Tensor) -> Tensor:
    """log N(z; 0, I) summed over the last dim: [N, D] -> [N]."""
    return (-0.5 * z.pow(2) - _HALF_LOG_2PI).sum(dim=1)


class PixelLogScale(nn.Module):
    """Learned per-channel pixel log-std, softly clamped to [LOG_SCALE_MIN, LOG_SCALE_MAX].

    ``forward() -> [C]`` = ``min + (max - min) * sigmoid(raw)``: a smooth clamp, so
    the gradient never vanishes at a bound.

    :param channels: C.
    :param init: initial log-std (strictly inside the range).
    """

    def __init__(self, channels: int, init: float = LOG_SCALE_INIT):
        super().__init__()
        frac = (init - LOG_SCALE_MIN) / (LOG_SCALE_MAX - LOG_SCALE_MIN)
        if not 0.0 < frac < 1.0:
            raise ValueError(f"init log-scale {init} must lie in ({LOG_SCALE_MIN:.3f}, {LOG_SCALE_MAX:.3f})")
        self.raw = nn.Parameter(torch.full((channels,), math.log(frac / (1.0 - frac))))

    def forward(self) -> Tensor:
        return LOG_SCALE_MIN + (LOG_SCALE_MAX - LOG_SCALE_MIN) * torch.sigmoid(self.raw)


def _vae_strides(image_size: int, n_layers: int = 4) -> Tuple[List[int], List[int]]:
    """Strides and feature-map sizes of the encoder convolutions.

    A layer has stride 2 while its input is at least 4 pixels wide, else stride 1
    (3x3 kernels, padding 1, so the output is ceil(n / stride)).
    :return: (strides [n_layers], sizes [n_layers + 1], sizes[0] == image_size).
    """
    sizes, strides = [image_size], []
    for _ in range(n_layers):
        s = 2 if sizes[-1] >= 4 else 1
        strides.append(s)
        sizes.append((sizes[-1] - 1) // s + 1)
    return strides, sizes


class ConvVAE(nn.Module):
    """A convolutional VAE with a Gaussian pixel likelihood.

    Encoder: 4 conv3x3 layers (ReLU) and one linear layer to (mu, logvar) of a
    ``latent_dim``-dimensional diagonal Gaussian q(z|x). Decoder: one linear layer
    (ReLU) and 4 transposed conv3x3 layers mirroring the encoder; the last gives the
    mean image through a sigmoid. p(x|z) = prod N(x_chw; mean_chw(z), s_c^2) with a
    learned per-channel std s_c (see :class:`PixelLogScale`); prior N(0, I).

    Strides: a conv layer has stride 2 while its input is at least 4 pixels wide,
    else stride 1; each transposed conv undoes its encoder layer exactly (its
    ``output_padding`` is chosen per layer), so any ``image_size`` round-trips, e.g.
    8 -> 4 -> 2 -> 2 -> 2, 28 -> 14 -> 7 -> 4 -> 2, 32 -> 16 -> 8 -> 4 -> 2,
    64 -> 32 -> 16 -> 8 -> 4. Channels: width, width, 2 width, 2 width.

    :param in_channels: C of the images.
    :param image_size: H == W of the images.
    :param latent_dim: dimension of z.
    :param width: channels of the first conv layer.
    """

    def __init__(self, in_channels: int, image_size: int, latent_dim: int = 32, width: int = 32):
        super().__init__()
        self.in_channels = check_int(in_channels, "in_channels")
        self.image_size = check_int(image_size, "image_size")
        self.latent_dim = check_int(latent_dim, "latent_dim")
        self.width = check_int(width, "width")
        strides, sizes = _vae_strides(image_size)
        chans = [in_channels, width, width, 2 * width, 2 * width]
        self.strides, self.sizes = strides, sizes
        enc: List[nn.Module] = []
        for i in range(4):
            enc += [nn.Conv2d(chans[i], chans[i + 1], 3, stride=strides[i], padding=1), nn.ReLU()]
        self.encoder = nn.Sequential(*enc)
        self._bottleneck = (chans[4], sizes[4], sizes[4])
        flat = chans[4] * sizes[4] * sizes[4]
        self.encoder_head = nn.Linear(flat, 2 * latent_dim)
        self.decoder_head = nn.Linear(latent_dim, flat)
        dec: List[nn.Module] = []
        for i in reversed(range(4)):
            # ConvTranspose output: (m - 1) * s - 2 + 3 + op; pick op to land on sizes[i].
            op = sizes[i] - (sizes[i + 1] - 1) * strides[i] - 1
            assert 0 <= op < strides[i], (image_size, i, op)
            dec.append(
                nn.ConvTranspose2d(chans[i + 1], chans[i], 3, stride=strides[i], padding=1, output_padding=op)
            )
            if i > 0:
                dec.append(nn.ReLU())
        self.decoder = nn.Sequential(*dec)
        self.log_scale = PixelLogScale(in_channels)

    # ------------------------------------------------------------------ pieces
    def _check(self, x: Tensor) -> None:
        expected = (self.in_channels, self.image_size, self.image_size)
        if x.dim() != 4 or tuple(x.shape[1:]) != expected:
            raise ValueError(f"expected images [N, {', '.join(map(str, expected))}], got shape {tuple(x.shape)}")

    def encode(self, x: Tensor) -> Tuple[Tensor, Tensor]:
        """q(z|x): [N, C, H, W] in [0, 1] -> (mu [N, D], logvar [N, D])."""
        self._check(x)
        h = self.encoder(x).flatten(1)
        mu, logvar = self.encoder_head(h).chunk(2, dim=1)
        return mu, logvar.clamp(*LOGVAR_RANGE)

    def decode(self, z: Tensor) -> Tensor:
        """Mean image of p(x|z): [N, D] -> [N, C, H, W] in (0, 1)."""
        h = F.relu(self.decoder_head(z)).view(z.shape[0], *self._bottleneck)
        return torch.sigmoid(self.decoder(h))

    def pixel_log_scale(self) -> Tensor:
        """Per-channel log-std of p(x|z): [C]."""
        return self.log_scale()

    def log_likelihood(self, x: Tensor, z: Tensor) -> Tensor:
        """log p(x|z) in nats per image: x [N, C, H, W], z [N, D] -> [N]."""
        mean = self.decode(z)
        log_s = self.pixel_log_scale().view(1, -1, 1, 1)
        lp = -0.5 * ((x - mean) * torch.exp(-log_s)).pow(2) - log_s - _HALF_LOG_2PI
        return lp.flatten(1).sum(dim=1)

    # ------------------------------------------------------------------ bounds
    def elbo(self, x: Tensor, n_samples: int = 1, generator: Optional[torch.Generator] = None) -> Tensor:
        """Evidence lower bound per image, in nats: [N, C, H, W] -> [N] float32.

        ``E_q[log p(x|z)] - KL(q(z|x) || N(0, I))``: the expectation is a Monte-Carlo
        average over ``n_samples`` reparameterised draws z ~ q(z|x), the KL is exact.

        :param x: images in [0, 1].
        :param n_samples: Monte-Carlo samples of z per image.
        :param generator: RNG for the draws (``None``: torch's global RNG).
        """
        check_int(n_samples, "n_samples")
        mu, logvar = self.encode(x)
        std = torch.exp(0.5 * logvar)
        rec = 0.0
        for _ in range(n_samples):
            z = mu + std * _randn(mu.shape, mu, generator)
            rec = rec + self.log_likelihood(x, z)
        kl = 0.5 * (mu.pow(2) + logvar.exp() - 1.0 - logvar).sum(dim=1)
        return rec / n_samples - kl

    def importance_log_likelihood(
        self, x: Tensor, n_samples: int = 64, generator: Optional[torch.Generator] = None
    ) -> Tensor:
        """Importance-sampled log p(x) per image, in nats: [N, C, H, W] -> [N].

        ``log (1/K) sum_k p(x, z_k) / q(z_k|x)`` with z_k ~ q(z|x), K = ``n_samples``
        (the IWAE bound: in expectation >= the ELBO and -> log p(x) as K grows).
        """
        check_int(n_samples, "n_samples")
        mu, logvar = self.encode(x)
        std = torch.exp(0.5 * logvar)
        log_w = []
        for _ in range(n_samples):
            eps = _randn(mu.shape, mu, generator)
            z = mu + std * eps
            log_q = (-0.5 * eps.pow(2) - 0.5 * logvar - _HALF_LOG_2PI).sum(dim=1)
            log_w.append(self.log_likelihood(x, z) + _std_normal_log_prob(z) - log_q)
        return torch.logsumexp(torch.stack(log_w), dim=0) - math.log(n_samples)

    def loss(self, x: Tensor, n_samples: int = 1, generator: Optional[torch.Generator] = None) -> Tensor:
        """Training loss: mean negative ELBO over the batch, nats per image (scalar)."""
        return -self.elbo(x, n_samples, generator).mean()

    # ------------------------------------------------------------------ generation
    def reconstruct(self, x: Tensor) -> Tensor:
        """Decoder mean at the posterior mean: [N, C, H, W] -> [N, C, H, W]."""
        return self.decode(self.encode(x)[0])

    def sample(self, n: int, generator: Optional[torch.Generator] = None) -> Tensor:
        """Mean images of n prior draws z ~ N(0, I): -> [n, C, H, W] in (0, 1)."""
        ref = next(self.parameters())
        return self.decode(_randn((check_int(n, "n"), self.latent_dim), ref, generator))

    def forward(self, x: Tensor) -> Tensor:
        """Reconstruction (see :meth:`reconstruct`)."""
        return self.reconstruct(x)


class _BankBase(EntryBookkeeping):
    """Entry bookkeeping shared by the generator banks (:attr:`entries`,
    :attr:`active`: the entry :meth:`forward` uses) and their reference ELBOs.

    Subclasses define ``entry_modules(key)``, ``elbo(x, key, ...)``, ``add_entry``.
    """

    _entry_noun = "generator entry"

    # -- reference likelihood of each entry on its own held-out data --------------
    def _add_reference(self, key: int) -> None:
        """Register entry ``key``'s reference ELBO buffer (NaN until set)."""
        self.register_buffer(f"reference_elbo_{key}", torch.full((2,), math.nan, dtype=torch.float64))

    def set_reference_elbo(self, key: int, mean: float, std: float) -> None:
        """Store entry ``key``'s ELBO on inputs of its own task that it was not fitted on.

        :param mean: mean per-image ELBO on those inputs, nats per image.
        :param std: standard deviation of the per-image ELBO over them, nats.
        """
        buffer = getattr(self, f"reference_elbo_{self._known(key)}")
        buffer.copy_(torch.tensor([float(mean), float(std)], dtype=torch.float64))

    def reference_elbo(self, key: int) -> Tuple[float, float]:
        """``(mean, std)`` of entry ``key``'s held-out per-image ELBO, nats; NaN if never
        set (a generator fitted without a hold-out, or not fitted yet)."""
        mean, std = getattr(self, f"reference_elbo_{self._known(key)}").tolist()
        return mean, std

    def entry_parameters(self, key: int) -> List[nn.Parameter]:
        """Parameters that belong to entry ``key`` only (what training it updates)."""
        return [p for m in self.entry_modules(key) for p in m.parameters()]

    def entry_parameter_count(self, key: int) -> int:
        """Number of scalar parameters of entry ``key``."""
        return sum(p.numel() for p in self.entry_parameters(key))

    def loss(self, x: Tensor, key: int, n_samples: int = 1, generator: Optional[torch.Generator] = None) -> Tensor:
        """Mean negative ELBO of entry ``key`` over the batch (scalar, nats per image)."""
        return -self.elbo(x, key, n_samples, generator).mean()

    def forward(self, x: Tensor) -> Tensor:
        """ELBO of the active entry: [N, C, H, W] -> [N] nats."""
        if self._active is None:
            raise RuntimeError("no active generator entry: call set_active(key) or use elbo(x, key)")
        return self.elbo(x, self._active)


class IndependentVAEBank(_BankBase):
    """One full, independent :class:`ConvVAE` per entry (paper: "EFT for E").

    :param in_channels: image channels C.
    :param image_size: image height == width.
    :param latent_dim: latent dimension of every VAE.
    :param width: first-layer channels of every VAE.
    """

    def __init__(self, in_channels: int, image_size: int, latent_dim: int = 32, width: int = 32):
        super().__init__()
        # Validate once, at construction.
        ConvVAE(in_channels, image_size, latent_dim, width)
        self.config: Dict[str, int] = dict(
            in_channels=in_channels, image_size=image_size, latent_dim=latent_dim, width=width
        )
        self.vaes = nn.ModuleDict()
        self.register_buffer("_device_ref", torch.zeros(0), persistent=False)

    def add_entry(self, key: int, init_from: Optional[int] = None) -> ConvVAE:
        """Create entry ``key``: a fresh VAE, or a copy of entry ``init_from``'s VAE.

        :return: the entry's :class:`ConvVAE` (trainable).
        """
        key = self._new(key)
        if init_from is None:
            vae = ConvVAE(**self.config).to(self._device_ref.device)
        else:
            vae = copy.deepcopy(self.vaes[str(self._known(init_from))])
        vae.requires_grad_(True)
        vae.train(self.training)
        self.vaes[str(key)] = vae
        self._entries.append(key)
        self._add_reference(key)
        return vae

    def vae(self, key: int) -> ConvVAE:
        """The :class:`ConvVAE` of entry ``key``."""
        return self.vaes[str(self._known(key))]

    def entry_modules(self, key: int) -> List[nn.Module]:
        """``[vae]`` of entry ``key`` (for memory accounting)."""
        return [self.vae(key)]

    def elbo(
        self, x: Tensor, key: int, n_samples: int = 1, generator: Optional[torch.Generator] = None
    ) -> Tensor:
        """ELBO of entry ``key``'s VAE, nats per image: [N, C, H, W] -> [N]."""
        return self.vae(key).elbo(x, n_samples, generator)

    def importance_log_likelihood(
        self, x: Tensor, key: int, n_samples: int = 64, generator: Optional[torch.Generator] = None
    ) -> Tensor:
        """Importance-sampled log p(x) under entry ``key``, nats per image: -> [N]."""
        return self.vae(key).importance_log_likelihood(x, n_samples, generator)


class PerEntryCopies(nn.Module):
    """A frozen module plus one trainable full copy of it per entry.

    ``forward(*args)`` calls the active entry's copy, or the frozen base when no
    entry is active. Used for the VAE's linear layers and pixel log-scales.

    :param module: the module to wrap (frozen, kept as ``self.base``).
    """

    def __init__(self, module: nn.Module):
        super().__init__()
        self.base = module.requires_grad_(False)
        self.copies = nn.ModuleDict()
        self.active: Optional[str] = None

    def add_copy(self, key: int, init_from: Optional[int] = None) -> nn.Module:
        """Copy the base (or entry ``init_from``'s copy) for entry ``key``."""
        src = self.base if init_from is None else self.copies[str(init_from)]
        mod = copy.deepcopy(src).requires_grad_(True)
        self.copies[str(key)] = mod
        return mod

    def set_active(self, key: Optional[int]) -> None:
        self.active = None if key is None else str(key)

    def forward(self, *args):
        return (self.base if self.active is None else self.copies[self.active])(*args)


class EFTVAEBank(_BankBase):
    """A frozen shared base VAE with per-entry EFT adapters (paper: "EFT for E and G").

    Every convolution and transposed convolution of ``base`` gets an EFT adapter per
    entry (:class:`~avalanche_sdr.models.eft.EFTConv2d`); its two linear layers and
    its pixel log-scale get a full per-entry copy. A new entry starts as an exact
    copy of the base (identity adapters, copied linears), so before training its
    ELBO equals the base's.

    ``base`` is modified in place (its layers are wrapped) and frozen; with no entry
    active it still computes the original VAE (``elbo(x, None)``).

    :param base: a (typically pretrained) :class:`ConvVAE`.
    :param a: channels per group of the adapters' 3x3 convolutions.
    :param b: channels per group of the adapters' 1x1 convolutions.
    :param gamma: weight of the adapters' 1x1 branch.
    """

    def __init__(self, base: ConvVAE, a: int = 8, b: int = 16, gamma: float = 1.0):
        super().__init__()
        if not isinstance(base, ConvVAE):
            raise TypeError(f"base must be a ConvVAE, got {type(base).__name__}")
        if any(isinstance(m, (EFTConv2d, PerEntryCopies)) for m in base.modules()):
            raise ValueError("base is already wrapped by an EFTVAEBank; pass a plain ConvVAE")
        base.requires_grad_(False)
        self.a, self.b, self.gamma = a, b, float(gamma)
        self.convs: List[EFTConv2d] = []
        for seq in (base.encoder, base.decoder):
            for name, child in list(seq.named_children()):
                if isinstance(child, (nn.Conv2d, nn.ConvTranspose2d)):
                    wrapped = EFTConv2d(child, a, b, gamma)
                    setattr(seq, name, wrapped)
                    self.convs.append(wrapped)
        base.encoder_head = PerEntryCopies(base.encoder_head)
        base.decoder_head = PerEntryCopies(base.decoder_head)
        base.log_scale = PerEntryCopies(base.log_scale)
        self.copied: List[PerEntryCopies] = [base.encoder_head, base.decoder_head, base.log_scale]
        self.base = base

    def add_entry(self, key: int, init_from: Optional[int] = None) -> None:
        """Create entry ``key`` from the base, or from entry ``init_from``'s values."""
        key = self._new(key)
        if init_from is not None:
            init_from = self._known(init_from)
        for conv in self.convs:
            conv.add_adapter(key, init_from)
        for mod in self.copied:
            mod.add_copy(key, init_from)
        self._entries.append(key)
        self._add_reference(key)
        self.train(self.training)

    def _routed_layers(self) -> Iterable[nn.Module]:
        """The base VAE's adapted convolutions and per-entry copies."""
        return (*self.convs, *self.copied)

    def entry_modules(self, key: int) -> List[nn.Module]:
        """Adapters, linear copies and log-scale copy of entry ``key``."""
        k = str(self._known(key))
        return [c.adapters[k] for c in self.convs] + [m.copies[k] for m in self.copied]

    def _run(self, key: Optional[int], fn):
        previous = self._active
        self.set_active(key)
        try:
            return fn()
        finally:
            self.set_active(previous)

    def elbo(
        self, x: Tensor, key: Optional[int], n_samples: int = 1, generator: Optional[torch.Generator] = None
    ) -> Tensor:
        """ELBO under entry ``key`` (``None``: the base VAE), nats per image: -> [N]."""
        return self._run(key, lambda: self.base.elbo(x, n_samples, generator))

    def importance_log_likelihood(
        self, x: Tensor, key: Optional[int], n_samples: int = 64, generator: Optional[torch.Generator] = None
    ) -> Tensor:
        """Importance-sampled log p(x) under entry ``key``, nats per image: -> [N]."""
        return self._run(key, lambda: self.base.importance_log_likelihood(x, n_samples, generator))

    def sample(self, n: int, key: Optional[int], generator: Optional[torch.Generator] = None) -> Tensor:
        """Mean images of n prior draws under entry ``key``: -> [n, C, H, W]."""
        return self._run(key, lambda: self.base.sample(n, generator))


__all__ = [
    "LOG_SCALE_MIN",
    "LOG_SCALE_MAX",
    "ConvVAE",
    "PixelLogScale",
    "IndependentVAEBank",
    "PerEntryCopies",
    "EFTVAEBank",
]
