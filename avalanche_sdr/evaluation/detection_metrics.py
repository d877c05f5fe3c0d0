"""Plugin metric for similar-task detection: running Correct / Miss / Incorrect rates.

After each training experience the metric reads the strategy's decision
(``strategy.detection_records[-1]``), the map entry -> creating task
(``strategy.model.entry_creator``) and the ground truth, the experience's ``group``
attribute, which Avalanche hides from the strategy and shows only in logging mode
(``experience.logging()``); it scores the decision with
:func:`~avalanche_sdr.evaluation.outcomes.classify_detection`. Warm-start records
are not scored, but their groups count as "seen before"; the metric keeps its own
history of trained tasks, so it must observe the stream from its first training
experience.

Why a plugin metric: detection quality is reported through Avalanche's loggers, like
accuracy, and the strategy never sees the ground truth.

What it reads, field by field: docs/method.rst, section "The detection metric's
inputs".
"""

from __future__ import annotations

import warnings
from typing import Any, Dict, List, Optional, Sequence

from avalanche.evaluation.metric_definitions import PluginMetric
from avalanche.evaluation.metric_results import MetricValue

from avalanche_sdr.evaluation.naming import logging_metric_name
from avalanche_sdr.evaluation.outcomes import (
    detection_summary,
    record_field,
    score_detection_record,
)

_VALUE_NAMES = (
    ("correct", "Detection_Correct"),
    ("miss", "Detection_Miss"),
    ("incorrect", "Detection_Incorrect"),
    ("n_scored", "Detection_Scored"),
)


def experience_ground_truth(experience: Any, name: str = "group") -> Any:
    """Read a hidden ground-truth attribute of an experience in logging mode.

    :param experience: an Avalanche experience (or any object with ``name``).
    :param name: attribute name, e.g. ``"group"`` or ``"split"``.
    :return: the attribute value.
    :raises AttributeError: if the experience has no such attribute.
    """
    logging_view = experience.logging() if hasattr(experience, "logging") else experience
    return getattr(logging_view, name)


