"""A CSV logger that records every metric value, SDR's own metrics included.

Avalanche's ``CSVLogger`` writes a fixed set of columns (accuracy, loss,
forgetting); detection and memory values never reach it. This logger writes one
row per logged scalar, in long format, so any metric a plugin emits is kept::

    metric,x,value
    Detection_Correct/train_phase/train_stream,4,1.0
    Repository_Memory_MB/train_phase/train_stream,4,1.4453
"""
from __future__ import annotations

import csv
import numbers
import os
from typing import Union

from avalanche.logging import BaseLogger


class MetricCSVLogger(BaseLogger):
    """Write every scalar metric value to ``path`` as ``metric,x,value`` rows.

    Non-scalar values (images, tensors of several elements) are skipped. Rows are
    flushed as they are written, so a killed run keeps what it logged.
    Call :meth:`close` at the end of the run.

    :param path: CSV file to create (overwritten); its folder must exist.
    """

    def __init__(self, path: Union[str, os.PathLike]):
        super().__init__()
        self.path = os.fspath(path)
        self._file = open(self.path, "w", newline="", encoding="utf-8")
        self._writer = csv.writer(self._file)
        self._writer.writerow(["metric", "x", "value"])
        self._file.flush()

    @property
    def closed(self) -> bool:
        return self._file.closed

    def log_single_metric(self, name, value, x_plot) -> None:
        if hasattr(value, "numel") and value.numel() == 1:
            value = value.item()
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            return
        self._writer.writerow([name, x_plot, repr(float(value))])
        self._file.flush()

    def close(self) -> None:
        """Close the file (idempotent)."""
        if not self._file.closed:
            self._file.close()


__all__ = ["MetricCSVLogger"]
