"""One prepared check of a budget on a device: does everything run there, and what does it cost.

For each stream (by default the paper's three: EMNIST-100 bymerge, JPEG-re-encoded
CIFAR-10, Fashion-MNIST 50) it trains the first ``--tasks`` tasks of four Table 2 rows on
the stream's E0, through the Table 2 engine (:mod:`benchmarks.table2.engine`: the
harness's streams, E0, budget ``--preset``, row builders and :func:`execute_run`): the
library's method presets ``sdr_paper`` and ``sdr_recommended``
(``SDRStrategy.from_benchmark(..., method=...)`` exactly) and online EWC and ER
(Avalanche's ``EWC`` / ``Replay``, the harness rows ``ewc`` and ``replay``). A
:class:`DeviceProbe` measures each run: training images per second, seconds per task,
peak GPU memory, the detection share of the time, and checks that every parameter and
buffer of the model (router state included) ended on the requested device and that an
SDR checkpoint saved there loads on the CPU with the same outputs; the engine gives the
task-aware accuracy on the tasks trained and the memory count. A stream whose data (or,
for emnist100, E0's weights) is absent is skipped with the reason. ``OUT/gpu_check.json``
and ``OUT/gpu_check.md`` hold the results, ``OUT/backbones/`` the E0s; one progress line
per task goes to stderr.

``--preset smoke`` (the harness's smoke budget) checks the check itself on a CPU in CI;
where no stream of ``--streams`` has its data it runs scikit-learn's digits instead and
says so. Its numbers measure nothing.

    python -m benchmarks.table2.gpu_check --device cuda --tasks 4 --data-root DATA --out results/gpu_check
    python -m benchmarks.table2.gpu_check --device cpu --tasks 4 --preset smoke --out /tmp/gpu_check
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import sys
import time
import warnings
from typing import Any, Callable, Dict, List, Optional, Tuple

from avalanche_sdr import cli
from benchmarks.table2 import catalogue
from benchmarks.table2.specs import RunProbe, RunSpec

FASHION_ROOT = "/usr/share/datasets/fashion-mnist"
"""Where the Debian package ``dataset-fashion-mnist`` puts Fashion-MNIST (the default
of ``--fashion-root``)."""

DIGITS = "digits"
"""The stream ``--preset smoke`` runs where no stream of ``--streams`` has its data (bundled with scikit-learn)."""

SMOKE = "smoke"
"""The harness's budget for checking that things run (:data:`benchmarks.table2.catalogue.PRESETS`)."""

PAPER_STREAMS = ("emnist100", "cifar10", "fashion50")
"""The paper's streams, the default of ``--streams``."""

STREAM_DATA: Dict[str, str] = {
    "emnist100": "DATA_ROOT/EMNIST/raw/emnist-bymerge-*-ubyte (python ../shared/data/make_emnist_root.py DATA_ROOT) "
                 "and E0's weights, --backbone-weights resnet20-*.th",
    "cifar10": "DATA_ROOT/cifar-10-batches-py/ (python ../shared/data/make_cifar10_root.py DATA_ROOT)",
    DIGITS: "scikit-learn's bundled digits",
}
"""What a stream reads, said when it is skipped; the Fashion-MNIST streams read
``--fashion-root``."""

