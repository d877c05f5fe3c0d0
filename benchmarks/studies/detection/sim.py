"""Detection alone, over whole streams, without training: rules that score E0 features.

The two-sample rule and the Expert Gate baseline decide from E0's frozen features and
what they stored for each entry; neither reads the entries' adapters or heads. Their
whole sequence of decisions over a stream can therefore be replayed exactly without
training anything: an empty repository without generators receives, task by task, the
entries the rule's own decisions create (warm-start tasks first), and each decision is
classified Correct / Miss / Incorrect against the stream's ground truth. This is the
same code path as a full ``SDRStrategy`` run (``detector.detect`` then
``detector.remember`` on a new entry), only without the training between decisions,
so the decisions equal those of the harness run on the same E0 (checked by
``tests/harness/test_detection_sim.py``); the detector gets E0's pretraining record as
the strategy hands it over (``use_pretraining``).

It measures what full runs cannot afford to sweep: many seeds, task sizes from 20
images up, the per-class test (Hotelling against energy distance), thread counts.
Per run it reports Correct / Miss / Incorrect (fractions of scored tasks), the
share of tasks whose group is new that were declared new (``power`` in the run
JSONs: the rule's power on this stream), the share of repeats declared new (the
false-new rate, ``false_new``), and detection seconds.

E0 is the harness's (:func:`benchmarks.table2.engine.prepare_backbone`: the small CNN
pretrained on the CPU-preset warm-start tasks of the stream and seed, or the CIFAR-10
ResNet-20 for EMNIST), cached under ``OUT/backbones``; ``--train-per-task`` then
changes only the size of the stream's tasks, not E0 (on digits it sets the number of
splits, ``round(252 / N)``, since its task size follows them).

    python -m benchmarks.studies.detection.sim --stream fashion10 --seeds 0 1 2 3 4 --out results/detection_sim
    python -m benchmarks.studies.detection.sim --stream fashion50 --train-per-task 20 50 100 300 1000 --seeds 0 1
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from avalanche_sdr import cli

_RECOMMENDED_VARIANTS = {
    "recommended": (None, False, None, {}),
    "recommended_confirm_accepts": (None, True, None, {}),
    "recommended_by_size": ("by_size", False, 16, {}),
    "recommended_paired_power": ("by_paired_power", False, 16, {}),
    "recommended_paired_power_confirm_accepts": ("by_paired_power", True, 16, {}),
    "recommended_dim32": ("by_paired_power", False, 32, {}),
    "recommended_dim64": ("by_paired_power", False, 64, {}),
    "recommended_familywise": ("by_paired_power", False, 16, dict(familywise=True)),
    "recommended_beta001": ("by_paired_power", False, 16, dict(beta=0.001, n_decoys=999)),
}
"""``method="recommended"``'s detector and its variants: rule name -> (the two-sample level's name in
:data:`~avalanche_sdr.detection.LEVELS`, ``None`` for the method's own; ``confirm_accepts``; the two-sample
test's projected dimension ``dim``, ``None`` for the method's own; further
:class:`~avalanche_sdr.detection.small_task.SmallTaskSettings` fields of the fallback's false-reuse level:
``familywise``, or ``beta`` with ``n_decoys``; a rule that names its level is per candidate, ``familywise=False``,
unless it says otherwise). The level and the dimension are named
wherever a rule stands for one, so that a rule means the same detector after the method's default changes
(``"recommended"`` and ``"recommended_confirm_accepts"`` follow the default)."""

RECOMMENDED_RULES = tuple(_RECOMMENDED_VARIANTS)
"""The names of :data:`_RECOMMENDED_VARIANTS`, in order: also the rules of ``python -m benchmarks.stream_designs
replay`` (:data:`benchmarks.stream_designs.replay.RULES`)."""

RULES = ("two_sample", "two_sample_energy", "expert_gate", "two_sample_no_power", "two_sample_matched",
         *RECOMMENDED_RULES)
"""Rules this script replays: the two-sample rule with the Hotelling test (default
settings), with the energy-distance permutation test, without the power check
(``min_power=0``), Expert Gate's relatedness, the two-sample rule with
``match_classes=True`` (``method="recommended"``'s detector before issue #45), and
``method="recommended"``'s detector (the small-task rule, matched classes, a level
falling with task size), that detector with ``SmallTaskSettings(confirm_accepts=True)``,
the same detector at the level ``"by_size"`` (the method's before ``5b6973f``) and at
``"by_paired_power"`` (its level since), the last with ``confirm_accepts``, the paired level in 32 and
64 projected dimensions instead of 16, and the paired level with the fallback's false-reuse level over every
candidate entry (``familywise``: the method's since it was chosen on validation designs 220-319; every other
named rule is per candidate, the method's before) or at ``beta = 0.001`` (:data:`_RECOMMENDED_VARIANTS`; these
nine are also the rules of ``python -m benchmarks.stream_designs replay``)."""


def make_rule(name: str):
    """A detector for a rule name of :data:`RULES` (library defaults otherwise)."""
    from dataclasses import replace

    from avalanche_sdr.detection import DEFAULT_TWO_SAMPLE, ExpertGateDetector, TwoSampleDetector

    if name == "two_sample":
        return TwoSampleDetector()
    if name == "two_sample_energy":
        return TwoSampleDetector(replace(DEFAULT_TWO_SAMPLE, test="energy"))
    if name == "two_sample_no_power":
        return TwoSampleDetector(replace(DEFAULT_TWO_SAMPLE, min_power=0.0))
    if name == "expert_gate":
        return ExpertGateDetector()
    if name == "two_sample_matched":
        return TwoSampleDetector(replace(DEFAULT_TWO_SAMPLE, match_classes=True))
    if name in _RECOMMENDED_VARIANTS:
        from avalanche_sdr.detection import LEVELS
        from avalanche_sdr.detection.small_task import SmallTaskDetector
        from avalanche_sdr.training import METHODS

        detector = METHODS["recommended"].defaults()["detector"]
        level, confirm_accepts, dim, fallback = _RECOMMENDED_VARIANTS[name]
        if level is None and not confirm_accepts and dim is None:
            return detector
        settings = detector.settings
        two_sample = settings.two_sample
        if level is not None:  # a named rule names the fallback's level too: per candidate unless it says otherwise
            two_sample = replace(two_sample, alpha=LEVELS[level]())
            fallback = {"familywise": False, **fallback}
        if dim is not None:
            two_sample = replace(two_sample, dim=dim)
        return SmallTaskDetector(replace(settings, two_sample=two_sample, confirm_accepts=confirm_accepts,
                                         **fallback))
    raise ValueError(f"unknown rule {name!r}; choose from {RULES}")


def simulate(detector, backbone, benchmark, in_channels: int, image_size: int) -> Dict[str, Any]:
    """Replay ``detector``'s decisions over ``benchmark.train_stream`` (no training).

    :return: ``{"correct", "miss", "incorrect", "power", "false_new", "n_scored",
        "n_new_group", "n_repeat", "unique_entries", "detection_seconds",
        "decisions": [...], "outcomes": [...], "records": [...]}``.
    """
    import copy

    from avalanche_sdr.detection import pretraining_record
    from avalanche_sdr.evaluation import classify_detection, detection_summary
    from avalanche_sdr.models import TaskData, build_sdr_model
    from avalanche_sdr.training.data import check_task_data, read_task_data

    model = build_sdr_model(copy.deepcopy(backbone), in_channels=in_channels, image_size=image_size,
                            generator=None).eval()
    detector.use_pretraining(pretraining_record(model.encoder.backbone))  # as SDRStrategy does when it is built
    groups_seen: List[int] = []
    group_of_task: Dict[int, int] = {}
    outcomes, decisions, records = [], [], []
    new_group_new, new_group, repeat_new, repeats = 0, 0, 0, 0
    seconds = 0.0
    for i, experience in enumerate(benchmark.train_stream):
        task, group = int(experience.task_labels[0]), int(experience.group)
        group_of_task[task] = group
        x, y = read_task_data(experience)
        c = check_task_data(x, y, task=task, input_shape=model.input_shape)
        start = time.perf_counter()
        if i < benchmark.n_warm_start:
            entry = model.create_entry(task)
            model.heads.add(task, c)
            detector.remember(model, entry, TaskData(task, x, y))
            decisions.append("warm_start")
        else:
            data = TaskData(task, x, y)
            record = detector.detect(model, data)
            if record.decision == "new":
                entry = model.create_entry(task)
                model.heads.add(task, c)
                detector.remember(model, entry, data)
                reused_group = None
            else:
                model.assign_task(task, record.reused_entry)
                model.heads.add(task, c)
                reused_group = group_of_task[model.entry_creator[record.reused_entry]]
            outcome = classify_detection(group, groups_seen, reused_group)
            outcomes.append(outcome)
            decisions.append(record.decision)
            records.append({k: v for k, v in record.to_dict().items() if k != "detection_seconds"})
            if group in groups_seen:
                repeats += 1
                repeat_new += record.decision == "new"
            else:
                new_group += 1
                new_group_new += record.decision == "new"
        seconds += time.perf_counter() - start
        groups_seen.append(group)
    summary = detection_summary(outcomes)
    return dict(
        summary,
        power=new_group_new / new_group if new_group else None,
        false_new=repeat_new / repeats if repeats else None,
        n_new_group=new_group, n_repeat=repeats, unique_entries=model.num_entries,
        detection_seconds=seconds, decisions=decisions, outcomes=outcomes, records=records,
    )


def _benchmark(stream_name: str, seed: int, train_per_task: Optional[int], data_root: Optional[str]):
    from benchmarks.table2.methods import PRESETS, STREAMS

    stream = STREAMS[stream_name]
    if train_per_task is None:
        return stream.build(seed, PRESETS["cpu"].capped, data_root)
    if stream_name == "digits":
        # Digits has ~144 training images a digit: its task size follows the number of
        # splits (about 252 / n_splits training images per 2-digit task).
        from avalanche_sdr.benchmarks import MixedDigits

        return MixedDigits(seed=seed, n_splits=max(2, round(252 / train_per_task)))
    test = (stream.fixed_sizes or stream.capped_sizes or (None, None, 100))[2]
    # No validation images: detection reads none.
    return stream.build(seed, True, data_root, sizes=(train_per_task, 0, test))


def run(args) -> List[Dict[str, Any]]:
    import torch

    from benchmarks.table2.methods import STREAMS
    from benchmarks.table2.engine import load_backbone, prepare_backbone
    from benchmarks.table2.specs import RunSpec

    torch.set_num_threads(args.threads)
    out = Path(args.out)
    stream = STREAMS[args.stream]
    results = []
    for seed in args.seeds:
        path = prepare_backbone(args.stream, "cpu", seed, args.backbones or out, data_root=args.data_root,
                                weights=args.backbone_weights)
        backbone = load_backbone(RunSpec(args.stream, "cpu", "sim", seed, path))
        for size in args.train_per_task or [None]:
            benchmark = _benchmark(args.stream, seed, size, args.data_root)
            mean_train = sum(t["train"] for t in benchmark.task_sizes) / len(benchmark.task_sizes)
            for rule in args.rules:
                name = f"{args.stream}_{'cpu' if size is None else f'n{size}'}_{rule}_seed{seed}_t{args.threads}"
                target = out / "runs" / f"{name}.json"
                if target.exists():
                    results.append(json.loads(target.read_text()))
                    continue
                result = simulate(make_rule(rule), backbone, benchmark, stream.in_channels, stream.image_size)
                result.update(stream=args.stream, seed=seed, rule=rule, train_per_task=size,
                              mean_train_images=mean_train, torch_threads=torch.get_num_threads(), run=name)
                cli.write_json(target, result)
                results.append(result)
                print(f"{name}: correct {result['correct']:.3f} miss {result['miss']:.3f} "
                      f"incorrect {result['incorrect']:.3f} power {result['power']} false-new "
                      f"{result['false_new']} entries {result['unique_entries']} "
                      f"({mean_train:.0f} train images/task, {result['detection_seconds']:.1f}s)", flush=True)
    return results


def summary_table(results: Sequence[Dict[str, Any]]) -> str:
    """Markdown: one row per (stream, size, rule, torch threads), mean over seeds."""
    from benchmarks.table2.report import mean_std

    rows: Dict[tuple, List[Dict[str, Any]]] = {}
    for r in results:
        rows.setdefault((r["stream"], r["train_per_task"] or 0, r["rule"], r.get("torch_threads", 1)), []).append(r)
    lines = ["| stream | train images / task | rule | threads | seeds | Correct % | Miss % | Incorrect % | "
             "new groups declared new % | repeats declared new % | detection s |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for (stream, _, rule, threads), rs in sorted(rows.items()):
        def pm(key, scale=100.0):
            values = [scale * r[key] for r in rs if r[key] is not None]
            if not values:
                return "–"
            m, s = mean_std(values)
            return f"{m:.1f} ± {s:.1f}"
        size = sum(r["mean_train_images"] for r in rs) / len(rs)
        lines.append(f"| {stream} | {size:.0f} | {rule} | {threads} | {','.join(str(r['seed']) for r in rs)} | "
                     f"{pm('correct')} | "
                     f"{pm('miss')} | {pm('incorrect')} | {pm('power')} | {pm('false_new')} | "
                     f"{pm('detection_seconds', 1.0)} |")
    return "\n".join(lines) + "\n"


def thread_check(runs_dir) -> str:
    """Markdown: for every replay run with both 1 and 2 torch threads (``*_t1.json`` /
    ``*_t2.json``), whether every decision and every chosen entry is the same, and the
    largest relative difference of a recorded p-value."""
    runs_dir = Path(runs_dir)
    lines = ["| replay | tasks | identical decisions | largest relative p-value difference |", "|---|---|---|---|"]
    for one in sorted(runs_dir.glob("*_t1.json")):
        two = one.with_name(one.name[: -len("_t1.json")] + "_t2.json")
        if not two.exists():
            continue
        a, b = json.loads(one.read_text()), json.loads(two.read_text())
        same = a["decisions"] == b["decisions"] and [r["entry"] for r in a["records"]] == [r["entry"] for r in b["records"]]
        diff = 0.0
        for ra, rb in zip(a["records"], b["records"]):
            for pa, pb in zip(ra["p_value"], rb["p_value"]):
                pa, pb = float(pa), float(pb)
                if max(abs(pa), abs(pb)) > 0:
                    diff = max(diff, abs(pa - pb) / max(abs(pa), abs(pb)))
        lines.append(f"| {one.name[: -len('_t1.json')]} | {len(a['decisions'])} | {'yes' if same else 'NO'} | {diff:.1e} |")
    return "\n".join(lines) + "\n"


def parse_args(argv=None):
    from benchmarks.table2.catalogue import STREAMS  # names only: no torch before the arguments are checked

    parser = argparse.ArgumentParser(prog="python -m benchmarks.studies.detection.sim",
                                     description=cli.description(__doc__))
    parser.add_argument("--stream", choices=sorted(STREAMS), required=True,
                        help="harness stream (as for benchmarks.table2 --stream)")
    parser.add_argument("--seeds", nargs="+", type=cli.seed, default=[0], metavar="SEED",
                        help="stream seeds, each also fixes E0 (default: 0)")
    parser.add_argument("--rules", nargs="+", choices=RULES, default=["two_sample"],
                        help="rules to replay (default two_sample): two_sample (Hotelling test), "
                        "two_sample_energy (energy-distance test), two_sample_no_power (no power check), "
                        "expert_gate (Expert Gate relatedness), two_sample_matched (match_classes=True), "
                        "recommended (the detector of method='recommended')")
    parser.add_argument("--train-per-task", nargs="+", type=cli.positive_int, default=None, metavar="N",
                        help="training images per task (sweep); default: the stream's CPU-preset sizes")
    parser.add_argument("--threads", type=cli.non_negative_int, default=1, metavar="N",
                        help="torch threads (default 1; 0: torch's default)")
    parser.add_argument("--data-root", type=cli.existing_dir, default=None, metavar="DIR",
                        help="dataset folder (as for benchmarks.table2; emnist100, cifar10: required)")
    parser.add_argument("--backbone-weights", type=cli.existing_file, default=None, metavar="FILE",
                        help="CIFAR-10 ResNet-20 checkpoint (resnet20-*.th), for emnist100")
    parser.add_argument("--out", type=cli.output_dir, default="results/detection_sim", metavar="DIR",
                        help="output folder: one runs/*.json per replay (default results/detection_sim)")
    parser.add_argument("--report", action="store_true",
                        help="run nothing: print the summary of every replay in OUT/runs and the 1- vs "
                        "2-thread comparison")
    parser.add_argument("--backbones", type=cli.existing_dir, default=None, metavar="DIR",
                        help="take E0 from DIR/backbones (e.g. a benchmarks.table2 --out folder, so that the "
                        "replayed decisions are those of its runs); default: OUT/backbones")
    cli.add_debug_argument(parser)
    args = parser.parse_args(argv)
    if args.train_per_task and min(args.train_per_task) < 4:
        parser.error("--train-per-task must be >= 4")
    stream = STREAMS[args.stream]
    if stream.needs_data_root and not args.data_root:
        parser.error(f"--stream {args.stream} needs --data-root")
    if stream.backbone == "cifar_resnet20" and not args.backbone_weights and not args.backbones:
        parser.error(f"--stream {args.stream} needs --backbone-weights (a CIFAR-10 resnet20-*.th file)")
    return args


def main(argv=None) -> str:
    args = parse_args(argv)
    if args.report:
        runs = [json.loads(p.read_text()) for p in sorted((Path(args.out) / "runs").glob("*.json"))]
        text = summary_table(runs) + "\n" + thread_check(Path(args.out) / "runs")
        print(text)
        return text
    table = summary_table(run(args))
    print(table)
    return table


if __name__ == "__main__":
    cli.run_cli(main)
