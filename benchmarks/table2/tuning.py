"""Baseline hyper-parameters chosen on validation data only (``python -m benchmarks.table2 --tune``):
the grids, fixed in advance, and the search over them.

Every baseline hyper-parameter that the paper and Avalanche leave open is chosen per
stream and preset from a small grid (:data:`TUNING_GRIDS`, one :class:`Axis` per
:class:`~avalanche_sdr.baselines.BaselineSettings` field) by one number: the run's mean
accuracy on the benchmark's ``valid_stream`` after the last training task (task-aware;
for the rows with one head over the class ids, the closed-form ``slda``, ``ranpac`` and
``klda``, task-free), on one seed. No tuning run reads ``test_stream``. Where the best point sits at an
axis' edge, values beyond it are added (:func:`search`, ``--tune-extend``); ties go to
the first point scored (:func:`select`). The search is a function of the scores alone,
so it is replayed from the tuning runs on disk
(:mod:`benchmarks.table2.tuning_runs` runs them and writes the choice).
:func:`format_notes` is the section ``table2.md`` ends with.

Why each grid is what it is, the extension rule and the files:
docs/reproducing.rst, "The tuning grids".
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union


@dataclass(frozen=True)
class Times:
    """Grid values relative to the preset: each factor x the preset's value of the
    field, rounded to the nearest int, at least 1 (duplicates after rounding dropped)."""

    factors: Tuple[float, ...]

    @staticmethod
    def value(factor: float, base: float) -> int:
        """One factor x ``base``, rounded to the nearest int, at least 1."""
        return max(1, int(math.floor(factor * base + 0.5)))

    def resolve(self, base: float) -> List[int]:
        values: List[int] = []
        for factor in self.factors:
            value = self.value(factor, base)
            if value not in values:
                values.append(value)
        return values

    def describe(self, base: float) -> str:
        return f"{', '.join(f'{f:g}x' for f in self.factors)} the preset's {base:g}"


SCALES = ("log", "linear")


@dataclass(frozen=True)
class Axis:
    """One tuned setting: its grid values and how edge extension may add values.

    :param values: the grid's values, strictly ascending: absolute (a tuple) or relative
        to the preset (:class:`Times`, its factors ascending).
    :param scale: the step of a value added beyond an edge: ``"log"`` (the edge times the
        ratio of the axis' two outermost values at that edge; a :class:`Times` axis: of
        its factors), ``"linear"`` (the edge plus their difference), ``None`` (never
        extended).
    :param low: the smallest value the axis may take (inclusive; ``None``: no bound).
    :param high: the largest (inclusive; ``None``: no bound). For a :class:`Times` axis
        the bounds apply to the resolved values (e.g. epochs), not the factors.
    """

    values: Union[Tuple[Any, ...], Times]
    scale: Optional[str] = "log"
    low: Optional[float] = None
    high: Optional[float] = None

    def __post_init__(self):
        seq = list(self.sequence)
        if not seq or any(b <= a for a, b in zip(seq, seq[1:])):
            raise ValueError(f"an axis' values must be strictly ascending, got {seq}")
        if self.scale not in SCALES + (None,):
            raise ValueError(f"scale must be one of {SCALES} or None, got {self.scale!r}")
        if self.scale == "log" and seq[0] <= 0:
            raise ValueError(f"a log-scale axis needs positive values, got {seq}")

    @property
    def sequence(self) -> Tuple[float, ...]:
        """The numbers the step is taken on: the factors of a :class:`Times` axis, else the values."""
        return self.values.factors if isinstance(self.values, Times) else tuple(self.values)


def as_axis(spec: Union[Axis, Times, Sequence[Any]]) -> Axis:
    """An :class:`Axis`; a plain tuple or :class:`Times` (e.g. a test's grid) is an axis
    that is never extended."""
    if isinstance(spec, Axis):
        return spec
    return Axis(spec if isinstance(spec, Times) else tuple(spec), scale=None)


TUNING_GRIDS: Dict[str, Dict[str, Axis]] = {
    "ewc": {"ewc_lambda": Axis((1.0, 10.0, 100.0, 1000.0, 10000.0), "log"),
            "ewc_decay": Axis((0.9, 1.0), "linear", low=0.0, high=1.0)},
    "replay": {"lr": Axis((1e-4, 1e-3, 1e-2), "log", high=1.0),
               "epochs": Axis(Times((0.5, 1.0, 2.0)), "log", low=1)},
    "dgr": {"dgr_latent_dim": Axis((2, 16, 64), "log", low=1, high=1024)},
    # The closed-form learners (avalanche_sdr.closed_form), scored like every row by its
    # average_accuracy: for these one-head rows over the class ids, the task-free accuracy.
    # Random-feature sizes at most 2,048 (high): their [M, M] statistics grow as M^2.
    "slda": {"slda_shrinkage": Axis((1e-4, 1e-3, 1e-2, 1e-1), "log", high=1.0)},
    "ranpac": {"ranpac_dim": Axis((512, 2048), "log", low=1, high=2048),
               "ranpac_ridge": Axis((1e-4, 1e-2, 1.0), "log")},
    "klda": {"klda_dim": Axis((512, 2048), "log", low=1, high=2048),
             "klda_gamma": Axis((0.25, 1.0, 4.0), "log"),
             "klda_shrinkage": Axis((1e-3, 1e-2, 1e-1), "log", high=1.0)},
}
"""Per tunable method: ``{BaselineSettings field: Axis}`` (values absolute, or
:class:`Times` relative to the preset; the extension scale and bounds). Reasons:
docs/reproducing.rst, "The tuning grids"."""


DEFAULT_EXTEND = 2
"""``--tune-extend``'s default: at most this many values added beyond an axis' edges."""


TUNED_VARIANT = "tuned"
"""Variant name (and row suffix ``[tuned]``) of the runs with the chosen values."""


SPLIT = "valid"
"""The only stream tuning runs are scored on."""


# --------------------------------------------------------------------- grids


def _axes(method: str, preset: str, grids: Optional[Mapping[str, Mapping[str, Any]]] = None
          ) -> Tuple[Dict[str, Axis], Dict[str, Optional[float]]]:
    """The axes of ``method``'s grid and, per :class:`Times` axis, the preset's value it scales."""
    from benchmarks.table2.methods import PRESETS

    grids = TUNING_GRIDS if grids is None else grids
    settings = PRESETS[preset].baselines
    axes = {name: as_axis(spec) for name, spec in grids[method].items()}
    bases = {name: getattr(settings, name) if isinstance(axis.values, Times) else None
             for name, axis in axes.items()}
    return axes, bases


def resolved_grid(method: str, preset: str, grids: Optional[Mapping[str, Mapping[str, Any]]] = None
                  ) -> Tuple[Dict[str, List[Any]], Dict[str, str]]:
    """The grid of ``method`` under ``preset``: ``({name: values}, {name: note})``,
    :class:`Times` entries resolved against ``PRESETS[preset].baselines``."""
    axes, bases = _axes(method, preset, grids)
    values: Dict[str, List[Any]] = {}
    notes: Dict[str, str] = {}
    for name, axis in axes.items():
        if isinstance(axis.values, Times):
            values[name] = axis.values.resolve(bases[name])
            notes[name] = axis.values.describe(bases[name])
        else:
            values[name] = list(axis.values)
            notes[name] = "absolute"
    return values, notes


def grid_points(grid: Mapping[str, Sequence[Any]]) -> List[Dict[str, Any]]:
    """Every combination of the grid's values, the first parameter varying slowest."""
    names = list(grid)
    return [dict(zip(names, combo)) for combo in itertools.product(*(grid[n] for n in names))]


def _fmt(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def grid_variant(options: Mapping[str, Any], tasks: Optional[int] = None) -> str:
    """Variant name of a grid point's tuning run, e.g. ``grid_ewc_lambda-100_ewc_decay-0.9``;
    tuned on the first ``tasks`` experiences: ``..._first<tasks>``."""
    return ("grid_" + "_".join(f"{name}-{_fmt(value)}" for name, value in options.items())
            + ("" if tasks is None else f"_first{tasks}"))


def tunable(methods: Sequence[str], grids: Optional[Mapping[str, Any]] = None) -> List[str]:
    """The methods of ``methods`` that have a grid, in the given order."""
    grids = TUNING_GRIDS if grids is None else grids
    return [m for m in methods if m in grids]


# --------------------------------------------------------------------- edge extension


@dataclass
class _AxisState:
    """An axis during the search: its values so far (ascending) and the numbers its step
    is taken on (``seq``: the values, or a :class:`Times` axis' factors)."""

    name: str
    axis: Axis
    base: Optional[float]
    seq: List[float]
    values: List[Any]
    added: int = 0

    def beyond(self, end: int) -> Tuple[Optional[Tuple[float, Any]], str]:
        """``((step number, value), how it reads)`` one step beyond the ``end`` (0:
        smallest, -1: largest) edge, or ``(None, why not)``."""
        if self.axis.scale is None:
            return None, "the axis is not extensible"
        edge, inner = (self.seq[0], self.seq[1]) if end == 0 else (self.seq[-1], self.seq[-2])
        step = edge * (edge / inner) if self.axis.scale == "log" else edge + (edge - inner)
        step = float(f"{step:.12g}")  # 1e-4 * 0.1 is 1e-05, not 1.0000000000000002e-05
        if self.base is not None:
            value: Any = Times.value(step, self.base)
            shown = f"{value} ({step:g}x the preset's {self.base:g})"
        else:
            value = int(round(step)) if all(isinstance(v, int) for v in self.values) else step
            shown = _fmt(value) if value == step else f"{value} ({step:g} rounded)"
        if self.axis.low is not None and value < self.axis.low:
            return None, f"{shown} is below `{self.name}`'s declared minimum {_fmt(self.axis.low)}"
        if self.axis.high is not None and value > self.axis.high:
            return None, f"{shown} is above `{self.name}`'s declared maximum {_fmt(self.axis.high)}"
        if value in self.values:
            return None, f"{shown} is already on the axis"
        return (step, value), shown

    def add(self, end: int, step: float, value: Any) -> None:
        if end == 0:
            self.seq.insert(0, step)
            self.values.insert(0, value)
        else:
            self.seq.append(step)
            self.values.append(value)
        self.added += 1


@dataclass
class Search:
    """The state of one method's tuning search, replayed from the scores known so far
    (:func:`search`)."""

    grid: Dict[str, List[Any]]
    grid_note: Dict[str, str]
    searched: Dict[str, List[Any]]
    points: List[Dict[str, Any]]
    scores: List[Optional[float]]
    extensions: List[Dict[str, Any]] = field(default_factory=list)
    edges: List[Dict[str, Any]] = field(default_factory=list)

    @property
    def missing(self) -> List[Dict[str, Any]]:
        return [p for p, s in zip(self.points, self.scores) if s is None]

    @property
    def best(self) -> Optional[int]:
        """Index of the chosen point, ``None`` while a point has no score."""
        return None if self.missing else select(list(zip(self.points, self.scores)))


def _edge_reasons(states: Sequence[_AxisState], best: Mapping[str, Any], extend: int
                  ) -> Iterator[Tuple[_AxisState, int, Optional[Tuple[float, Any]], str]]:
    """Per axis on whose edge the best point sits: ``(axis, end, (step, value) to add or
    None, reason)``."""
    for state in states:
        if len(state.values) < 2 or best[state.name] not in (state.values[0], state.values[-1]):
            continue
        end = 0 if best[state.name] == state.values[0] else -1
        side = "smallest" if end == 0 else "largest"
        if state.added >= extend:
            new, shown = None, ("extension is off (--tune-extend 0)" if extend == 0 else
                                f"the limit of {extend} value(s) added per axis is reached")
        else:
            new, shown = state.beyond(end)
        if new is None:
            yield state, end, None, f"best {_fmt(best[state.name])} is `{state.name}`'s {side}; not extended: {shown}"
        else:
            yield state, end, new, f"added {shown}: best {_fmt(best[state.name])} was `{state.name}`'s {side}"


def search(method: str, preset: str, score: Callable[[Dict[str, Any]], Optional[float]], *,
           extend: int = DEFAULT_EXTEND, grids: Optional[Mapping[str, Mapping[str, Any]]] = None) -> Search:
    """Replay the tuning search of ``method`` from the scores ``score(options)`` knows
    (``None``: that point has not been run): the grid, then the edge-extension rounds
    (docs/reproducing.rst, "The tuning grids") as far as every point of a round has a score. The result's
    ``missing`` points are those to run next; with none missing, ``best`` is the choice.
    """
    if extend < 0:
        raise ValueError(f"extend must be >= 0, got {extend}")
    grid, notes = resolved_grid(method, preset, grids)
    axes, bases = _axes(method, preset, grids)
    states = [_AxisState(name, axes[name], bases[name], list(axes[name].sequence), list(grid[name]))
              for name in grid]
    result = Search(grid, notes, {}, [], [])
    new_points = grid_points(grid)
    for round_ in itertools.count(1):
        for options in new_points:
            result.points.append(options)
            result.scores.append(score(options))
        if result.missing:
            break
        best = result.points[result.best]
        reasons = list(_edge_reasons(states, best, extend))
        result.edges = [{"name": s.name, "value": best[s.name], "reason": why}
                        for s, _, new, why in reasons if new is None]
        added = [(s, end, new, why) for s, end, new, why in reasons if new is not None]
        if not added:
            break
        for state, end, (step, value), why in added:
            state.add(end, step, value)
            result.extensions.append({"name": state.name, "value": value, "round": round_, "reason": why})
        new_points = [p for p in grid_points({s.name: s.values for s in states}) if p not in result.points]
    result.searched = {s.name: list(s.values) for s in states}
    return result


def point_round(options: Mapping[str, Any], extensions: Sequence[Mapping[str, Any]]) -> int:
    """0 for a point of the grid, else the extension round that added its newest value."""
    return max([e["round"] for e in extensions if options.get(e["name"]) == e["value"]], default=0)


# --------------------------------------------------------------------- choosing


def select(scores: Sequence[Tuple[Mapping[str, Any], float]]) -> int:
    """Index of the point with the highest validation accuracy; ties: the first."""
    if not scores:
        raise ValueError("no grid point to choose from")
    best = 0
    for i, (_, accuracy) in enumerate(scores):
        if accuracy > scores[best][1]:
            best = i
    return best


def tuned_options(entry: Mapping[str, Any]) -> Tuple[Tuple[str, Any], ...]:
    """A chosen entry's options as a ``RunSpec.options`` tuple (grid order)."""
    if entry.get("options") is None:
        raise ValueError(f"{entry.get('label')}: tuning is incomplete (missing {len(entry['missing'])} run(s))")
    return tuple(entry["options"].items())


def same_as_preset(entry: Mapping[str, Any]) -> bool:
    """Whether a chosen entry's values are its preset's own: then its ``[tuned]`` row would
    repeat the untuned row run for run (the runs are deterministic), so the harness makes
    none and the notes say so."""
    from benchmarks.table2.methods import PRESETS

    if entry.get("options") is None:
        return False
    base = PRESETS[entry["preset"]].baselines
    return all(getattr(base, name) == value for name, value in entry["options"].items())


# --------------------------------------------------------------------- notes


def _values_text(values: Sequence[Any]) -> str:
    return "{" + ", ".join(_fmt(v) for v in values) + "}"


def format_notes(chosen: Mapping[str, Mapping[str, Any]]) -> str:
    """The Markdown section ``## Tuning (validation stream only)`` for ``table2.md``."""
    if not chosen:
        return ""
    entries = list(chosen.values())
    seeds = sorted({e["seed"] for e in entries})
    tasks = entries[0].get("tune_tasks")
    extend = entries[0].get("extend", 0)
    trained = ("`train_stream`" if tasks is None else
               f"the first {tasks} experience(s) of `train_stream`, scored on the first {tasks} of `valid_stream`")
    lines = [
        "",
        "## Tuning (validation stream only)",
        "",
        f"The rows marked `[tuned]` use the values chosen here on every seed; the other rows keep "
        f"preset `{entries[0]['preset']}`'s values. Each baseline hyper-parameter below was chosen "
        f"from a grid fixed in advance (`benchmarks/table2/tuning.py`) by the mean accuracy on the "
        f"benchmark's validation stream (`valid_stream`; task-aware, and task-free for the rows with one head "
        f"over the class ids) after the last task, trained on "
        f"{trained} on tuning seed {', '.join(map(str, seeds))} only; no tuning run reads the "
        f"test stream. Ties go to the first point in the order listed.",
        "",
        (f"Edge extension: where the best point sat at the smallest or largest value of an axis, one "
         f"value beyond that edge was added (the axis' own step, within its declared bounds), its new "
         f"points run and the best chosen again among all points; at most {extend} value(s) per axis."
         if extend else "Edge extension: off (`--tune-extend 0`)."),
    ]
    for method, e in chosen.items():
        names = list(e["grid"])
        grid_text = " × ".join(
            f"`{n}` ∈ {_values_text(e['grid'][n])}"
            + ("" if e["grid_note"].get(n, "absolute") == "absolute" else f" ({e['grid_note'][n]})")
            for n in names)
        extensions = e.get("extensions", [])
        lines += ["", f"### {e['label']} (`{method}`)", "", f"Grid: {grid_text}; seed {e['seed']}."]
        if extensions:
            searched = " × ".join(f"`{n}` ∈ {_values_text(e['searched'][n])}" for n in names)
            lines += ["", f"Extended to {searched}:", ""]
            lines += [f"- round {x['round']}: {x['reason']}" for x in extensions]
        if e["options"] is None:
            lines += ["", f"Incomplete: {len(e['missing'])} of {len(e['scores'])} point(s) not run "
                      f"yet; no value chosen."]
        else:
            chosen_text = ", ".join(f"`{n}` = {_fmt(v)}" for n, v in e["options"].items())
            images = e.get("validation_images")
            lines += ["", f"Chosen: {chosen_text} (validation accuracy {100 * e['validation_accuracy']:.2f}%"
                      + (f" on {images} validation images" if images else "") + ")."]
            if e.get("edges"):
                lines.append("At an edge of the searched values: "
                             + "; ".join(x["reason"] for x in e["edges"]) + ".")
            if same_as_preset(e):
                lines.append(f"These are preset `{e['preset']}`'s own values: no `[tuned]` row (it would "
                             "repeat the untuned row run for run); the untuned row is the tuned one.")
        lines += ["", "| " + " | ".join(names) + " | Validation acc (%) | Point | |",
                  "|" + "---|" * (len(names) + 3)]
        for options, accuracy in e["scores"]:
            mark = "chosen" if e["options"] is not None and options == e["options"] else ""
            acc = "not run" if accuracy is None else f"{100 * accuracy:.2f}"
            origin = point_round(options, extensions)
            origin = f"extension {origin}" if origin else "grid"
            lines.append("| " + " | ".join(_fmt(options[n]) for n in names) + f" | {acc} | {origin} | {mark} |")
    return "\n".join(lines) + "\n"


__all__ = ["DEFAULT_EXTEND", "SCALES", "SPLIT", "TUNED_VARIANT", "TUNING_GRIDS", "Axis", "Search", "Times", "as_axis",
           "format_notes", "grid_points", "grid_variant", "point_round", "resolved_grid", "same_as_preset", "search",
           "select", "tunable", "tuned_options"]