METHODS = ("sdr_paper", "sdr_recommended", "ewc", "replay")
"""The Table 2 rows the check runs on every stream, in table order (``--methods``): rows
whose repository the checkpoint check can rebuild on the CPU."""


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.table2.gpu_check",
                                     description=cli.description(__doc__),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda",
                        help="torch device to check: cuda (default), cuda:1, cpu, ... (checked before anything runs)")
    parser.add_argument("--tasks", type=cli.positive_int, default=4, metavar="N",
                        help="train the first N tasks of each stream (default 4: the 3 warm-start tasks and one "
                        "detected task)")
    parser.add_argument("--preset", choices=catalogue.PRESETS, default="paper",
                        help="the training budget, a preset of python -m benchmarks.table2 (default paper; smoke: "
                        "checks the check itself, on digits where no stream of --streams has its data, and "
                        "measures nothing)")
    parser.add_argument("--streams", nargs="+", choices=list(catalogue.STREAMS), default=list(PAPER_STREAMS),
                        metavar="STREAM", help=f"harness streams to run (default: the paper's three, "
                        f"{' '.join(PAPER_STREAMS)})")
    parser.add_argument("--methods", nargs="+", choices=list(METHODS), default=list(METHODS), metavar="METHOD",
                        help=f"Table 2 rows to run, of {list(METHODS)} (default: all)")
    parser.add_argument("--data-root", type=cli.existing_dir, default=None, metavar="DIR",
                        help="folder holding EMNIST/raw/emnist-bymerge-*-ubyte and cifar-10-batches-py/ "
                        "(torchvision layout); without it, or where a stream's files are absent, the stream is "
                        "skipped with the reason")
    parser.add_argument("--fashion-root", default=FASHION_ROOT, metavar="DIR",
                        help=f"Fashion-MNIST folder (default: {FASHION_ROOT}; absent: the stream is skipped)")
    parser.add_argument("--backbone-weights", type=cli.existing_file, default=None, metavar="FILE",
                        help="emnist100's E0, a CIFAR-10 resnet20-*.th file (as python -m benchmarks.table2 takes "
                        "it); without it emnist100 is skipped with the reason")
    parser.add_argument("--run-seconds", type=cli.positive_int, default=None, metavar="S",
                        help="a run starts no further task after S seconds (the accuracy is then over the tasks it "
                        "trained, the table says how many); default: no limit. The outputs are written after every "
                        "run, so a check stopped from outside keeps the runs it finished")
    parser.add_argument("--seed", type=cli.seed, default=0, help="seed of the streams and of training (default 0)")
    parser.add_argument("--out", type=cli.output_dir, default="results/gpu_check", metavar="DIR",
                        help="folder for gpu_check.json, gpu_check.md, the E0s (OUT/backbones/) and the SDR runs' "
                        "checkpoints (OUT/checkpoints/<stream>_<method>/, replaced by each run; default "
                        "results/gpu_check; checked before anything runs)")
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


def checkpoint_roundtrip(strategy, spec, benchmark, directory: str) -> Dict[str, Any]:
    """Save the trained repository's checkpoint in ``directory`` on the run's device, load
    it into a fresh repository on the CPU and compare its logits with the trained
    repository's on the first test task's images.

    :return: ``{"loaded_on": "cpu", "max_abs_logit_difference", "passed"}``; passed when
        the difference is at most 1 % of the largest logit (TF32 and kernel choices
        differ between devices; a wrong tensor gives differences of the logits' size).
    """
    import shutil

    import torch

    from avalanche_sdr import build_sdr_model
    from avalanche_sdr.benchmarks import experience_tensors
    from avalanche_sdr.training import SDRCheckpointPlugin, load_repository
    from benchmarks.table2.engine import make_backbone
    from benchmarks.table2.methods import STREAMS

    if os.path.isdir(directory):  # a checkpoint of an earlier check: replaced
        shutil.rmtree(directory)
    SDRCheckpointPlugin(directory).save(strategy)
    stream = STREAMS[spec.stream]
    backbone = make_backbone(spec.stream)
    backbone.load_state_dict(torch.load(spec.backbone_path, weights_only=True)["state_dict"])
    eft = {k: v for k, v in dict(spec.options).items() if k in ("a", "b")}
    fresh = build_sdr_model(backbone, in_channels=stream.in_channels, image_size=stream.image_size,
                            latent_dim=stream.latent_dim, vae_width=stream.vae_width,
                            generator="independent" if strategy.model.has_generators else None, **eft)
    load_repository(directory, fresh)
    experience = benchmark.test_stream[0]
    x, _, _ = experience_tensors(experience)
    x = x[:64]
    task = int(experience.task_labels[0])
    model = strategy.model.eval()
    with torch.no_grad():
        here = model(x.to(spec.device), task).cpu()
        loaded = fresh(x, task)
    difference = float((here - loaded).abs().max())
    scale = float(here.abs().max())
    return {"loaded_on": "cpu", "max_abs_logit_difference": difference,
            "passed": difference <= 0.01 * max(1.0, scale)}


