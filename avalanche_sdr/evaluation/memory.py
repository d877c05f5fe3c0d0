"""Repository memory: bytes a continual learner keeps, and a plugin metric for it.

Memory (:ref:`definitions`, docs/method.rst, "Memory (MB)") is the bytes of
everything a method must keep to predict every task seen and to continue the stream,
at the stored dtype, divided by 2**20 (:data:`BYTES_PER_MB`): the model, the
strategy's ``memory_extra_modules()`` and exemplar buffers, and per plugin a function
looked up by type in a registry (:func:`register_plugin_memory`); every storage is
counted once. Optimizer state, loaders, metric state and transient copies are not
counted, for every method alike; unknown plugin types are scanned generically, with a
``UserWarning`` when the scan finds bytes. Why: SDR's claim is accuracy per megabyte,
so SDR and every baseline must be charged by one rule.

The conventions, the registered plugin types and what is counted per strategy:
docs/method.rst, section "Repository memory: what is counted for each strategy and
plugin".
"""

from __future__ import annotations

import warnings
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

import numpy as np
from torch import Tensor, nn

from avalanche.evaluation.metric_definitions import PluginMetric
from avalanche.evaluation.metric_results import MetricValue
from avalanche.training.plugins import (
    EvaluationPlugin,
    EWCPlugin,
    GDumbPlugin,
    GenerativeReplayPlugin,
    LRSchedulerPlugin,
    LwFPlugin,
    ReplayPlugin,
)
from avalanche.training.plugins.clock import Clock
from avalanche.training.plugins.generative_replay import TrainGeneratorAfterExpPlugin
from avalanche.training.storage_policy import ExemplarsBuffer
from avalanche.training.supervised.expert_gate import ExpertGateStrategy
from avalanche.training.templates.base_sgd import PeriodicEval
from avalanche.training.utils import ParamData

from avalanche_sdr.evaluation.naming import logging_metric_name

BYTES_PER_MB = 2**20
"""Bytes in one MB as used everywhere in this package (MiB)."""

_GENERIC_SCAN_DEPTH = 4


class TensorByteCounter:
    """Accumulates bytes of tensors, modules and exemplar buffers, each storage once.

    One counter is one measurement: storages and buffers already counted are
    remembered, so adding the same tensor, module or buffer twice adds nothing.
    """

    def __init__(self) -> None:
        self.total: int = 0
        """Bytes counted so far."""
        self._storages: Set[Tuple[str, Optional[int], int]] = set()
        self._buffers: Set[int] = set()
        self._strategies: Set[int] = set()

    def add_strategy(self, strategy: Any) -> int:
        """Count a strategy's model, extra modules, exemplars and plugin state (once).

        :return: bytes added by this call.
        """
        if id(strategy) in self._strategies:
            return 0
        self._strategies.add(id(strategy))
        before = self.total
        _count_strategy(strategy, self)
        return self.total - before

    def add_tensor(self, tensor: Tensor) -> int:
        """Count the storage behind ``tensor`` (once).

        :return: bytes added by this call (0 if already counted, or for meta
            and uninitialised lazy tensors, which hold no data).
        """
        if isinstance(tensor, nn.parameter.UninitializedTensorMixin) or tensor.is_meta:
            return 0
        if tensor.is_sparse:
            return self.add_tensor(tensor._indices()) + self.add_tensor(tensor._values())
        try:
            storage = tensor.untyped_storage()
            ptr, nbytes = storage.data_ptr(), storage.nbytes()
        except (RuntimeError, NotImplementedError):
            # Tensor subclasses without a plain storage: count the logical size.
            ptr, nbytes = id(tensor), tensor.numel() * tensor.element_size()
        if nbytes == 0:
            return 0
        key = (tensor.device.type, tensor.device.index, ptr)
        if key in self._storages:
            return 0
        self._storages.add(key)
        self.total += nbytes
        return nbytes

    def add_module(self, module: nn.Module) -> int:
        """Count all parameters and buffers of ``module`` and its submodules.

        :return: bytes added by this call.
        """
        added = 0
        for tensor in module.parameters():
            added += self.add_tensor(tensor)
        for tensor in module.buffers():
            added += self.add_tensor(tensor)
        return added

    def add_exemplars(self, dataset: Any) -> int:
        """Count the samples of an exemplar dataset (once per dataset object).

        :param dataset: a sized, indexable data set whose items are tuples such
            as ``(x, y, t)`` (an Avalanche buffer dataset) or single tensors.
        :return: bytes added by this call.
        """
        if dataset is None or id(dataset) in self._buffers:
            return 0
        self._buffers.add(id(dataset))
        added = sum(_item_nbytes(dataset[i]) for i in range(len(dataset)))
        self.total += added
        return added

    def add_object(self, obj: Any, depth: int = _GENERIC_SCAN_DEPTH) -> int:
        """Count tensors, ``ParamData``, modules and exemplar buffers in ``obj``.

        Dicts, lists, tuples and sets are followed up to ``depth`` levels; any
        other object (plugins, strategies, data sets, numbers) adds nothing.

        :return: bytes added by this call.
        """
        if isinstance(obj, Tensor):
            return self.add_tensor(obj)
        if isinstance(obj, ParamData):
            return self.add_tensor(obj.data)
        if isinstance(obj, nn.Module):
            return self.add_module(obj)
        if isinstance(obj, ExemplarsBuffer):
            return self.add_exemplars(obj.buffer)
        if depth <= 0:
            return 0
        if isinstance(obj, dict):
            return sum(self.add_object(v, depth - 1) for v in obj.values())
        if isinstance(obj, (list, tuple, set, frozenset)):
            return sum(self.add_object(v, depth - 1) for v in obj)
        return 0


