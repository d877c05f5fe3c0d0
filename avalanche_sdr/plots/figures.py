"""Figures of an SDR run from its results JSON (paper Figs 3 and 5-7, memory, accuracy).

Every ``plot_*`` function takes the results dict (see
:mod:`avalanche_sdr.plots.results`) and an optional matplotlib ``Axes``; without
one it makes a new :class:`matplotlib.figure.Figure` (not registered with
``pyplot``, so no global state and no GUI backend are involved) and returns the
``Axes`` it drew on (``ax.figure`` is the figure). :func:`make_all_plots` writes
PNG files.

Tasks are named as in the printed results table: ``task 3`` is the task with
0-based id 3 (:func:`~avalanche_sdr.plots.results.task_label`); titles add its
0-based group and split. New figures grow with the number of tasks up to a
bounded size, use a constrained layout (titles, axis labels, colour-bar labels
and legends stay inside the figure) and label at most :data:`MAX_TICK_LABELS`
tasks per axis (every k-th task; minor ticks mark the others).
"""

from __future__ import annotations

import math
import os
import textwrap
import warnings
from pathlib import Path
from typing import Any, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
from matplotlib import colormaps
from matplotlib import patheffects
from matplotlib.axes import Axes
from matplotlib.axis import Axis
from matplotlib.colors import LogNorm, Normalize
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch, Rectangle

from avalanche_sdr.plots.names import FIGURE_NAMES
from avalanche_sdr.plots.results import (
    TASK_KEYS_ACCURACY,
    TASK_KEYS_DETECTION,
    TASK_KEYS_MEMORY,
    DETECTION_KEYS,
    ResultsFormatError,
    chosen_entry,
    default_example_task,
    detection_grid,
    entry_creators,
    find_task,
    group_curve_lines,
    load_results,
    require_task_keys,
    task_description,
    task_label,
)

OUTCOME_COLORS = {
    "correct": "#2a9d8f",
    "miss": "#f4a261",
    "incorrect": "#d62828",
    None: "#8d99ae",
}
OUTCOME_NAMES = {
    "correct": "correct",
    "miss": "miss (repeat detected as new)",
    "incorrect": "incorrect (other group's entry)",
    None: "warm start (not scored)",
}
SAME_GROUP_COLOR = "#1b7f3b"
MAX_TICK_LABELS = 25
"""At most this many labelled ticks per task axis; longer streams label every k-th task."""
_ANNOTATE_MAX_CELLS = 300
_ANNOTATE_MIN_CELL_PT = (24.0, 13.0)  # cell width, height (points) that fit a value
_LOG_SCALE_RATIO = 20.0
_OUTLINE = [patheffects.withStroke(linewidth=2.5, foreground="white")]
# New figures: inches = clip(base + per task, MIN, MAX); the minimum leaves room
# for the title, the axis and colour-bar labels and the legend at 10 pt.
_MIN_WIDTH, _MIN_HEIGHT = 7.5, 5.0
_MAX_WIDTH, _MAX_HEIGHT = 16.0, 14.0
_TITLE_SIZE = 11.0

ResultsLike = Union[str, os.PathLike, Mapping[str, Any]]


def _short_number(value: float) -> str:
    """Cell annotation with about 3 significant digits, never in e-notation."""
    magnitude = abs(value)
    if magnitude >= 100:
        return f"{value:.0f}"
    if magnitude >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def _figure_inches(base: float, per_item: float, n_items: int, low: float, high: float) -> float:
    """Figure side in inches: ``base + per_item * n_items`` clipped to ``[low, high]``."""
    return float(min(max(base + per_item * n_items, low), high))


def _new_axes(width: float, height: float) -> Axes:
    """Axes on a new figure of ``width`` x ``height`` inches with a constrained layout."""
    fig = Figure(figsize=(width, height), layout="constrained")
    return fig.add_subplot()


def _axes_points(ax: Axes) -> Tuple[float, float]:
    """Width and height (points) of ``ax`` before the layout runs, an upper estimate."""
    width, height = ax.figure.get_size_inches()
    box = ax.get_position()
    return 72.0 * box.width * width, 72.0 * box.height * height


