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
  its builder, included).

SDR rows also record Correct / Miss / Incorrect over the scored (non-warm-start)
tasks, from :func:`avalanche_sdr.training.stream_runner.run_sdr_stream`.

Outputs in ``OUT``: ``table2.md`` (mean ± sample std over seeds), ``runs.csv`` (one row
per run) and ``runs.json`` (all run dicts); ``runs/*.json`` per run; ``plots/``
(:func:`write_plots`: accuracy against memory per method, and every SDR run's figures).
``--report-only`` rewrites these from the runs already in ``OUT`` without running.

Arguments, the stream's data and weights options and ``--out`` are checked before
anything runs (exit code 2); missing data prints one message (exit code 1;
``--debug`` shows the traceback).

    python -m benchmarks.table2 --stream digits --preset smoke --seeds 0 --out results/table2
    python -m benchmarks.table2 --stream digits --preset smoke --seeds 0 1 2 --jobs 2 --out results/table2
"""
from __future__ import annotations

import argparse
import csv
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

if __name__ in ("__main__", "__mp_main__"):
    # The command (or one of its spawned workers): hide the third-party warnings a user
    # cannot act on before benchmarks.methods imports Avalanche (avalanche_sdr.cli).
    cli.install_warning_filters()

from avalanche_sdr.evaluation.memory import BYTES_PER_MB  # noqa: E402
from benchmarks.methods import METHODS, PRESETS, STREAMS  # noqa: E402  (after the filters)


@dataclass(frozen=True)
class RunSpec:
    """One job: a method on a stream with a preset and a seed.

    ``variant`` names a run whose method gets ``options`` (``(name, value)`` pairs handed
    to the method's builder: a baseline's :class:`~avalanche_sdr.baselines.BaselineSettings`
    fields, SDR's EFT ``a`` / ``b``); ``""`` with no options is the method as the
    preset defines it. A variant is a row of its own in the table.
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

    path = Path(out_dir) / "backbones" / f"{stream}_{preset}_seed{seed}.pt"
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
        pretrain_backbone(backbone, warm, epochs=PRESETS[preset].pretrain_epochs, lr=2e-3,
                          batch_size=32, device=device, verbose=False)
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


def execute_run(spec: RunSpec) -> Dict[str, Any]:
    """Run one method on one seed; return its result dict (JSON-safe)."""
    import avalanche.training  # noqa: F401  (imported before the clock starts, for every method)
    import torch
    from avalanche.evaluation.metrics import accuracy_metrics
    from avalanche.training.plugins import EvaluationPlugin

    import avalanche_sdr  # noqa: F401
    from avalanche_sdr.evaluation import repository_memory_bytes
    from avalanche_sdr.training.stream_runner import final_test_accuracies, run_sdr_stream

    if spec.threads:
        torch.set_num_threads(spec.threads)
    method, stream, preset = METHODS[spec.method], STREAMS[spec.stream], PRESETS[spec.preset]
    cli.seed_everything(spec.seed)
    benchmark = stream.build(spec.seed, preset.capped, spec.data_root)
    backbone = _load_backbone(spec)  # also restores the torch RNG state after pretraining
    start = time.perf_counter()
    evaluator = EvaluationPlugin(accuracy_metrics(experience=True), loggers=[])
    strategy = method.build(backbone, benchmark, stream, preset, evaluator=evaluator, device=spec.device,
                            **dict(spec.options))
    detection = None
    if method.is_sdr:
        sdr = run_sdr_stream(strategy, benchmark, seed=spec.seed)
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
        for experience in benchmark.train_stream:
            strategy.train(experience, eval_streams=[])
        accuracies = final_test_accuracies(strategy, benchmark.test_stream)
        memory_mb = repository_memory_bytes(strategy) / BYTES_PER_MB
    wall = time.perf_counter() - start
    extra = {"sdr_results": sdr} if method.is_sdr else {}
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
        "average_accuracy": sum(accuracies) / len(accuracies),
        "task_accuracies": accuracies,
        "memory_mb": memory_mb,
        "detection": detection,
        "wall_seconds": wall,
        "torch_threads": torch.get_num_threads(),
        "backbone": backbone_note(spec.stream, spec.preset),
        "task_sizes": getattr(benchmark, "task_sizes", None),
        **extra,
    }


def _job(spec: RunSpec) -> Dict[str, Any]:
    import warnings

    # Avalanche 0.6 re-enables its DeprecationWarnings (Replay's ``update``) on every
    # call; a worker prints none of them, so the run lines stay readable.
    warnings.showwarning = lambda *args, **kwargs: None
    return execute_run(spec)


def _run_line(spec: RunSpec, r: Dict[str, Any]) -> str:
    line = (f"{spec.run_id}: acc {100 * r['average_accuracy']:.2f}%  "
            f"mem {r['memory_mb']:.2f} MB  {r['wall_seconds']:.1f}s")
    if r["detection"]:
        d = r["detection"]
        line += (f"  correct/miss/incorrect {100 * d['correct']:.0f}/"
                 f"{100 * d['miss']:.0f}/{100 * d['incorrect']:.0f}%")
    return line


def _local_results(todo: Sequence[RunSpec], jobs: int):
    """Yield ``(spec, result or exception)`` as the runs of a local process pool finish."""
    import multiprocessing

    with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = {pool.submit(_job, spec): spec for spec in todo}
        for future in as_completed(futures):
            try:
                yield futures[future], future.result()
            except Exception as error:  # keep the other runs going
                yield futures[future], error


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
    killed harness loses only the runs in flight.
    """
    from tqdm import tqdm

    runs_dir = Path(out_dir) / "runs"
    runs_dir.mkdir(parents=True, exist_ok=True)
    todo = pending_runs(specs, runs_dir)
    skipped = len(specs) - len(todo)
    if skipped and log is not None:
        log(f"skipping {skipped} finished run(s) found in {runs_dir}")
    if executor not in ("local", "ray"):
        raise ValueError(f"executor must be 'local' or 'ray', got {executor!r}")
    if todo:
        threads = max(s.threads for s in todo)
        results = (_local_results(todo, jobs) if executor == "local"
                   else _ray_results(todo, ray_address, threads))
        with tqdm(total=len(todo), desc="runs", unit="run", file=sys.stderr) as bar:
            for spec, outcome in results:
                if isinstance(outcome, Exception):
                    line = f"{spec.run_id}: FAILED {type(outcome).__name__}: {outcome}"
                else:
                    cli.write_json(runs_dir / f"{spec.run_id}.json", outcome)
                    line = _run_line(spec, outcome)
                bar.write(line)
                bar.update(1)
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


def format_table(runs: Sequence[Dict[str, Any]]) -> str:
    """The Markdown table, one row per method (and variant) in the paper's order (mean ± std
    over seeds).

    Acc (%) and Mem (MB) for every row; Correct / Miss / Incorrect (%) for SDR rows
    ("–" otherwise); wall time per run (s, mean ± std); the number of seeds.
    """
    header = ("| Method | Acc (%) | Mem (MB) | Correct (%) | Miss (%) | Incorrect (%) | Wall (s) | Seeds |\n"
              "|---|---|---|---|---|---|---|---|")
    rows = [header]
    order = {name: i for i, name in enumerate(METHODS)}
    by_row: Dict[tuple, List[Dict[str, Any]]] = {}
    for r in runs:
        by_row.setdefault((r["method"], r.get("variant", "")), []).append(r)
    for key in sorted(by_row, key=lambda k: (order.get(k[0], len(order)), k[1])):
        rs = sorted(by_row[key], key=lambda r: r["seed"])
        cells = [rs[0]["label"], _pm([100 * r["average_accuracy"] for r in rs], 2),
                 _pm([r["memory_mb"] for r in rs], 2)]
        if all(r.get("detection") for r in rs):
            cells += [_pm([100 * r["detection"][k] for r in rs], 1) for k in ("correct", "miss", "incorrect")]
        else:
            cells += ["–"] * 3
        cells += [_pm([r["wall_seconds"] for r in rs], 1), ",".join(str(r["seed"]) for r in rs)]
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows) + "\n"


CSV_FIELDS = ["run_id", "method", "variant", "label", "stream", "preset", "seed", "average_accuracy",
              "memory_mb", "correct", "miss", "incorrect", "unique_tasks", "wall_seconds"]


def write_outputs(runs: Sequence[Dict[str, Any]], out_dir: os.PathLike, header: str = "") -> str:
    """Write ``table2.md``, ``runs.csv`` and ``runs.json`` to ``out_dir``; return the table."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    table = format_table(runs)
    (out_dir / "table2.md").write_text(header + table)
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


def write_plots(runs: Sequence[Dict[str, Any]], out_dir: os.PathLike, log=print) -> List[Path]:
    """Figures of a harness folder, in ``OUT/plots/``.

    ``accuracy_memory.png``: every method's accuracy against its memory (mean ± sample
    std over seeds, the table's two main columns). For every SDR run that stored its
    full results (``sdr_results``), the figures of :func:`avalanche_sdr.plots.make_all_plots`
    (S and p heatmaps, a detection panel, memory growth, per-task accuracy) in
    ``OUT/plots/<run_id>/``; a run whose records hold no scores (Optimal's oracle
    decisions) gets a log line instead.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from avalanche_sdr.plots import make_all_plots
    from avalanche_sdr.plots.results import ResultsFormatError

    plots = Path(out_dir) / "plots"
    plots.mkdir(parents=True, exist_ok=True)
    written = []
    order = {name: i for i, name in enumerate(METHODS)}
    by_method: Dict[str, List[Dict[str, Any]]] = {}
    for r in runs:
        by_method.setdefault(r["method"], []).append(r)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name in sorted(by_method, key=lambda m: order.get(m, len(order))):
        rs = by_method[name]
        acc = mean_std([100 * r["average_accuracy"] for r in rs])
        mem = mean_std([r["memory_mb"] for r in rs])
        ax.errorbar(mem[0], acc[0], xerr=mem[1], yerr=acc[1], fmt="o", capsize=3, label=rs[0]["label"])
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
    return "Fashion-MNIST in --data-root (default: the Debian package's folder)"


def _epilog() -> str:
    lines = ["streams (--stream):"]
    lines += [f"  {name:<16} {spec.label}: {_stream_data(name)}" for name, spec in sorted(STREAMS.items())]
    lines += ["", "presets (--preset):"]
    lines += [f"  {name:<16} {_PRESET_HELP.get(name, '')}" for name in sorted(PRESETS)]
    lines += ["", "methods (--methods; default: all of them):"]
    lines += [f"  {name:<21} {method.label}" for name, method in METHODS.items()]
    lines += ["", "Data: README.md, section Data. Results: docs/results/."]
    return "\n".join(lines)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.table2", description=__doc__.splitlines()[0],
                                     epilog=_epilog(),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stream", choices=sorted(STREAMS), default="digits", metavar="STREAM",
                        help="the mixed stream every method runs on (default digits; list below)")
    parser.add_argument("--preset", choices=sorted(PRESETS), default="smoke",
                        help="training budget of every method: smoke (default), cpu or paper (see below)")
    parser.add_argument("--methods", nargs="+", choices=list(METHODS), default=list(METHODS), metavar="METHOD",
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
    cli.add_debug_argument(parser)
    args = parser.parse_args(argv)
    if not args.report_only:
        stream = STREAMS[args.stream]
        if stream.needs_data_root and not args.data_root:
            parser.error(f"--stream {args.stream} needs --data-root ({_stream_data(args.stream)})")
        if stream.backbone == "cifar_resnet20" and not args.backbone_weights:
            parser.error(f"--stream {args.stream} needs --backbone-weights (a CIFAR-10 resnet20-*.th file)")
        cli.check_device(parser, args.device)
    return args


def main(args) -> str:
    start = time.perf_counter()
    out = Path(args.out)
    threads = args.threads or max(1, (os.cpu_count() or 1) // args.jobs)
    header = (f"# Table 2 layout: {STREAMS[args.stream].label}, preset `{args.preset}`\n\n"
              f"Mean ± sample std over seeds {' '.join(map(str, args.seeds))}.\n\n")
    if args.report_only:
        ids = [run_id(args.stream, args.preset, m, s) for s in args.seeds for m in args.methods]
        runs = load_runs(out / "runs", ids)
        if not runs:
            raise SystemExit(f"no finished runs of these methods and seeds in {out / 'runs'}")
        table = write_outputs(runs, out, header)
        if not args.no_plots:
            write_plots(runs, out)
        print(table)
        return table
    specs = []
    for seed in args.seeds:
        ids = [run_id(args.stream, args.preset, m, seed) for m in args.methods]
        if all((out / "runs" / f"{i}.json").exists() for i in ids):
            backbone = ""
        else:
            backbone = prepare_backbone(args.stream, args.preset, seed, out, device=args.device,
                                        data_root=args.data_root, weights=args.backbone_weights)
        specs += [RunSpec(args.stream, args.preset, m, seed, backbone, args.device, threads, args.data_root)
                  for m in args.methods]
    runs = run_all(specs, out, jobs=args.jobs, executor=args.executor, ray_address=args.ray_address)
    table = write_outputs(runs, out, header)
    if runs and not args.no_plots:
        write_plots(runs, out)
    print(table)
    print(f"total wall time {time.perf_counter() - start:.1f}s; wrote {out / 'table2.md'}, "
          f"{out / 'runs.csv'}, {out / 'runs.json'}")
    failed = pending_runs(specs, out / "runs")
    if failed:
        raise SystemExit(f"{len(failed)} run(s) failed (no JSON): {', '.join(s.run_id for s in failed)}")
    return table


if __name__ == "__main__":
    cli.run_cli(main, parse_args)
