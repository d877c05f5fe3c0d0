"""Classify every detection of SDR runs: which vote was wrong, by how much, and why.

Reads results JSONs written by :func:`avalanche_sdr.training.stream_runner.run_sdr_stream`
(``examples/*.py --output``) or the harness's per-run JSONs (``OUT/runs/*.json``) and
prints one Markdown row per scored task (or only the errors), with the evidence of
the calibrated rule for the consistency vote's entry:

- ``true``: the entry created by an earlier task of the same group (``-`` if none: the
  task is new), as the entry's creating task ``T<k>``;
- votes: ``argmax p`` and ``argmin S`` (creating tasks), each marked ✓ when it is the
  true entry;
- ``p`` margin: ``p[vote] - p[runner-up]``; ``S`` margin: ``S[runner-up] / S[vote]``;
- ``gap``: likelihood gap of the p-vote's entry (per-image std units), ``lift``:
  ``C p``, ``ratio``: S over its permuted-label mean, for the p-vote's entry;
- ``why``: a short reading of which evidence failed.

    python -m benchmarks.studies.calibrated.errors results/table2/runs/*.json --errors-only
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional

from avalanche_sdr import cli


def has_records(run: Dict[str, Any]) -> bool:
    """Whether ``run`` holds per-task detection records (an SDR run of either JSON kind)."""
    return "tasks" in run or bool((run.get("detection") or {}).get("records"))


def tasks_of(run: Dict[str, Any]) -> List[Dict[str, Any]]:
    """Per-task dicts with ``group``, ``outcome``, ``detection`` (the record dict), in
    stream order, from a ``run_sdr_stream`` results JSON or a harness run JSON."""
    if "tasks" in run:  # run_sdr_stream results
        return [dict(group=t["group"], outcome=t["outcome"], detection=t["detection"]) for t in run["tasks"]]
    det = run.get("detection") or {}
    if "records" not in det:
        raise ValueError(f"{run.get('run_id', '?')}: no per-task records (not an SDR run, or an older harness)")
    return [dict(group=g, outcome=o, detection=r) for g, o, r in zip(det["groups"], det["outcomes"], det["records"])]


def analyse_run(run: Dict[str, Any], name: str) -> List[Dict[str, Any]]:
    """One row per scored task of one run (see the module doc)."""
    # avalanche_sdr.detection imports torch: not before the arguments are parsed.
    from avalanche_sdr.detection.calibrated import label_ratio, likelihood_gap

    tasks = tasks_of(run)
    group_of_task = {t["detection"]["task"]: t["group"] for t in tasks}
    rows = []
    seen_groups = set()
    for t in tasks:
        d = t["detection"]
        seen_before = t["group"] in seen_groups
        seen_groups.add(t["group"])
        if d["decision"] == "warm_start" or t["outcome"] is None:
            continue
        cand_tasks = d["candidate_tasks"]
        p = [float(v) for v in d["consistency"]]
        s = [float(v) for v in d["complexity"]]
        true = [i for i, ct in enumerate(cand_tasks) if group_of_task[ct] == t["group"]]
        true_i = true[0] if true else None
        vp = max(range(len(p)), key=lambda i: (p[i], -i))
        vs = min(range(len(s)), key=lambda i: (s[i], i))
        p_sorted = sorted(p, reverse=True)
        s_sorted = sorted(s)
        gap = ratio = true_gap = math.nan
        if d.get("mean_elbo"):
            gaps = likelihood_gap(d["mean_elbo"], [float(v) for v in d["reference_elbo"]],
                                  [float(v) for v in d["reference_elbo_std"]])
            gap = gaps[vp]
            true_gap = gaps[true_i] if true_i is not None else math.nan
            ratio = label_ratio(s, [float(v) for v in d["permuted_complexity"]])[vp]
        rows.append(dict(
            run=name, task=d["task"], group=t["group"], C=len(p), outcome=t["outcome"],
            group_seen_before=seen_before,
            decision=d["decision"], true=None if true_i is None else cand_tasks[true_i],
            vote_p=cand_tasks[vp], vote_s=cand_tasks[vs],
            p_ok=true_i is not None and vp == true_i, s_ok=true_i is not None and vs == true_i,
            p_margin=p_sorted[0] - (p_sorted[1] if len(p) > 1 else 0.0),
            s_margin=(s_sorted[1] / s_sorted[0]) if len(s) > 1 and s_sorted[0] > 0 else math.inf,
            gap=gap, true_gap=true_gap, lift=len(p) * p[vp], ratio=ratio,
        ))
    return rows


def explain(row: Dict[str, Any]) -> str:
    """A short reason for an error row."""
    if row["outcome"] == "correct":
        return ""
    if row["true"] is None and row["outcome"] == "miss":
        return "repeat of a group whose first task was reused elsewhere (no entry of its own)"
    if row["true"] is None and row.get("group_seen_before"):
        return "repeat of a group whose first task was reused elsewhere; both votes agreed on that entry"
    if row["true"] is None:
        return "new task; both votes agreed on the nearest entry"
    if row["decision"] == "new":
        wrong = [k for k, ok in (("p", row["p_ok"]), ("S", row["s_ok"])) if not ok]
        return f"repeat; {' and '.join(wrong)} vote missed the true entry" if wrong else "repeat; rule said new"
    return "repeat mapped to another group's entry (both votes wrong)"


def format_rows(rows: Iterable[Dict[str, Any]]) -> str:
    """Markdown table of the rows."""
    def f(v, digits=2):
        return "–" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.{digits}f}"

    out = ["| run | task | group | C | outcome | true | p vote | S vote | p margin | S margin | "
           "gap (p vote) | gap (true) | lift | S ratio | why |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(
            f"| {r['run']} | {r['task']} | {r['group']} | {r['C']} | {r['outcome']} | "
            f"{'-' if r['true'] is None else 'T%d' % r['true']} | T{r['vote_p']}{' ✓' if r['p_ok'] else ''} | "
            f"T{r['vote_s']}{' ✓' if r['s_ok'] else ''} | {f(r['p_margin'])} | {f(r['s_margin'])} | "
            f"{f(r['gap'])} | {f(r['true_gap'])} | {f(r['lift'])} | {f(r['ratio'])} | {explain(r)} |"
        )
    return "\n".join(out) + "\n"


def load(paths: Iterable[str]) -> List[Dict[str, Any]]:
    """Rows of every SDR run in ``paths`` (non-SDR harness runs are skipped)."""
    rows = []
    for path in paths:
        run = json.loads(Path(path).read_text())
        if not has_records(run):
            continue
        rows += analyse_run(run, run.get("run_id", Path(path).stem))
    return rows


def main(argv: Optional[List[str]] = None) -> str:
    parser = argparse.ArgumentParser(description=cli.description(__doc__))
    parser.add_argument("paths", nargs="+", help="results JSONs")
    parser.add_argument("--errors-only", action="store_true", help="only rows whose outcome is not correct")
    args = parser.parse_args(argv)
    rows = load(args.paths)
    shown = [r for r in rows if r["outcome"] != "correct"] if args.errors_only else rows
    table = format_rows(shown)
    n_err = sum(r["outcome"] != "correct" for r in rows)
    print(table)
    print(f"{len(rows)} scored detections, {n_err} errors")
    return table


if __name__ == "__main__":
    main(sys.argv[1:])
