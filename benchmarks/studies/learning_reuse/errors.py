"""What a wrong reuse costs the learning reuse, with and without its guard.

With ``reuse="accumulate"`` a reuse trains the reused entry, so a *wrong* reuse (a task
of another group mapped to the entry) can damage the earlier tasks that answer through
it. This script injects wrong reuses on purpose and measures the damage:

- decisions come from ground truth (:class:`benchmarks.table2.methods.OracleDetector`), except
  that each scored task, with probability ``rate`` (a seeded draw per task, the same
  tasks for every configuration of a seed), instead reuses a wrong entry: one, drawn
  uniformly, created by a task of another group with the same class count;
- each configuration runs the whole stream: ``reuse="head"`` (the paper's reuse: a wrong
  reuse costs only the wrong task's own accuracy), ``reuse="accumulate"`` with the guard
  (``LearningReuse(guard=True)``, the default) and without it;
- **victims**: the tasks mapped to an entry before a wrong reuse of it was injected
  (injected tasks excluded); their final accuracy is compared with the same tasks' in
  the configuration's run at rate 0 of the same seed (the damage, in points).

Usage::

    python -m benchmarks.studies.learning_reuse.errors --stream fashion50 --seeds 0 1 --rates 0 0.05 0.2 --out results/reuse_errors
    python -m benchmarks.studies.learning_reuse.errors --out results/reuse_errors --report-only

Finished runs are kept in ``OUT/runs/*.json`` and skipped when the command runs again;
the table is written to ``OUT/reuse_errors.md``. Argument parsing imports neither torch
nor Avalanche.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from benchmarks.table2 import catalogue

CONFIGS = ("head", "accumulate", "accumulate_noguard")
"""Configurations: the paper's reuse, the learning reuse with its guard, without it."""

def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.studies.learning_reuse.errors",
        description="Inject wrong reuses at chosen rates and measure what they cost earlier tasks, for the "
                    "paper's head-only reuse and the learning reuse with and without its guard.",
    )
    parser.add_argument("--stream", default="fashion50", choices=sorted(catalogue.STREAMS),
                        help="harness stream (default fashion50)")
    parser.add_argument("--preset", default="cpu", choices=catalogue.PRESETS, help="training budget (default cpu)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0], help="stream seeds (default 0)")
    parser.add_argument("--rates", type=float, nargs="+", default=[0.0, 0.05, 0.2],
                        help="probabilities of a wrong reuse per scored task (default 0 0.05 0.2)")
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=CONFIGS,
                        help="configurations to run (default all)")
    parser.add_argument("--data-root", default=None, help="the stream's data folder (as the harness)")
    parser.add_argument("--backbone-weights", default=None, help="E0 weights for emnist100 (as the harness)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--out", required=True, help="output folder (runs/ and reuse_errors.md)")
    parser.add_argument("--report-only", action="store_true", help="write the table from finished runs only")
    args = parser.parse_args(argv)
    if any(not 0.0 <= r <= 1.0 for r in args.rates):
        parser.error(f"--rates must lie in [0, 1], got {args.rates}")
    if args.threads < 1:
        parser.error("--threads must be >= 1")
    return args


def run_id(stream: str, preset: str, config: str, rate: float, seed: int) -> str:
    return f"{stream}_{preset}_{config}_rate{rate:g}_seed{seed}"


def execute(stream_name: str, preset_name: str, config: str, rate: float, seed: int, out: Path,
            data_root: Optional[str], weights: Optional[str], threads: int) -> Dict[str, Any]:
    """One run of the stream (module doc); returns its JSON-safe result."""
    import torch
    from avalanche.evaluation.metrics import accuracy_metrics
    from avalanche.training.plugins import EvaluationPlugin

    from avalanche_sdr import LearningReuse, SDRStrategy, build_sdr_model, seed_everything
    from avalanche_sdr.training.stream_runner import run_sdr_stream
    from benchmarks.studies.detectors import ErringOracle
    from benchmarks.table2.methods import PRESETS, STREAMS
    from benchmarks.table2.engine import load_backbone, prepare_backbone
    from benchmarks.table2.specs import RunSpec

    torch.set_num_threads(threads)
    stream, preset = STREAMS[stream_name], PRESETS[preset_name]
    path = prepare_backbone(stream_name, preset_name, seed, out, data_root=data_root, weights=weights)
    seed_everything(seed)
    benchmark = stream.build(seed, preset.capped, data_root)
    backbone = load_backbone(RunSpec(stream_name, preset_name, "optimal", seed, path))
    model = build_sdr_model(backbone, in_channels=stream.in_channels, image_size=stream.image_size, generator=None)
    settings = preset.sdr
    reuse = "head" if config == "head" else LearningReuse(guard=config != "accumulate_noguard")
    detector = ErringOracle(benchmark.stream_groups, rate, seed)
    strategy = SDRStrategy(model=model, settings=settings, reuse=reuse, detector=detector,
                           evaluator=EvaluationPlugin(accuracy_metrics(experience=True), loggers=[]))
    start = time.perf_counter()
    results = run_sdr_stream(strategy, benchmark, seed=seed)
    records = strategy.detection_records
    victims: Dict[int, List[int]] = {}
    for task, entry in detector.injected.items():
        victims[task] = [r.task for r in records[:task] if r.entry == entry and r.task not in detector.injected]
    return {
        "run_id": run_id(stream_name, preset_name, config, rate, seed),
        "stream": stream_name, "preset": preset_name, "config": config, "rate": rate, "seed": seed,
        "settings": dict(settings.to_dict(), reuse=reuse if isinstance(reuse, str) else reuse.config()),
        "average_accuracy": results["average_accuracy"],
        "task_accuracies": [t["test_accuracy"] for t in results["tasks"]],
        "memory_mb": results["memory_mb"],
        "injected": {str(t): e for t, e in detector.injected.items()},
        "refused": [t for t in detector.injected if records[t].decision == "new"],
        "victims": {str(t): v for t, v in victims.items()},
        "n_scored": results["detection"]["n_scored"],
        "wall_seconds": time.perf_counter() - start,
        "torch_threads": torch.get_num_threads(),
    }


