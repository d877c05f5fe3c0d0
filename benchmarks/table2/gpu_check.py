"""One prepared check of the paper's settings on a device: does everything run there, and what does it cost.

For each paper stream (EMNIST-100 bymerge, JPEG-re-encoded CIFAR-10, Fashion-MNIST 50)
it trains the first ``--tasks`` tasks at the paper's budget (``PAPER_SETTINGS``; the
baselines' ``BASELINE_SETTINGS["paper"]``) with four methods on one E0 (a small CNN
pretrained on the stream's warm-start tasks, as the examples' default): SDR's method
presets ``"paper"`` and ``"recommended"`` (``SDRStrategy(method=...)``) and Avalanche's
own online EWC and ER (``avalanche.training.EWC`` / ``Replay``). Per run it measures
training images per second, seconds per task, peak GPU memory, the detection share of
the time, the task-aware accuracy on the tasks seen, the memory count, and checks that
every parameter and buffer of the model (router state included) ended on the requested
device and that an SDR checkpoint saved there loads on the CPU with the same outputs.
A stream whose data is absent is skipped with the reason. ``OUT/gpu_check.json`` and
``OUT/gpu_check.md`` hold the results; one progress line per task goes to stderr.

``--tiny`` shrinks everything (60 training images a task, one epoch, one warm-start
task so that the second task is detected, tiny E0 and VAEs) so that the check itself
is tested on a CPU in CI; where no paper stream's data is found it runs scikit-learn's
digits (``MixedDigits``) instead and says so. Its numbers measure nothing.

    python -m benchmarks.table2.gpu_check --device cuda --tasks 4 --data-root DATA --out results/gpu_check
    python -m benchmarks.table2.gpu_check --device cpu --tasks 2 --tiny --out /tmp/gpu_check
"""
from __future__ import annotations

import argparse
import copy
import dataclasses
import os
import platform
import sys
import time
import types
import warnings
from typing import Any, Callable, Dict, List, Optional

from avalanche_sdr import cli

FASHION_ROOT = "/usr/share/datasets/fashion-mnist"
"""Where the Debian package ``dataset-fashion-mnist`` puts Fashion-MNIST (the default
of ``--fashion-root``)."""

TINY_SIZES = dict(train_per_task=60, valid_per_task=10, test_per_task=20)
"""``--tiny``: images per task (train / validation / test) of the paper streams."""

DIGITS = "digits"
"""The stream ``--tiny`` runs where no paper stream's data is found (bundled with scikit-learn)."""


@dataclasses.dataclass(frozen=True)
class StreamSpec:
    """A stream of the check.

    :param label: its name in the outputs.
    :param build: ``build(args, benchmarks_module, sizes) -> benchmark``; ``sizes`` are
        per-task sizes and ``n_warm_start`` (empty for the paper's).
    :param images: ``(in_channels, image_size, latent_dim, vae_width)`` of the repository.
    :param data: what the stream reads, said when it is skipped.
    """

    label: str
    build: Callable[[Any, Any, Dict[str, Any]], Any]
    images: tuple
    data: str


STREAMS: Dict[str, StreamSpec] = {
    "emnist100": StreamSpec(
        "MixedEMNIST bymerge (100 tasks)",
        lambda args, b, sizes: b.MixedEMNIST(args.data_root, split="bymerge", seed=args.seed, **sizes),
        (1, 28, 16, 32),
        "DATA_ROOT/EMNIST/raw/emnist-bymerge-*-ubyte (python ../shared/data/make_emnist_root.py DATA_ROOT)"),
    "cifar10": StreamSpec(
        "MixedCIFAR10 (10 tasks, JPEG-re-encoded)",
        lambda args, b, sizes: b.MixedCIFAR10(args.data_root, seed=args.seed, **sizes),
        (3, 32, 32, 32),
        "DATA_ROOT/cifar-10-batches-py/ (python ../shared/data/make_cifar10_root.py DATA_ROOT)"),
    "fashion50": StreamSpec(
        "MixedFashionMNIST (50 tasks)",
        lambda args, b, sizes: b.MixedFashionMNIST(args.fashion_root, n_splits=10, seed=args.seed, **sizes),
        (1, 28, 16, 32),
        "the four Fashion-MNIST idx files in --fashion-root (apt-get install dataset-fashion-mnist)"),
    DIGITS: StreamSpec(
        "MixedDigits (10 tasks, scikit-learn's digits)",
        lambda args, b, sizes: b.MixedDigits(seed=args.seed, n_warm_start=sizes.get("n_warm_start", 3)),
        (1, 8, 8, 16),
        "scikit-learn's bundled digits"),
}
"""The streams ``--streams`` names; the first three are the paper's."""

