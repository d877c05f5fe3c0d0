"""The methods of the Table 2 harness: one builder per row, all on the same stream.

Every builder has the signature ``build(backbone, benchmark, stream, preset, *,
evaluator, device) -> strategy`` and returns an Avalanche strategy ready for
``strategy.train(experience)`` / ``strategy.eval(stream)``. ``backbone`` is the
pretrained E0 (a ``small_cnn_backbone`` trained on the warm-start tasks' training
data, DESIGN.md option (b)), the same weights for every method of a seed; builders
copy it, so one E0 can serve several builders.

Rows (paper Table 2 names in brackets):

- ``sdr`` [SDR (EFT for E)]: :class:`~avalanche_sdr.SDRStrategy`, agreement rule,
  an independent ConvVAE per unique entry, E0 frozen.
- ``sdr_eft_g`` [SDR (EFT for E and G)]: the same strategy, but every unique entry's
  generator is a set of EFT adapters (a=8, b=16) on ONE shared base ``ConvVAE``
  (latent and width as the stream's SDR VAEs), pretrained on the warm-start tasks'
  training inputs (``pretrain_vae``, ``preset.base_vae_epochs`` epochs, Adam lr 2e-3,
  batch 32) inside the builder, so its time counts in the run's wall time; the base
  VAE counts towards memory.
- ``optimal`` [Optimal (EFT for E)]: the same strategy and repository, but the
  decision comes from ground truth: a task reuses the entry created by the first
  earlier task of its group, else it is new. The ground truth (``stream_groups``)
  is handed to :class:`OracleDetector` by the harness; the strategy still never
  reads the experiences' ``group`` / ``split`` attributes.
- ``single_model`` [Single Model per task]: ``Naive`` on :class:`ModelPerTask`, a
  fresh trainable copy of E0 plus a head for every task. Memory counts every copy
  and the kept E0 (needed to start the next task's copy).
- ``new_head`` [New-Head]: ``Naive`` on :class:`MultiHeadNet`, one shared trainable
  backbone (initialised from E0) trained on every task, one new head per task
  (Avalanche ``MultiHeadClassifier``).
- ``finetune`` [Finetune]: ``Naive`` on :class:`SingleHeadNet`, one shared backbone
  and ONE shared linear head over the largest task's classes, fine-tuned on every
  task in turn. Labels are local (0..c-1) in every task, so each task overwrites
  the meaning of the same output units; evaluation still feeds each task's data,
  but there is no task-specific parameter. This is the distinction from
  ``new_head``, which keeps a head per task.
- ``ewc`` [Online EWC]: Avalanche ``EWC(mode="online")`` on :class:`MultiHeadNet`.
- ``replay`` [ER]: Avalanche ``Replay`` on :class:`MultiHeadNet` with
  ``mem_size = 10 x`` the number of (task, class) pairs of the whole stream: its
  experience-balanced buffer holds 10 exemplars per class after the last task
  (more per class earlier in the stream).

All baselines train with Adam (``preset.baseline_lr``) for ``preset.baseline_epochs``
epochs per task, mini-batch ``preset.train_mb_size``; SDR rows use ``preset.sdr``.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence

import torch
from torch import nn

# --------------------------------------------------------------------- settings


@dataclass(frozen=True)
class StreamSpec:
    """How to build one stream and the models sized for it.

    :param name: harness name (``digits``, ``fashion10``, ``fashion50``).
    :param label: human-readable stream name for tables.
    :param factory: ``factory(seed) -> MixedSimilarityBenchmark``.
    :param in_channels: image channels.
    :param image_size: image side in pixels.
    :param latent_dim: SDR VAE latent size.
    :param vae_width: SDR VAE base width.
    """

    name: str
    label: str
    factory: Callable[[int], Any]
    in_channels: int
    image_size: int
    latent_dim: int
    vae_width: int


def _digits(seed: int):
    from avalanche_sdr.benchmarks import MixedDigits

    return MixedDigits(seed=seed)


def _fashion(n_splits: int) -> Callable[[int], Any]:
    def factory(seed: int):
        from avalanche_sdr.benchmarks import MixedFashionMNIST

        return MixedFashionMNIST(n_splits=n_splits, seed=seed)

    return factory


STREAMS: Dict[str, StreamSpec] = {
    "digits": StreamSpec("digits", "MixedDigits (10 tasks)", _digits, 1, 8, 8, 16),
    "fashion10": StreamSpec("fashion10", "MixedFashionMNIST (10 tasks)", _fashion(2), 1, 28, 16, 32),
    "fashion50": StreamSpec("fashion50", "MixedFashionMNIST (50 tasks)", _fashion(10), 1, 28, 16, 32),
}


@dataclass(frozen=True)
class Preset:
    """Training budget of every method.

    :param name: preset name.
    :param pretrain_epochs: epochs of E0 pretraining on the warm-start tasks.
    :param sdr: ``SDRStrategy`` keyword settings (both SDR rows).
    :param elbo_samples: Monte-Carlo samples per ELBO in SDR detection.
    :param baseline_epochs: epochs per task of every baseline.
    :param baseline_lr: Adam learning rate of every baseline.
    :param train_mb_size: baseline training mini-batch size.
    :param eval_mb_size: evaluation mini-batch size (all methods).
    :param ewc_lambda: online-EWC penalty weight.
    :param ewc_decay: online-EWC decay factor of older importances.
    :param replay_per_class: exemplars per (task, class) pair kept by ER.
    :param base_vae_epochs: epochs of the shared base VAE's pretraining (``sdr_eft_g``).
    """

    name: str
    pretrain_epochs: int
    sdr: Dict[str, Any]
    elbo_samples: int
    baseline_epochs: int
    baseline_lr: float
    train_mb_size: int
    eval_mb_size: int = 256
    ewc_lambda: float = 100.0
    ewc_decay: float = 0.9
    replay_per_class: int = 10
    base_vae_epochs: int = 20


def _presets() -> Dict[str, Preset]:
    from avalanche_sdr.training.presets import CPU_SETTINGS, PAPER_SETTINGS

    return {
        # Everything (8 methods, 1 seed, digits) in a few minutes on 2 CPU cores.
        "smoke": Preset(
            "smoke", pretrain_epochs=5,
            sdr=dict(CPU_SETTINGS, new_task_epochs=3, lr_milestones=(2,), reuse_epochs=5,
                     reuse_lr=0.01, vae_epochs=10, vae_patience=3),
            elbo_samples=4, baseline_epochs=3, baseline_lr=1e-3, train_mb_size=32, base_vae_epochs=10,
        ),
        # CPU_SETTINGS, with the quickstart's head-only budget for tiny tasks.
        "cpu": Preset(
            "cpu", pretrain_epochs=20,
            sdr=dict(CPU_SETTINGS, reuse_epochs=10, reuse_lr=0.01, vae_epochs=40),
            elbo_samples=8, baseline_epochs=10, baseline_lr=1e-3, train_mb_size=32, base_vae_epochs=40,
        ),
        # The paper's epochs (supplementary §A.1); meant for a GPU.
        "paper": Preset(
            "paper", pretrain_epochs=20, sdr=dict(PAPER_SETTINGS),
            elbo_samples=8, baseline_epochs=100, baseline_lr=1e-3, train_mb_size=128, base_vae_epochs=100,
        ),
    }


PRESETS: Dict[str, Preset] = _presets()


# --------------------------------------------------------------------- models


def _trainable_copy(backbone: nn.Module) -> nn.Module:
    clone = copy.deepcopy(backbone)
    for p in clone.parameters():
        p.requires_grad_(True)
    return clone.train()


def _multitask_module():
    from avalanche.models import MultiTaskModule

    return MultiTaskModule


def _max_classes(benchmark) -> int:
    return max(len(exp.classes_in_this_experience) for exp in benchmark.train_stream)


def make_multi_head_net(backbone: nn.Module, initial_out_features: int = 2):
    """Shared trainable copy of ``backbone`` + Avalanche ``MultiHeadClassifier``.

    ``forward(x [N,C,H,W], task_labels [N]) -> logits [N, max classes]``.
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

    ``forward(x [N,C,H,W]) -> logits [N, num_classes]``; no task labels.
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
    adaptation for an unseen task label, sized to the experience's largest label + 1.
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


