"""The continual-learning baselines SDR is compared with, built from Avalanche.

Every builder copies the same pretrained E0 (``backbone``: images float32
``[N, C, H, W]`` to features ``[N, backbone.feature_dim]``) without changing it and
returns an Avalanche strategy trained with Adam (``lr``, ``epochs`` per experience;
the presets' budgets are :data:`BASELINE_SETTINGS`). The paper's Table 2 rows:
:func:`ewc_strategy` [Online EWC], :func:`replay_strategy` [ER],
:func:`new_head_strategy` [New-Head], :func:`finetune_strategy` [Finetune],
:func:`single_model_strategy` [Single Model per task], :func:`pnn_strategy` [PNN],
:func:`generative_replay_strategy` [DGR], :func:`hat_strategy` [HAT]; class-incremental
ones: :func:`class_incremental_strategy`. Why: every method is compared on the same
E0, budget and memory rule, with Avalanche's own classes wherever Avalanche has the
method. Importing this module does not import Avalanche.

Models, options and the class-incremental baselines: docs/method.rst, section "The
baselines: models, strategies and budgets".
"""
from __future__ import annotations

import copy
from dataclasses import asdict, dataclass
from typing import Any, Dict, Optional, Sequence, Tuple

import torch
from torch import nn

from avalanche_sdr._batching import eval_batch_size
from avalanche_sdr.baseline_arguments import (HAT_C, HAT_EMBEDDING_LR, HAT_S_MAX, KLDA_DIM, KLDA_GAMMA, KLDA_SHRINKAGE,
                                              RANPAC_DIM, RANPAC_RIDGE, SLDA_SHRINKAGE, training_arguments)

# --------------------------------------------------------------------- settings


@dataclass(frozen=True)
class BaselineSettings:
    """Training budget of the baselines.

    :param epochs: epochs per experience.
    :param lr: Adam learning rate.
    :param train_mb_size: training mini-batch size (images).
    :param eval_mb_size: evaluation mini-batch size (images); ``None``: chosen for the device
        (:func:`~avalanche_sdr._batching.eval_batch_size`).
    :param ewc_lambda: online-EWC penalty weight (dimensionless).
    :param ewc_decay: online-EWC decay factor of older importances, in [0, 1].
    :param replay_per_class: ER exemplars per (task, class) pair of the whole stream
        (see :func:`replay_mem_size`).
    :param replay_mem_size: ER buffer size in images; ``None`` (default): sized from
        ``replay_per_class``. Set by the harness's equal-memory rows
        (:func:`size_replay_buffer`).
    :param dgr_latent_dim: latent size (``nhid``) of DGR's ``MlpVAE`` generator, its size
        knob (see :func:`generative_replay_strategy`); 2 is ``GenerativeReplay``'s default.
    :param hat_s_max: HAT's final gate scale (> 1; :data:`HAT_S_MAX`, the paper's).
    :param hat_c: HAT's attention-regulariser weight (>= 0; :data:`HAT_C`, the paper's).
    :param hat_embedding_lr: learning rate of HAT's SGD step on its task embeddings
        (:data:`HAT_EMBEDDING_LR`, the paper's); ``None``: the embeddings are trained by
        the Adam of the weights (lr ``lr``).
    :param slda_shrinkage: ``slda``'s covariance shrinkage, in (0, 1]
        (:func:`avalanche_sdr.closed_form.slda_strategy`; default Avalanche's).
    :param ranpac_dim: ``ranpac``'s random projection size M
        (:func:`avalanche_sdr.closed_form.ranpac_strategy`).
    :param ranpac_ridge: ``ranpac``'s ridge, a multiple of ``trace(G) / M``.
    :param klda_dim: ``klda``'s number of random Fourier features
        (:func:`avalanche_sdr.closed_form.klda_strategy`).
    :param klda_gamma: ``klda``'s kernel width, a multiple of scikit-learn's ``gamma="scale"``.
    :param klda_shrinkage: ``klda``'s covariance shrinkage, in [0, 1].
    """

    epochs: int
    lr: float = 1e-3
    train_mb_size: int = 32
    eval_mb_size: Optional[int] = None
    ewc_lambda: float = 100.0
    ewc_decay: float = 0.9
    replay_per_class: int = 10
    replay_mem_size: Optional[int] = None
    dgr_latent_dim: int = 2
    hat_s_max: float = HAT_S_MAX
    hat_c: float = HAT_C
    hat_embedding_lr: Optional[float] = HAT_EMBEDDING_LR
    slda_shrinkage: float = SLDA_SHRINKAGE
    ranpac_dim: int = RANPAC_DIM
    ranpac_ridge: float = RANPAC_RIDGE
    klda_dim: int = KLDA_DIM
    klda_gamma: float = KLDA_GAMMA
    klda_shrinkage: float = KLDA_SHRINKAGE

    def training(self) -> Dict[str, Any]:
        """The keyword arguments every strategy builder takes: ``epochs``, ``lr``,
        ``train_mb_size``, ``eval_mb_size``."""
        return dict(epochs=self.epochs, lr=self.lr, train_mb_size=self.train_mb_size,
                    eval_mb_size=self.eval_mb_size)

    def eval_batch_size(self, device: Any = None) -> int:
        """``eval_mb_size``, or for ``None`` the batch size chosen for ``device``
        (:func:`~avalanche_sdr._batching.eval_batch_size`), for an Avalanche strategy built
        directly (``eval_mb_size=settings.eval_batch_size(device)``)."""
        return eval_batch_size(device, self.eval_mb_size, "eval_mb_size")

    def ewc(self) -> Dict[str, Any]:
        """The EWC keyword arguments of :func:`ewc_strategy`: ``ewc_lambda`` and
        ``decay_factor`` (= ``ewc_decay``)."""
        return dict(ewc_lambda=self.ewc_lambda, decay_factor=self.ewc_decay)

    def buffer_size(self, train_stream: Sequence) -> int:
        """ER's buffer size in images on ``train_stream``: ``replay_mem_size`` when set,
        else :func:`replay_mem_size` of the stream with ``replay_per_class``."""
        if self.replay_mem_size is not None:
            return int(self.replay_mem_size)
        return replay_mem_size(train_stream, self.replay_per_class)


