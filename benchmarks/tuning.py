"""Baseline hyper-parameters chosen on validation data only (``python -m benchmarks.table2 --tune``).

Every baseline hyper-parameter that the paper and Avalanche leave open is chosen per
stream (and preset) from the small grid :data:`TUNING_GRIDS`, fixed here in advance,
by one number: the mean task-aware accuracy on the benchmark's ``valid_stream`` after
the last training task. No tuning run reads ``test_stream``.

A tuning run is a harness run (:class:`benchmarks.table2.RunSpec` with
``split="valid"``, one grid point's values as its ``options``): the method is built,
trained on ``train_stream`` and timed exactly as a table row is
(:func:`benchmarks.table2.execute_run`, one code path), then scored with
``strategy.eval(valid_stream)`` (:func:`~avalanche_sdr.training.stream_runner.final_test_accuracies`
on the validation stream) instead of the test stream.
Tuning uses ONE seed, the tuning seed (``--tune-seed``, default the first of
``--seeds``), to bound its cost; the chosen values then serve every seed.

Grids (values of :class:`~avalanche_sdr.baselines.BaselineSettings` fields, each an
:class:`Axis`; each grid contains the preset's own value, so tuning can keep the
default; every axis ascending):

- ``ewc`` (Online EWC): ``ewc_lambda`` in 1, 10, 100, 1000, 10000 x ``ewc_decay`` in
  0.9, 1.0 (10 runs). Absolute values. The penalty weight is the hyper-parameter
  online EWC is most sensitive to and its useful range depends on the loss scale and
  the Fisher magnitude of the stream, so the grid spans four decades around the
  preset's 100, one point per decade. The decay: the preset's 0.9, and 1.0 (no decay:
  every past task's importance kept at full weight, the natural alternative when every
  task is evaluated at the end). Lower decays forget the oldest tasks' importances
  within a few tasks, which no task-aware end-of-stream evaluation rewards.
  Extension: ``ewc_lambda`` on a log scale, unbounded; ``ewc_decay`` on a linear scale
  within [0, 1] (a decay above 1 would grow old importances), so only downwards.
- ``replay`` (ER): ``lr`` in 1e-4, 1e-3, 1e-2 x ``epochs`` in 0.5x, 1x, 2x the
  preset's epochs per task (rounded, at least 1; smoke 3: 2, 3, 6; cpu 10: 5, 10, 20;
  paper 100: 50, 100, 200) (9 runs). The learning rate absolute, one point per decade
  around the preset's Adam 1e-3; the epochs RELATIVE to the preset (:class:`Times`) so
  that one grid serves the smoke, cpu and paper budgets: with replay, fewer epochs
  over-fit the buffer less, more epochs fit each new task better.
  Extension: ``lr`` on a log scale (so always > 0), at most 1.0 (Adam steps of the
  weights' own size); ``epochs``' factors on a log scale (2x -> 4x, 0.5x -> 0.25x),
  rounded, at least 1 epoch.
- ``dgr`` (DGR, Avalanche ``GenerativeReplay``): the generator's size, ``dgr_latent_dim``
  (``MlpVAE``'s latent size ``nhid``, its one size knob: Avalanche fixes its hidden
  layers) in 2, 16, 64 (3 runs). Absolute: 2 is ``GenerativeReplay``'s own default
  generator (today's row), 16 ``MlpVAE``'s default, 64 a generator with room for a
  28x28 stream's variety. Extension: log scale (64 -> 256 -> 1024), integers in
  [1, 1024] (``MlpVAE`` computes its latent code from a 128-unit layer: 1024 is 8 times
  that width already).

Selection (:func:`select`): the point with the highest mean validation accuracy; ties
go to the first point in scoring order: the grid's points (the order of the values
above, the first parameter varying slowest), then those of each extension round in
turn (so an extension changes the choice only by scoring strictly higher).

Edge extension (``--tune-extend N``, default :data:`DEFAULT_EXTEND` = 2; 0 disables),
declared here for every stream, including streams not yet run: once every point scored
so far has its score, the best point is selected; for every axis of two or more values
on which the best point's value is the axis' smallest or largest, ONE value is added
beyond that edge, if the axis allows it:

- the new value continues the axis' step at that edge: on a ``"log"`` axis the edge
  times the ratio of its two outermost values (1000, 10000 -> 1e5; 1e-3, 1e-4 ->
  1e-5; 16, 64 -> 256; a :class:`Times` axis' factors: 1x, 2x -> 4x, 1x, 0.5x ->
  0.25x), on a ``"linear"`` axis the edge plus their difference (1.0, 0.9 -> 0.8);
  integer axes are rounded (a :class:`Times` axis as its grid: rounded, at least 1);
- no value is added where the new value falls outside the axis' declared bounds
  (``low`` / ``high``, inclusive), where it rounds to a value already on the axis
  (e.g. 0.25x of 3 epochs is 1, 0.125x is 1 again), on an axis without a ``scale``,
  or where the axis has had N values added already (at most N per axis in all);
- the new points are the new value(s) combined with every value of the other axes
  (every point of the grid so extended that has not been scored): one round. These
  points are run, the best point is selected again among ALL points, and the rule
  applies again, until no value is added.

The search is a function of the scores alone, so it is replayed from the tuning runs on
disk: a rerun skips every finished run and resumes at the first round with missing
points (``--report-only`` chooses from the files without running). The chosen file
and the notes list every scored point, the values added and why ("added 1e+05: best
10000 was ewc_lambda's largest"), and, where the choice still sits at an edge, why it
was not extended.

Tuning on a prefix of the stream (``--tune-tasks K``, default: the whole stream): the
tuning runs train on the first K experiences of ``train_stream`` and are scored on the
first K experiences of ``valid_stream`` (as Chaudhry et al. 2019, A-GEM, cross-validate
on the first tasks of a long stream); the test stream is still never read. Their run
ids end in ``_first<K>`` (:func:`grid_variant`), so prefix and whole-stream tuning runs
never stand in for each other; the chosen file and the notes record K. The ``[tuned]``
rows then run on the whole stream like every row.

Files, under ``OUT/tuning/``: one JSON per tuning run,
``<stream>_<preset>_<method>_grid_<name>-<value>_...[_first<K>]_seed<k>.json`` (written
atomically; a rerun skips the runs whose file exists, so tuning resumes), and
``chosen_<stream>_<preset>.json`` (one entry per method; tuning a method replaces its
entry and keeps the others, so methods may be tuned by separate commands)::

    {method: {"options": {...} or null, "validation_accuracy": x or null,
              "grid": {name: [values]}, "grid_note": {name: "how the values were set"},
              "searched": {name: [values, extensions included]},
              "extensions": [{"name", "value", "round", "reason"}, ...],
              "edges": [{"name", "value", "reason"}, ...],  # chosen value at an edge, not extended
              "scores": [[options, accuracy or null], ...], "missing": [run ids],
              "extend": N, "tune_tasks": K or null, "validation_images": n, "seed": k,
              "stream": ..., "preset": ..., "label": ...}}

``python -m benchmarks.table2 --tune`` then adds a row ``<label> [tuned]`` per tuned
method (variant ``tuned``, the chosen options) on every ``--seeds`` seed, scored on the
test stream like every row (none where the chosen values are the preset's own,
:func:`same_as_preset`: the runs are deterministic, so it would repeat the untuned
row), keeps the untuned rows (the preset's values); with ``--equal-memory REF``, ER's
tuned values also run at REF's memory (row ``<label> [mem_REF_tuned]``, the chosen options
and the sized ``replay_mem_size``, :func:`benchmarks.table2.equal_memory_targets`); and appends the section
:func:`format_notes` (grid, extensions, every point's validation score, the chosen
values, the tuning seed) to ``table2.md``.
"""
from __future__ import annotations