PAPER_STREAMS = ("emnist100", "cifar10", "fashion50")


@dataclasses.dataclass(frozen=True)
class MethodSpec:
    """A method of the check: an ``SDRStrategy`` method preset or an Avalanche baseline.

    :param label: its name in the outputs.
    :param sdr_method: the name of an SDR method preset (``SDRStrategy(method=...)``,
        :data:`avalanche_sdr.training.METHODS`), or ``None`` for a baseline.
    :param baseline: ``baseline(run, evaluator) -> strategy``, or ``None`` for SDR.
    """

    label: str
    sdr_method: Optional[str] = None
    baseline: Optional[Callable[[Any, Any], Any]] = None

    @property
    def sdr(self) -> bool:
        """An SDR run (detection share, checkpoint, routers)."""
        return self.sdr_method is not None


def _ewc(run, evaluator):
    from avalanche_sdr import baselines

    s = run.baseline_settings
    return baselines.ewc_strategy(run.backbone, **s.training(), **s.ewc(), evaluator=evaluator, device=run.device)


def _replay(run, evaluator):
    from avalanche_sdr import baselines

    s = run.baseline_settings
    return baselines.replay_strategy(run.backbone, mem_size=s.buffer_size(run.full_train_stream), **s.training(),
                                     evaluator=evaluator, device=run.device)


METHODS: Dict[str, MethodSpec] = {
    "sdr_paper": MethodSpec("SDR, method='paper'", sdr_method="paper"),
    "sdr_recommended": MethodSpec("SDR, method='recommended'", sdr_method="recommended"),
    "ewc": MethodSpec("Online EWC (Avalanche EWC)", baseline=_ewc),
    "replay": MethodSpec("ER (Avalanche Replay)", baseline=_replay),
}
"""The runs of every stream, in table order."""


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=cli.description(__doc__),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda",
                        help="torch device to check: cuda (default), cuda:1, cpu, ... (checked before anything runs)")
    parser.add_argument("--tasks", type=cli.positive_int, default=4, metavar="N",
                        help="train the first N tasks of each stream (default 4: the 3 warm-start tasks and one "
                        "detected task)")
    parser.add_argument("--tiny", action="store_true",
                        help="tiny sizes (60 images a task, 1 epoch, 1 warm-start task, tiny E0 and VAEs) to test "
                        "the check itself; digits where no paper stream's data is found; measures nothing")
    parser.add_argument("--streams", nargs="+", choices=list(STREAMS), default=list(PAPER_STREAMS),
                        metavar="STREAM", help=f"streams to run, of {list(STREAMS)} (default: the paper's three)")
    parser.add_argument("--methods", nargs="+", choices=list(METHODS), default=list(METHODS), metavar="METHOD",
                        help=f"methods to run, of {list(METHODS)} (default: all)")
    parser.add_argument("--data-root", type=cli.existing_dir, default=None, metavar="DIR",
                        help="folder holding EMNIST/raw/emnist-bymerge-*-ubyte and cifar-10-batches-py/ "
                        "(torchvision layout); without it, or where a stream's files are absent, the stream is "
                        "skipped with the reason")
    parser.add_argument("--fashion-root", default=FASHION_ROOT, metavar="DIR",
                        help=f"Fashion-MNIST folder (default: {FASHION_ROOT}; absent: the stream is skipped)")
    parser.add_argument("--pretrain-epochs", type=cli.non_negative_int, default=None, metavar="N",
                        help="epochs of E0's pretraining on the warm-start tasks (default 5; --tiny: 1)")
    parser.add_argument("--run-seconds", type=cli.positive_int, default=None, metavar="S",
                        help="a run starts no further task after S seconds (the accuracy is then over the tasks it "
                        "trained, the table says how many); default: no limit. The outputs are written after every "
                        "run, so a check stopped from outside keeps the runs it finished")
    parser.add_argument("--seed", type=cli.seed, default=0, help="seed of the streams and of training (default 0)")
    parser.add_argument("--out", type=cli.output_dir, default="results/gpu_check", metavar="DIR",
                        help="folder for gpu_check.json, gpu_check.md and the SDR runs' checkpoints (OUT/checkpoints/"
                        "<stream>_<method>/, replaced by each run; default results/gpu_check; checked before "
                        "anything runs)")
    cli.add_threads_argument(parser)
    cli.add_debug_argument(parser)
    args = parser.parse_args(argv)
    cli.check_device(parser, args.device)
    return args


