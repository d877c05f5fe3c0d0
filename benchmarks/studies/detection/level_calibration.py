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

With ``--default-flow`` the "holdout" E0 is the library's default flow instead:
``pretrain_backbone`` with its default holdout (:data:`~avalanche_sdr.detection.DEFAULT_HOLDOUT_SHARE`,
seed 0), whose record the detector reads (``use_pretraining``, as ``SDRStrategy`` does);
the calibration also counts the p-values below the level of ``alpha="by_size"`` at the
draw's size (:class:`~avalanche_sdr.detection.LevelBySize`), and the decisions replay
``method="recommended"``'s detector and the previous recommended detector (the two-sample
rule with ``match_classes``, ``alpha = 0.01``) on both E0s. Run files
``OUT/runs/<stream>_default_seed<k>.json``; ``--draws`` sets the draws per class.

Streams are built here (:data:`STREAMS`): ``fashion5`` (Fashion-MNIST, 2 groups of 5
classes, 100 images a class per task), ``emnist5`` (EMNIST bymerge from the shared npz, 6
groups of 5 classes), ``fashion60`` (Fashion-MNIST, 5 groups of 2 classes, 60 images per
task) and ``fashion200`` (the same with 200 images per task, 100 a class). One JSON per
(command, stream, seed) under ``OUT/runs``; ``--report`` prints tables.

    python -m benchmarks.studies.detection.level_calibration --stream fashion5 --seeds 0 1 2 --out results/level
    python -m benchmarks.studies.detection.level_calibration --stream fashion200 --seeds 0 1 2 --default-flow \
        --draws 1000 --out results/level
    python -m benchmarks.studies.detection.level_calibration --report --out results/level