BASELINE_SETTINGS: Dict[str, BaselineSettings] = {
    "cpu": BaselineSettings(epochs=10, train_mb_size=32),
    "paper": BaselineSettings(epochs=100, train_mb_size=128),
}
"""Baseline budgets by preset name: ``"cpu"`` (10 epochs, mini-batch 32) and
``"paper"`` (100 epochs, mini-batch 128, the paper's epochs; meant for a GPU); Adam lr
1e-3, online-EWC lambda 100 and decay 0.9, 10 ER exemplars per class in both."""


# --------------------------------------------------------------------- models


def _trainable_copy(backbone: nn.Module) -> nn.Module:
    """A deep copy of ``backbone`` with every parameter trainable, in training mode.

    :raises ValueError: ``backbone`` holds SDR's EFT layers (an SDR repository's
        encoder): a baseline starts from the plain E0.
    """
    from avalanche_sdr.models.eft import EFTConv2d, TaskBatchNorm2d

    wrapped = next((name for name, m in backbone.named_modules() if isinstance(m, (EFTConv2d, TaskBatchNorm2d))), None)
    if wrapped is not None:
        raise ValueError(f"backbone holds SDR's EFT layers ({wrapped}): it is an SDR repository's encoder, not E0; "
                         "pass the plain E0 (the module given to SDRStrategy.from_benchmark or build_sdr_model, "
                         "which they copy and never change)")
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


def experience_balanced_occupancy(mem_size: int, experience_sizes: Sequence[int]) -> int:
    """Images an Avalanche ``ExperienceBalancedBuffer(mem_size, adaptive_size=True)``
    (``Replay``'s default buffer) holds after the last of experiences of
    ``experience_sizes`` images: experience ``i`` keeps ``min(n_i, quota_i)``, the quotas
    being ``mem_size // k``, plus one for the first ``mem_size % k`` of the ``k``
    experiences (Avalanche's ``get_group_lengths``; quotas only shrink as experiences
    arrive, so the last ones decide)."""
    k = len(experience_sizes)
    if k == 0 or mem_size <= 0:
        return 0
    base, rem = divmod(int(mem_size), k)
    return sum(min(int(n), base + (1 if i < rem else 0)) for i, n in enumerate(experience_sizes))


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