def _line_chars(ax: Axes, fontsize: float, share: float = 1.0) -> int:
    """Characters that fit on a line ``share`` times as wide as ``ax``.

    Uses an average glyph width of 0.5 em (DejaVu Sans, mixed text) and the
    axes width before the layout, which only shrinks it a little.
    """
    return max(24, int(_axes_points(ax)[0] * share / (0.5 * fontsize)))


def _wrap(text: str, ax: Axes, fontsize: float, share: float = 1.0) -> str:
    """``text`` broken at spaces into lines that fit ``share`` of the width of ``ax``."""
    return textwrap.fill(text, width=_line_chars(ax, fontsize, share), break_long_words=False)


def _set_task_ticks(
    axis: Axis,
    positions: Sequence[float],
    labels: Sequence[str],
    *,
    fontsize: float = 8.0,
    max_labels: int = MAX_TICK_LABELS,
) -> List[int]:
    """Task tick labels on ``axis``: every one, or every k-th for long streams.

    With more than ``max_labels`` positions, every ``k = ceil(n / max_labels)``-th
    one (from the first) is labelled and minor ticks mark all of them. x labels
    are vertical when more than 8 are shown.

    :return: indices into ``positions`` of the labelled ticks.
    """
    step = max(1, math.ceil(len(positions) / max_labels))
    shown = list(range(0, len(positions), step))
    axis.set_ticks([positions[i] for i in shown], [labels[i] for i in shown], fontsize=fontsize)
    axis.set_ticks(positions if step > 1 else [], minor=True)
    if axis.axis_name == "x":
        axis.set_tick_params(labelrotation=90 if len(shown) > 8 else 0)
    return shown


