"""Repeat decisions on tasks of a few images per class: the ``"small_task"`` rule against
the two-sample rule and against a new entry for every task.

Stream: Fashion-MNIST, 5 groups of 2 classes x 4 splits = 20 tasks (3 warm-start, 17
scored: 2 first tasks of a group, 15 repeats), ``--per-class`` training images per class
(a task has twice that), 10 validation and 100 test images per task. E0: the small CNN
pretrained on the stream's own 3 warm-start tasks (20 epochs, lr 2e-3, batch 32: the
harness's ``prepare_backbone`` budget), cached under ``--backbones`` (default
``OUT/backbones``).

Two modes:

- ``replay``: decisions only, no training (``benchmarks.studies.detection.sim.simulate``: the
  same ``detect``/``remember`` calls as a run); Correct / Miss / Incorrect, repeats
  reused, first tasks of a group reused (false reuses), per size and rule.
- ``train``: full ``SDRStrategy`` runs (CPU budget, head-only reuse, no generators) with
  ``small_task``, ``two_sample`` and ``all_new`` (a detector that declares every task
  new): accuracy (mean final test accuracy over the tasks), memory (MB), detection.

    python -m benchmarks.studies.small_tasks replay --per-class 5 10 20 40 100 --seeds 0 1 2 --out results/small_tasks
    python -m benchmarks.studies.small_tasks train --per-class 10 --seeds 0 1 2 --out results/small_tasks
    python -m benchmarks.studies.small_tasks report --out results/small_tasks
"""
from __future__ import annotations

import argparse
import copy
import json
import time
from pathlib import Path
from typing import Any, Dict, List

from avalanche_sdr import cli

RULES = ("two_sample", "small_task", "small_task_any_size", "small_task_no_confirm", "small_task_confirm_all",
         "all_new", "recommended", "recommended_all_images")
"""Rules compared: the two-sample rule (defaults), the small-task rule (defaults), the
small-task rule with its fallback at every size (``min_per_class=2``: what the default
10 guards against), without confirming the two-sample rule's reuses
(``confirm_below=None``: the rule before the confirmation), confirming them at every
size (what the default ``confirm_below=40`` was chosen against), a new entry for
every task (train mode only), ``method="recommended"`` with the library's default
flow (:data:`DEFAULT_FLOW`), and ``method="recommended"`` on E0 pretrained on every
warm-start image (``pretrain_backbone(holdout=None)``)."""

DEFAULT_FLOW = ("recommended",)
"""Rules run as a user runs the library: E0 pretrained with ``pretrain_backbone``'s
default holdout (its record on E0), the detector of ``method="recommended"`` (a train run:
``SDRStrategy(method="recommended")``, learning reuse and router included). The other
rules keep E0 pretrained on every warm-start image (``holdout=None``), as their
committed runs."""

CONFIRM_ALL = 10 ** 9
"""``confirm_below`` of ``small_task_confirm_all``: larger than any task."""

N_SPLITS = 4
VALID_PER_TASK = 10
TEST_PER_TASK = 100
PRETRAIN = dict(epochs=20, lr=2e-3, batch_size=32)


def make_rule(name: str):
    """A detector for a rule name of :data:`RULES` (library defaults)."""
    from avalanche_sdr.detection import make_detector
    from benchmarks.studies.detectors import AllNewDetector

    if name == "all_new":
        return AllNewDetector()
    if name in ("recommended", "recommended_all_images"):
        from avalanche_sdr.training import METHODS

        return METHODS["recommended"].defaults()["detector"]
    if name in ("two_sample", "small_task"):
        return make_detector(name)
    if name == "small_task_any_size":
        from avalanche_sdr.detection import SmallTaskSettings

        return make_detector("small_task", settings=SmallTaskSettings(min_per_class=2))
    if name in ("small_task_no_confirm", "small_task_confirm_all"):
        from avalanche_sdr.detection import SmallTaskSettings

        below = None if name == "small_task_no_confirm" else CONFIRM_ALL
        return make_detector("small_task", settings=SmallTaskSettings(confirm_below=below))
    raise ValueError(f"unknown rule {name!r}; choose from {RULES}")


def build_stream(seed: int, per_class: int):
    """The 20-task Fashion-MNIST stream with ``per_class`` training images per class."""
    from avalanche_sdr.benchmarks import MixedFashionMNIST

    return MixedFashionMNIST(n_splits=N_SPLITS, seed=seed, train_per_task=2 * per_class,
                             valid_per_task=VALID_PER_TASK, test_per_task=TEST_PER_TASK)


