"""Figures of an SDR run from its results JSON.

``python -m avalanche_sdr.plots RESULTS.json --out DIR [--task T3,2]`` writes
every figure as PNG; the functions below draw one figure each on a
matplotlib ``Axes`` (a new figure when none is given).
"""

from avalanche_sdr.plots import figures as _figures
from avalanche_sdr.plots.figures import *  # noqa: F401,F403 -- one function per figure (figures.__all__)
from avalanche_sdr.plots.results import ResultsFormatError, load_results, task_label

__all__ = list(_figures.__all__) + ["ResultsFormatError", "load_results", "task_label"]
