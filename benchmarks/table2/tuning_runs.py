"""``--tune``'s runs: the tuning runs of :mod:`benchmarks.table2.tuning`'s search, executed as
harness runs scored on the validation stream into ``OUT/tuning/``, the choice written to
``OUT/tuning/chosen_<stream>_<preset>.json``, and the step of ``python -m
benchmarks.table2 --tune`` (:func:`harness_tune`).

A tuning run is a harness run (:class:`~benchmarks.table2.specs.RunSpec` with
``split="valid"``, one grid point's values as its ``options``): built, trained and timed
as a table row is (:func:`benchmarks.table2.engine.execute_run`, one code path), then
scored on ``valid_stream`` instead of the test stream. Runs resume: a rerun skips every
finished tuning run and replays the search from their scores.
"""
from __future__ import annotations

import dataclasses
import itertools
import json
import sys
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from avalanche_sdr import cli
from benchmarks.table2.engine import prepare_backbone
from benchmarks.table2.executors import executor_results
from benchmarks.table2.specs import RunSpec, pending_runs, run_id, tuned_equal_memory_variant
from benchmarks.table2.methods import METHODS
from benchmarks.table2.tuning import (DEFAULT_EXTEND, SPLIT, TUNED_VARIANT, Search, format_notes, grid_variant,
                               same_as_preset, search, tunable)


def tuning_specs(stream: str, preset: str, points: Mapping[str, Sequence[Mapping[str, Any]]], seed: int,
                 backbone_path: str, *, device: str = "cpu", threads: int = 0, data_root: Optional[str] = None,
                 tasks: Optional[int] = None) -> List[RunSpec]:
    """One ``RunSpec`` (``split="valid"``, on the first ``tasks`` experiences if given) per
    point of ``points`` (``{method: [options]}``)."""
    return [RunSpec(stream, preset, method, seed, backbone_path, device, threads, data_root,
                    variant=grid_variant(options, tasks), options=tuple(options.items()), split=SPLIT, tasks=tasks)
            for method, method_points in points.items() for options in method_points]


def tuning_dir(out_dir) -> Path:
    """``OUT/tuning``: the tuning runs' JSONs and the chosen file."""
    return Path(out_dir) / "tuning"


def run_tuning(specs: Sequence[Any], out_dir, *, jobs: int = 1, executor: str = "local",
               ray_address: Optional[str] = None, backbone: Union[str, Callable[[], str], None] = None,
               log=print) -> Dict[str, Dict[str, Any]]:
    """Execute the tuning runs whose JSON is not yet in ``OUT/tuning``; return
    ``{run_id: result}`` of every spec whose JSON exists afterwards.

    :param executor: ``"local"`` (the harness's process pool of ``jobs`` workers),
        ``"ray"`` (its Ray tasks) or ``"inline"`` (this process, one run after another;
        :func:`benchmarks.table2.executors.executor_results`).
    :param backbone: the E0 file for the runs to execute (or a function that makes it,
        called only if a run is pending); ``None``: the specs' own ``backbone_path``.
    """
    from tqdm import tqdm

    if any(s.split != SPLIT for s in specs):
        raise ValueError("tuning runs must be scored on the validation stream (split='valid')")
    folder = tuning_dir(out_dir)
    folder.mkdir(parents=True, exist_ok=True)
    todo = pending_runs(specs, folder)
    skipped = len(specs) - len(todo)
    if skipped and log is not None:
        log(f"tuning: skipping {skipped} finished tuning run(s) found in {folder}")
    if todo and backbone is not None:
        path = backbone() if callable(backbone) else backbone
        todo = [dataclasses.replace(spec, backbone_path=path) for spec in todo]
    if todo:
        results = executor_results(todo, executor, jobs=jobs, ray_address=ray_address)
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


def chosen_path(out_dir, stream: str, preset: str) -> Path:
    """``OUT/tuning/chosen_<stream>_<preset>.json``: the choice of every method tuned there."""
    return tuning_dir(out_dir) / f"chosen_{stream}_{preset}.json"


def _search_on_disk(stream: str, preset: str, method: str, seed: int, out_dir, grids, extend: int,
                    tasks: Optional[int]) -> Tuple[Search, Optional[int]]:
    """:func:`search` with the scores of the tuning runs in ``OUT/tuning``; also the
    number of validation images the runs were scored on."""
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


def check_tuned_runs(out_dir, stream: str, preset: str, seeds: Sequence[int],
                     chosen: Mapping[str, Mapping[str, Any]], equal_memory: Sequence[str] = ()) -> None:
    """Refuse ``[tuned]`` runs in ``OUT/runs`` made with other values than the chosen ones
    (e.g. before the grid or the tuning seed changed): they would be skipped, not rerun.
    The same for ER's tuned equal-memory rows of the references ``equal_memory``
    (``--equal-memory``; :func:`benchmarks.table2.specs.tuned_equal_memory_variant`), whose options
    are the chosen ones plus their sized ``replay_mem_size``.

    :raises SystemExit: naming the stale files to delete.
    """
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
    seed = args.seeds[0] if args.tune_seed is None else args.tune_seed
    extend = DEFAULT_EXTEND if getattr(args, "tune_extend", None) is None else args.tune_extend
    tasks = getattr(args, "tune_tasks", None)
    methods = tunable(args.methods)
    if args.report_only:
        chosen = choose(args.stream, args.preset, methods, seed, out_dir, extend=extend, tasks=tasks)
    else:
        def backbone() -> str:
            return prepare_backbone(args.stream, args.preset, seed, out_dir, device=args.device,
                                           data_root=args.data_root, weights=args.backbone_weights,
                                           references=args.e0_references)

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




__all__ = ["check_tuned_runs", "choose", "chosen_path", "harness_tune", "run_tuning", "tune", "tuning_dir",
           "tuning_specs"]