def _heatmap(results: ResultsLike, score: str, ax: Optional[Axes]) -> Axes:
    results = load_results(results)
    grid = detection_grid(results, score)
    n_rows, n_cols = grid.values.shape
    if ax is None:
        ax = _new_axes(
            _figure_inches(4.2, 0.45, n_cols, _MIN_WIDTH, _MAX_WIDTH),
            _figure_inches(3.0, 0.3, n_rows, _MIN_HEIGHT, _MAX_HEIGHT),
        )
    fig = ax.figure

    if score == "complexity":
        cmap = colormaps["viridis_r"].with_extremes(bad="white")
        title = "Complexity S(j, t) of each scored task on the earlier entries"
        bar_label = "S(j, t)\n(lower = more similar)"
        vote_name = "argmin S (complexity vote)"
    else:
        cmap = colormaps["viridis"].with_extremes(bad="white")
        title = "Consistency p(P_t = P_j) of each scored task with the earlier entries"
        bar_label = "p(P_t = P_j)\n(higher = more similar)"
        vote_name = "argmax p (consistency vote)"
    masked = np.ma.masked_invalid(grid.values)
    finite = grid.values[np.isfinite(grid.values)]
    if score == "consistency":
        norm = Normalize(vmin=0.0, vmax=1.0)
    elif finite.size and finite.min() > 0 and finite.max() / finite.min() > _LOG_SCALE_RATIO:
        # S spans orders of magnitude between similar and dissimilar entries.
        norm = LogNorm(vmin=finite.min(), vmax=finite.max())
        bar_label = bar_label.replace("S(j, t)", "S(j, t), log scale")
    else:
        norm = Normalize()
    image = ax.imshow(masked, cmap=cmap, aspect="auto", interpolation="nearest", norm=norm)
    colorbar = fig.colorbar(image, ax=ax, shrink=0.9, pad=0.02)
    colorbar.set_label(bar_label)

    # Cell size in points (the strip adds a column): markers, boxes and values scale with it.
    width_pt, height_pt = _axes_points(ax)
    cell_w, cell_h = 0.85 * width_pt / (n_cols + 1), 0.85 * height_pt / n_rows
    cell = min(cell_w, cell_h)
    line_scale = min(1.0, cell / 14.0)
    star = min(12.0, 0.85 * cell)

    min_w, min_h = _ANNOTATE_MIN_CELL_PT
    if n_rows * n_cols <= _ANNOTATE_MAX_CELLS and cell_w >= min_w and cell_h >= min_h:
        norm = image.norm
        for i in range(n_rows):
            for j in range(n_cols):
                value = grid.values[i, j]
                if np.isnan(value):
                    continue
                shade = cmap(norm(value))
                luminance = 0.299 * shade[0] + 0.587 * shade[1] + 0.114 * shade[2]
                ax.text(
                    j, i + 0.28, _short_number(value),
                    ha="center", va="center", fontsize=6.5,
                    color="black" if luminance > 0.5 else "white",
                )

    # Boxes only where the entry existed: a same-group entry created later is blank.
    for i, j in zip(*np.nonzero(grid.similar & ~np.isnan(grid.values))):
        for colour, width in (("white", 2.6), ("black", 1.0)):
            ax.add_patch(
                Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, edgecolor=colour,
                          linewidth=max(width * line_scale, 0.4))
            )
    vote_rows = [(i, j) for i, j in enumerate(grid.vote) if j is not None]
    if vote_rows:
        ax.scatter(
            [j for _, j in vote_rows], [i - 0.12 for i, _ in vote_rows],
            marker="o", s=(0.45 * star) ** 2, facecolors="none", edgecolors="black",
            linewidths=1.2 * line_scale, path_effects=_OUTLINE, zorder=3,
        )
    chosen_rows = [(i, j) for i, j in enumerate(grid.chosen) if j is not None]
    if chosen_rows:
        ax.scatter(
            [j for _, j in chosen_rows], [i - 0.12 for i, _ in chosen_rows],
            marker="*", s=star ** 2, color="#d62828", edgecolors="white",
            linewidths=0.8 * line_scale, zorder=4,
        )
    # Outcome strip: a column left of the entries, one cell per row, so that the
    # outcome of every row shows even where its tick label is left out.
    for i, task in enumerate(grid.rows):
        colour = OUTCOME_COLORS.get(task.get("outcome"), "black")
        ax.add_patch(Rectangle((-1.4, i - 0.5), 0.8, 1, color=colour, linewidth=0))

    _set_task_ticks(ax.xaxis, [-1.0] + list(range(n_cols)), ["outcome"] + grid.col_labels)
    shown = _set_task_ticks(ax.yaxis, range(n_rows), grid.row_labels)
    for tick, i in zip(ax.yaxis.get_majorticklabels(), shown):
        tick.set_color(OUTCOME_COLORS.get(grid.rows[i].get("outcome"), "black"))
        tick.set_fontweight("bold")
    ax.set_xlabel("repository entry j (named by the task that created it)")
    ax.set_ylabel("scored task t\n(stream order, top to bottom)")
    ax.set_title(_wrap(title, ax, _TITLE_SIZE, share=1.2), fontsize=_TITLE_SIZE)
    ax.set_xlim(-1.5, n_cols - 0.5)
    ax.set_ylim(n_rows - 0.5, -0.5)

    handles = [
        Patch(facecolor="white", edgecolor="black", linewidth=1.5, label="box: same group (ground truth)"),
        Line2D([], [], marker="*", color="#d62828", linestyle="", markersize=11, label="entry reused by SDR"),
        Line2D([], [], marker="o", markerfacecolor="none", markeredgecolor="black",
               linestyle="", markersize=6, label=vote_name),
        Patch(facecolor="white", edgecolor="#bbbbbb", label="white: entry not created yet"),
    ]
    handles += [
        Patch(color=OUTCOME_COLORS[o], label=f"outcome: {OUTCOME_NAMES[o]}")
        for o in ("correct", "miss", "incorrect")
        if any(t.get("outcome") == o for t in grid.rows)
    ]
    fig.legend(handles=handles, loc="outside lower center", ncol=2, fontsize=8, frameon=False)
    return ax


