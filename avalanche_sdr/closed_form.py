"""Closed-form continual learners on a frozen E0: nothing trained by gradient, nothing forgotten.

Each keeps the pretrained E0 frozen and fits, from running statistics of E0's features,
one classifier over the dataset's original class ids (a class-incremental learner: it
predicts without task labels; given the task label, the same classifier answers among
that task's classes, :class:`~avalanche_sdr.evaluation.task_aware.TaskAwareAccuracy`).
The learners, by name (:data:`CLOSED_FORM_LEARNERS`):

- ``"slda"`` (:func:`slda_strategy`): Avalanche's ``StreamingLDA`` (Hayes et al., CVPR-W
  2020) on E0's features: class means and one streaming covariance, shrunk towards the
  identity by ``shrinkage``.
- ``"ranpac"`` (:func:`ranpac_strategy`): RanPAC's closed-form stage (McDonnell et al.,
  NeurIPS 2023), without its first-session adaptation of the encoder: a frozen random
  projection ``h = relu(z W)`` of E0's features z (W [d, M] ~ N(0, 1)), the Gram matrix
  ``G = sum h h^T`` and the class sums ``S`` (``S^T = H^T Y``, Y one-hot), prototypes
  ``(G + lambda I)^-1 S^T`` with ``lambda = ridge * trace(G) / M``.
- ``"klda"`` (:func:`klda_strategy`): KLDA (Momeni et al., 2025): random Fourier features
  of the Gaussian kernel ``exp(-gamma ||z - z'||^2)`` (``h = sqrt(2 / D) cos(z W + b)``,
  drawn by scikit-learn's ``RBFSampler``), then one linear discriminant analysis with a
  shared covariance: from the same G and S, the within-class covariance ``(G - sum_c
  n_c mu_c mu_c^T) / (N - C)``, shrunk to ``(1 - s) Sigma + s (trace(Sigma) / D) I``; score
  ``h Sigma_s^-1 mu_c - mu_c^T Sigma_s^-1 mu_c / 2`` (equal priors). ``gamma`` is
  ``gamma_scale`` times scikit-learn's ``gamma="scale"``, ``1 / (d Var(z))``, with the
  variance of the first training experience's E0 features (the map is drawn then).

A class no training data has reached scores the lowest finite value. Memory
(:func:`~avalanche_sdr.evaluation.repository_memory_bytes`): E0, the random map and the
running statistics (G, S and the class counts, float32; ``slda``: its means, counts and
covariance); the solved classifier is derived from them, recomputed when they change,
and not counted (as ``slda``'s pseudo-inverse).

Written by hand, the statistics and their solve (``ranpac``, ``klda``): scikit-learn's
``LinearDiscriminantAnalysis`` and ridge regression fit on all the data at once, which a
continual learner no longer holds, and Avalanche's ``StreamingLDA`` fits one sample at a
time (a Python loop of [D, D] updates, minutes per stream at D = 2,048).
"""
from __future__ import annotations

import copy
from typing import Any, Dict, Optional, Sequence

import torch
from torch import Tensor, nn

from avalanche_sdr._batching import eval_batch_size
from avalanche_sdr._checks import check_int
from avalanche_sdr.baselines import BaselineSettings, class_incremental_classes

RELU = "relu"
"""Kind of :class:`RandomFeatures`: RanPAC's ``relu(z W)``."""

FOURIER = "fourier"
"""Kind of :class:`RandomFeatures`: random Fourier features of a Gaussian kernel."""

RIDGE = "ridge"
"""Head of :class:`ClosedFormClassifier`: ridge-regression prototypes (RanPAC)."""

LDA = "lda"
"""Head of :class:`ClosedFormClassifier`: one shared-covariance LDA (KLDA)."""