def _item_nbytes(item: Any) -> int:
    """Bytes of one materialised sample (tuple of tensors / numbers / arrays)."""
    if isinstance(item, Tensor):
        return item.numel() * item.element_size()
    if isinstance(item, (bool, np.bool_)):
        return 1
    if isinstance(item, (int, float, np.integer, np.floating)):
        return 8
    if isinstance(item, np.ndarray):
        return int(item.nbytes)
    if isinstance(item, (list, tuple)):
        return sum(_item_nbytes(v) for v in item)
    if isinstance(item, dict):
        return sum(_item_nbytes(v) for v in item.values())
    if hasattr(item, "getbands") and hasattr(item, "size"):  # PIL image
        return int(np.asarray(item).nbytes)
    return 0


PluginMemoryFunction = Callable[[Any, Any, TensorByteCounter], None]
"""``function(plugin, strategy, counter)``: add the plugin's state to ``counter``."""

_PLUGIN_MEMORY: Dict[type, PluginMemoryFunction] = {}
_WARNED_TYPES: Set[type] = set()


def register_plugin_memory(plugin_type: type, function: PluginMemoryFunction) -> None:
    """Register how to count the state kept by plugins of ``plugin_type``.

    The function applies to subclasses too, unless they are registered
    themselves. Registering a type again replaces its function.

    :param plugin_type: a plugin class.
    :param function: ``function(plugin, strategy, counter)`` adding the bytes
        the plugin keeps through ``counter.add_tensor`` / ``add_module`` /
        ``add_exemplars`` / ``add_object``.
    :raises TypeError: if ``plugin_type`` is not a class or ``function`` is
        not callable.
    """
    if not isinstance(plugin_type, type):
        raise TypeError(f"plugin_type must be a class, got {plugin_type!r}")
    if not callable(function):
        raise TypeError(f"function must be callable, got {function!r}")
    _PLUGIN_MEMORY[plugin_type] = function


def plugin_memory_function(plugin_type: type) -> Optional[PluginMemoryFunction]:
    """The registered function for ``plugin_type`` (nearest in its MRO), or None."""
    for cls in plugin_type.__mro__:
        if cls in _PLUGIN_MEMORY:
            return _PLUGIN_MEMORY[cls]
    return None


def _count_nothing(plugin: Any, strategy: Any, counter: TensorByteCounter) -> None:
    """Plugins whose state is not needed to predict or continue the stream."""


def _count_storage_policy(plugin: Any, strategy: Any, counter: TensorByteCounter) -> None:
    counter.add_exemplars(plugin.storage_policy.buffer)


def _count_ewc(plugin: EWCPlugin, strategy: Any, counter: TensorByteCounter) -> None:
    counter.add_object(plugin.saved_params)
    counter.add_object(plugin.importances)


def _count_lwf(plugin: LwFPlugin, strategy: Any, counter: TensorByteCounter) -> None:
    # ExpertGate creates a fresh LwFPlugin for every experience that needs one,
    # so the copy held after an experience is never used again.
    if isinstance(strategy, ExpertGateStrategy):
        return
    prev_model = getattr(plugin.lwf, "prev_model", None)
    if prev_model is not None:
        counter.add_module(prev_model)


def _count_generative_replay(
    plugin: GenerativeReplayPlugin, strategy: Any, counter: TensorByteCounter
) -> None:
    generator_strategy = plugin.generator_strategy
    if generator_strategy is not None and generator_strategy is not strategy:
        counter.add_strategy(generator_strategy)
    elif plugin.generator is not None:
        counter.add_module(plugin.generator)


for _type, _function in (
    (ReplayPlugin, _count_storage_policy),
    (GDumbPlugin, _count_storage_policy),
    (EWCPlugin, _count_ewc),
    (LwFPlugin, _count_lwf),
    (GenerativeReplayPlugin, _count_generative_replay),
    (EvaluationPlugin, _count_nothing),
    (Clock, _count_nothing),
    (PeriodicEval, _count_nothing),
    (LRSchedulerPlugin, _count_nothing),
    (TrainGeneratorAfterExpPlugin, _count_nothing),
):
    register_plugin_memory(_type, _function)


