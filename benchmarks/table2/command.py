"""Reproduce the layout of the paper's Table 2: SDR against Avalanche's strategies.

Every method of :mod:`benchmarks.table2.methods` runs on the SAME mixed stream (same seed, same
train/test data) from the SAME pretrained E0, one run per (method, seed), in a process
pool or on Ray, each run's JSON written as it finishes (a rerun skips it); then
``table2.md`` (mean ± sample std over seeds), ``runs.csv``, ``runs.json`` and figures.
Beside the methods' own rows: ``--protocol paper``, ``--sweep``, ``--reuse``,
``--equal-memory`` and ``--tune`` (validation-stream tuning of the baselines,
:mod:`benchmarks.table2.tuning`). The rows ``sdr_paper`` and ``sdr_recommended`` are the
library's method presets exactly (``SDRStrategy.from_benchmark(..., method=NAME)``). What
each run measures and each file holds: docs/reproducing.rst. This module is the command
line (``python -m benchmarks.table2`` runs it); the engine is the rest of
:mod:`benchmarks.table2`.

    python -m benchmarks.table2 --stream digits --preset smoke --seeds 0 --out results/table2
    python -m benchmarks.table2 --stream digits --preset smoke --seeds 0 1 2 --jobs 2 --out results/table2
    python -m benchmarks.table2 --stream digits --preset smoke --seeds 0 --methods ewc replay --tune --out results/tuned
    python -m benchmarks.table2 --preset smoke --methods sdr_paper sdr_recommended replay --out results/methods
    python -m benchmarks.table2 --preset smoke --methods optimal replay --reuse head accumulate --out results/reuse
    python -m benchmarks.table2 --preset smoke --methods sdr_two_sample_nogen replay --reuse head accumulate \
        --tune --equal-memory sdr_two_sample_nogen sdr_two_sample_nogen:accumulate --out results/equal
"""
from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any, Dict, Optional, Sequence, Tuple

from avalanche_sdr import cli
from benchmarks.table2 import catalogue
from benchmarks.table2.specs import (E0_REFERENCES, RunSpec, pending_runs, referenced_variant, run_id,
                                     split_reference)
from benchmarks.table2.tuning import TUNING_GRIDS, tunable, tuned_options
from benchmarks.table2.variants import (UPDATE_FLAGS, UPDATE_KEYWORDS, UPDATE_VARIANT_WORDS, equal_memory_rows,
                                       harness_variant_rows, parse_update_option, value_word)

# --------------------------------------------------------------------- command line
# Names from benchmarks.table2.catalogue: --help and usage errors come before torch is imported.
_PRESET_HELP = {
    "smoke": "a few epochs per task and method, capped task sizes: checks that a stream and every "
             "method run (not a result)",
    "cpu": "CPU_SETTINGS (the library's budget \"cpu\") and capped task sizes: the tables in docs/results",
    "paper": "the paper's epochs (supplementary A.1) and the streams' full task sizes; meant for a GPU",
}


def _stream_data(name: str) -> str:
    """Where a harness stream's data come from (for --help)."""
    if name == "digits":
        return "scikit-learn's bundled digits (offline, nothing to get)"
    if name == "emnist100":
        return ("EMNIST bymerge in --data-root (EMNIST/raw/emnist-bymerge-*-ubyte); "
                "E0 = --backbone-weights resnet20-*.th")
    if name == "cifar10":
        return ("CIFAR-10 in --data-root (cifar-10-batches-py/, python-version layout); "
                "E0 = the small CNN pretrained on the warm-start tasks, not the CIFAR-10 ResNets")
    return "Fashion-MNIST in --data-root (default: the Debian package's folder)"