def plot_complexity_heatmap(results: ResultsLike, ax: Optional[Axes] = None) -> Axes:
    """Heatmap of S(j, t) (paper Figs 5-7): scored tasks x repository entries.

    Rows are the scored tasks in stream order (labels ``task 3``, coloured by
    outcome; the "outcome" column left of the entries shows it for every row),
    columns the repository entries named by the task that created them; blank
    cells: the entry did not exist yet. Boxed cells: ground-truth similar (same
    group). Star: the entry SDR reused. Circle: argmin S. Values are written in
    the cells when they fit. The colour scale is logarithmic when the positive
    S values span more than a factor of 20 (common: dissimilar entries give S
    orders of magnitude larger). Long streams label every k-th row and column
    (at most :data:`MAX_TICK_LABELS` each).

    :param results: results dict or path to the results JSON.
    :param ax: axes to draw on; None makes a new figure sized to the grid.
    :return: the axes.
    :raises ResultsFormatError: on missing keys or no scored task.
    """
    return _heatmap(results, "complexity", ax)


def plot_consistency_heatmap(results: ResultsLike, ax: Optional[Axes] = None) -> Axes:
    """Heatmap of p(P_t = P_j), laid out and marked as :func:`plot_complexity_heatmap`.

    Circle: argmax p. Colour scale fixed to [0, 1].
    """
    return _heatmap(results, "consistency", ax)


def plot_detection_example(
    results: ResultsLike,
    task: Union[None, int, str] = None,
    ax: Optional[Axes] = None,
) -> Axes:
    """One task's detection scores over earlier entries (paper Fig. 3).

    Bars: p(P_t = P_j) on the left axis; line with markers: S(j, t) on the
    right axis (a twin axes); x: the repository entries that existed, named by
    the task that created them. Ground-truth similar entries (same group) have a
    green bar outline and a bold green label; the reused entry's bar is
    highlighted.

    :param results: results dict or path to the results JSON.
    :param task: task id (int, ``"3"`` or ``"task 3"``; the legacy ``"T4,2"``
        is also read, see :func:`~avalanche_sdr.plots.results.find_task`);
        None: the first reused task, else the first scored task.
    :param ax: axes for the bars (the S axis is its twin); None: new figure.
    :return: the bar axes.
    :raises ResultsFormatError: on missing keys, an unknown task, a warm-start
        task (never scored), or results without any scored task.
    """
    results = load_results(results)
    tasks = require_task_keys(results, TASK_KEYS_DETECTION, DETECTION_KEYS)
    if task is None:
        chosen_task = default_example_task(results)
        if chosen_task is None:
            raise ResultsFormatError("results have no scored task (every task is warm start)")
    else:
        chosen_task = find_task(results, task)
    if chosen_task["decision"] == "warm_start":
        raise ResultsFormatError(
            f"{task_description(chosen_task)} is a warm-start task: it has no detection scores"
        )
    detection = chosen_task["detection"]
    entries = [int(e) for e in detection["candidate_entries"]]
    p = np.array([np.nan if v is None else float(v) for v in detection["consistency"]])
    s = np.array([np.nan if v is None else float(v) for v in detection["complexity"]])
    by_id = {int(t["task"]): t for t in tasks}
    creators = entry_creators(results)
    creator_tasks = [by_id.get(creators.get(e, -1)) for e in entries]
    labels = [task_label(t) if t is not None else f"entry {e}" for t, e in zip(creator_tasks, entries)]
    similar = [t is not None and int(t["group"]) == int(chosen_task["group"]) for t in creator_tasks]
    reused = chosen_entry(chosen_task)

    if ax is None:
        ax = _new_axes(_figure_inches(4.5, 0.3, len(entries), _MIN_WIDTH, _MAX_WIDTH), _MIN_HEIGHT)
    x = np.arange(len(entries))
    colours = ["#e76f51" if e == reused else "#4c78a8" for e in entries]
    bars = ax.bar(x, p, color=colours, width=0.7, label="p(P_t = P_j)")
    for bar, same in zip(bars, similar):
        if same:
            bar.set_edgecolor(SAME_GROUP_COLOR)
            bar.set_linewidth(2.0)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("p(P_t = P_j)  (bars)")
    shown = _set_task_ticks(ax.xaxis, x, labels)
    for tick, i in zip(ax.xaxis.get_majorticklabels(), shown):
        if similar[i]:
            tick.set_color(SAME_GROUP_COLOR)
            tick.set_fontweight("bold")
    ax.set_xlabel("repository entry j (named by the task that created it)")

    twin = ax.twinx()
    twin.plot(x, s, color="#d62828", marker="o", markersize=min(6.0, 160.0 / max(len(x), 1)),
              linewidth=1.5, label="S(j, t)")
    vote = detection.get("vote_complexity")
    if vote is not None and int(vote) in entries:
        j = entries.index(int(vote))
        twin.plot([x[j]], [s[j]], marker="v", markersize=11, color="#d62828", linestyle="",
                  label="argmin S")
    finite = s[np.isfinite(s)]
    log_s = finite.size > 0 and finite.min() > 0 and finite.max() / finite.min() > _LOG_SCALE_RATIO
    if log_s:
        twin.set_yscale("log")
    twin.set_ylabel(
        f"S(j, t){', log scale' if log_s else ''}  (line)\nlower = more similar", color="#d62828"
    )
    twin.tick_params(axis="y", colors="#d62828")

    if reused is not None:
        creator = by_id.get(creators.get(reused, -1))
        verdict = f"reused the entry of {task_description(creator) if creator else f'entry {reused}'}"
    else:
        verdict = "detected as new"
    outcome = chosen_task.get("outcome")
    name = task_description(chosen_task)
    verdict += f" — {outcome}" if outcome else ""
    one_line = len(name) + 2 + len(verdict) <= _line_chars(ax, _TITLE_SIZE)
    title = f"{name}: {verdict}" if one_line else f"{name}:\n{_wrap(verdict, ax, _TITLE_SIZE)}"
    ax.set_title(title[0].upper() + title[1:], fontsize=_TITLE_SIZE)
    handles = [
        Patch(color="#4c78a8", label="p(P_t = P_j)"),
        Line2D([], [], color="#d62828", marker="o", label="S(j, t)"),
    ]
    if reused is not None:
        handles.insert(1, Patch(color="#e76f51", label="p of the reused entry"))
    if vote is not None:
        handles.append(Line2D([], [], color="#d62828", marker="v", linestyle="", markersize=9, label="argmin S"))
    if any(similar):
        handles.append(Patch(facecolor="white", edgecolor=SAME_GROUP_COLOR, linewidth=2.0,
                             label="green outline / label: same group"))
    ax.figure.legend(handles=handles, loc="outside lower center", ncol=3, fontsize=8, frameon=False)
    return ax