# --------------------------------------------------------------------- oracle


def oracle_choice(task: int, task_groups: Sequence[int], entry_creator: Dict[int, int]) -> Optional[int]:
    """The entry an oracle reuses for ``task``, or ``None`` (new).

    :param task: task label (its position in the stream).
    :param task_groups: ground-truth group of every task label (``stream_groups``).
    :param entry_creator: repository map entry -> creating task.
    :return: the entry created by the first earlier task of the same group, if any.
    """
    group = task_groups[task]
    for entry in sorted(entry_creator, key=lambda e: entry_creator[e]):
        creator = entry_creator[entry]
        if creator != task and task_groups[creator] == group:
            return entry
    return None


class OracleDetector:
    """Drop-in for :class:`~avalanche_sdr.detection.SimilarTaskDetector` deciding from
    ground truth handed over by the harness (never from the experience).

    :param task_groups: ground-truth group of every task label (``stream_groups``).
    """

    rule = "oracle"

    def __init__(self, task_groups: Sequence[int]):
        self.task_groups = [int(g) for g in task_groups]

    def detect(self, model, task: int, x, y, num_classes: int):
        """Same contract as ``SimilarTaskDetector.detect``; scores are left empty."""
        from avalanche_sdr.detection.decision import DetectionRecord

        entries = model.entries
        reused = oracle_choice(int(task), self.task_groups, dict(model.entry_creator))
        return DetectionRecord(
            task=int(task),
            decision="new" if reused is None else "reuse",
            entry=-1 if reused is None else reused,
            reused_entry=reused,
            candidate_entries=list(entries),
            candidate_tasks=[model.entry_creator[e] for e in entries],
            rule=self.rule,
        )


