"""Command line of the stream designs: ``list``, ``show``, ``run``, ``report`` and ``replay``.

    python -m benchmarks.stream_designs list --seeds report --out docs/results/stream_designs/designs.md
    python -m benchmarks.stream_designs show 3
    python -m benchmarks.stream_designs run --seeds validation --methods recommended recommended_head paper --out DIR --threads 1
    python -m benchmarks.stream_designs report --out DIR
    python -m benchmarks.stream_designs run --design-files RUN.json --out DIR   # a design as recorded
    python -m benchmarks.stream_designs replay --seeds validation2 --rules recommended recommended_confirm_accepts --out DIR

``--seeds`` takes design seeds or the words of :data:`SEED_RANGES` (``validation`` / ``validation2`` /
``report`` / ``next_report`` / ``validation3`` / ``third_report`` / ``validation4`` / ``fourth_report`` /
``validation5``, the fixed ranges); running a report seed needs ``--report-seeds`` (they are for
the report, never for a choice).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from avalanche_sdr import cli
from benchmarks.stream_designs.replay import RULES as REPLAY_RULES
from benchmarks.stream_designs.distribution import (FIFTH_VALIDATION_SEEDS, FOURTH_REPORT_SEEDS, FOURTH_VALIDATION_SEEDS,
                                                    NEXT_REPORT_SEEDS, REPORT_RANGES, REPORT_SEEDS,
                                                    SECOND_VALIDATION_SEEDS, THIRD_REPORT_SEEDS, THIRD_VALIDATION_SEEDS,
                                                    VALIDATION_SEEDS, check_design, draw_design)


SEED_RANGES: Dict[str, Tuple[Tuple[int, ...], str]] = {
    "validation": (VALIDATION_SEEDS, "Stream designs"),
    "validation2": (SECOND_VALIDATION_SEEDS, "Second validation designs"),
    "report": (REPORT_SEEDS, "Report designs"),
    "next_report": (NEXT_REPORT_SEEDS, "Next report designs"),
    "validation3": (THIRD_VALIDATION_SEEDS, "Third validation designs"),
    "third_report": (THIRD_REPORT_SEEDS, "Third report designs"),
    "validation4": (FOURTH_VALIDATION_SEEDS, "Fourth validation designs"),
    "fourth_report": (FOURTH_REPORT_SEEDS, "Fourth report designs"),
    "validation5": (FIFTH_VALIDATION_SEEDS, "Fifth validation designs"),
}
"""The words ``--seeds`` takes for the fixed ranges of :mod:`~benchmarks.stream_designs.distribution`: each
word's seeds and the title ``list`` gives a page of exactly those seeds (other seeds: "Stream designs")."""

SEED_WORDS = " / ".join(SEED_RANGES)
"""The range words as the help texts list them."""


def _seeds(values: Sequence[str], parser: argparse.ArgumentParser) -> List[int]:
    seeds: List[int] = []
    for value in values:
        if value in SEED_RANGES:
            seeds += SEED_RANGES[value][0]
        else:
            try:
                seed = int(value)
            except ValueError:
                words = " / ".join(repr(word) for word in SEED_RANGES)
                parser.error(f"argument --seeds: {value!r} is neither a design seed nor {words}")
            if seed < 0:
                parser.error(f"argument --seeds: a design seed is a non-negative int, got {seed}")
            seeds.append(seed)
    return list(dict.fromkeys(seeds))


def _design_file(path: str, parser: argparse.ArgumentParser) -> Dict:
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as err:
        parser.error(f"argument --design-files: cannot read {path} as JSON ({err})")
    design = data.get("design", data) if isinstance(data, dict) else None
    try:
        check_design(design if isinstance(design, dict) else {})
    except ValueError as err:
        parser.error(f"argument --design-files: {path} holds no valid design: {err}")
    return design