def plot_memory(results: ResultsLike, ax: Optional[Axes] = None) -> Axes:
    """Repository memory (MB = 2**20 bytes) after each task, in stream order.

    x: the tasks in stream order, labelled ``task 3`` (every k-th on long
    streams). Markers are coloured by decision. With ``memory_mb_all_new`` in each task,
    a line shows the memory if every task had been trained as new; with only
    the top-level ``memory_mb_all_new`` (the final value), a dashed line runs
    linearly from the first task's memory to it (all-new growth is linear).

    :param results: results dict or path to the results JSON.
    :param ax: axes to draw on; None makes a new figure.
    :return: the axes.
    :raises ResultsFormatError: on missing ``task`` / ``memory_mb`` keys.
    """
    results = load_results(results)
    tasks = require_task_keys(results, TASK_KEYS_MEMORY)
    if ax is None:
        ax = _new_axes(_figure_inches(5.5, 0.1, len(tasks), _MIN_WIDTH, _MAX_WIDTH), _MIN_HEIGHT)
    x = np.arange(len(tasks))
    memory = np.array([float(t["memory_mb"]) for t in tasks])
    ax.plot(x, memory, color="#264653", linewidth=1.5, label="SDR repository", zorder=2)
    decision_style = {
        "warm_start": ("#8d99ae", "warm start (new)"),
        "new": ("#2a9d8f", "detected new"),
        "reuse": ("#e76f51", "reused an entry"),
    }
    for decision, (colour, name) in decision_style.items():
        idx = [i for i, t in enumerate(tasks) if t.get("decision") == decision]
        if idx:
            ax.scatter(x[idx], memory[idx], color=colour, s=30, zorder=3, label=name)

    all_new_final = results.get("memory_mb_all_new")
    if all(t.get("memory_mb_all_new") is not None for t in tasks):
        all_new = [float(t["memory_mb_all_new"]) for t in tasks]
        ax.plot(x, all_new, color="#6c757d", linestyle="--", label="every task trained as new")
        all_new_final = all_new[-1]
    elif all_new_final is not None:
        ax.plot([x[0], x[-1]], [memory[0], float(all_new_final)], color="#6c757d", linestyle="--",
                label="every task trained as new (linear to reported final)")
    ax.set_xlabel("after learning task (stream order)")
    ax.set_ylabel("repository memory\n(MB, 2^20 bytes)")
    title = f"Repository memory: {memory[-1]:.2f} MB after {len(tasks)} tasks"
    if all_new_final is not None:
        saved = 1.0 - memory[-1] / float(all_new_final) if float(all_new_final) > 0 else 0.0
        title += f" vs {float(all_new_final):.2f} MB if every task were new ({100 * saved:.0f}% saved)"
    ax.set_title(_wrap(title, ax, _TITLE_SIZE), fontsize=_TITLE_SIZE)
    _set_task_ticks(ax.xaxis, x, [task_label(t) for t in tasks])
    ax.set_xlim(-0.5, len(tasks) - 0.5)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.figure.legend(loc="outside lower center", ncol=3, fontsize=8, frameon=False,
                     handles=ax.get_legend_handles_labels()[0])
    return ax