def _epilog() -> str:
    """The ``--help`` text after the options: the names each option accepts."""
    lines = ["streams (--stream):"]
    lines += [f"  {name:<16} {spec.label}: {_stream_data(name)}" for name, spec in sorted(catalogue.STREAMS.items())]
    lines += ["", "presets (--preset):"]
    lines += [f"  {name:<16} {_PRESET_HELP.get(name, '')}" for name in catalogue.PRESETS]
    lines += ["", "methods (--methods; default: all of them but the library's method presets, the last rows):"]
    lines += [f"  {name:<21} {method.label}" for name, method in catalogue.METHODS.items()]
    lines += ["", "reuse (--reuse; the SDR rows but the library's method presets, which keep their own):",
              f"  {'head':<21} the paper's: a repeat trains a new head on the reused entry, which stays frozen",
              f"  {'accumulate':<21} learning reuse: a repeat keeps training the reused entry and its one head",
              f"  {'no_loss':<21} head-only, then an update of the entry kept only where held-out images show no loss"]
    lines += ["", "the learning reuse's updates (accumulate rows only; default: the library's defaults):",
              f"  {'--update-balance':<21} when_shifted (default): class-balanced updates, but the plain one for a "
              "repeat",
              f"  {'':<21} whose class counts match its entry's creating task's and equal counts; always: every",
              f"  {'':<21} update balanced; off: none",
              f"  {'--update-rollback':<21} on (default): undo an update that lowers the entry's held-out accuracy; "
              "off",
              f"  {'--update-early-stop':<21} on: stop once a held-out share of the repeat stops improving; off "
              "(default)",
              f"  {'--update-epochs':<21} epochs of each update (LearningReuse(epochs=...); default: the preset's "
              "reuse_epochs)",
              f"  {'--update-top-layers':<21} an update trains only the last K adapted convolutions of its entry and "
              "the",
              f"  {'':<21} BatchNorm copies after them (LearningReuse(top_layers=K)); default: the whole entry",
              f"  {'--update-replay-every':<21} the guard's replay joins one update mini-batch in K "
              "(LearningReuse(replay_every=K));",
              f"  {'':<21} default 1: every mini-batch",
              f"  {'--update-option':<21} any other LearningReuse keyword, KEYWORD=VALUE (e.g. lr=0.0005); the "
              "library",
              f"  {'':<21} checks it, so a new option of the learning reuse needs no new flag"]
    lines += ["", "equal-memory rows (--equal-memory REF; REF: METHOD, or METHOD:VARIANT for a variant row of",
              "this call, e.g. sdr_two_sample_nogen:accumulate with --reuse head accumulate):",
              f"  {'mem_REF':<21} ER, buffer sized so that its memory meets REF's run on the same seed (REF's",
              f"  {'':<21} ':' written '_': mem_sdr_two_sample_nogen_accumulate); a task-free REF: ci_replay",
              f"  {'mem_REF_paper':<21} the same under --protocol paper",
              f"  {'mem_REF_tuned':<21} with --tune, where ER (replay) is tuned: ER with its [tuned] values, the",
              f"  {'':<21} buffer sized the same way (not for a task-free REF)"]
    lines += ["", "Data: docs/reproducing.rst (the data set-up). Results: docs/results/."]
    return "\n".join(lines)


