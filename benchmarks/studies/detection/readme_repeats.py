"""The README's Use block, per seed: are its repeats decided correctly?

Runs the first Python block of README.md as written (``pretrain_backbone`` on the first
three tasks, then ``SDRStrategy.from_benchmark(..., method="recommended",
settings="cpu")`` and the ``train`` loop). Only the seed changes:
``seed_everything(0)`` and ``MixedDigits(seed=0`` become seed S. Each scored task's
decision (tasks 3-9) is classified Correct / Miss / Incorrect against the stream's
ground truth (``benchmark.stream_groups``). One JSON per seed under ``OUT/runs``: the
decisions, outcomes, p-values, power, the level of each test (of a reuse: at the task's size paired with its
entry's reference, as the rule reads it), the block's printed
lines, wall seconds, torch threads and the 1-minute load average.

    R=docs/results/detection/readme
    python -m benchmarks.studies.detection.readme_repeats --seeds 10 11 12 13 14 --out $R/validation
    python -m benchmarks.studies.detection.readme_repeats --seeds 0 1 2 3 4 --out $R
    python -m benchmarks.studies.detection.readme_repeats --report --out $R
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import time
from pathlib import Path
from typing import Any, Dict, List, Sequence

from avalanche_sdr import cli

README = Path(__file__).resolve().parents[3] / "README.md"
"""The README whose first Python block runs."""

SEEDED = (r"seed_everything\(0\)", r"MixedDigits\(seed=0\b")
"""The two places of the Use block that carry the seed (each must occur once)."""


def use_block(readme: Path = README) -> str:
    """The first fenced Python block of ``readme``."""
    match = re.search(r"^```python\n(.*?)^```", readme.read_text(encoding="utf-8"), flags=re.S | re.M)
    if match is None:
        raise SystemExit(f"{readme} has no Python block")
    return match.group(1)


def seeded_block(seed: int, readme: Path = README) -> str:
    """The Use block with its seed replaced by ``seed``.

    :raises SystemExit: the block no longer seeds ``seed_everything`` and ``MixedDigits`` with 0, once each.
    """
    code = use_block(readme)
    for pattern in SEEDED:
        if len(re.findall(pattern, code)) != 1:
            raise SystemExit(f"the README's Use block should contain {pattern!r} once; update SEEDED")
    code = re.sub(SEEDED[0], f"seed_everything({seed})", code)
    return re.sub(SEEDED[1], f"MixedDigits(seed={seed}", code)


def run_seed(seed: int) -> Dict[str, Any]:
    """Run the seeded Use block; its decisions, outcomes and printed lines (module doc)."""
    import torch

    from avalanche_sdr.evaluation import classify_detection
    from avalanche_sdr.training.data import read_task_data

    namespace: Dict[str, Any] = {"__name__": "__readme__"}
    printed = io.StringIO()
    tick = time.perf_counter()
    with contextlib.redirect_stdout(printed):
        exec(compile(seeded_block(seed), f"README.md Use block (seed {seed})", "exec"), namespace)
    wall = time.perf_counter() - tick
    strategy, benchmark = namespace["strategy"], namespace["benchmark"]
    groups = [int(g) for g in benchmark.stream_groups]
    creator_group = {}
    outcomes, tasks = [], []
    detector = strategy.sdr.detector
    two_sample = getattr(detector, "two_sample", detector)  # the stage that reads the level
    settings = getattr(two_sample, "settings", None)
    for i, record in enumerate(strategy.detection_records):
        if record.decision == "warm_start":
            creator_group[record.entry] = groups[i]
            continue
        reused = creator_group[record.entry] if record.decision == "reuse" else None
        if record.decision == "new":
            creator_group[record.entry] = groups[i]
        outcome = classify_detection(groups[i], groups[:i], reused)
        outcomes.append(outcome)
        _, y = read_task_data(benchmark.train_stream[i])
        smallest = min(int((y == c).sum()) for c in torch.unique(y))  # the level of the task's test
        level = settings.level(smallest) if hasattr(settings, "level") else None
        if level is not None and record.decision == "reuse":  # the level of the reuse: paired with its entry
            level = settings.level(smallest, two_sample.smallest_reference(strategy.model, record.entry),
                                   len(torch.unique(y)))
        tasks.append(dict(task=record.task, group=groups[i], repeat=groups[i] in groups[:i],
                          decision=record.decision, entry=record.entry, outcome=outcome,
                          p_value=list(record.p_value), power=record.power,
                          decoy_rank_pvalue=record.decoy_rank_pvalue, train_images=len(y), smallest_class=smallest,
                          level=level))
    return dict(seed=seed, method=strategy.method, detector=detector.config(), outcomes=outcomes,
                correct=outcomes.count("correct"), miss=outcomes.count("miss"),
                incorrect=outcomes.count("incorrect"), scored=len(outcomes), tasks=tasks,
                printed=printed.getvalue().splitlines(), wall_seconds=wall,
                torch_threads=torch.get_num_threads(), load_average=os.getloadavg()[0])


def report(runs: Sequence[Dict[str, Any]]) -> str:
    """Markdown: one row per seed, and the total."""
    lines = ["| seed | Correct | Miss | Incorrect | decisions of tasks 3-9 | smallest p-value of a repeat's "
             "reused entry | level there | threads | load | wall s |", "|---" * 10 + "|"]
    for r in sorted(runs, key=lambda r: r["seed"]):
        reused_p = [(max(t["p_value"]), t["level"]) for t in r["tasks"] if t["repeat"] and t["p_value"]]
        low = min(reused_p) if reused_p else (None, None)
        lines.append(f"| {r['seed']} | {r['correct']} of {r['scored']} | {r['miss']} | {r['incorrect']} | "
                     f"{' '.join(t['decision'][0].upper() + str(t['entry']) for t in r['tasks'])} | "
                     f"{'–' if low[0] is None else f'{low[0]:.3g}'} | "
                     f"{'–' if low[1] is None else f'{low[1]:.2g}'} | {r['torch_threads']} | "
                     f"{r['load_average']:.1f} | {r['wall_seconds']:.0f} |")
    total = [sum(r[k] for r in runs) for k in ("correct", "scored", "miss", "incorrect")]
    lines.append(f"| all | {total[0]} of {total[1]} | {total[2]} | {total[3]} | | | | | | |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> str:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.studies.detection.readme_repeats",
                                     description=cli.description(__doc__))
    parser.add_argument("--seeds", nargs="+", type=cli.seed, default=[0], metavar="SEED",
                        help="seeds of the Use block (default: 0)")
    parser.add_argument("--threads", type=cli.positive_int, default=1, metavar="N",
                        help="torch threads (default 1, as the Use block sets)")
    parser.add_argument("--out", type=cli.output_dir, required=True, metavar="DIR",
                        help="output folder: one runs/seed<S>.json per seed")
    parser.add_argument("--report", action="store_true", help="run nothing: print the table of OUT/runs")
    args = parser.parse_args(argv)
    runs: List[Dict[str, Any]] = []
    if args.report:
        runs = [json.loads(p.read_text()) for p in sorted((Path(args.out) / "runs").glob("*.json"))]
    else:
        import torch

        torch.set_num_threads(args.threads)
        for seed in args.seeds:
            target = Path(args.out) / "runs" / f"seed{seed}.json"
            result = run_seed(seed)
            cli.write_json(target, result)
            runs.append(result)
            print(f"seed {seed}: {result['correct']} of {result['scored']} Correct, miss {result['miss']}, "
                  f"incorrect {result['incorrect']} ({result['wall_seconds']:.0f}s, load "
                  f"{result['load_average']:.1f})", flush=True)
    text = report(runs)
    print(text)
    return text


if __name__ == "__main__":
    cli.run_cli(main)


__all__ = ["README", "SEEDED", "report", "run_seed", "seeded_block", "use_block"]
