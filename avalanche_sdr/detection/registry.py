"""The detectors by name: one registry, :data:`DETECTOR_TYPES`, and :func:`make_detector`.

``SDRStrategy(detector=...)`` takes a name of this registry or a detector object (any
object with ``detect(model, task, x, y, num_classes) -> DetectionRecord``, optionally
``remember(...)`` and ``needs_generators``). A name is built with its options, and an
option the named rule does not read is refused, naming the option and the rule.
"""
from __future__ import annotations

import inspect
from typing import Any, Callable, Dict, Optional

from avalanche_sdr.detection.calibrated import DEFAULT_THRESHOLDS, CalibrationThresholds
from avalanche_sdr.detection.detector import SimilarTaskDetector
from avalanche_sdr.detection.expert_gate import DEFAULT_EXPERT_GATE, ExpertGateDetector, ExpertGateSettings
from avalanche_sdr.detection.small_task import DEFAULT_SMALL_TASK, SmallTaskDetector, SmallTaskSettings
from avalanche_sdr.detection.two_sample import DEFAULT_TWO_SAMPLE, TwoSampleDetector, TwoSampleSettings


def agreement_detector(*, prior: str = "uniform", elbo_samples: int = 1, max_samples: Optional[int] = None,
                       batch_size: Optional[int] = None, jitter: float = 1e-6, n_permutations: int = 8,
                       class_count_filter: bool = False) -> SimilarTaskDetector:
    """The paper's rule, ``"agreement"``: a :class:`SimilarTaskDetector` reusing an entry
    when argmax p == argmin S (options: those of :class:`SimilarTaskDetector`)."""
    return SimilarTaskDetector(rule="agreement", prior=prior, elbo_samples=elbo_samples, max_samples=max_samples,
                               batch_size=batch_size, jitter=jitter, n_permutations=n_permutations,
                               class_count_filter=class_count_filter)


def calibrated_detector(*, thresholds: CalibrationThresholds = DEFAULT_THRESHOLDS, prior: str = "uniform",
                        elbo_samples: int = 1, max_samples: Optional[int] = None, batch_size: Optional[int] = None,
                        jitter: float = 1e-6, n_permutations: int = 8,
                        class_count_filter: bool = False) -> SimilarTaskDetector:
    """The ``"calibrated"`` rule: a :class:`SimilarTaskDetector` with ``thresholds``
    (default :data:`~avalanche_sdr.detection.calibrated.DEFAULT_THRESHOLDS`, set on Fashion-MNIST)."""
    return SimilarTaskDetector(rule="calibrated", thresholds=thresholds, prior=prior, elbo_samples=elbo_samples,
                               max_samples=max_samples, batch_size=batch_size, jitter=jitter,
                               n_permutations=n_permutations, class_count_filter=class_count_filter)


def two_sample_detector(*, settings: TwoSampleSettings = DEFAULT_TWO_SAMPLE, batch_size: Optional[int] = None) -> TwoSampleDetector:
    """The ``"two_sample"`` rule: a :class:`TwoSampleDetector` (needs no generators)."""
    return TwoSampleDetector(settings, batch_size)


def small_task_detector(*, settings: SmallTaskSettings = DEFAULT_SMALL_TASK,
                        batch_size: Optional[int] = None) -> SmallTaskDetector:
    """The ``"small_task"`` rule: a :class:`~avalanche_sdr.detection.small_task.SmallTaskDetector`
    (the two-sample rule, with a pooled-covariance fallback where it lacks power; no generators)."""
    return SmallTaskDetector(settings, batch_size)


def expert_gate_detector(*, settings: ExpertGateSettings = DEFAULT_EXPERT_GATE,
                         batch_size: Optional[int] = None) -> ExpertGateDetector:
    """The ``"expert_gate"`` baseline: an :class:`ExpertGateDetector` (needs no generators)."""
    return ExpertGateDetector(settings, batch_size)


DETECTOR_TYPES: Dict[str, Callable[..., Any]] = {
    "agreement": agreement_detector,
    "calibrated": calibrated_detector,
    "two_sample": two_sample_detector,
    "expert_gate": expert_gate_detector,
    "small_task": small_task_detector,
}
"""Detector builders by rule name (the names of :data:`~avalanche_sdr.vocabulary.DETECTORS`);
each takes the options its rule reads, by keyword."""


def detector_options(rule: str) -> tuple:
    """The option names the rule ``rule`` reads (its builder's keywords)."""
    return tuple(inspect.signature(DETECTOR_TYPES[rule]).parameters)


def detector_rule(detector) -> str:
    """The rule name of a detector object (its ``rule``, else its class name)."""
    return str(getattr(detector, "rule", type(detector).__name__))


def make_detector(detector, **options):
    """A detector object from a rule name of :data:`DETECTOR_TYPES` (with ``options``) or
    a detector object (returned as is).

    :raises ValueError: an unknown name; an option the named rule does not read (the
        message names the option and the rule); options given with a detector object.
    """
    if not isinstance(detector, str):
        if options:
            raise ValueError(f"detector options {sorted(options)} have no effect with detector=<a "
                             f"{type(detector).__name__} object>; set them when building the detector")
        return detector
    if detector not in DETECTOR_TYPES:
        raise ValueError(f"unknown detector {detector!r}; available: {list(DETECTOR_TYPES)} (or a detector object)")
    unread = sorted(set(options) - set(detector_options(detector)))
    if unread:
        raise ValueError(f"option(s) {unread} have no effect with the {detector!r} rule, which reads only "
                         f"{list(detector_options(detector))}; remove them")
    return DETECTOR_TYPES[detector](**options)


__all__ = ["DETECTOR_TYPES", "agreement_detector", "calibrated_detector", "detector_options", "detector_rule",
           "expert_gate_detector", "make_detector", "small_task_detector",
           "two_sample_detector"]