def baseline_net(backbone: nn.Module, shared_head: bool = False, num_classes: Optional[int] = None) -> nn.Module:
    """The network of the EWC and ER baselines: :func:`make_multi_head_net` (one head per
    task label, this project's protocol) or, with ``shared_head``, :class:`SingleHeadNet`
    (ONE head of ``num_classes`` units over every task's local labels, the paper's
    protocol as inferred in docs/reproducing.rst, "The paper's protocol").

    :raises ValueError: ``shared_head`` without ``num_classes``.
    """
    if not shared_head:
        return make_multi_head_net(backbone)
    if num_classes is None:
        raise ValueError("shared_head=True needs num_classes (e.g. max_classes(train_stream))")
    return SingleHeadNet(backbone, num_classes)


def ewc_strategy(backbone: nn.Module, *, epochs: int, lr: float = 1e-3, train_mb_size: int = 32,
                 eval_mb_size: Optional[int] = None, ewc_lambda: float = 100.0, decay_factor: float = 0.9,
                 evaluator=None, device: Any = "cpu", shared_head: bool = False,
                 num_classes: Optional[int] = None):
    """[Online EWC] Avalanche ``EWC(mode="online")`` on :func:`make_multi_head_net`, or,
    with ``shared_head``, on :class:`SingleHeadNet` of ``num_classes`` (:func:`baseline_net`).

    :param ewc_lambda: penalty weight (dimensionless).
    :param decay_factor: decay of older importances per experience, in [0, 1].

    The other parameters: see :func:`training_arguments`.
    """
    from avalanche.training import EWC

    return EWC(
        **training_arguments(baseline_net(backbone, shared_head, num_classes), epochs=epochs, lr=lr,
                             train_mb_size=train_mb_size, eval_mb_size=eval_mb_size, evaluator=evaluator,
                             device=device),
        ewc_lambda=ewc_lambda, mode="online", decay_factor=decay_factor,
    )


def replay_strategy(backbone: nn.Module, *, mem_size: int, epochs: int, lr: float = 1e-3,
                    train_mb_size: int = 32, eval_mb_size: Optional[int] = None, evaluator=None, device: Any = "cpu",
                    shared_head: bool = False, num_classes: Optional[int] = None):
    """[ER] Avalanche ``Replay`` (experience-balanced buffer) on :func:`make_multi_head_net`,
    or, with ``shared_head``, on :class:`SingleHeadNet` of ``num_classes`` (:func:`baseline_net`).

    :param mem_size: buffer size in images, e.g. :func:`replay_mem_size` of the stream, or
        :func:`size_replay_buffer`'s for a memory target.

    The other parameters: see :func:`training_arguments`.
    """
    from avalanche.training import Replay

    return Replay(
        **training_arguments(baseline_net(backbone, shared_head, num_classes), epochs=epochs, lr=lr,
                             train_mb_size=train_mb_size, eval_mb_size=eval_mb_size, evaluator=evaluator,
                             device=device),
        mem_size=mem_size,
    )


@dataclass(frozen=True)
class ReplaySizing:
    """An ER buffer sized so that ER's memory meets a target (:func:`size_replay_buffer`).

    Bytes as :func:`avalanche_sdr.evaluation.repository_memory_bytes` counts them for
    ``Replay``: the model's parameters and buffers, plus every exemplar of the buffer.

    :param status: ``"sized"`` (``mem_size`` found), ``"infeasible"`` (the model alone,
        plus one exemplar, exceeds the target: no buffer size reaches it; ``mem_size`` is
        ``None``) or ``"capped"`` (even a buffer holding every image it can hold stays
        below 95 % of the target; ``mem_size`` is that buffer's).
    :param target_bytes: the memory to meet.
    :param model_bytes: ER's network after a head for every task of the stream.
    :param exemplar_bytes: one stored ``(image, label, task label)`` exemplar.
    :param mem_size: the buffer size (images) to give ``Replay``, or ``None``.
    :param buffer_images: images the buffer holds after the last task
        (:func:`experience_balanced_occupancy`).
    :param predicted_bytes: ``model_bytes + buffer_images * exemplar_bytes``.
    :param note: one sentence on the outcome, with the numbers.
    """

    status: str
    target_bytes: int
    model_bytes: int
    exemplar_bytes: int
    mem_size: Optional[int]
    buffer_images: int
    predicted_bytes: int
    note: str

    def as_dict(self) -> Dict[str, Any]:
        """The fields as a JSON-safe dict."""
        return asdict(self)


