"""The harness's report: ``table2.md`` (the paper's Table 2 layout, mean ± sample std over
seeds), ``runs.csv``, ``runs.json``, the accuracy-memory Pareto front and the figures in
``OUT/plots/``, all from run dicts (the run JSONs of :mod:`benchmarks.table2.executors`).
"""
from __future__ import annotations

import csv
import json
import math
import os
from pathlib import Path
from typing import Any, Dict, List, Sequence, Tuple

from avalanche_sdr import cli
from avalanche_sdr.vocabulary import REUSE_MODES
from benchmarks.table2.methods import METHODS
from benchmarks.table2.variants import MEMORY_KNOBS, PROTOCOLS, REUSE_DEFAULT, row_reuse


def mean_std(values: Sequence[float]) -> tuple:
    """Mean and sample standard deviation (0.0 for a single value)."""
    n = len(values)
    mean = sum(values) / n
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else 0.0
    return mean, std


def plus_minus(values: Sequence[float], digits: int) -> str:
    """``"mean ± std"`` of ``values`` (:func:`mean_std`) with ``digits`` decimals."""
    mean, std = mean_std(values)
    return f"{mean:.{digits}f} ± {std:.{digits}f}"


def _without_reuse(variant: str, reuse: str) -> str:
    """A variant's name less its reuse part (``a4b8_accumulate`` -> ``a4b8``)."""
    if reuse == REUSE_DEFAULT:
        return variant
    if variant == reuse:
        return ""
    return variant[:-len(reuse) - 1] if variant.endswith("_" + reuse) else variant


def table_rows(runs: Sequence[Dict[str, Any]]) -> List[List[Dict[str, Any]]]:
    """The runs grouped into table rows (one per method and variant), each row's runs in
    seed order; rows in the paper's order of the methods; within a method, its rows of
    each reuse (``--reuse``; :data:`~avalanche_sdr.vocabulary.REUSE_MODES` order, the
    paper's ``head`` first), each reuse's own row first (``""``, ``accumulate``), then its
    variants by mean memory."""
    order = {name: i for i, name in enumerate(METHODS)}
    by_row: Dict[tuple, List[Dict[str, Any]]] = {}
    for r in runs:
        by_row.setdefault((r["method"], r.get("variant", "")), []).append(r)

    def row_order(key):
        memory = sum(r["memory_mb"] for r in by_row[key]) / len(by_row[key])
        reuse = row_reuse(by_row[key][0].get("options"))
        rank = REUSE_MODES.index(reuse) if reuse in REUSE_MODES else len(REUSE_MODES)
        return order.get(key[0], len(order)), rank, _without_reuse(key[1], reuse) != "", memory, key[1]

    return [sorted(by_row[key], key=lambda r: r["seed"]) for key in sorted(by_row, key=row_order)]


def signed_plus_minus(values: Sequence[float], digits: int) -> str:
    """:func:`plus_minus` with the mean's sign always shown (``+0.50 ± 1.00``)."""
    mean, std = mean_std(values)
    return f"{mean:+.{digits}f} ± {std:.{digits}f}"


def format_table(runs: Sequence[Dict[str, Any]]) -> str:
    """The Markdown table, one row per method (and variant) in the paper's order (mean ± std
    over seeds).

    Acc (%), BWT (backward transfer ``bwt`` in accuracy points, signed: positive, earlier
    tasks improved; "–" for a row with a run without it, e.g. an older run file) and
    Mem (MB) for every row; Correct / Miss / Incorrect (%) for SDR rows ("–" otherwise);
    wall time per run (s, mean ± std); the number of seeds.
    """
    header = ("| Method | Acc (%) | BWT (pts) | Mem (MB) | Correct (%) | Miss (%) | Incorrect (%) | Wall (s) "
              "| Seeds |\n|---|---|---|---|---|---|---|---|---|")
    rows = [header]
    for rs in table_rows(runs):
        bwt = [r.get("bwt") for r in rs]
        cells = [rs[0]["label"], plus_minus([100 * r["average_accuracy"] for r in rs], 2),
                 "–" if None in bwt else signed_plus_minus([100 * b for b in bwt], 2),
                 plus_minus([r["memory_mb"] for r in rs], 2)]
        if all(r.get("detection") for r in rs):
            cells += [plus_minus([100 * r["detection"][k] for r in rs], 1) for k in ("correct", "miss", "incorrect")]
        else:
            cells += ["–"] * 3
        cells += [plus_minus([r["wall_seconds"] for r in rs], 1), ",".join(str(r["seed"]) for r in rs)]
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows) + "\n"


