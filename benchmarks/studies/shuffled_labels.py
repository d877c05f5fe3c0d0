"""Repeats whose classes come in another order: the two-sample rule with and without
``match_classes`` (issue #23, item 2), detection only.

Streams: ``MixedDigits`` and ``MixedFashionMNIST`` 10 tasks as the harness builds them
(``benchmarks.table2.methods.STREAMS``, CPU-preset task sizes), each as is and with
``shuffle_repeat_labels=True`` (every task after the first of its group carries its
local labels in a seeded other order; 2-class groups: swapped). For each stream, seed,
shuffle and ``TwoSampleSettings(match_classes=...)``, the rule's decisions over the whole
stream are replayed without training (:func:`benchmarks.studies.detection.sim.simulate`): the
two-sample rule decides from E0's frozen features and the references it stored, never
from the entries' adapters or heads, so an empty repository that receives, task by
task, the entries its own decisions create makes the decisions a full ``SDRStrategy``
run would (the same ``detect`` / ``remember`` calls, the training between them left
out). E0 is the harness's (:func:`benchmarks.table2.engine.prepare_backbone`: the small CNN
pretrained on the stream's warm-start tasks, which are the first of their groups and
therefore the same with and without the shuffle).

Each decision is scored Correct / Miss / Incorrect against the stream's ground-truth
groups (:func:`avalanche_sdr.evaluation.classify_detection`); for every correct reuse the
recorded ``class_permutation`` is compared with the ground truth
(``MixedSimilarityBenchmark.label_matching`` between the task and the task that created
the reused entry; an empty permutation is the identity).

    python -m benchmarks.studies.shuffled_labels --stream digits fashion10 --seeds 0 1 --out results/shuffled_labels

Finished replays are kept in ``OUT/runs/*.json`` and skipped when the command runs
again; the table is printed and written to ``OUT/shuffled_labels.md``.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any, Dict, List, Sequence

from avalanche_sdr import cli

STREAMS = ("digits", "fashion10")
"""Harness streams this script replays (names of :data:`benchmarks.table2.methods.STREAMS`)."""


def run_name(stream: str, seed: int, shuffled: bool, match: bool, threads: int) -> str:
    return f"{stream}_seed{seed}_{'shuffled' if shuffled else 'plain'}_match{'on' if match else 'off'}_t{threads}"


def permutation_check(result: Dict[str, Any], benchmark) -> Dict[str, int]:
    """Of the correct reuses of a replay: how many recorded the true class matching.

    :return: ``{"correct_reuses", "permutation_right", "permuted_reuses"}`` (the last:
        reuses whose recorded ``class_permutation`` is not the identity).
    """
    right = total = permuted = 0
    for record, outcome in zip(result["records"], result["outcomes"]):  # scored tasks only, in order
        if record["decision"] != "reuse":
            continue
        permuted += bool(record["class_permutation"])
        if outcome != "correct":
            continue
        creator = record["candidate_tasks"][record["candidate_entries"].index(record["reused_entry"])]
        truth = benchmark.label_matching(int(record["task"]), int(creator))  # task id = experience index
        recorded = record["class_permutation"] or list(range(len(truth)))
        total += 1
        right += recorded == truth
    return {"correct_reuses": total, "permutation_right": right, "permuted_reuses": permuted}


def run(args) -> List[Dict[str, Any]]:
    import torch

    from avalanche_sdr.detection import TwoSampleDetector, TwoSampleSettings
    from benchmarks.studies.detection.sim import simulate
    from benchmarks.table2.methods import PRESETS
    from benchmarks.table2.methods import STREAMS as SPECS
    from benchmarks.table2.engine import load_backbone, prepare_backbone
    from benchmarks.table2.specs import RunSpec

    torch.set_num_threads(args.threads)
    out = Path(args.out)
    results = []
    for stream_name in args.stream:
        spec = SPECS[stream_name]
        for seed in args.seeds:
            path = prepare_backbone(stream_name, "cpu", seed, args.backbones or out, data_root=args.data_root)
            backbone = load_backbone(RunSpec(stream_name, "cpu", "sim", seed, path))
            for shuffled in (False, True):
                benchmark = spec.build(seed, PRESETS["cpu"].capped, args.data_root, shuffle_repeat_labels=shuffled)
                for match in (False, True):
                    name = run_name(stream_name, seed, shuffled, match, args.threads)
                    target = out / "runs" / f"{name}.json"
                    if target.exists():
                        results.append(json.loads(target.read_text()))
                        continue
                    detector = TwoSampleDetector(TwoSampleSettings(match_classes=match))
                    start = time.perf_counter()
                    result = simulate(detector, backbone, benchmark, spec.in_channels, spec.image_size)
                    result.update(permutation_check(result, benchmark), stream=stream_name, seed=seed,
                                  shuffled=shuffled, match_classes=match, torch_threads=torch.get_num_threads(),
                                  wall_seconds=time.perf_counter() - start, run=name,
                                  label_permutations=benchmark.label_permutations,
                                  stream_groups=benchmark.stream_groups)
                    cli.write_json(target, result)
                    results.append(result)
                    counts = {k: result["outcomes"].count(k) for k in ("correct", "miss", "incorrect")}
                    print(f"{name}: correct {counts['correct']} miss {counts['miss']} incorrect "
                          f"{counts['incorrect']} (of {result['n_scored']}); permutation right "
                          f"{result['permutation_right']}/{result['correct_reuses']} correct reuses; "
                          f"{result['detection_seconds']:.1f} s detection", flush=True)
    return results


def summary_table(results: Sequence[Dict[str, Any]]) -> str:
    """Markdown: one row per (stream, shuffled, match_classes), counts summed over seeds."""
    rows: Dict[tuple, List[Dict[str, Any]]] = {}
    for r in results:
        rows.setdefault((r["stream"], r["shuffled"], r["match_classes"]), []).append(r)
    lines = ["| stream | repeats' labels | match_classes | seeds | Correct | Miss | Incorrect | scored | "
             "correct reuses with the true permutation | detection s (sum) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for (stream, shuffled, match), rs in sorted(rows.items()):
        count = {k: sum(r["outcomes"].count(k) for r in rs) for k in ("correct", "miss", "incorrect")}
        lines.append(
            f"| {stream} | {'shuffled' if shuffled else 'as is'} | {'on' if match else 'off'} | "
            f"{','.join(str(r['seed']) for r in sorted(rs, key=lambda r: r['seed']))} | {count['correct']} | "
            f"{count['miss']} | {count['incorrect']} | {sum(r['n_scored'] for r in rs)} | "
            f"{sum(r['permutation_right'] for r in rs)} / {sum(r['correct_reuses'] for r in rs)} | "
            f"{sum(r['detection_seconds'] for r in rs):.1f} |")
    return "\n".join(lines) + "\n"


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.studies.shuffled_labels",
                                     description=cli.description(__doc__))
    parser.add_argument("--stream", nargs="+", choices=STREAMS, default=list(STREAMS),
                        help="harness streams (default: digits fashion10)")
    parser.add_argument("--seeds", nargs="+", type=cli.seed, default=[0, 1], metavar="SEED",
                        help="stream seeds, each also fixes E0 (default: 0 1)")
    parser.add_argument("--threads", type=cli.positive_int, default=1, metavar="N",
                        help="torch threads (default 1)")
    parser.add_argument("--data-root", type=cli.existing_dir, default=None, metavar="DIR",
                        help="Fashion-MNIST folder (default: the preset's, /usr/share/datasets/fashion-mnist)")
    parser.add_argument("--backbones", type=cli.existing_dir, default=None, metavar="DIR",
                        help="take E0 from DIR/backbones (e.g. a benchmarks.table2 --out folder); "
                        "default: OUT/backbones")
    parser.add_argument("--out", type=cli.output_dir, default="results/shuffled_labels", metavar="DIR",
                        help="output folder: runs/*.json and shuffled_labels.md (default results/shuffled_labels)")
    cli.add_debug_argument(parser)
    return parser.parse_args(argv)


def main(argv=None) -> str:
    args = parse_args(argv)
    start = time.perf_counter()
    table = summary_table(run(args))
    print(table)
    print(f"wall time {time.perf_counter() - start:.0f} s")
    path = Path(args.out) / "shuffled_labels.md"
    path.write_text(table, encoding="utf-8")
    return table


if __name__ == "__main__":
    cli.run_cli(main)
