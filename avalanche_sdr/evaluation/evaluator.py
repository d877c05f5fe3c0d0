"""The evaluation plugin used by SDR runs and by the baseline harness.

One call builds Avalanche's ``EvaluationPlugin`` with the metrics every run
reports (accuracy, forgetting, timing, repository memory, detection) and the
usual loggers. The same plugin serves SDR and Avalanche's own strategies:
detection metrics emit nothing for strategies without ``detection_records``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import IO, Any, List, Optional, Sequence, Union

from avalanche.evaluation.metrics import accuracy_metrics, forgetting_metrics, timing_metrics
from avalanche.logging import CSVLogger, InteractiveLogger, TextLogger
from avalanche.training.plugins import EvaluationPlugin

from avalanche_sdr.evaluation.decision_logger import DECISION_METRIC, DecisionLogger
from avalanche_sdr.evaluation.detection_metrics import DetectionMetrics
from avalanche_sdr.evaluation.memory import RepositoryMemory
from avalanche_sdr.evaluation.metric_csv_logger import MetricCSVLogger

TEXT_LOG_NAME = "training_log.txt"
"""File name of the text log written in ``log_dir`` by default."""

METRICS_CSV_NAME = "metrics.csv"
"""File name of the long-format CSV of every metric value (:class:`MetricCSVLogger`)."""


class ProgressLogger(InteractiveLogger):
    """Avalanche's ``InteractiveLogger`` (tqdm progress bars and metric values on stdout)
    without SDR's decision lines (``SDR_Decision`` metric values): a
    :class:`~avalanche_sdr.evaluation.DecisionLogger` beside it prints each of them
    on a line of its own instead of inside the metric dump."""

    def log_single_metric(self, name, value, x_plot) -> None:
        if name.split("/", 1)[0] != DECISION_METRIC:
            super().log_single_metric(name, value, x_plot)


class SDREvaluationPlugin(EvaluationPlugin):
    """``EvaluationPlugin`` that also owns files its loggers write to.

    ``CSVLogger`` keeps two files open and a ``TextLogger`` built from a path
    keeps one: call :meth:`close` (or use the plugin as a context manager) when
    the run is over so everything is flushed and closed. All loggers stay
    reachable as ``plugin.loggers``.
    """

    def __init__(self, *metrics, loggers=None, owned_files: Sequence[IO] = (), **kwargs):
        super().__init__(*metrics, loggers=loggers, **kwargs)
        self._owned_files: List[IO] = list(owned_files)

    def close(self) -> None:
        """Close ``CSVLogger``\\ s and the log files this plugin opened. Idempotent."""
        for logger in self.loggers:
            if isinstance(logger, CSVLogger) and not logger.training_file.closed:
                logger.close()
            elif isinstance(logger, MetricCSVLogger):
                logger.close()
        for handle in self._owned_files:
            if not handle.closed:
                handle.close()

    def __enter__(self) -> "SDREvaluationPlugin":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()


def sdr_evaluation_plugin(
    *,
    log_dir: Optional[Union[str, os.PathLike]] = None,
    csv: bool = True,
    text_log: Union[None, bool, str, os.PathLike, IO[str]] = None,
    interactive: Union[bool, str] = True,
    decision_lines: bool = True,
    extra_metrics: Sequence[Any] = (),
) -> SDREvaluationPlugin:
    """Build the evaluation plugin for SDR and baseline runs.

    Metrics: ``accuracy_metrics(experience=True, stream=True)``,
    ``forgetting_metrics(experience=True, stream=True)``,
    ``timing_metrics(experience=True)`` (seconds per evaluated experience,
    ``Time_Exp/eval_phase/...``), :class:`RepositoryMemory`
    (``Repository_Memory_MB/train_phase/train_stream``, MB = bytes / 2**20)
    and :class:`DetectionMetrics` (``Detection_Correct|Miss|Incorrect|Scored/
    train_phase/train_stream``), then ``extra_metrics``.

    Loggers: :class:`ProgressLogger` (Avalanche's ``InteractiveLogger``: tqdm progress
    and metric values on stdout), :class:`~avalanche_sdr.evaluation.DecisionLogger`
    (one plain ``[SDR] task t: ...`` line per task on stdout), ``TextLogger``,
    ``CSVLogger`` and :class:`MetricCSVLogger`. ``CSVLogger`` writes only
    Avalanche's accuracy, loss and forgetting columns; ``MetricCSVLogger``
    writes every scalar metric, detection and memory included, to
    ``log_dir/metrics.csv`` (one ``metric,x,value`` row each). All values are
    also in ``plugin.get_all_metrics()`` and in the text log.

    The returned plugin must be closed (``plugin.close()`` or ``with``) to
    close the CSV files and any text log file it opened.

    :param log_dir: folder for ``training_results.csv`` / ``eval_results.csv``
        and the default text log; created if missing. None: no files.
    :param csv: add a ``CSVLogger`` and a :class:`MetricCSVLogger` writing to
        ``log_dir`` (ignored without ``log_dir``, so nothing lands in the working
        directory).
    :param text_log: ``None``: a ``TextLogger`` to ``log_dir/training_log.txt``
        when ``log_dir`` is given, none otherwise; ``False``: no text log;
        ``True``: ``TextLogger`` to stdout; a path: ``TextLogger`` to that file
        (overwritten); an open text file: ``TextLogger`` to it (not closed by
        the plugin).
    :param interactive: add a :class:`ProgressLogger` (progress bars); ``"auto"``: only
        when stdout is a terminal, so that output piped or redirected to a file holds
        plain lines, no progress-bar frames.
    :param decision_lines: add a :class:`DecisionLogger`: SDR's one-line decision per
        task on stdout, each at the start of a line (the :class:`ProgressLogger` leaves
        them out of its metric dump).
    :param extra_metrics: more ``PluginMetric``\\ s (or lists of them, as the
        Avalanche ``*_metrics`` helpers return), e.g. ``loss_metrics(...)``.
    :return: an :class:`SDREvaluationPlugin` (an ``EvaluationPlugin``), to pass
        as ``evaluator=`` to a strategy.
    :raises TypeError: if ``text_log`` has an unsupported type.
    :raises ValueError: if ``interactive`` is not a bool or ``"auto"``.
    """
    if interactive == "auto":
        interactive = sys.stdout.isatty()
    elif not isinstance(interactive, bool):
        raise ValueError(f"interactive must be True, False or 'auto', got {interactive!r}")
    metrics: List[Any] = [
        accuracy_metrics(experience=True, stream=True),
        forgetting_metrics(experience=True, stream=True),
        timing_metrics(experience=True),
        RepositoryMemory(),
        DetectionMetrics(),
    ]
    metrics.extend(extra_metrics)

    loggers: List[Any] = []
    owned_files: List[IO] = []
    if log_dir is not None:
        Path(log_dir).mkdir(parents=True, exist_ok=True)
    if interactive:
        loggers.append(ProgressLogger())
    if decision_lines:
        loggers.append(DecisionLogger())

    if text_log is None:
        text_log = Path(log_dir) / TEXT_LOG_NAME if log_dir is not None else False
    if text_log is True:
        loggers.append(TextLogger())
    elif isinstance(text_log, (str, os.PathLike)):
        handle = open(text_log, "w", encoding="utf-8")
        owned_files.append(handle)
        loggers.append(TextLogger(handle))
    elif hasattr(text_log, "write"):
        loggers.append(TextLogger(text_log))
    elif text_log is not False:
        raise TypeError(
            f"text_log must be None, a bool, a path or an open text file, got {text_log!r}"
        )

    if csv and log_dir is not None:
        loggers.append(CSVLogger(str(log_dir)))
        loggers.append(MetricCSVLogger(Path(log_dir) / METRICS_CSV_NAME))

    return SDREvaluationPlugin(*metrics, loggers=loggers, owned_files=owned_files)


__all__ = ["ProgressLogger", "SDREvaluationPlugin", "TEXT_LOG_NAME", "sdr_evaluation_plugin"]
