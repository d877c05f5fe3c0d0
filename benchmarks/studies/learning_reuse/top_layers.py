"""Updates of an entry's top only, and fewer update epochs: what they save and what they cost.

Issue #45, item 3 ("compute that follows what is new"). The learning reuse's update
trains every adapter and BatchNorm copy of the entry for ``reuse_epochs`` (10 in the CPU
preset). Two options cut that: ``LearningReuse(top_layers=K)`` trains only the entry's
last K adapted convolutions (and the BatchNorm copies after them), so no gradient flows
below them, and ``LearningReuse(epochs=E)`` trains E epochs. The candidates
(:data:`CANDIDATES`), the validation streams (:data:`VALIDATION`) and the rule
(:func:`choose`) were fixed before any run; docs/results/learning_reuse/top_layers.md
states them in words and gives the outcome.

``run``: one stream and seed, the rows asked for, in one process and one E0, through the
Table 2 harness's engine with CPU seconds per run
(:func:`benchmarks.studies.where_the_time_goes.cost.measure_runs`); ``table``: every run
under the folders given, as a Markdown table, and the rule's choice where the validation
runs are all there.
"""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from avalanche_sdr import cli
from benchmarks.studies.where_the_time_goes.cost import measure_runs, run_cpu
from benchmarks.table2 import catalogue

HEAD, DEFAULT = "head", "accumulate"

CANDIDATES: Dict[str, Dict[str, str]] = {
    "top1": {"update_top_layers": "1"},
    "top2": {"update_top_layers": "2"},
    "epochs3": {"update_epochs": "3"},
    "top1_epochs3": {"update_top_layers": "1", "update_epochs": "3"},
    "top2_epochs3": {"update_top_layers": "2", "update_epochs": "3"},
}
"""The candidate updates (harness update flags and their words), beside ``head`` (the
head-only reuse) and ``accumulate`` (the learning reuse's defaults: every layer, 10 epochs in
the CPU preset). ``top2`` is the last residual block on the ResNet-20 of ``emnist100`` and
the last two of three convolutions on the small CNN of the Fashion-MNIST streams."""

def study_rows(candidates: Dict[str, Dict[str, str]]) -> Tuple[str, ...]:
    """A study's row names: ``head``, ``accumulate``, then its candidates."""
    return (HEAD, DEFAULT, *candidates)


ROWS = study_rows(CANDIDATES)

VALIDATION: Dict[str, Tuple[int, ...]] = {"fashion10": (10, 11, 12), "fashion50": (10,), "emnist100": (10,)}
"""The validation streams and seeds (CPU preset): never reported. The learning reuse's
earlier choices (update epochs) used the same Fashion-MNIST seeds."""

MEAN_MARGIN = 0.05
"""Points a candidate's mean accuracy over the fashion10 validation seeds may lie below the
default's (the update-epochs rule's margin)."""

STREAM_MARGIN = 0.1
"""Points a candidate's accuracy on each other validation stream may lie below the default's
(the issue's "within 0.1 pt of today's recommended rows")."""


def row(name: str, candidates: Dict[str, Dict[str, str]] = CANDIDATES) -> tuple:
    """The harness row ``(method, variant, options)`` of a row name: ``head``, ``accumulate``
    or a name of ``candidates`` (default: this study's :data:`CANDIDATES`)."""
    from benchmarks.table2.variants import Row, update_rows

    if name == HEAD:
        return "sdr_two_sample_nogen", "", ()
    base = Row("sdr_two_sample_nogen", "accumulate", (("reuse", "accumulate"),))
    if name == DEFAULT:
        return base.method, base.variant, base.options
    if name not in candidates:
        raise ValueError(f"unknown row {name!r}; the rows are {list(study_rows(candidates))}")
    (made,) = update_rows([base], candidates[name])
    return made.method, made.variant, made.options


def row_name(variant: str, candidates: Dict[str, Dict[str, str]] = CANDIDATES) -> str:
    """The row name of a run's harness variant (rows: ``head``, ``accumulate`` and ``candidates``)."""
    for name in study_rows(candidates):
        if row(name, candidates)[1] == variant:
            return name
    raise ValueError(f"variant {variant!r} is no row of this study")


def parse_args(argv: Optional[Sequence[str]] = None, doc: str = __doc__,
               candidates: Dict[str, Dict[str, str]] = CANDIDATES) -> argparse.Namespace:
    """The command line of a study of update options (``run`` / ``table``); ``doc`` and
    ``candidates``: the study's (default: this module's)."""
    rows = study_rows(candidates)
    parser = argparse.ArgumentParser(description=cli.description(doc))
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run rows on one stream and seed")
    run.add_argument("--stream", required=True, choices=sorted(catalogue.STREAMS),
                     help=f"a harness stream (the validation: {sorted(VALIDATION)})")
    run.add_argument("--seed", type=cli.seed, required=True)
    run.add_argument("--rows", nargs="+", choices=rows, default=list(rows),
                     help="rows to run, in this order (default: all, head and accumulate first)")
    run.add_argument("--preset", default="cpu", choices=sorted(catalogue.PRESETS),
                     help="training budget of the harness (default cpu, the rule's)")
    run.add_argument("--device", default="cpu", help="torch device (default cpu)")
    run.add_argument("--data-root", default=None, help="dataset folder, as python -m benchmarks.table2 takes it")
    run.add_argument("--backbone-weights", default=None, help="ResNet-20 checkpoint for emnist100")
    run.add_argument("--out", type=cli.output_dir, required=True)
    cli.add_threads_argument(run, default=1)
    table = sub.add_parser("table", help="the runs under folders, as a table, and the rule's choice")
    table.add_argument("folders", nargs="+")
    cli.add_debug_argument(parser)
    args = parser.parse_args(argv)
    if args.command == "run":
        cli.check_device(parser, args.device)
    return args


