"""The report over run files: per design and overall, the figures issue #45 asks of the generated designs.

:func:`load_runs` reads ``OUT/runs/*.json`` (:mod:`benchmarks.stream_designs.runner`); :func:`report`
writes the markdown: per design the three methods' accuracy, the recommended method's difference against
head-only and its BWT, decisions and cost; overall the worst difference against head-only, the share of
designs with negative BWT, Correct / Miss / Incorrect by task size bin, the share of designs where the
recommended method is at least the paper's, the cost ratio against head-only, the designs whose Incorrect
exceeds 1 %, and, on the designs below the margin, where the recommended method lost to head-only, task by task,
by how each method handled the task (:func:`loss_breakdown`).

Definitions (also printed in the report): accuracy is the mean over a design's tasks of the final
task-aware test accuracy; BWT = (1 / (T - 1)) sum over j < T of (final accuracy of task j - its accuracy
right after it trained), the library's ``transfer_summary``; a design's cost is the CPU seconds
(``time.process_time``) of a method's run with one torch thread, E0's pretraining not included (it is
shared by the methods).
"""
from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from avalanche_sdr.vocabulary import OUTCOMES
from benchmarks.stream_designs.distribution import DESIGN_VERSION, SIZE_BINS, draw_design, summary

MARGIN_POINTS = 0.1
"""The issue's margin: accuracy >= head-only - 0.1 pt and BWT >= -0.1 pt on every design."""

INCORRECT_TARGET = 0.01
"""The issue's target: Incorrect <= 1 % of a design's scored tasks."""


def _incorrect_share(record: Dict[str, Any]) -> float:
    return float(record["results"]["detection"]["incorrect"])


def load_runs(out: Path) -> Dict[int, Dict[str, Dict[str, Any]]]:
    """Every run file under ``out/runs``: design seed -> method name -> run record.

    :raises ValueError: a file that is not a run record (the message names it), or runs of several
        distribution versions.
    """
    runs: Dict[int, Dict[str, Dict[str, Any]]] = {}
    for path in sorted((Path(out) / "runs").glob("*.json")):
        record = json.loads(path.read_text())
        if not {"design_seed", "method", "results", "cost", "design"} <= set(record):
            raise ValueError(f"{path} is not a stream-design run file (no design_seed / method / results / cost)")
        runs.setdefault(int(record["design_seed"]), {})[record["method"]] = record
    versions = {r.get("design_version") for methods in runs.values() for r in methods.values()}
    if len(versions) > 1:
        raise ValueError(f"{out} holds runs of several distribution versions {sorted(versions, key=str)}; "
                         "report each version's runs from a folder of their own")
    return runs


def _pt(value: Optional[float], signed: bool = True) -> str:
    if value is None:
        return "n/a"
    return f"{100 * value:+.2f}" if signed else f"{100 * value:.2f}"


def outcomes_by_bin(record: Dict[str, Any]) -> Dict[str, Dict[str, int]]:
    """A run's scored decisions per size bin: bin -> ``{"correct", "miss", "incorrect", "scored", "repeats"}``
    counts (``repeats``: scored tasks whose group was seen before)."""
    out = {name: dict.fromkeys(OUTCOMES + ("scored", "repeats"), 0) for name, _, _ in SIZE_BINS}
    seen = set()
    for task, result in zip(record["design"]["tasks"], record["results"]["tasks"]):
        group = result["group"]
        if result["outcome"] is not None:
            cell = out[task["size_bin"]]
            cell[result["outcome"]] += 1
            cell["scored"] += 1
            cell["repeats"] += int(group in seen)
        seen.add(group)
    return out


def _share(numerator: int, denominator: int) -> str:
    return f"{numerator}/{denominator} ({100 * numerator / denominator:.1f} %)" if denominator else "0/0"


HANDLINGS = ("warm start", "new (detected)", "new (gate refused)", "reused, head-only", "reused, update kept",
             "reused, update rolled back")