# --------------------------------------------------------------------- builders


def _sdr_strategy(backbone, stream: StreamSpec, preset: Preset, evaluator, device, base_vae=None):
    from avalanche_sdr import SDRStrategy, build_sdr_model

    model = build_sdr_model(
        copy.deepcopy(backbone), in_channels=stream.in_channels, image_size=stream.image_size,
        a=8, b=16, generator="independent" if base_vae is None else "eft", base_vae=base_vae,
        latent_dim=stream.latent_dim, vae_width=stream.vae_width,
    )
    return SDRStrategy(
        model=model, **preset.sdr, decision="agreement", elbo_samples=preset.elbo_samples,
        evaluator=evaluator, device=device, verbose=False,
    )


def build_sdr(backbone, benchmark, stream, preset, *, evaluator, device):
    """SDR (EFT for E): agreement rule, independent VAEs."""
    return _sdr_strategy(backbone, stream, preset, evaluator, device)


def build_sdr_eft_g(backbone, benchmark, stream, preset, *, evaluator, device):
    """SDR (EFT for E and G): agreement rule, EFT adapters on a base VAE pretrained
    on the warm-start tasks' training inputs."""
    from avalanche_sdr.models import ConvVAE
    from avalanche_sdr.training import pretrain_vae

    warm_start = [benchmark.train_stream[i] for i in range(benchmark.n_warm_start)]
    base_vae = pretrain_vae(
        ConvVAE(stream.in_channels, stream.image_size, latent_dim=stream.latent_dim, width=stream.vae_width),
        warm_start, epochs=preset.base_vae_epochs, lr=2e-3, batch_size=32, device=device, verbose=False,
    )
    return _sdr_strategy(backbone, stream, preset, evaluator, device, base_vae=base_vae)


