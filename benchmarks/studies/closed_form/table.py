"""The tables of docs/results/closed_form.md: SDR against the closed-form learners on a
frozen E0, ER and joint training, per stream, from harness run files.

One table per stream (runs are grouped by their ``stream``), one row per learner, means ±
sample std over the seeds every source of the row has:

- **SDR recommended**: ``sdr_task_free [accumulate]`` read with the recommended router
  (:data:`benchmarks.table2.catalogue.SDR_ROUTER`): task-aware = the run's accuracy (the true
  task label), task-free = that router's, memory and wall time with that router's state
  and fitting only (:func:`benchmarks.table2.engine.memory_mb_with_routers`,
  :func:`wall_with_routers`); the same runs read with the ``"kernel_lda"`` router (where
  they have it); **SDR head-only**: ``sdr_task_free``, with either router. The
  ``[accumulate]`` runs refitted with ``"kernel_lda"`` at the ``klda`` baseline's settings
  (``offline --settings klda``: ``"settings": "klda"`` in their ``kernel_lda_fitted_after``)
  give the row **router kernel_lda at klda's settings**, and the row **router chosen on
  validation**: per stream the router of :func:`validation_choice`, read from those runs
  or from the ``lda_weighted`` ones.
- ``slda``, ``ranpac``, ``klda``: their ``[tuned]`` rows (else their own row, where
  tuning kept the preset's values): task-free = the run's accuracy, task-aware = its
  ``task_aware`` score.
- **ER [tuned]**: task-aware from ``replay [tuned]`` (else ``replay``, one head per task),
  task-free from ``ci_replay`` (one head over the class ids, the preset's values): two
  runs, memory and wall of the task-aware one.
- **Joint training**: ``joint`` (the ratio column's reference).

Ratio to joint: a row's task-aware accuracy over joint training's task-aware accuracy (a
joint run without ``task_aware``: "–"), and its task-free over joint's task-free. Under
each table, the file every row was read from.

    python -m benchmarks.studies.closed_form.table --runs docs/results/closed_form/fashion10 \\
        docs/results/task_free/fashion10 --out closed_form_tables.md

A run file that two ``--runs`` folders both hold (same run id) is read from the first.
"""
from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from avalanche_sdr import cli
from benchmarks.studies.closed_form.router import KLDA_TUNING
from benchmarks.table2.catalogue import SDR_ROUTER

KERNEL_ROUTER = "kernel_lda"
"""The closed-form router (:mod:`avalanche_sdr.routers.kernel_lda`)."""

CLOSED_FORM = ("slda", "ranpac", "klda")
"""The closed-form rows, in table order."""

KLDA_CHOICE = "kernel_lda at klda's settings"
"""How the row "router chosen on validation" names the ``"kernel_lda"`` router at the
``klda`` baseline's settings."""

ANSWERS = KLDA_TUNING / "router" / "answer"
"""The ``router --answer`` study's validation runs (:func:`validation_choice` reads them)."""

LABELS = {"slda": "slda (Avalanche StreamingLDA)", "ranpac": "ranpac (random projection + ridge)",
          "klda": "klda (random Fourier features + LDA)"}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.studies.closed_form.table", description=cli.description(__doc__))
    parser.add_argument("--runs", nargs="+", required=True, type=cli.existing_dir, metavar="DIR",
                        help="harness --out folders (their runs/*.json, else runs.json), in order of preference")
    parser.add_argument("--seeds", nargs="+", type=cli.seed, default=None, metavar="SEED",
                        help="read only the runs of these seeds (default: every seed found)")
    parser.add_argument("--out", required=True, type=cli.output_file, metavar="FILE.md", help="the Markdown to write")
    return parser.parse_args(argv)


