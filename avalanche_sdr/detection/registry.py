"""The detectors by name: one registry, :data:`DETECTOR_TYPES`, and :func:`make_detector`.

``SDRStrategy(detector=...)`` takes a name of this registry or a detector object (a
:class:`~avalanche_sdr.detection.base.Detector`). A name is built with its options, and
an option the named rule does not read is refused, naming the option and the rule. A
new rule is one class: it needs no entry here to be passed as an object.
"""
from __future__ import annotations

import inspect
from typing import Dict, Type

from avalanche_sdr.detection.base import Detector
from avalanche_sdr.detection.detector import AgreementDetector, CalibratedDetector
from avalanche_sdr.detection.expert_gate import ExpertGateDetector
from avalanche_sdr.detection.small_task import SmallTaskDetector
from avalanche_sdr.detection.two_sample import TwoSampleDetector

DETECTOR_TYPES: Dict[str, Type[Detector]] = {
    cls.rule: cls
    for cls in (AgreementDetector, CalibratedDetector, TwoSampleDetector, ExpertGateDetector, SmallTaskDetector)
}
"""Detector classes by rule name (the names of :data:`~avalanche_sdr.vocabulary.DETECTORS`,
which the command lines offer before importing torch); ``DETECTOR_TYPES[name](**options)``
builds one with the options its rule reads, by keyword."""


def detector_options(rule: str) -> tuple:
    """The option names the rule ``rule`` reads (its class's keywords)."""
    return tuple(inspect.signature(DETECTOR_TYPES[rule]).parameters)


def detector_rule(detector) -> str:
    """The rule name of a detector given by name or as a :class:`~avalanche_sdr.detection.base.Detector`."""
    return detector if isinstance(detector, str) else detector.rule


def make_detector(detector, **options) -> Detector:
    """A detector object from a rule name of :data:`DETECTOR_TYPES` (with ``options``) or
    a :class:`~avalanche_sdr.detection.base.Detector` (returned as is).

    :raises ValueError: an unknown name; an option the named rule does not read (the
        message names the option and the rule); options given with a detector object.
    :raises TypeError: neither a name nor a ``Detector``.
    """
    if isinstance(detector, Detector):
        if options:
            raise ValueError(f"detector options {sorted(options)} have no effect with detector=<a "
                             f"{type(detector).__name__} object>; set them when building the detector")
        return detector
    if not isinstance(detector, str):
        raise TypeError(f"detector must be a rule name {list(DETECTOR_TYPES)} or a Detector object "
                        f"(avalanche_sdr.detection.Detector), got {type(detector).__name__}; a detector of "
                        "your own subclasses Detector")
    if detector not in DETECTOR_TYPES:
        raise ValueError(f"unknown detector {detector!r}; available: {list(DETECTOR_TYPES)} (or a detector object)")
    unread = sorted(set(options) - set(detector_options(detector)))
    if unread:
        raise ValueError(f"option(s) {unread} have no effect with the {detector!r} rule, which reads only "
                         f"{list(detector_options(detector))}; remove them")
    return DETECTOR_TYPES[detector](**options)


__all__ = ["DETECTOR_TYPES", "detector_options", "detector_rule", "make_detector"]
