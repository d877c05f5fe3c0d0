"""The task-free table (issue #15): SDR's routers against class-incremental baselines,
from the run JSONs of the Table 2 harness's task-free rows.

Reads ``DIR/runs/*.json`` of one or more ``benchmarks.table2 --out`` folders (or folders
of run JSONs), keeps the runs of the task-free methods
(:attr:`benchmarks.table2.methods.Method.task_free`, scored on the test stream) and writes one
Markdown table per stream and preset, mean ± sample std over seeds: a row per SDR router
(:data:`SDR_VIEWS`, ``sdr_task_free`` predicting without task labels) and the oracle
task label, then the class-incremental baselines ``ci_replay`` (with ``mem_sdr_task_free``,
its buffer sized to SDR's memory with the state of its recommended router only,
:data:`benchmarks.table2.catalogue.SDR_ROUTER`), ``ci_ewc`` and ``joint`` (one head over the
class ids, so their accuracy is task-free); other variants get a row each.

Columns: Routing acc (%) (SDR rows), Task-free acc (%), Task-aware acc (%) (SDR rows),
Memory (MB) (an SDR router row without the OTHER routers' state; the oracle without
any), Router fit (% of run), Seeds. Under each table one sentence from the means: SDR
with its recommended router against joint training, and whether it is above every
class-incremental baseline whose memory is at least SDR's (within
:data:`MEMORY_TOLERANCE`, the equal-memory sizing's tolerance).

    python -m benchmarks.table2 --stream fashion10 --preset cpu --seeds 0 1 --jobs 2 \\
        --methods sdr_task_free ci_replay ci_ewc joint --equal-memory sdr_task_free --out results/fashion10_task_free
    python -m benchmarks.studies.task_free.table --runs results/fashion10_task_free --out results/task_free.md
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from avalanche_sdr import cli
from avalanche_sdr.vocabulary import (ORACLE, ROUTER_EXPERT_GATE, ROUTER_GAUSSIAN, ROUTER_KERNEL_LDA, ROUTER_LDA,
                                      ROUTER_LDA_WEIGHTED)
from benchmarks.table2.catalogue import METHODS, SDR_ROUTER
from benchmarks.table2.catalogue import TASK_FREE_METHODS as _TASK_FREE_ROWS

TASK_FREE_METHODS = tuple(m for m in _TASK_FREE_ROWS if not METHODS[m].method_preset)
"""The harness methods whose runs this table reads: the task-free rows the harness configures
(``sdr_task_free`` with every router, the class-incremental baselines), not the library's
method preset ``sdr_recommended`` (one router: its runs are read by ``benchmarks.table2``'s
own report)."""

if __name__ in ("__main__", "__mp_main__"):
    cli.install_warning_filters()  # before Avalanche is imported

# The harness's report and engine import torch and Avalanche: the functions that need
# them import them, so that --help and usage errors come first.


def parse_args(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.studies.task_free.table", description=cli.description(__doc__))
    parser.add_argument("--runs", nargs="+", required=True, type=cli.existing_dir, metavar="DIR",
                        help="benchmarks.table2 --out folders (one per stream) holding runs of "
                        f"{', '.join(TASK_FREE_METHODS)}")
    parser.add_argument("--out", required=True, type=cli.output_file, metavar="FILE.md",
                        help="the Markdown file to write")
    return parser.parse_args(argv)


SDR_VIEWS: Tuple[Tuple[str, str], ...] = (
    (ROUTER_LDA_WEIGHTED, "SDR + LDA router, weights chosen on repeats (recommended)"),
    (ROUTER_LDA, "SDR + LDA router, equal weights"),
    (ROUTER_GAUSSIAN, "SDR + Gaussian router"),
    (ROUTER_EXPERT_GATE, "SDR + Expert Gate routing"),
    (ROUTER_KERNEL_LDA, "SDR + kernel LDA router (KLDA on E0, closed form)"),
    (ORACLE, "SDR, oracle task label (task-aware reference)"),
)
"""The rows of an SDR run: its ``task_free`` entry (a router, or ``oracle``) and the label."""

OPTIONAL_VIEWS = (ROUTER_LDA_WEIGHTED, ROUTER_KERNEL_LDA)
"""Views a run may lack (runs made before the router existed): a row is made only when
every run of its group has it."""

BASELINE_LABELS: Dict[str, str] = {
    "ci_replay": "ER class-incremental",
    "ci_ewc": "Online EWC class-incremental",
    "joint": "Joint training",
}
"""Row labels of the baselines (their ``task_free`` entry is ``self``)."""

VARIANT_LABELS: Dict[str, str] = {"mem_sdr_task_free": "equal memory"}
"""How a variant is named in a row label (others: the variant itself)."""

CLASS_INCREMENTAL = ("ci_replay", "ci_ewc")
"""The class-incremental baselines the sentence compares SDR with."""

MEMORY_TOLERANCE = 0.05
"""A baseline has "at least SDR's memory" from (1 - this) x SDR's memory up."""