# ------------------------------------------------------------------ measuring
def _synchronize(device) -> None:
    """Wait for the device's queued work, so that wall-clock seconds are the work's."""
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def same_device(actual, requested) -> bool:
    """Whether a tensor's ``actual`` device is the ``requested`` one (``cuda`` means
    the current CUDA device)."""
    import torch

    if actual.type != requested.type:
        return False
    if requested.type == "cuda":
        want = requested.index if requested.index is not None else torch.cuda.current_device()
        return actual.index == want
    return requested.index is None or actual.index in (None, requested.index)


def device_check(model, device) -> Dict[str, Any]:
    """Every parameter and buffer of ``model`` (an SDR repository's router and detection
    states are buffers) on ``device``.

    :return: ``{"passed", "tensors", "router_state_tensors", "misplaced", "misplaced_count"}``:
        tensors checked, of them the router states', and the misplaced ones (``misplaced``
        names at most 20, with their device).
    """
    named = [("parameter", n, t) for n, t in model.named_parameters()]
    named += [("buffer", n, t) for n, t in model.named_buffers()]
    misplaced = [f"{kind} {name} on {t.device}" for kind, name, t in named if not same_device(t.device, device)]
    return {"passed": not misplaced, "tensors": len(named),
            "router_state_tensors": sum(1 for _, n, _t in named if n.startswith("routing_states.")),
            "misplaced": misplaced[:20], "misplaced_count": len(misplaced)}


def _throughput_plugin(device):
    """An Avalanche plugin that counts training images and times the training epochs
    (synchronised on a GPU): the images-per-second figure, nothing else."""
    from avalanche.core import SupervisedPlugin

    class Throughput(SupervisedPlugin):
        def __init__(self):
            super().__init__()
            self.images, self.seconds, self._start = 0, 0.0, 0.0

        def before_training_epoch(self, strategy, **kwargs):
            _synchronize(device)
            self._start = time.perf_counter()

        def after_training_iteration(self, strategy, **kwargs):
            self.images += int(strategy.mb_x.shape[0])

        def after_training_epoch(self, strategy, **kwargs):
            _synchronize(device)
            self.seconds += time.perf_counter() - self._start

    return Throughput()


def checkpoint_roundtrip(strategy, run) -> Dict[str, Any]:
    """Load the run's last checkpoint (saved on the run's device) into a fresh repository
    on the CPU and compare its logits with the trained repository's on the first test
    task's images.

    :return: ``{"loaded_on": "cpu", "max_abs_logit_difference", "passed"}``; passed when
        the difference is at most 1 % of the largest logit (TF32 and kernel choices
        differ between devices; a wrong tensor gives differences of the logits' size).
    """
    import torch

    from avalanche_sdr import build_sdr_model
    from avalanche_sdr.benchmarks import experience_tensors
    from avalanche_sdr.training import load_repository

    in_channels, image_size, latent_dim, vae_width = run.images
    fresh = build_sdr_model(copy.deepcopy(run.backbone).cpu(), in_channels=in_channels, image_size=image_size,
                            latent_dim=latent_dim, vae_width=vae_width,
                            generator="independent" if strategy.model.has_generators else None)
    load_repository(strategy.checkpoint.directory, fresh)
    experience = run.benchmark.test_stream[0]
    x, _, _ = experience_tensors(experience)
    x = x[:64]
    task = int(experience.task_labels[0])
    model = strategy.model.eval()
    with torch.no_grad():
        here = model(x.to(run.device), task).cpu()
        loaded = fresh(x, task)
    difference = float((here - loaded).abs().max())
    scale = float(here.abs().max())
    return {"loaded_on": "cpu", "max_abs_logit_difference": difference,
            "passed": difference <= 0.01 * max(1.0, scale)}