class DeviceProbe(RunProbe):
    """The check's measures of one run through the engine (module doc): per-task seconds
    (synchronised with the device), training throughput, peak GPU memory, the detection
    share, the device placement of every tensor and of every router's predictions, and an
    SDR checkpoint's round trip.

    :param device: the ``torch.device`` checked.
    :param out: the check's output folder (SDR checkpoints in ``OUT/checkpoints/``).
    :param tasks: the run's number of tasks (for the progress lines).
    :param run_seconds: start no further task once this many seconds have passed since the
        run's first task began (``None``: no limit); the first task always trains.
    """

    def __init__(self, device, out: str, tasks: int, run_seconds: Optional[float] = None):
        self.device, self.out, self.tasks, self.run_seconds = device, out, tasks, run_seconds
        self.seconds: List[float] = []
        self.decisions: List[str] = []
        self.began: Optional[float] = None
        self._tick = 0.0

    def start(self, spec, strategy, benchmark) -> None:
        import torch

        self.spec, self.benchmark = spec, benchmark
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(self.device)
        self.throughput = _throughput_plugin(self.device)
        strategy.plugins.append(self.throughput)

    def before_task(self, index: int, experience) -> bool:
        now = time.perf_counter()
        if self.began is None:
            self.began = now
        if index and self.run_seconds is not None and now - self.began >= self.run_seconds:
            print(f"[gpu_check] {self.spec.stream} {self.spec.method}: --run-seconds {self.run_seconds:g} reached, "
                  f"stopped after {index} task(s)", file=sys.stderr, flush=True)
            return False
        _synchronize(self.device)
        self._tick = time.perf_counter()
        return True

    def after_task(self, index: int, experience, strategy) -> None:
        _synchronize(self.device)
        self.seconds.append(time.perf_counter() - self._tick)
        note = ""
        records = getattr(strategy, "detection_records", None)
        if records is not None:  # an SDR row
            record = records[-1]
            self.decisions.append(record.decision)
            note = f", {record.decision} (detection {record.detection_seconds:.1f}s)"
        print(f"[gpu_check] {self.spec.stream} {self.spec.method}: task {index + 1}/{self.tasks} "
              f"(label {int(experience.task_labels[0])}) {self.seconds[-1]:.1f}s{note}", file=sys.stderr, flush=True)

    def finish(self, spec, strategy, run: Dict[str, Any]) -> Dict[str, Any]:
        import torch

        from avalanche_sdr.benchmarks import experience_tensors
        from avalanche_sdr.evaluation import BYTES_PER_MB

        result: Dict[str, Any] = {
            "images_per_second": self.throughput.images / self.throughput.seconds if self.throughput.seconds else None,
            "training_images": self.throughput.images,
            "seconds_per_task": list(self.seconds),
            "mean_seconds_per_task": sum(self.seconds) / len(self.seconds),
            "peak_gpu_memory_mb": (torch.cuda.max_memory_allocated(self.device) / BYTES_PER_MB
                                   if self.device.type == "cuda" else None),
            "detection_share": None,
            "device_check": device_check(strategy.model, self.device),
            "checkpoint": None,
            "decisions": list(self.decisions) or None,
        }
        if run["detection"] is not None:  # an SDR row
            result["detection_share"] = run["detection"]["detection_seconds"] / sum(self.seconds)
            result["checkpoint"] = checkpoint_roundtrip(
                strategy, spec, self.benchmark, os.path.join(self.out, "checkpoints", f"{spec.stream}_{spec.method}"))
            x = experience_tensors(self.benchmark.test_stream[0])[0][:64].to(self.device)
            check = result["device_check"]
            for router in strategy.model.router_names:
                prediction = strategy.model.predict(x, router)
                on_device = all(same_device(t.device, self.device)
                                for t in (prediction.class_ids, prediction.tasks, prediction.entries))
                check[f"predict_{router}_on_device"] = on_device
                check["passed"] = check["passed"] and on_device
        return result