SDR_ROW = ("sdr_task_free", "", SDR_ROUTER)
"""The row the summary sentence judges: SDR with its recommended router."""
JOINT_ROW = ("joint", "", "self")


class TaskFreeReportError(ValueError):
    """Run folders that cannot make the task-free table (no task-free runs, runs written
    by an older harness, the same run in two folders)."""


# --------------------------------------------------------------------- reading


def _runs_dir(folder: Path) -> Path:
    if not folder.is_dir():
        raise TaskFreeReportError(f"{folder} is not a folder")
    return folder / "runs" if (folder / "runs").is_dir() else folder


def _check_run(run: Dict[str, Any], path: Path) -> None:
    """A task-free run must hold the entries its rows read."""
    sdr = METHODS[run["method"]].is_sdr
    views = [v for v, _ in SDR_VIEWS if v not in OPTIONAL_VIEWS] if sdr else ["self"]
    missing = [v for v in views if v not in (run.get("task_free") or {})]
    if sdr:
        missing += [f"router_memory_mb[{v}]" for v in views
                    if v != ORACLE and v not in (run.get("router_memory_mb") or {})]
    if sdr and "router_fit_seconds" not in run:
        missing.append("router_fit_seconds")
    if missing:
        raise TaskFreeReportError(
            f"{path}: a {run['method']} run without {', '.join(missing)} in its JSON (written by a harness older "
            "than the task-free rows?); delete it and run benchmarks.table2 again")


def load_task_free_runs(folders: Sequence[Path]) -> Dict[Tuple[str, str], List[Dict[str, Any]]]:
    """The test-scored runs of :data:`TASK_FREE_METHODS` in ``folders``, by (stream, preset).

    :param folders: ``benchmarks.table2 --out`` folders (their ``runs/``) or folders of
        run JSONs.
    :raises TaskFreeReportError: a folder that does not exist or holds no such run, a JSON
        file that cannot be read, a run whose JSON lacks the task-free entries, or one run id
        found in two folders.
    """
    groups: Dict[Tuple[str, str], List[Dict[str, Any]]] = {}
    seen: Dict[str, Path] = {}
    for folder in map(Path, folders):
        runs_dir = _runs_dir(folder)
        found = 0
        for path in sorted(runs_dir.glob("*.json")):
            try:
                run = json.loads(path.read_text())
            except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
                raise TaskFreeReportError(f"{path}: not a readable run JSON ({error})") from None
            if not isinstance(run, dict) or run.get("method") not in TASK_FREE_METHODS:
                continue
            if run.get("split", "test") != "test":
                continue
            _check_run(run, path)
            if run["run_id"] in seen:
                raise TaskFreeReportError(f"run {run['run_id']} is in {seen[run['run_id']]} and in {path}: "
                                          "give each run once (one folder per stream)")
            seen[run["run_id"]] = path
            groups.setdefault((run["stream"], run["preset"]), []).append(run)
            found += 1
        if not found:
            raise TaskFreeReportError(
                f"{runs_dir}: no run of a task-free method ({', '.join(TASK_FREE_METHODS)}); make them with "
                f"python -m benchmarks.table2 --stream STREAM --methods {' '.join(TASK_FREE_METHODS)} "
                f"--equal-memory sdr_task_free --out {folder}")
    return groups


# --------------------------------------------------------------------- rows


def _row_label(method: str, variant: str, view: str) -> str:
    if METHODS[method].is_sdr:
        label = dict(SDR_VIEWS)[view]
    else:
        label = BASELINE_LABELS.get(method, METHODS[method].label)
    return label + (f" [{VARIANT_LABELS.get(variant, variant)}]" if variant else "")


