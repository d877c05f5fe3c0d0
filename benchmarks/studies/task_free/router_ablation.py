"""Which part of the ``"lda"`` task-free router gives how much: an ablation on VALIDATION splits.

For each stream and seed: SDR (two-sample rule, no generators, head-only reuse, the
harness's CPU preset and E0) trains on the stream with original class ids, fitted with
the ``"gaussian"`` router after every task; then, on the stream's **validation** split
(never its test split), the share of samples given their true class id without task
labels by

- ``gaussian``: the earlier router (:mod:`avalanche_sdr.routers.gaussian`);
- ``E0 LDA``: the ``"lda"`` router's E0 term alone (class means and covariance from all
  training data, in E0's features);
- ``concatenated LDA``: its second term alone (stored images' features through E0 and
  every entry, square-rooted);
- ``lda``: both (the router as shipped); ``lda, E0 at half weight``: both, the E0 term
  weighted 0.5;
- ``lda, concatenated term at weight a`` (a = 0.25, 0.75; 20 per class): the score
  ``(1 - a) log p_0 + a log p_all`` of the ``"lda_weighted"`` router at a fixed weight
  (a = 0, 0.5 and 1 are the rows ``E0 LDA``, ``lda`` and ``concatenated LDA``);
- ``lda_weighted``: that score at the weight the router chose on the stream's repeats
  (:func:`avalanche_sdr.routers.lda_router.record_repeat`), with the share of the
  repeats' images each weight routed right (the evidence) in the notes, and the weight
  it would have chosen had the evidence stopped at :data:`EVIDENCE_CAPS` images;

each ``lda`` variant with 5, 10 and 20 stored images per (entry, class). With head-only
reuse an entry never changes after its creating task, so fitting the ``"lda"`` router
after the stream, task by task in stream order (and gathering the evidence of each
repeat before fitting it), stores exactly what fitting it during training would.

    python -m benchmarks.studies.task_free.router_ablation --stream digits fashion10 --seeds 0 --out results/router_ablation.md
    python -m benchmarks.studies.task_free.router_ablation --stream emnist100 --seeds 0 --data-root EMNIST_ROOT \\
        --backbone-weights resnet20-12fca82f.th --out results/router_ablation_emnist.md
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

from avalanche_sdr import cli
from avalanche_sdr.vocabulary import ROUTER_GAUSSIAN, ROUTER_LDA, ROUTER_LDA_WEIGHTED
from benchmarks.table2.catalogue import STREAMS as STREAM_NAMES

if __name__ in ("__main__", "__mp_main__"):
    cli.install_warning_filters()  # before Avalanche is imported

# torch, Avalanche and the library's models are imported by the functions that use them,
# so that --help and usage errors come first.

PER_CLASS = (5, 10, 20)
"""Stored images per (entry, class) the ``"lda"`` variants are fitted with (``--per-class``)."""

SHIPPED_PER_CLASS = 20
"""The shipped ``"lda"`` router's exemplars per (entry, class) (``LDARouter().exemplars``),
always refitted last."""

EVIDENCE_CAPS = (500, 1000, 2000)
"""Repeat images after which ``"lda_weighted"``'s evidence could stop (routing every repeat
through E0 and every entry is its main cost on long streams): the ablation reports the
weight each cap would have chosen, with that weight's validation accuracy. Fixed in
advance (about 5, 10 and 20 repeats of 100 images)."""


def parse_args(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.studies.task_free.router_ablation", description=cli.description(__doc__))
    parser.add_argument("--stream", nargs="+", required=True, choices=sorted(STREAM_NAMES), metavar="STREAM",
                        help=f"harness streams ({', '.join(sorted(STREAM_NAMES))})")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0], metavar="SEED", help="seeds (default: 0)")
    parser.add_argument("--data-root", type=cli.existing_dir, default=None, metavar="DIR",
                        help="dataset folder of the streams that need one (emnist100, cifar10; as "
                        "benchmarks.table2's)")
    parser.add_argument("--backbone-weights", type=cli.existing_file, default=None, metavar="FILE",
                        help="E0 checkpoint of the cifar_resnet20 streams (emnist100)")
    parser.add_argument("--per-class", nargs="+", type=int, default=list(PER_CLASS), metavar="N",
                        help=f"stored images per (entry, class) of the lda variants (default: "
                        f"{' '.join(map(str, PER_CLASS))}; must include {SHIPPED_PER_CLASS}, the shipped number; "
                        f"fewer refits for a long stream)")
    parser.add_argument("--threads", type=int, default=1, metavar="N", help="torch threads (default 1)")
    parser.add_argument("--out", required=True, type=cli.output_file, metavar="FILE.md", help="Markdown table")
    args = parser.parse_args(argv)
    if SHIPPED_PER_CLASS not in args.per_class or min(args.per_class) < 1:
        parser.error(f"--per-class must include {SHIPPED_PER_CLASS} (the shipped router) and be positive, "
                     f"got {args.per_class}")
    args.per_class = sorted(set(args.per_class) - {SHIPPED_PER_CLASS}) + [SHIPPED_PER_CLASS]
    return args


def trained_model(stream: str, seed: int, data_root, weights, work: Path):
    """SDR trained on ``stream`` (original class ids) with every router, and the benchmark."""
    from avalanche.evaluation.metrics import accuracy_metrics
    from avalanche.training.plugins import EvaluationPlugin

    from benchmarks.table2.engine import load_run, prepare_backbone
    from benchmarks.table2.specs import RunSpec
    from benchmarks.table2.methods import METHODS, PRESETS, STREAMS

    backbone_path = prepare_backbone(stream, "cpu", seed, work, data_root=data_root, weights=weights)
    spec = RunSpec(stream=stream, preset="cpu", method="sdr_task_free", seed=seed,
                   backbone_path=backbone_path, data_root=data_root)
    benchmark, backbone = load_run(spec)  # the stream with the dataset's class ids (task-free method)
    strategy = METHODS["sdr_task_free"].build(  # sdr_two_sample_nogen fitted with every router
        backbone, benchmark, STREAMS[stream], PRESETS["cpu"], device="cpu",
        evaluator=EvaluationPlugin(accuracy_metrics(experience=True), loggers=[]))
    for experience in benchmark.train_stream:
        strategy.train(experience, eval_streams=[])
    return strategy.model, benchmark


def refit_lda(model, benchmark, per_class: int) -> List[Tuple[int, float, float]]:
    """The ``"lda"`` routers' shared state, fitted task by task in stream order with
    ``per_class`` images (under ``"lda_weighted"``, which also opens its evidence), each
    repeat (a task on an entry that another task created) first giving its evidence for
    ``"lda_weighted"``, as :class:`~avalanche_sdr.training.SDRPlugin` does before the
    repeat trains.

    :return: after each repeat that gave evidence, (repeat images routed so far, the weight
        chosen on them, wall seconds of routing them so far)."""
    import torch

    from avalanche_sdr.dataset_tensors import experience_tensors
    from avalanche_sdr.routers import lda_router
    from avalanche_sdr.routers.routing import fit_router

    for key in [k for k in model.routing_states if k.startswith(f"{ROUTER_LDA}_")]:
        del model.routing_states[key]
    progress: List[Tuple[int, float, float]] = []
    images, seconds = 0, 0.0
    for task, experience in enumerate(benchmark.train_stream):
        x, y, _ = experience_tensors(experience)
        entry = model.entry_of(task)
        if model.entry_creator[entry] != task:
            tick = time.perf_counter()
            added = lda_router.record_repeat(model, task, entry, x, y)  # y: the class ids (original_class_ids=True)
            seconds += time.perf_counter() - tick
            if added:
                images += added
                progress.append((images, lda_router.chosen_weight(model), seconds))
        ids = model.heads.class_ids(task)
        local = torch.tensor([ids.index(int(v)) for v in y.tolist()])
        fit_router(ROUTER_LDA_WEIGHTED, model, task, x, local, len(ids), new_entry=False,
                   exemplars_per_class=per_class)
    return progress


def capped_choices(progress: Sequence[Tuple[int, float, float]],
                   caps: Sequence[int] = EVIDENCE_CAPS) -> Dict[int, Tuple[float, int, float]]:
    """The weight ``"lda_weighted"`` would choose had its evidence stopped at the first repeat
    that brings it to at least ``cap`` images, for each cap: ``{cap: (weight, images,
    seconds of routing)}`` (:func:`refit_lda`'s ``progress``); a cap the stream never
    reaches is left out (its choice is the uncapped one)."""
    return {cap: next((a, n, t) for n, a, t in progress if n >= cap)
            for cap in caps if progress and progress[-1][0] >= cap}


def ablation(model, benchmark, per_class_counts: Sequence[int] = PER_CLASS) -> Dict[str, float]:
    """Validation task-free accuracy (%) of every variant (module doc), and where the
    shipped router (20 per class) routes to another group than the sample's:
    ``{"misrouted", "n", "top": [((true group, routed group), count), ...]}`` (the five
    most frequent pairs), and ``"evidence"``: ``{"chosen": the weight "lda_weighted" chose,
    "images": repeat images routed as evidence, "seconds": wall seconds of routing them,
    "right": {weight: % of them routed right}, "capped": {cap: (weight, images, seconds,
    validation accuracy % with that weight)}}`` (:func:`capped_choices`).

    :param per_class_counts: the stored images per unit of each refit, in order; the
        last is the shipped number (:data:`SHIPPED_PER_CLASS`), whose state the
        weighted and misrouting figures read."""
    import torch

    with torch.no_grad():
        return _ablation(model, benchmark, per_class_counts)


def _ablation(model, benchmark, per_class_counts: Sequence[int]):
    """:func:`ablation`'s work, without gradients."""
    import torch

    from avalanche_sdr.dataset_tensors import experience_tensors
    from avalanche_sdr.routers import lda_router

    x, y = zip(*[experience_tensors(e)[:2] for e in benchmark.valid_stream])
    x, y = torch.cat(x), torch.cat(y)
    model.eval()
    e0 = model.batched_features(x, None)
    features = {e: model.batched_features(x, e) for e in model.entries}
    groups = torch.cat([torch.full((len(e.dataset),), g) for e, g in zip(benchmark.valid_stream,
                                                                          benchmark.stream_groups)])
    result = {"gaussian": 100 * float((model.predict(x, ROUTER_GAUSSIAN).class_ids == y).double().mean())}
    for per_class in per_class_counts:  # the shipped number last
        progress = refit_lda(model, benchmark, per_class)
        classes = torch.tensor([c for _, c in lda_router.units(model)])
        logp0, logp = lda_router.lda_log_posteriors(model, e0, features)
        for name, score in (("E0 LDA", logp0), ("concatenated LDA", logp), ("lda", logp0 + logp),
                            ("lda, E0 at half weight", 0.5 * logp0 + logp)):
            key = name if name == "E0 LDA" else f"{name}, {per_class} per class"
            result[key] = 100 * float((classes[score.argmax(1)] == y).double().mean())
    # the shipped number of images (the last refit): the weights of "lda_weighted"
    chosen = lda_router.chosen_weight(model)
    accuracy = {a: 100 * float((classes[lda_router.weighted_scores(logp0, logp, a).argmax(1)] == y).double().mean())
                for a in set(lda_router.TERM_WEIGHTS) | {chosen}}
    for name, weight in (("lda, concatenated term at weight 0.25", 0.25),
                         ("lda, concatenated term at weight 0.75", 0.75), ("lda_weighted", chosen)):
        result[f"{name}, {per_class} per class"] = accuracy[weight]
    counts, images = model.routing_state(lda_router.REPEATS_KEY).get("counts"), lda_router.evidence_images(model)
    evidence = {"chosen": chosen, "images": images, "seconds": progress[-1][2] if progress else 0.0,
                "right": {} if counts is None else {a: 100 * float(counts[k]) / max(images, 1)
                                                   for k, a in enumerate(lda_router.TERM_WEIGHTS)},
                "capped": {cap: (a, n, t, accuracy[a]) for cap, (a, n, t) in capped_choices(progress).items()}}
    # where the shipped router (the last refit: 20 per class) errs: routed to another group
    routed = model.predict(x, ROUTER_LDA).entries
    routed_group = torch.tensor([benchmark.stream_groups[model.entry_creator[int(e)]] for e in routed])
    pairs: Dict[tuple, int] = {}
    for true, got in zip(groups.tolist(), routed_group.tolist()):
        if true != got:
            pairs[(true, got)] = pairs.get((true, got), 0) + 1
    return result, {"misrouted": int(sum(pairs.values())), "n": len(y),
                    "top": sorted(pairs.items(), key=lambda kv: -kv[1])[:5], "evidence": evidence}


def main(args) -> str:
    import torch

    torch.set_num_threads(args.threads)
    work = Path(args.out).parent / "router_ablation_work"
    rows: List[Dict[str, float]] = []
    labels: List[str] = []
    notes: List[str] = []
    for stream in args.stream:
        for seed in args.seeds:
            tick = time.perf_counter()
            root = args.data_root if STREAM_NAMES[stream].needs_data_root else None  # fashion: its default folder
            model, benchmark = trained_model(stream, seed, root, args.backbone_weights, work / stream)
            result, errors = ablation(model, benchmark, args.per_class)
            rows.append(result)
            labels.append(f"{stream} seed {seed} ({errors['n']} validation images)")
            names = [", ".join(map(str, group)) for group in getattr(benchmark, "class_names", benchmark.groups)]
            notes.append(f"- {labels[-1]}: lda (20 per class) sends {errors['misrouted']} of {errors['n']} validation "
                         "images to another group; most often (true group -> routed group: images): " + "; ".join(
                             f"[{names[a]}] -> [{names[b]}]: {k}" for (a, b), k in errors["top"]))
            evidence = errors["evidence"]
            notes.append(f"- {labels[-1]}: lda_weighted chose weight {evidence['chosen']} on {evidence['images']} "
                         "images of the stream's repeats (TRAINING images, routed before each repeat was fitted), "
                         "which each weight routed right: " + ", ".join(
                             f"{a}: {share:.2f} %" for a, share in evidence["right"].items())
                         + f"; routing them took {evidence['seconds']:.1f} s")
            capped = "; ".join(f"at {cap} images (stopped after {n}, {t:.1f} s) weight {a} ({acc:.2f} %)"
                               for cap, (a, n, t, acc) in evidence["capped"].items())
            notes.append(f"- {labels[-1]}: lda_weighted's evidence capped (EVIDENCE_CAPS) would have chosen: "
                         + (capped or f"no cap reached ({evidence['images']} images)"))
            print(f"{labels[-1]}: {rows[-1]} ({time.perf_counter() - tick:.0f} s)", flush=True)
    report = format_table(labels, rows, torch.get_num_threads()) + "\n" + "\n".join(notes) + "\n"
    Path(args.out).write_text(report)
    print(report)
    return report


def format_table(labels: Sequence[str], rows: Sequence[Dict[str, float]], threads: int) -> str:
    """A Markdown table: one row per variant, one column per stream and seed."""
    lines = ["Task-free accuracy (%) on the VALIDATION split (SDR two-sample, head-only reuse, CPU preset; "
             f"torch threads {threads}).\n", "| Router variant | " + " | ".join(labels) + " |",
             "|---" * (len(labels) + 1) + "|"]
    for variant in rows[0]:
        lines.append(f"| {variant} | " + " | ".join(f"{row[variant]:.2f}" for row in rows) + " |")
    return "\n".join(lines) + "\n"


__all__ = ["EVIDENCE_CAPS", "PER_CLASS", "SHIPPED_PER_CLASS", "ablation", "capped_choices", "format_table", "main",
           "parse_args", "refit_lda", "trained_model"]

if __name__ == "__main__":
    cli.run_cli(main, parse_args)
