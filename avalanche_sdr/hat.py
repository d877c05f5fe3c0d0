"""HAT, hard attention to the task (Serra et al., ICML 2018), on a copy of E0.

HAT gives every task a learned gate ``a_l^t = sigmoid(s * e_l^t)`` on the output
units of every gated layer and, while a later task trains, freezes the units earlier
tasks use (updates scaled by ``1 - a^{<t}``); ``s`` is annealed to ``s_max`` so the
gates become binary. It is one of the Table 2 baselines. Written by hand because
Avalanche 0.6.0 has no HAT, from Avalanche's pieces: :class:`HATNet` is a
``MultiTaskModule`` with a ``MultiHeadClassifier``, and :func:`hat_strategy` a
``SupervisedTemplate`` with :class:`HATPlugin`, whose hooks anneal, regularise,
condition the gradients and accumulate the masks. It runs on any E0 of ``Conv2d`` /
``Linear`` / BatchNorm / ReLU / pooling modules, with every BatchNorm frozen, Adam's
state reset at every experience and the task embeddings on the paper's SGD step.

Deviations from the paper with their reasons, the measured effect of the embedding
optimizer and the known failure on EMNIST 100: docs/method.rst, section "HAT, hard
attention to the task: deviations from the paper and measurements".
"""
from __future__ import annotations

import copy
from typing import Any, Dict, Iterable, List, Optional, Tuple

import torch
from avalanche.models import MultiHeadClassifier, MultiTaskModule
from avalanche.training.plugins import SupervisedPlugin
from avalanche.training.templates import SupervisedTemplate
from torch import Tensor, nn

from avalanche_sdr._batching import check_batch_size
from avalanche_sdr._checks import check_int
from avalanche_sdr.baseline_arguments import HAT_C, HAT_EMBEDDING_LR, HAT_S_MAX, training_arguments

EMBEDDING_BOUND = 6.0
"""Task embeddings are clamped to ``[-6, 6]`` after every step (the official code's
``thres_emb``): ``sigmoid(s_max * 6)`` is already 1 in float32."""

COSH_BOUND = 50.0
"""``s * e`` is clamped to ``[-50, 50]`` inside the compensation's ``cosh`` (the
official code's ``thres_cosh``), so that it cannot overflow."""

GATED_TYPES = (nn.Conv2d, nn.Linear)
"""Module types whose output units get a gate."""


# --------------------------------------------------------------------- the math


def annealed_scale(batch: int, n_batches: int, s_max: float) -> float:
    """The gate scale ``s`` at mini-batch ``batch`` (1-based) of an epoch of
    ``n_batches``: ``1/s_max + (s_max - 1/s_max) (batch - 1) / (n_batches - 1)``, from
    ``1/s_max`` (first) to ``s_max`` (last); ``s_max`` for an epoch of one mini-batch."""
    if n_batches <= 1:
        return float(s_max)
    return 1.0 / s_max + (s_max - 1.0 / s_max) * (batch - 1) / (n_batches - 1)


def attention_regulariser(gates: Tensor, cumulative: Tensor, c: float) -> Tensor:
    """HAT's sparsity term ``c * sum(a (1 - a_prev)) / sum(1 - a_prev)``.

    :param gates: the current task's gates ``a^t``, float [U] in [0, 1] (every gated
        unit of every layer).
    :param cumulative: the earlier tasks' cumulative mask ``a^{<t}``, float [U] (zeros
        for the first task).
    :param c: weight (dimensionless, >= 0).
    :return: scalar tensor (dimensionless); 0 when no unit is free.
    """
    free = 1.0 - cumulative
    return c * (gates * free).sum() / free.sum().clamp_min(torch.finfo(free.dtype).tiny)


