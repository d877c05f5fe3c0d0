"""CPU seconds of harness runs, through
:func:`benchmarks.studies.where_the_time_goes.cost.measure_runs` (one process, one torch
thread, the CPU preset by default), with whatever ``avalanche_sdr`` the environment imports
(e.g. another worktree's, with ``PYTHONPATH``). From the repository root:

    python -m benchmarks.studies.where_the_time_goes.cpu_runs STREAM OUT ROWS

ROWS: a comma list of ``method[:variant]``; a variant is the reuse it names
(``sdr_two_sample_nogen:accumulate``). Writes ``OUT/summary.json`` and prints it.
"""
import json
import sys
import types
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

import torch

SUMMARY_KEYS = ("run_id", "wall_seconds", "cpu_seconds", "setup_cpu_seconds", "loadavg_before", "loadavg_after",
                "average_accuracy", "evaluated_experiences")
"""The keys of each run kept in ``OUT/summary.json``."""


def rows_of(text: str) -> List[tuple]:
    """``"m1,m2:accumulate"`` -> the rows of :func:`~benchmarks.studies.where_the_time_goes.cost.measure_runs`
    (method, variant, options), a variant being the reuse it names."""
    rows = []
    for item in text.split(","):
        method, _, variant = item.partition(":")
        rows.append((method, variant, (("reuse", variant),) if variant else ()))
    return rows


def measure(stream: str, out: Path, rows: Sequence[tuple], preset: str = "cpu") -> List[Dict[str, Any]]:
    """Run ``rows`` on ``stream`` (seed 0, CPU, this process's torch threads); write and
    return the summary (:data:`SUMMARY_KEYS` of each run)."""
    from benchmarks.studies.where_the_time_goes import cost

    args = types.SimpleNamespace(stream=stream, preset=preset, seed=0, device="cpu", data_root=None,
                                 threads=torch.get_num_threads())
    runs = cost.measure_runs(args, Path(out), rows=rows)
    summary = [{k: r[k] for k in SUMMARY_KEYS} for r in runs]
    (Path(out) / "summary.json").write_text(json.dumps(summary, indent=1))
    return summary


def main(argv: Optional[Sequence[str]] = None) -> None:
    argv = sys.argv[1:] if argv is None else list(argv)
    if len(argv) != 3:
        raise SystemExit("usage: python -m benchmarks.studies.where_the_time_goes.cpu_runs STREAM OUT "
                         "METHOD[:VARIANT],...")
    import avalanche_sdr
    from benchmarks.studies.where_the_time_goes import cost

    torch.set_num_threads(1)
    print(avalanche_sdr.__file__, cost.__file__, flush=True)  # which trees run
    print(json.dumps(measure(argv[0], Path(argv[1]), rows_of(argv[2])), indent=1))


__all__ = ["SUMMARY_KEYS", "main", "measure", "rows_of"]

if __name__ == "__main__":
    main()
