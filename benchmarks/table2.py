"""Reproduce the layout of the paper's Table 2: SDR against Avalanche's strategies.

Every method of :mod:`benchmarks.methods` runs on the SAME mixed stream (same seed,
same train/test data) starting from the SAME pretrained E0: a
``small_cnn_backbone(widths=(32, 64, 128))`` trained on the 3 warm-start tasks'
training data (option (b) of docs/method.rst, "E0 without ImageNet weights"),
pretrained once per seed by this process and saved under ``OUT/backbones/``; every
run loads it.

One run = one (method, seed). Runs are independent jobs executed by a local
``ProcessPoolExecutor`` (``--jobs N``, spawn context; each worker uses ``--threads``
torch threads, default 1: see ``--help``) or, with ``--executor ray``, as Ray tasks
(``--ray-address`` of a cluster, default a local Ray instance; optional extra
``ray``). Each finished run is written to
``OUT/runs/<stream>_<preset>_<method>_seed<k>.json`` atomically (temp file +
``os.replace``, :func:`avalanche_sdr.cli.write_json`) by the harness process; rerunning with the same ``--out`` skips runs
whose JSON exists. A line is printed per finished run, under a tqdm bar over runs.

Measured the same way for every method:

- accuracy: after the last training task, ``strategy.eval(test_stream)`` with
  Avalanche ``accuracy_metrics(experience=True)``; the mean over tasks (task-aware);
- memory: ``avalanche_sdr.evaluation.repository_memory_bytes(strategy)`` / 2**20 after
  the last task;
- wall time: seconds from building the strategy to the end of the final evaluation
  (E0 pretraining excluded: it is shared; the base VAE of ``sdr_eft_g``, pretrained by
  its builder, included; the group evaluations below included, and also reported alone
  as ``evaluation_seconds``);
- backward transfer: after each training experience i, of group g,
  ``strategy.eval`` of the test experiences of group g's tasks trained so far
  (:func:`avalanche_sdr.training.stream_runner.evaluate_group`; the global RNGs are
  put back afterwards, so training is unchanged). The run JSON keeps this
  ``group_curve`` (one entry per experience: ``task``, ``group``, ``times_seen``,
  ``group_accuracy_after``, ``initial_accuracy``, ``evaluated``, ``accuracies``) and
  ``bwt`` (mean over every task but the last of final - initial accuracy, 0-1;
  positive: earlier tasks improved; the table's ``BWT`` column in accuracy points),
  ``forgetting`` (mean of best group-evaluation accuracy - final accuracy) and
  ``avalanche_bwt``, Avalanche's ``StreamBWT`` of ``bwt_metrics(stream=True)`` after
  the final evaluation (same sign and value as ``bwt``). Not measured (``None``) for
  ``joint`` (trained once on the whole stream) and tuning runs.

SDR rows also record Correct / Miss / Incorrect over the scored (non-warm-start)
tasks, from :func:`avalanche_sdr.training.stream_runner.run_sdr_stream`.

Outputs in ``OUT``: ``table2.md`` (mean ± sample std over seeds), ``runs.csv`` (one row
per run) and ``runs.json`` (all run dicts); ``runs/*.json`` per run; ``plots/``
(:func:`write_plots`: accuracy against memory per row, a curve per method with a memory
knob, the Pareto front ringed; ``group_curve.png``, accuracy on one group's tasks against
the times the group was seen; and every SDR run's figures).
``--report-only`` rewrites these from the runs already in ``OUT`` without running.

Rows beside the methods' own (:mod:`benchmarks.methods`, "variants"; each a row of its
own, run id ``<stream>_<preset>_<method>_<variant>_seed<k>``): ``--protocol paper``
builds Online EWC and ER on one shared head over local labels (variant ``paper``; ``--protocol
ours paper`` gives both; docs/reproducing.rst, "The paper's protocol"); ``--sweep`` adds
ER's ``pc2``, ``pc5``, ``pc20``, ``pc50`` (exemplars per class) and every SDR row's
``a4b8``, ``a16b32`` (EFT sizes); ``--reuse head accumulate`` adds to every SDR row its
learning-reuse variant ``accumulate`` (``SDRSettings(reuse="accumulate")``, builder option
``reuse``; with ``--sweep`` also ``a4b8_accumulate`` ...; ``--reuse accumulate`` alone
runs the SDR rows with it only); ``--equal-memory REF ...`` runs, after the others, ER
with its buffer sized so that its memory meets REF's run on the same seed (variant
``mem_REF``, ``mem_REF_paper`` under ``--protocol paper``, :func:`equal_memory_specs`;
targets, sizes and measured memory in ``OUT/equal_memory.json``, which ``--report-only``
writes again from a new sizing without training; a target below ER's model alone is
recorded ``infeasible`` and not run). REF is a row of the call: a method (its own row, e.g.
``sdr_two_sample_nogen``, the head-only SDR run) or ``METHOD:VARIANT`` for one of its
variant rows (``sdr_two_sample_nogen:accumulate``, the run
``<stream>_<preset>_sdr_two_sample_nogen_accumulate_seed<k>``; ER row
``mem_sdr_two_sample_nogen_accumulate``). With ``--tune`` and ER (``replay``) tuned, each
REF that is not task-free also gets ER with its ``[tuned]`` values at that memory (variant
``mem_REF_tuned``, e.g. "ER [mem_sdr_two_sample_nogen_tuned]": the tuned options and the
buffer sized as ``mem_REF``'s). The harness prints the rows on the accuracy-memory Pareto
front (:func:`pareto_front`).

Task-free rows (issue #15, :attr:`benchmarks.methods.Method.task_free`: ``sdr_task_free``,
``ci_replay``, ``ci_ewc``, ``joint``) run on the same stream with the dataset's original
class ids (the same E0, pretrained on the default stream). Their run JSONs add
``"task_free"``: ``{router or "oracle": {"task_free", "routing"}}`` for SDR (routers of
:mod:`avalanche_sdr.models.routing`, :class:`~avalanche_sdr.evaluation.TaskFreeMetrics`)
with ``"router_memory_mb"`` (each router's state, included in ``memory_mb``), and
``{"self": {"task_free": average_accuracy, "routing": None}}`` for the class-incremental
baselines (one head over the class ids; ``joint`` is trained once on the whole stream).
``--equal-memory sdr_task_free`` adds ``ci_replay`` (variant ``mem_sdr_task_free``) sized
to SDR's memory with the state of its recommended router only
(:data:`benchmarks.methods.SDR_ROUTER`). ``python -m benchmarks.task_free`` writes their
table.

``--tune`` (:mod:`benchmarks.tuning`) first chooses the baselines' open hyper-parameters
(EWC lambda and decay, ER learning rate and epochs, DGR's generator size) of the
``--methods`` that have a grid, per stream, by mean accuracy on the benchmark's
``valid_stream`` (never the test stream) on one seed (``--tune-seed``, default the first
of ``--seeds``): tuning runs go through the same executor to ``OUT/tuning/`` and resume
like runs. Where the best point sits at a grid's edge, values beyond it are added and
run (``--tune-extend N``, default 2 per axis; 0: the fixed grid); ``--tune-tasks K``
tunes on the first K tasks of the stream only. Each tuned method then gets a
``[tuned]`` row (variant ``tuned``, the chosen values) on every seed beside its default
row (with ``--equal-memory``, ER's also at each reference's memory, ``mem_REF_tuned``;
``--tuned-only``: the ``[tuned]`` rows alone, for more seeds once a comparison with the
preset's values was made), and ``table2.md`` ends with a section
"Tuning (validation stream only)": grid, values added, every point's validation score,
the chosen values, the tuning seed. With ``--report-only`` it re-writes that section from
``OUT/tuning/`` without running.

Arguments, the stream's data and weights options and ``--out`` are checked before
anything runs (exit code 2); missing data prints one message (exit code 1;
``--debug`` shows the traceback).

    python -m benchmarks.table2 --stream digits --preset smoke --seeds 0 --out results/table2
    python -m benchmarks.table2 --stream digits --preset smoke --seeds 0 1 2 --jobs 2 --out results/table2
    python -m benchmarks.table2 --stream digits --preset smoke --seeds 0 --methods ewc replay --tune --out results/tuned
    python -m benchmarks.table2 --preset smoke --methods optimal replay --reuse head accumulate --out results/reuse
    python -m benchmarks.table2 --preset smoke --methods sdr_two_sample_nogen replay --reuse head accumulate \
        --tune --equal-memory sdr_two_sample_nogen sdr_two_sample_nogen:accumulate --out results/equal
"""
from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import math
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