def load(folders: Sequence[os.PathLike]) -> List[Dict[str, Any]]:
    """Every run of ``folders`` (``runs/*.json``, and ``runs.json`` where a folder has it),
    each with ``"source"``: the file it was read from; a run id already read is skipped.

    :raises SystemExit: a folder holds no run file.
    """
    runs, seen = [], set()
    for folder in map(Path, folders):
        found = [(p, [json.loads(p.read_text())]) for p in sorted((folder / "runs").glob("*.json"))]
        if (folder / "runs.json").exists():
            found.append((folder / "runs.json", json.loads((folder / "runs.json").read_text())))
        if not found:
            raise SystemExit(f"{folder}: no runs/*.json and no runs.json")
        for path, items in found:
            for run in items:
                if run.get("split", "test") != "test" or run["run_id"] in seen:
                    continue
                seen.add(run["run_id"])
                runs.append(dict(run, source=str(path)))
    return runs


def wall_with_routers(run: Dict[str, Any], keep: Sequence[str]) -> float:
    """A run's wall seconds less the fitting of every router whose state is not kept
    (``router_fit_seconds``; a router sharing a kept state, e.g. ``"lda"`` with
    ``"lda_weighted"``, is kept: its fit is the shared one's)."""
    from avalanche_sdr.routers.routing import state_router

    kept = {state_router(r) for r in keep}
    fits = run.get("router_fit_seconds") or {}
    return run["wall_seconds"] - sum(s for r, s in fits.items() if state_router(r) not in kept)


def _find(runs, stream: str, method: str, variants: Sequence[str]) -> List[Dict[str, Any]]:
    """The runs of (``method``, the first of ``variants`` that has any) on ``stream``, by seed."""
    for variant in variants:
        found = sorted((r for r in runs if r["stream"] == stream and r["method"] == method
                        and r.get("variant", "") == variant), key=lambda r: r["seed"])
        if found:
            return found
    return []


Cell = Optional[float]


def _row(label: str, parts: List[Tuple[Dict[str, Any], Cell, Cell, float, float]]) -> Dict[str, Any]:
    """A table row from per-seed ``(run, task-aware %, task-free %, memory MB, wall s)``."""
    return {"label": label, "seeds": [p[0]["seed"] for p in parts], "aware": [p[1] for p in parts],
            "free": [p[2] for p in parts], "memory": [p[3] for p in parts], "wall": [p[4] for p in parts],
            "sources": sorted({p[0]["source"] for p in parts})}


def kernel_settings(run: Dict[str, Any]) -> str:
    """The settings a run's ``"kernel_lda"`` was fitted at after it
    (:data:`benchmarks.studies.closed_form.offline.SETTINGS`; ``"defaults"`` for a run fitted
    during training or not at all)."""
    return (run.get("kernel_lda_fitted_after") or {}).get("settings", "defaults")


def validation_choice(stream: str) -> Optional[Tuple[str, float, float]]:
    """The router of the row "router chosen on validation" on ``stream``: ``(choice,
    kernel %, lda_weighted %)``, ``choice`` :data:`KLDA_CHOICE` where ``"kernel_lda"`` at the
    ``klda`` baseline's settings scored higher than ``"lda_weighted"`` on the stream's
    VALIDATION split (:data:`ANSWERS` ``/<stream>_seed0.json`` of ``router --answer``: variants
    ``kernel_tuned`` and ``lda_weighted``, answered by the unit), else ``"lda_weighted"``
    (ties too: the recommended router). ``None`` where that file is absent. The rule was
    fixed before any test score of the tuned router was computed."""
    path = Path(ANSWERS) / f"{stream}_seed0.json"
    if not path.exists():
        return None
    variants = json.loads(path.read_text())["variants"]
    kernel, weighted = variants["kernel_tuned"]["unit"], variants[SDR_ROUTER]["unit"]
    return (KLDA_CHOICE if kernel > weighted else SDR_ROUTER), kernel, weighted


def _sdr_parts(found: Sequence[Dict[str, Any]], router: str):
    """Per-seed row parts of SDR runs read with ``router`` (module doc)."""
    from benchmarks.table2.engine import memory_mb_with_routers

    return [(r, 100 * r["average_accuracy"], 100 * r["task_free"][router]["task_free"],
             memory_mb_with_routers(r, [router]), wall_with_routers(r, [router])) for r in found]


