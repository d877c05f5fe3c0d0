"""Would the paired level have changed a recorded run? A check on harness run files, without running anything.

``alpha="by_paired_power"`` (:class:`~avalanche_sdr.detection.LevelByPairedPower`) only raises the two-sample
repeat test's level above ``"by_size"``'s; the power check and the small-task fallback keep ``"by_size"``'s. So
with the same entries a task declared new stays new, and a reused task changes only where the p-value of its
reused entry lies below the raised level. A run whose every reuse passes the raised level is therefore the
same run under it (decisions first, then everything trained from them).

For every reuse of a recorded run (``detection.records`` of a harness run JSON with the two-sample stage's
p-values) this reads the task's smallest class ``n``, the number of classes, and a lower bound ``m`` of the
reused entry's smallest reference class: its creating task's smallest class, at most the reference's cap
(``reference_per_class``), halved (rounded down) for a warm-start entry when the run's E0 held out references
(``"e0_references": "held_out"``). The raised level falls as ``m`` grows, so a reuse that passes at this ``m``
passes at the true one.

    python -m benchmarks.studies.detection.paired_level_check docs/results/recommended_streams/*/runs/*.json
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Dict, List, Sequence


def check_run(run: Dict[str, Any]) -> Dict[str, Any]:
    """The reuses of one harness run (its JSON as a dict) that the paired level would turn into new entries.

    :return: ``{"run_id", "reuses", "changed": [{"task", "n", "m", "p", "level"}, ...]}``.
    :raises ValueError: a run without the two-sample stage's records (not a ``"two_sample"`` or
        ``"small_task"`` detector's run).
    """
    from avalanche_sdr.detection import DEFAULT_TWO_SAMPLE, LevelByPairedPower

    records = run.get("detection", {}).get("records") or []
    rules = {r.get("rule") for r in records if r.get("decision") != "warm_start"}
    if not rules or not rules <= {"two_sample", "small_task"}:
        raise ValueError(f"run {run.get('run_id')!r} has no two-sample records: the paired level changes only the "
                         "two-sample and small-task rules")
    sizes: List[List[int]] = [t["train_per_class"] for t in run["task_sizes"]]
    tasks = run["sdr_results"]["tasks"]
    creator = {t["entry"]: t for t in tasks if t["decision"] in ("warm_start", "new")}
    held_out = run.get("e0_references") == "held_out"
    level = LevelByPairedPower()
    by_task = {r["task"]: r for r in records}
    changed, reuses = [], 0
    for record in by_task.values():
        if record["decision"] != "reuse":
            continue
        reuses += 1
        task, entry = int(record["task"]), int(record["entry"])
        n = min(min(sizes[task]), DEFAULT_TWO_SAMPLE.max_per_class)
        made = creator[entry]
        m = min(min(sizes[made["task"]]), DEFAULT_TWO_SAMPLE.reference_per_class)
        if held_out and made["decision"] == "warm_start":
            m = max(1, m // 2)
        p = record["p_value"][record["candidate_entries"].index(entry)]
        raised = level.for_test(n, m, len(sizes[task]), DEFAULT_TWO_SAMPLE.dim)
        if p < raised:
            changed.append({"task": task, "n": n, "m": m, "p": p, "level": raised})
    return {"run_id": run.get("run_id"), "reuses": reuses, "changed": changed}


def main(argv: Sequence[str] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.studies.detection.paired_level_check",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="harness run JSONs (two-sample or small-task rule)")
    args = parser.parse_args(argv)
    missing = [str(p) for p in args.runs if not p.is_file()]
    if missing:
        parser.error(f"no such run file: {missing}")
    total = 0
    for path in args.runs:
        result = check_run(json.loads(path.read_text()))
        total += len(result["changed"])
        print(f"{path.name}: {result['reuses']} reuses, {len(result['changed'])} below the paired level")
        for c in result["changed"]:
            print(f"  task {c['task']}: n {c['n']}, m >= {c['m']}, p {c['p']:.3g} < level {c['level']:.3g}")
    print(f"reuses the paired level would turn into new entries: {total}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