import dataclasses
import itertools
import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

from avalanche_sdr import cli


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
}
"""Per tunable method: ``{BaselineSettings field: Axis}`` (values absolute, or
:class:`Times` relative to the preset; the extension scale and bounds). Reasons: the
module docstring."""

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
    from benchmarks.methods import PRESETS

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
    (module docstring) as far as every point of a round has a score. The result's
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


# --------------------------------------------------------------------- running


def tuning_specs(stream: str, preset: str, points: Mapping[str, Sequence[Mapping[str, Any]]], seed: int,
                 backbone_path: str, *, device: str = "cpu", threads: int = 0, data_root: Optional[str] = None,
                 tasks: Optional[int] = None) -> list:
    """One ``RunSpec`` (``split="valid"``, on the first ``tasks`` experiences if given) per
    point of ``points`` (``{method: [options]}``)."""
    from benchmarks.table2 import RunSpec

    return [RunSpec(stream, preset, method, seed, backbone_path, device, threads, data_root,
                    variant=grid_variant(options, tasks), options=tuple(options.items()), split=SPLIT, tasks=tasks)
            for method, method_points in points.items() for options in method_points]


def _inline_results(todo: Sequence[Any]) -> Iterator[Tuple[Any, Any]]:
    """Run the specs one after the other in this process (tests, debugging)."""
    from benchmarks import table2

    for spec in todo:
        try:
            yield spec, table2.execute_run(spec)
        except Exception as error:  # as the pools do: keep the other runs going
            yield spec, error


