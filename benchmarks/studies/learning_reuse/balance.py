"""Repeats in another class balance or label order: head-only reuse against the learning
reuse with the plain update and with the guarded one (issue #36, item 1).

Two kinds of stream, built here from Fashion-MNIST (3 groups of 2 look-alike classes,
[T-shirt, Shirt], [Pullover, Coat], [Sneaker, Ankle boot], x 4 splits = 12 tasks, 3
warm-start tasks, 200 training and 200 test images per task):

- ``flipped``: the r-th task of a group trains on 85 % of one class and 15 % of the
  other (170 / 30 images), class 0 the majority for r even, class 1 for r odd, so each
  repeat comes back with its balance flipped against the task before it;
- ``shuffled``: balanced tasks (100 / 100) whose repeats list their classes in another
  order (``shuffle_repeat_labels=True``).

Test images are balanced (100 per class) in both: accuracy measures the classifier, not
a class prior. Decisions are ground truth (the reused entry of the task's group, with
the true class matching for shuffled repeats), so what differs between the three
configurations is only what a repeat trains:

- ``head``: the paper's head-only reuse;
- ``plain``: the learning reuse without this issue's update options
  (``update_balance=False, update_early_stop=False, update_rollback=False``);
- ``guarded``: every update class-balanced with stored BatchNorm statistics, early stop
  and rollback (``update_balance="always", update_early_stop=True, update_rollback=True``);
- ``no_early_stop``: the same without the early stop (``update_balance="always"``, rollback;
  the defaults before ``"when_shifted"``);
- ``default``: the library's defaults (``update_balance="when_shifted"``: only a repeat
  whose class counts differ from its entry's creating task's is balanced; rollback).

E0 is the harness's small CNN pretrained on the stream's warm-start tasks (the CPU
preset's epochs), once per (kind, seed), kept in ``OUT/backbones``. Training settings:
the harness's CPU preset (``SDRSettings`` ``"cpu"``). Per run: average final accuracy,
BWT (final accuracy minus accuracy right after training, over all tasks but the last),
and per group (entry) the same difference over its tasks but its last ("earlier-task
change"), updates balanced (``update_balanced``; "–" in runs written before it was
recorded), rolled back and epochs kept. Finished runs are kept in
``OUT/runs/*.json`` and skipped when the command runs again.

    python -m benchmarks.studies.learning_reuse.balance --seeds 0 1 2 --out results/reuse_balance
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from avalanche_sdr import cli

GROUPS = ((0, 6), (2, 4), (7, 9))
"""Fashion-MNIST class pairs, one per group (look-alike classes, where balance matters)."""
N_SPLITS = 4
TRAIN_PER_TASK = 200
TEST_PER_TASK = 200
MAJORITY_SHARE = 0.85
"""``flipped``: the majority class's share of a task's training images."""
KINDS = ("flipped", "shuffled")
CONFIGS = ("head", "plain", "guarded", "no_early_stop", "default")


def build_stream(kind: str, seed: int, data_root: Optional[str]):
    """``(benchmark, train experiences)``: the stream of ``kind`` (module doc). For
    ``flipped`` the training experiences are copies of the benchmark's whose datasets
    keep 170 / 30 images (a seeded draw per task), the test experiences the benchmark's."""
    import copy

    import numpy as np
    import torch

    from avalanche_sdr.benchmarks import MixedFashionMNIST

    root = {} if data_root is None else {"root": data_root}
    per_task = 2 * TRAIN_PER_TASK if kind == "flipped" else TRAIN_PER_TASK
    benchmark = MixedFashionMNIST(n_splits=N_SPLITS, seed=seed, groups=[list(g) for g in GROUPS],
                                  train_per_task=per_task, valid_per_task=20, test_per_task=TEST_PER_TASK,
                                  shuffle_repeat_labels=kind == "shuffled", **root)
    experiences = list(benchmark.train_stream)
    if kind == "flipped":
        seen: Dict[int, int] = {}
        for i, experience in enumerate(experiences):
            group = benchmark.stream_groups[i]
            r = seen[group] = seen.get(group, -1) + 1
            y = torch.as_tensor(list(experience.dataset.targets))
            rng = np.random.default_rng([seed, 36, i])
            keep = []
            for label in (0, 1):
                idx = torch.nonzero(y == label).flatten().numpy()
                n = round(TRAIN_PER_TASK * (MAJORITY_SHARE if label == r % 2 else 1 - MAJORITY_SHARE))
                keep += sorted(rng.choice(idx, size=n, replace=False).tolist())
            changed = copy.copy(experience)
            changed._dataset = experience.dataset.subset(sorted(keep))  # Avalanche's dataset is read-only
            experiences[i] = changed
    return benchmark, experiences