def plot_task_accuracy(results: ResultsLike, ax: Optional[Axes] = None) -> Axes:
    """Final test accuracy (%) of every task, bars coloured by detection outcome.

    x: the tasks in stream order, labelled ``task 3`` (every k-th on long
    streams). Reused tasks are hatched; the dashed line is the average accuracy.

    :param results: results dict or path to the results JSON.
    :param ax: axes to draw on; None makes a new figure.
    :return: the axes.
    :raises ResultsFormatError: on missing keys or accuracies outside [0, 1].
    """
    results = load_results(results)
    tasks = require_task_keys(results, TASK_KEYS_ACCURACY)
    if ax is None:
        ax = _new_axes(_figure_inches(4.0, 0.12, len(tasks), _MIN_WIDTH, _MAX_WIDTH), _MIN_HEIGHT)
    x = np.arange(len(tasks))
    accuracy = np.array([100.0 * float(t["test_accuracy"]) for t in tasks])
    colours = [OUTCOME_COLORS.get(t["outcome"] if t["decision"] != "warm_start" else None) for t in tasks]
    bars = ax.bar(x, accuracy, color=colours, width=0.8, edgecolor="white", linewidth=0.5)
    for bar, t in zip(bars, tasks):
        if t["decision"] == "reuse":
            bar.set_hatch("///")
            bar.set_edgecolor("black")
    average = results.get("average_accuracy")
    average = 100.0 * float(average) if average is not None else float(accuracy.mean())
    ax.axhline(average, color="black", linestyle="--", linewidth=1)
    _set_task_ticks(ax.xaxis, x, [task_label(t) for t in tasks])
    ax.set_xlim(-0.6, len(tasks) - 0.4)
    ax.set_ylim(0, 105)
    ax.set_ylabel("test accuracy after\nthe last task (%)")
    ax.set_xlabel("task (stream order)")
    ax.set_title(f"Per-task test accuracy (average {average:.1f}%)", fontsize=_TITLE_SIZE)
    present = []
    for outcome in ("correct", "miss", "incorrect", None):
        if any((t["outcome"] if t["decision"] != "warm_start" else None) == outcome for t in tasks):
            present.append(Patch(color=OUTCOME_COLORS[outcome], label=OUTCOME_NAMES[outcome]))
    if any(t["decision"] == "reuse" for t in tasks):
        present.append(Patch(facecolor="white", edgecolor="black", hatch="///", label="reused an entry"))
    present.append(Line2D([], [], color="black", linestyle="--", label=f"average {average:.1f}%"))
    ax.figure.legend(handles=present, loc="outside lower center", ncol=min(3, len(present)),
                     fontsize=8, frameon=False)
    ax.grid(axis="y", alpha=0.3)
    return ax