def backbone(seed: int, per_class: int, out: Path, default_flow: bool = False):
    """E0 for (seed, size): pretrained once on the stream's warm-start tasks, cached in ``out``;
    on every warm-start image, or with ``default_flow`` without ``pretrain_backbone``'s
    default holdout, whose record it then carries (restored from the same draw when loaded)."""
    import torch

    from avalanche_sdr.detection import DEFAULT_HOLDOUT_SHARE, PRETRAINING_RECORD, PretrainingRecord
    from avalanche_sdr.models import small_cnn_backbone
    from avalanche_sdr.training import hold_out_references, pretrain_backbone

    path = out / f"fashion20_pc{per_class}_seed{seed}{'_default_flow' if default_flow else ''}.pt"
    net = small_cnn_backbone(in_channels=1, widths=(32, 64, 128))
    bench = build_stream(seed, per_class)
    warm = [bench.train_stream[i] for i in range(bench.n_warm_start)]
    if path.exists():
        saved = torch.load(path, weights_only=True)
        net.load_state_dict(saved["state_dict"])
        torch.set_rng_state(saved["torch_rng_state"])
        if default_flow:  # the draw pretrain_backbone made (share, seed 0): deterministic
            setattr(net, PRETRAINING_RECORD, PretrainingRecord(
                tuple(int(e.task_labels[0]) for e in warm), hold_out_references(warm, DEFAULT_HOLDOUT_SHARE)))
        return net.eval()
    cli.seed_everything(seed)
    pretrain_backbone(net, warm, device="cpu", verbose=False, **PRETRAIN,
                      **({} if default_flow else {"holdout": None}))
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"state_dict": net.state_dict(), "torch_rng_state": torch.get_rng_state()}, path)
    return net.eval()


def replay(args) -> List[Dict[str, Any]]:
    """Decisions only, per (seed, size, rule); one JSON per run under ``OUT/runs``."""
    from benchmarks.studies.detection.sim import simulate

    results = []
    for seed in args.seeds:
        for per_class in args.per_class:
            bench = build_stream(seed, per_class)
            for rule in args.rules:
                if rule == "all_new":
                    continue
                e0 = backbone(seed, per_class, _backbones(args), rule in DEFAULT_FLOW)
                name = f"replay_pc{per_class}_{rule}_seed{seed}"
                target = Path(args.out) / "runs" / f"{name}.json"
                if target.exists():
                    results.append(json.loads(target.read_text()))
                    continue
                detector = make_rule(rule)
                result = simulate(detector, e0, bench, 1, 28)
                result.update(mode="replay", config=detector.config(), rule=rule, seed=seed, per_class=per_class,
                              run=name,
                              repeats_reused=None if result["false_new"] is None else 1 - result["false_new"],
                              first_tasks_reused=None if result["power"] is None else 1 - result["power"], **_env())
                cli.write_json(target, result)
                results.append(result)
                print(f"{name}: correct {result['correct']:.3f} incorrect {result['incorrect']:.3f} repeats reused "
                      f"{result['repeats_reused']} first tasks reused {result['first_tasks_reused']} "
                      f"({result['detection_seconds']:.1f}s)", flush=True)
    return results


def train(args) -> List[Dict[str, Any]]:
    """Full SDR runs per (seed, size, rule); one JSON per run under ``OUT/runs``."""
    from avalanche.evaluation.metrics import accuracy_metrics
    from avalanche.training.plugins import EvaluationPlugin

    from avalanche_sdr import SDRStrategy, build_sdr_model
    from avalanche_sdr.training.stream_runner import run_sdr_stream

    results = []
    for seed in args.seeds:
        for per_class in args.per_class:
            for rule in args.rules:
                name = f"train_pc{per_class}_{rule}_seed{seed}"
                target = Path(args.out) / "runs" / f"{name}.json"
                if target.exists():
                    results.append(json.loads(target.read_text()))
                    continue
                # restores the RNG state after pretraining
                e0 = backbone(seed, per_class, _backbones(args), rule in DEFAULT_FLOW)
                bench = build_stream(seed, per_class)
                model = build_sdr_model(copy.deepcopy(e0), in_channels=1, image_size=28, generator=None)
                chosen = ({"method": "recommended"} if rule.startswith("recommended")
                          else {"detector": make_rule(rule)})
                strategy = SDRStrategy(model=model, settings="cpu", device="cpu", **chosen,
                                       evaluator=EvaluationPlugin(accuracy_metrics(experience=True), loggers=[]))
                detector = strategy.sdr.detector
                tick = time.perf_counter()
                sdr = run_sdr_stream(strategy, bench, seed=seed)
                tasks = sdr["tasks"]
                result = dict(mode="train", rule=rule, config=detector.config(), seed=seed, per_class=per_class,
                              run=name,
                              average_accuracy=sum(t["test_accuracy"] for t in tasks) / len(tasks),
                              memory_mb=sdr["memory_mb"], detection=sdr["detection"],
                              unique_entries=sdr["unique_tasks"], decisions=[t["decision"] for t in tasks],
                              outcomes=[t["outcome"] for t in tasks], records=[t["detection"] for t in tasks],
                              wall_seconds=time.perf_counter() - tick, **_env())
                cli.write_json(target, result)
                results.append(result)
                print(f"{name}: accuracy {result['average_accuracy']:.4f} memory {result['memory_mb']:.3f} MB "
                      f"detection {sdr['detection']} ({result['wall_seconds']:.0f}s)", flush=True)
    return results


