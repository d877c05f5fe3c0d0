"""Detection alone on the stream designs: a detector's decisions over each design, replayed without training.

The recommended detector (the small-task rule over the two-sample test) reads E0's features, the projected
input pixels and what it stored for each entry; it reads no adapter, head or generator. Its decisions over a
design can therefore be replayed exactly without training
(:func:`benchmarks.studies.detection.sim.simulate`: ``detector.detect``, then ``detector.remember`` on a new
entry, as ``SDRStrategy`` calls them), on the design's benchmark and E0 made as the runner makes them
(:func:`benchmarks.stream_designs.runner.design_stream`, with the pretraining record that holds the warm-start
references). It measures the detector's Correct / Miss / Incorrect on many designs for a fraction of a full
run's cost. What it leaves out: the learning reuse's gate (which turns some detected repeats into new
entries, and so changes the entries later tasks are compared with) and everything trained.

One JSON per (design, rule) in ``OUT/replays``; existing ones are skipped.

    python -m benchmarks.stream_designs replay --seeds validation validation2 --rules recommended recommended_confirm_accepts --out OUT --data-root SHARED_DATA
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence

from avalanche_sdr.vocabulary import OUTCOMES
from benchmarks.stream_designs.distribution import SIZE_BINS, check_design
from benchmarks.studies.detection.sim import RECOMMENDED_RULES


RULES = RECOMMENDED_RULES
"""Rules this command replays: ``method="recommended"``'s detector and its named variants, the table of
:data:`benchmarks.studies.detection.sim.RECOMMENDED_RULES` (built by
:func:`~benchmarks.studies.detection.sim.make_rule`): the method's detector as the library defines it, the
same with ``SmallTaskSettings(confirm_accepts=True)``, and the same detector at a named level: ``"by_size"``
(the method's level before ``5b6973f``), ``"by_paired_power"`` (its level since), and the latter with
``confirm_accepts``, each in the two-sample test's 16 projected dimensions; the paired level in 32 or 64
dimensions (``"recommended_dim32"``, ``"recommended_dim64"``); and the paired level with the small-task
fallback's false-reuse level over every candidate entry (``"recommended_familywise"``) or at 0.001 with 999
decoys (``"recommended_beta001"``); every named rule but ``"recommended_familywise"`` has the fallback's level per
candidate (``familywise=False``, the method's before validation designs 220-319). The first two follow the method's default:
replays made before ``5b6973f`` under those names used ``"by_size"``, later ones ``"by_paired_power"``."""


def replay_path(out: Path, seed: int, rule: str) -> Path:
    """The replay file of (design ``seed``, ``rule``) under ``out``."""
    return Path(out) / "replays" / f"design{int(seed):04d}_{rule}.json"


def replay_design(design: Dict[str, Any], rules: Sequence[str], out: Path, *, data_root: Optional[str] = None,
                  fashion_root: Optional[str] = None, e0_dir: Optional[Path] = None,
                  log: Callable[[str], None] = print) -> List[Path]:
    """Replay every rule of ``rules`` (names of :data:`RULES`) on ``design`` that has no replay file yet.

    :return: the replay files written now (none when all existed or the source is absent: a line says so).
    :raises ValueError: an unknown rule (before anything is loaded), an inconsistent design.
    """
    import torch

    from avalanche_sdr.cli import write_json
    from benchmarks.stream_designs.runner import design_stream
    from benchmarks.studies.detection.sim import make_rule, simulate

    unknown = sorted(set(rules) - set(RULES))
    if unknown:
        raise ValueError(f"unknown rule(s) {unknown}; the rules are {sorted(RULES)}")
    check_design(design)
    seed = int(design["seed"])
    todo = [rule for rule in rules if not replay_path(out, seed, rule).is_file()]
    if not todo:
        return []
    made = design_stream(design, out, data_root=data_root, fashion_root=fashion_root, e0_dir=e0_dir, log=log)
    if made is None:
        return []
    benchmark, e0, _ = made
    image = benchmark.train_stream[0].dataset[0][0]
    written = []
    for rule in todo:
        cpu = time.process_time()
        result = simulate(make_rule(rule), e0, benchmark, int(design["e0"]["in_channels"]), int(image.shape[-1]))
        result.update(design_seed=seed, rule=rule, source=design["source"], design=design,
                      torch_threads=torch.get_num_threads(), cpu_seconds=time.process_time() - cpu)
        path = replay_path(out, seed, rule)
        write_json(path, result)
        written.append(path)
        log(f"design {seed} ({design['source']}): {rule} Correct {result['correct']:.3f} Miss {result['miss']:.3f} "
            f"Incorrect {result['incorrect']:.3f} of {result['n_scored']}, {result['unique_entries']} entries, "
            f"{result['cpu_seconds']:.1f} CPU s")
    return written


def load_replays(out: Path) -> Dict[int, Dict[str, Dict[str, Any]]]:
    """Every replay file under ``out/replays``: design seed -> rule -> replay record."""
    replays: Dict[int, Dict[str, Dict[str, Any]]] = {}
    for path in sorted((Path(out) / "replays").glob("*.json")):
        record = json.loads(path.read_text())
        replays.setdefault(int(record["design_seed"]), {})[record["rule"]] = record
    return replays


def replay_table(replays: Dict[int, Dict[str, Dict[str, Any]]], rules: Sequence[str]) -> str:
    """Markdown: per rule, Correct / Miss / Incorrect counts of the scored tasks over the designs that have
    every rule, by size bin (mean training images a class of the task); designs whose Incorrect exceeds 1 % of
    their scored tasks; then every design where the rules' decisions differ."""
    seeds = sorted(s for s, by_rule in replays.items() if all(r in by_rule for r in rules))
    lines = [f"Designs with every rule: {len(seeds)}.", "",
             "| rule | size bin | scored | Correct | Miss | Incorrect |", "|---|---|---|---|---|---|"]
    for rule in rules:
        cells = {name: [0, 0, 0] for name, _, _ in SIZE_BINS}
        for seed in seeds:
            record = replays[seed][rule]
            tasks = record["design"]["tasks"][int(record["design"]["n_warm_start"]):]
            for task, outcome in zip(tasks, record["outcomes"]):
                cells[task["size_bin"]][OUTCOMES.index(outcome)] += 1
        total = [sum(c[i] for c in cells.values()) for i in range(3)]
        for name, (c, m, i) in list(cells.items()) + [("all", total)]:
            n = c + m + i
            lines.append(f"| {rule} | {name} | {n} | {c} | {m} | {i} |")
    lines.append("")
    for rule in rules:
        over = [s for s in seeds if replays[s][rule]["incorrect"] > 0.01]
        lines.append(f"- {rule}: designs with Incorrect above 1 % of their scored tasks: {len(over)} {over}")
    lines += ["", *fallback_lines(replays, seeds, rules)]
    lines += ["", "Designs where the rules decide differently (Correct / Miss / Incorrect counts per rule):", ""]
    for seed in seeds:
        by_rule = replays[seed]
        if len({tuple(by_rule[r]["decisions"]) for r in rules}) > 1:
            counts = "; ".join(f"{r} {' / '.join(str(by_rule[r]['outcomes'].count(o)) for o in OUTCOMES)}"
                               for r in rules)
            lines.append(f"- design {seed} ({by_rule[rules[0]]['source']}): {counts}")
    return "\n".join(lines) + "\n"


def fallback_lines(replays: Dict[int, Dict[str, Dict[str, Any]]], seeds: Sequence[int],
                   rules: Sequence[str]) -> List[str]:
    """Markdown: per rule and source, the wrong reuses by the stage that decided them (the small-task
    fallback, which records a decoy rank, or the two-sample rule), and the fallback's realised false-reuse
    share: of the new groups' tasks (a group's first task after the warm start) whose best candidate the
    fallback ranked against its decoys, the share it reused. Under the fallback's null (a new task differs
    from the candidate as its decoys do) that share is at most about beta times the candidates tested."""
    lines = ["Wrong reuses by the stage that decided them, and the fallback on new groups (tasks of a group's "
             "first occurrence that the fallback ranked against its decoys, and how many of those it reused):", "",
             "| rule | source | Incorrect | by the fallback | by the two-sample rule | new groups | ranked by the "
             "fallback | reused by it | share |", "|---|---|---|---|---|---|---|---|---|"]
    for rule in rules:
        rows: Dict[str, List[int]] = {}
        for seed in seeds:
            record = replays[seed][rule]
            design = record["design"]
            first = int(design["n_warm_start"])
            by_task = {int(r["task"]): r for r in record["records"]}
            row = rows.setdefault(record["source"], [0] * 6)
            for position, outcome in enumerate(record["outcomes"], start=first):
                ranked = by_task[position].get("decoy_rank_pvalue") is not None
                if outcome == "incorrect":
                    row[0] += 1
                    row[1 if ranked else 2] += 1
                if int(design["tasks"][position]["occurrence"]) == 0:
                    row[3] += 1
                    row[4] += ranked
                    row[5] += ranked and outcome == "incorrect"
        for source in sorted(rows) + ["all"]:
            row = rows[source] if source != "all" else [sum(r[i] for r in rows.values()) for i in range(6)]
            share = f"{row[5] / row[4]:.3f}" if row[4] else "-"
            lines.append(f"| {rule} | {source} | " + " | ".join(str(v) for v in row) + f" | {share} |")
    return lines


__all__ = ["RULES", "fallback_lines", "load_replays", "replay_design", "replay_path", "replay_table"]