def size_replay_buffer(backbone: nn.Module, train_stream: Sequence, target_bytes: int, *,
                       shared_head: bool = False, num_classes: Optional[int] = None) -> ReplaySizing:
    """The largest ER buffer whose memory after the whole ``train_stream`` stays within
    ``target_bytes`` (e.g. SDR's memory on the same stream and seed).

    ER's memory after the stream is ``model_bytes + buffer_images * exemplar_bytes``:
    ``model_bytes`` is counted exactly on the network :func:`replay_strategy` builds
    (:func:`baseline_net`), adapted to every experience of the stream without training
    (so a multi-head net has its heads and masks); ``exemplar_bytes`` is one stored item
    of the stream's data set (image float32 bytes plus 8 bytes each for the class and task
    labels, as the memory counter counts an Avalanche buffer's items); ``buffer_images``
    is what Avalanche's experience-balanced buffer keeps of ``mem_size``
    (:func:`experience_balanced_occupancy`, less than ``mem_size`` when an experience has
    fewer images than its quota). ``mem_size`` is the largest with ``predicted_bytes <=
    target_bytes``, found by bisection (the occupancy grows with ``mem_size``).

    :param backbone: E0, as given to :func:`replay_strategy` (copied, not changed).
    :param train_stream: the stream's training experiences.
    :param target_bytes: the memory to meet, in bytes.
    :param shared_head: size for :class:`SingleHeadNet` (the paper's protocol).
    :param num_classes: its head size, with ``shared_head``.
    """
    from avalanche.models.dynamic_modules import avalanche_model_adaptation

    from avalanche_sdr.evaluation.memory import TensorByteCounter

    model = baseline_net(backbone, shared_head, num_classes).train()
    for experience in train_stream:
        avalanche_model_adaptation(model, experience)
    model_bytes = TensorByteCounter().add_module(model)
    exemplar_bytes = max(TensorByteCounter().add_exemplars([exp.dataset[0]]) for exp in train_stream)
    sizes = [len(exp.dataset) for exp in train_stream]
    target = int(target_bytes)
    budget = target - model_bytes
    if budget < exemplar_bytes:
        return ReplaySizing("infeasible", target, model_bytes, exemplar_bytes, None, 0, model_bytes,
                            f"the model alone takes {model_bytes} B (+ {exemplar_bytes} B per exemplar) "
                            f"against a target of {target} B: no buffer size meets it")
    full = len(sizes) * max(sizes)  # every experience's quota >= its size: the buffer is full
    images = budget // exemplar_bytes
    lo, hi = 0, full
    while lo < hi:  # the largest mem_size with occupancy <= images
        mid = (lo + hi + 1) // 2
        if experience_balanced_occupancy(mid, sizes) <= images:
            lo = mid
        else:
            hi = mid - 1
    mem_size = lo
    buffer_images = experience_balanced_occupancy(mem_size, sizes)
    predicted = model_bytes + buffer_images * exemplar_bytes
    status = "sized" if predicted >= 0.95 * target else "capped"
    note = (f"mem_size {mem_size}: {buffer_images} exemplars x {exemplar_bytes} B + model {model_bytes} B "
            f"= {predicted} B against a target of {target} B ({100 * (predicted / target - 1):+.2f} %)")
    if status == "capped":
        note += "; the stream's experiences cannot fill a larger buffer"
    return ReplaySizing(status, target, model_bytes, exemplar_bytes, mem_size, buffer_images, predicted, note)


def new_head_strategy(backbone: nn.Module, *, epochs: int, lr: float = 1e-3, train_mb_size: int = 32,
                      eval_mb_size: Optional[int] = None, evaluator=None, device: Any = "cpu"):
    """[New-Head] Avalanche ``Naive`` on :func:`make_multi_head_net`: one shared backbone
    trained on every task, one head per task. Parameters: see :func:`training_arguments`."""
    from avalanche.training import Naive

    return Naive(**training_arguments(make_multi_head_net(backbone), epochs=epochs, lr=lr,
                                      train_mb_size=train_mb_size, eval_mb_size=eval_mb_size,
                                      evaluator=evaluator, device=device))