def _task_line(stream: str, method: str, i: int, n: int, task: int, seconds: float, note: str) -> None:
    print(f"[gpu_check] {stream} {method}: task {i + 1}/{n} (label {task}) {seconds:.1f}s{note}",
          file=sys.stderr, flush=True)


def run_method(name: str, run, run_seconds: Optional[float] = None) -> Dict[str, Any]:
    """Train the first tasks of ``run``'s stream with method ``name`` and measure it (module doc).

    :param run_seconds: start no further task once this many seconds have passed since the
        run's first task began (``None``: no limit); the first task always trains, and the
        accuracy is over the tasks trained.
    """
    import torch
    from avalanche.evaluation.metrics import accuracy_metrics
    from avalanche.training.plugins import EvaluationPlugin

    from avalanche_sdr import SDRStrategy
    from avalanche_sdr.evaluation import BYTES_PER_MB, repository_memory_bytes
    from avalanche_sdr.training.stream_runner import final_test_accuracies

    spec = METHODS[name]
    cli.seed_everything(run.seed)
    if run.device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(run.device)
    throughput = _throughput_plugin(run.device)
    evaluator = EvaluationPlugin(accuracy_metrics(experience=True), loggers=[])
    if spec.sdr:
        checkpoint_dir = os.path.join(run.out, "checkpoints", f"{run.stream}_{name}")
        if os.path.isdir(checkpoint_dir):  # a checkpoint of an earlier check: this run starts afresh
            import shutil

            shutil.rmtree(checkpoint_dir)
        _, _, latent_dim, vae_width = run.images
        strategy = SDRStrategy.from_benchmark(copy.deepcopy(run.backbone), run.benchmark, device=run.device,
                                              latent_dim=latent_dim, vae_width=vae_width,
                                              n_warm_start=run.benchmark.n_warm_start, evaluator=evaluator,
                                              plugins=[throughput], checkpoint_dir=checkpoint_dir,
                                              method=spec.sdr_method, settings=run.settings)
    else:
        strategy = spec.baseline(run, evaluator)
        strategy.plugins.append(throughput)
    seconds: List[float] = []
    decisions: List[str] = []
    began = time.perf_counter()
    for i, experience in enumerate(run.benchmark.train_stream):
        if i and run_seconds is not None and time.perf_counter() - began >= run_seconds:
            print(f"[gpu_check] {run.stream} {name}: --run-seconds {run_seconds:g} reached, stopped after {i} "
                  "task(s)", file=sys.stderr, flush=True)
            break
        _synchronize(run.device)
        start = time.perf_counter()
        with warnings.catch_warnings():
            # Avalanche re-enables Replay's ``update`` DeprecationWarning on every call.
            warnings.showwarning = lambda *args, **kwargs: None
            strategy.train(experience, eval_streams=[])
        _synchronize(run.device)
        seconds.append(time.perf_counter() - start)
        note = ""
        if spec.sdr:
            record = strategy.detection_records[-1]
            decisions.append(record.decision)
            note = f", {record.decision} (detection {record.detection_seconds:.1f}s)"
        _task_line(run.stream, name, i, len(run.benchmark.train_stream), int(experience.task_labels[0]),
                   seconds[-1], note)
    trained = len(seconds)
    accuracies = final_test_accuracies(strategy, run.benchmark.test_stream[:trained])
    result: Dict[str, Any] = {
        "method": name,
        "label": spec.label,
        "tasks_trained": trained,
        "images_per_second": throughput.images / throughput.seconds if throughput.seconds else None,
        "training_images": throughput.images,
        "seconds_per_task": seconds,
        "mean_seconds_per_task": sum(seconds) / len(seconds),
        "peak_gpu_memory_mb": (torch.cuda.max_memory_allocated(run.device) / BYTES_PER_MB
                               if run.device.type == "cuda" else None),
        "detection_share": None,
        "accuracy": sum(accuracies) / len(accuracies),
        "task_accuracies": accuracies,
        "memory_mb": repository_memory_bytes(strategy) / BYTES_PER_MB,
        "device_check": device_check(strategy.model, run.device),
        "checkpoint": None,
        "decisions": decisions or None,
    }
    if spec.sdr:
        detection = sum(r.detection_seconds for r in strategy.detection_records)
        result["detection_share"] = detection / sum(seconds)
        result["checkpoint"] = checkpoint_roundtrip(strategy, run)
        for router in strategy.model.router_names:
            x = run.first_test_images.to(run.device)
            prediction = strategy.model.predict(x, router)
            on_device = all(same_device(t.device, run.device)
                            for t in (prediction.class_ids, prediction.tasks, prediction.entries))
            check = result["device_check"]
            check[f"predict_{router}_on_device"] = on_device
            check["passed"] = check["passed"] and on_device
    return result