"""How a run handled a task (:func:`handling`), in this order in the loss table."""


def handling(result: Dict[str, Any]) -> str:
    """How a run handled one task (an entry of ``results["tasks"]``): one of :data:`HANDLINGS`. A task
    declared new with a gate score was a detected repeat the learning reuse's gate turned into a new entry;
    a rolled-back update (``"accumulate"``) or a refused one (``"no_loss"``) both restore the entry."""
    detection = result.get("detection") or {}
    if result["decision"] == "warm_start":
        return HANDLINGS[0]
    if result["decision"] == "new":
        return HANDLINGS[2] if detection.get("gate_accuracy") is not None else HANDLINGS[1]
    if not detection.get("entry_updated"):
        return HANDLINGS[3]
    return HANDLINGS[5] if detection.get("update_rolled_back") else HANDLINGS[4]


def _paired_tasks(runs: Dict[int, Dict[str, Dict[str, Any]]], seeds: Sequence[int], recommended: str,
                  head: str) -> List[tuple]:
    """Every task of designs ``seeds`` as both runs ended it: ``(seed, task of recommended's run, task of
    head's run, the design's task, (handling by recommended, handling by head), final accuracy difference,
    difference / the design's task count)``, in stream order."""
    pairs = []
    for seed in seeds:
        r_tasks = runs[seed][recommended]["results"]["tasks"]
        h_tasks = runs[seed][head]["results"]["tasks"]
        for r, h, t in zip(r_tasks, h_tasks, runs[seed][recommended]["design"]["tasks"]):
            difference = r["test_accuracy"] - h["test_accuracy"]
            pairs.append((seed, r, h, t, (handling(r), handling(h)), difference, difference / len(r_tasks)))
    return pairs


def _by_handling(pairs: Sequence[tuple]) -> List[Tuple[tuple, List[tuple]]]:
    """:func:`_paired_tasks`' tasks grouped by their pair of handlings, in :data:`HANDLINGS` order."""
    cells: Dict[tuple, List[tuple]] = {}
    for pair in pairs:
        cells.setdefault(pair[4], []).append(pair)
    order = {name: i for i, name in enumerate(HANDLINGS)}
    return [(key, cells[key]) for key in sorted(cells, key=lambda k: (order[k[0]], order[k[1]]))]


def loss_breakdown(runs: Dict[int, Dict[str, Dict[str, Any]]], seeds: Sequence[int], *, recommended: str,
                   head: str) -> List[str]:
    """Where ``recommended`` lost to ``head`` on designs ``seeds``: per (handling by ``recommended``,
    handling by ``head``) the tasks and their summed contribution to the designs' accuracy difference
    (a task's final accuracy difference / the design's task count, points), then every task that
    moved the difference by at least 0.5 pt either way. Markdown lines."""
    pairs = _paired_tasks(runs, seeds, recommended, head)
    lines = [f"| {recommended} | {head} | tasks | summed contribution to Δ (pt) |", "|---|---|---|---|"]
    for key, cell in _by_handling(pairs):
        lines.append(f"| {key[0]} | {key[1]} | {len(cell)} | {_pt(sum(share for *_, share in cell))} |")
    lines += ["", f"Tasks that moved Δ by at least 0.5 pt: design, task, group, mean images a class, {recommended} / "
              f"{head} (final accuracy %), contribution (pt).", ""]
    lines += [f"- design {seed}, task {r['task']} (group {r['group']}, {t['mean_per_class']:.0f} a class): {key[0]} "
              f"{100 * r['test_accuracy']:.1f} / {key[1]} {100 * h['test_accuracy']:.1f}: {_pt(share)}"
              for seed, r, h, t, key, _, share in pairs if abs(share) >= 0.005]
    return lines