def finetune_strategy(backbone: nn.Module, *, num_classes: int, epochs: int, lr: float = 1e-3,
                      train_mb_size: int = 32, eval_mb_size: Optional[int] = None, evaluator=None, device: Any = "cpu"):
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
                          eval_mb_size: Optional[int] = None, evaluator=None, device: Any = "cpu"):
    """[Single Model per task] Avalanche ``Naive`` on :func:`make_model_per_task`.
    Parameters: see :func:`training_arguments`."""
    from avalanche.training import Naive

    return Naive(**training_arguments(make_model_per_task(backbone), epochs=epochs, lr=lr,
                                      train_mb_size=train_mb_size, eval_mb_size=eval_mb_size,
                                      evaluator=evaluator, device=device))


def pnn_strategy(backbone: nn.Module, *, epochs: int, lr: float = 1e-3, train_mb_size: int = 32,
                 eval_mb_size: Optional[int] = None, evaluator=None, device: Any = "cpu"):
    """[PNN] Avalanche ``PNNStrategy`` on :func:`make_feature_pnn` (frozen E0 + MLP
    columns, default sizes). Parameters: see :func:`training_arguments`."""
    from avalanche.training import PNNStrategy

    return PNNStrategy(**training_arguments(make_feature_pnn(backbone), epochs=epochs, lr=lr,
                                            train_mb_size=train_mb_size, eval_mb_size=eval_mb_size,
                                            evaluator=evaluator, device=device))


def generative_replay_strategy(backbone: nn.Module, *, num_classes: int, image_shape: Tuple[int, int, int],
                               epochs: int, lr: float = 1e-3, train_mb_size: int = 32, eval_mb_size: Optional[int] = None,
                               latent_dim: int = 2, evaluator=None, device: Any = "cpu"):
    """[DGR] Avalanche ``GenerativeReplay`` on :class:`SingleHeadNet`.

    Avalanche's generative replay is task-free: replayed images are labelled by the
    previous solver's argmax and given the current task label, and its solver is
    called without task labels, so it runs on the one-head network (as Finetune).
    The generator is Avalanche's ``MlpVAE`` (latent size ``nhid=latent_dim``; 2 is
    ``GenerativeReplay``'s own default generator) sized for the stream's images and
    trained by Avalanche's ``VAETraining`` with the default's settings (Adam lr 0.01,
    weight decay 1e-4) for ``epochs`` epochs, mini-batch ``train_mb_size``.

    :param num_classes: output units of the shared head, e.g. :func:`max_classes`.
    :param image_shape: ``(C, H, W)`` of the stream's images.
    :param latent_dim: the generator's latent size, its one size knob (``MlpVAE``'s
        hidden layers are fixed by Avalanche).

    The other parameters: see :func:`training_arguments`.
    """
    from avalanche.models import MlpVAE
    from avalanche.models.generator import VAE_loss
    from avalanche.training import GenerativeReplay, VAETraining
    from avalanche.training.plugins import GenerativeReplayPlugin

    generator = MlpVAE(tuple(image_shape), nhid=latent_dim, device=device)
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


def hat_strategy(backbone: nn.Module, **options):
    """[HAT] Hard attention to the task (Serra et al., 2018) on a gated copy of E0 with one
    head per task: :func:`avalanche_sdr.hat.hat_strategy` (its docstring lists the keyword
    arguments: ``epochs``, ``lr``, ``s_max``, ``c``, ...; the module's, the deviations from
    the paper). Imported on call, so that importing this module does not import Avalanche."""
    from avalanche_sdr.hat import hat_strategy as build

    return build(backbone, **options)


# --------------------------------------------------------------------- class-incremental

_ORIGINAL_IDS_ADVICE = ("the class-incremental baselines need labels that are the dataset's original class ids: "
                        "build the benchmark with original_class_ids=True (e.g. MixedDigits(original_class_ids=True) "
                        "or mixed_similarity_benchmark(..., original_class_ids=True))")


def _experience_classes(experience) -> set:
    """The labels of an experience's data set (its ``targets``), or, for a data set without
    them, its ``classes_in_this_experience``."""
    uniques = getattr(getattr(experience.dataset, "targets", None), "uniques", None)
    if uniques is None:
        uniques = experience.classes_in_this_experience
    return {int(c) for c in uniques}


def _experience_group(experience) -> Optional[int]:
    """The experience's task family (``group`` of a mixed stream), or None where it has none
    or hides it."""
    try:
        group = experience.group
    except AttributeError:  # absent, or masked (Avalanche's MaskedAttributeError)
        return None
    return None if group is None else int(group)


