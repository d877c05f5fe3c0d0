"""``DecisionLogger``: an Avalanche logger that prints SDR's one-line decisions only.

:class:`~avalanche_sdr.training.SDRPlugin` publishes, after every training
experience, an ``SDR_Decision/train_phase/train_stream/Task<ttt>`` metric value: one
line with the decision, its scores, the chosen entry, the seconds the experience took
and the generator's fit. ``TextLogger`` and ``InteractiveLogger`` print it among all
other metrics; this logger prints just those lines, as they arrive, which keeps the
output of a long stream to one line per task (the examples use it).
"""
from __future__ import annotations

import sys
from typing import IO, Optional

from avalanche.logging import BaseLogger

DECISION_METRIC = "SDR_Decision"
"""Name prefix of the metric value that carries a task's decision line."""


class DecisionLogger(BaseLogger):
    """Print every ``SDR_Decision`` metric value (a ``str``) on its own line.

    :param file: the text stream to write to (default: ``sys.stdout`` at the time of
        writing, so that output capture works); flushed after each line.
    """

    def __init__(self, file: Optional[IO[str]] = None):
        super().__init__()
        self.file = file

    def log_single_metric(self, name, value, x_plot) -> None:
        if name.split("/", 1)[0] != DECISION_METRIC:
            return
        out = sys.stdout if self.file is None else self.file
        print(value, file=out, flush=True)


__all__ = ["DECISION_METRIC", "DecisionLogger"]