def backbone_for(kind: str, seed: int, experiences, out: Path):
    """E0 for (kind, seed): the harness's small CNN pretrained on the warm-start tasks'
    training data (of this stream: the flipped stream's imbalanced ones), cached."""
    import torch

    from avalanche_sdr import seed_everything
    from avalanche_sdr.training import pretrain_backbone
    from benchmarks.table2.engine import make_backbone
    from benchmarks.table2.methods import PRESETS

    path = out / "backbones" / f"{kind}_seed{seed}.pt"
    backbone = make_backbone("fashion10")
    if path.exists():
        saved = torch.load(path, weights_only=True)
        backbone.load_state_dict(saved["state_dict"])
    else:
        seed_everything(seed)
        pretrain_backbone(backbone, experiences[:3], epochs=PRESETS["cpu"].pretrain_epochs, lr=2e-3,
                          batch_size=32, verbose=False, holdout=None)  # every image, as the committed runs
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save({"state_dict": backbone.state_dict()}, path)
    for p in backbone.parameters():
        p.requires_grad_(False)
    return backbone.eval()


def task_accuracy(model, experience) -> float:
    """Task-aware accuracy (fraction) of ``model`` on a test experience."""
    import torch

    from avalanche_sdr.dataset_tensors import dataset_tensors

    x, y = dataset_tensors(experience.dataset.eval())[:2]
    task = int(experience.task_labels[0])
    model.eval()
    with torch.no_grad():
        predicted = torch.cat([model(x[i:i + 100], task).argmax(1) for i in range(0, len(y), 100)])
    return float((predicted == y.long()).float().mean())


def execute(kind: str, config: str, seed: int, out: Path, data_root: Optional[str]) -> Dict[str, Any]:
    """One run (module doc); returns its JSON-safe result."""
    import torch
    from avalanche.evaluation.metrics import accuracy_metrics
    from avalanche.training.plugins import EvaluationPlugin

    from avalanche_sdr import LearningReuse, SDRStrategy, build_sdr_model, seed_everything
    from benchmarks.studies.detectors import TruthDetector
    from benchmarks.table2.methods import PRESETS

    benchmark, experiences = build_stream(kind, seed, data_root)
    backbone = backbone_for(kind, seed, experiences, out)
    seed_everything(seed)
    model = build_sdr_model(backbone, in_channels=1, image_size=28, generator=None)
    settings = PRESETS["cpu"].sdr
    reuse = "head" if config == "head" else LearningReuse()
    if config == "plain":
        reuse = LearningReuse(balance=False, early_stop=False, rollback=False)
    elif config == "guarded":
        reuse = LearningReuse(balance="always", early_stop=True, rollback=True)
    elif config == "no_early_stop":
        reuse = LearningReuse(balance="always", early_stop=False, rollback=True)
    strategy = SDRStrategy(model=model, settings=settings, reuse=reuse, detector=TruthDetector(benchmark),
                           evaluator=EvaluationPlugin(accuracy_metrics(experience=True), loggers=[]))
    tests = list(benchmark.test_stream)
    start = time.perf_counter()
    just_trained = []
    for i, experience in enumerate(experiences):
        strategy.train(experience)
        just_trained.append(task_accuracy(model, tests[i]))
    wall = time.perf_counter() - start
    final = [task_accuracy(model, t) for t in tests]
    n = len(final)
    groups = [int(g) for g in benchmark.stream_groups]
    earlier = {}
    for g in sorted(set(groups)):
        tasks = [i for i in range(n) if groups[i] == g][:-1]  # the group's tasks but its last
        earlier[str(g)] = sum(final[i] - just_trained[i] for i in tasks) / len(tasks)
    updates = [r for r in strategy.sdr.reuse_records if r.entry_updated]
    return {
        "kind": kind, "config": config, "seed": seed, "settings": dict(settings.to_dict(), reuse=reuse if isinstance(reuse, str) else reuse.config()),
        "groups": groups, "final": final, "just_trained": just_trained,
        "average_accuracy": sum(final) / n,
        "bwt": sum(final[i] - just_trained[i] for i in range(n - 1)) / (n - 1),
        "earlier_task_change": earlier,
        "updates": len(updates), "rolled_back": sum(r.update_rolled_back for r in updates),
        "balanced": sum(r.update_balanced for r in updates),
        "balance_p_values": [r.balance_p_value for r in updates],
        "update_epochs": [r.update_epochs for r in updates],
        "heldout_accuracy": [r.heldout_accuracy for r in updates],
        "wall_seconds": wall, "torch_threads": torch.get_num_threads(),
    }