def handling_over_designs(runs: Dict[int, Dict[str, Dict[str, Any]]], seeds: Sequence[int], *, recommended: str,
                          head: str) -> List[str]:
    """How the two methods handled every task of designs ``seeds``, and what each kind of task added to the
    mean Δ over the designs: per (handling by ``recommended``, handling by ``head``) the tasks, their mean
    final accuracy difference (points) with its 95 % Student-t interval over the tasks (tasks of one design
    are not independent draws: a rough interval), and their contribution to the mean Δ (the summed
    ``difference / design's task count`` over the designs, divided by the designs). Markdown lines."""
    lines = [f"| {recommended} | {head} | tasks | mean task difference (pt) | contribution to the mean Δ (pt) |",
             "|---|---|---|---|---|"]
    for key, cell in _by_handling(_paired_tasks(runs, seeds, recommended, head)):
        differences = [difference for *_, difference, _ in cell]
        lines.append(f"| {key[0]} | {key[1]} | {len(cell)} | {mean_interval(differences, unit='tasks')} | "
                     f"{_pt(sum(share for *_, share in cell) / len(seeds))} |")
    return lines


def report(runs: Dict[int, Dict[str, Dict[str, Any]]], *, recommended: str = "recommended",
           head: str = "recommended_head", paper: str = "paper") -> str:
    """The markdown report of ``runs`` (:func:`load_runs`).

    :param recommended: the method name of the recommended method's runs.
    :param head: the method name of its head-only runs.
    :param paper: the method name of the paper's runs.
    :return: markdown text: the definitions, the per-design table, the overall figures against the issue's
        targets, and the designs missing a method (left out of the overall figures).
    """
    names = (recommended, head, paper)
    complete = complete_designs(runs, names)
    partial = sorted(set(runs) - set(complete))
    lines = [
        "Accuracy: mean over a design's tasks of the final task-aware test accuracy (%). "
        f"Δ: {recommended} - {head} (points). BWT: (1 / (T - 1)) Σ_(j<T) (final accuracy of task j - its "
        "accuracy right after it trained), points. C/M/I: Correct / Miss / Incorrect of the scored tasks "
        "(every task after the warm-start ones). CPU: process CPU seconds of a method's run (one torch thread; "
        "E0's pretraining, shared, not included). Ratio: CPU of "
        f"{recommended} / CPU of {head}.",
        "",
        f"| design | source | tasks | {recommended} | {head} | Δ (pt) | {paper} | ≥ {paper} | BWT (pt) | "
        f"C/M/I {recommended} | C/M/I {paper} | CPU {recommended} (s) | CPU {head} (s) | ratio | MB {recommended} | "
        f"MB {head} | load |",
        "|" + "---|" * 17,
    ]
    deltas, bwts, at_least_paper, ratios = [], [], [], []
    bins = {n: {name: dict.fromkeys(OUTCOMES + ("scored", "repeats"), 0) for name, _, _ in SIZE_BINS} for n in names}
    for seed in complete:
        m = runs[seed]
        acc = {n: m[n]["results"]["average_accuracy"] for n in names}
        delta = acc[recommended] - acc[head]
        bwt = m[recommended]["results"].get("bwt")
        ratio = m[recommended]["cost"]["cpu_seconds"] / m[head]["cost"]["cpu_seconds"]
        deltas.append((delta, seed))
        if bwt is not None:
            bwts.append((bwt, seed))
        at_least_paper.append(acc[recommended] >= acc[paper])
        ratios.append(ratio)
        for n in names:
            for name, cell in outcomes_by_bin(m[n]).items():
                for key, value in cell.items():
                    bins[n][name][key] += value

        def cmi(n: str) -> str:
            d = m[n]["results"]["detection"]
            return "/".join(str(round(d[o] * d["n_scored"])) for o in OUTCOMES)

        loads = [m[n]["cost"].get("load_after") for n in names if m[n]["cost"].get("load_after") is not None]
        lines.append(
            f"| {seed} | {m[recommended]['design']['source']} | {len(m[recommended]['design']['tasks'])} | "
            f"{_pt(acc[recommended], False)} | {_pt(acc[head], False)} | {_pt(delta)} | {_pt(acc[paper], False)} | "
            f"{'yes' if acc[recommended] >= acc[paper] else 'no'} | {_pt(bwt)} | {cmi(recommended)} | {cmi(paper)} | "
            f"{m[recommended]['cost']['cpu_seconds']:.1f} | {m[head]['cost']['cpu_seconds']:.1f} | {ratio:.2f} | "
            f"{m[recommended]['memory_mb']:.3f} | {m[head]['memory_mb']:.3f} | "
            f"{max(loads) if loads else 'n/a'} |")
    lines.append("")
    if complete:
        worst, worst_seed = min(deltas)
        below = [s for d, s in deltas if d < -MARGIN_POINTS / 100]
        negative = [s for b, s in bwts if b < 0]
        below_bwt = [s for b, s in bwts if b < -MARGIN_POINTS / 100]
        lines += [
            f"Designs: {len(complete)} with all three methods.",
            "",
            f"- Worst Δ ({recommended} - {head}): {_pt(worst)} pt (design {worst_seed}); designs below "
            f"-{MARGIN_POINTS} pt: {_share(len(below), len(complete))} {below if below else ''}".rstrip(),
            f"- Mean Δ over the designs: {mean_interval([d for d, _ in deltas])} (one run per method and design: "
            "the interval is over designs, not over training draws)",
            f"- BWT of {recommended}: negative on {_share(len(negative), len(bwts))} designs, below "
            f"-{MARGIN_POINTS} pt on {_share(len(below_bwt), len(bwts))} {below_bwt if below_bwt else ''}; "
            f"worst {_pt(min(bwts)[0]) if bwts else 'n/a'} pt".rstrip(),
            f"- {recommended} ≥ {paper} in accuracy: {_share(sum(at_least_paper), len(complete))} designs",
            f"- CPU ratio {recommended} / {head}: median {statistics.median(ratios):.2f}, min {min(ratios):.2f}, "
            f"max {max(ratios):.2f}",
            "",
            "Decisions by task size (mean training images per class of the task), all designs:",
            "",
            "| method | size bin | scored | repeats | Correct | Miss | Incorrect |",
            "|---|---|---|---|---|---|---|",
        ]
        for n in names:
            for name, _, _ in SIZE_BINS:
                cell = bins[n][name]
                lines.append(f"| {n} | {name} | {cell['scored']} | {cell['repeats']} | "
                             f"{_share(cell['correct'], cell['scored'])} | {_share(cell['miss'], cell['scored'])} | "
                             f"{_share(cell['incorrect'], cell['scored'])} |")
        lines.append("")
        over = [s for s in complete if _incorrect_share(runs[s][recommended]) > INCORRECT_TARGET]
        lines += [f"Designs where {recommended}'s Incorrect exceeds {100 * INCORRECT_TARGET:.0f} % of its scored "
                  f"tasks: {_share(len(over), len(complete))} {over if over else ''}".rstrip(), ""]
        lines += [f"How each method handled the tasks, over the {len(complete)} designs:", ""]
        lines += handling_over_designs(runs, complete, recommended=recommended, head=head) + [""]
        if below:
            lines += [f"Where {recommended} lost to {head}, on the designs below -{MARGIN_POINTS} pt {below}: "
                      "each task's final accuracy difference / the design's task count, summed by how each "
                      "method handled the task.", ""]
            lines += loss_breakdown(runs, below, recommended=recommended, head=head) + [""]
    if partial:
        lines.append("Designs left out (a method's run missing): " + ", ".join(
            f"{s} ({', '.join(sorted(set(names) - set(runs[s])))} missing)" for s in partial))
        lines.append("")
    return "\n".join(lines)