def report(args) -> str:
    """Markdown tables of the runs under ``OUT/runs`` (mean ± std over seeds)."""
    import statistics

    runs = [json.loads(p.read_text()) for p in sorted((Path(args.out) / "runs").glob("*.json"))]

    def pm(values, scale=100.0, digits=1):
        values = [scale * v for v in values if v is not None]
        if not values:
            return "–"
        sd = statistics.stdev(values) if len(values) > 1 else 0.0
        return f"{statistics.mean(values):.{digits}f} ± {sd:.{digits}f}"

    def fallback(rs):  # decisions the fallback took (decoy_rank_pvalue set), its reuses, its wrong reuses
        taken = [(rec, o) for r in rs for rec, o in zip(r["records"], r["outcomes"])
                 if rec.get("decoy_rank_pvalue") is not None]
        reuses = [o for rec, o in taken if rec["decision"] == "reuse"]
        return f"{len(taken)} / {len(reuses)} / {reuses.count('incorrect')}"

    lines = ["| images / class | rule | seeds | Correct % | Miss % | Incorrect % | repeats reused % | "
             "first tasks of a group reused % | entries | fallback: decided / reused / wrong | threads | load |",
             "|---" * 12 + "|"]
    groups: Dict[tuple, List[Dict[str, Any]]] = {}
    for r in runs:
        if r["mode"] == "replay":
            groups.setdefault((r["per_class"], r["rule"]), []).append(r)
    for (per_class, rule), rs in sorted(groups.items()):
        lines.append(f"| {per_class} | {rule} | {','.join(str(r['seed']) for r in rs)} | "
                     f"{pm([r['correct'] for r in rs])} | {pm([r['miss'] for r in rs])} | "
                     f"{pm([r['incorrect'] for r in rs])} | {pm([r['repeats_reused'] for r in rs])} | "
                     f"{pm([r['first_tasks_reused'] for r in rs])} | {pm([r['unique_entries'] for r in rs], 1.0)} | "
                     f"{fallback(rs)} | {rs[0]['torch_threads']} | {max(r['load_average'] for r in rs):.1f} |")
    lines += ["", "| images / class | rule | seeds | accuracy % | memory MB | entries | Correct % | Incorrect % | "
              "fallback: decided / reused / wrong | threads | load |", "|---" * 11 + "|"]
    groups = {}
    for r in runs:
        if r["mode"] == "train":
            groups.setdefault((r["per_class"], r["rule"]), []).append(r)
    for (per_class, rule), rs in sorted(groups.items()):
        lines.append(f"| {per_class} | {rule} | {','.join(str(r['seed']) for r in rs)} | "
                     f"{pm([r['average_accuracy'] for r in rs], 100.0, 2)} | "
                     f"{pm([r['memory_mb'] for r in rs], 1.0, 3)} | {pm([r['unique_entries'] for r in rs], 1.0)} | "
                     f"{pm([r['detection']['correct'] for r in rs])} | "
                     f"{pm([r['detection']['incorrect'] for r in rs])} | "
                     f"{fallback(rs)} | {rs[0]['torch_threads']} | {max(r['load_average'] for r in rs):.1f} |")
    text = "\n".join(lines)
    print(text)
    return text


def _backbones(args) -> Path:
    return Path(args.backbones) if args.backbones else Path(args.out) / "backbones"


def _env() -> Dict[str, Any]:
    import os

    import torch

    return dict(torch_threads=torch.get_num_threads(), load_average=os.getloadavg()[0])


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=("replay", "train", "report"))
    parser.add_argument("--per-class", type=int, nargs="+", default=[10], help="training images per class")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--rules", nargs="+", choices=RULES, default=["two_sample", "small_task", "all_new"])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", required=True)
    parser.add_argument("--backbones", default=None, help="folder of the cached E0s (default OUT/backbones)")
    args = parser.parse_args(argv)
    if any(n < 2 for n in args.per_class):
        parser.error("--per-class must be >= 2 (a class needs two images to have a spread)")
    return args


def main(argv=None) -> None:
    import torch

    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    {"replay": replay, "train": train, "report": report}[args.mode](args)


if __name__ == "__main__":
    main()


__all__ = ["CONFIRM_ALL", "DEFAULT_FLOW", "RULES", "build_stream", "make_rule", "replay", "report", "train"]