def _count_unknown_plugin(plugin: Any, counter: TensorByteCounter) -> None:
    added = sum(counter.add_object(v) for v in getattr(plugin, "__dict__", {}).values())
    if added and type(plugin) not in _WARNED_TYPES:
        _WARNED_TYPES.add(type(plugin))
        warnings.warn(
            f"repository memory: plugin type {type(plugin).__qualname__} has no "
            f"registered memory function; a generic scan of its attributes counted "
            f"{added} bytes. Register an exact one with "
            "avalanche_sdr.evaluation.register_plugin_memory.",
            UserWarning,
            stacklevel=3,
        )


def _count_strategy(strategy: Any, counter: TensorByteCounter) -> None:
    """Body of :meth:`TensorByteCounter.add_strategy`."""
    model = getattr(strategy, "model", None)
    if model is not None:
        counter.add_module(model)
    extra = getattr(strategy, "memory_extra_modules", None)
    if callable(extra):
        for obj in extra():
            counter.add_object(obj)
    policy = getattr(strategy, "storage_policy", None)
    if isinstance(policy, ExemplarsBuffer):
        counter.add_exemplars(policy.buffer)
    for plugin in getattr(strategy, "plugins", ()):
        function = plugin_memory_function(type(plugin))
        if function is None:
            _count_unknown_plugin(plugin, counter)
        else:
            function(plugin, strategy, counter)


def entry_bytes(model: Any, entry: int) -> int:
    """Bytes of one entry of an :class:`~avalanche_sdr.models.SDRModel`: its adapters,
    BatchNorm copies, generator (if any), detection state and stored images (if any).

    Parameters and buffers at their stored dtype, each storage once (the memory
    definition of docs/method.rst).
    """
    modules = list(model.encoder.entry_modules(entry))
    if model.generators is not None:
        modules += list(model.generators.entry_modules(entry))
    for store in (model.detection_states, model.entry_exemplars):
        if str(int(entry)) in store:
            modules.append(store[str(int(entry))])
    tensors = {id(t): t for m in modules for t in list(m.parameters()) + list(m.buffers())}
    return sum(t.numel() * t.element_size() for t in tensors.values())


def repository_memory_bytes(strategy: Any) -> int:
    """Bytes a strategy keeps to predict every task seen and continue the stream.

    See the module docstring for what is counted for each strategy and plugin.

    :param strategy: an Avalanche strategy (any object with a ``model``
        ``nn.Module``; ``plugins``, ``storage_policy`` and
        ``memory_extra_modules()`` are used when present).
    :return: bytes (int); divide by :data:`BYTES_PER_MB` for MB.
    :raises TypeError: if ``strategy.model`` is missing or not an ``nn.Module``.
    """
    model = getattr(strategy, "model", None)
    if not isinstance(model, nn.Module):
        raise TypeError(
            f"repository_memory_bytes needs a strategy with an nn.Module `model`, "
            f"got model={type(model).__name__} on {type(strategy).__name__}"
        )
    counter = TensorByteCounter()
    counter.add_strategy(strategy)
    return counter.total


def repository_memory_mb(strategy: Any) -> float:
    """:func:`repository_memory_bytes` in MB (bytes / 2**20)."""
    return repository_memory_bytes(strategy) / BYTES_PER_MB


class RepositoryMemory(PluginMetric[float]):
    """Plugin metric: repository memory in MB after each training experience.

    Emits ``Repository_Memory_MB/train_phase/<stream>_stream`` (e.g.
    ``Repository_Memory_MB/train_phase/train_stream``) at ``after_training_exp``,
    with the experience counter as x position. The value is
    :func:`repository_memory_bytes` / 2**20 (MB = MiB).
    """

    def __init__(self) -> None:
        super().__init__()
        self._mb: Optional[float] = None

    def reset(self) -> None:
        self._mb = None

    def result(self) -> Optional[float]:
        """Last measured memory in MB, or None before the first experience."""
        return self._mb

    def after_training_exp(self, strategy: Any) -> List[MetricValue]:
        self._mb = repository_memory_mb(strategy)
        name = logging_metric_name(self, strategy)
        clock = getattr(strategy, "clock", None)
        x = clock.train_exp_counter if clock is not None else 0
        return [MetricValue(self, name, self._mb, x)]

    def __str__(self) -> str:
        return "Repository_Memory_MB"


__all__ = [
    "BYTES_PER_MB",
    "PluginMemoryFunction",
    "RepositoryMemory",
    "TensorByteCounter",
    "entry_bytes",
    "plugin_memory_function",
    "register_plugin_memory",
    "repository_memory_bytes",
    "repository_memory_mb",
]
