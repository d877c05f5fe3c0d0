"""Avalanche plugin metrics for SDR: detection outcomes and repository memory.

- :mod:`~avalanche_sdr.evaluation.outcomes`: pure scoring of detection
  decisions (Correct / Miss / Incorrect), no Avalanche import.
- :mod:`~avalanche_sdr.evaluation.detection_metrics`: :class:`DetectionMetrics`.
- :mod:`~avalanche_sdr.evaluation.memory`: :func:`repository_memory_bytes`,
  :class:`RepositoryMemory`, :func:`register_plugin_memory`.
- :mod:`~avalanche_sdr.evaluation.evaluator`: :func:`sdr_evaluation_plugin`.
- :mod:`~avalanche_sdr.evaluation.metric_csv_logger`: :class:`MetricCSVLogger`,
  every metric value as CSV rows.
- :mod:`~avalanche_sdr.evaluation.task_free`: :class:`TaskFreeMetrics`, routing and
  task-free accuracy of a repository's routers (and the oracle).
- :mod:`~avalanche_sdr.evaluation.class_incremental`: what
  ``SDRStrategy(eval_router=...)`` evaluates with: Avalanche's own metrics on
  predictions made without task labels (:class:`ClassIncrementalEvalPlugin`,
  :func:`routed_scores`).
- :mod:`~avalanche_sdr.evaluation.decision_logger`: :class:`DecisionLogger`, SDR's
  one-line decision per task and nothing else.
"""

from avalanche_sdr.evaluation.class_incremental import (
    ClassIncrementalEvalPlugin,
    NoRoutableTaskWarning,
    routed_scores,
)
from avalanche_sdr.evaluation.decision_logger import DecisionLogger
from avalanche_sdr.evaluation.detection_metrics import DetectionMetrics, experience_ground_truth
from avalanche_sdr.evaluation.evaluator import SDREvaluationPlugin, sdr_evaluation_plugin
from avalanche_sdr.evaluation.metric_csv_logger import MetricCSVLogger
from avalanche_sdr.evaluation.task_free import TaskFreeMetrics
from avalanche_sdr.evaluation.memory import (
    BYTES_PER_MB,
    RepositoryMemory,
    TensorByteCounter,
    entry_bytes,
    plugin_memory_function,
    register_plugin_memory,
    repository_memory_bytes,
    repository_memory_mb,
)
from avalanche_sdr.evaluation.outcomes import (
    CORRECT,
    INCORRECT,
    MISS,
    OUTCOMES,
    classify_detection,
    detection_summary,
    score_detection_record,
    score_detection_records,
)

__all__ = [
    "BYTES_PER_MB",
    "CORRECT",
    "ClassIncrementalEvalPlugin",
    "DecisionLogger",
    "INCORRECT",
    "MISS",
    "OUTCOMES",
    "DetectionMetrics",
    "MetricCSVLogger",
    "NoRoutableTaskWarning",
    "RepositoryMemory",
    "SDREvaluationPlugin",
    "TaskFreeMetrics",
    "TensorByteCounter",
    "classify_detection",
    "detection_summary",
    "experience_ground_truth",
    "plugin_memory_function",
    "entry_bytes",
    "register_plugin_memory",
    "repository_memory_bytes",
    "repository_memory_mb",
    "routed_scores",
    "score_detection_record",
    "score_detection_records",
    "sdr_evaluation_plugin",
]
