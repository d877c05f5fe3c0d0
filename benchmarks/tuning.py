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

Grids (values of :class:`~avalanche_sdr.baselines.BaselineSettings` fields; each grid
contains the preset's own value, so tuning can keep the default):

- ``ewc`` (Online EWC): ``ewc_lambda`` in 1, 10, 100, 1000, 10000 x ``ewc_decay`` in
  0.9, 1.0 (10 runs). Absolute values. The penalty weight is the hyper-parameter
  online EWC is most sensitive to and its useful range depends on the loss scale and
  the Fisher magnitude of the stream, so the grid spans four decades around the
  preset's 100, one point per decade. The decay: the preset's 0.9, and 1.0 (no decay:
  every past task's importance kept at full weight, the natural alternative when every
  task is evaluated at the end). Lower decays forget the oldest tasks' importances
  within a few tasks, which no task-aware end-of-stream evaluation rewards.
- ``replay`` (ER): ``lr`` in 1e-4, 1e-3, 1e-2 x ``epochs`` in 0.5x, 1x, 2x the
  preset's epochs per task (rounded, at least 1; smoke 3: 2, 3, 6; cpu 10: 5, 10, 20;
  paper 100: 50, 100, 200) (9 runs). The learning rate absolute, one point per decade
  around the preset's Adam 1e-3; the epochs RELATIVE to the preset (:class:`Times`) so
  that one grid serves the smoke, cpu and paper budgets: with replay, fewer epochs
  over-fit the buffer less, more epochs fit each new task better.