# ------------------------------------------------------------------ streams
def _truncated(benchmark, tasks: int):
    """The first ``tasks`` tasks of ``benchmark`` (train, test), with its warm-start count."""
    return types.SimpleNamespace(train_stream=benchmark.train_stream[:tasks],
                                 test_stream=benchmark.test_stream[:tasks],
                                 n_warm_start=min(benchmark.n_warm_start, tasks))


def _settings(tiny: bool):
    """SDR's and the baselines' budgets: the paper's, or ``--tiny``'s one epoch."""
    from avalanche_sdr import PAPER_SETTINGS
    from avalanche_sdr.baselines import BASELINE_SETTINGS

    sdr, baseline = PAPER_SETTINGS, BASELINE_SETTINGS["paper"]
    if tiny:
        sdr = sdr.replace(new_task_epochs=1, lr_milestones=(), reuse_epochs=1, vae_epochs=1, vae_patience=1,
                          train_mb_size=32, vae_mb_size=32)
        baseline = dataclasses.replace(baseline, epochs=1, train_mb_size=32)
    return sdr, baseline


def run_stream(name: str, args, device, out: str, save: Callable[[Dict[str, Any]], None]) -> Dict[str, Any]:
    """Build stream ``name`` (skipped with the reason when its data is absent), pretrain
    E0 on its warm-start tasks, run every method; ``save(entry)`` after each run (the
    outputs then hold every finished run, should the check be stopped)."""
    import importlib

    from avalanche_sdr.benchmarks import CorruptDatasetError, DatasetNotFoundError, experience_tensors
    from avalanche_sdr.models import small_cnn_backbone
    from avalanche_sdr.training import pretrain_backbone

    spec = STREAMS[name]
    sizes: Dict[str, Any] = {}
    if args.tiny:
        sizes = dict(TINY_SIZES, n_warm_start=1) if name != DIGITS else dict(n_warm_start=1)
    benchmarks = importlib.import_module("avalanche_sdr.benchmarks")
    entry: Dict[str, Any] = {"stream": name, "label": spec.label}
    if spec.data.startswith("DATA_ROOT") and args.data_root is None:
        reason = f"no --data-root given; the stream reads {spec.data}"
        print(f"[gpu_check] {name}: skipped, {reason}", file=sys.stderr, flush=True)
        return dict(entry, status="skipped", reason=reason)
    try:
        full = spec.build(args, benchmarks, sizes)
    except (DatasetNotFoundError, CorruptDatasetError) as err:
        reason = f"data not found: {spec.data} ({' '.join(str(err).split())})"
        print(f"[gpu_check] {name}: skipped, {reason}", file=sys.stderr, flush=True)
        return dict(entry, status="skipped", reason=reason)
    benchmark = _truncated(full, args.tasks)
    in_channels, image_size, latent_dim, vae_width = spec.images
    if args.tiny:
        latent_dim, vae_width = 4, 8
    widths = (8, 16) if args.tiny else (32, 64, 128)
    epochs = args.pretrain_epochs if args.pretrain_epochs is not None else (1 if args.tiny else 5)
    cli.seed_everything(args.seed)
    backbone = small_cnn_backbone(in_channels=in_channels, widths=widths)
    _synchronize(device)
    start = time.perf_counter()
    warm_start = [benchmark.train_stream[i] for i in range(benchmark.n_warm_start)]
    pretrain_backbone(backbone, warm_start, epochs=epochs, lr=2e-3, batch_size=64, device=str(device),
                      verbose=False)
    _synchronize(device)
    pretrain_seconds = time.perf_counter() - start
    print(f"[gpu_check] {name}: E0 pretrained {epochs} epochs on {benchmark.n_warm_start} warm-start task(s) in "
          f"{pretrain_seconds:.1f}s", file=sys.stderr, flush=True)
    settings, baseline_settings = _settings(args.tiny)
    first_test, _, _ = experience_tensors(benchmark.test_stream[0])
    run = types.SimpleNamespace(
        stream=name, benchmark=benchmark, full_train_stream=full.train_stream, backbone=backbone, device=device,
        seed=args.seed, out=out, settings=settings, baseline_settings=baseline_settings,
        images=(in_channels, image_size, latent_dim, vae_width), first_test_images=first_test[:64])
    entry.update(status="ran", tasks=len(benchmark.train_stream), n_warm_start=benchmark.n_warm_start,
                 training_images_per_task=[len(e.dataset) for e in benchmark.train_stream],
                 backbone=f"small_cnn{widths} pretrained {epochs} epochs on the warm-start tasks",
                 pretrain_seconds=pretrain_seconds,
                 generators=f"independent ConvVAE per entry (latent {latent_dim}, width {vae_width}) where the "
                 "method's detector reads generators (sdr_paper)",
                 runs=[])
    for method in args.methods:
        entry["runs"].append(run_method(method, run, args.run_seconds))
        save(entry)
    return entry