def mean_interval(values: Sequence[float], level: float = 0.95, unit: str = "designs") -> str:
    """``values`` (fractions) as their mean in points with its two-sided Student-t interval at
    ``level``, e.g. ``"+0.35 pt (95 % interval -0.10 to +0.80, 10 designs)"`` (``unit``: what the values
    are of); one value: its mean alone.

    The distribution-level figure the per-design threshold cannot give: two runs of one method
    differ by up to 2 points on a design (docs/results/stream_designs.md, "Run-to-run spread"), so
    a design-by-design verdict from single runs is mostly noise, while the mean over designs is
    judged with its interval (scipy's t quantile, the designs taken as independent draws).
    """
    from scipy import stats

    n = len(values)
    mean = statistics.fmean(values)
    if n < 2:
        return f"{_pt(mean)} pt ({n} {unit[:-1]})"
    half = stats.t.ppf(0.5 + level / 2, n - 1) * statistics.stdev(values) / n ** 0.5
    return f"{_pt(mean)} pt ({100 * level:.0f} % interval {_pt(mean - half)} to {_pt(mean + half)}, {n} {unit})"


def write_report(out: Path, path: Optional[Path] = None, **names: str) -> str:
    """:func:`report` of the runs under ``out``, written to ``path`` (default ``out/report.md``); returns it."""
    from avalanche_sdr.training.checkpoint import atomic_write

    text = report(load_runs(out), **names)
    target = Path(path) if path is not None else Path(out) / "report.md"
    target.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(target, lambda f: f.write(text.encode("utf-8")))
    return text