def stream_rows(runs: Sequence[Dict[str, Any]], stream: str) -> List[Dict[str, Any]]:
    """The rows of ``stream``'s table (module doc), those with runs only."""
    rows = []
    plain = [r for r in runs if kernel_settings(r) == "defaults"]
    accumulate = _find(plain, stream, "sdr_task_free", ["accumulate"])
    for found, variant, name in ((accumulate, "accumulate", "SDR [accumulate]"),
                                 (_find(plain, stream, "sdr_task_free", [""]), "", "SDR head-only")):
        for router in (SDR_ROUTER, KERNEL_ROUTER):
            if not found or not all(router in r["task_free"] for r in found):
                continue
            label = ("SDR recommended ([accumulate], router lda_weighted)" if (variant, router) == (
                "accumulate", SDR_ROUTER) else f"{name}, router {router}")
            rows.append(dict(_row(label, _sdr_parts(found, router)), sdr=variant))
    tuned = _find([r for r in runs if kernel_settings(r) == "klda"], stream, "sdr_task_free", ["accumulate"])
    if tuned:
        rows.append(dict(_row("SDR [accumulate], router kernel_lda at klda's settings",
                              _sdr_parts(tuned, KERNEL_ROUTER)), sdr="accumulate"))
    choice = validation_choice(stream)
    if choice is not None:
        source, router = (tuned, KERNEL_ROUTER) if choice[0] == KLDA_CHOICE else (accumulate, SDR_ROUTER)
        if source and all(router in r["task_free"] for r in source):
            rows.append(dict(_row(f"SDR [accumulate], router chosen on validation ({choice[0]})",
                                  _sdr_parts(source, router)), sdr="accumulate"))
    for name in CLOSED_FORM:
        found = _find(runs, stream, name, ["tuned", ""])
        if found:
            label = LABELS[name] + (" [tuned]" if found[0].get("variant") == "tuned" else "")
            rows.append(_row(label, [(r, 100 * r["task_aware"]["average_accuracy"] if r.get("task_aware") else None,
                                      100 * r["average_accuracy"], r["memory_mb"], r["wall_seconds"]) for r in found]))
    aware = _find(runs, stream, "replay", ["tuned", ""])
    free = {r["seed"]: r for r in _find(runs, stream, "ci_replay", [""])}
    if free:  # the seeds with both runs
        aware = [r for r in aware if r["seed"] in free]
    if aware:
        tuned = aware[0].get("variant") == "tuned"
        parts = [(r, 100 * r["average_accuracy"], 100 * free[r["seed"]]["average_accuracy"] if r["seed"] in free
                  else None, r["memory_mb"], r["wall_seconds"]) for r in aware]
        row = _row("ER" + (" [tuned]" if tuned else "") + " (task-free: ER class-incremental)", parts)
        row["sources"] = sorted(set(row["sources"]) | {free[s]["source"] for s in row["seeds"] if s in free})
        rows.append(row)
    joint = _find(runs, stream, "joint", [""])
    if joint:
        rows.append(_row("Joint training (one head over the class ids)",
                         [(r, 100 * r["task_aware"]["average_accuracy"] if r.get("task_aware") else None,
                           100 * r["average_accuracy"], r["memory_mb"], r["wall_seconds"]) for r in joint]))
    return rows


def _mean(values: Sequence[Cell]) -> Cell:
    return None if not values or None in values else sum(values) / len(values)


def _cell(values: Sequence[Cell], digits: int) -> str:
    from benchmarks.table2.report import plus_minus

    return "–" if not values or None in values else plus_minus(values, digits)