# ------------------------------------------------------------------ outputs
def environment(device, threads: int) -> Dict[str, Any]:
    """Where the check ran: device name, torch threads, versions."""
    import avalanche
    import torch

    name = torch.cuda.get_device_name(device) if device.type == "cuda" else (platform.processor() or
                                                                           platform.machine())
    return {"device": str(device), "device_name": name, "torch_threads": threads, "cpu_count": os.cpu_count(),
            "torch": torch.__version__, "cuda": torch.version.cuda, "avalanche": avalanche.__version__,
            "python": platform.python_version(), "load_average": list(os.getloadavg())}


def _cell(value: Optional[float], digits: int, scale: float = 1.0) -> str:
    return "n/a" if value is None else f"{scale * value:.{digits}f}"


def markdown(report: Dict[str, Any]) -> str:
    """The check's table: one row per (stream, method), then the skipped streams."""
    env = report["environment"]
    lines = [f"# GPU check: {env['device_name']} ({env['device']})", "",
             f"`{report['command']}`; {report['tasks']} task(s) per stream, "
             f"{'--tiny sizes (measure nothing)' if report['tiny'] else 'the paper budget (PAPER_SETTINGS)'}; "
             f"torch {env['torch']}, {env['torch_threads']} torch thread(s).", "",
             "images/s: training mini-batch images per second of training epochs; s/task: wall seconds of "
             "`strategy.train` per task (detection, training, VAE fitting, router fit, checkpoint); detection "
             "share: detection seconds / those seconds; accuracy: task-aware, mean over the tasks trained; on "
             "device: every parameter and buffer of the model (router state included) on the device; checkpoint "
             "on CPU: the last SDR checkpoint loaded on the CPU gives the same logits.", "",
             "| stream | method | tasks | images/s | s/task | peak GPU MB | detection share | accuracy (%) | "
             "memory MB | on device | checkpoint on CPU |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |"]
    for stream in report["streams"]:
        for r in stream.get("runs", []):
            checkpoint = "n/a" if r["checkpoint"] is None else ("ok" if r["checkpoint"]["passed"] else "FAILED")
            lines.append(
                f"| {stream['stream']} | {r['method']} | {r['tasks_trained']} | {_cell(r['images_per_second'], 0)} | "
                f"{r['mean_seconds_per_task']:.1f} | {_cell(r['peak_gpu_memory_mb'], 0)} | "
                f"{_cell(r['detection_share'], 1, 100)} % | {100 * r['accuracy']:.2f} | {r['memory_mb']:.2f} | "
                f"{'yes' if r['device_check']['passed'] else 'NO'} | {checkpoint} |".replace("n/a %", "n/a"))
    notes = [f"- {s['stream']}: skipped, {s['reason']}" for s in report["streams"] if s["status"] == "skipped"]
    notes += [f"- {note}" for note in report["notes"]]
    return "\n".join(lines + ([""] + notes if notes else [])) + "\n"