def class_incremental_classes(train_stream: Sequence) -> int:
    """Output units of ONE shared head over the original class ids of ``train_stream``: its
    largest label + 1 (for a full mixed stream, the benchmark's ``n_classes_total``),
    after checking that its labels are original class ids, not labels local to each task.

    The labels are taken for local ones (and the check fails) when two experiences of
    different task families (their ``group`` attribute, as a mixed stream's experiences
    have) share a label, or two experiences share a label without having the same label
    set (with original ids, tasks of one group hold the same classes and tasks of
    different groups disjoint ones). Labels are read from each experience's data set
    ``targets``. A stream of one task family (or one experience) passes either way.

    :param train_stream: the training experiences (an Avalanche stream or a list).
    :raises ValueError: an empty stream, or labels local to the tasks (the message says
        to build the benchmark with ``original_class_ids=True``).
    """
    experiences = list(train_stream)
    if not experiences:
        raise ValueError("the class-incremental baselines need a non-empty train stream")
    classes = [_experience_classes(exp) for exp in experiences]
    groups = [_experience_group(exp) for exp in experiences]
    first: Dict[int, int] = {}  # label -> first experience holding it
    for i, labels in enumerate(classes):
        for label in sorted(labels):
            j = first.setdefault(label, i)
            if j == i:
                continue
            other_family = groups[i] is not None and groups[j] is not None and groups[i] != groups[j]
            if other_family or classes[i] != classes[j]:
                raise ValueError(
                    f"class id {label} is in experience {j} (classes {sorted(classes[j])}, group {groups[j]}) "
                    f"and in experience {i} (classes {sorted(classes[i])}, group {groups[i]}): the labels look "
                    f"local to each task; {_ORIGINAL_IDS_ADVICE}")
    return max(first) + 1


def class_incremental_ewc_strategy(backbone: nn.Module, train_stream: Sequence, **options):
    """[Online EWC, class-incremental] :func:`ewc_strategy` on :class:`SingleHeadNet` with
    one head over the original class ids of ``train_stream``
    (:func:`class_incremental_classes` units); task labels are ignored.

    :param backbone: E0 (copied, not changed).
    :param train_stream: the training experiences of a benchmark built with
        ``original_class_ids=True``; read to size the head and check the labels.
    :param options: the keyword arguments of :func:`ewc_strategy` (``epochs``, ``lr``,
        ``ewc_lambda``, ``decay_factor``, ``evaluator``, ``device``, ...) except
        ``shared_head`` and ``num_classes``.
    :raises ValueError: labels local to each task (see :func:`class_incremental_classes`).
    """
    return ewc_strategy(backbone, shared_head=True, num_classes=class_incremental_classes(train_stream), **options)


def class_incremental_replay_strategy(backbone: nn.Module, train_stream: Sequence, **options):
    """[ER, class-incremental] :func:`replay_strategy` (Avalanche ``Replay``,
    experience-balanced buffer of ``mem_size`` images) on :class:`SingleHeadNet` with one
    head over the original class ids of ``train_stream``; task labels are ignored. Size
    the buffer to a memory target with ``size_replay_buffer(backbone, train_stream,
    target, shared_head=True, num_classes=class_incremental_classes(train_stream))``.

    :param backbone: E0 (copied, not changed).
    :param train_stream: as for :func:`class_incremental_ewc_strategy`.
    :param options: the keyword arguments of :func:`replay_strategy` (``mem_size``,
        ``epochs``, ``lr``, ...) except ``shared_head`` and ``num_classes``.
    :raises ValueError: labels local to each task (see :func:`class_incremental_classes`).
    """
    return replay_strategy(backbone, shared_head=True, num_classes=class_incremental_classes(train_stream),
                           **options)


