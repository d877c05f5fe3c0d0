"""Expert Gate's task relatedness as a detection rule on E0's features (baseline).

Expert Gate (Aljundi, Chakravarty & Tuytelaars, CVPR 2017) keeps one small
autoencoder per expert and calls a new task related to an old one when the old
task's autoencoder reconstructs the new data about as well as an autoencoder trained
on the new task itself. Here that relatedness (the formula of Avalanche's
``ExpertGateStrategy._task_relatedness``) decides whether a new task reuses a
repository entry of SDR (rule ``"expert_gate"``): the most related entry is reused
when its relatedness reaches ``threshold`` (default 0.85, Expert Gate's published
value); each entry keeps its autoencoder in the repository (counted, checkpointed).
Why by hand: Avalanche's ``ExpertGateStrategy`` is bound to ImageNet AlexNets, so
only its formula is reused, and SDR's repository plays the experts' role.

The steps and the stored tensors: docs/method.rst, section "Expert Gate's
relatedness as a detection rule, step by step".
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

import torch
from torch import Tensor

from avalanche_sdr._checks import check_int
from avalanche_sdr.detection.base import FeatureRuleDetector
from avalanche_sdr.detection.decision import DetectionRecord
from avalanche_sdr.models.task_data import TaskData

STD_FLOOR = 1e-6
"""Lower clamp of the per-feature std of an AE's input standardisation."""

ERROR_FLOOR = 1e-12
"""Lower clamp of ``Er_own`` in the relatedness (against a division by zero)."""

AE_STATE_KEYS = ("ae_mean", "ae_std", "ae_w1", "ae_b1", "ae_w2", "ae_b2")
"""Names of the detection-state tensors that make up an entry's autoencoder."""

_EVAL_CHUNK = 4096


