"""Compare two harness run JSONs field by field: decisions, entries, per-task accuracies,
group curves, BWT, memory. From the repository root:

    python -m benchmarks.studies.where_the_time_goes.compare_runs before.json after.json
"""
import json
import sys
from typing import Any, Dict, Optional, Sequence


def load(path) -> Dict[str, Any]:
    """A run JSON (``OUT/runs/<run id>.json`` of ``python -m benchmarks.table2``)."""
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def maxdiff(a, b):
    """The largest absolute difference of two equally long number lists; ``None`` when both
    are missing, ``"missing"`` when one is, ``"length m vs n"`` when their lengths differ."""
    if a is None or b is None:
        return None if a is None and b is None else "missing"
    if len(a) != len(b):
        return f"length {len(a)} vs {len(b)}"
    return max((abs(x - y) for x, y in zip(a, b)), default=0.0)


def compare(a: Dict[str, Any], b: Dict[str, Any]) -> Dict[str, Any]:
    """Run ``a`` against run ``b``: each compared field's (a, b, |a - b|), equalities and the
    positions where lists differ."""
    out = {"run": a["run_id"]}
    out["average_accuracy"] = (a["average_accuracy"], b["average_accuracy"],
                               abs(a["average_accuracy"] - b["average_accuracy"]))
    out["task_accuracies_max_abs_diff"] = maxdiff(a["task_accuracies"], b["task_accuracies"])
    out["tasks_differing"] = sum(x != y for x, y in zip(a["task_accuracies"], b["task_accuracies"]))
    da, db = a.get("detection") or {}, b.get("detection") or {}
    for key in ("decisions", "outcomes", "groups"):
        if key in da or key in db:
            out[key + "_equal"] = da.get(key) == db.get(key)
            if da.get(key) != db.get(key):
                pairs = zip(da.get(key) or [], db.get(key) or [])
                out[key + "_differ_at"] = [i for i, (x, y) in enumerate(pairs) if x != y]
    if "records" in da:
        ea = [(r.get("entry"), r.get("reused_entry")) for r in da["records"]]
        eb = [(r.get("entry"), r.get("reused_entry")) for r in db.get("records", [])]
        out["entries_equal"] = ea == eb
    if "unique_tasks" in da:
        out["unique_tasks"] = (da["unique_tasks"], db.get("unique_tasks"))
    for key in ("bwt", "forgetting", "memory_mb"):
        if a.get(key) is not None and b.get(key) is not None:
            out[key] = (a[key], b[key], abs(a[key] - b[key]))
    ca, cb = a.get("group_curve") or [], b.get("group_curve") or []
    if ca and cb:
        flat_a = [x for e in ca for x in e["accuracies"]]
        flat_b = [x for e in cb for x in e["accuracies"]]
        out["group_curve_max_abs_diff"] = maxdiff(flat_a, flat_b)
        out["group_curve_evaluated_equal"] = [e["evaluated"] for e in ca] == [e["evaluated"] for e in cb]
    out["evaluated_experiences"] = (a.get("evaluated_experiences"), b.get("evaluated_experiences"))
    out["wall_seconds"] = (a["wall_seconds"], b["wall_seconds"])
    tf_a, tf_b = a.get("task_free"), b.get("task_free")
    if tf_a and tf_b:
        out["task_free"] = {k: (tf_a[k]["task_free"], tf_b.get(k, {}).get("task_free")) for k in tf_a}
    return out


def main(argv: Optional[Sequence[str]] = None) -> None:
    """Print the comparison of the run files ``argv`` = (before, after) as JSON.

    :raises SystemExit: not two paths.
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    if len(argv) != 2:
        raise SystemExit("usage: python -m benchmarks.studies.where_the_time_goes.compare_runs BEFORE.json AFTER.json")
    print(json.dumps(compare(load(argv[0]), load(argv[1])), indent=1))


__all__ = ["compare", "load", "main", "maxdiff"]

if __name__ == "__main__":
    main()