def task_free_rows(runs: Sequence[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """The table's rows: per method and variant in the Table 2 order
    (:func:`benchmarks.table2.report.table_rows`: the methods' order, a method's own row first,
    then its variants by memory), one row per SDR view (:data:`SDR_VIEWS`) or one for a
    baseline. Each row: ``key`` (method, variant, view), ``label`` and the per-seed values
    in seed order, ``seeds``, ``routing``, ``task_free``, ``task_aware`` (%; ``None`` where
    the row has none) and ``memory_mb``."""
    from benchmarks.table2.engine import memory_mb_with_routers
    from benchmarks.table2.report import table_rows

    rows = []
    for rs in table_rows(runs):
        method, variant = rs[0]["method"], rs[0].get("variant", "")
        sdr = METHODS[method].is_sdr
        views = [v for v, _ in SDR_VIEWS if all(v in r["task_free"] for r in rs)] if sdr else ["self"]
        for view in views:
            scores = [r["task_free"][view] for r in rs]
            rows.append(dict(
                key=(method, variant, view), label=_row_label(method, variant, view), seeds=[r["seed"] for r in rs],
                routing=[100 * s["routing"] for s in scores] if sdr else None,
                task_free=[100 * s["task_free"] for s in scores],
                task_aware=[100 * r["average_accuracy"] for r in rs] if sdr else None,
                memory_mb=[memory_mb_with_routers(r, (view,)) for r in rs],
                fit_share=[100 * r["router_fit_seconds"][view] / r["wall_seconds"] for r in rs]
                if sdr and view != ORACLE else None,
            ))
    return rows


def _cell(values: Optional[Sequence[float]], digits: int) -> str:
    from benchmarks.table2.report import plus_minus

    return "–" if values is None else plus_minus(values, digits)


def format_rows(rows: Sequence[Dict[str, Any]]) -> str:
    """The Markdown table of :func:`task_free_rows`."""
    lines = ["| Row | Routing acc (%) | Task-free acc (%) | Task-aware acc (%) | Memory (MB) | Router fit (% of run) "
             "| Seeds |",
             "|---|---|---|---|---|---|---|"]
    for row in rows:
        cells = [row["label"], _cell(row["routing"], 2), _cell(row["task_free"], 2), _cell(row["task_aware"], 2),
                 _cell(row["memory_mb"], 3), _cell(row["fit_share"], 1), ",".join(map(str, row["seeds"]))]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def summary_sentence(rows: Sequence[Dict[str, Any]]) -> str:
    """One sentence from the rows' means: SDR with its recommended router's task-free accuracy minus
    joint training's, and whether it is above every class-incremental baseline whose
    memory is at least SDR's (within :data:`MEMORY_TOLERANCE`)."""
    from benchmarks.table2.report import mean_std

    by_key = {row["key"]: row for row in rows}
    sdr = by_key.get(SDR_ROW)
    if sdr is None:
        return f"No {_row_label(*SDR_ROW)} run: nothing to compare."
    acc, mem = mean_std(sdr["task_free"])[0], mean_std(sdr["memory_mb"])[0]
    joint = by_key.get(JOINT_ROW)
    if joint is None:
        first = f"{sdr['label']}: task-free accuracy {acc:.2f} % (no joint training run)"
    else:
        joint_acc = mean_std(joint["task_free"])[0]
        first = (f"{sdr['label']}: task-free accuracy {acc:.2f} %, {acc - joint_acc:+.2f} points from joint "
                 f"training's {joint_acc:.2f} % ({acc / joint_acc:.3f} x)")
    compared = [(row["label"], mean_std(row["task_free"])[0], mean_std(row["memory_mb"])[0]) for row in rows
                if row["key"][0] in CLASS_INCREMENTAL]
    compared = [c for c in compared if c[2] >= (1 - MEMORY_TOLERANCE) * mem]
    scope = (f"class-incremental baseline with at least SDR's memory ({mem:.3f} MB, "
             f"within {100 * MEMORY_TOLERANCE:.0f} %)")
    if not compared:
        return f"{first}; no {scope} in this table."
    not_above = [c for c in compared if not acc > c[1]]
    listed = ", ".join(f"{label} ({a:.2f} % at {m:.3f} MB)" for label, a, m in (not_above or compared))
    if not_above:
        return f"{first}; NOT above every {scope}: not above {listed}."
    return f"{first}; above every {scope}: {listed}."


def format_report(groups: Dict[Tuple[str, str], List[Dict[str, Any]]]) -> str:
    """The Markdown file: a table and its sentence per (stream, preset) of
    :func:`load_task_free_runs`."""
    parts = ["# Task-free prediction: SDR's routers against class-incremental baselines\n",
             "Mean ± sample std over seeds. Routing and task-aware accuracy: SDR rows only. Memory: SDR router rows "
             "without the other routers' state, the oracle row without any router state.\n"]
    for (stream, preset), runs in sorted(groups.items()):
        rows = task_free_rows(runs)
        parts.append(f"## {runs[0].get('stream_label', stream)}, preset `{preset}`\n")
        parts.append(format_rows(rows))
        parts.append(summary_sentence(rows) + "\n")
    return "\n".join(parts)


def main(args) -> str:
    try:
        report = format_report(load_task_free_runs([Path(d) for d in args.runs]))
    except TaskFreeReportError as error:
        raise SystemExit(f"error: {error}") from None
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(report)
    print(report)
    print(f"wrote {out}")
    return report


__all__ = ["BASELINE_LABELS", "CLASS_INCREMENTAL", "JOINT_ROW", "MEMORY_TOLERANCE", "OPTIONAL_VIEWS", "SDR_ROW",
           "SDR_VIEWS", "TASK_FREE_METHODS", "TaskFreeReportError", "VARIANT_LABELS", "format_report", "format_rows",
           "load_task_free_runs", "main", "parse_args", "summary_sentence", "task_free_rows"]

if __name__ == "__main__":
    cli.run_cli(main, parse_args)