def embedding_gradient_factor(embedding: Tensor, s: float, s_max: float) -> Tensor:
    """The paper's compensation (eq. 4) of an embedding's gradient for the annealing:
    ``s_max (cosh(clamp(s e, -50, 50)) + 1) / (s (cosh(e) + 1))``, elementwise.

    :param embedding: ``e``, float [U].
    :param s: the current scale (> 0).
    :param s_max: the final scale.
    :return: float [U], the factor to multiply ``e``'s gradient by.
    """
    num = torch.cosh(torch.clamp(s * embedding, -COSH_BOUND, COSH_BOUND)) + 1.0
    den = torch.cosh(embedding) + 1.0
    return (s_max / s) * num / den


# --------------------------------------------------------------------- the network


def _row_shape(tensor: Tensor) -> Tuple[int, ...]:
    """``[-1, 1, 1, ...]``: a per-output-unit factor broadcast over a weight's other axes."""
    return (-1,) + (1,) * (tensor.dim() - 1)


class HATNet(MultiTaskModule):
    """A gated trainable copy of E0 + one head per task (Avalanche ``MultiHeadClassifier``).

    ``forward(x [N, C, H, W] float32, task_labels [N] int64) -> logits [N, max classes]``
    (Avalanche's ``MultiTaskModule`` splits the mini-batch by task). In training mode
    the gates use the scale :attr:`s` (set by :class:`HATPlugin` for every
    mini-batch), in eval mode :attr:`s_max`.

    State (all counted as the model's memory): ``backbone``, the gated copy of E0;
    ``task_embeddings``, one float32 parameter [U] per task label seen in training
    (``U`` = :attr:`n_units`, the gated units of every layer, concatenated in module
    order; initialised N(0, 1) from the global torch RNG, as the heads are); the
    buffer ``cumulative_mask`` float32 [U], ``a^{<t}``; ``classifier``.

    :param backbone: E0, an ``nn.Module`` mapping images to features [N,
        ``backbone.feature_dim``] with at least one ``Conv2d`` or ``Linear`` module;
        deep-copied, not changed.
    :param s_max: the final gate scale (> 1).
    :param initial_out_features: output units of a head before adaptation.
    :raises ValueError: a backbone without ``feature_dim`` or without a gated module,
        or ``s_max <= 1``.
    """

    def __init__(self, backbone: nn.Module, s_max: float = HAT_S_MAX, initial_out_features: int = 2):
        super().__init__()
        _check_s_max(s_max)
        feature_dim = getattr(backbone, "feature_dim", None)
        if feature_dim is None:
            raise ValueError("HAT needs a backbone with a feature_dim attribute (the size of its output features), "
                             "e.g. avalanche_sdr.models.small_cnn_backbone(...)")
        self.s_max = float(s_max)
        self.s = float(s_max)
        self.backbone = copy.deepcopy(backbone).train()
        self._layers: List[Tuple[str, int, int]] = []  # (module name, first unit, units)
        gated_params = set()
        units = 0
        for name, module in self.backbone.named_modules():
            if isinstance(module, GATED_TYPES):
                size = module.out_channels if isinstance(module, nn.Conv2d) else module.out_features
                self._layers.append((name, units, size))
                module.register_forward_hook(_UnitGate(self, units, size, isinstance(module, nn.Conv2d)))
                gated_params.update(id(p) for p in module.parameters(recurse=False))
                units += size
        if not self._layers:
            raise ValueError("HAT gates the output units of Conv2d and Linear modules, and the backbone has none")
        for p in self.backbone.parameters():
            p.requires_grad_(id(p) in gated_params)
        self.n_units = units
        self.task_embeddings = nn.ParameterDict()
        self.register_buffer("cumulative_mask", torch.zeros(units))
        self.classifier = MultiHeadClassifier(int(feature_dim), initial_out_features)
        self._active: Optional[Tensor] = None
        self.train()

    # -- modes and adaptation

    def train(self, mode: bool = True):
        """Set the mode; the backbone's BatchNorms stay in eval mode (frozen E0 statistics)."""
        super().train(mode)
        for module in self.backbone.modules():
            if isinstance(module, nn.modules.batchnorm._BatchNorm):
                module.eval()
        return self

    def adaptation(self, experience):
        """Avalanche's adaptation: in training mode, an embedding N(0, 1) [U] for every
        task label of ``experience`` that has none (the heads adapt themselves)."""
        super().adaptation(experience)
        if not self.training:
            return
        for task in experience.task_labels:
            key = str(int(task))
            if key not in self.task_embeddings:
                device = self.cumulative_mask.device
                self.task_embeddings[key] = nn.Parameter(torch.randn(self.n_units, device=device))

    # -- gates

    def embedding(self, task_label: int) -> nn.Parameter:
        """Task ``task_label``'s embedding, float32 [U].

        :raises KeyError: a task never trained (no embedding), with what to do.
        """
        key = str(int(task_label))
        if key not in self.task_embeddings:
            raise KeyError(f"HAT has no embedding for task {int(task_label)}: train on an experience of that task "
                           f"first (known tasks: {sorted(int(k) for k in self.task_embeddings)})")
        return self.task_embeddings[key]

    def gates(self, task_label: int, s: Optional[float] = None) -> Tensor:
        """``sigmoid(s * e^t)``, float32 [U] in [0, 1], differentiable in ``e^t``.

        :param s: the scale; ``None``: :attr:`s` in training mode, :attr:`s_max` in eval mode.
        """
        if s is None:
            s = self.s if self.training else self.s_max
        return torch.sigmoid(s * self.embedding(task_label))

    def layer_gates(self, gates: Tensor) -> Dict[str, Tensor]:
        """Split a [U] vector of units into ``{module name: [units of that module]}``."""
        return {name: gates[start:start + size] for name, start, size in self._layers}

    # -- forward

    def forward_single_task(self, x: Tensor, task_label: int) -> Tensor:
        """:param x: [N, C, H, W] float32. :return: logits [N, classes of the task's head]."""
        self._active = self.gates(task_label)
        try:
            features = self.backbone(x)
        finally:
            self._active = None
        return self.classifier.forward_single_task(features, task_label)

    # -- protection

    def _gated_rows(self) -> Iterable[Tuple[nn.Parameter, Tensor]]:
        """``(parameter, 1 - a^{<t} of its output units [units])`` for every gated weight and bias."""
        free = 1.0 - self.cumulative_mask
        for name, start, size in self._layers:
            module = self.backbone.get_submodule(name)
            for p in module.parameters(recurse=False):
                yield p, free[start:start + size]

    @torch.no_grad()
    def condition_gradients(self) -> None:
        """The paper's gradient conditioning, on output units: multiply the gradient of
        every gated module's weight and bias rows of output unit ``i`` by ``1 - a^{<t}_i``."""
        for p, free in self._gated_rows():
            if p.grad is not None:
                p.grad.mul_(free.view(_row_shape(p)))

    @torch.no_grad()
    def gated_parameters(self) -> List[Tensor]:
        """Copies of every gated weight and bias, in :meth:`mask_update`'s order."""
        return [p.detach().clone() for p, _ in self._gated_rows()]

    @torch.no_grad()
    def mask_update(self, before: List[Tensor]) -> None:
        """Scale the last optimizer step of every gated row by ``1 - a^{<t}``:
        ``p = before + (1 - a^{<t}) (p - before)``; a row with ``a^{<t} = 1`` is restored.

        :param before: :meth:`gated_parameters` taken before the step.
        """
        for (p, free), old in zip(self._gated_rows(), before):
            p.copy_(old + free.view(_row_shape(p)) * (p - old))

    @torch.no_grad()
    def accumulate(self, task_label: int) -> None:
        """``a^{<t} = max(a^{<t}, sigmoid(s_max e^t))``: task ``task_label`` is now an earlier task."""
        torch.maximum(self.cumulative_mask, self.gates(task_label, self.s_max), out=self.cumulative_mask)


