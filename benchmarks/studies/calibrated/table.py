"""The table of the "beyond the paper" options: faithful vs calibrated vs calibrated +
forward transfer, on several streams, from the harness's run JSONs.

For each stream folder (a ``benchmarks.table2 --out`` folder) and each of the rows
``sdr`` (the paper's agreement rule), ``sdr_calibrated`` and ``sdr_calibrated_ft``
(plus ``optimal`` for reference), it prints mean ± sample std over the seeds found of:
Correct / Miss / Incorrect (%), average accuracy (%), memory (MB), wall time (s), and
for the tasks that trained a new entry after the warm start: the training accuracy of
their first epoch and the number of epochs until the training accuracy first reached
90 % (a task that never did counts as its number of epochs).

    python -m benchmarks.studies.calibrated.table results/fashion10 results/fashion50 results/emnist100
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from avalanche_sdr import cli

ROWS = ("optimal", "sdr", "sdr_calibrated", "sdr_calibrated_ft")
TARGET_ACCURACY = 0.9


def new_entry_curves(run: Dict[str, Any]) -> List[List[float]]:
    """Training-accuracy curves of the tasks that got a new entry after the warm start."""
    det = run.get("detection") or {}
    curves = det.get("train_accuracy_per_epoch") or []
    return [c for c, d in zip(curves, det.get("decisions", [])) if d == "new" and c]


def epochs_to(curve: Sequence[float], target: float = TARGET_ACCURACY) -> int:
    """1-based epoch at which ``curve`` first reaches ``target`` (``len(curve)`` if never)."""
    for i, v in enumerate(curve, start=1):
        if v >= target:
            return i
    return len(curve)


def _pm(values: Sequence[float], digits: int) -> str:
    """``mean ± std`` of the non-NaN values (:func:`benchmarks.table2.report.mean_std`), "–" if none."""
    from benchmarks.table2.report import mean_std  # imports torch and Avalanche: not before the arguments are parsed

    values = [v for v in values if not math.isnan(v)]
    if not values:
        return "–"
    mean, std = mean_std(values)
    return f"{mean:.{digits}f} ± {std:.{digits}f}"


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else math.nan


def stream_rows(folder: Path) -> List[str]:
    """Markdown rows for one harness output folder."""
    runs = [json.loads(p.read_text()) for p in sorted((folder / "runs").glob("*.json"))]
    lines = []
    for method in ROWS:
        rs = sorted((r for r in runs if r["method"] == method), key=lambda r: r["seed"])
        if not rs:
            continue
        det = [r["detection"] for r in rs]
        curves = [new_entry_curves(r) for r in rs]
        first = [_mean([c[0] for c in cs]) for cs in curves]
        to_target = [_mean([epochs_to(c) for c in cs]) for cs in curves]
        lines.append("| " + " | ".join([
            rs[0]["stream_label"], rs[0]["label"],
            _pm([100 * d["correct"] for d in det], 1), _pm([100 * d["miss"] for d in det], 1),
            _pm([100 * d["incorrect"] for d in det], 1),
            _pm([100 * r["average_accuracy"] for r in rs], 2), _pm([r["memory_mb"] for r in rs], 2),
            _pm([r["wall_seconds"] for r in rs], 0),
            _pm([100 * v for v in first], 1), _pm(to_target, 2),
            ",".join(str(r["seed"]) for r in rs),
        ]) + " |")
    return lines


def format_table(folders: Sequence[Path]) -> str:
    header = ("| Stream | Row | Correct (%) | Miss (%) | Incorrect (%) | Acc (%) | Mem (MB) | Wall (s) | "
              f"new entries: epoch-1 train acc (%) | new entries: epochs to {100 * TARGET_ACCURACY:.0f} % | Seeds |\n"
              "|---|---|---|---|---|---|---|---|---|---|---|")
    rows = [header]
    for folder in folders:
        rows += stream_rows(Path(folder))
    return "\n".join(rows) + "\n"


def main(argv: Optional[List[str]] = None) -> str:
    parser = argparse.ArgumentParser(description=cli.description(__doc__))
    parser.add_argument("folders", nargs="+", help="benchmarks.table2 --out folders")
    parser.add_argument("--output", default=None, help="also write the table to this file")
    args = parser.parse_args(argv)
    table = format_table([Path(f) for f in args.folders])
    print(table)
    if args.output:
        Path(args.output).write_text(table)
    return table


if __name__ == "__main__":
    main(sys.argv[1:])