def tuning_dir(out_dir) -> Path:
    return Path(out_dir) / "tuning"


def run_tuning(specs: Sequence[Any], out_dir, *, jobs: int = 1, executor: str = "local",
               ray_address: Optional[str] = None, backbone: Union[str, Callable[[], str], None] = None,
               log=print) -> Dict[str, Dict[str, Any]]:
    """Execute the tuning runs whose JSON is not yet in ``OUT/tuning``; return
    ``{run_id: result}`` of every spec whose JSON exists afterwards.

    :param executor: ``"local"`` (the harness's process pool of ``jobs`` workers),
        ``"ray"`` (its Ray tasks) or ``"inline"`` (this process, one run after another).
    :param backbone: the E0 file for the runs to execute (or a function that makes it,
        called only if a run is pending); ``None``: the specs' own ``backbone_path``.
    """
    from tqdm import tqdm

    from benchmarks import table2

    if any(s.split != SPLIT for s in specs):
        raise ValueError("tuning runs must be scored on the validation stream (split='valid')")
    folder = tuning_dir(out_dir)
    folder.mkdir(parents=True, exist_ok=True)
    todo = table2.pending_runs(specs, folder)
    skipped = len(specs) - len(todo)
    if skipped and log is not None:
        log(f"tuning: skipping {skipped} finished tuning run(s) found in {folder}")
    if todo and backbone is not None:
        path = backbone() if callable(backbone) else backbone
        todo = [dataclasses.replace(spec, backbone_path=path) for spec in todo]
    if todo:
        if executor == "inline":
            results = _inline_results(todo)
        elif executor == "local":
            results = table2._local_results(todo, jobs)
        elif executor == "ray":
            results = table2._ray_results(todo, ray_address, max(s.threads for s in todo))
        else:
            raise ValueError(f"executor must be 'local', 'ray' or 'inline', got {executor!r}")
        with tqdm(total=len(todo), desc="tuning runs", unit="run", file=sys.stderr, disable=log is None) as bar:
            for spec, outcome in results:
                if isinstance(outcome, Exception):
                    line = f"{spec.run_id}: FAILED {type(outcome).__name__}: {outcome}"
                else:
                    cli.write_json(folder / f"{spec.run_id}.json", outcome)
                    line = (f"{spec.run_id}: validation acc {100 * outcome['average_accuracy']:.2f}%  "
                            f"{outcome['wall_seconds']:.1f}s")
                if log is not None:
                    (bar.write if log is print else log)(line)  # print: above the bar, as run_all does
                bar.update(1)
    found = {}
    for spec in specs:
        path = folder / f"{spec.run_id}.json"
        if path.exists():
            found[spec.run_id] = json.loads(path.read_text())
    return found


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