def _check_fraction(value: Any, name: str, *, closed_low: bool) -> float:
    """``value`` as a float in (0, 1] (``closed_low``: [0, 1])."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
            (0.0 <= value if closed_low else 0.0 < value) and value <= 1.0):
        interval = "[0, 1]" if closed_low else "(0, 1]"
        raise ValueError(f"{name} must be a number in {interval}, got {value!r}")
    return float(value)


def _check_positive(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 or value != value:
        raise ValueError(f"{name} must be a positive number, got {value!r}")
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
        self.gamma_scale = None if kind == RELU else _check_positive(1.0 if gamma_scale is None else gamma_scale,
                                                                      "gamma_scale")
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


class ClosedFormClassifier(nn.Module):
    """Frozen E0, an optional :class:`RandomFeatures` map, and a head over the class ids
    solved in closed form from running statistics (module doc).

    ``forward(x [N, C, H, W]) -> scores [N, num_classes]`` float32 (no task labels).
    Statistics (float32 buffers, each batch's sums computed in float64): ``gram`` [M, M]
    ``sum h h^T``, ``sums`` [K, M] per-class ``sum h``, ``counts`` [K]. The solved head is
    kept until they change (not a buffer).

    :param backbone: E0 with a ``feature_dim`` attribute; copied and frozen (eval mode
        always), not changed.
    :param num_classes: K, class ids 0..K-1.
    :param head: :data:`RIDGE` (``ridge`` required) or :data:`LDA` (``shrinkage`` required).
    :param features: the map of E0's features, or ``None`` (E0's features themselves).
    :param ridge: :data:`RIDGE`: lambda as a multiple of ``trace(G) / M`` (positive).
    :param shrinkage: :data:`LDA`: s in [0, 1].
    :raises ValueError: an unknown head, a missing or extra setting, or a map whose input
        is not E0's feature size.
    """

    def __init__(self, backbone: nn.Module, num_classes: int, head: str, features: Optional[RandomFeatures] = None,
                 *, ridge: Optional[float] = None, shrinkage: Optional[float] = None):
        super().__init__()
        if head not in (RIDGE, LDA):
            raise ValueError(f"head must be {RIDGE!r} or {LDA!r}, got {head!r}")
        if (head == RIDGE) != (ridge is not None) or (head == LDA) != (shrinkage is not None):
            raise ValueError(f"head={head!r} takes {'ridge' if head == RIDGE else 'shrinkage'} and only that "
                             f"(got ridge={ridge!r}, shrinkage={shrinkage!r})")
        dim = int(backbone.feature_dim)
        if features is not None and features.in_dim != dim:
            raise ValueError(f"the random features read {features.in_dim} inputs but E0 gives {dim} features")
        self.num_classes = check_int(num_classes, "num_classes")
        self.head = head
        self.ridge = None if ridge is None else _check_positive(ridge, "ridge")
        self.shrinkage = None if shrinkage is None else _check_fraction(shrinkage, "shrinkage", closed_low=True)
        self.backbone = copy.deepcopy(backbone).eval()
        for p in self.backbone.parameters():
            p.requires_grad_(False)
        self.features = features
        width = dim if features is None else features.out_dim
        self.register_buffer("gram", torch.zeros(width, width))
        self.register_buffer("sums", torch.zeros(num_classes, width))
        self.register_buffer("counts", torch.zeros(num_classes))
        self._version = 0
        self._solved: Optional[tuple] = None

    def train(self, mode: bool = True):
        """Set the mode; E0 stays in eval mode (its BatchNorm statistics never move)."""
        super().train(mode)
        self.backbone.eval()
        return self

    @torch.no_grad()
    def encode(self, x: Tensor) -> Tensor:
        """E0's features [N, d] of images ``x`` [N, C, H, W] (no gradient)."""
        return self.backbone(x)

    def expand(self, z: Tensor) -> Tensor:
        """h [N, M] float32 of E0's features ``z`` [N, d] (``z`` itself without a map)."""
        return z.float() if self.features is None else self.features(z)

    @torch.no_grad()
    def fit(self, z: Tensor, y: Tensor) -> None:
        """Add the training features ``z`` [n, d] (E0's) with class ids ``y`` [n] int64 to
        the statistics; the first call calibrates the map (:meth:`RandomFeatures.calibrate`).

        :raises ValueError: shapes that disagree, or a class id outside 0..K-1.
        """
        if z.dim() != 2 or y.shape != (z.shape[0],):
            raise ValueError(f"fit takes features [n, d] and labels [n], got {tuple(z.shape)} and {tuple(y.shape)}")
        if y.numel() and (int(y.min()) < 0 or int(y.max()) >= self.num_classes):
            raise ValueError(f"class ids must lie in 0..{self.num_classes - 1}, got {int(y.min())}..{int(y.max())}")
        if self.features is not None:
            self.features.calibrate(z)
        h = self.expand(z).double()
        self.gram += (h.T @ h).to(self.gram.dtype)
        self.sums.index_add_(0, y, h.to(self.sums.dtype))
        self.counts += torch.bincount(y, minlength=self.num_classes).to(self.counts.dtype)
        self._version += 1

    def _solve(self) -> tuple:
        """``(W [M, K] float32, b [K] float32, seen [K] bool)``, kept until the statistics change."""
        if self._solved is not None and self._solved[0] == self._version:
            return self._solved[1:]
        gram, sums, counts = self.gram.double(), self.sums.double(), self.counts.double()
        seen = counts > 0
        width = gram.shape[0]
        eye = torch.eye(width, dtype=torch.float64, device=gram.device)
        weights = torch.zeros(width, self.num_classes, dtype=torch.float64, device=gram.device)
        offsets = torch.zeros(self.num_classes, dtype=torch.float64, device=gram.device)
        if bool(seen.any()):
            if self.head == RIDGE:
                scale = float(torch.trace(gram)) / width
                regularised = gram + self.ridge * (scale if scale > 0 else 1.0) * eye
                weights[:, seen] = torch.cholesky_solve(sums[seen].T, torch.linalg.cholesky(regularised))
            else:
                n = counts[seen]
                means = sums[seen] / n[:, None]
                within = gram - means.T @ (means * n[:, None])
                covariance = within / max(float(n.sum()) - int(seen.sum()), 1.0)
                scale = float(torch.trace(covariance)) / width
                shrunk = (1 - self.shrinkage) * covariance + self.shrinkage * (scale if scale > 0 else 1.0) * eye
                solved = torch.cholesky_solve(means.T, torch.linalg.cholesky(shrunk))
                weights[:, seen] = solved
                offsets[seen] = -0.5 * (means * solved.T).sum(1)
        self._solved = (self._version, weights.float(), offsets.float(), seen)
        return self._solved[1:]

    @torch.no_grad()
    def forward(self, x: Tensor) -> Tensor:
        """:param x: [N, C, H, W] float images. :return: [N, K] float32 scores (a class
        never trained on: the lowest finite float32)."""
        weights, offsets, seen = self._solve()
        scores = self.expand(self.encode(x)) @ weights + offsets
        return scores.masked_fill(~seen, torch.finfo(scores.dtype).min)