class DetectionMetrics(PluginMetric[Dict[str, Any]]):
    """Running Correct / Miss / Incorrect rates of SDR's similar-task detection.

    Emitted values (fractions in [0, 1], and the number of scored tasks),
    named with Avalanche's ``get_metric_name`` without task or experience:

    - ``Detection_Correct/train_phase/train_stream``
    - ``Detection_Miss/train_phase/train_stream``
    - ``Detection_Incorrect/train_phase/train_stream``
    - ``Detection_Scored/train_phase/train_stream`` (int)

    after every training experience (``after_training_exp``, x position = the
    experience counter) and at the end of each ``strategy.train`` call
    (``after_training``) unless those values were already emitted after the
    last experience (so the usual ``for exp in stream: strategy.train(exp)``
    loop logs each value once). Nothing is emitted before the first scored
    task. Rates are cumulative over every experience the metric has seen since
    its last :meth:`reset`.

    Strategies without ``detection_records`` (Avalanche baselines) make the
    metric emit nothing, so one evaluation plugin serves every method.

    :param emit_after_exp: emit after each training experience.
    :param emit_after_training: emit at the end of each ``train`` call.
    """

    def __init__(self, *, emit_after_exp: bool = True, emit_after_training: bool = True):
        super().__init__()
        self.emit_after_exp = emit_after_exp
        self.emit_after_training = emit_after_training
        self.reset()

    def reset(self) -> None:
        """Forget every scored task and the ground-truth history."""
        self._task_groups: Dict[int, int] = {}
        self._earlier_groups: List[int] = []
        self._outcomes: List[Optional[str]] = []
        self._tasks: List[int] = []
        self._n_records_seen = 0
        self._n_emitted: Optional[int] = None
        self._warned_no_group = False

    def result(self) -> Dict[str, Any]:
        """``{"correct", "miss", "incorrect": float, "n_scored": int}``."""
        return detection_summary(self._outcomes)

    @property
    def outcomes(self) -> Dict[int, Optional[str]]:
        """Task id -> outcome (``None`` for warm-start tasks), in stream order."""
        return dict(zip(self._tasks, self._outcomes))

    def update(self, strategy: Any) -> Optional[str]:
        """Score the latest detection record of ``strategy``.

        :return: the outcome, or None when nothing was scored (warm start, no
            new record, no ground truth, strategy without detection).
        :raises ValueError: if the record is inconsistent with the history
            (e.g. the reused entry was created by a task this metric never saw).
        """
        records = getattr(strategy, "detection_records", None)
        entry_creator = getattr(getattr(strategy, "model", None), "entry_creator", {}) or {}
        return self._score_latest(records, getattr(strategy, "experience", None), entry_creator)

    def catch_up(self, records: Sequence[Any], experiences: Sequence[Any], entry_creator: Dict[int, int]) -> None:
        """Score the records of experiences finished before this metric was made, in
        stream order, emitting nothing: a run resumed from a checkpoint calls it so that
        the metric knows their ground truth when a later task reuses their entries.

        :param records: the strategy's detection records, one per finished experience.
        :param experiences: those experiences (with their ``group`` ground truth), in order.
        :param entry_creator: the repository's entry id -> creating task id.
        """
        for done, experience in enumerate(experiences):
            self._score_latest(records[: done + 1], experience, entry_creator)

    def _score_latest(self, records: Optional[Sequence[Any]], experience: Any,
                      model_entry_creator: Dict[int, int]) -> Optional[str]:
        """Score ``records[-1]`` against ``experience``'s ground truth (see :meth:`update`)."""
        if records is None or len(records) <= self._n_records_seen:
            return None
        if len(records) > self._n_records_seen + 1:
            warnings.warn(
                f"DetectionMetrics: {len(records) - self._n_records_seen} detection "
                "records appeared during one training experience; only the last one "
                "can be matched to the experience's ground truth and is scored.",
                UserWarning,
                stacklevel=3,
            )
        self._n_records_seen = len(records)
        record = records[-1]
        try:
            group = int(experience_ground_truth(experience, "group"))
        except AttributeError:
            if not self._warned_no_group:
                self._warned_no_group = True
                warnings.warn(
                    "DetectionMetrics: the training experience has no `group` "
                    "attribute, detection is not scored. Use a benchmark from "
                    "avalanche_sdr.benchmarks (ground truth as ExperienceAttribute "
                    "`group`).",
                    UserWarning,
                    stacklevel=3,
                )
            return None

        task = int(record_field(record, "task"))
        entry_creator = dict(
            zip(
                record_field(record, "candidate_entries", []) or [],
                record_field(record, "candidate_tasks", []) or [],
            )
        )
        entry_creator.update(model_entry_creator)
        try:
            outcome = score_detection_record(
                record, group, self._earlier_groups, self._task_groups.get, entry_creator
            )
        except ValueError as err:
            raise ValueError(
                f"DetectionMetrics cannot score task {task}: {err}. The metric must "
                "observe every training experience from the start of the stream."
            ) from err
        self._task_groups[task] = group
        self._earlier_groups.append(group)
        self._tasks.append(task)
        self._outcomes.append(outcome)
        return outcome

    def _package(self, strategy: Any) -> List[MetricValue]:
        summary = self.result()
        if summary["n_scored"] == 0:
            return []
        self._n_emitted = len(self._outcomes)
        clock = getattr(strategy, "clock", None)
        x = clock.train_exp_counter if clock is not None else len(self._outcomes)
        return [
            MetricValue(
                self,
                logging_metric_name(name, strategy),
                summary[key],
                x,
            )
            for key, name in _VALUE_NAMES
        ]

    def after_training_exp(self, strategy: Any) -> List[MetricValue]:
        self.update(strategy)
        return self._package(strategy) if self.emit_after_exp else []

    def after_training(self, strategy: Any) -> List[MetricValue]:
        if (
            not self.emit_after_training
            or strategy.experience is None
            or self._n_emitted == len(self._outcomes)
        ):
            return []
        return self._package(strategy)

    def __str__(self) -> str:
        return "Detection"


__all__ = ["DetectionMetrics", "experience_ground_truth"]