"""
from __future__ import annotations

import argparse
import json
import os
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
    "fashion200": _fashion(None, 4, 200, 3),
}
"""Streams of this script: name -> ``build(seed, data_root)`` -> (benchmark, its training
dataset) (1x28x28 images)."""

FRESH_PER_CLASS = 1000
"""Fresh images per warm-start class in the calibration: training images of the class in
no warm-start task (E0 never saw them), the first 100 the fresh reference, the rest the
pool of the draws."""


DEFAULT = "default"
"""``pretrain``'s ``holdout`` for the library's default flow (``pretrain_backbone``'s own default)."""


def pretrain(benchmark, seed: int, holdout=None):
    """E0 as the harness makes it (seeded with ``seed``), on every warm-start image,
    without ``holdout``'s rows, or (``holdout=DEFAULT``) as ``pretrain_backbone`` does by
    default (its record on E0); frozen, eval mode."""
    import torch

    from avalanche_sdr.models import small_cnn_backbone
    from avalanche_sdr.training import pretrain_backbone

    cli.seed_everything(seed)
    backbone = small_cnn_backbone(in_channels=1, widths=(32, 64, 128))
    warm = [benchmark.train_stream[i] for i in range(benchmark.n_warm_start)]
    if isinstance(holdout, str) and holdout == DEFAULT:
        pretrain_backbone(backbone, warm, epochs=EPOCHS, lr=2e-3, batch_size=32, verbose=False)
    else:
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


def calibrate(benchmark, train_set, e0_old, e0_new, holdout, seed: int, e0_external=None,
              draws: int = DRAWS) -> Dict[str, Any]:
    """True-null p-values of each warm-start class (module doc); with ``e0_external``
    (an E0 not trained on the stream) also its references of the training images. Each
    detector reads its E0's pretraining record as ``SDRStrategy`` has it do
    (``use_pretraining``): with ``holdout=None`` and the default-flow E0 the held-out
    references come from that record.
    :return: per condition, per-class and combined counts of p < :data:`ALPHA` and below
    the ``"by_size"`` level of the draw's size (:func:`summarise`)."""
    import numpy as np
    import torch

    from avalanche_sdr._draws import subsample
    from avalanche_sdr.benchmarks import gather_images
    from avalanche_sdr.detection import TwoSampleDetector, hotelling_pvalue, pretraining_record
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
            det.use_pretraining(pretraining_record(model.encoder.backbone))
            entry = model.create_entry(int(stream[w].task_labels[0]))
            det.remember(model, entry, TaskData(int(stream[w].task_labels[0]), x_w, y_w))
            setups[name] = (det, model, det._references(model, entry), det.project(model, pool_x))
        for j in range(c):
            rows = torch.nonzero(pool_y == j).flatten()  # already in random order
            fresh_ref, draw_rows = rows[:100], rows[100:]
            n = min(size, len(draw_rows))
            per_class_size.append(n)
            picks = [draw_rows[subsample(len(draw_rows), n, g)] for _ in range(draws)]
            for name, (det, model, refs, feats) in setups.items():
                for label, ref in ((name, refs[j]), (name + "_fresh_reference", feats[fresh_ref])):
                    conditions[label].append([hotelling_pvalue(feats[p], ref) for p in picks])
        classes.append(c)
    # conditions[label]: one list of DRAWS p-values per class, the classes of every warm-start task in order
    out: Dict[str, Any] = {"draws": draws, "alpha": ALPHA, "draw_sizes": per_class_size, "classes_per_task": classes}
    for label, per_class in conditions.items():
        out[label] = summarise(per_class, out["classes_per_task"], per_class_size)
    return out


def summarise(per_class: Sequence[Sequence[float]], classes_per_task: Sequence[int],
              sizes: Optional[Sequence[int]] = None) -> Dict[str, Any]:
    """Counts of p < :data:`ALPHA` of one condition: per class test, per class (a list),
    and of the Bonferroni combination of each draw over a task's classes; with ``sizes``
    also below the ``"by_size"`` level (:class:`~avalanche_sdr.detection.LevelBySize`):
    a class's tests at the level of its draws' size, a task's combinations at the level of
    its smallest class's (the level the rule applies), and the p-values themselves when
    below it.

    :param per_class: one list of p-values per class (the draws), the classes of every
        warm-start task in order; :param classes_per_task: c of each warm-start task;
        :param sizes: the draws' size of each class, in the same order.
    """
    from avalanche_sdr.detection import LevelBySize

    flat = [p for ps in per_class for p in ps]
    combined, task_levels, start = [], [], 0
    for c in classes_per_task:
        task = list(zip(*per_class[start:start + c]))
        combined += [min(1.0, c * min(ps)) for ps in task]
        if sizes is not None:
            task_levels += [LevelBySize().at(min(sizes[start:start + c]))] * len(task)
        start += c
    out = dict(n_class_tests=len(flat), class_below=sum(p < ALPHA for p in flat),
               below_by_class=[sum(p < ALPHA for p in ps) for ps in per_class],
               n_task_tests=len(combined), task_below=sum(p < ALPHA for p in combined))
    if sizes is not None:
        levels = [LevelBySize().at(n) for n in sizes]
        out.update(class_below_level=sum(p < a for ps, a in zip(per_class, levels) for p in ps),
                   task_below_level=sum(p < a for p, a in zip(combined, task_levels)),
                   class_levels=levels, task_levels=sorted(set(task_levels)),
                   task_pvalues_below_level=sorted(p for p, a in zip(combined, task_levels) if p < a))
    return out


RULES = {
    "matched_old_reference": ("old", True, False),
    "matched_holdout": ("new", True, True),
    "unmatched_old_reference": ("old", False, False),
    "unmatched_holdout": ("new", False, True),
    "matched_external": ("external", True, False),
}
"""Decision replays: name -> (E0, ``match_classes``, reference holdout); the
``external`` E0 (CIFAR-10 ResNet-20, ``--external-weights``) only when given."""

DEFAULT_FLOW_RULES = {
    "matched_old_reference": ("old", "previous"),
    "matched_default_flow": ("new", "previous"),
    "recommended_old_reference": ("old", "recommended"),
    "recommended_default_flow": ("new", "recommended"),
}
"""Decision replays of ``--default-flow`` runs: name -> (E0, detector): ``"previous"``, the
previous recommended detector (the two-sample rule with ``match_classes``, ``alpha =
0.01``), or ``"recommended"``, ``method="recommended"``'s; each reads its E0's record
(the ``"new"`` E0: the default flow's holdout)."""


def _detector(kind: str):
    from avalanche_sdr.detection import TwoSampleDetector, TwoSampleSettings
    from avalanche_sdr.training import METHODS

    if kind == "previous":
        return TwoSampleDetector(TwoSampleSettings(match_classes=True))
    return METHODS["recommended"].defaults()["detector"]


def decide(benchmark, e0s, holdout, default_flow: bool = False) -> Dict[str, Any]:
    """Replay the two-sample rule (:data:`RULES`, or with ``default_flow``
    :data:`DEFAULT_FLOW_RULES`) over the stream; per rule the
    :func:`benchmarks.studies.detection.sim.simulate` summary plus the false-new rate of repeats
    of warm-start groups and of other groups."""
    from dataclasses import replace

    from avalanche_sdr.detection import DEFAULT_TWO_SAMPLE, TwoSampleDetector
    from benchmarks.studies.detection.sim import simulate

    stream = list(benchmark.train_stream)
    warm_groups = {int(stream[i].group) for i in range(benchmark.n_warm_start)}
    results = {}
    rules = ({name: (which, kind, None) for name, (which, kind) in DEFAULT_FLOW_RULES.items()} if default_flow
             else RULES)
    for name, (which, match, held) in rules.items():
        if which not in e0s:
            continue
        if default_flow:
            det = _detector(match)
        else:
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

    from avalanche_sdr.detection import DEFAULT_HOLDOUT_SHARE, PRETRAINING_RECORD, PretrainingRecord
    from avalanche_sdr.training import hold_out_references

    torch.set_num_threads(args.threads)
    out = Path(args.out)
    done = []
    for seed in args.seeds:
        kind = "default" if args.default_flow else f"share{args.share}"
        target = out / "runs" / f"{args.stream}_{kind}{'_ext' if args.external_weights else ''}_seed{seed}.json"
        if target.exists():
            done.append(json.loads(target.read_text()))
            continue
        tick = time.perf_counter()
        benchmark, train_set = STREAMS[args.stream](seed, args.data_root)
        warm = [benchmark.train_stream[i] for i in range(benchmark.n_warm_start)]
        tasks = tuple(int(e.task_labels[0]) for e in warm)
        # the default flow's draw is pretrain_backbone's own (share, seed 0), made again when E0 is loaded
        holdout = (hold_out_references(warm, DEFAULT_HOLDOUT_SHARE) if args.default_flow
                   else hold_out_references(warm, args.share, seed=seed))
        e0s = {}
        for which, held in (("old", None), ("new", DEFAULT if args.default_flow else holdout)):
            path = out / "backbones" / f"{args.stream}_{'share0.5' if which == 'old' else kind}_seed{seed}_{which}.pt"
            if path.exists():  # cached: OUT/backbones/*.pt, with the record pretrain_backbone left
                e0s[which] = _load(path)
                setattr(e0s[which], PRETRAINING_RECORD, PretrainingRecord(tasks, None if held is None else holdout))
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
        result = dict(stream=args.stream, seed=seed, share=DEFAULT_HOLDOUT_SHARE if args.default_flow else args.share,
                      default_flow=args.default_flow, external=bool(args.external_weights),
                      torch_threads=torch.get_num_threads(), load_average=os.getloadavg()[0],
                      holdout=holdout.to_dict(), task_sizes=benchmark.task_sizes[:1],
                      calibration=calibrate(benchmark, train_set, e0s["old"], e0s["new"],
                                            None if args.default_flow else holdout, seed, e0s.get("external"),
                                            draws=args.draws),
                      decisions=decide(benchmark, e0s, holdout, default_flow=args.default_flow),
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
    """Markdown tables: calibration (share of p < alpha) and decisions, per (stream, share);
    the ``--default-flow`` runs in tables of their own (:func:`report_default_flow`)."""
    flow = [r for r in runs if r.get("default_flow")]
    runs = [r for r in runs if not r.get("default_flow")]
    if flow:
        return (report(runs) + "\n" if runs else "") + report_default_flow(flow)
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


def report_default_flow(runs: Sequence[Dict[str, Any]]) -> str:
    """Markdown tables of ``--default-flow`` runs: true-null p-values below the
    ``"by_size"`` level at the draw's size and below 0.01, per stream and reference (counts
    "k of N"), and the decisions of :data:`DEFAULT_FLOW_RULES`."""
    streams = sorted({r["stream"] for r in runs})
    lines = ["| stream | seeds | images / class | level alpha(n) | reference | per-class tests below alpha(n) | "
             "combined tests below alpha(n) | combined below 0.01 |", "|---|---|---|---|---|---|---|---|"]
    for stream in streams:
        rs = [r for r in runs if r["stream"] == stream]
        sizes = sorted({n for r in rs for n in r["calibration"]["draw_sizes"]})
        for label, words in (("holdout", "held-out images (default flow)"),
                             ("holdout_fresh_reference", "fresh images (default-flow E0)"),
                             ("old", "pretraining images (E0 on every image)"),
                             ("old_fresh_reference", "fresh images (E0 on every image)")):
            cal = [r["calibration"][label] for r in rs]
            levels = sorted({a for c in cal for a in c["task_levels"]})
            n, k = sum(c["n_class_tests"] for c in cal), sum(c["class_below_level"] for c in cal)
            nt, kt = sum(c["n_task_tests"] for c in cal), sum(c["task_below_level"] for c in cal)
            k01 = sum(c["task_below"] for c in cal)
            lines.append(f"| {stream} | {','.join(str(r['seed']) for r in rs)} | {'/'.join(map(str, sizes))} | "
                         f"{'/'.join(f'{a:.2g}' for a in levels)} | {words} | {k} of {n} ({100 * k / n:.2f} %) | "
                         f"{kt} of {nt} ({100 * kt / nt:.3f} %) | {k01} of {nt} ({100 * k01 / nt:.2f} %) |")
    lines += ["", "| stream | rule | seeds | Correct % | Miss % | Incorrect % | repeats of warm-start groups "
              "declared new | other repeats declared new | first tasks of a group reused |",
              "|---|---|---|---|---|---|---|---|---|"]
    for stream in streams:
        rs = [r for r in runs if r["stream"] == stream]
        for rule in DEFAULT_FLOW_RULES:
            ds = [r["decisions"][rule] for r in rs if rule in r["decisions"]]
            if not ds:
                continue
            pct = {k: 100 * sum(d[k] for d in ds) / len(ds) for k in ("correct", "miss", "incorrect")}
            first = sum(d["n_new_group"] for d in ds)
            first_reused = sum(round((1 - d["power"]) * d["n_new_group"]) for d in ds if d["power"] is not None)
            lines.append(f"| {stream} | {rule} | {','.join(str(r['seed']) for r in rs)} | {pct['correct']:.1f} | "
                         f"{pct['miss']:.1f} | {pct['incorrect']:.1f} | "
                         f"{sum(d['warm_group_repeats_new'] for d in ds)} / "
                         f"{sum(d['warm_group_repeats'] for d in ds)} | "
                         f"{sum(d['other_repeats_new'] for d in ds)} / {sum(d['other_repeats'] for d in ds)} | "
                         f"{first_reused} / {first} |")
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
    parser.add_argument("--default-flow", action="store_true",
                        help="the holdout E0 as pretrain_backbone makes it by default (its record read by the "
                        "detector); --share is then the default's; decisions of method='recommended' (module doc)")
    parser.add_argument("--draws", type=cli.positive_int, default=DRAWS, metavar="N",
                        help=f"true-null draws per warm-start class (default {DRAWS})")
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


__all__ = ["ALPHA", "DEFAULT", "DEFAULT_FLOW_RULES", "DRAWS", "EPOCHS", "FRESH_PER_CLASS", "RULES", "STREAMS",
           "calibrate", "decide", "pretrain", "report", "report_default_flow", "summarise"]