def _strategy_class():
    """:class:`ClosedFormStrategy`'s class, made on first use (it subclasses Avalanche's
    template: this module imports no Avalanche at import time)."""
    from avalanche.training.templates import SupervisedTemplate

    class ClosedFormStrategy(SupervisedTemplate):
        """Avalanche's supervised template for a :class:`ClosedFormClassifier`: each
        training experience is read once (``train_epochs=1``, no optimizer, no backward):
        its E0 features, then :meth:`ClosedFormClassifier.fit`. Every plugin hook of a
        training iteration and experience runs; evaluation is the template's.

        :param model: the :class:`ClosedFormClassifier`.
        :param train_mb_size: images per feature pass in training.
        :param eval_mb_size: images per evaluation mini-batch.
        :param device: torch device.
        :param evaluator: an Avalanche ``EvaluationPlugin`` (``None``: Avalanche's default).
        :param plugins: more Avalanche plugins.
        """

        def __init__(self, *, model: ClosedFormClassifier, train_mb_size: int, eval_mb_size: int,
                     device: Any = "cpu", evaluator=None, plugins: Optional[Sequence[Any]] = None):
            kwargs = {} if evaluator is None else {"evaluator": evaluator}
            super().__init__(model=model, optimizer=None, criterion=nn.CrossEntropyLoss(),
                             train_mb_size=train_mb_size, train_epochs=1, eval_mb_size=eval_mb_size,
                             device=device, plugins=list(plugins or []), eval_every=-1, **kwargs)

        def make_optimizer(self, **kwargs):
            """Nothing to optimize."""

        def training_epoch(self, **kwargs):
            """One pass: E0's features of every mini-batch (hooks around each), then the fit."""
            features, labels = [], []
            for self.mbatch in self.dataloader:
                self._unpack_minibatch()
                self._before_training_iteration(**kwargs)
                self.loss = self._make_empty_loss()
                features.append(self.model.encode(self.mb_x))
                labels.append(self.mb_y)
                self._after_training_iteration(**kwargs)
            if features:
                self.model.fit(torch.cat(features), torch.cat(labels))

    return ClosedFormStrategy