def chosen_path(out_dir, stream: str, preset: str) -> Path:
    return tuning_dir(out_dir) / f"chosen_{stream}_{preset}.json"


def _search_on_disk(stream: str, preset: str, method: str, seed: int, out_dir, grids, extend: int,
                    tasks: Optional[int]) -> Tuple[Search, Optional[int]]:
    """:func:`search` with the scores of the tuning runs in ``OUT/tuning``; also the
    number of validation images the runs were scored on."""
    from benchmarks.table2 import run_id

    folder = tuning_dir(out_dir)
    images: List[Optional[int]] = [None]

    def score(options: Dict[str, Any]) -> Optional[float]:
        path = folder / f"{run_id(stream, preset, method, seed, grid_variant(options, tasks))}.json"
        if not path.exists():
            return None
        run = json.loads(path.read_text())
        if run.get("split") != SPLIT:  # never choose on anything but validation scores
            raise ValueError(f"{path} is not a validation-stream run")
        if run.get("tasks") != tasks:
            raise ValueError(f"{path} was trained on {run.get('tasks') or 'all'} task(s), not {tasks or 'all'}")
        if run.get("task_sizes"):
            images[0] = sum(t["valid"] for t in run["task_sizes"][:tasks])
        return run["average_accuracy"]

    return search(method, preset, score, extend=extend, grids=grids), images[0]


def choose(stream: str, preset: str, methods: Sequence[str], seed: int, out_dir,
           grids: Optional[Mapping[str, Any]] = None, *, extend: int = DEFAULT_EXTEND,
           tasks: Optional[int] = None) -> Dict[str, Dict[str, Any]]:
    """The chosen values of every tunable method, from the tuning runs in ``OUT/tuning``
    (the search replayed from them: :func:`search`).

    A method whose search has points without a run there gets ``"options": None`` and
    their run ids. Nothing is run; nothing but ``OUT/tuning`` is read.
    """
    from benchmarks.methods import METHODS
    from benchmarks.table2 import run_id

    chosen: Dict[str, Dict[str, Any]] = {}
    for method in tunable(methods, grids):
        found, images = _search_on_disk(stream, preset, method, seed, out_dir, grids, extend, tasks)
        entry = {"label": METHODS[method].label, "stream": stream, "preset": preset, "seed": seed,
                 "tune_tasks": tasks, "extend": extend, "grid": found.grid, "grid_note": found.grid_note,
                 "searched": found.searched, "extensions": found.extensions, "edges": found.edges,
                 "scores": [[o, a] for o, a in zip(found.points, found.scores)],
                 "missing": [run_id(stream, preset, method, seed, grid_variant(o, tasks)) for o in found.missing],
                 "validation_images": images, "options": None, "validation_accuracy": None}
        if found.best is not None:
            entry["options"], entry["validation_accuracy"] = entry["scores"][found.best]
        chosen[method] = entry
    return chosen


