"""Random feature maps and heads solved in closed form from running statistics: the
math of the closed-form learners (:mod:`avalanche_sdr.closed_form`) and of the kernel
LDA router (:mod:`avalanche_sdr.routers.kernel_lda`), pure torch (scikit-learn draws
the random Fourier features).

- :class:`RandomFeatures`: a frozen random map of E0's features, RanPAC's
  ``relu(z W)`` (:data:`RELU`) or random Fourier features of a Gaussian kernel
  (:data:`FOURIER`, drawn by scikit-learn's ``RBFSampler``).
- :func:`accumulate`: running statistics of mapped features h [n, M] with their
  classes: the class sums ``S`` [K, M], counts [K] and the within-class scatter
  ``W = sum_i (h_i - mu_{y_i})(h_i - mu_{y_i})^T`` [M, M], updated batch by batch with
  Chan et al.'s pairwise formula (so that it is never the small difference of two large
  matrices: kept in float32 it stays positive semi-definite to float32 accuracy).
- :func:`solve_head`: from those, the linear scores ``h A + b`` of ridge-regression
  prototypes (:data:`RIDGE`: ``A = (G + lambda I)^-1 S^T`` with the Gram matrix ``G =
  W + sum_c n_c mu_c mu_c^T = H^T H`` and ``lambda = ridge * trace(G) / M``) or of one
  shared-covariance LDA (:data:`LDA`: the within-class covariance ``W / (N - C)`` shrunk
  to ``(1 - s) Sigma + s (trace(Sigma) / M) I``, score ``h Sigma_s^-1 mu_c - mu_c^T
  Sigma_s^-1 mu_c / 2``, equal priors).

Written by hand: scikit-learn's ``LinearDiscriminantAnalysis`` and ridge regression fit
on all the data at once, which a continual learner no longer holds; these solve from
statistics accumulated over a stream.
"""
from __future__ import annotations

from typing import Any, Optional, Tuple

import torch
from torch import Tensor, nn

from avalanche_sdr._checks import check_int, check_positive

RELU = "relu"
"""Kind of :class:`RandomFeatures`: RanPAC's ``relu(z W)``."""

FOURIER = "fourier"
"""Kind of :class:`RandomFeatures`: random Fourier features of a Gaussian kernel."""

RIDGE = "ridge"
"""Head of :class:`ClosedFormClassifier`: ridge-regression prototypes (RanPAC)."""

LDA = "lda"
"""Head of :class:`ClosedFormClassifier`: one shared-covariance LDA (KLDA)."""