def complete_designs(runs: Dict[int, Dict[str, Any]], names: Sequence[str]) -> List[int]:
    """The design seeds of ``runs`` that hold a run of every method of ``names``."""
    return sorted(s for s, methods in runs.items() if all(n in methods for n in names))


def designs_table(seeds: Sequence[int]) -> str:
    """A markdown table with one line per design of ``seeds`` (:func:`~benchmarks.stream_designs.distribution.summary`):
    source, groups, tasks, classes per task (min-max), training images of a class in a task (min-max), tasks per
    size bin, tasks nested in an earlier task's class set, repeats, repeats with flipped balance and with
    another label order, training images of the stream."""
    bins = "/".join(name for name, _, _ in SIZE_BINS)
    lines = [f"| design | source | groups | tasks | classes a task | images a class | tasks {bins} | nested | "
             "repeats | flipped | permuted | training images |", "|" + "---|" * 12]
    for seed in seeds:
        x = summary(draw_design(seed))
        lines.append(f"| {x['seed']} | {x['source']} | {x['groups']} | {x['tasks']} | {x['classes'][0]}-{x['classes'][1]} | "
                     f"{x['per_class'][0]}-{x['per_class'][1]} | {'/'.join(str(v) for v in x['bins'].values())} | "
                     f"{x['nested']} | {x['repeats']} | {x['flipped']} | {x['permuted']} | {x['train_images']} |")
    return "\n".join(lines)


def designs_page(seeds: Sequence[int], title: str,
                 command: str = "--seeds report --out docs/results/stream_designs/designs.md") -> str:
    """The page listing the designs of ``seeds``: ``title``, the distribution's version, the table
    (:func:`designs_table`) and the command that writes it (``command``: the list command's arguments)."""
    return "\n".join([
        f"# {title}", "",
        f"Designs drawn by `benchmarks.stream_designs` (distribution version {DESIGN_VERSION}; the distribution and "
        "the ground truth: docs/results/stream_designs.md). Written by", "",
        f"    python -m benchmarks.stream_designs list {command}", "",
        "Columns: groups (distinct class sets); classes a task and images a class (training images of one class in "
        "one task), min-max over the design; tasks per size bin (mean training images per class); nested: tasks "
        "whose class set is a strict subset or superset of an earlier task's; repeats: tasks after the first of "
        "their group; flipped: repeats whose class balance is reversed against the group's first task; permuted: "
        "repeats whose classes come in another label order.", "",
        designs_table(seeds), ""])


__all__ = ["MARGIN_POINTS", "complete_designs", "designs_page", "designs_table", "handling_over_designs", "load_runs", "mean_interval",
           "outcomes_by_bin", "report", "write_report"]
