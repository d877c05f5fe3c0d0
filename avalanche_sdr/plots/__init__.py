"""Figures of an SDR run from its results JSON.

``python -m avalanche_sdr.plots RESULTS.json --out DIR [--task 3]`` writes
every figure as PNG; the functions below draw one figure each on a
matplotlib ``Axes`` (a new figure when none is given). Tasks are named as in
the printed results table: ``task 3`` is the task with 0-based id 3
(:func:`task_label`; :func:`task_description` adds its 0-based group and split).

:func:`plot_group_curve` draws from several runs instead (the Table 2 harness's run
dicts, which write it as ``OUT/plots/group_curve.png``): the accuracy on one group's
tasks against the number of times the group has been seen, a line per row.

The figure functions (:mod:`avalanche_sdr.plots.figures`) are imported on first
use, so importing this package, or ``python -m avalanche_sdr.plots --help``,
does not load matplotlib.
"""

from typing import Any, List

from avalanche_sdr.plots.results import ResultsFormatError, load_results, task_description, task_label

from avalanche_sdr.plots.names import FIGURE_NAMES

# The figure functions (figures.__all__ is this list), named in a leaf module so that
# matplotlib loads only when one is used.
_FIGURE_NAMES = FIGURE_NAMES


def __getattr__(name: str) -> Any:
    if name in _FIGURE_NAMES:
        from avalanche_sdr.plots import figures

        return getattr(figures, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> List[str]:
    return sorted(set(globals()) | set(_FIGURE_NAMES))


__all__ = [*_FIGURE_NAMES, "ResultsFormatError", "load_results", "task_description", "task_label"]
