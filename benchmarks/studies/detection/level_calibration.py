"""Level of the two-sample repeat test on warm-start entries, and its decisions with class matching.

E0 pretrained on the warm-start tasks maps their training images differently from fresh
images of the same classes, so an entry whose reference is those images rejects true
repeats too often. Per (stream, seed) this script pretrains two E0s the harness's way
(small CNN, :data:`EPOCHS` epochs, lr 2e-3, batch 32, on the warm-start tasks): on every
warm-start image ("old"), and without a held-out share of them
(:func:`~avalanche_sdr.training.hold_out_references`, "holdout"). Then:

- ``calibrate``: true-null p-values of the per-class Hotelling test (the library's
  projection, reference and :func:`~avalanche_sdr.detection.two_sample.hotelling_pvalue`):
  fresh images of a warm-start class (training images of the same group's later tasks)
  against the entry's reference: the pretraining images (old E0), the held-out images
  (holdout E0), and, as controls, other fresh images under each E0. ``DRAWS`` draws of a
  task's class size per class; the share of p < alpha, per class and Bonferroni-combined.
- ``decide``: the two-sample rule's decisions replayed without training
  (:func:`benchmarks.studies.detection.sim.simulate`), with and without ``match_classes``, on
  both E0s; Correct / Miss / Incorrect, and the false-new rate of repeats of warm-start
  groups and of the other groups, separately.

Streams are built here (:data:`STREAMS`): ``fashion5`` (Fashion-MNIST, 2 groups of 5
classes, 100 images a class per task), ``emnist5`` (EMNIST bymerge from the shared npz, 6
groups of 5 classes) and ``fashion60`` (Fashion-MNIST, 5 groups of 2 classes, 60 images per
task). One JSON per (command, stream, seed) under ``OUT/runs``; ``--report`` prints tables.

    python -m benchmarks.studies.detection.level_calibration --stream fashion5 --seeds 0 1 2 --out results/level
    python -m benchmarks.studies.detection.level_calibration --report --out results/level
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from avalanche_sdr import cli

EPOCHS = 20
"""E0 pretraining epochs (the harness's CPU preset, ``benchmarks.table2.methods.PRESETS["cpu"]``)."""

DRAWS = 200
"""True-null draws per warm-start class in the calibration."""

ALPHA = 0.01
"""The level under test (``DEFAULT_TWO_SAMPLE.alpha``)."""

EMNIST_NPZ = "emnist/emnist_bymerge_test.npz"
"""The EMNIST file under ``--data-root`` (the shared data folder)."""


def _fashion(groups, n_splits, train, n_warm):
    def build(seed: int, data_root: Optional[str]):
        from avalanche_sdr.benchmarks import FASHION_MNIST_GROUPS, mixed_similarity_benchmark, sources

        train_set, test_set = sources.load_fashion_mnist()
        return mixed_similarity_benchmark(train_set, test_set, groups or FASHION_MNIST_GROUPS, n_splits, seed=seed,
                                          n_warm_start=n_warm, train_per_task=train, valid_per_task=0,
                                          test_per_task=20), train_set
    return build


def _emnist(seed: int, data_root: Optional[str]):
    import numpy as np

    from avalanche_sdr.benchmarks import ImageArrayDataset, mixed_similarity_benchmark
    from avalanche_sdr.benchmarks.emnist import emnist_groups

    if data_root is None:
        raise SystemExit("--stream emnist5 needs --data-root (a folder holding " + EMNIST_NPZ + ")")
    d = np.load(Path(data_root) / EMNIST_NPZ)
    x, y = d["x"][:, None], d["y"]
    train = ImageArrayDataset(x[d["train_index"]], y[d["train_index"]])
    test = ImageArrayDataset(x[d["test_index"]], y[d["test_index"]])
    return mixed_similarity_benchmark(train, test, emnist_groups()[:6], 3, seed=seed, n_warm_start=3,
                                      train_per_task=500, valid_per_task=0, test_per_task=20), train


STREAMS = {
    "fashion5": _fashion([[0, 2, 4, 6, 8], [1, 3, 5, 7, 9]], 6, 500, 2),
    "emnist5": _emnist,
    "fashion60": _fashion(None, 4, 60, 3),
}
"""Streams of this script: name -> ``build(seed, data_root)`` -> (benchmark, its training
dataset) (1x28x28 images)."""

FRESH_PER_CLASS = 1000
"""Fresh images per warm-start class in the calibration: training images of the class in
no warm-start task (E0 never saw them), the first 100 the fresh reference, the rest the
pool of the draws."""


def pretrain(benchmark, seed: int, holdout=None):
    """E0 as the harness makes it (seeded with ``seed``), on every warm-start image or
    without ``holdout``'s rows; frozen, eval mode."""
    import torch

    from avalanche_sdr.models import small_cnn_backbone
    from avalanche_sdr.training import pretrain_backbone

    cli.seed_everything(seed)
    backbone = small_cnn_backbone(in_channels=1, widths=(32, 64, 128))
    warm = [benchmark.train_stream[i] for i in range(benchmark.n_warm_start)]
    pretrain_backbone(backbone, warm, epochs=EPOCHS, lr=2e-3, batch_size=32, verbose=False, holdout=holdout)
    with torch.no_grad():
        return backbone.eval()


def _load(path):
    """A small-CNN E0 saved by :func:`run` (frozen, eval mode)."""
    import torch

    from avalanche_sdr.models import small_cnn_backbone

    backbone = small_cnn_backbone(in_channels=1, widths=(32, 64, 128))
    backbone.load_state_dict(torch.load(path, weights_only=True))
    for p in backbone.parameters():
        p.requires_grad_(False)
    return backbone.eval()


def _model(backbone):
    import copy

    from avalanche_sdr.models import build_sdr_model

    return build_sdr_model(copy.deepcopy(backbone), in_channels=1, image_size=28, generator=None).eval()


def calibrate(benchmark, train_set, e0_old, e0_new, holdout, seed: int, e0_external=None) -> Dict[str, Any]:
    """True-null p-values of each warm-start class (module doc); with ``e0_external``
    (an E0 not trained on the stream) also its references of the training images.
    :return: per condition, per-class and combined counts of p < :data:`ALPHA`, and every
    p-value."""
    import numpy as np
    import torch

    from avalanche_sdr._draws import subsample
    from avalanche_sdr.benchmarks import gather_images
    from avalanche_sdr.detection import TwoSampleDetector, hotelling_pvalue
    from avalanche_sdr.models import TaskData
    from avalanche_sdr.training.data import read_task_data

    stream = list(benchmark.train_stream)
    g = torch.Generator().manual_seed(10_000 + seed)
    rng = np.random.default_rng(10_000 + seed)
    seen = np.concatenate([benchmark.sample_indices[i]["train"] for i in range(benchmark.n_warm_start)])
    targets = np.asarray(train_set.targets)
    setup_list = [("old", e0_old, None), ("holdout", e0_new, holdout)]
    if e0_external is not None:
        setup_list.append(("external", e0_external, None))
    conditions = {label: [] for name, _, _ in setup_list for label in (name, name + "_fresh_reference")}
    per_class_size, classes = [], []
    for w in range(benchmark.n_warm_start):
        x_w, y_w = read_task_data(stream[w])
        c = int(y_w.max()) + 1
        size = min(int((y_w == j).sum()) for j in range(c))  # a repeat's class size
        fresh = []
        for cls_id in benchmark.groups[benchmark.stream_groups[w]]:
            unused = np.setdiff1d(np.nonzero(targets == cls_id)[0], seen)
            fresh.append(rng.permutation(unused)[:FRESH_PER_CLASS])
        pool_y = torch.cat([torch.full((len(f),), j) for j, f in enumerate(fresh)])
        images, scale = gather_images(train_set, np.concatenate(fresh))
        pool_x = images.float() / scale
        setups = {}
        for name, e0, held in setup_list:
            det = TwoSampleDetector(reference_holdout=held)
            model = _model(e0)
            entry = model.create_entry(int(stream[w].task_labels[0]))
            det.remember(model, entry, TaskData(int(stream[w].task_labels[0]), x_w, y_w))
            setups[name] = (det, model, det._references(model, entry), det.project(model, pool_x))
        for j in range(c):
            rows = torch.nonzero(pool_y == j).flatten()  # already in random order
            fresh_ref, draw_rows = rows[:100], rows[100:]
            n = min(size, len(draw_rows))
            per_class_size.append(n)
            picks = [draw_rows[subsample(len(draw_rows), n, g)] for _ in range(DRAWS)]
            for name, (det, model, refs, feats) in setups.items():
                for label, ref in ((name, refs[j]), (name + "_fresh_reference", feats[fresh_ref])):
                    conditions[label].append([hotelling_pvalue(feats[p], ref) for p in picks])
        classes.append(c)
    # conditions[label]: one list of DRAWS p-values per class, the classes of every warm-start task in order
    out: Dict[str, Any] = {"draws": DRAWS, "alpha": ALPHA, "draw_sizes": per_class_size, "classes_per_task": classes}
    for label, per_class in conditions.items():
        out[label] = summarise(per_class, out["classes_per_task"])
    return out


def summarise(per_class: Sequence[Sequence[float]], classes_per_task: Sequence[int]) -> Dict[str, Any]:
    """Counts of p < :data:`ALPHA` of one condition: per class test, per class (a list),
    and of the Bonferroni combination of each draw over a task's classes.

    :param per_class: one list of :data:`DRAWS` p-values per class, the classes of every
        warm-start task in order; :param classes_per_task: c of each warm-start task.
    """
    flat = [p for ps in per_class for p in ps]
    combined, start = [], 0
    for c in classes_per_task:
        combined += [min(1.0, c * min(ps)) for ps in zip(*per_class[start:start + c])]
        start += c
    return dict(n_class_tests=len(flat), class_below=sum(p < ALPHA for p in flat),
                below_by_class=[sum(p < ALPHA for p in ps) for ps in per_class],
                n_task_tests=len(combined), task_below=sum(p < ALPHA for p in combined))


RULES = {
    "matched_old_reference": ("old", True, False),
    "matched_holdout": ("new", True, True),
    "unmatched_old_reference": ("old", False, False),
    "unmatched_holdout": ("new", False, True),
    "matched_external": ("external", True, False),
}
"""Decision replays: name -> (E0, ``match_classes``, reference holdout); the
``external`` E0 (CIFAR-10 ResNet-20, ``--external-weights``) only when given."""


def decide(benchmark, e0s, holdout) -> Dict[str, Any]:
    """Replay the two-sample rule (:data:`RULES`) over the stream; per rule the
    :func:`benchmarks.studies.detection.sim.simulate` summary plus the false-new rate of repeats
    of warm-start groups and of other groups."""
    from dataclasses import replace

    from avalanche_sdr.detection import DEFAULT_TWO_SAMPLE, TwoSampleDetector
    from benchmarks.studies.detection.sim import simulate

    stream = list(benchmark.train_stream)
    warm_groups = {int(stream[i].group) for i in range(benchmark.n_warm_start)}
    results = {}
    for name, (which, match, held) in RULES.items():
        if which not in e0s:
            continue
        det = TwoSampleDetector(replace(DEFAULT_TWO_SAMPLE, match_classes=match),
                                reference_holdout=holdout if held else None)
        r = simulate(det, e0s[which], benchmark, 1, 28)
        seen, split = [], {"warm": [0, 0], "other": [0, 0]}
        for i, exp in enumerate(stream):
            group = int(exp.group)
            if i >= benchmark.n_warm_start and group in seen:
                key = "warm" if group in warm_groups else "other"
                split[key][0] += 1
                split[key][1] += r["decisions"][i] == "new"
            seen.append(group)
        r.update(warm_group_repeats=split["warm"][0], warm_group_repeats_new=split["warm"][1],
                 other_repeats=split["other"][0], other_repeats_new=split["other"][1],
                 powers=[rec["power"] for rec in r["records"]])
        results[name] = r
    return results


def run(args) -> List[Dict[str, Any]]:
    import torch

    from avalanche_sdr.training import hold_out_references

    torch.set_num_threads(args.threads)
    out = Path(args.out)
    done = []
    for seed in args.seeds:
        target = out / "runs" / f"{args.stream}_share{args.share}{'_ext' if args.external_weights else ''}_seed{seed}.json"
        if target.exists():
            done.append(json.loads(target.read_text()))
            continue
        tick = time.perf_counter()
        benchmark, train_set = STREAMS[args.stream](seed, args.data_root)
        warm = [benchmark.train_stream[i] for i in range(benchmark.n_warm_start)]
        holdout = hold_out_references(warm, args.share, seed=seed)
        e0s = {}
        for which, held in (("old", None), ("new", holdout)):  # cached: OUT/backbones/*.pt
            path = out / "backbones" / f"{args.stream}_share{args.share}_seed{seed}_{which}.pt"
            if path.exists():
                e0s[which] = _load(path)
            else:
                e0s[which] = pretrain(benchmark, seed, held)
                path.parent.mkdir(parents=True, exist_ok=True)
                torch.save(e0s[which].state_dict(), path)
        if args.external_weights:
            from avalanche_sdr.models import cifar_resnet_backbone

            e0s["external"] = cifar_resnet_backbone(20, weights_path=args.external_weights, in_channels=1).eval()
            for p in e0s["external"].parameters():
                p.requires_grad_(False)
        pretrain_s = time.perf_counter() - tick
        result = dict(stream=args.stream, seed=seed, share=args.share, external=bool(args.external_weights),
                      torch_threads=torch.get_num_threads(),
                      holdout=holdout.to_dict(), task_sizes=benchmark.task_sizes[:1],
                      calibration=calibrate(benchmark, train_set, e0s["old"], e0s["new"], holdout, seed,
                                            e0s.get("external")),
                      decisions=decide(benchmark, e0s, holdout),
                      seconds=dict(build_and_pretrain=pretrain_s, total=time.perf_counter() - tick))
        cli.write_json(target, result)
        done.append(result)
        cal = result["calibration"]
        print(f"{target.name}: " + " ".join(f"{k} {cal[k]['class_below']}/{cal[k]['n_class_tests']}"
                                            for k in cal if isinstance(cal[k], dict)) +
              " | " + " ".join(f"{k} C{v['correct']:.3f}/M{v['miss']:.3f}/I{v['incorrect']:.3f}"
                               for k, v in result["decisions"].items()) +
              f" | {result['seconds']['total']:.0f}s", flush=True)
    return done


def report(runs: Sequence[Dict[str, Any]]) -> str:
    """Markdown tables: calibration (share of p < alpha) and decisions, per (stream, share)."""
    keys = sorted({(r["stream"], r["share"], r.get("external", False)) for r in runs})
    lines = ["| stream | holdout share | seeds | reference | per-class tests | p < 0.01 (per class) | "
             "combined tests | p < 0.01 (combined) |", "|---|---|---|---|---|---|---|---|"]
    for stream, share, ext in keys:
        rs = [r for r in runs if (r["stream"], r["share"], r.get("external", False)) == (stream, share, ext)]
        seeds = ",".join(str(r["seed"]) for r in rs)
        for label, words in (("old", "pretraining images (old E0)"),
                             ("old_fresh_reference", "fresh images (old E0)"),
                             ("holdout", "held-out images (holdout E0)"),
                             ("holdout_fresh_reference", "fresh images (holdout E0)"),
                             ("external", "training images (external E0)"),
                             ("external_fresh_reference", "fresh images (external E0)")):
            if any(label not in r["calibration"] for r in rs):
                continue
            n = sum(r["calibration"][label]["n_class_tests"] for r in rs)
            k = sum(r["calibration"][label]["class_below"] for r in rs)
            nt = sum(r["calibration"][label]["n_task_tests"] for r in rs)
            kt = sum(r["calibration"][label]["task_below"] for r in rs)
            lines.append(f"| {stream} | {share} | {seeds} | {words} | {n} | {100 * k / n:.2f} % | {nt} | "
                         f"{100 * kt / nt:.2f} % |")
    lines += ["", "| stream | holdout share | rule | seeds | Correct % | Miss % | Incorrect % | "
              "repeats of warm-start groups declared new | other repeats declared new | lowest power of a reuse |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for stream, share, ext in keys:
        rs = [r for r in runs if (r["stream"], r["share"], r.get("external", False)) == (stream, share, ext)]
        for rule in RULES:
            if any(rule not in r["decisions"] for r in rs):
                continue
            ds = [r["decisions"][rule] for r in rs]
            pct = {k: 100 * sum(d[k] for d in ds) / len(ds) for k in ("correct", "miss", "incorrect")}
            powers = [p for d in ds for p, dec in zip(d["powers"], d["decisions"][-len(d["powers"]):])
                      if dec == "reuse"]
            lines.append(f"| {stream} | {share} | {rule} | {','.join(str(r['seed']) for r in rs)} | "
                         f"{pct['correct']:.1f} | {pct['miss']:.1f} | {pct['incorrect']:.1f} | "
                         f"{sum(d['warm_group_repeats_new'] for d in ds)} / {sum(d['warm_group_repeats'] for d in ds)} | "
                         f"{sum(d['other_repeats_new'] for d in ds)} / {sum(d['other_repeats'] for d in ds)} | "
                         f"{min(powers) if powers else '–'} |")
    return "\n".join(lines) + "\n"


def parse_args(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.studies.detection.level_calibration",
                                     description=cli.description(__doc__))
    parser.add_argument("--stream", choices=sorted(STREAMS), help="stream of this script (module doc)")
    parser.add_argument("--seeds", nargs="+", type=cli.seed, default=[0], metavar="SEED",
                        help="stream seeds, each also seeds both E0s and the holdout (default: 0)")
    parser.add_argument("--share", type=float, default=0.5,
                        help="held-out share of each warm-start class, in (0, 1) (default 0.5)")
    parser.add_argument("--threads", type=cli.non_negative_int, default=1, metavar="N",
                        help="torch threads (default 1; 0: torch's default)")
    parser.add_argument("--data-root", type=cli.existing_dir, default=None, metavar="DIR",
                        help="the shared data folder (emnist5 reads " + EMNIST_NPZ + ")")
    parser.add_argument("--external-weights", type=cli.existing_file, default=None, metavar="FILE",
                        help="also an E0 not trained on the stream: the CIFAR-10 ResNet-20 checkpoint "
                        "(resnet20-*.th), rows 'external'")
    parser.add_argument("--out", type=cli.output_dir, default="results/level_calibration", metavar="DIR",
                        help="output folder: one runs/*.json per (stream, share, seed)")
    parser.add_argument("--report", action="store_true", help="run nothing: print the tables of OUT/runs")
    cli.add_debug_argument(parser)
    args = parser.parse_args(argv)
    if not args.report and args.stream is None:
        parser.error("--stream is required (or --report)")
    if not 0.0 < args.share < 1.0:
        parser.error(f"--share must lie in (0, 1), got {args.share}")
    return args


def main(argv=None) -> str:
    args = parse_args(argv)
    if args.report:
        text = report([json.loads(p.read_text()) for p in sorted((Path(args.out) / "runs").glob("*.json"))])
    else:
        text = report(run(args))
    print(text)
    return text


if __name__ == "__main__":
    cli.run_cli(main)


__all__ = ["ALPHA", "DRAWS", "EPOCHS", "FRESH_PER_CLASS", "RULES", "STREAMS", "calibrate", "decide", "pretrain", "report", "summarise"]