- ``dgr`` (DGR, Avalanche ``GenerativeReplay``): the generator's size, ``dgr_latent_dim``
  (``MlpVAE``'s latent size ``nhid``, its one size knob: Avalanche fixes its hidden
  layers) in 2, 16, 64 (3 runs). Absolute: 2 is ``GenerativeReplay``'s own default
  generator (today's row), 16 ``MlpVAE``'s default, 64 a generator with room for a
  28x28 stream's variety.

Selection (:func:`select`): the grid point with the highest mean validation accuracy;
ties go to the first point in grid order (the order of the values above, the first
parameter varying slowest).

Files, under ``OUT/tuning/``: one JSON per tuning run,
``<stream>_<preset>_<method>_grid_<name>-<value>_..._seed<k>.json`` (written
atomically; a rerun skips the runs whose file exists, so tuning resumes), and
``chosen_<stream>_<preset>.json``::

    {method: {"options": {...} or null, "validation_accuracy": x or null,
              "grid": {name: [values]}, "grid_note": {name: "how the values were set"},
              "scores": [[options, accuracy or null], ...], "missing": [run ids],
              "validation_images": n, "seed": k, "stream": ..., "preset": ..., "label": ...}}

``python -m benchmarks.table2 --tune`` then adds a row ``<label> [tuned]`` per tuned
method (variant ``tuned``, the chosen options) on every ``--seeds`` seed, scored on the
test stream like every row, keeps the untuned rows (the preset's values), and appends
the section :func:`format_notes` (grid, every grid point's validation score, the chosen
values, the tuning seed) to ``table2.md``.
"""
from __future__ import annotations

import itertools
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

from avalanche_sdr import cli


@dataclass(frozen=True)
class Times:
    """Grid values relative to the preset: each factor x the preset's value of the
    field, rounded to the nearest int, at least 1 (duplicates after rounding dropped)."""

    factors: Tuple[float, ...]

    def resolve(self, base: float) -> List[int]:
        values: List[int] = []
        for factor in self.factors:
            value = max(1, int(math.floor(factor * base + 0.5)))
            if value not in values:
                values.append(value)
        return values

    def describe(self, base: float) -> str:
        return f"{', '.join(f'{f:g}x' for f in self.factors)} the preset's {base:g}"


TUNING_GRIDS: Dict[str, Dict[str, Any]] = {
    "ewc": {"ewc_lambda": (1.0, 10.0, 100.0, 1000.0, 10000.0), "ewc_decay": (0.9, 1.0)},
    "replay": {"lr": (1e-4, 1e-3, 1e-2), "epochs": Times((0.5, 1.0, 2.0))},
    "dgr": {"dgr_latent_dim": (2, 16, 64)},
}
"""Per tunable method: ``{BaselineSettings field: values}``; values a tuple (absolute)
or :class:`Times` (relative to the preset). Reasons: the module docstring."""

TUNED_VARIANT = "tuned"
"""Variant name (and row suffix ``[tuned]``) of the runs with the chosen values."""

SPLIT = "valid"
"""The only stream tuning runs are scored on."""


# --------------------------------------------------------------------- grids


def resolved_grid(method: str, preset: str, grids: Optional[Mapping[str, Mapping[str, Any]]] = None
                  ) -> Tuple[Dict[str, List[Any]], Dict[str, str]]:
    """The grid of ``method`` under ``preset``: ``({name: values}, {name: note})``,
    :class:`Times` entries resolved against ``PRESETS[preset].baselines``."""
    from benchmarks.methods import PRESETS

    grids = TUNING_GRIDS if grids is None else grids
    settings = PRESETS[preset].baselines
    values: Dict[str, List[Any]] = {}
    notes: Dict[str, str] = {}
    for name, spec in grids[method].items():
        if isinstance(spec, Times):
            base = getattr(settings, name)
            values[name] = spec.resolve(base)
            notes[name] = spec.describe(base)
        else:
            values[name] = list(spec)
            notes[name] = "absolute"
    return values, notes


def grid_points(grid: Mapping[str, Sequence[Any]]) -> List[Dict[str, Any]]:
    """Every combination of the grid's values, the first parameter varying slowest."""
    names = list(grid)
    return [dict(zip(names, combo)) for combo in itertools.product(*(grid[n] for n in names))]


def _fmt(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def grid_variant(options: Mapping[str, Any]) -> str:
    """Variant name of a grid point's tuning run, e.g. ``grid_ewc_lambda-100_ewc_decay-0.9``."""
    return "grid_" + "_".join(f"{name}-{_fmt(value)}" for name, value in options.items())


def tunable(methods: Sequence[str], grids: Optional[Mapping[str, Any]] = None) -> List[str]:
    """The methods of ``methods`` that have a grid, in the given order."""
    grids = TUNING_GRIDS if grids is None else grids
    return [m for m in methods if m in grids]


def tuning_specs(stream: str, preset: str, methods: Sequence[str], seed: int, backbone_path: str, *,
                 device: str = "cpu", threads: int = 0, data_root: Optional[str] = None,
                 grids: Optional[Mapping[str, Any]] = None) -> list:
    """One ``RunSpec`` (``split="valid"``) per grid point of every tunable method."""
    from benchmarks.table2 import RunSpec

    specs = []
    for method in tunable(methods, grids):
        grid, _ = resolved_grid(method, preset, grids)
        for options in grid_points(grid):
            specs.append(RunSpec(stream, preset, method, seed, backbone_path, device, threads, data_root,
                                 variant=grid_variant(options), options=tuple(options.items()), split=SPLIT))
    return specs


# --------------------------------------------------------------------- running


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
               ray_address: Optional[str] = None, log=print) -> Dict[str, Dict[str, Any]]:
    """Execute the tuning runs whose JSON is not yet in ``OUT/tuning``; return
    ``{run_id: result}`` of every spec whose JSON exists afterwards.

    :param executor: ``"local"`` (the harness's process pool of ``jobs`` workers),
        ``"ray"`` (its Ray tasks) or ``"inline"`` (this process, one run after another).
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
    """Index of the grid point with the highest validation accuracy; ties: the first."""
    if not scores:
        raise ValueError("no grid point to choose from")
    best = 0
    for i, (_, accuracy) in enumerate(scores):
        if accuracy > scores[best][1]:
            best = i
    return best


def chosen_path(out_dir, stream: str, preset: str) -> Path:
    return tuning_dir(out_dir) / f"chosen_{stream}_{preset}.json"


def choose(stream: str, preset: str, methods: Sequence[str], seed: int, out_dir,
           grids: Optional[Mapping[str, Any]] = None) -> Dict[str, Dict[str, Any]]:
    """The chosen values of every tunable method, from the tuning runs in ``OUT/tuning``.

    A method whose grid is not complete there gets ``"options": None`` and its missing
    run ids. Nothing is run; nothing but ``OUT/tuning`` is read.
    """
    from benchmarks.methods import METHODS
    from benchmarks.table2 import run_id

    folder = tuning_dir(out_dir)
    chosen: Dict[str, Dict[str, Any]] = {}
    for method in tunable(methods, grids):
        grid, notes = resolved_grid(method, preset, grids)
        scores: List[List[Any]] = []
        missing: List[str] = []
        validation_images = None
        for options in grid_points(grid):
            rid = run_id(stream, preset, method, seed, grid_variant(options))
            path = folder / f"{rid}.json"
            if path.exists():
                run = json.loads(path.read_text())
                if run.get("split") != SPLIT:  # never choose on anything but validation scores
                    raise ValueError(f"{path} is not a validation-stream run")
                scores.append([options, run["average_accuracy"]])
                if run.get("task_sizes"):
                    validation_images = sum(t["valid"] for t in run["task_sizes"])
            else:
                scores.append([options, None])
                missing.append(rid)
        entry = {"label": METHODS[method].label, "stream": stream, "preset": preset, "seed": seed,
                 "grid": grid, "grid_note": notes, "scores": scores, "missing": missing,
                 "validation_images": validation_images, "options": None, "validation_accuracy": None}
        if not missing:
            best = select([(o, a) for o, a in scores])
            entry["options"], entry["validation_accuracy"] = scores[best]
        chosen[method] = entry
    return chosen


def tune(stream: str, preset: str, methods: Sequence[str], seed: int, out_dir, backbone_path: str, *,
         jobs: int = 1, executor: str = "local", ray_address: Optional[str] = None, device: str = "cpu",
         threads: int = 0, data_root: Optional[str] = None, grids: Optional[Mapping[str, Any]] = None,
         log=print) -> Dict[str, Dict[str, Any]]:
    """Run the pending tuning runs of ``methods`` on ``seed`` (validation stream only),
    choose, write ``OUT/tuning/chosen_<stream>_<preset>.json``; return the choice
    (:func:`choose`)."""
    specs = tuning_specs(stream, preset, methods, seed, backbone_path, device=device, threads=threads,
                         data_root=data_root, grids=grids)
    if log is not None and specs:
        log(f"tuning {', '.join(tunable(methods, grids))} on the validation stream, seed {seed}: "
            f"{len(specs)} grid point(s)")
    run_tuning(specs, out_dir, jobs=jobs, executor=executor, ray_address=ray_address, log=log)
    chosen = choose(stream, preset, methods, seed, out_dir, grids)
    cli.write_json(chosen_path(out_dir, stream, preset), chosen)
    return chosen


def tuned_options(entry: Mapping[str, Any]) -> Tuple[Tuple[str, Any], ...]:
    """A chosen entry's options as a ``RunSpec.options`` tuple (grid order)."""
    if entry.get("options") is None:
        raise ValueError(f"{entry.get('label')}: tuning is incomplete (missing {len(entry['missing'])} run(s))")
    return tuple(entry["options"].items())


def check_tuned_runs(out_dir, stream: str, preset: str, seeds: Sequence[int],
                     chosen: Mapping[str, Mapping[str, Any]]) -> None:
    """Refuse ``[tuned]`` runs in ``OUT/runs`` made with other values than the chosen ones
    (e.g. before the grid or the tuning seed changed): they would be skipped, not rerun.

    :raises SystemExit: naming the stale files to delete.
    """
    from benchmarks.table2 import run_id

    stale = []
    for method, entry in chosen.items():
        if entry.get("options") is None:
            continue
        for seed in seeds:
            path = Path(out_dir) / "runs" / f"{run_id(stream, preset, method, seed, TUNED_VARIANT)}.json"
            if path.exists() and json.loads(path.read_text()).get("options") != dict(entry["options"]):
                stale.append(str(path))
    if stale:
        raise SystemExit("tuned run(s) made with other values than the chosen ones (delete them to rerun): "
                         + ", ".join(stale))


def harness_tune(args, out_dir, threads: int, log=print) -> Tuple[Dict[str, Dict[str, Any]], str]:
    """The ``--tune`` step of ``python -m benchmarks.table2``.

    Tunes the tunable ``args.methods`` on ``args.tune_seed`` (default ``args.seeds[0]``),
    through the harness's executor (``args.executor``, ``args.jobs``), resuming from
    ``OUT/tuning``; with ``args.report_only`` runs nothing and chooses from the files
    there. Returns ``(chosen entries with values, notes)``: the methods that get a
    ``[tuned]`` row, and the Markdown section for ``table2.md``.

    :raises SystemExit: a tuning run failed, or stale ``[tuned]`` runs are in ``OUT/runs``.
    """
    from benchmarks import table2

    seed = args.seeds[0] if args.tune_seed is None else args.tune_seed
    methods = tunable(args.methods)
    if args.report_only:
        chosen = choose(args.stream, args.preset, methods, seed, out_dir)
    else:
        specs = tuning_specs(args.stream, args.preset, methods, seed, "")
        if table2.pending_runs(specs, tuning_dir(out_dir)):
            backbone = table2.prepare_backbone(args.stream, args.preset, seed, out_dir, device=args.device,
                                               data_root=args.data_root, weights=args.backbone_weights)
        else:
            backbone = ""
        chosen = tune(args.stream, args.preset, methods, seed, out_dir, backbone, jobs=args.jobs,
                      executor=args.executor, ray_address=args.ray_address, device=args.device,
                      threads=threads, data_root=args.data_root, log=log)
        missing = [rid for e in chosen.values() for rid in e["missing"]]
        if missing:
            raise SystemExit(f"{len(missing)} tuning run(s) failed (no JSON in {tuning_dir(out_dir)}): "
                             + ", ".join(missing))
        if log is not None:
            for method, e in chosen.items():
                log(f"tuning {method}: chose {e['options']} (validation acc "
                    f"{100 * e['validation_accuracy']:.2f}%)")
    check_tuned_runs(out_dir, args.stream, args.preset, args.seeds, chosen)
    return {m: e for m, e in chosen.items() if e["options"] is not None}, format_notes(chosen)


# --------------------------------------------------------------------- notes


def format_notes(chosen: Mapping[str, Mapping[str, Any]]) -> str:
    """The Markdown section ``## Tuning (validation stream only)`` for ``table2.md``."""
    if not chosen:
        return ""
    entries = list(chosen.values())
    seeds = sorted({e["seed"] for e in entries})
    lines = [
        "",
        "## Tuning (validation stream only)",
        "",
        f"The rows marked `[tuned]` use the values chosen here on every seed; the other rows keep "
        f"preset `{entries[0]['preset']}`'s values. Each baseline hyper-parameter below was chosen "
        f"from a grid fixed in advance (`benchmarks/tuning.py`) by the mean task-aware accuracy on the "
        f"benchmark's validation stream (`valid_stream`) after the last task, trained on "
        f"`train_stream` on tuning seed {', '.join(map(str, seeds))} only; no tuning run reads the "
        f"test stream. Ties go to the first grid point in the order listed.",
    ]
    for method, e in chosen.items():
        names = list(e["grid"])
        grid_text = " × ".join(
            f"`{n}` ∈ {{{', '.join(_fmt(v) for v in e['grid'][n])}}}"
            + ("" if e["grid_note"].get(n, "absolute") == "absolute" else f" ({e['grid_note'][n]})")
            for n in names)
        lines += ["", f"### {e['label']} (`{method}`)", "", f"Grid: {grid_text}; seed {e['seed']}."]
        if e["options"] is None:
            lines += ["", f"Incomplete: {len(e['missing'])} of {len(e['scores'])} grid point(s) not run "
                      f"yet; no value chosen."]
        else:
            chosen_text = ", ".join(f"`{n}` = {_fmt(v)}" for n, v in e["options"].items())
            images = e.get("validation_images")
            lines += ["", f"Chosen: {chosen_text} (validation accuracy {100 * e['validation_accuracy']:.2f}%"
                      + (f" on {images} validation images" if images else "") + ")."]
            edges = [n for n in names if len(e["grid"][n]) > 2
                     and e["options"][n] in (e["grid"][n][0], e["grid"][n][-1])]
            if edges:
                lines.append(f"At the edge of the grid: {', '.join(f'`{n}`' for n in edges)} (a wider grid "
                             "might score higher).")
        lines += ["", "| " + " | ".join(names) + " | Validation acc (%) | |",
                  "|" + "---|" * (len(names) + 2)]
        for options, accuracy in e["scores"]:
            mark = "chosen" if e["options"] is not None and options == e["options"] else ""
            acc = "not run" if accuracy is None else f"{100 * accuracy:.2f}"
            lines.append("| " + " | ".join(_fmt(options[n]) for n in names) + f" | {acc} | {mark} |")
    return "\n".join(lines) + "\n"


__all__ = ["SPLIT", "TUNED_VARIANT", "TUNING_GRIDS", "Times", "check_tuned_runs", "choose", "chosen_path",
           "format_notes", "grid_points", "grid_variant", "harness_tune", "resolved_grid", "run_tuning", "select",
           "tunable", "tune", "tuned_options", "tuning_specs"]