def _with_and_without_labels(run: Dict[str, Any]) -> Tuple[Any, Any, float]:
    """A task-free row's (task-aware accuracy, task-free accuracy, memory MB), accuracies in
    [0, 1] or ``None``: an SDR row's task-free accuracy and memory with its recommended
    router (:data:`benchmarks.table2.catalogue.SDR_ROUTER`; its task-aware accuracy is the run's
    own), a one-head row's its own (``task_free["self"]``) and its ``task_aware`` score."""
    from benchmarks.table2.catalogue import SDR_ROUTER
    from benchmarks.table2.engine import memory_mb_with_routers

    scores = run.get("task_free") or {}
    if SDR_ROUTER in scores:
        return run["average_accuracy"], scores[SDR_ROUTER]["task_free"], memory_mb_with_routers(run, [SDR_ROUTER])
    aware = (run.get("task_aware") or {}).get("average_accuracy")
    return aware, scores.get("self", {}).get("task_free"), run["memory_mb"]


def format_task_free_table(runs: Sequence[Dict[str, Any]]) -> str:
    """The rows that predict with and without task labels (runs with ``task_free`` scores),
    as a Markdown table: task-aware and task-free accuracy (%), memory (MB; an SDR row with
    its recommended router's state only), wall (s), seeds; ``""`` when there is none. An
    accuracy a row does not report (an older run file without ``task_aware``) is "–"."""
    rows = [rs for rs in table_rows(runs) if all(r.get("task_free") for r in rs)]
    if not rows:
        return ""
    lines = ["", "Prediction with and without task labels (task-free: SDR with its recommended router "
             "`lda_weighted`, the other rows their one head over the class ids; memory of SDR with that "
             "router's state only):", "",
             "| Method | Task-aware acc (%) | Task-free acc (%) | Mem (MB) | Wall (s) | Seeds |",
             "|---|---|---|---|---|---|"]
    for rs in rows:
        values = [_with_and_without_labels(r) for r in rs]
        cells = [rs[0]["label"]]
        for k in (0, 1):
            column = [v[k] for v in values]
            cells.append("–" if None in column else plus_minus([100 * a for a in column], 2))
        cells += [plus_minus([v[2] for v in values], 2), plus_minus([r["wall_seconds"] for r in rs], 1),
                  ",".join(str(r["seed"]) for r in rs)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


CSV_FIELDS = ["run_id", "method", "variant", "label", "stream", "preset", "seed", "average_accuracy",
              "memory_mb", "correct", "miss", "incorrect", "unique_tasks", "bwt", "forgetting", "avalanche_bwt",
              "wall_seconds", "evaluation_seconds"]


def write_outputs(runs: Sequence[Dict[str, Any]], out_dir: os.PathLike, header: str = "", notes: str = "") -> str:
    """Write ``table2.md`` (``header``, the table and, where runs predict without task
    labels, :func:`format_task_free_table`'s, then ``notes``: e.g. the ``--tune``
    section of :func:`benchmarks.table2.tuning.format_notes`), ``runs.csv`` and ``runs.json`` to
    ``out_dir``; return the tables."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    table = format_table(runs) + format_task_free_table(runs)
    (out_dir / "table2.md").write_text(header + table + notes)
    with open(out_dir / "runs.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_FIELDS)
        writer.writeheader()
        for r in runs:
            d = r.get("detection") or {}
            row = {k: r.get(k) for k in CSV_FIELDS}
            row.update({k: d.get(k) for k in ("correct", "miss", "incorrect", "unique_tasks")})
            writer.writerow(row)
    cli.write_json(out_dir / "runs.json", list(runs))
    return table


def curve_key(method: str, options: Dict[str, Any]) -> Tuple[str, str]:
    """The accuracy-memory curve a row belongs to: its method and its options other than
    the memory knobs (:data:`benchmarks.table2.methods.MEMORY_KNOBS`), e.g. ER under the paper's
    protocol is a curve of its own."""
    fixed = {k: v for k, v in (options or {}).items() if k not in MEMORY_KNOBS}
    return method, json.dumps(fixed, sort_keys=True)


def curve_label(method: str, fixed: Dict[str, Any]) -> str:
    """The legend label of a curve (:func:`curve_key`): the method's label with its fixed
    options named, e.g. ``"ER [paper]"``, ``"SDR (EFT for E) [accumulate]"``."""
    label = METHODS[method].label if method in METHODS else method
    fixed = dict(fixed)
    reuse = fixed.pop("reuse", REUSE_DEFAULT)
    parts = [] if reuse == REUSE_DEFAULT else [reuse]
    if fixed:
        named = [p for p, by_method in PROTOCOLS.items()
                 if by_method.get(method) and dict(by_method[method]) == fixed]
        parts.insert(0, named[0] if named else ", ".join(f"{k}={v}" for k, v in sorted(fixed.items())))
    return f"{label} [{', '.join(parts)}]" if parts else label


def row_points(runs: Sequence[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """One point per table row (method, variant) of the test-scored runs: ``accuracy`` (%)
    and ``memory_mb``, means over seeds, with their sample stds (``accuracy_std``,
    ``memory_std``), ``label``, ``method``, ``variant``, ``options``, ``seeds`` and ``curve``
    (:func:`curve_key`); in the table's order (:func:`table_rows`)."""
    points = []
    for rs in table_rows([r for r in runs if r.get("split", "test") == "test"]):
        method, variant = rs[0]["method"], rs[0].get("variant", "")
        acc = mean_std([100 * r["average_accuracy"] for r in rs])
        mem = mean_std([r["memory_mb"] for r in rs])
        options = rs[0].get("options") or {}
        points.append(dict(method=method, variant=variant, label=rs[0]["label"], options=options,
                           accuracy=acc[0], accuracy_std=acc[1], memory_mb=mem[0], memory_std=mem[1],
                           seeds=sorted(r["seed"] for r in rs), curve=curve_key(method, options)))
    return points


def pareto_front(runs: Sequence[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """The rows on the accuracy-memory Pareto front: the :func:`row_points` that no other
    row dominates (another row dominates a row if its mean accuracy is at least as high and
    its mean memory at most as large, one of the two strictly). In memory order."""
    points = row_points(runs)
    front = [p for p in points
             if not any(q["accuracy"] >= p["accuracy"] and q["memory_mb"] <= p["memory_mb"]
                        and (q["accuracy"] > p["accuracy"] or q["memory_mb"] < p["memory_mb"]) for q in points)]
    return sorted(front, key=lambda p: (p["memory_mb"], -p["accuracy"]))


def pareto_lines(runs: Sequence[Dict[str, Any]]) -> str:
    """The rows on the accuracy-memory Pareto front (:func:`pareto_front`), one line."""
    front = pareto_front(runs)
    return "accuracy-memory Pareto front: " + "; ".join(
        f"{p['label']} ({p['accuracy']:.2f} %, {p['memory_mb']:.3f} MB)" for p in front)


def write_plots(runs: Sequence[Dict[str, Any]], out_dir: os.PathLike, log=print) -> List[Path]:
    """Figures of a harness folder, in ``OUT/plots/``.

    ``accuracy_memory.png``: every row's accuracy against its memory (mean ± sample std
    over seeds, the table's two main columns). Rows of a method that differ only in a
    memory knob (ER's buffer: ``pc*`` and ``mem_*`` variants; SDR's EFT ``a``/``b``:
    ``a*b*`` variants; :func:`curve_key`) are one curve, joined in memory order and each
    point labelled with its variant; a method without such variants is a single marker.
    The rows on the Pareto front (:func:`pareto_front`) are ringed in black and joined by a
    dotted step line. For every SDR run that stored its full results (``sdr_results``),
    the figures of :func:`avalanche_sdr.plots.make_all_plots` (S and p heatmaps, a
    detection panel, memory growth, per-task accuracy) in ``OUT/plots/<run_id>/``; a run
    whose records hold no scores (Optimal's oracle decisions) gets a log line instead.

    ``group_curve.png`` (where runs have a ``group_curve``):
    :func:`avalanche_sdr.plots.plot_group_curve`, the accuracy on the tasks of the group
    seen most often against the times it has been seen, a line per row (mean over seeds).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from avalanche_sdr.plots import make_all_plots
    from avalanche_sdr.plots.results import ResultsFormatError

    plots = Path(out_dir) / "plots"
    plots.mkdir(parents=True, exist_ok=True)
    written = []
    points = row_points(runs)
    curves: Dict[Tuple[str, str], List[Dict[str, Any]]] = {}
    for p in points:
        curves.setdefault(p["curve"], []).append(p)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    colors = plt.get_cmap("tab20").colors  # one colour per curve or marker: 20 before any repeats
    markers = "osD^v<>ph*"
    for i, ((method, fixed), pts) in enumerate(curves.items()):
        pts = sorted(pts, key=lambda p: p["memory_mb"])
        label = curve_label(method, json.loads(fixed)) if len(pts) > 1 else pts[0]["label"]
        marker = markers[i % len(markers)]
        ax.errorbar([p["memory_mb"] for p in pts], [p["accuracy"] for p in pts],
                    xerr=[p["memory_std"] for p in pts], yerr=[p["accuracy_std"] for p in pts],
                    fmt=marker + ("-" if len(pts) > 1 else ""), capsize=3, label=label,
                    color=colors[(2 * i) % 20 + (2 * i) // 20 % 2])
        if len(pts) > 1:  # each point's variant; rows at the same place (e.g. capped sizes) share a label
            names: Dict[Tuple[float, float], List[str]] = {}
            for p in pts:
                names.setdefault((p["memory_mb"], p["accuracy"]), []).append(p["variant"] or "preset")
            for xy, variants in names.items():
                ax.annotate(" / ".join(variants), xy, fontsize=6, xytext=(3, -8), textcoords="offset points")
    front = pareto_front(runs)
    if front:
        ax.scatter([p["memory_mb"] for p in front], [p["accuracy"] for p in front], s=150, facecolors="none",
                   edgecolors="black", linewidths=1.0, zorder=5, label="Pareto front")
        ax.step([p["memory_mb"] for p in front], [p["accuracy"] for p in front], where="post", color="black",
                linestyle=":", linewidth=0.8, zorder=4)
    ax.set_xlabel("memory after the last task (MB)")
    ax.set_ylabel("average accuracy (%)")
    ax.set_title(f"{runs[0]['stream_label']}, preset {runs[0]['preset']} (mean ± std over seeds)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    path = plots / "accuracy_memory.png"
    fig.savefig(path, dpi=150)
    plt.close(fig)
    written.append(path)
    ordered = [r for rs in table_rows([r for r in runs if r.get("split", "test") == "test"]) for r in rs]
    if any(r.get("group_curve") for r in ordered):
        from avalanche_sdr.plots import plot_group_curve

        ax = plot_group_curve(ordered)
        path = plots / "group_curve.png"
        ax.figure.savefig(path, dpi=150)
        written.append(path)
    for r in runs:
        if not r.get("sdr_results"):
            continue
        try:
            written += make_all_plots(r["sdr_results"], plots / r["run_id"])
        except ResultsFormatError as error:  # e.g. Optimal: oracle decisions carry no scores
            if log is not None:
                log(f"no figures for {r['run_id']}: {error}")
        plt.close("all")
    if log is not None:
        log(f"wrote {len(written)} figure(s) under {plots}")
    return written


__all__ = ["CSV_FIELDS", "curve_key", "curve_label", "format_table", "format_task_free_table", "mean_std",
           "pareto_front", "pareto_lines", "plus_minus", "row_points", "signed_plus_minus", "table_rows",
           "write_outputs", "write_plots"]