def plot_group_curve(runs: Sequence[Mapping[str, Any]], group: Optional[int] = None,
                     ax: Optional[Axes] = None) -> Axes:
    """Accuracy on one group's tasks against the number of times the group has been seen.

    For ``group`` (default: the group seen most often, ties the lowest id), x is the
    number of its tasks trained so far (1, 2, ...) and y the mean test accuracy (%) over
    them right after each (``group_accuracy_after`` of the runs' ``group_curve``); one
    line per row (method and variant, mean over its seeds;
    :func:`~avalanche_sdr.plots.results.group_curve_lines`). A rising line: the group's
    earlier tasks gain from its repeats (backward transfer).

    :param runs: run dicts of the Table 2 harness (``OUT/runs/*.json``) or results of
        :func:`~avalanche_sdr.training.stream_runner.run_sdr_stream` with a ``label``.
    :param group: the group to draw.
    :param ax: axes to draw on; None makes a new figure.
    :return: the axes.
    :raises ResultsFormatError: no run has a curve for the group.
    """
    group, lines = group_curve_lines(runs, group)
    if ax is None:
        ax = _new_axes(_MIN_WIDTH, _MIN_HEIGHT)
    markers = "osD^v<>ph*"
    for i, line in enumerate(lines):
        ax.plot(line.times_seen, [100.0 * a for a in line.accuracy], marker=markers[i % len(markers)],
                label=line.label, color=colormaps["tab10"](i % 10))
    longest = max(max(line.times_seen) for line in lines)
    ax.set_xticks(range(1, longest + 1))
    ax.set_xlim(0.7, longest + 0.3)
    ax.set_xlabel(f"times group {group} has been seen (its tasks trained so far)")
    ax.set_ylabel(f"accuracy on group {group}'s\ntasks trained so far (%)")
    ax.set_title(f"Group {group}: accuracy right after each of its tasks (mean over seeds)", fontsize=_TITLE_SIZE)
    ax.grid(alpha=0.3)
    ax.figure.legend(loc="outside lower center", ncol=min(2, len(lines)), fontsize=8, frameon=False,
                     handles=ax.get_legend_handles_labels()[0])
    return ax


def make_all_plots(
    results_path: ResultsLike,
    out_dir: Union[str, os.PathLike],
    task: Union[None, int, str] = None,
    *,
    dpi: int = 150,
) -> List[Path]:
    """Write every figure of a run as PNG files in ``out_dir``.

    Files: ``complexity_heatmap.png``, ``consistency_heatmap.png``,
    ``detection_task{ID}.png`` (Fig. 3 panel), ``memory.png``,
    ``task_accuracy.png``. Detection figures are skipped (with a warning) when
    no task was scored.

    :param results_path: path to the results JSON (or the parsed dict).
    :param out_dir: output folder, created if missing.
    :param task: task for the Fig. 3 panel: id (int, ``"3"`` or ``"task 3"``;
        see :func:`~avalanche_sdr.plots.results.find_task`); None: the first
        reused task.
    :param dpi: resolution of the PNG files.
    :return: paths of the files written.
    :raises ResultsFormatError: on missing keys or an unknown ``task``.
    :raises FileNotFoundError: if the results file does not exist.
    """
    results = load_results(results_path)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    require_task_keys(results, TASK_KEYS_DETECTION + TASK_KEYS_MEMORY + TASK_KEYS_ACCURACY)
    written: List[Path] = []

    def save(ax: Axes, name: str) -> None:
        path = out / name
        ax.figure.savefig(path, dpi=dpi)
        written.append(path)

    scored = any(t["decision"] != "warm_start" for t in results["tasks"])
    if scored:
        example = find_task(results, task) if task is not None else default_example_task(results)
        save(plot_complexity_heatmap(results), "complexity_heatmap.png")
        save(plot_consistency_heatmap(results), "consistency_heatmap.png")
        save(plot_detection_example(results, example["task"]), f"detection_task{example['task']}.png")
    else:
        warnings.warn("no scored task in the results: detection figures skipped", UserWarning, stacklevel=2)
    save(plot_memory(results), "memory.png")
    save(plot_task_accuracy(results), "task_accuracy.png")
    return written


__all__ = list(FIGURE_NAMES)  # defined once, in a leaf; the package loads this module lazily
