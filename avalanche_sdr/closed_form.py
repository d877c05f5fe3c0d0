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
  ``G = H^T H`` and the class sums ``S`` (``S^T = H^T Y``, Y one-hot), prototypes
  ``(G + lambda I)^-1 S^T`` with ``lambda = ridge * trace(G) / M``.
- ``"klda"`` (:func:`klda_strategy`): KLDA (Momeni et al., 2025): random Fourier features
  of the Gaussian kernel ``exp(-gamma ||z - z'||^2)`` (``h = sqrt(2 / D) cos(z W + b)``,
  drawn by scikit-learn's ``RBFSampler``), then one linear discriminant analysis with a
  shared covariance: the within-class covariance ``W / (N - C)`` (W the within-class
  scatter), shrunk to ``(1 - s) Sigma + s (trace(Sigma) / D) I``; score
  ``h Sigma_s^-1 mu_c - mu_c^T Sigma_s^-1 mu_c / 2`` (equal priors). ``gamma`` is
  ``gamma_scale`` times scikit-learn's ``gamma="scale"``, ``1 / (d Var(z))``, with the
  variance of the first training experience's E0 features (the map is drawn then).

A class no training data has reached scores the lowest finite value. Memory
(:func:`~avalanche_sdr.evaluation.repository_memory_bytes`): E0, the random map and the
running statistics (the within-class scatter, S and the class counts, float32; ``slda``: its means, counts and
covariance); the solved classifier is derived from them, recomputed when they change,
and not counted (as ``slda``'s pseudo-inverse). The map and the solves:
:mod:`avalanche_sdr.models.closed_form_heads` (written by hand, why: there). Why not
Avalanche's ``StreamingLDA`` for ``klda`` too: it fits one sample at a time (a Python loop
of [D, D] updates, minutes per stream at D = 2,048).
"""
from __future__ import annotations

import copy
from typing import Any, Dict, Optional, Sequence

import torch
from torch import Tensor, nn

from avalanche_sdr._batching import eval_batch_size
from avalanche_sdr._checks import check_int, check_positive
from avalanche_sdr.baselines import BaselineSettings, class_incremental_classes
from avalanche_sdr.models.closed_form_heads import (FOURIER, LDA, RELU, RIDGE, RandomFeatures, accumulate,
                                                    check_fraction, solve_head)


class ClosedFormClassifier(nn.Module):
    """Frozen E0, an optional :class:`RandomFeatures` map, and a head over the class ids
    solved in closed form from running statistics (module doc).

    ``forward(x [N, C, H, W]) -> scores [N, num_classes]`` float32 (no task labels).
    Statistics (float32 buffers, each batch's computed in float64,
    :func:`~avalanche_sdr.models.closed_form_heads.accumulate`): ``scatter`` [M, M] the
    within-class scatter, ``sums`` [K, M] per-class ``sum h``, ``counts`` [K]. The solved
    head is kept until they change (not a buffer).

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
        self.ridge = None if ridge is None else float(check_positive(ridge, "ridge"))
        self.shrinkage = None if shrinkage is None else check_fraction(shrinkage, "shrinkage", closed_low=True)
        self.backbone = copy.deepcopy(backbone).eval()
        for p in self.backbone.parameters():
            p.requires_grad_(False)
        self.features = features
        width = dim if features is None else features.out_dim
        self.register_buffer("scatter", torch.zeros(width, width))
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
        accumulate(self.scatter, self.sums, self.counts, self.expand(z), y)
        self._version += 1

    def _load_from_state_dict(self, *args, **kwargs):
        """Loading statistics (a checkpoint) makes the kept solution stale."""
        super()._load_from_state_dict(*args, **kwargs)
        self._version += 1

    def _solve(self) -> tuple:
        """``(W [M, K] float32, b [K] float32, seen [K] bool)`` (:func:`solve_head`), kept
        until the statistics change."""
        if self._solved is None or self._solved[0] != self._version:
            self._solved = (self._version,) + solve_head(self.head, self.scatter, self.sums, self.counts,
                                                         ridge=self.ridge, shrinkage=self.shrinkage)
        return self._solved[1:]

    @torch.no_grad()
    def forward(self, x: Tensor) -> Tensor:
        """Scores of every class id seen so far.

        :param x: [N, C, H, W] float images.
        :return: [N, K] float32 scores (a class never trained on: the lowest finite float32).
        """
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
    shrinkage = check_fraction(shrinkage, "shrinkage", closed_low=False)
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