def _mean(values: Sequence[float]) -> Optional[float]:
    return sum(values) / len(values) if values else None


def report(runs: Sequence[Dict[str, Any]]) -> str:
    """The markdown table: per configuration and rate, summed over seeds."""
    by_key = {(r["config"], r["rate"], r["seed"]): r for r in runs}
    lines = ["| reuse | wrong-reuse rate | seeds | injected | refused by the guard | victims | victims' acc. (%) "
             "| same tasks at rate 0 (%) | damage (points) | wrong tasks' own acc. (%) | avg acc. (%) | mem (MB) "
             "| wall (s) |", "|" + "---|" * 13]
    for config in CONFIGS:
        for rate in sorted({r["rate"] for r in runs}):
            group = [r for r in runs if r["config"] == config and r["rate"] == rate]
            if not group:
                continue
            victim_acc, base_acc, own_acc = [], [], []
            injected = refused = 0
            for r in group:
                base = by_key.get((config, 0.0, r["seed"]))
                injected += len(r["injected"])
                refused += len(r["refused"])
                tasks = sorted({v for vs in r["victims"].values() for v in vs})
                victim_acc += [r["task_accuracies"][t] for t in tasks]
                if base is not None:
                    base_acc += [base["task_accuracies"][t] for t in tasks]
                own_acc += [r["task_accuracies"][int(t)] for t in r["injected"]]
            va, ba, oa = _mean(victim_acc), _mean(base_acc), _mean(own_acc)
            fmt = lambda v: "–" if v is None else f"{100 * v:.2f}"  # noqa: E731
            damage = "–" if va is None or ba is None or len(base_acc) != len(victim_acc) else f"{100 * (va - ba):+.2f}"
            lines.append(
                f"| {config} | {rate:g} | {','.join(str(r['seed']) for r in group)} | {injected} | {refused} "
                f"| {len(victim_acc)} | {fmt(va)} | {fmt(ba) if len(base_acc) == len(victim_acc) else '–'} | {damage} "
                f"| {fmt(oa)} | {fmt(_mean([r['average_accuracy'] for r in group]))} "
                f"| {_mean([r['memory_mb'] for r in group]):.3f} | {_mean([r['wall_seconds'] for r in group]):.0f} |")
    threads = sorted({r["torch_threads"] for r in runs})
    return "\n".join(lines) + f"\n\ntorch threads per run: {threads}\n"


def main(argv: Optional[Sequence[str]] = None) -> str:
    args = parse_args(argv)
    out = Path(args.out)
    runs_dir = out / "runs"
    try:
        runs_dir.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise SystemExit(f"error: cannot write to --out {out}: {err}")
    if not args.report_only:
        from avalanche_sdr.training.checkpoint import atomic_write_json

        for seed in args.seeds:
            for rate in sorted(set(args.rates) | {0.0}):
                for config in args.configs:
                    path = runs_dir / f"{run_id(args.stream, args.preset, config, rate, seed)}.json"
                    if path.exists():
                        continue
                    result = execute(args.stream, args.preset, config, rate, seed, out, args.data_root,
                                     args.backbone_weights, args.threads)
                    atomic_write_json(path, result)
                    print(f"{result['run_id']}: acc {100 * result['average_accuracy']:.2f} %, "
                          f"{len(result['injected'])} injected, {len(result['refused'])} refused, "
                          f"{result['wall_seconds']:.0f} s", flush=True)
    runs = [json.loads(p.read_text()) for p in sorted(runs_dir.glob("*.json"))]
    if not runs:
        raise SystemExit(f"error: no finished runs in {runs_dir}")
    table = report(runs)
    (out / "reuse_errors.md").write_text(table)
    print(table)
    return table


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