from avalanche_sdr import cli
from benchmarks import catalogue

if __name__ in ("__main__", "__mp_main__"):
    # The command (or one of its spawned workers): hide the third-party warnings a user
    # cannot act on before benchmarks.methods imports Avalanche (avalanche_sdr.cli).
    cli.install_warning_filters()


# --------------------------------------------------------------------- command line
# Defined and run before the imports below (torch, Avalanche: seconds and ~700 MB), so
# that --help and usage errors are immediate; names from benchmarks.catalogue.
_PRESET_HELP = {
    "smoke": "a few epochs per task and method, capped task sizes: checks that a stream and every "
             "method run (not a result)",
    "cpu": "CPU_SETTINGS (with the quickstart's head-only budget) and capped task sizes: the tables "
           "in docs/results",
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
    lines = ["streams (--stream):"]
    lines += [f"  {name:<16} {spec.label}: {_stream_data(name)}" for name, spec in sorted(catalogue.STREAMS.items())]
    lines += ["", "presets (--preset):"]
    lines += [f"  {name:<16} {_PRESET_HELP.get(name, '')}" for name in catalogue.PRESETS]
    lines += ["", "methods (--methods; default: all of them):"]
    lines += [f"  {name:<21} {method.label}" for name, method in catalogue.METHODS.items()]
    lines += ["", "reuse (--reuse; SDR rows only):",
              f"  {'head':<21} the paper's: a repeat trains a new head on the reused entry, which stays frozen",
              f"  {'accumulate':<21} learning reuse: a repeat keeps training the reused entry and its one head"]
    lines += ["", "equal-memory rows (--equal-memory REF; REF: METHOD, or METHOD:VARIANT for a variant row of",
              "this call, e.g. sdr_two_sample_nogen:accumulate with --reuse head accumulate):",
              f"  {'mem_REF':<21} ER, buffer sized so that its memory meets REF's run on the same seed (REF's",
              f"  {'':<21} ':' written '_': mem_sdr_two_sample_nogen_accumulate); a task-free REF: ci_replay",
              f"  {'mem_REF_paper':<21} the same under --protocol paper",
              f"  {'mem_REF_tuned':<21} with --tune, where ER (replay) is tuned: ER with its [tuned] values, the",
              f"  {'':<21} buffer sized the same way (not for a task-free REF)"]
    lines += ["", "Data: README.md, section Data. Results: docs/results/."]
    return "\n".join(lines)


def split_reference(ref: str) -> Tuple[str, str]:
    """An ``--equal-memory`` reference's method and variant: ``"sdr"`` -> ``("sdr", "")``,
    ``"sdr_two_sample_nogen:accumulate"`` -> ``("sdr_two_sample_nogen", "accumulate")``
    (the run ``<stream>_<preset>_sdr_two_sample_nogen_accumulate_seed<k>``)."""
    method, _, variant = ref.partition(":")
    return method, variant


def equal_memory_variant(ref: str) -> str:
    """The variant of the ER row sized to ``ref`` (under the ``ours`` protocol): ``mem_<method>``,
    ``mem_<method>_<variant>`` for a variant reference."""
    return "mem_" + "_".join(p for p in split_reference(ref) if p)


def _referenced_variant(ref: str, variant: str) -> str:
    """The variant of an ER row of :func:`benchmarks.methods.equal_memory_rows` of ``ref``'s
    method (``mem_<method>[_<protocol>]``) for ``ref``: ``mem_<method>_<variant>[_<protocol>]``
    for a variant reference, else unchanged."""
    method, ref_variant = split_reference(ref)
    return equal_memory_variant(ref) + variant[len(f"mem_{method}"):] if ref_variant else variant


def tuned_equal_memory_variant(ref: str) -> Optional[str]:
    """The variant of the tuned ER row sized to ``ref`` (``--tune`` with ``replay`` tuned):
    ``mem_<...>_tuned``; ``None`` for a task-free reference (its row is ``ci_replay``, which
    has no tuning grid)."""
    from benchmarks.tuning import TUNED_VARIANT  # plain Python, no torch

    if catalogue.METHODS[split_reference(ref)[0]].task_free:
        return None
    return f"{equal_memory_variant(ref)}_{TUNED_VARIANT}"


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


def parse_args(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.table2", description=cli.description(__doc__),
                                     epilog=_epilog(),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stream", choices=sorted(catalogue.STREAMS), default="digits", metavar="STREAM",
                        help="the mixed stream every method runs on (default digits; list below)")
    parser.add_argument("--preset", choices=catalogue.PRESETS, default="smoke",
                        help="training budget of every method: smoke (default), cpu or paper (see below)")
    parser.add_argument("--methods", nargs="+", choices=list(catalogue.METHODS), default=list(catalogue.METHODS),
                        metavar="METHOD",
                        help="the rows of the table, one run per method and seed (default: all; list below)")
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
    parser.add_argument("--out", type=cli.output_dir, default="results/table2", metavar="DIR",
                        help="output folder: runs/, backbones/, table2.md, runs.csv, runs.json, plots/ "
                        "(default results/table2); runs already there are skipped")
    parser.add_argument("--no-plots", action="store_true", help="skip the figures in OUT/plots")
    parser.add_argument("--report-only", action="store_true",
                        help="run nothing: write the table of the runs already in --out (those of "
                        "--methods and --seeds)")
    parser.add_argument("--tune", action="store_true",
                        help="first choose the open baseline hyper-parameters (benchmarks/tuning.py: EWC "
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
    parser.add_argument("--reuse", nargs="+", choices=catalogue.REUSES, default=["head"],
                        help="what a detected repeat trains in every SDR row (list below): head (default) and/or "
                        "accumulate (variant row 'accumulate'); '--reuse head accumulate' gives both rows; other "
                        "methods are unaffected")
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
    missing = [ref for ref in args.equal_memory if split_reference(ref)[0] not in args.methods]
    if missing:
        parser.error(f"--equal-memory {' '.join(missing)}: a reference must also be in --methods")
    if args.equal_memory:  # each reference must be a row of this call (its variant rows need the methods module)
        from benchmarks.methods import equal_memory_rows as sized_rows
        from benchmarks.methods import harness_rows as rows_of

        rows = rows_of(args.methods, args.protocol, args.sweep, args.reuse)
        for ref in args.equal_memory:
            method, variant = split_reference(ref)
            if any(r.method == method and r.variant == variant for r in rows):
                continue
            names = [f"{method}:{r.variant}" if r.variant else method for r in rows if r.method == method]
            parser.error(f"--equal-memory {ref}: not a row of this call (--protocol, --sweep and --reuse give "
                         f"{method} the rows {', '.join(names)}; a variant row is named METHOD:VARIANT)")
        made: Dict[Tuple[str, str], str] = {}
        for ref in args.equal_memory:
            for row in sized_rows(split_reference(ref)[0], args.protocol):
                key = (row.method, _referenced_variant(ref, row.variant))
                if key in made:
                    parser.error(f"--equal-memory {made[key]} {ref}: both give the row {key[0]} [{key[1]}]")
                made[key] = ref
    for option in ("tune_seed", "tune_extend", "tune_tasks", "tuned_only"):
        if getattr(args, option) not in (None, False) and not args.tune:
            parser.error(f"--{option.replace('_', '-')} needs --tune")
    if args.tune:
        from benchmarks.tuning import TUNING_GRIDS, tunable

        if not tunable(args.methods):
            parser.error(f"--tune: none of --methods has a tuning grid ({', '.join(TUNING_GRIDS)})")
    if not args.report_only:
        stream = catalogue.STREAMS[args.stream]
        if stream.needs_data_root and not args.data_root:
            parser.error(f"--stream {args.stream} needs --data-root ({_stream_data(args.stream)})")
        if stream.backbone == "cifar_resnet20" and not args.backbone_weights:
            parser.error(f"--stream {args.stream} needs --backbone-weights (a CIFAR-10 resnet20-*.th file)")
        cli.check_device(parser, args.device)
    return args


if __name__ == "__main__":
    _ARGS = parse_args()  # --help and usage errors (exit code 2) end the command here

from avalanche_sdr.evaluation.memory import BYTES_PER_MB  # noqa: E402
from benchmarks.methods import METHODS, PRESETS, STREAMS  # noqa: E402  (after the filters)
from benchmarks.methods import MEMORY_KNOBS, PROTOCOLS, equal_memory_rows, harness_rows, size_equal_memory  # noqa: E402
from benchmarks.methods import Row  # noqa: E402
from avalanche_sdr.vocabulary import REUSE_MODES, ROUTER_LDA_WEIGHTED  # noqa: E402
from benchmarks.methods import REUSE_DEFAULT, SDR_ROUTER, row_reuse  # noqa: E402


@dataclass(frozen=True)
class RunSpec:
    """One job: a method on a stream with a preset and a seed.

    ``variant`` names a run whose method gets ``options`` (``(name, value)`` pairs handed
    to the method's builder: a baseline's :class:`~avalanche_sdr.baselines.BaselineSettings`
    fields, SDR's EFT ``a`` / ``b``); ``""`` with no options is the method as the
    preset defines it. A variant is a row of its own in the table. ``split`` is the
    stream the run is scored on: ``"test"`` (every table row) or ``"valid"`` (a tuning run
    of :mod:`benchmarks.tuning`; baselines only; ``test_stream`` is never read). ``tasks``
    (tuning runs only): train on the first ``tasks`` experiences of ``train_stream`` and
    score the first ``tasks`` of the validation stream; ``None``: the whole stream.
    """

    stream: str
    preset: str
    method: str
    seed: int
    backbone_path: str
    device: str = "cpu"
    threads: int = 0
    data_root: Optional[str] = None
    variant: str = ""
    options: Tuple[Tuple[str, Any], ...] = ()
    split: str = "test"
    tasks: Optional[int] = None

    @property
    def run_id(self) -> str:
        return run_id(self.stream, self.preset, self.method, self.seed, self.variant)


def run_id(stream: str, preset: str, method: str, seed: int, variant: str = "") -> str:
    """File stem of a run's JSON."""
    return f"{stream}_{preset}_{method}{'_' + variant if variant else ''}_seed{seed}"


def pending_runs(specs: Iterable[RunSpec], runs_dir: os.PathLike) -> List[RunSpec]:
    """The specs whose run JSON does not exist yet in ``runs_dir``."""
    runs_dir = Path(runs_dir)
    return [s for s in specs if not (runs_dir / f"{s.run_id}.json").exists()]


# --------------------------------------------------------------------- running


def _make_backbone(stream_name: str, weights: Optional[str] = None):
    """E0's architecture for a stream (random weights unless ``weights`` is a CIFAR
    ResNet checkpoint for a ``cifar_resnet20`` stream)."""
    from avalanche_sdr.models import cifar_resnet_backbone, small_cnn_backbone

    stream = STREAMS[stream_name]
    if stream.backbone == "cifar_resnet20":
        return cifar_resnet_backbone(20, weights_path=weights, in_channels=stream.in_channels)
    return small_cnn_backbone(in_channels=stream.in_channels, widths=(32, 64, 128))


def backbone_note(stream_name: str, preset: str) -> str:
    """One sentence naming E0, stored with every run."""
    if STREAMS[stream_name].backbone == "cifar_resnet20":
        return "CIFAR-10 ResNet-20 (--backbone-weights), frozen, not trained on the stream"
    return (f"small_cnn(32,64,128) pretrained {PRESETS[preset].pretrain_epochs} epochs on the "
            "warm-start tasks' training data")


def prepare_backbone(stream: str, preset: str, seed: int, out_dir: os.PathLike, device: str = "cpu",
                     data_root: Optional[str] = None, weights: Optional[str] = None) -> str:
    """Make E0 for (stream, preset, seed) once: pretrain the small CNN on the warm-start
    tasks, or load the CIFAR ResNet-20 checkpoint ``weights``; save it with the torch RNG
    state (``{"state_dict", "torch_rng_state"}``); return the path."""
    import torch

    from avalanche_sdr.training import pretrain_backbone
    from avalanche_sdr.training.checkpoint import atomic_write

    path = backbone_file(stream, preset, seed, out_dir)
    if path.exists():
        return str(path)
    cli.seed_everything(seed)
    if STREAMS[stream].backbone == "cifar_resnet20":
        if not weights:
            raise SystemExit(f"--stream {stream} needs --backbone-weights (a CIFAR-10 resnet20-*.th file)")
        backbone = _make_backbone(stream, weights)
    else:
        benchmark = STREAMS[stream].build(seed, PRESETS[preset].capped, data_root)
        warm = [benchmark.train_stream[i] for i in range(benchmark.n_warm_start)]
        backbone = _make_backbone(stream)
        epochs = PRESETS[preset].pretrain_epochs
        # Minutes on a loaded CPU, before any run reports: say what is happening.
        print(f"E0 for {stream} seed {seed}: pretraining on the {len(warm)} warm-start tasks "
              f"({epochs} epochs) -> {path}", flush=True)
        tick = time.perf_counter()
        pretrain_backbone(backbone, warm, epochs=epochs, lr=2e-3, batch_size=32, device=device, verbose=False)
        print(f"E0 for {stream} seed {seed}: pretrained in {time.perf_counter() - tick:.0f}s", flush=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    # The RNG state after pretraining travels with E0: every run continues from it, as
    # examples/quickstart.py does after pretraining in the same process.
    saved = {"state_dict": backbone.state_dict(), "torch_rng_state": torch.get_rng_state()}
    atomic_write(path, lambda f: torch.save(saved, f))
    return str(path)


def _load_backbone(spec: RunSpec):
    import torch

    saved = torch.load(spec.backbone_path, weights_only=True)
    backbone = _make_backbone(spec.stream)
    backbone.load_state_dict(saved["state_dict"])
    torch.set_rng_state(saved["torch_rng_state"])
    for p in backbone.parameters():
        p.requires_grad_(False)
    return backbone.eval()


def load_run(spec: RunSpec):
    """What a run has before its clock starts: the global RNGs seeded with ``spec.seed``,
    the benchmark of ``spec.stream`` (a task-free method's with the dataset's class ids;
    E0 is the default stream's) and E0, loaded from ``spec.backbone_path`` (which also
    restores the torch RNG state after pretraining). :return: (benchmark, backbone)."""
    method, stream, preset = METHODS[spec.method], STREAMS[spec.stream], PRESETS[spec.preset]
    cli.seed_everything(spec.seed)
    benchmark = stream.build(spec.seed, preset.capped, spec.data_root, original_class_ids=method.task_free)
    return benchmark, _load_backbone(spec)


def execute_run(spec: RunSpec) -> Dict[str, Any]:
    """Run one method on one seed; return its result dict (JSON-safe)."""
    import avalanche.training  # noqa: F401  (imported before the clock starts, for every method)
    import torch
    from avalanche.evaluation.metrics import accuracy_metrics, bwt_metrics
    from avalanche.training.plugins import EvaluationPlugin

    import avalanche_sdr  # noqa: F401
    from avalanche_sdr.evaluation import repository_memory_bytes
    from avalanche_sdr.training.stream_runner import (evaluate_group, final_test_accuracies, run_sdr_stream,
                                                      transfer_summary)

    if spec.threads:
        torch.set_num_threads(spec.threads)
    method, stream, preset = METHODS[spec.method], STREAMS[spec.stream], PRESETS[spec.preset]
    if spec.split not in ("test", "valid") or (spec.split == "valid" and method.is_sdr):
        raise ValueError(f"{spec.run_id}: split {spec.split!r} (validation runs are for baselines only)")
    if spec.tasks is not None and spec.split != "valid":
        raise ValueError(f"{spec.run_id}: a run on the first {spec.tasks} task(s) must be a tuning run (split='valid')")
    benchmark, backbone = load_run(spec)
    start = time.perf_counter()
    metrics = [accuracy_metrics(experience=True)]
    # The group curve and BWT (module docstring): test runs trained experience by experience.
    curve_measured = spec.split == "test" and spec.method not in NO_CURVE_METHODS
    if curve_measured:
        metrics += bwt_metrics(experience=False, stream=True)
    task_free_metric = None
    if method.task_free and method.is_sdr:  # SDR's routers, scored without task labels
        from avalanche_sdr.evaluation import TaskFreeMetrics
        from avalanche_sdr.vocabulary import ROUTERS

        task_free_metric = TaskFreeMetrics(ROUTERS)
        metrics.append(task_free_metric)
    evaluator = EvaluationPlugin(*metrics, loggers=[])
    strategy = method.build(backbone, benchmark, stream, preset, evaluator=evaluator, device=spec.device,
                            **dict(spec.options))
    detection = None
    curve, evaluation_seconds = None, 0.0
    if method.is_sdr:
        timings: Dict[str, float] = {}
        sdr = run_sdr_stream(strategy, benchmark, seed=spec.seed, timings=timings)
        curve, evaluation_seconds = sdr["group_curve"], timings["evaluation_seconds"]
        accuracies = [t["test_accuracy"] for t in sdr["tasks"]]
        memory_mb = sdr["memory_mb"]
        detection = dict(sdr["detection"], unique_tasks=sdr["unique_tasks"],
                         decisions=[t["decision"] for t in sdr["tasks"]],
                         outcomes=[t["outcome"] for t in sdr["tasks"]],
                         groups=[t["group"] for t in sdr["tasks"]],
                         records=[t["detection"] for t in sdr["tasks"]],
                         train_accuracy_per_epoch=[t["train_accuracy_per_epoch"] for t in sdr["tasks"]],
                         detection_seconds=sum(r.detection_seconds for r in strategy.detection_records))
    else:
        trained = benchmark.train_stream
        if spec.tasks is not None:  # tuning on a prefix: the first `tasks` experiences
            if not 0 < spec.tasks <= len(trained):
                raise ValueError(f"{spec.run_id}: tasks {spec.tasks} not in 1..{len(trained)}")
            trained = trained[:spec.tasks]
        if isinstance(strategy, avalanche.training.JointTraining):  # the whole stream at once
            strategy.train(trained, eval_streams=[])
        else:
            curve = [] if curve_measured else None
            for position, experience in enumerate(trained):
                strategy.train(experience, eval_streams=[])
                if curve is not None:
                    tick = time.perf_counter()
                    curve.append(evaluate_group(strategy, benchmark.test_stream, benchmark.stream_groups, position,
                                                int(experience.task_labels[0])))
                    evaluation_seconds += time.perf_counter() - tick
        # A tuning run (benchmarks.tuning) is scored on valid_stream: test_stream is never read.
        scored = benchmark.valid_stream if spec.split == "valid" else benchmark.test_stream
        accuracies = final_test_accuracies(strategy, scored if spec.tasks is None else scored[:spec.tasks])
        memory_mb = repository_memory_bytes(strategy) / BYTES_PER_MB
    wall = time.perf_counter() - start
    transfer = {"bwt": None, "forgetting": None, "avalanche_bwt": None, "group_curve": curve}
    if curve is not None:
        transfer.update(transfer_summary(curve, accuracies), avalanche_bwt=stream_bwt(strategy))
    extra = {"sdr_results": sdr} if method.is_sdr else {}
    if method.task_free:
        extra.update(task_free_results(strategy, task_free_metric, sum(accuracies) / len(accuracies)))
    return {
        "run_id": spec.run_id,
        "method": spec.method,
        "variant": spec.variant,
        "options": dict(spec.options),
        "label": method.label + (f" [{spec.variant}]" if spec.variant else ""),
        "stream": spec.stream,
        "stream_label": stream.label,
        "preset": spec.preset,
        "seed": spec.seed,
        "split": spec.split,
        "average_accuracy": sum(accuracies) / len(accuracies),
        "task_accuracies": accuracies,
        "memory_mb": memory_mb,
        "detection": detection,
        "wall_seconds": wall,
        "evaluation_seconds": evaluation_seconds,
        **transfer,
        "torch_threads": torch.get_num_threads(),
        "backbone": backbone_note(spec.stream, spec.preset),
        "task_sizes": getattr(benchmark, "task_sizes", None),
        **({"tasks": spec.tasks} if spec.tasks is not None else {}),
        **extra,
    }


NO_CURVE_METHODS = frozenset({"joint"})
"""Methods without a group curve or BWT: ``joint`` trains once on the whole stream."""

STREAM_BWT_KEY = "StreamBWT/eval_phase/test_stream"
"""Avalanche's name of its ``StreamBWT`` on the test stream (``bwt_metrics(stream=True)``)."""


def stream_bwt(strategy) -> Optional[float]:
    """Avalanche's ``StreamBWT`` after the strategy's last evaluation (the final one over
    the whole test stream): the mean over the experiences evaluated both right after
    their own training and at the end of (last - initial) accuracy, Lopez-Paz & Ranzato's
    BWT with the sign of ``bwt`` (positive: improvement; Avalanche's ``StreamForgetting``
    is its negative). ``None`` when the evaluator has none."""
    value = strategy.evaluator.get_last_metrics().get(STREAM_BWT_KEY)
    return None if value is None else float(value)


def router_memory_mb(model, routers: Sequence[str]) -> Dict[str, float]:
    """MB of each router's state in an SDR repository
    (:func:`avalanche_sdr.models.routing.router_states`), counted as the memory counter counts it."""
    from avalanche_sdr.evaluation.memory import TensorByteCounter
    from avalanche_sdr.models.routing import router_states

    mb = {}
    for router in routers:
        counter = TensorByteCounter()
        for state in router_states(model, router):
            counter.add_module(state)
        mb[router] = counter.total / BYTES_PER_MB
    return mb


def task_free_results(strategy, metric, average_accuracy: float) -> Dict[str, Any]:
    """The run JSON keys of a task-free row (:attr:`benchmarks.methods.Method.task_free`).

    SDR (``metric``: its :class:`~avalanche_sdr.evaluation.TaskFreeMetrics`): ``"task_free"``,
    ``{router or "oracle": {"task_free": acc, "routing": acc}}`` (means over the test
    experiences), ``"router_memory_mb"``, ``{router: MB of its state}`` (included in
    ``memory_mb``), ``"router_fit_seconds"``, ``{router: wall seconds of its fitting
    after every task}`` (included in ``wall_seconds``), and with the ``"lda_weighted"``
    router ``"lda_weight"``, the weight it chose on the stream's repeats
    (:func:`avalanche_sdr.models.lda_router.chosen_weight`), and ``"lda_evidence_images"``,
    the repeat images that choice rests on
    (:func:`~avalanche_sdr.models.lda_router.evidence_images`). A class-incremental baseline
    (``metric`` None: one head over the class ids, so its accuracy is task-free): ``{"task_free": {"self": {"task_free":
    average_accuracy, "routing": None}}}``.
    """
    if metric is None:
        return {"task_free": {"self": {"task_free": average_accuracy, "routing": None}}}
    from avalanche_sdr.models import lda_router

    results = {"task_free": metric.result(), "router_memory_mb": router_memory_mb(strategy.model, metric.routers),
               "router_fit_seconds": dict(strategy.sdr.router_seconds)}
    if ROUTER_LDA_WEIGHTED in metric.routers:
        results["lda_weight"] = lda_router.chosen_weight(strategy.model)
        results["lda_evidence_images"] = lda_router.evidence_images(strategy.model)
    return results


def memory_mb_with_routers(run: Dict[str, Any], keep: Sequence[str] = ()) -> float:
    """A run's ``memory_mb`` less the state of every router not in ``keep``
    (``router_memory_mb`` of a task-free SDR run; a run without it: its ``memory_mb``).
    A state two routers share (:data:`~avalanche_sdr.vocabulary.SHARED_ROUTER_STATE`) is
    counted once, and kept when either router is."""
    from avalanche_sdr.models.routing import state_router

    owners = {state_router(router): mb for router, mb in (run.get("router_memory_mb") or {}).items()}
    kept = {state_router(router) for router in keep}
    return run["memory_mb"] - sum(mb for owner, mb in owners.items() if owner not in kept)


def _job(spec: RunSpec) -> Dict[str, Any]:
    import warnings

    # Avalanche 0.6 re-enables its DeprecationWarnings (Replay's ``update``) on every
    # call; a worker prints none of them, so the run lines stay readable.
    warnings.showwarning = lambda *args, **kwargs: None
    return execute_run(spec)


def _run_line(spec: RunSpec, r: Dict[str, Any]) -> str:
    line = (f"{spec.run_id}: acc {100 * r['average_accuracy']:.2f}%  "
            f"mem {r['memory_mb']:.2f} MB  {r['wall_seconds']:.1f}s")
    if r.get("bwt") is not None:
        line += f"  bwt {100 * r['bwt']:+.2f}"
    if r["detection"]:
        d = r["detection"]
        line += (f"  correct/miss/incorrect {100 * d['correct']:.0f}/"
                 f"{100 * d['miss']:.0f}/{100 * d['incorrect']:.0f}%")
    return line


def _local_results(todo: Sequence[RunSpec], jobs: int):
    """Yield ``(spec, result or exception)`` as the runs of a local process pool finish.

    Interrupted (Ctrl-C, or the consumer stops early): the queued runs are cancelled and
    the workers terminated at once; the pool's own exit would first run every queued run
    to its end, results unused.
    """
    import multiprocessing

    pool = ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn"))
    try:
        futures = {pool.submit(_job, spec): spec for spec in todo}
        for future in as_completed(futures):
            try:
                yield futures[future], future.result()
            except Exception as error:  # keep the other runs going
                yield futures[future], error
    except BaseException:  # KeyboardInterrupt, GeneratorExit
        # The runs in flight are lost anyway (this process writes the JSONs): stop their
        # workers. ProcessPoolExecutor has no public way to (before Python 3.14), and
        # shutdown() forgets its processes: take them first.
        workers = list((getattr(pool, "_processes", None) or {}).values())
        pool.shutdown(wait=False, cancel_futures=True)
        for process in workers:
            process.terminate()
        raise
    pool.shutdown()


def _ray_results(todo: Sequence[RunSpec], address: Optional[str], threads: int):
    """Yield ``(spec, result or exception)`` as the runs finish on a Ray cluster.

    ``address=None`` starts a local Ray instance; otherwise ``ray.init(address=...)``
    connects to a running cluster (e.g. ``"auto"`` or ``"ray://head:10001"``). Every
    run is a Ray task asking for ``threads`` CPUs; results come back to this process,
    which writes the run JSONs, so the workers need no shared file system (they need
    this repository on their ``PYTHONPATH`` and the datasets at the same paths).
    """
    try:
        import ray
    except ImportError as err:
        raise SystemExit("--executor ray needs Ray: pip install 'avalanche-sdr[ray]'") from err
    started_here = not ray.is_initialized()
    if started_here:
        # Workers import `benchmarks` from this checkout (a cluster's nodes need it at
        # the same path, or installed).
        repo_root = str(Path(__file__).resolve().parents[1])
        ray.init(address=address, include_dashboard=False, log_to_driver=False,
                 runtime_env={"env_vars": {"PYTHONPATH": repo_root}})
    try:
        remote_job = ray.remote(num_cpus=max(1, threads))(_job)
        pending = {remote_job.remote(spec): spec for spec in todo}
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            spec = pending.pop(done[0])
            try:
                yield spec, ray.get(done[0])
            except Exception as error:  # ray.exceptions.RayTaskError wraps the run's error
                yield spec, error
    finally:
        if started_here:
            ray.shutdown()


def run_all(specs: Sequence[RunSpec], out_dir: os.PathLike, jobs: int = 1, log=print,
            executor: str = "local", ray_address: Optional[str] = None) -> List[Dict[str, Any]]:
    """Execute the pending specs; return every run's dict (new and old).

    :param executor: ``"local"`` (a process pool of ``jobs`` workers) or ``"ray"``
        (Ray tasks, see :func:`_ray_results`).
    :param ray_address: Ray cluster address (``None``: start a local instance).
    Each finished run's JSON is written atomically by this process as it arrives, so a
    harness stopped by Ctrl-C or killed keeps every finished run and loses only the runs
    in flight, which the same command runs again from their start (it says how many
    runs are done and skipped). Ctrl-C also says what is kept. A line is printed on
    stdout per finished run, under a tqdm bar on stderr where stderr is a terminal.
    """
    from tqdm import tqdm

    runs_dir = Path(out_dir) / "runs"
    runs_dir.mkdir(parents=True, exist_ok=True)
    todo = pending_runs(specs, runs_dir)
    skipped = len(specs) - len(todo)
    if skipped and log is not None:
        log(f"skipping {skipped} finished run(s) found in {runs_dir}: {skipped} of {len(specs)} done, "
            f"{len(todo)} to run")
    if executor not in ("local", "ray"):
        raise ValueError(f"executor must be 'local' or 'ray', got {executor!r}")
    if todo:
        threads = max(s.threads for s in todo)
        results = (_local_results(todo, jobs) if executor == "local"
                   else _ray_results(todo, ray_address, threads))
        finished = 0
        try:
            # disable=None: no bar (no \r frames) where stderr is not a terminal.
            with tqdm(total=len(todo), desc="runs", unit="run", file=sys.stderr, disable=None) as bar:
                for spec, outcome in results:
                    if isinstance(outcome, Exception):
                        line = f"{spec.run_id}: FAILED {type(outcome).__name__}: {outcome}"
                    else:
                        cli.write_json(runs_dir / f"{spec.run_id}.json", outcome)
                        finished += 1
                        line = _run_line(spec, outcome)
                    bar.write(line, file=sys.stdout)
                    bar.update(1)
        except KeyboardInterrupt:
            if log is not None:
                log(f"interrupted: {skipped + finished} of {len(specs)} run(s) done and kept in {runs_dir}; the "
                    "same command runs the others (those in flight start again from their beginning)")
            raise
    return load_runs(runs_dir, [s.run_id for s in specs])


def load_runs(runs_dir: os.PathLike, run_ids: Optional[Sequence[str]] = None) -> List[Dict[str, Any]]:
    """Read run JSONs (those of ``run_ids`` that exist, else all) in a stable order."""
    runs_dir = Path(runs_dir)
    paths = ([runs_dir / f"{r}.json" for r in run_ids] if run_ids is not None
             else sorted(runs_dir.glob("*.json")))
    return [json.loads(p.read_text()) for p in paths if p.exists()]


# --------------------------------------------------------------------- reporting


def mean_std(values: Sequence[float]) -> tuple:
    """Mean and sample standard deviation (0.0 for a single value)."""
    n = len(values)
    mean = sum(values) / n
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else 0.0
    return mean, std


def _pm(values: Sequence[float], digits: int) -> str:
    mean, std = mean_std(values)
    return f"{mean:.{digits}f} ± {std:.{digits}f}"


def _without_reuse(variant: str, reuse: str) -> str:
    """A variant's name less its reuse part (``a4b8_accumulate`` -> ``a4b8``)."""
    if reuse == REUSE_DEFAULT:
        return variant
    if variant == reuse:
        return ""
    return variant[:-len(reuse) - 1] if variant.endswith("_" + reuse) else variant


def table_rows(runs: Sequence[Dict[str, Any]]) -> List[List[Dict[str, Any]]]:
    """The runs grouped into table rows (one per method and variant), each row's runs in
    seed order; rows in the paper's order of the methods; within a method, its rows of
    each reuse (``--reuse``; :data:`~avalanche_sdr.vocabulary.REUSE_MODES` order, the
    paper's ``head`` first), each reuse's own row first (``""``, ``accumulate``), then its
    variants by mean memory."""
    order = {name: i for i, name in enumerate(METHODS)}
    by_row: Dict[tuple, List[Dict[str, Any]]] = {}
    for r in runs:
        by_row.setdefault((r["method"], r.get("variant", "")), []).append(r)

    def row_order(key):
        memory = sum(r["memory_mb"] for r in by_row[key]) / len(by_row[key])
        reuse = row_reuse(by_row[key][0].get("options"))
        rank = REUSE_MODES.index(reuse) if reuse in REUSE_MODES else len(REUSE_MODES)
        return order.get(key[0], len(order)), rank, _without_reuse(key[1], reuse) != "", memory, key[1]

    return [sorted(by_row[key], key=lambda r: r["seed"]) for key in sorted(by_row, key=row_order)]


def _signed_pm(values: Sequence[float], digits: int) -> str:
    mean, std = mean_std(values)
    return f"{mean:+.{digits}f} ± {std:.{digits}f}"


def format_table(runs: Sequence[Dict[str, Any]]) -> str:
    """The Markdown table, one row per method (and variant) in the paper's order (mean ± std
    over seeds).

    Acc (%), BWT (backward transfer ``bwt`` in accuracy points, signed: positive, earlier
    tasks improved; "–" for a row with a run without it, e.g. an older run file) and
    Mem (MB) for every row; Correct / Miss / Incorrect (%) for SDR rows ("–" otherwise);
    wall time per run (s, mean ± std); the number of seeds.
    """
    header = ("| Method | Acc (%) | BWT (pts) | Mem (MB) | Correct (%) | Miss (%) | Incorrect (%) | Wall (s) "
              "| Seeds |\n|---|---|---|---|---|---|---|---|---|")
    rows = [header]
    for rs in table_rows(runs):
        bwt = [r.get("bwt") for r in rs]
        cells = [rs[0]["label"], _pm([100 * r["average_accuracy"] for r in rs], 2),
                 "–" if None in bwt else _signed_pm([100 * b for b in bwt], 2),
                 _pm([r["memory_mb"] for r in rs], 2)]
        if all(r.get("detection") for r in rs):
            cells += [_pm([100 * r["detection"][k] for r in rs], 1) for k in ("correct", "miss", "incorrect")]
        else:
            cells += ["–"] * 3
        cells += [_pm([r["wall_seconds"] for r in rs], 1), ",".join(str(r["seed"]) for r in rs)]
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows) + "\n"


CSV_FIELDS = ["run_id", "method", "variant", "label", "stream", "preset", "seed", "average_accuracy",
              "memory_mb", "correct", "miss", "incorrect", "unique_tasks", "bwt", "forgetting", "avalanche_bwt",
              "wall_seconds", "evaluation_seconds"]


def write_outputs(runs: Sequence[Dict[str, Any]], out_dir: os.PathLike, header: str = "", notes: str = "") -> str:
    """Write ``table2.md`` (``header``, the table, then ``notes``: e.g. the ``--tune``
    section of :func:`benchmarks.tuning.format_notes`), ``runs.csv`` and ``runs.json`` to
    ``out_dir``; return the table."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    table = format_table(runs)
    (out_dir / "table2.md").write_text(header + table + notes)
    with open(out_dir / "runs.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_FIELDS)
        writer.writeheader()
        for r in runs:
            d = r.get("detection") or {}
            row = {k: r.get(k) for k in CSV_FIELDS}
            row.update({k: d.get(k) for k in ("correct", "miss", "incorrect", "unique_tasks")})
            writer.writerow(row)
    cli.write_json(out_dir / "runs.json", list(runs))
    return table


def curve_key(method: str, options: Dict[str, Any]) -> Tuple[str, str]:
    """The accuracy-memory curve a row belongs to: its method and its options other than
    the memory knobs (:data:`benchmarks.methods.MEMORY_KNOBS`), e.g. ER under the paper's
    protocol is a curve of its own."""
    fixed = {k: v for k, v in (options or {}).items() if k not in MEMORY_KNOBS}
    return method, json.dumps(fixed, sort_keys=True)


def _curve_label(method: str, fixed: Dict[str, Any]) -> str:
    label = METHODS[method].label if method in METHODS else method
    fixed = dict(fixed)
    reuse = fixed.pop("reuse", REUSE_DEFAULT)
    parts = [] if reuse == REUSE_DEFAULT else [reuse]
    if fixed:
        named = [p for p, by_method in PROTOCOLS.items()
                 if by_method.get(method) and dict(by_method[method]) == fixed]
        parts.insert(0, named[0] if named else ", ".join(f"{k}={v}" for k, v in sorted(fixed.items())))
    return f"{label} [{', '.join(parts)}]" if parts else label


def row_points(runs: Sequence[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """One point per table row (method, variant) of the test-scored runs: ``accuracy`` (%)
    and ``memory_mb``, means over seeds, with their sample stds (``accuracy_std``,
    ``memory_std``), ``label``, ``method``, ``variant``, ``options``, ``seeds`` and ``curve``
    (:func:`curve_key`); in the table's order (:func:`table_rows`)."""
    points = []
    for rs in table_rows([r for r in runs if r.get("split", "test") == "test"]):
        method, variant = rs[0]["method"], rs[0].get("variant", "")
        acc = mean_std([100 * r["average_accuracy"] for r in rs])
        mem = mean_std([r["memory_mb"] for r in rs])
        options = rs[0].get("options") or {}
        points.append(dict(method=method, variant=variant, label=rs[0]["label"], options=options,
                           accuracy=acc[0], accuracy_std=acc[1], memory_mb=mem[0], memory_std=mem[1],
                           seeds=sorted(r["seed"] for r in rs), curve=curve_key(method, options)))
    return points


def pareto_front(runs: Sequence[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """The rows on the accuracy-memory Pareto front: the :func:`row_points` that no other
    row dominates (another row dominates a row if its mean accuracy is at least as high and
    its mean memory at most as large, one of the two strictly). In memory order."""
    points = row_points(runs)
    front = [p for p in points
             if not any(q["accuracy"] >= p["accuracy"] and q["memory_mb"] <= p["memory_mb"]
                        and (q["accuracy"] > p["accuracy"] or q["memory_mb"] < p["memory_mb"]) for q in points)]
    return sorted(front, key=lambda p: (p["memory_mb"], -p["accuracy"]))


def write_plots(runs: Sequence[Dict[str, Any]], out_dir: os.PathLike, log=print) -> List[Path]:
    """Figures of a harness folder, in ``OUT/plots/``.

    ``accuracy_memory.png``: every row's accuracy against its memory (mean ± sample std
    over seeds, the table's two main columns). Rows of a method that differ only in a
    memory knob (ER's buffer: ``pc*`` and ``mem_*`` variants; SDR's EFT ``a``/``b``:
    ``a*b*`` variants; :func:`curve_key`) are one curve, joined in memory order and each
    point labelled with its variant; a method without such variants is a single marker.
    The rows on the Pareto front (:func:`pareto_front`) are ringed in black and joined by a
    dotted step line. For every SDR run that stored its full results (``sdr_results``),
    the figures of :func:`avalanche_sdr.plots.make_all_plots` (S and p heatmaps, a
    detection panel, memory growth, per-task accuracy) in ``OUT/plots/<run_id>/``; a run
    whose records hold no scores (Optimal's oracle decisions) gets a log line instead.

    ``group_curve.png`` (where runs have a ``group_curve``):
    :func:`avalanche_sdr.plots.plot_group_curve`, the accuracy on the tasks of the group
    seen most often against the times it has been seen, a line per row (mean over seeds).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from avalanche_sdr.plots import make_all_plots
    from avalanche_sdr.plots.results import ResultsFormatError

    plots = Path(out_dir) / "plots"
    plots.mkdir(parents=True, exist_ok=True)
    written = []
    points = row_points(runs)
    curves: Dict[Tuple[str, str], List[Dict[str, Any]]] = {}
    for p in points:
        curves.setdefault(p["curve"], []).append(p)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    colors = plt.get_cmap("tab20").colors  # one colour per curve or marker: 20 before any repeats
    markers = "osD^v<>ph*"
    for i, ((method, fixed), pts) in enumerate(curves.items()):
        pts = sorted(pts, key=lambda p: p["memory_mb"])
        label = _curve_label(method, json.loads(fixed)) if len(pts) > 1 else pts[0]["label"]
        marker = markers[i % len(markers)]
        ax.errorbar([p["memory_mb"] for p in pts], [p["accuracy"] for p in pts],
                    xerr=[p["memory_std"] for p in pts], yerr=[p["accuracy_std"] for p in pts],
                    fmt=marker + ("-" if len(pts) > 1 else ""), capsize=3, label=label,
                    color=colors[(2 * i) % 20 + (2 * i) // 20 % 2])
        if len(pts) > 1:  # each point's variant; rows at the same place (e.g. capped sizes) share a label
            names: Dict[Tuple[float, float], List[str]] = {}
            for p in pts:
                names.setdefault((p["memory_mb"], p["accuracy"]), []).append(p["variant"] or "preset")
            for xy, variants in names.items():
                ax.annotate(" / ".join(variants), xy, fontsize=6, xytext=(3, -8), textcoords="offset points")
    front = pareto_front(runs)
    if front:
        ax.scatter([p["memory_mb"] for p in front], [p["accuracy"] for p in front], s=150, facecolors="none",
                   edgecolors="black", linewidths=1.0, zorder=5, label="Pareto front")
        ax.step([p["memory_mb"] for p in front], [p["accuracy"] for p in front], where="post", color="black",
                linestyle=":", linewidth=0.8, zorder=4)
    ax.set_xlabel("memory after the last task (MB)")
    ax.set_ylabel("average accuracy (%)")
    ax.set_title(f"{runs[0]['stream_label']}, preset {runs[0]['preset']} (mean ± std over seeds)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    path = plots / "accuracy_memory.png"
    fig.savefig(path, dpi=150)
    plt.close(fig)
    written.append(path)
    ordered = [r for rs in table_rows([r for r in runs if r.get("split", "test") == "test"]) for r in rs]
    if any(r.get("group_curve") for r in ordered):
        from avalanche_sdr.plots import plot_group_curve

        ax = plot_group_curve(ordered)
        path = plots / "group_curve.png"
        ax.figure.savefig(path, dpi=150)
        written.append(path)
    for r in runs:
        if not r.get("sdr_results"):
            continue
        try:
            written += make_all_plots(r["sdr_results"], plots / r["run_id"])
        except ResultsFormatError as error:  # e.g. Optimal: oracle decisions carry no scores
            if log is not None:
                log(f"no figures for {r['run_id']}: {error}")
        plt.close("all")
    if log is not None:
        log(f"wrote {len(written)} figure(s) under {plots}")
    return written


# --------------------------------------------------------------------- rows of --protocol, --sweep, --equal-memory


def harness_variant_rows(args, tuned: Optional[Dict[str, Dict[str, Any]]] = None):
    """The rows of a call's first phase: every ``--methods`` row under each ``--protocol``,
    with ``--sweep`` their memory-knob variants, and every SDR row under each ``--reuse``
    (:func:`benchmarks.methods.harness_rows`); with ``--tuned-only``, none of a method of
    ``tuned`` (the ``--tune`` choices that get a ``[tuned]`` row: that row stands for it)."""
    rows = harness_rows(args.methods, getattr(args, "protocol", None) or ["ours"], getattr(args, "sweep", False),
                        getattr(args, "reuse", None) or [REUSE_DEFAULT])
    if getattr(args, "tuned_only", False):
        rows = [r for r in rows if r.method not in (tuned or {})]
    return rows


def equal_memory_targets(ref: str, protocols: Sequence[str] = ("ours",),
                         tuned: Optional[Dict[str, Dict[str, Any]]] = None, tuned_only: bool = False) -> List[Row]:
    """The ER rows sized to reference ``ref`` (``METHOD`` or ``METHOD:VARIANT``,
    :func:`split_reference`), before sizing: :func:`benchmarks.methods.equal_memory_rows` of
    its method (variant ``mem_<method>``, under each protocol; ``mem_<method>_<variant>`` for
    a variant reference), then, where ``tuned`` (the ``--tune`` choices that get a
    ``[tuned]`` row, :func:`benchmarks.tuning.harness_tune`) has ``replay`` and the
    reference is not task-free, ER with the tuned options as its ``[tuned]`` row has them
    (variant :func:`tuned_equal_memory_variant`, ``mem_<...>_tuned``); with ``tuned_only``
    (``--tuned-only``) that row alone."""
    method, variant = split_reference(ref)
    rows = equal_memory_rows(method, protocols)
    rows = [dataclasses.replace(r, variant=_referenced_variant(ref, r.variant)) for r in rows]
    tuned_variant = tuned_equal_memory_variant(ref)
    if tuned and "replay" in tuned and tuned_variant:
        from benchmarks.tuning import tuned_options

        rows = [] if tuned_only else rows
        rows.append(Row("replay", tuned_variant, tuned_options(tuned["replay"])))
    return rows


def equal_memory_ids(args, seed: int, tuned: Optional[Dict[str, Dict[str, Any]]] = None) -> List[str]:
    """Run ids of the ``--equal-memory`` ER rows of ``seed`` (sized or not;
    :func:`equal_memory_targets`)."""
    return [run_id(args.stream, args.preset, row.method, seed, row.variant)
            for ref in (getattr(args, "equal_memory", None) or [])
            for row in equal_memory_targets(ref, getattr(args, "protocol", None) or ["ours"], tuned,
                                            getattr(args, "tuned_only", False))]


def backbone_file(stream: str, preset: str, seed: int, out_dir: os.PathLike) -> Path:
    """Where :func:`prepare_backbone` keeps E0 of (stream, preset, seed)."""
    return Path(out_dir) / "backbones" / f"{stream}_{preset}_seed{seed}.pt"


def equal_memory_specs(args, out: os.PathLike, threads: int, log=print,
                       tuned: Optional[Dict[str, Dict[str, Any]]] = None,
                       pretrain: bool = True) -> Tuple[List[RunSpec], List[Dict[str, Any]]]:
    """``--equal-memory``: after the first phase, an ER row per reference, seed and
    protocol (and with ``tuned``, the tuned ER row; :func:`equal_memory_targets`) with its
    buffer sized so that its memory after the stream meets the reference run's
    (``OUT/runs/<reference run id>.json``, its ``memory_mb``; a reference ``METHOD:VARIANT``
    is the run of that variant row; :func:`benchmarks.methods.size_equal_memory`, on the
    network the row's options give: the tuned options hold no network option, so the tuned
    row gets the ``ours`` row's size). A task-free reference (``sdr_task_free``)
    gets one class-incremental ER row (``ci_replay``, sized on the stream with the class ids)
    whose target is the reference's memory with SDR's own router only
    (:func:`memory_mb_with_routers` keeping :data:`benchmarks.methods.SDR_ROUTER`).

    :param pretrain: make E0 where its file is missing (:func:`prepare_backbone`); ``False``
        (``--report-only``): never train, a seed without its E0 file gets ``no_backbone``.
    :return: the specs to run (variant ``mem_<reference>[...]``, option ``replay_mem_size``) and
        one record per row: the sizing's numbers (bytes; ``status`` ``sized``, ``capped``,
        ``infeasible`` (not run: the model alone exceeds the target), ``no_reference`` or
        ``no_backbone``) and the row's ``options``.
    """
    out = Path(out)
    protocols = getattr(args, "protocol", None) or ["ours"]
    specs, records = [], []
    for seed in args.seeds:
        benchmarks: Dict[bool, Any] = {}  # original_class_ids -> the seed's stream
        loaded: Dict[str, Any] = {}  # the seed's E0: "path", "backbone"
        for ref in args.equal_memory:
            method, variant = split_reference(ref)
            ref_id = run_id(args.stream, args.preset, method, seed, variant)
            ref_path = out / "runs" / f"{ref_id}.json"
            for row in equal_memory_targets(ref, protocols, tuned, getattr(args, "tuned_only", False)):
                record = dict(seed=seed, reference=ref, reference_run_id=ref_id,
                              run_id=run_id(args.stream, args.preset, row.method, seed, row.variant),
                              options=dict(row.options))
                if not ref_path.exists():
                    records.append(dict(record, status="no_reference", note=f"{ref_path} does not exist"))
                    continue
                target = round(memory_mb_with_routers(json.loads(ref_path.read_text()), (SDR_ROUTER,))
                               * BYTES_PER_MB)
                if not loaded:
                    path = backbone_file(args.stream, args.preset, seed, out)
                    if pretrain or path.exists():
                        path = prepare_backbone(args.stream, args.preset, seed, out, device=args.device,
                                                data_root=args.data_root, weights=args.backbone_weights)
                        loaded.update(path=path, backbone=_load_backbone(
                            RunSpec(args.stream, args.preset, "replay", seed, path)))
                    else:
                        loaded.update(path=None)
                if loaded["path"] is None:
                    records.append(dict(record, status="no_backbone",
                                        note=f"{backbone_file(args.stream, args.preset, seed, out)} does not exist"))
                    continue
                task_free = METHODS[row.method].task_free
                if task_free not in benchmarks:
                    benchmarks[task_free] = STREAMS[args.stream].build(seed, PRESETS[args.preset].capped,
                                                                       args.data_root, original_class_ids=task_free)
                sized, sizing = size_equal_memory(row, loaded["backbone"], benchmarks[task_free], target)
                record.update(sizing.as_dict(), target_mb=target / BYTES_PER_MB,
                              predicted_mb=sizing.predicted_bytes / BYTES_PER_MB)
                records.append(record)
                if log is not None:
                    log(f"equal memory {record['run_id']}: {sizing.status}: {sizing.note}")
                if sized is not None:
                    specs.append(RunSpec(args.stream, args.preset, sized.method, seed, loaded["path"], args.device,
                                         threads, args.data_root, variant=sized.variant, options=sized.options))
    return specs, records


def equal_memory_report(records: Sequence[Dict[str, Any]], out: os.PathLike) -> str:
    """Add each sized run's measured memory to its record (``measured_mb``, ``deviation``:
    measured / target - 1), write ``OUT/equal_memory.json``; return one line per record."""
    out = Path(out)
    lines = []
    for record in records:
        path = out / "runs" / f"{record['run_id']}.json"
        if record.get("mem_size") is not None and path.exists():
            measured = json.loads(path.read_text())["memory_mb"]
            record.update(measured_mb=measured, deviation=measured / record["target_mb"] - 1)
            lines.append(f"{record['run_id']}: mem_size {record['mem_size']}, measured {measured:.4f} MB against "
                         f"{record['target_mb']:.4f} MB of {record['reference_run_id']} "
                         f"({100 * record['deviation']:+.2f} %), {record['status']}")
        else:
            lines.append(f"{record['run_id']}: {record['status']}: {record.get('note', 'no run JSON')}")
    cli.write_json(out / "equal_memory.json", list(records))
    return "\n".join(lines)


def pareto_lines(runs: Sequence[Dict[str, Any]]) -> str:
    """The rows on the accuracy-memory Pareto front (:func:`pareto_front`), one line."""
    front = pareto_front(runs)
    return "accuracy-memory Pareto front: " + "; ".join(
        f"{p['label']} ({p['accuracy']:.2f} %, {p['memory_mb']:.3f} MB)" for p in front)


def main(args) -> str:
    start = time.perf_counter()
    out = Path(args.out)
    threads = args.threads or max(1, (os.cpu_count() or 1) // args.jobs)
    header = (f"# Table 2 layout: {STREAMS[args.stream].label}, preset `{args.preset}`\n\n"
              f"Mean ± sample std over seeds {' '.join(map(str, args.seeds))}.\n\n")
    tuned, notes = {}, ""  # --tune: method -> chosen values (benchmarks.tuning), table2.md's notes
    if args.tune:
        from benchmarks import tuning

        tuned, notes = tuning.harness_tune(args, out, threads)
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
                                        data_root=args.data_root, weights=args.backbone_weights)
        specs += [RunSpec(args.stream, args.preset, r.method, seed, backbone, args.device, threads, args.data_root,
                          variant=r.variant, options=r.options) for r in rows]
        specs += [RunSpec(args.stream, args.preset, m, seed, backbone, args.device, threads, args.data_root,
                          variant="tuned", options=tuning.tuned_options(entry)) for m, entry in tuned.items()]
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


if __name__ == "__main__":
    cli.run_cli(main, lambda argv: _ARGS)  # parsed above, before the heavy imports