# ------------------------------------------------------------------ streams
def stream_data_root(name: str, args) -> Optional[str]:
    """The data folder the harness stream ``name`` reads: ``--fashion-root`` for the
    Fashion-MNIST streams, ``--data-root`` for those that need one, none for digits."""
    if catalogue.STREAMS[name].needs_data_root:
        return args.data_root
    return None if name == DIGITS else args.fashion_root


def _stream_or_reason(name: str, args) -> Tuple[Any, Optional[str]]:
    """Stream ``name`` as the engine builds it for ``args`` (``--seed``, ``--preset``), or
    why it cannot run: ``(benchmark, None)`` or ``(None, reason)`` (an argument missing,
    its data absent)."""
    from avalanche_sdr.benchmarks import CorruptDatasetError, DatasetNotFoundError
    from benchmarks.table2.methods import PRESETS, STREAMS

    data = STREAM_DATA.get(name, "the four Fashion-MNIST idx files in --fashion-root "
                                 "(apt-get install dataset-fashion-mnist)")
    entry = catalogue.STREAMS[name]
    if entry.needs_data_root and args.data_root is None:
        return None, f"no --data-root given; the stream reads {data}"
    if entry.backbone == "cifar_resnet20" and args.backbone_weights is None:
        return None, f"no --backbone-weights given; the stream reads {data}"
    try:
        return STREAMS[name].build(args.seed, PRESETS[args.preset].capped, stream_data_root(name, args)), None
    except (DatasetNotFoundError, CorruptDatasetError) as err:
        return None, f"data not found: {data} ({' '.join(str(err).split())})"


def run_stream(name: str, args, device, out: str, save: Callable[[Dict[str, Any]], None]) -> Dict[str, Any]:
    """Run stream ``name`` through the Table 2 engine (skipped with the reason when its
    data is absent): E0 made once (:func:`benchmarks.table2.engine.prepare_backbone`, in
    ``OUT/backbones``; its pretraining time measured on the device), then every method of
    ``args.methods`` on the first ``args.tasks`` tasks under a :class:`DeviceProbe`;
    ``save(entry)`` after each run (the outputs then hold every finished run, should the
    check be stopped)."""
    from benchmarks.table2.engine import backbone_note, execute_run, prepare_backbone
    from benchmarks.table2.methods import STREAMS

    entry: Dict[str, Any] = {"stream": name, "label": catalogue.STREAMS[name].label}
    benchmark, reason = _stream_or_reason(name, args)
    if reason is not None:
        print(f"[gpu_check] {name}: skipped, {reason}", file=sys.stderr, flush=True)
        return dict(entry, status="skipped", reason=reason)
    data_root = stream_data_root(name, args)
    _synchronize(device)
    start = time.perf_counter()
    backbone = prepare_backbone(name, args.preset, args.seed, out, device=str(device), data_root=data_root,
                                weights=args.backbone_weights)
    _synchronize(device)
    pretrain_seconds = time.perf_counter() - start
    print(f"[gpu_check] {name}: E0 ready in {pretrain_seconds:.1f}s ({backbone_note(name, args.preset)})",
          file=sys.stderr, flush=True)
    tasks = min(args.tasks, len(benchmark.train_stream))
    stream = STREAMS[name]
    entry.update(status="ran", tasks=tasks, n_warm_start=benchmark.n_warm_start,
                 training_images_per_task=[len(e.dataset) for e in benchmark.train_stream[:tasks]],
                 backbone=backbone_note(name, args.preset), pretrain_seconds=pretrain_seconds,
                 generators=f"independent ConvVAE per entry (latent {stream.latent_dim}, width {stream.vae_width}) "
                 "where the row's detector reads generators (sdr_paper)",
                 runs=[])
    for method in args.methods:
        spec = RunSpec(name, args.preset, method, args.seed, backbone, str(device), torch_threads(), data_root,
                       tasks=tasks)
        with warnings.catch_warnings():
            # Avalanche re-enables Replay's ``update`` DeprecationWarning on every call (the
            # harness's workers print no warning either).
            warnings.showwarning = lambda *a, **k: None
            run = execute_run(spec, probe=DeviceProbe(device, out, tasks, args.run_seconds))
        entry["runs"].append({
            "method": method, "label": run["label"], "tasks_trained": run["tasks_trained"],
            **{key: run[key] for key in ("images_per_second", "training_images", "seconds_per_task",
                                         "mean_seconds_per_task", "peak_gpu_memory_mb", "detection_share")},
            "accuracy": run["average_accuracy"], "task_accuracies": run["task_accuracies"],
            "memory_mb": run["memory_mb"],
            **{key: run[key] for key in ("device_check", "checkpoint", "decisions")},
            **({"task_free": run["task_free"]} if "task_free" in run else {}),
        })
        save(entry)
    return entry


