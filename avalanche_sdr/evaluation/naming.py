"""Metric names for the SDR plugin metrics (Avalanche's naming, logging mode)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from avalanche.evaluation.metric_utils import get_metric_name


def logging_metric_name(name: Any, strategy: Any) -> str:
    """``get_metric_name(name, strategy)`` without task or experience, in logging mode.

    ``EvaluationPlugin`` hands metrics a logging-mode experience; this also
    works when a metric callback is called with the experience in train mode
    (where ``current_experience`` is masked).

    :param name: metric (its ``str``) or metric name string.
    :param strategy: object with ``experience`` and ``is_eval``.
    :return: e.g. ``"Detection_Correct/train_phase/train_stream"``.
    """
    experience = strategy.experience
    view = SimpleNamespace(
        experience=experience.logging() if hasattr(experience, "logging") else experience,
        is_eval=strategy.is_eval,
    )
    return get_metric_name(name, view, add_experience=False, add_task=False)


__all__ = ["logging_metric_name"]