def load_runs(folders: Sequence[str], candidates: Dict[str, Dict[str, str]] = CANDIDATES) -> List[Dict[str, Any]]:
    """Every run JSON under ``FOLDER/runs`` of each folder, with its ``row`` name."""
    runs = []
    for folder in folders:
        for path in sorted(Path(folder, "runs").glob("*.json")):
            run = json.loads(path.read_text())
            run["row"] = row_name(run["variant"], candidates)
            runs.append(run)
    if not runs:
        raise SystemExit(f"no run under {list(folders)} (each folder's runs/*.json)")
    return runs


def accuracy(run: Dict[str, Any]) -> float:
    """Final task-aware accuracy, in %."""
    return 100.0 * run["average_accuracy"]


def choose(runs: Sequence[Dict[str, Any]],
           candidates: Dict[str, Dict[str, str]] = CANDIDATES) -> Tuple[Optional[str], Dict[str, List[str]]]:
    """The rule, fixed before any run: a candidate qualifies when (a) its mean accuracy over
    the fashion10 validation seeds is at least the default's mean minus :data:`MEAN_MARGIN`,
    and (b) on every other validation stream its accuracy is at least the default's minus
    :data:`STREAM_MARGIN`. Of those, the one with the least CPU seconds summed over every
    validation run is chosen; none qualifying: ``None`` (the default stays).

    :param runs: runs with ``stream``, ``seed``, ``row`` and the measured fields.
    :param candidates: the study's candidates (default: this module's).
    :return: the chosen candidate (or ``None``) and, per candidate, why it failed (empty: it qualified).
    :raises ValueError: a validation run of a candidate or the default is missing.
    """
    by = {(r["stream"], r["seed"], r["row"]): r for r in runs}
    needed = [(s, seed, name) for s, seeds in VALIDATION.items() for seed in seeds
              for name in (DEFAULT,) + tuple(candidates)]
    missing = [key for key in needed if key not in by]
    if missing:
        raise ValueError(f"validation runs missing: {len(missing)}, e.g. {missing[0]} (stream, seed, row)")
    failures: Dict[str, List[str]] = {}
    costs = {}
    for name in candidates:
        reasons = []
        for stream, seeds in VALIDATION.items():
            mine = statistics.mean(accuracy(by[(stream, s, name)]) for s in seeds)
            default = statistics.mean(accuracy(by[(stream, s, DEFAULT)]) for s in seeds)
            margin = MEAN_MARGIN if len(seeds) > 1 else STREAM_MARGIN
            if mine < default - margin - 1e-9:
                reasons.append(f"{stream}: {mine:.2f} < {default:.2f} - {margin}")
        failures[name] = reasons
        costs[name] = sum(run_cpu(by[(stream, s, name)]) for stream, seeds in VALIDATION.items() for s in seeds)
    qualified = [name for name in candidates if not failures[name]]
    return (min(qualified, key=costs.get) if qualified else None), failures


def table(runs: Sequence[Dict[str, Any]], candidates: Dict[str, Dict[str, str]] = CANDIDATES) -> str:
    """Markdown: per stream and seed, each row's accuracy, BWT, CPU seconds and CPU against
    head-only of the same call; then the rule's outcome where every validation run is there."""
    lines = ["| stream | seed | row | accuracy % | Δ vs accumulate (pt) | BWT (pt) | CPU s | CPU / head-only | "
             "updates | rolled back | load after |", "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    by = {(r["stream"], r["seed"], r["row"]): r for r in runs}
    for stream, seed in sorted({(r["stream"], r["seed"]) for r in runs}):
        head, default = by.get((stream, seed, HEAD)), by.get((stream, seed, DEFAULT))
        for name in study_rows(candidates):
            run = by.get((stream, seed, name))
            if run is None:
                continue
            updates = [t["detection"] for t in run["sdr_results"]["tasks"] if t["detection"].get("entry_updated")]
            rolled = sum(1 for d in updates if d.get("update_rolled_back"))
            delta = "" if default is None else f"{accuracy(run) - accuracy(default):+.2f}"
            ratio = "" if head is None else f"{run_cpu(run) / run_cpu(head):.2f}"
            lines.append(f"| {stream} | {seed} | {name} | {accuracy(run):.2f} | {delta} | {100 * run['bwt']:+.2f} | "
                         f"{run_cpu(run):.1f} | {ratio} | {len(updates)} | {rolled} | {run['loadavg_after'][0]:.1f} |")
    try:
        chosen, failures = choose(runs, candidates)
    except ValueError as err:
        return "\n".join(lines + ["", f"Rule not applied: {err}"])
    lines += ["", "Rule (fixed before the runs): " + ("chosen: " + chosen if chosen else "no candidate qualifies")]
    lines += [f"- {name}: " + ("qualifies" if not why else "; ".join(why)) for name, why in failures.items()]
    return "\n".join(lines)


def main(args: argparse.Namespace, candidates: Dict[str, Dict[str, str]] = CANDIDATES) -> None:
    """``table``: print the runs' table and the rule's outcome; ``run``: the rows asked for."""
    if args.command == "table":
        print(table(load_runs(args.folders, candidates), candidates))
        return
    cli.set_threads(args.threads, args.device)
    measure_runs(args, Path(args.out), rows=[row(name, candidates) for name in args.rows])


if __name__ == "__main__":
    cli.run_cli(main, parse_args)