def build_optimal(backbone, benchmark, stream, preset, *, evaluator, device):
    """Optimal (EFT for E): SDR with ground-truth decisions from ``benchmark.stream_groups``."""
    strategy = _sdr_strategy(backbone, stream, preset, evaluator, device)
    strategy.sdr.detector = OracleDetector(benchmark.stream_groups)
    return strategy


def _baseline_kwargs(model, preset: Preset, evaluator, device) -> Dict[str, Any]:
    return dict(
        model=model,
        optimizer=torch.optim.Adam(model.parameters(), lr=preset.baseline_lr),
        criterion=nn.CrossEntropyLoss(),
        train_mb_size=preset.train_mb_size,
        train_epochs=preset.baseline_epochs,
        eval_mb_size=preset.eval_mb_size,
        device=device,
        evaluator=evaluator,
    )


def build_single_model(backbone, benchmark, stream, preset, *, evaluator, device):
    """Single Model per task: Naive on a fresh copy of E0 + head per task."""
    from avalanche.training import Naive

    return Naive(**_baseline_kwargs(make_model_per_task(backbone), preset, evaluator, device))


def build_new_head(backbone, benchmark, stream, preset, *, evaluator, device):
    """New-Head: Naive, shared backbone trained on all tasks, one head per task."""
    from avalanche.training import Naive

    return Naive(**_baseline_kwargs(make_multi_head_net(backbone), preset, evaluator, device))


def build_finetune(backbone, benchmark, stream, preset, *, evaluator, device):
    """Finetune: Naive, shared backbone and one shared head over the max classes."""
    from avalanche.training import Naive

    model = SingleHeadNet(backbone, _max_classes(benchmark))
    return Naive(**_baseline_kwargs(model, preset, evaluator, device))


def build_ewc(backbone, benchmark, stream, preset, *, evaluator, device):
    """Online EWC on the multi-head network."""
    from avalanche.training import EWC

    return EWC(
        **_baseline_kwargs(make_multi_head_net(backbone), preset, evaluator, device),
        ewc_lambda=preset.ewc_lambda, mode="online", decay_factor=preset.ewc_decay,
    )


def replay_mem_size(benchmark, per_class: int) -> int:
    """``per_class`` x the number of (task, class) pairs over the whole stream."""
    return per_class * sum(len(exp.classes_in_this_experience) for exp in benchmark.train_stream)


def build_replay(backbone, benchmark, stream, preset, *, evaluator, device):
    """ER: Avalanche Replay (experience-balanced buffer) on the multi-head network."""
    from avalanche.training import Replay

    return Replay(
        **_baseline_kwargs(make_multi_head_net(backbone), preset, evaluator, device),
        mem_size=replay_mem_size(benchmark, preset.replay_per_class),
    )


@dataclass(frozen=True)
class Method:
    """One row of the table.

    :param name: command-line name.
    :param label: row label (the paper's name).
    :param build: the builder.
    :param is_sdr: an :class:`SDRStrategy` row (has detection outcomes).
    """

    name: str
    label: str
    build: Callable[..., Any]
    is_sdr: bool = False


METHODS: Dict[str, Method] = {
    m.name: m
    for m in (
        Method("optimal", "Optimal (EFT for E)", build_optimal, True),
        Method("single_model", "Single Model per task", build_single_model),
        Method("finetune", "Finetune", build_finetune),
        Method("new_head", "New-Head", build_new_head),
        Method("replay", "ER", build_replay),
        Method("ewc", "Online EWC", build_ewc),
        Method("sdr", "SDR (EFT for E)", build_sdr, True),
        Method("sdr_eft_g", "SDR (EFT for E and G)", build_sdr_eft_g, True),
    )
}
"""Rows in the paper's order."""

__all__ = [
    "METHODS", "PRESETS", "STREAMS", "Method", "OracleDetector", "Preset", "SingleHeadNet",
    "StreamSpec", "make_model_per_task", "make_multi_head_net", "oracle_choice", "replay_mem_size",
]