def joint_training_strategy(backbone: nn.Module, train_stream: Sequence, *, epochs: int, lr: float = 1e-3,
                            train_mb_size: int = 32, eval_mb_size: Optional[int] = None, evaluator=None,
                            device: Any = "cpu"):
    """[Joint] Avalanche ``JointTraining`` on :class:`SingleHeadNet` with one head over the
    original class ids of ``train_stream`` (:func:`class_incremental_classes` units): the
    non-continual upper bound, task labels ignored.

    Call ``strategy.train(train_stream)`` ONCE with the whole stream: ``JointTraining``
    concatenates the experiences and trains ``epochs`` epochs over their union (the same
    number of passes over every image as a sequential learner with ``epochs`` per
    experience) in plain shuffled mini-batches of ``train_mb_size`` images (a subclass of
    ``JointTraining`` whose train loader ignores task labels: Avalanche's own draws
    task-balanced mini-batches, which needs ``train_mb_size`` >= the number of tasks); a
    second ``train`` raises Avalanche's ``AlreadyTrainedError``. Memory
    (:func:`avalanche_sdr.evaluation.repository_memory_bytes`): the model only, as for
    ``Naive`` (the training data it would need to continue the stream is not counted).

    :param backbone: E0 (copied, not changed).
    :param train_stream: as for :func:`class_incremental_ewc_strategy`.

    The other parameters: see :func:`training_arguments`.
    :raises ValueError: labels local to each task (see :func:`class_incremental_classes`).
    """
    from avalanche.training import JointTraining
    from torch.utils.data import DataLoader

    class TaskFreeJointTraining(JointTraining):
        """``JointTraining`` drawing plain shuffled mini-batches from the union."""

        def make_train_dataloader(self, num_workers=0, shuffle=True, pin_memory=None, persistent_workers=False,
                                  drop_last=False, **kwargs):
            self.dataloader = DataLoader(self.adapted_dataset, **self._obtain_common_dataloader_parameters(
                batch_size=self.train_mb_size, num_workers=num_workers, shuffle=shuffle, pin_memory=pin_memory,
                persistent_workers=persistent_workers, drop_last=drop_last))

    model = SingleHeadNet(backbone, class_incremental_classes(train_stream))
    return TaskFreeJointTraining(**training_arguments(model, epochs=epochs, lr=lr, train_mb_size=train_mb_size,
                                                      eval_mb_size=eval_mb_size, evaluator=evaluator,
                                                      device=device))


CLASS_INCREMENTAL_BASELINES: Tuple[str, ...] = ("ewc", "replay", "joint")
"""Names of the class-incremental baselines :func:`class_incremental_strategy` builds."""


def class_incremental_strategy(name: str, backbone: nn.Module, train_stream: Sequence, settings: BaselineSettings,
                               *, evaluator=None, device: Any = "cpu"):
    """A class-incremental baseline with the budget of ``settings``: ``"ewc"``
    (:func:`class_incremental_ewc_strategy`, ``ewc_lambda`` / ``ewc_decay``),
    ``"replay"`` (:func:`class_incremental_replay_strategy`, buffer
    :meth:`BaselineSettings.buffer_size`) or ``"joint"`` (:func:`joint_training_strategy`);
    all with ``settings.training()``.

    :raises ValueError: an unknown ``name``, or labels local to each task.
    """
    common = dict(settings.training(), evaluator=evaluator, device=device)
    if name == "ewc":
        return class_incremental_ewc_strategy(backbone, train_stream, **common, **settings.ewc())
    if name == "replay":
        return class_incremental_replay_strategy(backbone, train_stream, mem_size=settings.buffer_size(train_stream),
                                                 **common)
    if name == "joint":
        return joint_training_strategy(backbone, train_stream, **common)
    raise ValueError(f"unknown class-incremental baseline {name!r}; expected one of {CLASS_INCREMENTAL_BASELINES}")


__all__ = [
    "BASELINE_SETTINGS",
    "CLASS_INCREMENTAL_BASELINES",
    "HAT_C",
    "HAT_EMBEDDING_LR",
    "HAT_S_MAX",
    "BaselineSettings",
    "ReplaySizing",
    "SingleHeadNet",
    "baseline_net",
    "class_incremental_classes",
    "class_incremental_ewc_strategy",
    "class_incremental_replay_strategy",
    "class_incremental_strategy",
    "ewc_strategy",
    "experience_balanced_occupancy",
    "finetune_strategy",
    "generative_replay_strategy",
    "hat_strategy",
    "joint_training_strategy",
    "make_feature_pnn",
    "make_model_per_task",
    "make_multi_head_net",
    "max_classes",
    "new_head_strategy",
    "pnn_strategy",
    "replay_mem_size",
    "replay_strategy",
    "single_model_strategy",
    "size_replay_buffer",
    "training_arguments",
]