def torch_threads() -> int:
    """The torch threads of this process (:func:`avalanche_sdr.cli.set_threads` set them)."""
    import torch

    return torch.get_num_threads()


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
             f"preset `{report['preset']}`{' (a check of the check: measures nothing)' if report['preset'] == SMOKE else ''}; "
             f"torch {env['torch']}, {env['torch_threads']} torch thread(s).", "",
             "images/s: training mini-batch images per second of training epochs; s/task: wall seconds of "
             "`strategy.train` per task (detection, training, VAE fitting, router fit); detection share: "
             "detection seconds / those seconds; accuracy: task-aware, mean over the tasks trained; on device: "
             "every parameter and buffer of the model (router state included) on the device; checkpoint on CPU: "
             "the SDR repository's checkpoint, saved on the device after the run, gives the same logits loaded "
             "on the CPU.", "",
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

    from benchmarks.table2.methods import PRESETS

    start = time.perf_counter()
    device = torch.device(args.device)
    threads = cli.set_threads(args.threads, args.device)
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    preset = PRESETS[args.preset]
    report: Dict[str, Any] = {
        "command": "python -m benchmarks.table2.gpu_check " + " ".join(sys.argv[1:]),
        "environment": environment(device, threads), "tasks": args.tasks, "preset": args.preset, "seed": args.seed,
        "run_seconds": args.run_seconds, "settings": preset.sdr.to_dict(),
        "baseline_settings": dataclasses.asdict(preset.baselines),
        "streams": [], "notes": [],
        "complete": False, "wall_seconds": None}

    def save(entry: Dict[str, Any]) -> None:
        report["wall_seconds"] = time.perf_counter() - start
        write_outputs(dict(report, streams=report["streams"] + [entry]), out)

    for name in args.streams:
        report["streams"].append(run_stream(name, args, device, out, save))
    if args.preset == SMOKE and not any(s["status"] == "ran" for s in report["streams"]):
        report["notes"].append(f"--preset {SMOKE}: no stream of {args.streams} had its data, so "
                               f"the stream {DIGITS} ({catalogue.STREAMS[DIGITS].label}, scikit-learn's digits) ran instead")
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


__all__ = ["DIGITS", "DeviceProbe", "METHODS", "PAPER_STREAMS", "SMOKE", "STREAM_DATA", "checkpoint_roundtrip",
           "device_check", "environment", "main", "markdown", "parse_args", "run_stream", "same_device",
           "stream_data_root", "torch_threads", "write_outputs"]


if __name__ == "__main__":
    cli.run_cli(main, parse_args)
