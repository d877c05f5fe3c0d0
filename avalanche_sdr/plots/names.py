"""The public names of :mod:`avalanche_sdr.plots.figures`, defined once.

A leaf: the package ``__init__`` reads them to load the figure module (and matplotlib)
only when one is used, and the figure module exports exactly them as its ``__all__``.
"""

FIGURE_NAMES = (
    "MAX_TICK_LABELS",
    "OUTCOME_COLORS",
    "make_all_plots",
    "plot_complexity_heatmap",
    "plot_consistency_heatmap",
    "plot_detection_example",
    "plot_group_curve",
    "plot_memory",
    "plot_task_accuracy",
)
"""The figure functions and constants of :mod:`avalanche_sdr.plots.figures`."""

__all__ = ["FIGURE_NAMES"]
