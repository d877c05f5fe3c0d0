"""Frozen means computed once: a head-only experience trains its head on features
computed once, not once per epoch.

When an experience trains only a head (a head-only reuse, the paper's; or a task label
trained before whose entry is not updated), E0 and the entry are frozen and in eval
mode, so every epoch of Avalanche's loop would compute the same features again.
:class:`FrozenFeaturesPlugin` computes them once (eval mode, no grad, in dataset order),
and :class:`~avalanche_sdr.training.SDRStrategy` trains on an Avalanche dataset of
``(features, y, task)`` of the same length and order: Avalanche's loader draws the same
indices with the same RNG use, every hook runs, and the loss is the head's on the same
features (up to float rounding between batch sizes).

What a user's plugin sees during such an experience: every training hook, as before;
from ``before_training_exp`` to the end of the experience ``strategy.adapted_dataset``
holds the features dataset and ``strategy.mb_x`` holds features [B, D] float32 (not
images); ``after_train_dataset_adaptation`` still sees the images dataset;
``strategy.experience.dataset`` and ``strategy.model`` are unchanged; evaluation
(periodic too) is unaffected. The per-epoch path is kept, and the reason recorded
(:attr:`FrozenFeaturesPlugin.reason`), when the experience trains an entry, when its
training inputs are not fixed (a ``"train"`` transform, e.g. augmentation), or when a
plugin may read the training inputs (:func:`plugin_reads_inputs`). Hook by hook:
docs/plugins.rst, section "Head-only experiences train on features".
"""
from __future__ import annotations

from typing import Any, Optional

import torch
from avalanche.benchmarks.utils import DataAttribute
from avalanche.benchmarks.utils.classification_dataset import TaskAwareClassificationDataset
from avalanche.core import SupervisedPlugin
from avalanche.evaluation.metrics.mac import MACPluginMetric
from avalanche.training import plugins as avalanche_plugins
from avalanche.training.plugins.clock import Clock
from avalanche.training.templates.base_sgd import PeriodicEval
from torch.utils.data import TensorDataset

from avalanche_sdr._batching import check_batch_size
from avalanche_sdr.dataset_tensors import dataset_tensors
from avalanche_sdr.evaluation.class_incremental import ClassIncrementalEvalPlugin
from avalanche_sdr.training.checkpoint import SDRCheckpointPlugin
from avalanche_sdr.training.sdr_plugin import SDRFreezePlugin, SDRPlugin

USES_TRAINING_IMAGES = "uses_training_images"
"""Name of the attribute by which a plugin (or an evaluator's metric) says whether it
reads the training inputs: ``strategy.mb_x``, ``strategy.mbatch``,
``strategy.adapted_dataset`` or ``strategy.dataloader`` from ``before_training_exp`` on.
``False`` lets a head-only experience train on features; ``True``, or no attribute on a
plugin not in :data:`FEATURE_SAFE_PLUGINS`, keeps the per-epoch path."""

FEATURE_SAFE_PLUGINS = (
    SDRPlugin, SDRFreezePlugin, SDRCheckpointPlugin, ClassIncrementalEvalPlugin,
    Clock, PeriodicEval, avalanche_plugins.EWCPlugin, avalanche_plugins.MASPlugin,
    avalanche_plugins.SynapticIntelligencePlugin, avalanche_plugins.MIRPlugin,
    avalanche_plugins.EarlyStoppingPlugin,
)
"""Plugins that read no training input after the loader is built (Avalanche 0.6.0's
sources checked): they read parameters, the loss, ``mb_y``/``mb_output``, or
``strategy.experience.dataset`` through the model. ``ReplayPlugin`` (mixes its buffer
into ``strategy.dataloader``) and ``LwFPlugin`` (feeds ``mb_x`` to the previous model)
are not among them. An ``EvaluationPlugin`` is safe when its metrics are
(:func:`plugin_reads_inputs`)."""

INPUT_READING_METRICS = (MACPluginMetric,)
"""Avalanche metrics that feed ``strategy.mb_x`` to the model during training."""


def plugin_reads_inputs(plugin: Any) -> bool:
    """Whether ``plugin`` may read the training inputs (see :data:`USES_TRAINING_IMAGES`).

    Its own ``uses_training_images`` attribute wins; else a plugin of
    :data:`FEATURE_SAFE_PLUGINS` does not; an ``EvaluationPlugin`` does when one of its
    metrics does (a metric of :data:`INPUT_READING_METRICS`, or one from outside
    Avalanche and SDR without ``uses_training_images = False``); any other plugin is
    assumed to.
    """
    declared = getattr(plugin, USES_TRAINING_IMAGES, None)
    if declared is not None:
        return bool(declared)
    if isinstance(plugin, FEATURE_SAFE_PLUGINS):
        return False
    if isinstance(plugin, avalanche_plugins.EvaluationPlugin):
        return any(_metric_reads_inputs(metric) for metric in plugin.metrics)
    return True


def _metric_reads_inputs(metric: Any) -> bool:
    declared = getattr(metric, USES_TRAINING_IMAGES, None)
    if declared is not None:
        return bool(declared)
    if isinstance(metric, INPUT_READING_METRICS):
        return True
    return type(metric).__module__.split(".")[0] not in ("avalanche", "avalanche_sdr")