def _slda_class():
    """Avalanche's ``StreamingLDA`` with two changes, made on first use: a class never
    trained on scores the lowest finite value (Avalanche's scores it 0, above every
    trained class whose score is negative), and ``memory_extra_modules`` returns its state
    (means, counts, covariance) for the memory count."""
    from avalanche.training import StreamingLDA

    class MaskedStreamingLDA(StreamingLDA):
        """``StreamingLDA`` scoring untrained classes lowest, its state counted (see above)."""

        @torch.no_grad()
        def predict(self, X):
            scores = super().predict(X)
            return scores.masked_fill(self.cK == 0, torch.finfo(scores.dtype).min)

        def memory_extra_modules(self):
            """Its running state: class means [K, d], counts [K] and covariance [d, d]
            (the pseudo-inverse is derived from them)."""
            return [self.muK, self.cK, self.Sigma]

    return MaskedStreamingLDA


def slda_strategy(backbone: nn.Module, train_stream: Sequence, *, shrinkage: float, train_mb_size: int = 32,
                  eval_mb_size: Optional[int] = None, evaluator=None, device: Any = "cpu"):
    """[slda] Avalanche's ``StreamingLDA`` on a frozen copy of E0, one pass per experience,
    over the original class ids of ``train_stream`` (module doc).

    :param backbone: E0 with a ``feature_dim`` attribute; copied, not changed.
    :param train_stream: the training experiences of a benchmark built with
        ``original_class_ids=True``; read to size the classifier and check the labels.
    :param shrinkage: ``StreamingLDA``'s ``shrinkage_param``, in (0, 1].
    :param train_mb_size: images per mini-batch of E0's features in training (the fit is
        one sample at a time, Avalanche's).
    :param eval_mb_size: images per evaluation mini-batch; ``None``: chosen for ``device``.
    :param evaluator: an Avalanche ``EvaluationPlugin`` (``None``: Avalanche's default).
    :param device: torch device.
    :raises ValueError: labels local to each task, or a shrinkage outside (0, 1].
    """
    shrinkage = _check_fraction(shrinkage, "shrinkage", closed_low=False)
    num_classes = class_incremental_classes(train_stream)
    model = copy.deepcopy(backbone).eval()
    for p in model.parameters():
        p.requires_grad_(False)
    kwargs = {} if evaluator is None else {"evaluator": evaluator}
    return _slda_class()(slda_model=model, criterion=nn.CrossEntropyLoss(), input_size=int(backbone.feature_dim),
                         num_classes=num_classes, shrinkage_param=shrinkage, train_epochs=1,
                         train_mb_size=train_mb_size,
                         eval_mb_size=eval_batch_size(device, eval_mb_size, "eval_mb_size"), device=device,
                         **kwargs)


def _closed_form(model: ClosedFormClassifier, *, train_mb_size: int, eval_mb_size: Optional[int], evaluator,
                 device: Any):
    return _strategy_class()(model=model, train_mb_size=train_mb_size,
                             eval_mb_size=eval_batch_size(device, eval_mb_size, "eval_mb_size"), device=device,
                             evaluator=evaluator)


def ranpac_strategy(backbone: nn.Module, train_stream: Sequence, *, dim: int, ridge: float, seed: int = 0,
                    train_mb_size: int = 32, eval_mb_size: Optional[int] = None, evaluator=None, device: Any = "cpu"):
    """[ranpac] A frozen ``relu`` random projection of E0's features (``dim`` M) and
    ridge-regression prototypes over the original class ids (module doc).

    :param dim: M, the projection size.
    :param ridge: lambda as a multiple of ``trace(G) / M`` (positive).
    :param seed: seed of the projection's draw.

    The other parameters: as :func:`slda_strategy`.
    :raises ValueError: labels local to each task, or a bad setting.
    """
    features = RandomFeatures(RELU, int(backbone.feature_dim), dim, seed)
    model = ClosedFormClassifier(backbone, class_incremental_classes(train_stream), RIDGE, features, ridge=ridge)
    return _closed_form(model, train_mb_size=train_mb_size, eval_mb_size=eval_mb_size, evaluator=evaluator,
                        device=device)


