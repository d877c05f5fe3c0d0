"""Method presets by name: what SDR decides and keeps, as defaults for the strategy's keywords.

A method preset (:class:`MethodPreset`) is the configuration of a method, layered over a
budget (:data:`~avalanche_sdr.training.presets.BUDGETS`, how long it trains):

- ``"paper"`` (the default): the paper's SDR, the agreement rule on a VAE per entry,
  head-only reuse, task-aware prediction only;
- ``"recommended"``: the configuration the results pages measured best
  (docs/results/learning_reuse.md, docs/results/task_free.md,
  docs/results/detection/level_by_size.md, docs/results/stream_designs.md): the
  ``"small_task"`` rule, whose two-sample repeat test matches the classes in any order at
  a level that falls with the task's size as far as the entry's reference has the power
  (``alpha="by_paired_power"``) and reads the warm-start references E0 was pretrained
  without, with its fallback on tasks of few images a class (its false-reuse level over
  every candidate entry, ``familywise=True``); no generators (the rule
  reads none), the learning reuse (``reuse="accumulate"``) and the task-free router
  ``"lda_weighted"``.

A preset only supplies defaults: ``SDRStrategy(..., method="recommended", reuse="head")``
keeps the head-only reuse. Nothing here is a second definition of a setting: the preset
names the detector, reuse mode, forward transfer and routers of the strategy's own keywords.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, Tuple, Union

from avalanche_sdr.detection.small_task import SmallTaskDetector, SmallTaskSettings
from avalanche_sdr.detection.two_sample import TwoSampleSettings
from avalanche_sdr.vocabulary import REUSE_ACCUMULATE, REUSE_HEAD, ROUTER_LDA_WEIGHTED


@dataclass(frozen=True)
class MethodPreset:
    """A method: defaults for ``SDRStrategy``'s ``detector``, ``reuse``, ``forward_transfer`` and ``routers``.

    :param name: the preset's name (recorded in results and checkpoints).
    :param detector: builds the detector, a fresh one per strategy (detectors keep
        per-run caches): returns a rule name of
        :data:`~avalanche_sdr.detection.DETECTOR_TYPES` or a detector object.
    :param reuse: what a repeat trains, a name of
        :data:`~avalanche_sdr.training.reuse_registry.REUSE_TYPES` (``SDRStrategy(reuse=...)``).
    :param forward_transfer: whether a new entry's adapters start from the detector's
        nearest entry (``SDRStrategy(forward_transfer=...)``) rather than from the identity.
    :param routers: task-free routers fitted after every task (names or router objects).
    :param summary: one line for ``--help`` texts and the docs.
    """

    name: str
    detector: Callable[[], Any]
    reuse: str
    forward_transfer: bool
    routers: Tuple[Any, ...]
    summary: str

    def defaults(self) -> Dict[str, Any]:
        """The keyword defaults the preset supplies (a fresh detector each call)."""
        return {"detector": self.detector(), "reuse": self.reuse, "forward_transfer": self.forward_transfer,
                "routers": tuple(self.routers)}


def _paper_detector() -> str:
    return "agreement"


def _recommended_detector() -> SmallTaskDetector:
    return SmallTaskDetector(SmallTaskSettings(two_sample=TwoSampleSettings(match_classes=True,
                                                                            alpha="by_paired_power"),
                                               familywise=True))


METHODS: Dict[str, MethodPreset] = {
    "paper": MethodPreset(
        name="paper", detector=_paper_detector, reuse=REUSE_HEAD, forward_transfer=False, routers=(),
        summary="the paper's SDR: agreement rule, a VAE per entry, head-only reuse, task-aware prediction"),
    "recommended": MethodPreset(
        name="recommended", detector=_recommended_detector, reuse=REUSE_ACCUMULATE, forward_transfer=True,
        routers=(ROUTER_LDA_WEIGHTED,),
        summary="small-task rule: two-sample test with classes matched in any order at a level falling with "
                "task size as far as the entry's reference has the power, on references E0 was pretrained without, a fallback for small tasks; no generators, "
                "the learning reuse, forward transfer for new entries, task-free router 'lda_weighted'"),
}
"""Method presets by name (``SDRStrategy(method=...)``, the examples' and harness's ``--method``)."""

DEFAULT_METHOD = "paper"
"""The method of a strategy built without ``method=``: the paper's, so the paper reproduces out of the box."""


def resolve_method(method: Union[str, MethodPreset]) -> MethodPreset:
    """``method`` as a :class:`MethodPreset`: a name of :data:`METHODS`, or the preset itself.

    :raises ValueError: an unknown name (the message lists them).
    :raises TypeError: neither a name nor a ``MethodPreset``.
    """
    if isinstance(method, MethodPreset):
        return method
    if not isinstance(method, str):
        raise TypeError(f"method must be a name {list(METHODS)} or a MethodPreset, got {type(method).__name__}")
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; the methods are {list(METHODS)}")
    return METHODS[method]


__all__ = ["DEFAULT_METHOD", "METHODS", "MethodPreset", "resolve_method"]