def fixed_inputs(dataset: Any) -> bool:
    """Whether reading ``dataset`` in its current transform group gives the same inputs
    every time: no transform in that group, frozen or not, at any level of an Avalanche
    dataset, and no ``transform``/``transforms`` on the datasets it wraps.

    :param dataset: an Avalanche dataset (``strategy.adapted_dataset``) or a dataset.
    """
    node = getattr(dataset, "_flat_data", dataset)
    for groups in (getattr(node, "_transform_groups", None), getattr(node, "_frozen_transform_groups", None)):
        if groups is not None and groups[groups.current_group] is not None:
            return False
    if any(getattr(node, name, None) is not None for name in ("transform", "target_transform", "transforms")):
        return False
    return all(fixed_inputs(child) for child in (getattr(node, "_datasets", None) or ()))


def features_dataset(features: torch.Tensor, y: torch.Tensor, t: torch.Tensor) -> TaskAwareClassificationDataset:
    """An Avalanche dataset of ``(features[i], y[i], t[i])`` with ``targets`` and
    ``targets_task_labels``, which Avalanche's task-balanced loader splits by task as it
    does the images dataset (same length and order: the same draws).

    :param features: [n, D] float32; ``y``, ``t``: [n] int64 labels and task labels.
    """
    return TaskAwareClassificationDataset(
        [TensorDataset(features, y, t)],
        data_attributes=[DataAttribute(y, "targets"), DataAttribute(t, "targets_task_labels")])


class FrozenFeaturesPlugin(SupervisedPlugin):
    """Trains a head-only experience on features computed once (module doc).

    :class:`~avalanche_sdr.training.SDRStrategy` builds it right after its
    :class:`~avalanche_sdr.training.sdr_plugin.SDRPlugin` (whose decision it reads) and
    calls :meth:`prepare` when it builds the training loader.

    :param sdr: the strategy's SDR plugin.
    :param enabled: ``False`` keeps the per-epoch path for every experience (for a
        comparison; results are the same up to float rounding).
    :param batch_size: images per forward pass of the feature computation; ``None``: chosen
        for the model's device (:func:`~avalanche_sdr._batching.eval_batch_size`).
    """

    uses_training_images = False  # it builds them

    def __init__(self, sdr: SDRPlugin, enabled: bool = True, batch_size: Optional[int] = None):
        super().__init__()
        if not isinstance(sdr, SDRPlugin):
            raise TypeError(f"sdr must be the strategy's SDRPlugin, got {type(sdr).__name__}")
        self.sdr = sdr
        self.enabled = bool(enabled)
        self.batch_size = check_batch_size(batch_size)
        self.active = False
        """Whether the experience being trained trains on features (``strategy.mb_x``
        holds features [B, D] float32)."""
        self.reason: Optional[str] = None
        """Why the last experience kept the per-epoch path (``None``: it trained on
        features, or has not started)."""
        self.feature_passes = 0
        """Feature computations done so far (one per experience trained on features)."""

    def before_train_dataset_adaptation(self, strategy, **kwargs):
        self.active = False
        self.reason = None

    def prepare(self, strategy) -> None:
        """Swap ``strategy.adapted_dataset`` for the features dataset when the experience
        trains only a head and nothing needs its images; else record :attr:`reason`.

        Called by the strategy after ``after_train_dataset_adaptation`` and before the
        training loader is built. The global RNG is left as it was (the read runs in a
        forked RNG), so the loader's shuffle is the per-epoch path's.
        """
        self.active = False
        self.reason = self._refusal(strategy)
        if self.reason is not None:
            return
        model = strategy.model
        task = self.sdr.current.task
        with torch.random.fork_rng(devices=[]):
            fields = dataset_tensors(strategy.adapted_dataset)
        if len(fields) != 3:
            self.reason = f"the training samples have {len(fields)} fields, not (x, y, task)"
            return
        x, y, t = fields
        features = model.batched_features(x, model.entry_of(task), self.batch_size)
        strategy.adapted_dataset = features_dataset(features, y, t)
        self.feature_passes += 1
        self.active = True

    def _refusal(self, strategy) -> Optional[str]:
        if not self.enabled:
            return "disabled (FrozenFeaturesPlugin(enabled=False))"
        if self.sdr.trains_entry:
            return "the experience trains an entry"
        if not fixed_inputs(strategy.adapted_dataset):
            return "the training dataset has a 'train' transform: its inputs may differ from epoch to epoch"
        readers = [type(p).__name__ for p in strategy.plugins if plugin_reads_inputs(p)]
        if readers:
            return (f"plugin(s) {readers} may read the training inputs (set uses_training_images = False on a "
                    "plugin that does not)")
        return None

    def after_training_exp(self, strategy, **kwargs):
        self.active = False

    def uses_features(self, strategy) -> bool:
        """Whether ``strategy.mb_x`` now holds features: training on features, not inside
        an evaluation (a periodic one included)."""
        return self.active and bool(strategy.is_training)


__all__ = ["FEATURE_SAFE_PLUGINS", "FrozenFeaturesPlugin", "INPUT_READING_METRICS", "USES_TRAINING_IMAGES",
           "features_dataset", "fixed_inputs", "plugin_reads_inputs"]