def check_fraction(value: Any, name: str, *, closed_low: bool) -> float:
    """``value`` as a float in (0, 1] (``closed_low``: [0, 1]).

    :raises ValueError: anything else, naming ``name``.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
            (0.0 <= value if closed_low else 0.0 < value) and value <= 1.0):
        interval = "[0, 1]" if closed_low else "(0, 1]"
        raise ValueError(f"{name} must be a number in {interval}, got {value!r}")
    return float(value)


class RandomFeatures(nn.Module):
    """A frozen random map of E0's features, z [N, d] -> h [N, M] float32.

    ``kind`` :data:`RELU`: ``relu(z W)``, W [d, M] drawn N(0, 1) at construction from a
    generator seeded with ``seed``. ``kind`` :data:`FOURIER`: ``sqrt(2 / M) cos(z W + b)``,
    W and b drawn by scikit-learn's ``RBFSampler(gamma, n_components=M,
    random_state=seed)`` when :meth:`calibrate` first sees features, ``gamma =
    gamma_scale / (d Var(z))``. W and b are buffers (counted in memory).

    :param kind: :data:`RELU` or :data:`FOURIER`.
    :param in_dim: d, E0's feature size.
    :param out_dim: M.
    :param seed: seed of the draw.
    :param gamma_scale: :data:`FOURIER` only: the kernel width as a multiple of
        scikit-learn's ``gamma="scale"`` (positive).
    :raises ValueError: an unknown kind, a non-positive size or ``gamma_scale``, or a
        ``gamma_scale`` given to :data:`RELU`.
    """

    def __init__(self, kind: str, in_dim: int, out_dim: int, seed: int, gamma_scale: Optional[float] = None):
        super().__init__()
        if kind not in (RELU, FOURIER):
            raise ValueError(f"kind must be {RELU!r} or {FOURIER!r}, got {kind!r}")
        if kind == RELU and gamma_scale is not None:
            raise ValueError("gamma_scale sets the Gaussian kernel of kind='fourier'; kind='relu' has none")
        self.kind = kind
        self.in_dim = check_int(in_dim, "in_dim")
        self.out_dim = check_int(out_dim, "out_dim", hint=" (the number of random features)")
        self.seed = check_int(seed, "seed", minimum=0)
        width = 1.0 if gamma_scale is None else gamma_scale
        self.gamma_scale = None if kind == RELU else float(check_positive(width, "gamma_scale"))
        self.gamma: Optional[float] = None
        """:data:`FOURIER`: the kernel's gamma once calibrated (else ``None``)."""
        if kind == RELU:
            weight = torch.randn(in_dim, out_dim, generator=torch.Generator().manual_seed(seed))
            self.register_buffer("weight", weight)
            self.register_buffer("offset", torch.zeros(0))
        else:
            self.register_buffer("weight", torch.zeros(in_dim, out_dim))
            self.register_buffer("offset", torch.zeros(out_dim))

    @property
    def calibrated(self) -> bool:
        """Whether the map is drawn (:data:`RELU`: always)."""
        return self.kind == RELU or self.gamma is not None

    def calibrate(self, z: Tensor) -> None:
        """:data:`FOURIER`: draw W and b for the first features seen (later calls do
        nothing); :data:`RELU`: nothing.

        :param z: [n, d] float E0 features (the first training experience's).
        :raises ValueError: ``z`` is not [n, d], or has zero variance.
        """
        if self.calibrated:
            return
        if z.dim() != 2 or z.shape[1] != self.in_dim:
            raise ValueError(f"features must be [n, {self.in_dim}], got {tuple(z.shape)}")
        from sklearn.kernel_approximation import RBFSampler

        variance = float(z.double().var(unbiased=False))
        if not variance > 0:
            raise ValueError("the first training features have zero variance: the kernel's width cannot be set "
                             "from them (check that E0 is not constant on the data)")
        gamma = self.gamma_scale / (self.in_dim * variance)
        sampler = RBFSampler(gamma=gamma, n_components=self.out_dim, random_state=self.seed)
        sampler.fit(z[:1].double().cpu().numpy())  # the draw reads the feature count only
        self.weight.copy_(torch.from_numpy(sampler.random_weights_))
        self.offset.copy_(torch.from_numpy(sampler.random_offset_))
        self.gamma = gamma

    def forward(self, z: Tensor) -> Tensor:
        """:param z: [N, d] float. :return: h [N, M] float32.

        :raises RuntimeError: a :data:`FOURIER` map not calibrated yet.
        """
        if not self.calibrated:
            raise RuntimeError("the Fourier features are drawn from the first training data: call calibrate(z) "
                               "(a ClosedFormStrategy does so when it trains) before mapping features")
        z = z.float()
        if self.kind == RELU:
            return torch.relu(z @ self.weight)
        return (2.0 / self.out_dim) ** 0.5 * torch.cos(z @ self.weight + self.offset)