def tune(stream: str, preset: str, methods: Sequence[str], seed: int, out_dir,
         backbone_path: Union[str, Callable[[], str]], *, jobs: int = 1, executor: str = "local",
         ray_address: Optional[str] = None, device: str = "cpu", threads: int = 0, data_root: Optional[str] = None,
         grids: Optional[Mapping[str, Any]] = None, extend: int = DEFAULT_EXTEND, tasks: Optional[int] = None,
         log=print) -> Dict[str, Dict[str, Any]]:
    """Run the pending tuning runs of ``methods`` on ``seed`` (validation stream only,
    the first ``tasks`` experiences if given), round after round of edge extension (at
    most ``extend`` values per axis), choose, write ``OUT/tuning/chosen_<stream>_<preset>.json``
    (the entries of methods not in ``methods`` kept); return the choice of ``methods``
    (:func:`choose`). ``backbone_path`` may be a function making the E0 file, called
    only when a run is to be executed. A round's runs of all methods go
    to the executor together; a failed run is not retried (its method stays without a
    choice, its run id in ``missing``).
    """
    methods = tunable(methods, grids)
    _chosen_on_disk(out_dir, stream, preset)  # a file this would have to overwrite stops it before any run
    if log is not None and methods:
        log(f"tuning {', '.join(methods)} on the validation stream, seed {seed}, "
            + ("the whole stream" if tasks is None else f"the first {tasks} task(s)")
            + f", at most {extend} value(s) added beyond an axis' edges")
    made: List[str] = []

    def backbone() -> str:  # made once, and only if a run is to be executed
        if not made:
            made.append(backbone_path() if callable(backbone_path) else backbone_path)
        return made[0]

    submitted: set = set()
    for _ in itertools.count():
        searches = {m: _search_on_disk(stream, preset, m, seed, out_dir, grids, extend, tasks)[0] for m in methods}
        specs = [s for s in tuning_specs(stream, preset, {m: f.points for m, f in searches.items()}, seed, "",
                                         device=device, threads=threads, data_root=data_root, tasks=tasks)
                 if s.run_id not in submitted]
        if not specs:
            break
        submitted.update(s.run_id for s in specs)
        run_tuning(specs, out_dir, jobs=jobs, executor=executor, ray_address=ray_address, backbone=backbone,
                   log=log)
    chosen = choose(stream, preset, methods, seed, out_dir, grids, extend=extend, tasks=tasks)
    # read again: another command may have tuned another method meanwhile
    cli.write_json(chosen_path(out_dir, stream, preset), {**_chosen_on_disk(out_dir, stream, preset), **chosen})
    return chosen


def _chosen_on_disk(out_dir, stream: str, preset: str) -> Dict[str, Any]:
    """The entries already in ``chosen_<stream>_<preset>.json`` (``{}`` if there is none),
    so that tuning one method keeps the choice of another tuned by an earlier command.

    :raises SystemExit: the file is there but is not a JSON object.
    """
    path = chosen_path(out_dir, stream, preset)
    if not path.exists():
        return {}
    try:
        entries = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise SystemExit(f"{path}: cannot read the earlier tuning choices ({err}); move it away to start afresh")
    if not isinstance(entries, dict):
        raise SystemExit(f"{path}: expected a JSON object of method -> choice, found {type(entries).__name__}; "
                         "move it away to start afresh")
    return entries


def tuned_options(entry: Mapping[str, Any]) -> Tuple[Tuple[str, Any], ...]:
    """A chosen entry's options as a ``RunSpec.options`` tuple (grid order)."""
    if entry.get("options") is None:
        raise ValueError(f"{entry.get('label')}: tuning is incomplete (missing {len(entry['missing'])} run(s))")
    return tuple(entry["options"].items())


def check_tuned_runs(out_dir, stream: str, preset: str, seeds: Sequence[int],
                     chosen: Mapping[str, Mapping[str, Any]], equal_memory: Sequence[str] = ()) -> None:
    """Refuse ``[tuned]`` runs in ``OUT/runs`` made with other values than the chosen ones
    (e.g. before the grid or the tuning seed changed): they would be skipped, not rerun.
    The same for ER's tuned equal-memory rows of the references ``equal_memory``
    (``--equal-memory``; :func:`benchmarks.table2.tuned_equal_memory_variant`), whose options
    are the chosen ones plus their sized ``replay_mem_size``.

    :raises SystemExit: naming the stale files to delete.
    """
    from benchmarks.table2 import run_id, tuned_equal_memory_variant

    stale = []
    for method, entry in chosen.items():
        if entry.get("options") is None:
            continue
        variants = [TUNED_VARIANT]
        if method == "replay":
            variants += [v for v in map(tuned_equal_memory_variant, equal_memory) if v]
        for seed in seeds:
            for variant in variants:
                path = Path(out_dir) / "runs" / f"{run_id(stream, preset, method, seed, variant)}.json"
                if not path.exists():
                    continue
                options = dict(json.loads(path.read_text()).get("options") or {})
                if variant != TUNED_VARIANT:
                    options.pop("replay_mem_size", None)
                if options != dict(entry["options"]):
                    stale.append(str(path))
    if stale:
        raise SystemExit("tuned run(s) made with other values than the chosen ones (delete them to rerun): "
                         + ", ".join(stale))


