"""The continual-learning baselines SDR is compared with, built from Avalanche.

Every builder starts from the same pretrained E0 (``backbone``: an ``nn.Module``
mapping images float32 ``[N, C, H, W]`` to features ``[N, backbone.feature_dim]``)
and copies it, so one E0 can serve several builders; none of them changes
``backbone`` itself. Each returns an Avalanche strategy ready for
``strategy.train(experience)`` / ``strategy.eval(stream)``. All train with Adam
(``lr``) for ``epochs`` epochs per experience on mini-batches of ``train_mb_size``
images and evaluate on mini-batches of ``eval_mb_size``.

Models:

- :func:`make_multi_head_net`: one shared trainable copy of E0 + Avalanche's
  ``MultiHeadClassifier`` (one head per task label);
- :class:`SingleHeadNet`: one shared trainable copy of E0 + ONE linear head (no task
  labels);
- :func:`make_model_per_task`: a fresh trainable copy of E0 + a head for every task;
- :func:`make_feature_pnn`: Avalanche's MLP-column ``PNN`` on the features of a
  frozen copy of E0.

Strategies (paper Table 2 names in brackets): :func:`ewc_strategy` [Online EWC],
:func:`replay_strategy` [ER], :func:`new_head_strategy` [New-Head],
:func:`finetune_strategy` [Finetune], :func:`single_model_strategy` [Single Model per
task], :func:`pnn_strategy` [PNN], :func:`generative_replay_strategy` [DGR].
:data:`BASELINE_SETTINGS` holds the training budgets the examples' ``--compare``
uses for ``--preset cpu`` and ``--preset paper`` (the Table 2 harness's presets of the
same names).

Avalanche is imported inside the functions, so importing this module does not import
it (command-line scripts install their warning filters first,
:func:`avalanche_sdr.cli.install_warning_filters`).
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Dict, Sequence, Tuple

import torch
from torch import nn

# --------------------------------------------------------------------- settings


@dataclass(frozen=True)
class BaselineSettings:
    """Training budget of the baselines.

    :param epochs: epochs per experience.
    :param lr: Adam learning rate.
    :param train_mb_size: training mini-batch size (images).
    :param eval_mb_size: evaluation mini-batch size (images).
    :param ewc_lambda: online-EWC penalty weight (dimensionless).
    :param ewc_decay: online-EWC decay factor of older importances, in [0, 1].
    :param replay_per_class: ER exemplars per (task, class) pair of the whole stream
        (see :func:`replay_mem_size`).
    """

    epochs: int
    lr: float = 1e-3
    train_mb_size: int = 32
    eval_mb_size: int = 256
    ewc_lambda: float = 100.0
    ewc_decay: float = 0.9
    replay_per_class: int = 10

    def training(self) -> Dict[str, Any]:
        """The keyword arguments every strategy builder takes: ``epochs``, ``lr``,
        ``train_mb_size``, ``eval_mb_size``."""
        return dict(epochs=self.epochs, lr=self.lr, train_mb_size=self.train_mb_size,
                    eval_mb_size=self.eval_mb_size)


BASELINE_SETTINGS: Dict[str, BaselineSettings] = {
    "cpu": BaselineSettings(epochs=10, train_mb_size=32),
    "paper": BaselineSettings(epochs=100, train_mb_size=128),
}
"""Baseline budgets by preset name: ``"cpu"`` (10 epochs, mini-batch 32) and
``"paper"`` (100 epochs, mini-batch 128, the paper's epochs; meant for a GPU); Adam lr
1e-3, online-EWC lambda 100 and decay 0.9, 10 ER exemplars per class in both."""


# --------------------------------------------------------------------- models


def _trainable_copy(backbone: nn.Module) -> nn.Module:
    """A deep copy of ``backbone`` with every parameter trainable, in training mode."""
    clone = copy.deepcopy(backbone)
    for p in clone.parameters():
        p.requires_grad_(True)
    return clone.train()


def max_classes(train_stream: Sequence) -> int:
    """The largest number of classes of one experience of ``train_stream``."""
    return max(len(exp.classes_in_this_experience) for exp in train_stream)


def replay_mem_size(train_stream: Sequence, per_class: int) -> int:
    """ER buffer size: ``per_class`` x the number of (task, class) pairs of the whole
    ``train_stream`` (so the experience-balanced buffer holds ``per_class`` exemplars
    per class after the last experience, more earlier in the stream)."""
    return per_class * sum(len(exp.classes_in_this_experience) for exp in train_stream)


def make_multi_head_net(backbone: nn.Module, initial_out_features: int = 2):
    """Shared trainable copy of ``backbone`` + Avalanche ``MultiHeadClassifier``.

    An Avalanche ``MultiTaskModule``: ``forward(x [N, C, H, W], task_labels [N] int64)
    -> logits [N, max classes]``; the classifier adds a head for every unseen task
    label during adaptation.

    :param backbone: E0 with a ``feature_dim`` attribute; copied, not changed.
    :param initial_out_features: output units of a head before adaptation.
    """
    from avalanche.models import MultiHeadClassifier, MultiTaskModule

    class MultiHeadNet(MultiTaskModule):
        def __init__(self):
            super().__init__()
            self.backbone = _trainable_copy(backbone)
            self.classifier = MultiHeadClassifier(backbone.feature_dim, initial_out_features)

        def forward(self, x, task_labels):
            return self.classifier(self.backbone(x), task_labels)

        def forward_single_task(self, x, task_label):
            return self.classifier.forward_single_task(self.backbone(x), task_label)

    return MultiHeadNet()


class SingleHeadNet(nn.Module):
    """Shared trainable copy of a backbone + one linear head of ``num_classes``.

    ``forward(x [N, C, H, W]) -> logits [N, num_classes]``; no task labels.

    :param backbone: E0 with a ``feature_dim`` attribute; copied, not changed.
    :param num_classes: output units of the head.
    """

    def __init__(self, backbone: nn.Module, num_classes: int):
        super().__init__()
        self.backbone = _trainable_copy(backbone)
        self.head = nn.Linear(backbone.feature_dim, num_classes)

    def forward(self, x):
        return self.head(self.backbone(x))


def make_model_per_task(backbone: nn.Module):
    """A ``MultiTaskModule`` with a fresh trainable copy of ``backbone`` + head per task.

    ``initial_backbone`` (E0, frozen) is kept so that every new task starts from it;
    it counts towards memory like every column. A column is created in training-mode
    adaptation for an unseen task label, sized to the experience's largest label + 1;
    the columns of earlier tasks are frozen. ``forward(x [N, C, H, W], task_labels [N])
    -> logits [N, max classes]``.

    :param backbone: E0 with a ``feature_dim`` attribute; copied, not changed.
    """
    from avalanche.models import MultiTaskModule

    class ModelPerTask(MultiTaskModule):
        def __init__(self):
            super().__init__()
            self.initial_backbone = copy.deepcopy(backbone).eval()
            for p in self.initial_backbone.parameters():
                p.requires_grad_(False)
            self.columns = nn.ModuleDict()

        def train(self, mode: bool = True):
            super().train(mode)
            self.initial_backbone.eval()
            return self

        def adaptation(self, experience):
            super().adaptation(experience)
            if not self.training:
                return
            n_classes = max(experience.classes_in_this_experience) + 1
            for task in experience.task_labels:
                key = str(int(task))
                if key not in self.columns:
                    column = nn.Sequential(
                        _trainable_copy(self.initial_backbone),
                        nn.Linear(self.initial_backbone.feature_dim, n_classes),
                    )
                    self.columns[key] = column.to(next(self.initial_backbone.parameters()).device)
            # Earlier columns are final: freeze them so they neither train nor drift.
            current = {str(int(t)) for t in experience.task_labels}
            for key, column in self.columns.items():
                for p in column.parameters():
                    p.requires_grad_(key in current)
                    if key not in current:
                        p.grad = None

        def forward_single_task(self, x, task_label):
            return self.columns[str(int(task_label))](x)

    return ModelPerTask()


def make_feature_pnn(backbone: nn.Module, hidden: int = 64, num_layers: int = 2):
    """Avalanche ``PNN`` (MLP columns, lateral adapters) on the features of a frozen E0.

    Avalanche's PNN flattens its input and has MLP columns only (and ``PNNStrategy``
    accepts only a ``PNN``), so this is a ``PNN`` subclass that first maps the images
    through a frozen copy of E0 (``[N, feature_dim]``): the same frozen backbone as SDR.
    One column per task is added by the PNN's own adaptation, which freezes the older
    ones. ``forward(x [N, C, H, W], task_labels [N]) -> logits``.

    :param backbone: E0 with a ``feature_dim`` attribute; copied, not changed.
    :param hidden: hidden units per layer of a column.
    :param num_layers: layers per column.
    """
    from avalanche.models import PNN

    class FeaturePNN(PNN):
        def __init__(self):
            super().__init__(num_layers=num_layers, in_features=backbone.feature_dim,
                             hidden_features_per_column=hidden)
            self.backbone = copy.deepcopy(backbone).eval()
            for p in self.backbone.parameters():
                p.requires_grad_(False)

        def train(self, mode: bool = True):
            super().train(mode)
            self.backbone.eval()
            return self

        def forward_single_task(self, x, task_label):
            with torch.no_grad():
                features = self.backbone(x)
            return super().forward_single_task(features, task_label)

    return FeaturePNN()


# --------------------------------------------------------------------- strategies


def training_arguments(model: nn.Module, *, epochs: int, lr: float, train_mb_size: int, eval_mb_size: int = 256,
                       evaluator=None, device: Any = "cpu") -> Dict[str, Any]:
    """The keyword arguments of an Avalanche supervised strategy shared by every
    baseline: ``model``, an Adam optimizer over its parameters (``lr``), cross-entropy,
    ``train_mb_size`` / ``eval_mb_size`` (images), ``train_epochs`` = ``epochs``,
    ``device`` and ``evaluator`` (an Avalanche ``EvaluationPlugin``; ``None``:
    Avalanche's behaviour for ``None``)."""
    return dict(
        model=model,
        optimizer=torch.optim.Adam(model.parameters(), lr=lr),
        criterion=nn.CrossEntropyLoss(),
        train_mb_size=train_mb_size,
        train_epochs=epochs,
        eval_mb_size=eval_mb_size,
        device=device,
        evaluator=evaluator,
    )


def ewc_strategy(backbone: nn.Module, *, epochs: int, lr: float = 1e-3, train_mb_size: int = 32,
                 eval_mb_size: int = 256, ewc_lambda: float = 100.0, decay_factor: float = 0.9,
                 evaluator=None, device: Any = "cpu"):
    """[Online EWC] Avalanche ``EWC(mode="online")`` on :func:`make_multi_head_net`.

    :param ewc_lambda: penalty weight (dimensionless).
    :param decay_factor: decay of older importances per experience, in [0, 1].

    The other parameters: see :func:`training_arguments`.
    """
    from avalanche.training import EWC

    return EWC(
        **training_arguments(make_multi_head_net(backbone), epochs=epochs, lr=lr, train_mb_size=train_mb_size,
                             eval_mb_size=eval_mb_size, evaluator=evaluator, device=device),
        ewc_lambda=ewc_lambda, mode="online", decay_factor=decay_factor,
    )


def replay_strategy(backbone: nn.Module, *, mem_size: int, epochs: int, lr: float = 1e-3,
                    train_mb_size: int = 32, eval_mb_size: int = 256, evaluator=None, device: Any = "cpu"):
    """[ER] Avalanche ``Replay`` (experience-balanced buffer) on :func:`make_multi_head_net`.

    :param mem_size: buffer size in images, e.g. :func:`replay_mem_size` of the stream.

    The other parameters: see :func:`training_arguments`.
    """
    from avalanche.training import Replay

    return Replay(
        **training_arguments(make_multi_head_net(backbone), epochs=epochs, lr=lr, train_mb_size=train_mb_size,
                             eval_mb_size=eval_mb_size, evaluator=evaluator, device=device),
        mem_size=mem_size,
    )


def new_head_strategy(backbone: nn.Module, *, epochs: int, lr: float = 1e-3, train_mb_size: int = 32,
                      eval_mb_size: int = 256, evaluator=None, device: Any = "cpu"):
    """[New-Head] Avalanche ``Naive`` on :func:`make_multi_head_net`: one shared backbone
    trained on every task, one head per task. Parameters: see :func:`training_arguments`."""
    from avalanche.training import Naive

    return Naive(**training_arguments(make_multi_head_net(backbone), epochs=epochs, lr=lr,
                                      train_mb_size=train_mb_size, eval_mb_size=eval_mb_size,
                                      evaluator=evaluator, device=device))


def finetune_strategy(backbone: nn.Module, *, num_classes: int, epochs: int, lr: float = 1e-3,
                      train_mb_size: int = 32, eval_mb_size: int = 256, evaluator=None, device: Any = "cpu"):
    """[Finetune] Avalanche ``Naive`` on :class:`SingleHeadNet`: one shared backbone and
    ONE shared head fine-tuned on every task in turn (no task-specific parameter).

    :param num_classes: output units of the shared head, e.g. :func:`max_classes`.

    The other parameters: see :func:`training_arguments`.
    """
    from avalanche.training import Naive

    return Naive(**training_arguments(SingleHeadNet(backbone, num_classes), epochs=epochs, lr=lr,
                                      train_mb_size=train_mb_size, eval_mb_size=eval_mb_size,
                                      evaluator=evaluator, device=device))


def single_model_strategy(backbone: nn.Module, *, epochs: int, lr: float = 1e-3, train_mb_size: int = 32,
                          eval_mb_size: int = 256, evaluator=None, device: Any = "cpu"):
    """[Single Model per task] Avalanche ``Naive`` on :func:`make_model_per_task`.
    Parameters: see :func:`training_arguments`."""
    from avalanche.training import Naive

    return Naive(**training_arguments(make_model_per_task(backbone), epochs=epochs, lr=lr,
                                      train_mb_size=train_mb_size, eval_mb_size=eval_mb_size,
                                      evaluator=evaluator, device=device))


def pnn_strategy(backbone: nn.Module, *, epochs: int, lr: float = 1e-3, train_mb_size: int = 32,
                 eval_mb_size: int = 256, evaluator=None, device: Any = "cpu"):
    """[PNN] Avalanche ``PNNStrategy`` on :func:`make_feature_pnn` (frozen E0 + MLP
    columns, default sizes). Parameters: see :func:`training_arguments`."""
    from avalanche.training import PNNStrategy

    return PNNStrategy(**training_arguments(make_feature_pnn(backbone), epochs=epochs, lr=lr,
                                            train_mb_size=train_mb_size, eval_mb_size=eval_mb_size,
                                            evaluator=evaluator, device=device))


def generative_replay_strategy(backbone: nn.Module, *, num_classes: int, image_shape: Tuple[int, int, int],
                               epochs: int, lr: float = 1e-3, train_mb_size: int = 32, eval_mb_size: int = 256,
                               evaluator=None, device: Any = "cpu"):
    """[DGR] Avalanche ``GenerativeReplay`` on :class:`SingleHeadNet`.

    Avalanche's generative replay is task-free: replayed images are labelled by the
    previous solver's argmax and given the current task label, and its solver is
    called without task labels, so it runs on the one-head network (as Finetune).
    The generator is Avalanche's ``MlpVAE`` (its default, ``nhid=2``) sized for the
    stream's images and trained by Avalanche's ``VAETraining`` with the default's
    settings (Adam lr 0.01, weight decay 1e-4) for ``epochs`` epochs, mini-batch
    ``train_mb_size``.

    :param num_classes: output units of the shared head, e.g. :func:`max_classes`.
    :param image_shape: ``(C, H, W)`` of the stream's images.

    The other parameters: see :func:`training_arguments`.
    """
    from avalanche.models import MlpVAE
    from avalanche.models.generator import VAE_loss
    from avalanche.training import GenerativeReplay, VAETraining
    from avalanche.training.plugins import GenerativeReplayPlugin

    generator = MlpVAE(tuple(image_shape), nhid=2, device=device)
    generator_strategy = VAETraining(
        model=generator,
        optimizer=torch.optim.Adam([p for p in generator.parameters() if p.requires_grad],
                                   lr=0.01, weight_decay=1e-4),
        criterion=VAE_loss, train_mb_size=train_mb_size, train_epochs=epochs,
        eval_mb_size=eval_mb_size, device=device, plugins=[GenerativeReplayPlugin()],
        evaluator=None,
    )
    model = SingleHeadNet(backbone, num_classes)
    return GenerativeReplay(**training_arguments(model, epochs=epochs, lr=lr, train_mb_size=train_mb_size,
                                                 eval_mb_size=eval_mb_size, evaluator=evaluator, device=device),
                            generator_strategy=generator_strategy)


__all__ = [
    "BASELINE_SETTINGS",
    "BaselineSettings",
    "SingleHeadNet",
    "ewc_strategy",
    "finetune_strategy",
    "generative_replay_strategy",
    "make_feature_pnn",
    "make_model_per_task",
    "make_multi_head_net",
    "max_classes",
    "new_head_strategy",
    "pnn_strategy",
    "replay_mem_size",
    "replay_strategy",
    "single_model_strategy",
    "training_arguments",
]