def _failures(report: Dict[str, Any]) -> List[str]:
    """The runs whose device check or checkpoint check failed."""
    return [f"{s['stream']} {r['method']}" for s in report["streams"] for r in s.get("runs", [])
            if not r["device_check"]["passed"] or (r["checkpoint"] is not None and not r["checkpoint"]["passed"])]


def write_outputs(report: Dict[str, Any], out: str) -> str:
    """Write ``OUT/gpu_check.json`` and ``OUT/gpu_check.md``; return the markdown."""
    cli.write_json(os.path.join(out, "gpu_check.json"), report)
    table = markdown(report)
    with open(os.path.join(out, "gpu_check.md"), "w", encoding="utf-8") as f:
        f.write(table)
    return table


def main(args) -> int:
    import torch

    start = time.perf_counter()
    device = torch.device(args.device)
    threads = cli.set_threads(args.threads, args.device)
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    sdr, baseline = _settings(args.tiny)
    report: Dict[str, Any] = {
        "command": "python -m benchmarks.table2.gpu_check " + " ".join(sys.argv[1:]),
        "environment": environment(device, threads), "tasks": args.tasks, "tiny": args.tiny, "seed": args.seed,
        "run_seconds": args.run_seconds, "settings": sdr.to_dict(), "baseline_settings": dataclasses.asdict(baseline),
        "streams": [], "notes": [],
        "complete": False, "wall_seconds": None}

    def save(entry: Dict[str, Any]) -> None:
        report["wall_seconds"] = time.perf_counter() - start
        write_outputs(dict(report, streams=report["streams"] + [entry]), out)

    for name in args.streams:
        report["streams"].append(run_stream(name, args, device, out, save))
    if args.tiny and not any(s["status"] == "ran" for s in report["streams"]):
        report["notes"].append(f"--tiny: no stream of {args.streams} had its data, so {STREAMS[DIGITS].label} "
                               "ran instead")
        print(f"[gpu_check] {report['notes'][-1]}", file=sys.stderr, flush=True)
        report["streams"].append(run_stream(DIGITS, args, device, out, save))
    if any(s["status"] == "ran" and s["n_warm_start"] >= s["tasks"] for s in report["streams"]):
        report["notes"].append("a stream with no more tasks than warm-start tasks ran no detection (raise --tasks)")
    report.update(complete=True, wall_seconds=time.perf_counter() - start)
    print(write_outputs(report, out))
    failed = _failures(report)
    if failed:
        print(f"[gpu_check] FAILED device or checkpoint check: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


__all__ = ["DIGITS", "METHODS", "MethodSpec", "PAPER_STREAMS", "STREAMS", "StreamSpec", "checkpoint_roundtrip",
           "device_check", "environment", "main", "markdown", "parse_args", "run_method",
           "run_stream", "same_device", "write_outputs"]


if __name__ == "__main__":
    cli.run_cli(main, parse_args)