@torch.no_grad()
def accumulate(scatter: Tensor, sums: Tensor, counts: Tensor, h: Tensor, y: Tensor) -> None:
    """Add samples to running statistics, in place (module doc): ``sums[c] += sum of h over
    y == c``, ``counts[c] += their number``, and the within-class ``scatter`` += the
    batch's scatter around its own class means plus, per class, ``n_old n_b / (n_old + n_b)
    (mu_old - m_b)(mu_old - m_b)^T`` (Chan et al.), computed in float64 and added at the
    statistics' dtype.

    :param scatter: [M, M]; ``sums``: [K, M]; ``counts``: [K] (float tensors, one device).
    :param h: [n, M] float features; ``y``: [n] int64 class (or unit) indices in 0..K-1.
    """
    h = h.double().to(scatter.device)
    y = y.to(scatter.device)
    n_b = torch.bincount(y, minlength=counts.shape[0]).double()
    s_b = torch.zeros(counts.shape[0], h.shape[1], dtype=torch.float64, device=h.device).index_add_(0, y, h)
    present = n_b > 0
    m_b = s_b[present] / n_b[present, None]
    residual = h - torch.zeros_like(s_b).index_copy_(0, torch.nonzero(present).flatten(), m_b)[y]
    n_old = counts.double()[present]
    weight = n_old * n_b[present] / (n_old + n_b[present])
    delta = torch.where(n_old[:, None] > 0, sums.double()[present] / n_old.clamp_min(1)[:, None], m_b) - m_b
    scatter += (residual.T @ residual + delta.T @ (delta * weight[:, None])).to(scatter.dtype)
    sums += s_b.to(sums.dtype)
    counts += n_b.to(counts.dtype)


def _solve(matrix: Tensor, right: Tensor) -> Tensor:
    """``matrix^-1 right`` for a symmetric positive semi-definite ``matrix`` (float64):
    Cholesky, or where that fails (a singular matrix: no shrinkage on fewer samples than
    dimensions) the pseudo-inverse, as Avalanche's ``StreamingLDA`` uses."""
    factor, info = torch.linalg.cholesky_ex(matrix)
    if int(info) == 0:
        return torch.cholesky_solve(right, factor)
    return torch.linalg.pinv(matrix, hermitian=True) @ right


def solve_head(head: str, scatter: Tensor, sums: Tensor, counts: Tensor, *, ridge: Optional[float] = None,
               shrinkage: Optional[float] = None) -> Tuple[Tensor, Tensor, Tensor]:
    """The linear scores of a closed-form head from running statistics (module doc).

    :param head: :data:`RIDGE` (``ridge`` required) or :data:`LDA` (``shrinkage`` required).
    :param scatter: [M, M] the within-class scatter (:func:`accumulate`).
    :param sums: [K, M] per-class ``sum h``.
    :param counts: [K] samples per class (a class with 0 has no score).
    :param ridge: lambda as a multiple of ``trace(G) / M`` (positive).
    :param shrinkage: s in [0, 1].
    :return: ``(A [M, K] float32, b [K] float32, seen [K] bool)``: scores ``h A + b``;
        the columns of unseen classes are 0 (mask them with ``seen``). Solved in float64;
        a zero trace (no spread) falls back to the identity as the scale.
    :raises ValueError: an unknown head.
    """
    if head not in (RIDGE, LDA):
        raise ValueError(f"head must be {RIDGE!r} or {LDA!r}, got {head!r}")
    scatter, sums, counts = scatter.double(), sums.double(), counts.double()
    seen = counts > 0
    width = scatter.shape[0]
    eye = torch.eye(width, dtype=torch.float64, device=scatter.device)
    weights = torch.zeros(width, sums.shape[0], dtype=torch.float64, device=scatter.device)
    offsets = torch.zeros(sums.shape[0], dtype=torch.float64, device=scatter.device)
    if bool(seen.any()):
        n = counts[seen]
        means = sums[seen] / n[:, None]
        if head == RIDGE:
            gram = scatter + means.T @ (means * n[:, None])
            scale = float(torch.trace(gram)) / width
            weights[:, seen] = _solve(gram + ridge * (scale if scale > 0 else 1.0) * eye, sums[seen].T)
        else:
            covariance = scatter / max(float(n.sum()) - int(seen.sum()), 1.0)
            scale = float(torch.trace(covariance)) / width
            shrunk = (1 - shrinkage) * covariance + shrinkage * (scale if scale > 0 else 1.0) * eye
            solved = _solve(shrunk, means.T)
            weights[:, seen] = solved
            offsets[seen] = -0.5 * (means * solved.T).sum(1)
    return weights.float(), offsets.float(), seen


__all__ = ["FOURIER", "LDA", "RELU", "RIDGE", "RandomFeatures", "accumulate", "check_fraction",
           "solve_head"]