def klda_strategy(backbone: nn.Module, train_stream: Sequence, *, dim: int, gamma_scale: float, shrinkage: float,
                  seed: int = 0, train_mb_size: int = 32, eval_mb_size: Optional[int] = None, evaluator=None,
                  device: Any = "cpu"):
    """[klda] ``dim`` random Fourier features of E0's features and one shared-covariance
    LDA over the original class ids (module doc).

    :param dim: D, the number of random Fourier features.
    :param gamma_scale: the kernel width, a multiple of scikit-learn's ``gamma="scale"``.
    :param shrinkage: s in [0, 1].
    :param seed: seed of the features' draw.

    The other parameters: as :func:`slda_strategy`.
    :raises ValueError: labels local to each task, or a bad setting.
    """
    features = RandomFeatures(FOURIER, int(backbone.feature_dim), dim, seed, gamma_scale=gamma_scale)
    model = ClosedFormClassifier(backbone, class_incremental_classes(train_stream), LDA, features,
                                 shrinkage=shrinkage)
    return _closed_form(model, train_mb_size=train_mb_size, eval_mb_size=eval_mb_size, evaluator=evaluator,
                        device=device)


def _slda_options(s: BaselineSettings, seed: int) -> Dict[str, Any]:
    return {"shrinkage": s.slda_shrinkage}  # draws nothing: no seed


def _ranpac_options(s: BaselineSettings, seed: int) -> Dict[str, Any]:
    return {"dim": s.ranpac_dim, "ridge": s.ranpac_ridge, "seed": seed}


def _klda_options(s: BaselineSettings, seed: int) -> Dict[str, Any]:
    return {"dim": s.klda_dim, "gamma_scale": s.klda_gamma, "shrinkage": s.klda_shrinkage, "seed": seed}


CLOSED_FORM_LEARNERS: Dict[str, tuple] = {
    "slda": (slda_strategy, _slda_options),
    "ranpac": (ranpac_strategy, _ranpac_options),
    "klda": (klda_strategy, _klda_options),
}
"""The closed-form learners by name: ``(builder, (settings, seed) -> its keyword
arguments)`` (the seed of its random map, where it draws one);
the settings are :class:`~avalanche_sdr.baselines.BaselineSettings` fields
(``slda_shrinkage``; ``ranpac_dim``, ``ranpac_ridge``; ``klda_dim``, ``klda_gamma``,
``klda_shrinkage``; defaults in :mod:`avalanche_sdr.baseline_arguments`)."""


def closed_form_strategy(name: str, backbone: nn.Module, train_stream: Sequence, settings: BaselineSettings, *,
                         seed: int = 0, evaluator=None, device: Any = "cpu"):
    """The closed-form learner ``name`` of :data:`CLOSED_FORM_LEARNERS` with the settings
    of ``settings`` (its fields for that learner, ``train_mb_size`` and ``eval_mb_size``).

    :param seed: seed of the learner's random map (``slda`` draws none).
    :raises ValueError: an unknown ``name``, labels local to each task, or a bad setting.
    """
    if name not in CLOSED_FORM_LEARNERS:
        raise ValueError(f"unknown closed-form learner {name!r}; expected one of {list(CLOSED_FORM_LEARNERS)}")
    build, options = CLOSED_FORM_LEARNERS[name]
    return build(backbone, train_stream, **options(settings, seed), train_mb_size=settings.train_mb_size,
                 eval_mb_size=settings.eval_mb_size, evaluator=evaluator, device=device)

__all__ = ["CLOSED_FORM_LEARNERS", "ClosedFormClassifier", "FOURIER", "LDA", "RELU", "RIDGE",
           "RandomFeatures", "closed_form_strategy", "klda_strategy", "ranpac_strategy", "slda_strategy"]