class _UnitGate:
    """Forward hook multiplying a module's output units by the owner's active gates
    ``[start:start + size]`` (channels of a conv output [N, C, H, W], last axis of a
    linear output [..., F])."""

    def __init__(self, owner: HATNet, start: int, size: int, channels_first: bool):
        self.owner, self.start, self.size, self.channels_first = owner, start, size, channels_first

    def __call__(self, module: nn.Module, inputs: Any, output: Tensor) -> Tensor:
        active = self.owner._active
        if active is None:
            raise RuntimeError("HATNet's backbone runs only inside HATNet.forward (it needs a task's gates)")
        gate = active[self.start:self.start + self.size]
        if self.channels_first:
            gate = gate.view((1, -1) + (1,) * (output.dim() - 2))
        return output * gate


# --------------------------------------------------------------------- the strategy


class HATPlugin(SupervisedPlugin):
    """HAT's training procedure as Avalanche hooks, on a strategy whose model is a :class:`HATNet`.

    - ``before_training_exp``: reset the optimizer state (see the module docstring);
    - ``before_training_epoch`` / ``before_training_iteration``: the annealed scale
      ``s`` of the mini-batch (:func:`annealed_scale`);
    - ``before_backward``: add :func:`attention_regulariser` of the mini-batch's task(s)
      to the loss (mean over the tasks of a mixed mini-batch);
    - ``after_backward``: compensate the embedding gradients
      (:func:`embedding_gradient_factor`) and condition the gated rows' gradients
      (:meth:`HATNet.condition_gradients`);
    - ``before_update`` / ``after_update``: the SGD step of the task embeddings
      (``embedding_lr``; their gradient is then cleared, so the optimizer skips them),
      scale the gated rows' update (:meth:`HATNet.mask_update`), clamp the embeddings
      to ``[-6, 6]``;
    - ``after_training_exp``: accumulate the experience's tasks into ``a^{<t}``.

    :param c: the regulariser's weight (dimensionless, >= 0).
    :param embedding_lr: the SGD learning rate of the task embeddings (> 0); ``None``:
        the embeddings are left to the strategy's optimizer.
    """

    def __init__(self, c: float = HAT_C, embedding_lr: Optional[float] = HAT_EMBEDDING_LR):
        super().__init__()
        _check_c(c)
        _check_embedding_lr(embedding_lr)
        self.c = float(c)
        self.embedding_lr = None if embedding_lr is None else float(embedding_lr)
        self._batch = 0
        self._n_batches = 1
        self._before: Optional[List[Tensor]] = None

    @staticmethod
    def _model(strategy) -> HATNet:
        model = strategy.model
        if not isinstance(model, HATNet):
            raise TypeError(f"HATPlugin needs a HATNet model, got {type(model).__name__}")
        return model

    def before_training_exp(self, strategy, *args, **kwargs):
        strategy.optimizer.state.clear()

    def before_training_epoch(self, strategy, *args, **kwargs):
        self._batch = 0
        self._n_batches = len(strategy.dataloader)

    def before_training_iteration(self, strategy, *args, **kwargs):
        self._batch += 1
        model = self._model(strategy)
        model.s = annealed_scale(self._batch, self._n_batches, model.s_max)

    def before_backward(self, strategy, *args, **kwargs):
        model = self._model(strategy)
        tasks = torch.unique(strategy.mb_task_id).tolist()
        penalty = sum(attention_regulariser(model.gates(t), model.cumulative_mask, self.c) for t in tasks)
        strategy.loss = strategy.loss + penalty / len(tasks)

    def after_backward(self, strategy, *args, **kwargs):
        model = self._model(strategy)
        with torch.no_grad():
            for e in model.task_embeddings.values():
                if e.grad is not None:
                    e.grad.mul_(embedding_gradient_factor(e, model.s, model.s_max))
        model.condition_gradients()

    def before_update(self, strategy, *args, **kwargs):
        model = self._model(strategy)
        # On the first task a^{<t} is all zero and mask_update the identity: no copies.
        self._before = model.gated_parameters() if bool(model.cumulative_mask.any()) else None
        if self.embedding_lr is None:
            return
        with torch.no_grad():
            for e in model.task_embeddings.values():
                if e.grad is not None:
                    e.sub_(self.embedding_lr * e.grad)
                    e.grad = None  # the strategy's optimizer skips a parameter without gradient

    def after_update(self, strategy, *args, **kwargs):
        model = self._model(strategy)
        if self._before is not None:
            model.mask_update(self._before)
            self._before = None
        with torch.no_grad():
            for e in model.task_embeddings.values():
                e.clamp_(-EMBEDDING_BOUND, EMBEDDING_BOUND)

    def after_training_exp(self, strategy, *args, **kwargs):
        model = self._model(strategy)
        for task in strategy.experience.task_labels:
            model.accumulate(int(task))
        model.s = model.s_max