def _reference(text: str) -> str:
    """argparse type of ``--equal-memory``: ``METHOD`` or ``METHOD:VARIANT``."""
    method, colon, variant = text.partition(":")
    if method not in catalogue.METHODS:
        raise argparse.ArgumentTypeError(f"invalid method {method!r} in {text!r} (choose from "
                                         f"{', '.join(catalogue.METHODS)}; a variant row: METHOD:VARIANT)")
    if colon and (not variant or not all(c.isalnum() or c == "_" for c in variant)):
        raise argparse.ArgumentTypeError(f"{text!r}: after ':' comes a row's variant name, e.g. "
                                         f"{method}:accumulate")
    return text


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """The harness's arguments, checked: usage errors exit with code 2 (argparse) before
    torch is imported."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.table2", description=cli.description(__doc__),
                                     epilog=_epilog(),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stream", choices=sorted(catalogue.STREAMS), default="digits", metavar="STREAM",
                        help="the mixed stream every method runs on (default digits; list below)")
    parser.add_argument("--preset", choices=catalogue.PRESETS, default="smoke",
                        help="training budget of every method: smoke (default), cpu or paper (see below)")
    parser.add_argument("--methods", nargs="+", choices=list(catalogue.METHODS), default=None, metavar="METHOD",
                        help="the rows of the table, one run per method and seed (default: all but sdr_paper and "
                        "sdr_recommended, the library's method presets SDRStrategy(method=NAME) exactly; list below)")
    parser.add_argument("--seeds", nargs="+", type=cli.seed, default=[0], metavar="SEED",
                        help="seeds, one stream order and one E0 each (default: 0); the table gives mean ± std")
    parser.add_argument("--jobs", type=cli.positive_int, default=1, metavar="N",
                        help="runs executed at once by the local executor (worker processes; default 1)")
    parser.add_argument("--executor", choices=("local", "ray"), default="local",
                        help="local: a process pool (default); ray: Ray tasks (pip install 'avalanche-sdr[ray]')")
    parser.add_argument("--ray-address", default=None, metavar="ADDR",
                        help="Ray cluster to connect to, e.g. auto (default: start a local Ray instance)")
    parser.add_argument(
        "--threads", type=cli.non_negative_int, default=1, metavar="N",
        help="torch threads per run (0: cpu_count // jobs). Default 1: these models are small, and on "
        "a CPU several threads per run mostly wait for each other, the more so on a busy machine",
    )
    parser.add_argument("--device", default="cpu",
                        help="torch device of every run: cpu (default), cuda, cuda:1, ...")
    parser.add_argument("--data-root", type=cli.existing_dir, default=None, metavar="DIR",
                        help="dataset folder (emnist100: required, holds EMNIST/raw/emnist-bymerge-*-ubyte; "
                        "cifar10: required, holds cifar-10-batches-py/; "
                        "fashion streams: default /usr/share/datasets/fashion-mnist; digits: not used)")
    parser.add_argument("--backbone-weights", type=cli.existing_file, default=None, metavar="FILE",
                        help="E0 checkpoint for streams whose E0 is a CIFAR-10 ResNet-20 (emnist100: "
                        "resnet20-*.th from He et al.'s CIFAR ResNets)")
    parser.add_argument("--e0-references", choices=E0_REFERENCES, default="all",
                        help="what E0 is pretrained on, for streams whose E0 is pretrained on the warm-start tasks: "
                        "all (default, every committed run's E0) every warm-start training image; held_out the "
                        "library's default flow (pretrain_backbone holds half of each warm-start class out as the "
                        "two-sample references of method='recommended' and records it on E0; its own E0 file, "
                        "backbones/*_heldout.pt)")
    parser.add_argument("--out", type=cli.output_dir, default="results/table2", metavar="DIR",
                        help="output folder: runs/, backbones/, table2.md, runs.csv, runs.json, plots/ "
                        "(default results/table2); runs already there are skipped")
    parser.add_argument("--no-plots", action="store_true", help="skip the figures in OUT/plots")
    parser.add_argument("--report-only", action="store_true",
                        help="run nothing: write the table of the runs already in --out (those of "
                        "--methods and --seeds)")
    parser.add_argument("--tune", action="store_true",
                        help="first choose the open baseline hyper-parameters (benchmarks/table2/tuning.py: EWC "
                        "lambda and decay, ER lr and epochs, DGR generator size) of --methods from a fixed "
                        "grid by validation-stream accuracy on the tuning seed (never the test stream; "
                        "OUT/tuning/, resumable), then add a '[tuned]' row per tuned method on every seed; "
                        "grids, scores and choices go in table2.md's notes")
    parser.add_argument("--tune-seed", type=cli.seed, default=None, metavar="SEED",
                        help="the one seed --tune runs its grid on (default: the first of --seeds)")
    parser.add_argument("--tune-extend", type=cli.non_negative_int, default=None, metavar="N",
                        help="--tune: where the best grid point sits at an axis' smallest or largest value, add "
                        "one value beyond that edge (the axis' step, within its bounds), run its points and "
                        "choose again; at most N values per axis (default 2; 0: the fixed grid only)")
    parser.add_argument("--tune-tasks", type=cli.positive_int, default=None, metavar="K",
                        help="--tune: tuning runs train on the first K experiences of the stream and are scored "
                        "on the first K of its validation stream (default: the whole stream); the [tuned] rows "
                        "still run on the whole stream")
    parser.add_argument("--tuned-only", action="store_true",
                        help="--tune: of each tuned method run and report only the [tuned] rows (and ER at a "
                        "reference's memory only with its tuned values): not the rows with the preset's values, "
                        "e.g. for more seeds once the comparison with the preset was made")
    parser.add_argument("--protocol", nargs="+", choices=("ours", "paper"), default=["ours"],
                        help="baseline protocol(s): ours (default: EWC and ER with one head per task) and/or "
                        "paper (EWC and ER on one shared head over local labels, variant 'paper', as "
                        "docs/reproducing.rst infers from the paper); '--protocol ours paper' gives both rows")
    parser.add_argument("--reuse", nargs="+", choices=catalogue.REUSES, default=None,
                        help="what a detected repeat trains in every SDR row of --methods (list below): head "
                        "(default), accumulate and/or no_loss (variant rows 'accumulate', 'no_loss'); '--reuse head accumulate' gives "
                        "both rows; other methods, and the library's method presets (sdr_paper, "
                        "sdr_recommended), are unaffected")
    for name in UPDATE_FLAGS:  # --update-balance, --update-rollback, --update-early-stop, --update-epochs, ...
        parser.add_argument(_update_flag(name), choices=["default"] + list(UPDATE_FLAGS[name]), default="default",
                            dest=name,
                            help=f"the learning reuse's {name} (LearningReuse({UPDATE_KEYWORDS[name]}=...); list below) in every "
                            "accumulate row; a value other than default renames the row (variant "
                            f"accumulate_{UPDATE_VARIANT_WORDS[name]}_VALUE) and is recorded in its run's options "
                            "and config (default: the library's default)")
    parser.add_argument("--update-option", nargs="+", default=[], metavar="KEYWORD=VALUE", dest="update_option",
                        help="any other option of the learning reuse, LearningReuse(KEYWORD=VALUE), in every "
                        "accumulate row (VALUE read as JSON, else as text: lr=0.0005 guard_exemplars=10); each renames "
                        "the row (variant accumulate_KEYWORD_VALUE) and is recorded in its run's options and config. "
                        "A keyword with its own flag above takes that flag")
    parser.add_argument("--sweep", action="store_true",
                        help="add memory-knob variants: ER with replay_per_class 2 5 20 50 (pc2 ...) and every "
                        "SDR row with EFT (a, b) = (4, 8), (16, 32) (a4b8 ...); the figure joins them as curves")
    parser.add_argument("--equal-memory", nargs="+", type=_reference, default=[], metavar="REF",
                        help="after the other runs, add ER rows (variant mem_REF) whose buffer is sized so that "
                        "ER's memory meets REF's run on the same seed (REF a row of this call: a method of "
                        "--methods, e.g. sdr_two_sample_nogen optimal, or METHOD:VARIANT for one of its variant rows, "
                        "e.g. sdr_two_sample_nogen:accumulate with --reuse head accumulate, row mem_sdr_two_sample_"
                        "nogen_accumulate; a task-free REF, e.g. sdr_task_free, gets one class-incremental "
                        "ER row, ci_replay, sized to REF's memory with the state of SDR's recommended router "
                        "only); with --tune and ER tuned, also ER with its tuned values at that memory "
                        "(mem_REF_tuned); sizes and measured "
                        "memory in OUT/equal_memory.json (--report-only sizes again, without training, from "
                        "OUT/backbones and the stream's data)")
    cli.add_debug_argument(parser)
    args = parser.parse_args(argv)
    _check_rows(parser, args)
    if args.equal_memory:  # each reference must be a row of this call
        rows = harness_variant_rows(args)
        for ref in args.equal_memory:
            method, variant = split_reference(ref)
            if any(r.method == method and r.variant == variant for r in rows):
                continue
            names = [f"{method}:{r.variant}" if r.variant else method for r in rows if r.method == method]
            parser.error(f"--equal-memory {ref}: not a row of this call (--protocol, --sweep and --reuse "
                         f"give {method} the rows {', '.join(names)}; a variant row is named METHOD:VARIANT)")
        made: Dict[Tuple[str, str], str] = {}
        for ref in args.equal_memory:
            for row in equal_memory_rows(split_reference(ref)[0], args.protocol):
                key = (row.method, referenced_variant(ref, row.variant))
                if key in made:
                    parser.error(f"--equal-memory {made[key]} {ref}: both give the row {key[0]} [{key[1]}]")
                made[key] = ref
    for option in ("tune_seed", "tune_extend", "tune_tasks", "tuned_only"):
        if getattr(args, option) not in (None, False) and not args.tune:
            parser.error(f"--{option.replace('_', '-')} needs --tune")
    if args.tune:
        if not tunable(args.methods):
            parser.error(f"--tune: none of --methods has a tuning grid ({', '.join(TUNING_GRIDS)})")
    if not args.report_only:
        stream = catalogue.STREAMS[args.stream]
        if stream.needs_data_root and not args.data_root:
            parser.error(f"--stream {args.stream} needs --data-root ({_stream_data(args.stream)})")
        if stream.backbone == "cifar_resnet20" and not args.backbone_weights:
            parser.error(f"--stream {args.stream} needs --backbone-weights (a CIFAR-10 resnet20-*.th file)")
    if args.e0_references == "held_out" and catalogue.STREAMS[args.stream].backbone == "cifar_resnet20":
        parser.error(f"--e0-references held_out: E0 of --stream {args.stream} is a CIFAR-10 ResNet-20, not "
                     "pretrained on the stream: there are no warm-start images to hold out (drop the flag)")
        cli.check_device(parser, args.device)
    return args


def _update_keywords(parser: argparse.ArgumentParser, texts: Sequence[str], flags: Dict[str, str]) -> Dict[str, Any]:
    """``--update-option``'s ``KEYWORD=VALUE`` words as ``{keyword: value}``, checked before any
    work: each keyword once, none that has its own flag (:data:`UPDATE_KEYWORDS`: one way to set
    an option, one row name), and the whole set with the call's update flags ``flags`` (option
    name -> flag word) accepted by ``LearningReuse`` (its own checks: an unknown keyword, a
    refused value or a refused combination exits with its message, code 2)."""
    keywords: Dict[str, Any] = {}
    flagged = {keyword: name for name, keyword in UPDATE_KEYWORDS.items()}
    for text in texts:
        try:
            keyword, value = parse_update_option(text)
            value_word(value)
        except ValueError as err:
            parser.error(f"--update-option: {err}")
        if keyword in flagged:
            parser.error(f"--update-option {text}: {keyword} has its own flag, {_update_flag(flagged[keyword])}; "
                         "use it")
        if keyword in keywords:
            parser.error(f"--update-option: {keyword} given twice")
        keywords[keyword] = value
    if keywords:
        from avalanche_sdr.training import make_reuse

        try:
            make_reuse(dict(keywords, name="accumulate",
                            **{UPDATE_KEYWORDS[n]: UPDATE_FLAGS[n][w] for n, w in flags.items()}))
        except (TypeError, ValueError) as err:
            parser.error(f"--update-option: {err}")
    return keywords


def _update_flag(name: str) -> str:
    """The command-line flag of update option ``name``: ``update_early_stop`` -> ``--update-early-stop``."""
    return "--" + name.replace("_", "-")


def _check_rows(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Resolve the defaults of ``--methods`` and ``--reuse``; refuse (exit code 2) an option
    that would not act on any row of the call, and an ``--equal-memory`` reference that is
    not one of its methods."""
    if args.methods is None:
        args.methods = list(catalogue.DEFAULT_METHODS)
    if args.reuse is not None and not any(catalogue.METHODS[m].takes_reuse for m in args.methods):
        parser.error("--reuse: no SDR row in --methods to apply it to (the library's method presets sdr_paper and "
                     "sdr_recommended keep their own reuse)")
    args.reuse = args.reuse or [catalogue.REUSES[0]]
    args.update_options = {name: getattr(args, name) for name in UPDATE_FLAGS
                           if getattr(args, name, "default") != "default"}
    args.update_keywords = _update_keywords(parser, getattr(args, "update_option", []), args.update_options)
    if (args.update_options or args.update_keywords) and not any(
            dict(r.options).get("reuse") == "accumulate"
            for r in harness_variant_rows(argparse.Namespace(**dict(vars(args), update_options=None,
                                                                  update_keywords=None)))):
        flags = " ".join([f"{_update_flag(n)} {v}" for n, v in args.update_options.items()]
                         + [f"--update-option {k}={json.dumps(v)}" for k, v in args.update_keywords.items()])
        parser.error(f"{flags}: no learning-reuse row in this call to apply it to (add --reuse accumulate; the "
                     "library's method preset sdr_recommended keeps its own update options)")
    if args.sweep and not any(m in catalogue.SWEPT_BASELINES or catalogue.METHODS[m].is_sdr for m in args.methods):
        parser.error("--sweep: none of --methods has memory-knob variants (replay and the SDR rows have)")
    missing = [ref for ref in args.equal_memory if split_reference(ref)[0] not in args.methods]
    if missing:
        parser.error(f"--equal-memory {' '.join(missing)}: a reference must also be in --methods")