@dataclass(frozen=True)
class ExpertGateSettings:
    """The settings of the Expert Gate rule.

    :param threshold: least relatedness for a reuse (0.85: Expert Gate's value).
    :param hidden: hidden units of each autoencoder (Expert Gate: 100).
    :param epochs: training epochs of each autoencoder.
    :param lr: Adam learning rate of the autoencoders.
    :param batch_size: mini-batch size of autoencoder training.
    :param class_count_filter: compare only with entries whose creating task has the
        new task's class count.
    :param seed: seed of the private generators (AE initialisation, shuffling); each
        task mixes its task id in.
    """

    threshold: float = 0.85
    hidden: int = 100
    epochs: int = 50
    lr: float = 1e-3
    batch_size: int = 64
    class_count_filter: bool = False
    seed: int = 0

    def __post_init__(self):
        if isinstance(self.threshold, bool) or not isinstance(self.threshold, (int, float)) \
                or not math.isfinite(self.threshold):
            raise ValueError(f"threshold must be a finite number, got {self.threshold!r}")
        for name in ("hidden", "epochs", "batch_size"):
            check_int(getattr(self, name), name)
        if isinstance(self.lr, bool) or not isinstance(self.lr, (int, float)) \
                or not math.isfinite(self.lr) or self.lr <= 0:
            raise ValueError(f"lr must be a finite number > 0, got {self.lr!r}")
        if not isinstance(self.class_count_filter, bool):
            raise ValueError(f"class_count_filter must be a bool, got {self.class_count_filter!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"seed must be a non-negative int, got {self.seed!r}")

    def to_dict(self) -> Dict[str, object]:
        """JSON-safe dict of the settings (``ExpertGateSettings(**d)`` rebuilds them)."""
        return dict(self.__dict__)


DEFAULT_EXPERT_GATE = ExpertGateSettings()
"""Expert Gate's published settings (threshold 0.85, 100 hidden units)."""


# ---------------------------------------------------------------------- autoencoder


def _task_generator(seed: int, task: int) -> torch.Generator:
    """Private generator of ``task``'s AE (initialisation, then shuffling)."""
    mixed = ((int(seed) * 1_000_003 + int(task)) * 7 + 5) % (2**63)
    return torch.Generator().manual_seed(mixed)


def _check_features(features: Tensor) -> Tensor:
    if not isinstance(features, Tensor) or features.dim() != 2 or features.shape[0] < 1 or features.shape[1] < 1:
        shape = tuple(features.shape) if isinstance(features, Tensor) else type(features).__name__
        raise ValueError(f"features must be a non-empty [n, D] tensor, got {shape}")
    features = features.detach().to("cpu", torch.float32)
    if not torch.isfinite(features).all():
        raise ValueError("E0 features of the task contain NaN or Inf; check the inputs and the backbone")
    return features


def _squash(features: Tensor, mean: Tensor, std: Tensor) -> Tensor:
    """``sigmoid((f - mean) / std)``: [n, D] float32 in (0, 1)."""
    return torch.sigmoid((features - mean) / std)


def _reconstruct(u: Tensor, w1: Tensor, b1: Tensor, w2: Tensor, b2: Tensor) -> Tensor:
    """The AE's output for squashed inputs ``u`` [n, D]: [n, D] in (0, 1)."""
    return torch.sigmoid(torch.relu(u @ w1.T + b1) @ w2.T + b2)


def train_autoencoder(features: Tensor, settings: ExpertGateSettings, task: int) -> Dict[str, Tensor]:
    """Train the AE of one task on its E0 features (module doc, steps 2-3).

    Deterministic for given ``(features, settings, task)``; the global torch RNG is
    neither read nor advanced.

    :param features: [n, D] E0 features of the task (any float dtype and device;
        finite).
    :param settings: the rule's settings (``hidden``, ``epochs``, ``lr``,
        ``batch_size``, ``seed``).
    :param task: task id, mixed into the private generator's seed.
    :return: the AE as CPU float32 tensors ``{"ae_mean": [D], "ae_std": [D],
        "ae_w1": [hidden, D], "ae_b1": [hidden], "ae_w2": [D, hidden], "ae_b2": [D]}``.
    """
    f = _check_features(features)
    n, d = f.shape
    h = settings.hidden
    mean = f.mean(0)
    std = f.std(0, correction=0).clamp_min(STD_FLOOR)
    u = _squash(f, mean, std)
    g = _task_generator(settings.seed, task)

    def uniform(shape, fan_in):  # nn.Linear's default init range, from g
        bound = 1.0 / math.sqrt(fan_in)
        return ((torch.rand(shape, generator=g) * 2 - 1) * bound).requires_grad_(True)

    params = [uniform((h, d), d), uniform((h,), d), uniform((d, h), h), uniform((d,), h)]
    optimizer = torch.optim.Adam(params, lr=settings.lr)
    with torch.enable_grad():
        for _ in range(settings.epochs):
            order = torch.randperm(n, generator=g)
            for i in range(0, n, settings.batch_size):
                batch = u[order[i : i + settings.batch_size]]
                loss = torch.mean((_reconstruct(batch, *params) - batch) ** 2)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
    w1, b1, w2, b2 = (p.detach().clone() for p in params)
    return {"ae_mean": mean, "ae_std": std, "ae_w1": w1, "ae_b1": b1, "ae_w2": w2, "ae_b2": b2}


@torch.no_grad()
def reconstruction_errors(ae: Dict[str, Tensor], features: Tensor) -> Tensor:
    """Per-sample squared reconstruction error, averaged over features, the input
    squashed with the AE's own mean and std.

    :param ae: an AE as returned by :func:`train_autoencoder` (any device).
    :param features: [n, D] E0 features.
    :return: [n] float64 on the CPU.
    """
    f = _check_features(features)
    ae = {k: ae[k].detach().to("cpu", torch.float32) for k in AE_STATE_KEYS}
    if ae["ae_mean"].shape[0] != f.shape[1]:
        raise ValueError(f"the autoencoder reads {ae['ae_mean'].shape[0]} features, got {f.shape[1]}")
    parts = []
    for i in range(0, f.shape[0], _EVAL_CHUNK):
        u = _squash(f[i : i + _EVAL_CHUNK], ae["ae_mean"], ae["ae_std"])
        out = _reconstruct(u, ae["ae_w1"], ae["ae_b1"], ae["ae_w2"], ae["ae_b2"])
        parts.append(((out - u) ** 2).double().sum(1))
    return torch.cat(parts) / f.shape[1]


def reconstruction_error(ae: Dict[str, Tensor], features: Tensor) -> float:
    """``Er(AE, f)``: mean over samples and features of the squared reconstruction
    error (:func:`reconstruction_errors` averaged over the samples).

    :param ae: an AE as returned by :func:`train_autoencoder` (any device).
    :param features: [n, D] E0 features.
    """
    return float(reconstruction_errors(ae, features).mean())


def relatedness(error_candidate: float, error_own: float) -> float:
    """Expert Gate's ``1 - (Er_k - Er_own) / Er_own`` (``Er_own`` floored at 1e-12)."""
    own = max(float(error_own), ERROR_FLOOR)
    return 1.0 - (float(error_candidate) - own) / own


# ---------------------------------------------------------------------- detector


class ExpertGateDetector(FeatureRuleDetector):
    """Decision rule ``"expert_gate"``: reuse the most related entry when its
    relatedness reaches ``threshold`` (module doc).

    Same contract as :class:`~avalanche_sdr.detection.two_sample.TwoSampleDetector`:
    :meth:`detect` decides without changing the model; :meth:`remember` stores a new
    entry's AE (the one trained by the last :meth:`detect` of that task, or a fresh
    one for tasks that were not detected, e.g. warm-start tasks). Needs no generators.

    :param settings: :class:`ExpertGateSettings` (default :data:`DEFAULT_EXPERT_GATE`).
    :param batch_size: batch size of the E0 feature pass (see the base class).
    """

    rule = "expert_gate"
    settings_type = ExpertGateSettings

    def __init__(self, settings: ExpertGateSettings = DEFAULT_EXPERT_GATE, batch_size: Optional[int] = None):
        super().__init__(settings, batch_size)
        # (task, E0 features [n, D] float32 CPU, own AE) of the last detect
        self._last: Optional[Tuple[int, Tensor, Dict[str, Tensor]]] = None

    # -------------------------------------------------------------- features
    @torch.no_grad()
    def features(self, model, x: Tensor) -> Tensor:
        """E0 features of ``x`` ([n, C, H, W]): [n, D] float32 on the CPU."""
        return _check_features(model.batched_features(x, None, self.batch_size).float())

    # -------------------------------------------------------------- autoencoders
    def remember(self, model, entry: int, data: TaskData) -> None:
        """Store entry ``entry``'s AE, trained on its creating task.

        If the last :meth:`detect` was for this task, its own AE is stored as is;
        otherwise an AE is trained on E0's features of the task's images.
        """
        last = self._last
        if last is not None and last[0] == data.task:
            ae = last[2]
        else:
            ae = train_autoencoder(_check_features(data.e0_features(model, self.batch_size).float()), self.settings,
                                   data.task)
        model.set_detection_state(entry, ae)
        self._last = None

    @staticmethod
    def autoencoder(model, entry: int) -> Dict[str, Tensor]:
        """The AE stored for ``entry``.

        :raises RuntimeError: if the entry has none.
        """
        state = model.detection_state(entry)
        missing = [k for k in AE_STATE_KEYS if k not in state]
        if missing:
            raise RuntimeError(
                f"entry {entry} has no Expert Gate autoencoder (missing {missing}): the expert-gate "
                "rule must see every entry's creating task (build the strategy with "
                "detector='expert_gate' from the start)"
            )
        return {k: state[k] for k in AE_STATE_KEYS}

    # -------------------------------------------------------------- decision
    def detect(self, model, data: TaskData) -> DetectionRecord:
        """Score the task's relatedness to every candidate entry and decide (no model
        change; the own AE is kept for :meth:`remember`). The rule reads the images only,
        not the labels.

        :return: the record; ``p_value`` holds the relatedness per candidate.
        """
        start = time.perf_counter()
        s = self.settings
        task, num_classes = data.task, data.num_classes
        feats = _check_features(data.e0_features(model, self.batch_size).float())
        entries = self.candidates(model, num_classes)
        stored = [self.autoencoder(model, e) for e in entries]
        own = train_autoencoder(feats, s, task)
        self._last = (int(task), feats, own)
        error_own = reconstruction_error(own, feats)
        scores = [relatedness(reconstruction_error(ae, feats), error_own) for ae in stored]
        best = self.best_candidate(scores)
        reused = entries[best] if best is not None and scores[best] >= s.threshold else None
        return DetectionRecord.decided(
            model, task=task, entries=entries, reused=reused, rule=self.rule,
            detection_seconds=time.perf_counter() - start, p_value=scores, class_count_filter=s.class_count_filter,
        )

    score_name = "rel"

    def legend(self) -> List[str]:
        """The relatedness scores."""
        return [
            "    Tj:rel=..         Expert Gate relatedness of t to task j (from autoencoder errors;",
            "                      1 = as well reconstructed as by t's own autoencoder); rule: reuse",
            f"                      the most related entry if rel >= {self.settings.threshold:g}",
        ]

    def config(self) -> Dict[str, object]:
        """Everything that changes this detector's decisions (JSON-safe): the rule, the
        settings (``batch_size`` is the AE's mini-batch) and ``feature_batch_size``
        (the E0 feature pass)."""
        return dict(rule=self.rule, **self.settings.to_dict(), feature_batch_size=self.batch_size)


__all__ = [
    "AE_STATE_KEYS", "DEFAULT_EXPERT_GATE", "ERROR_FLOOR", "STD_FLOOR", "ExpertGateDetector",
    "ExpertGateSettings", "reconstruction_error", "reconstruction_errors", "relatedness", "train_autoencoder",
]