def harness_tune(args, out_dir, threads: int, log=print) -> Tuple[Dict[str, Dict[str, Any]], str]:
    """The ``--tune`` step of ``python -m benchmarks.table2``.

    Tunes the tunable ``args.methods`` on ``args.tune_seed`` (default ``args.seeds[0]``),
    on the first ``args.tune_tasks`` experiences (default: all), with at most
    ``args.tune_extend`` (default :data:`DEFAULT_EXTEND`) values added beyond each
    axis' edges, through the harness's executor (``args.executor``, ``args.jobs``),
    resuming from ``OUT/tuning``; with ``args.report_only`` runs nothing and chooses
    from the files there. Returns ``(chosen entries with values, notes)``: the methods
    that get a ``[tuned]`` row, and the Markdown section for ``table2.md``.

    :raises SystemExit: a tuning run failed, or stale ``[tuned]`` runs are in ``OUT/runs``.
    """
    from benchmarks import table2

    seed = args.seeds[0] if args.tune_seed is None else args.tune_seed
    extend = DEFAULT_EXTEND if getattr(args, "tune_extend", None) is None else args.tune_extend
    tasks = getattr(args, "tune_tasks", None)
    methods = tunable(args.methods)
    if args.report_only:
        chosen = choose(args.stream, args.preset, methods, seed, out_dir, extend=extend, tasks=tasks)
    else:
        def backbone() -> str:
            return table2.prepare_backbone(args.stream, args.preset, seed, out_dir, device=args.device,
                                           data_root=args.data_root, weights=args.backbone_weights)

        chosen = tune(args.stream, args.preset, methods, seed, out_dir, backbone, jobs=args.jobs,
                      executor=args.executor, ray_address=args.ray_address, device=args.device,
                      threads=threads, data_root=args.data_root, extend=extend, tasks=tasks, log=log)
        missing = [rid for e in chosen.values() for rid in e["missing"]]
        if missing:
            raise SystemExit(f"{len(missing)} tuning run(s) failed (no JSON in {tuning_dir(out_dir)}): "
                             + ", ".join(missing))
        if log is not None:
            for method, e in chosen.items():
                log(f"tuning {method}: chose {e['options']} (validation acc "
                    f"{100 * e['validation_accuracy']:.2f}%)"
                    + ("; the preset's own values: no [tuned] row" if same_as_preset(e) else ""))
    check_tuned_runs(out_dir, args.stream, args.preset, args.seeds, chosen,
                     getattr(args, "equal_memory", None) or [])
    return ({m: e for m, e in chosen.items() if e["options"] is not None and not same_as_preset(e)},
            format_notes(chosen))


def same_as_preset(entry: Mapping[str, Any]) -> bool:
    """Whether a chosen entry's values are its preset's own: then its ``[tuned]`` row would
    repeat the untuned row run for run (the runs are deterministic), so the harness makes
    none and the notes say so."""
    from benchmarks.methods import PRESETS

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
        f"from a grid fixed in advance (`benchmarks/tuning.py`) by the mean task-aware accuracy on the "
        f"benchmark's validation stream (`valid_stream`) after the last task, trained on "
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


__all__ = ["DEFAULT_EXTEND", "SPLIT", "TUNED_VARIANT", "TUNING_GRIDS", "Axis", "Search", "Times", "as_axis",
           "check_tuned_runs", "choose", "chosen_path", "format_notes", "grid_points", "grid_variant",
           "harness_tune", "point_round", "resolved_grid", "run_tuning", "same_as_preset", "search", "select",
           "tunable", "tune", "tuned_options", "tuning_specs"]