def main(args: argparse.Namespace) -> str:
    """Run the call ``args`` (:func:`parse_args`): E0 per seed, the first phase's runs,
    ``--equal-memory``'s sized runs, then the report; with ``--report-only``, the report
    of the runs already in ``--out``. Return the Markdown table.

    :raises SystemExit: a run failed (no JSON), or ``--report-only`` found no run.
    """
    # The engine imports torch and Avalanche: only now that the arguments are checked.
    from benchmarks.table2.engine import prepare_backbone
    from benchmarks.table2.executors import load_runs, run_all
    from benchmarks.table2.report import pareto_lines, write_outputs, write_plots
    from benchmarks.table2.equal_memory import equal_memory_ids, equal_memory_report, equal_memory_specs
    from benchmarks.table2.tuning_runs import harness_tune

    start = time.perf_counter()
    out = Path(args.out)
    threads = args.threads or max(1, (os.cpu_count() or 1) // args.jobs)
    header = (f"# Table 2 layout: {catalogue.STREAMS[args.stream].label}, preset `{args.preset}`\n\n"
              f"Mean ± sample std over seeds {' '.join(map(str, args.seeds))}.\n\n")
    tuned, notes = {}, ""  # --tune: method -> chosen values (benchmarks.table2.tuning), table2.md's notes
    if args.tune:
        tuned, notes = harness_tune(args, out, threads)
    if args.report_only:
        ids = [run_id(args.stream, args.preset, r.method, s, r.variant) for s in args.seeds
               for r in harness_variant_rows(args, tuned)]
        ids += [run_id(args.stream, args.preset, m, s, "tuned") for s in args.seeds for m in tuned]
        ids += [i for s in args.seeds for i in equal_memory_ids(args, s, tuned)]
        runs = load_runs(out / "runs", ids)
        if not runs:
            raise SystemExit(f"no finished runs of these methods and seeds in {out / 'runs'}")
        sizing_lines = ""
        if args.equal_memory:  # the sizing again (no training, no E0 made): OUT/equal_memory.json
            _, sizings = equal_memory_specs(args, out, threads, log=None, tuned=tuned, pretrain=False)
            sizing_lines = equal_memory_report(sizings, out) + "\n"
        table = write_outputs(runs, out, header, notes)
        if not args.no_plots:
            write_plots(runs, out)
        print(table)
        print(sizing_lines + pareto_lines(runs))
        return table
    specs = []
    for seed in args.seeds:
        rows = harness_variant_rows(args, tuned)
        ids = [run_id(args.stream, args.preset, r.method, seed, r.variant) for r in rows]
        ids += [run_id(args.stream, args.preset, m, seed, "tuned") for m in tuned]
        if all((out / "runs" / f"{i}.json").exists() for i in ids):
            backbone = ""
        else:
            backbone = prepare_backbone(args.stream, args.preset, seed, out, device=args.device,
                                        data_root=args.data_root, weights=args.backbone_weights,
                                        references=args.e0_references)
        specs += [RunSpec(args.stream, args.preset, r.method, seed, backbone, args.device, threads, args.data_root,
                          variant=r.variant, options=r.options) for r in rows]
        specs += [RunSpec(args.stream, args.preset, m, seed, backbone, args.device, threads, args.data_root,
                          variant="tuned", options=tuned_options(entry)) for m, entry in tuned.items()]
    runs = run_all(specs, out, jobs=args.jobs, executor=args.executor, ray_address=args.ray_address)
    sizing_lines = ""
    if args.equal_memory:  # second phase: ER sized to the memory of the reference runs just finished
        more, sizings = equal_memory_specs(args, out, threads, tuned=tuned)
        specs += more
        runs += run_all(more, out, jobs=args.jobs, executor=args.executor, ray_address=args.ray_address)
        sizing_lines = equal_memory_report(sizings, out) + "\n"
    table = write_outputs(runs, out, header, notes)
    if runs and not args.no_plots:
        write_plots(runs, out)
    print(table)
    print(sizing_lines + pareto_lines(runs))
    print(f"total wall time {time.perf_counter() - start:.1f}s; wrote {out / 'table2.md'}, "
          f"{out / 'runs.csv'}, {out / 'runs.json'}")
    failed = pending_runs(specs, out / "runs")
    if failed:
        raise SystemExit(f"{len(failed)} run(s) failed (no JSON): {', '.join(s.run_id for s in failed)}")
    return table


__all__ = ["main", "parse_args"]