def _check_s_max(s_max: float) -> None:
    if not isinstance(s_max, (int, float)) or isinstance(s_max, bool) or not s_max > 1:
        raise ValueError(f"s_max must be a number > 1 (the gates' final scale; the paper uses {HAT_S_MAX}), "
                         f"got {s_max!r}")


def _check_c(c: float) -> None:
    if not isinstance(c, (int, float)) or isinstance(c, bool) or not c >= 0:
        raise ValueError(f"c must be a number >= 0 (the attention regulariser's weight; the paper uses {HAT_C}), "
                         f"got {c!r}")


def _check_embedding_lr(embedding_lr: Optional[float]) -> None:
    if embedding_lr is None:
        return
    if isinstance(embedding_lr, bool) or not isinstance(embedding_lr, (int, float)) or not embedding_lr > 0:
        raise ValueError(f"embedding_lr must be a number > 0 (the SGD learning rate of the task embeddings; the "
                         f"paper uses {HAT_EMBEDDING_LR}) or None (embeddings in the strategy's optimizer), "
                         f"got {embedding_lr!r}")


def hat_strategy(backbone: nn.Module, *, epochs: int, lr: float = 1e-3, train_mb_size: int = 32,
                 eval_mb_size: Optional[int] = None, s_max: float = HAT_S_MAX, c: float = HAT_C,
                 embedding_lr: Optional[float] = HAT_EMBEDDING_LR, evaluator=None,
                 device: Any = "cpu") -> SupervisedTemplate:
    """[HAT] Avalanche ``SupervisedTemplate`` on a :class:`HATNet` with a :class:`HATPlugin`:
    Adam (``lr``, no weight decay, state reset at every experience) on the weights, SGD
    (``embedding_lr``) on the task embeddings, cross-entropy plus the attention
    regulariser, ``epochs`` epochs per experience. The parameters not listed here: see
    :func:`avalanche_sdr.baseline_arguments.training_arguments`.

    :param backbone: E0 (``feature_dim`` attribute; deep-copied, not changed).
    :param s_max: the gates' final scale (> 1; the paper's 400).
    :param c: the attention regulariser's weight (>= 0; the paper's 0.75).
    :param embedding_lr: SGD learning rate of the task embeddings (> 0; the paper's 0.05);
        ``None``: the embeddings are trained by the Adam of the weights.
    :raises ValueError: ``epochs`` or ``train_mb_size`` not a positive int, ``eval_mb_size``
        neither ``None`` nor one, ``lr <= 0``, ``s_max <= 1``, ``c < 0``, ``embedding_lr <= 0``, or a backbone
        HAT cannot gate.
    """
    check_int(epochs, "epochs")
    check_int(train_mb_size, "train_mb_size")
    check_batch_size(eval_mb_size, "eval_mb_size")
    if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not lr > 0:
        raise ValueError(f"lr must be a number > 0 (Adam's learning rate, e.g. 1e-3), got {lr!r}")
    _check_s_max(s_max)
    _check_c(c)
    _check_embedding_lr(embedding_lr)
    arguments = training_arguments(HATNet(backbone, s_max), epochs=epochs, lr=lr, train_mb_size=train_mb_size,
                                   eval_mb_size=eval_mb_size, evaluator=evaluator, device=device)
    return SupervisedTemplate(**arguments, plugins=[HATPlugin(c, embedding_lr)])


__all__ = [
    "COSH_BOUND",
    "EMBEDDING_BOUND",
    "GATED_TYPES",
    "HATNet",
    "HATPlugin",
    "annealed_scale",
    "attention_regulariser",
    "embedding_gradient_factor",
    "hat_strategy",
]
