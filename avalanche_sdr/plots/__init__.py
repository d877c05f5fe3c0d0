"""Figures of an SDR run from its results JSON.

``python -m avalanche_sdr.plots RESULTS.json --out DIR [--task T3,2]`` writes
every figure as PNG; the functions below draw one figure each on a
matplotlib ``Axes`` (a new figure when none is given).
"""

from avalanche_sdr.plots.figures import (
    make_all_plots,
    plot_complexity_heatmap,
    plot_consistency_heatmap,
    plot_detection_example,
    plot_memory,
    plot_task_accuracy,
)
from avalanche_sdr.plots.results import ResultsFormatError, load_results, task_label

__all__ = [
    "ResultsFormatError",
    "load_results",
    "make_all_plots",
    "plot_complexity_heatmap",
    "plot_consistency_heatmap",
    "plot_detection_example",
    "plot_memory",
    "plot_task_accuracy",
    "task_label",
]
