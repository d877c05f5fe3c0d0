"""Choose the calibrated rule's thresholds from recorded detections (offline replay).

Every scored detection of an SDR run records the evidence of every candidate entry
(``mean_elbo``, ``reference_elbo``, ``reference_elbo_std``, ``permuted_complexity``
beside p and S). This script replays
:func:`~avalanche_sdr.detection.calibrated.calibrated_decision` on those records for
every threshold combination of a grid and counts how many decisions would have been
right: reuse of the true entry (the entry created by an earlier task of the same
group) when there is one among the candidates, "new" otherwise.

The replay holds the repository fixed, as it was in the recorded run: a different
decision earlier in a stream would change later candidates, so the counts are a
guide for choosing thresholds, not a result (results come from rerunning the stream
with ``decision="calibrated"``).

Among the combinations with the most right decisions, the one printed first is the
most permissive (it keeps the most reuse, i.e. memory savings): smallest margin and
lift, largest gap.

    python -m benchmarks.studies.calibrated.thresholds results/fashion10/runs/*_sdr_seed*.json
"""
from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence

from avalanche_sdr import cli
from benchmarks.studies.calibrated.errors import has_records, tasks_of

if TYPE_CHECKING:  # imported where used: the parser runs before torch is imported
    from avalanche_sdr.detection.calibrated import CalibrationThresholds

# avalanche_sdr.detection imports torch: imported by the functions below, after the
# arguments are parsed.

GRID = dict(
    max_elbo_gap=[0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0],
    min_consistency_lift=[1.0, 1.25, 1.5, 2.0],
    min_complexity_margin=[1.0, 1.5, 2.0, 3.0, 5.0, 10.0],
    max_label_ratio=[1.0],
)


def scored_cases(run: Dict[str, Any]) -> List[Dict[str, Any]]:
    """``{"evidence", "true"}`` for every scored detection of a run with recorded evidence.

    ``true`` is the candidate index of the true entry, or ``None`` (the task is new).
    Accepts ``run_sdr_stream`` results and harness run JSONs.
    """
    tasks = [(t["group"], t["detection"]) for t in tasks_of(run)]
    group_of_task = {d["task"]: g for g, d in tasks}
    cases = []
    for group, d in tasks:
        if d["decision"] == "warm_start" or not d.get("mean_elbo"):
            continue
        true = [i for i, t in enumerate(d["candidate_tasks"]) if group_of_task[t] == group]
        evidence = {k: [float(v) for v in d[k]] for k in (
            "consistency", "complexity", "mean_elbo", "reference_elbo", "reference_elbo_std",
            "permuted_complexity")}
        cases.append({"evidence": evidence, "true": true[0] if true else None})
    return cases


def count_right(cases: Sequence[Dict[str, Any]], thresholds: CalibrationThresholds) -> int:
    """Number of cases the calibrated rule with ``thresholds`` decides right."""
    from avalanche_sdr.detection.calibrated import calibrated_decision

    return sum(calibrated_decision(**c["evidence"], thresholds=thresholds) == c["true"] for c in cases)


def sweep(cases: Sequence[Dict[str, Any]], grid: Dict[str, Sequence[float]] = GRID) -> List[tuple]:
    """``(right, thresholds)`` for every grid point, best first, most permissive first among ties."""
    from avalanche_sdr.detection.calibrated import CalibrationThresholds

    results = []
    for values in itertools.product(*grid.values()):
        t = CalibrationThresholds(**dict(zip(grid, values)))
        results.append((count_right(cases, t), t))
    results.sort(key=lambda r: (-r[0], r[1].min_complexity_margin, r[1].min_consistency_lift,
                                -r[1].max_elbo_gap))
    return results


def main(argv: Optional[List[str]] = None) -> List[tuple]:
    parser = argparse.ArgumentParser(description=cli.description(__doc__))
    parser.add_argument("paths", nargs="+", help="results JSONs of SDR runs")
    parser.add_argument("--top", type=int, default=10, help="combinations to print")
    args = parser.parse_args(argv)
    cases = []
    for path in args.paths:
        run = json.loads(Path(path).read_text())
        if has_records(run):
            cases += scored_cases(run)
    if not cases:
        raise SystemExit("no scored detections with recorded evidence in the given files")
    agreement = sum(_agreement(c["evidence"]) == c["true"] for c in cases)
    print(f"{len(cases)} scored detections; the agreement rule got {agreement} right on them")
    results = sweep(cases)
    for right, t in results[: args.top]:
        print(f"{right}/{len(cases)}  max_elbo_gap={t.max_elbo_gap}  min_consistency_lift="
              f"{t.min_consistency_lift}  min_complexity_margin={t.min_complexity_margin}  "
              f"max_label_ratio={t.max_label_ratio}")
    return results


def _agreement(evidence):
    from avalanche_sdr.detection.decision import agreement_decision

    return agreement_decision(evidence["consistency"], evidence["complexity"])


if __name__ == "__main__":
    main(sys.argv[1:])