def format_stream(runs: Sequence[Dict[str, Any]], stream: str) -> str:
    """One stream's table, its sources and the comparisons the issue asks for."""
    rows = stream_rows(runs, stream)
    joint = next((r for r in rows if r["label"].startswith("Joint")), None)
    lines = [f"### {runs_label(runs, stream)}", "",
             "| Row | Task-aware acc (%) | Task-free acc (%) | Memory (MB) | Wall (s) | × joint (aware / free) | Seeds |",
             "|---|---|---|---|---|---|---|"]
    for row in rows:
        ratio = "–"
        if joint is not None and row is not joint:
            aware = _mean(row["aware"]), _mean(joint["aware"])
            free = _mean(row["free"]), _mean(joint["free"])
            ratio = " / ".join("–" if None in pair else f"{pair[0] / pair[1]:.3f}" for pair in (aware, free))
        lines.append(f"| {row['label']} | {_cell(row['aware'], 2)} | {_cell(row['free'], 2)} | "
                     f"{_cell(row['memory'], 3)} | {_cell(row['wall'], 1)} | {ratio} | "
                     f"{','.join(map(str, row['seeds']))} |")
    lines += ["", "Run files: " + "; ".join(f"{row['label']}: " + ", ".join(
        f"`{_relative(s)}`" for s in row["sources"]) for row in rows) + "."]
    lines += ["", comparison(rows)]
    return "\n".join(lines) + "\n"


def _relative(path: str) -> str:
    """``path`` from the repository's ``docs/`` on (no machine's own folders), else its last three parts."""
    parts = Path(path).parts
    return "/".join(parts[parts.index("docs"):]) if "docs" in parts else "/".join(parts[-3:])


def comparison(rows: Sequence[Dict[str, Any]]) -> str:
    """The sentence of the issue's targets on one stream: SDR recommended's task-aware and
    SDR [accumulate]'s task-free accuracy (with each router) against the best closed-form row."""
    closed = [r for r in rows if r["label"].split(" ")[0] in CLOSED_FORM]
    sdr = [r for r in rows if r.get("sdr") == "accumulate"]
    if not closed or not sdr:
        return "(no SDR recommended row or no closed-form row: no comparison)"
    best_aware = max(closed, key=lambda r: _mean(r["aware"]) or -1)
    best_free = max(closed, key=lambda r: _mean(r["free"]))
    out = []
    aware = _mean(sdr[0]["aware"])
    out.append(f"SDR recommended task-aware {aware:.2f} % against the best closed-form row's "
               f"{_mean(best_aware['aware']):.2f} % ({best_aware['label'].split(' ')[0]}): "
               + ("**met**" if aware >= _mean(best_aware["aware"]) else "**not met**")
               + f" ({aware - _mean(best_aware['aware']):+.2f} points)")
    for row in sdr:
        free = _mean(row["free"])
        out.append(f"{row['label']} task-free {free:.2f} % against {_mean(best_free['free']):.2f} % "
                   f"({best_free['label'].split(' ')[0]}): " + ("**met**" if free >= _mean(best_free["free"])
                                                                else "**not met**")
                   + f" ({free - _mean(best_free['free']):+.2f} points)")
    return "; ".join(out) + "."


def runs_label(runs: Sequence[Dict[str, Any]], stream: str) -> str:
    """The stream's label and preset, from its runs."""
    run = next(r for r in runs if r["stream"] == stream)
    return f"{run.get('stream_label', stream)}, preset `{run['preset']}`"


def main(args) -> str:
    runs = [r for r in load(args.runs) if args.seeds is None or r["seed"] in args.seeds]
    streams = sorted({r["stream"] for r in runs})
    report = "\n".join(format_stream(runs, s) for s in streams)
    Path(args.out).write_text(report)
    print(report)
    return report


__all__ = ["ANSWERS", "CLOSED_FORM", "KERNEL_ROUTER", "KLDA_CHOICE", "comparison", "format_stream", "kernel_settings",
           "load", "main", "parse_args", "stream_rows", "validation_choice", "wall_with_routers"]

if __name__ == "__main__":
    cli.run_cli(main, parse_args)