def _method_keywords(values: Sequence[str], parser: argparse.ArgumentParser) -> Dict[str, Dict]:
    extra = {}
    for value in values:
        name, sep, text = value.partition("=")
        try:
            keywords = json.loads(text) if sep else None
        except json.JSONDecodeError as err:
            parser.error(f"argument --method-keywords: {value!r}: the keywords are not JSON ({err})")
        if not name or not isinstance(keywords, dict):
            parser.error(f"argument --method-keywords: expected NAME='{{\"method\": ...}}' (a JSON object of "
                         f"SDRStrategy.from_benchmark keywords), got {value!r}")
        if isinstance(keywords.get("reuse"), dict):  # a reuse's configuration: checked before any design runs
            from avalanche_sdr.training import make_reuse

            try:
                make_reuse(keywords["reuse"])
            except (TypeError, ValueError) as err:
                parser.error(f"argument --method-keywords: {name}: {err}")
        extra[name] = keywords
    return extra


def build_parser() -> argparse.ArgumentParser:
    """The command's parser (subcommands ``list``, ``show``, ``run``, ``report``, ``replay``)."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.stream_designs", description=cli.description(__doc__),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    listing = sub.add_parser("list", help="write the table of designs (markdown)")
    listing.add_argument("--seeds", nargs="+", default=["report"],
                         help=f"design seeds, or {SEED_WORDS}")
    listing.add_argument("--out", type=cli.output_file, default=None, help="markdown file (default: stdout)")
    show = sub.add_parser("show", help="print a design as JSON")
    show.add_argument("seed", type=cli.seed)
    run = sub.add_parser("run", help="run methods on designs (resumable: existing run files are skipped)")
    run.add_argument("--seeds", nargs="+", default=[],
                     help=f"design seeds, or {SEED_WORDS}")
    run.add_argument("--design-files", nargs="+", default=[], metavar="JSON",
                     help="designs given as files: a design (the show command's output) or a run file (its design), "
                          "e.g. to rerun a design of an earlier distribution version")
    run.add_argument("--methods", nargs="+", default=None, metavar="NAME",
                     help="method names (runner.METHODS and --method-keywords); default: all of them")
    run.add_argument("--method-keywords", nargs="+", default=[], metavar="NAME=JSON",
                     help="define or redefine a method: the SDRStrategy.from_benchmark keywords it adds, as JSON; "
                     "a reuse with options by its configuration, e.g. "
                     "'x={\"method\": \"recommended\", \"reuse\": {\"name\": \"accumulate\", \"top_layers\": 2}}'")
    run.add_argument("--out", type=cli.output_dir, required=True, help="folder of runs/ and e0/")
    run.add_argument("--data-root", default=None,
                     help="shared data folder with emnist/ and cifar10/ (default: SDR_SHARED_DATA or "
                          "../shared/data beside the checkout); designs of an absent source are skipped")
    run.add_argument("--e0-dir", type=cli.output_dir, default=None,
                     help="folder of the designs' pretrained E0 weights, reused on resume (default: OUT/e0)")
    run.add_argument("--fashion-root", default=None, help="Fashion-MNIST folder (default: the Debian package's)")
    run.add_argument("--training-seed-offset", type=int, default=0, metavar="K",
                     help="add K to each design's training seed (same E0, stream and data; other training draws): "
                          "a second run of a method, to measure run-to-run spread (default 0)")
    run.add_argument("--seed-each-task", action="store_true",
                     help="seed the global generators before each task from the training seed and the task's "
                          "position: methods draw alike for the tasks they train alike (common random numbers)")
    run.add_argument("--report-seeds", action="store_true",
                     help="allow report seeds (only for the report, after every choice was made on validation seeds)")
    cli.add_threads_argument(run)
    rep = sub.add_parser("report", help="write the markdown report of the runs under --out")
    rep.add_argument("--out", type=cli.existing_dir, required=True, help="the run command's --out")
    rep.add_argument("--to", type=cli.output_file, default=None, help="markdown file (default: OUT/report.md)")
    rep.add_argument("--recommended", default="recommended", help="method name of the recommended runs")
    rep.add_argument("--head", default="recommended_head", help="method name of the head-only runs")
    rep.add_argument("--paper", default="paper", help="method name of the paper's runs")
    replay = sub.add_parser("replay", help="replay detectors' decisions on designs without training "
                                           "(benchmarks.stream_designs.replay); resumable; then their table")
    replay.add_argument("--seeds", nargs="+", required=True, help=f"design seeds, or {SEED_WORDS}")
    replay.add_argument("--rules", nargs="+", required=True, choices=list(REPLAY_RULES), metavar="RULE",
                        help=f"detectors to replay: {', '.join(REPLAY_RULES)}")
    replay.add_argument("--out", type=cli.output_dir, required=True, help="folder of replays/, e0/ and replays.md")
    replay.add_argument("--data-root", default=None, help="as run's --data-root")
    replay.add_argument("--e0-dir", type=cli.output_dir, default=None, help="as run's --e0-dir (default: OUT/e0)")
    replay.add_argument("--fashion-root", default=None, help="as run's --fashion-root")
    replay.add_argument("--report-seeds", action="store_true", help="allow report seeds (to explain, never to choose)")
    replay.set_defaults(design_files=[])  # designs by seed only (the block run and replay share reads it)
    cli.add_threads_argument(replay)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the command; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "list":
        from benchmarks.stream_designs.report import designs_page

        seeds = _seeds(args.seeds, parser)
        titles = {tuple(range_seeds): title for range_seeds, title in SEED_RANGES.values()}
        title = titles.get(tuple(seeds), "Stream designs")
        command = " ".join(["--seeds", *args.seeds] + ([] if args.out is None else ["--out", str(args.out)]))
        text = designs_page(seeds, title, command)
        if args.out is None:
            print(text, end="")
        else:
            Path(args.out).write_text(text)
        return 0
    if args.command == "show":
        print(json.dumps(draw_design(args.seed), indent=1))
        return 0
    if args.command == "report":
        from benchmarks.stream_designs.report import write_report

        print(write_report(Path(args.out), args.to, recommended=args.recommended, head=args.head, paper=args.paper))
        return 0
    seeds = _seeds(args.seeds, parser)
    designs = [draw_design(seed) for seed in seeds] + [_design_file(path, parser) for path in args.design_files]
    if not designs:
        parser.error("the run command needs --seeds or --design-files")
    reported = sorted({d["seed"] for d in designs} & {seed for seeds in REPORT_RANGES for seed in seeds})
    if reported and not args.report_seeds:
        parser.error(f"argument --seeds: {reported} are report seeds, kept for the report alone; tune on "
                     "--seeds validation, or pass --report-seeds for the report's runs")
    if args.command == "replay":
        from benchmarks.stream_designs.replay import load_replays, replay_design, replay_table

        threads = cli.set_threads(args.threads)
        print(f"torch threads: {threads}; designs {[d['seed'] for d in designs]}; rules {args.rules}", flush=True)
        for design in designs:
            replay_design(design, args.rules, Path(args.out), data_root=args.data_root,
                          fashion_root=args.fashion_root, e0_dir=args.e0_dir, log=lambda line: print(line, flush=True))
        table = replay_table({s: r for s, r in load_replays(Path(args.out)).items()
                              if s in {d["seed"] for d in designs}}, args.rules)
        (Path(args.out) / "replays.md").write_text(table)
        print(table, end="")
        return 0
    from benchmarks.stream_designs.runner import METHODS, run_designs

    methods = dict(METHODS, **_method_keywords(args.method_keywords, parser))
    names = args.methods or list(methods)
    unknown = [n for n in names if n not in methods]
    if unknown:
        parser.error(f"argument --methods: unknown {unknown}; the methods are {sorted(methods)} "
                     "(define others with --method-keywords NAME=JSON)")
    threads = cli.set_threads(args.threads)
    print(f"torch threads: {threads}; designs {[d['seed'] for d in designs]}; methods {names}", flush=True)
    run_designs(designs, {n: methods[n] for n in names}, Path(args.out), data_root=args.data_root,
                fashion_root=args.fashion_root, e0_dir=args.e0_dir, training_seed_offset=args.training_seed_offset,
                seed_each_task=args.seed_each_task, log=lambda line: print(line, flush=True))
    return 0


if __name__ == "__main__":
    cli.run_cli(main)