def report(runs: Sequence[Dict[str, Any]]) -> str:
    """Markdown: one row per run, then the per-kind check (guarded >= head, BWT >= 0)."""
    lines = ["| kind | config | seed | acc (%) | BWT (pts) | earlier-task change per group (pts) | updates | "
             "balanced | rolled back | epochs kept (mean) | wall (s) |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in sorted(runs, key=lambda r: (r["kind"], CONFIGS.index(r["config"]), r["seed"])):
        epochs = [e for e in r["update_epochs"] if e is not None]
        lines.append(
            f"| {r['kind']} | {r['config']} | {r['seed']} | {100 * r['average_accuracy']:.2f} | "
            f"{100 * r['bwt']:+.2f} | {' / '.join(f'{100 * v:+.2f}' for v in r['earlier_task_change'].values())} | "
            f"{r['updates']} | {r.get('balanced', '–')} | {r['rolled_back']} | {(sum(epochs) / len(epochs)) if epochs else float('nan'):.1f} | "
            f"{r['wall_seconds']:.0f} |")
    lines.append("")
    by = {(r["kind"], r["config"], r["seed"]): r for r in runs}
    for kind in KINDS:
        seeds = sorted({s for (k, c, s) in by if k == kind and c != "head" and (k, "head", s) in by})
        if not seeds:
            continue
        for config in CONFIGS[1:]:
            ok = [s for s in seeds if (kind, config, s) in by and
                  by[(kind, config, s)]["average_accuracy"] >= by[(kind, "head", s)]["average_accuracy"]
                  and by[(kind, config, s)]["bwt"] >= 0]
            have = [s for s in seeds if (kind, config, s) in by]
            if not have:
                continue
            lines.append(f"{kind}, {config}: accuracy >= head-only and BWT >= 0 on {len(ok)} of {len(have)} "
                         f"seeds {have}")
    return "\n".join(lines) + "\n"


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.studies.learning_reuse.balance", description=cli.description(__doc__))
    parser.add_argument("--kinds", nargs="+", choices=KINDS, default=list(KINDS), help="streams (default: both)")
    parser.add_argument("--configs", nargs="+", choices=CONFIGS, default=list(CONFIGS),
                        help="what a repeat trains (default: all)")
    parser.add_argument("--seeds", nargs="+", type=cli.seed, default=[0, 1, 2], metavar="SEED",
                        help="stream seeds, each also fixes E0 (default: 0 1 2)")
    parser.add_argument("--threads", type=cli.positive_int, default=1, metavar="N", help="torch threads (default 1)")
    parser.add_argument("--data-root", type=cli.existing_dir, default=None, metavar="DIR",
                        help="Fashion-MNIST folder (default /usr/share/datasets/fashion-mnist)")
    parser.add_argument("--out", required=True, metavar="DIR", help="output folder (runs/, reuse_balance.md)")
    return parser.parse_args(argv)


def main(argv=None) -> str:
    import torch

    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    out = Path(args.out)
    runs: List[Dict[str, Any]] = []
    for config in args.configs:  # in the order given
        for kind, seed in [(k, s) for k in args.kinds for s in args.seeds]:
            if True:
                target = out / "runs" / f"{kind}_{config}_seed{seed}.json"
                if target.exists():
                    runs.append(json.loads(target.read_text()))
                    continue
                result = execute(kind, config, seed, out, args.data_root)
                cli.write_json(target, result)
                runs.append(result)
                print(f"{kind} {config} seed {seed}: acc {100 * result['average_accuracy']:.2f} %, BWT "
                      f"{100 * result['bwt']:+.2f} pts, {result['rolled_back']}/{result['updates']} rolled back, "
                      f"{result['wall_seconds']:.0f} s", flush=True)
    text = report(runs)
    (out / "reuse_balance.md").write_text(text)
    print(text)
    return text


if __name__ == "__main__":
    main()


__all__ = ["CONFIGS", "GROUPS", "KINDS", "build_stream", "execute", "main", "report"]
