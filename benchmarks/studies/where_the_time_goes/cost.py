"""Where the time goes (issue #38): the cost ratios of SDR against Avalanche's Naive, in one process.

On one stream and seed, with the Table 2 harness's engine (:func:`benchmarks.table2.engine.execute_run`,
the same runs and clocks as ``python -m benchmarks.table2``), this prints and writes:

* the wall and CPU seconds of Finetune (Avalanche's ``Naive`` on one shared head), SDR
  head-only (``sdr_two_sample_nogen``), SDR ``[accumulate]`` and SDR with its task-free
  routers (``sdr_task_free``; ``--skip-task-free`` leaves it out), and each SDR row's ratio to
  Finetune; ``[accumulate]`` also against head-only, as is every ``[accumulate_top_K]`` row
  that ``--top-layers K ...`` adds (``LearningReuse(top_layers=K)``);
* the test experiences each SDR row passed to ``strategy.eval`` (group curve and final
  evaluation) against the stream's length, and what re-evaluating every task of the
  group after every experience would have passed;
* the CPU seconds of one router fit after a task against the number of entries E, on a
  synthetic repository (:func:`benchmarks.studies.where_the_time_goes.router_fit.router_fit_seconds`);
* images per second of training (a new entry's adapters and head) and of evaluation
  (a task-aware forward at the preset's ``eval_mb_size``), and the evaluation rate of the
  runs themselves;
* torch threads, ``os.getloadavg()`` before and after, the CPU model and the device.

A benchmark, not a test: its numbers depend on the machine and its load (CPU seconds are
the comparable figure on a shared machine). Results: docs/results/where_the_time_goes.md.

Usage: ``python -m benchmarks.studies.where_the_time_goes.cost --stream fashion10 [--seed 0] [--threads 1] [--out DIR]``;
``--quick``: the digits stream, the smoke preset and E up to 4 (seconds, a check that it runs);
``--stream emnist100`` needs ``--data-root`` and ``--backbone-weights``, as ``python -m benchmarks.table2`` does.
"""
from __future__ import annotations

import argparse
import copy
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence

from avalanche_sdr import cli
from benchmarks.table2 import catalogue

ROWS = (
    ("finetune", "", ()),
    ("sdr_two_sample_nogen", "", ()),
    ("sdr_two_sample_nogen", "accumulate", (("reuse", "accumulate"),)),
    ("sdr_task_free", "", ()),
)
"""The runs (method, variant, options), in the order they run: Finetune, SDR head-only,
SDR ``[accumulate]``, SDR with the task-free routers (the ``sdr_task_free`` row fits every
router of :data:`~avalanche_sdr.vocabulary.ROUTERS` after every task)."""

REFERENCE = "finetune"
"""The row every ratio is taken against: Finetune, Avalanche's ``Naive`` strategy."""

ENTRY_COUNTS = (4, 8, 16, 32)
"""E at which the router fit is reported (the issue's target: at E = 32, at most 1 s per task)."""

QUICK_ENTRY_COUNTS = (2, 4)


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=cli.description(__doc__))
    parser.add_argument("--stream", default=None, choices=sorted(catalogue.STREAMS),
                        help="harness stream (default fashion10; --quick: digits)")
    parser.add_argument("--preset", default=None, choices=sorted(catalogue.PRESETS),
                        help="training budget (default cpu; --quick: smoke)")
    parser.add_argument("--seed", type=cli.seed, default=0, help="stream order and E0 seed (default 0)")
    cli.add_threads_argument(parser, default=1)
    parser.add_argument("--device", default="cpu", help="torch device of every run: cpu (default), cuda, ...")
    parser.add_argument("--data-root", default=None, help="dataset folder, as python -m benchmarks.table2 takes it")
    parser.add_argument("--backbone-weights", default=None,
                        help="CIFAR-10 resnet20-*.th checkpoint for a ResNet-20 stream (emnist100), as python -m "
                             "benchmarks.table2 takes it")
    parser.add_argument("--out", type=cli.output_dir, default="results/cost",
                        help="folder for cost.json, cost.md, runs/ and backbones/ (default results/cost); "
                             "finished runs are run again, not skipped")
    parser.add_argument("--entries", type=cli.positive_int, nargs="+", default=None,
                        help=f"E of the router fit table (default {' '.join(map(str, ENTRY_COUNTS))}; "
                             f"--quick: {' '.join(map(str, QUICK_ENTRY_COUNTS))})")
    parser.add_argument("--top-layers", type=cli.positive_int, nargs="+", default=(),
                        help="also run SDR [accumulate] with updates of the entry's top only, one row per K "
                             "(LearningReuse(top_layers=K), variant accumulate_top_K), after the other rows")
    parser.add_argument("--skip-task-free", action="store_true",
                        help="leave out the sdr_task_free row (its router fits)")
    parser.add_argument("--quick", action="store_true",
                        help="digits stream, smoke preset, E up to 4: a check that the benchmark runs (seconds)")
    cli.add_debug_argument(parser)
    args = parser.parse_args(argv)
    cli.check_device(parser, args.device)
    if args.entries is not None and min(args.entries) < 2:
        parser.error(f"argument --entries: each E must be >= 2 (the E-th fit is timed after E - 1 others), "
                     f"got {min(args.entries)}")
    if args.quick:
        if args.stream is not None or args.preset is not None:
            parser.error("--quick runs the digits stream with the smoke preset; leave out --stream and --preset")
        args.stream, args.preset = "digits", "smoke"
    args.stream, args.preset = args.stream or "fashion10", args.preset or "cpu"
    args.entries = sorted(set(args.entries or (QUICK_ENTRY_COUNTS if args.quick else ENTRY_COUNTS)))
    return args


# ---------------------------------------------------------------------- environment
def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``; else :func:`platform.processor`)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def environment(device: str) -> Dict[str, Any]:
    """What the numbers were measured on: torch threads, load (1, 5, 15 min), CPUs, device."""
    import torch

    return {"torch_threads": torch.get_num_threads(), "loadavg": list(os.getloadavg()),
            "cpu_model": cpu_model(), "cpu_count": os.cpu_count(), "device": device,
            "torch": torch.__version__, "python": platform.python_version()}


def clocked(fn: Callable[[], Any]) -> tuple:
    """``fn()``, its wall seconds and its CPU seconds (this process, every thread)."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = fn()
    return result, time.perf_counter() - wall, time.process_time() - cpu


# ---------------------------------------------------------------------- stream runs
def measure_runs(args, out: Path, log: Callable[[str], None] = print, rows: Sequence[tuple] = ROWS
                 ) -> List[Dict[str, Any]]:
    """Every row of ``rows`` (default :data:`ROWS`) on ``args.stream`` (one E0, made or loaded
    once), in this process.

    Each result is the run JSON of :func:`~benchmarks.table2.engine.execute_run` (written to
    ``out/runs``) with ``cpu_seconds`` (CPU seconds of the whole call: stream build and run),
    ``setup_cpu_seconds`` (CPU seconds of building the same run's stream and E0 again alone,
    :func:`~benchmarks.table2.engine.load_run`) and ``loadavg`` before and after.
    """
    from benchmarks.table2.engine import execute_run, load_run, prepare_backbone
    from benchmarks.table2.specs import RunSpec

    backbone = prepare_backbone(args.stream, args.preset, args.seed, out, device=args.device,
                                data_root=args.data_root, weights=getattr(args, "backbone_weights", None))
    runs = []
    for method, variant, options in rows:
        spec = RunSpec(args.stream, args.preset, method, args.seed, backbone, args.device, args.threads,
                       args.data_root, variant=variant, options=options)
        _, _, setup_cpu = clocked(lambda: load_run(spec))
        before = list(os.getloadavg())
        run, wall, cpu = clocked(lambda: execute_run(spec))
        run.update(cpu_seconds=cpu, call_wall_seconds=wall, setup_cpu_seconds=setup_cpu,
                   loadavg_before=before, loadavg_after=list(os.getloadavg()))
        cli.write_json(out / "runs" / f"{spec.run_id}.json", run)
        log(f"{run['label']}: {run['wall_seconds']:.1f} s wall, {cpu:.1f} s CPU "
            f"(setup {setup_cpu:.1f} s), accuracy {100 * run['average_accuracy']:.2f} %")
        runs.append(run)
    return runs


def is_accumulate(variant: str) -> bool:
    """Whether a row's variant is the learning reuse's (``accumulate``, ``accumulate_top_K``)."""
    return variant == "accumulate" or variant.startswith("accumulate_")


def chosen_rows(args) -> List[tuple]:
    """:data:`ROWS` (without ``sdr_task_free`` under ``--skip-task-free``), then one
    ``accumulate_top_K`` row per ``--top-layers`` K."""
    from benchmarks.table2.variants import UPDATE_VARIANT_WORDS, variant_name

    rows = [r for r in ROWS if not (args.skip_task_free and r[0] == "sdr_task_free")]
    method, variant, options = next(r for r in ROWS if r[1] == "accumulate")
    word = UPDATE_VARIANT_WORDS["update_top_layers"]
    return rows + [(method, variant_name(variant, f"{word}_{k}"), options + (("update_top_layers", k),))
                   for k in args.top_layers]


def run_cpu(run: Dict[str, Any]) -> float:
    """A run's CPU seconds less those of building its stream and E0."""
    return run["cpu_seconds"] - run["setup_cpu_seconds"]


def ratios(runs: Sequence[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """Each run against Finetune (wall and CPU), and each ``[accumulate]`` row (``accumulate``,
    ``accumulate_top_K``) against head-only.

    :param runs: results of :func:`measure_runs` (``label``, ``method``, ``variant``,
        ``wall_seconds``, ``cpu_seconds``, ``setup_cpu_seconds``).
    :return: one dict per ratio: ``{"row", "against", "wall", "cpu"}``.
    :raises ValueError: no Finetune run among ``runs``.
    """
    by_key = {(r["method"], r["variant"]): r for r in runs}
    reference = by_key.get((REFERENCE, ""))
    if reference is None:
        raise ValueError(f"the ratios need a {REFERENCE!r} run; got {sorted(by_key)}")
    pairs = [(r, reference) for r in runs if r is not reference]
    head = by_key.get(("sdr_two_sample_nogen", ""))
    if head is not None:
        pairs += [(r, head) for r in runs if r["method"] == "sdr_two_sample_nogen" and is_accumulate(r["variant"])]
    return [{"row": a["label"], "against": b["label"], "wall": a["wall_seconds"] / b["wall_seconds"],
             "cpu": run_cpu(a) / run_cpu(b)} for a, b in pairs]


def evaluations(runs: Sequence[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """Test experiences each SDR run passed to ``strategy.eval``, against the stream's length.

    ``group`` and ``final``: the run's counts (``evaluated_experiences``); ``every_task``:
    what evaluating every task of the group after every experience and then the whole
    test stream would pass (the sizes of the group curve's ``evaluated`` lists, plus the
    stream's length); ``per_task``: (group + final) / tasks. ``evaluation_images_per_second``:
    the group evaluations' test images over their seconds (``None`` unless every test
    experience has the same size, as on the capped streams).
    """
    rows = []
    for run in runs:
        counts = run.get("evaluated_experiences")
        if counts is None:
            continue
        tasks = len(run["task_accuracies"])
        curve = run.get("group_curve") or []
        every_task = sum(len(point["evaluated"]) for point in curve if point) + tasks
        sizes = {size["test"] for size in run.get("task_sizes") or []}
        rate = None  # only where every test experience has the same size: the images are then known
        if len(sizes) == 1 and run["evaluation_seconds"] > 0:
            rate = sizes.pop() * counts["group"] / run["evaluation_seconds"]
        rows.append({"row": run["label"], "tasks": tasks, "group": counts["group"], "final": counts["final"],
                     "every_task": every_task, "per_task": (counts["group"] + counts["final"]) / tasks,
                     "evaluation_seconds": run["evaluation_seconds"], "evaluation_images_per_second": rate})
    return rows


def router_seconds_per_task(runs: Sequence[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """Each task-free run's router fitting: total seconds per router, and per task."""
    rows = []
    for run in runs:
        for router, seconds in (run.get("router_fit_seconds") or {}).items():
            tasks = len(run["task_accuracies"])
            rows.append({"row": run["label"], "router": router, "seconds": seconds, "per_task": seconds / tasks})
    return rows


# ---------------------------------------------------------------------- images per second
def throughput(stream_name: str, preset_name: str, backbone_path: str, seed: int, data_root: Optional[str],
               device: str = "cpu", repeats: int = 3) -> Dict[str, Any]:
    """Images per second of one entry's training step and of its evaluation forward.

    On the stream's first training experience (its real images), a repository with one
    new entry and head: ``train``, one epoch of Adam steps on the entry's adapters and
    head at the preset's ``train_mb_size`` (train mode, cross-entropy); ``evaluate``, the
    task-aware forward in eval mode without gradients at its ``eval_mb_size``. Each rate is
    the median of ``repeats`` passes, per wall second and per CPU second
    (``{train,evaluation}_images_per_{second,cpu_second}``).
    """
    import torch

    from avalanche_sdr import build_sdr_model
    from avalanche_sdr.dataset_tensors import experience_tensors
    from benchmarks.table2.engine import make_backbone
    from benchmarks.table2.methods import PRESETS, STREAMS

    stream, settings = STREAMS[stream_name], PRESETS[preset_name].sdr
    cli.seed_everything(seed)
    benchmark = stream.build(seed, PRESETS[preset_name].capped, data_root)
    experience = benchmark.train_stream[0]
    x, y = experience_tensors(experience)[:2]
    x, y = x.to(device), y.long().to(device)
    task = int(experience.task_labels[0])
    saved = torch.load(backbone_path, weights_only=True)
    backbone = make_backbone(stream_name)
    backbone.load_state_dict(saved["state_dict"])
    model = build_sdr_model(copy.deepcopy(backbone), in_channels=stream.in_channels, image_size=stream.image_size,
                            generator=None).to(device)
    model.create_entry(task)
    model.heads.add(task, int(y.max()) + 1)
    params = model.trainable_for(task, train_encoder_entry=True)
    optimizer = torch.optim.Adam(params, lr=1e-3)
    labels = torch.full((settings.train_mb_size,), task, dtype=torch.long, device=device)
    eval_mb_size = settings.eval_mb_size
    if eval_mb_size is None:  # chosen for the device, as SDRStrategy chooses it
        from avalanche_sdr._batching import eval_batch_size

        eval_mb_size = eval_batch_size(device)

    def train_epoch():
        model.train()
        for i in range(0, len(x), settings.train_mb_size):
            xb, yb = x[i:i + settings.train_mb_size], y[i:i + settings.train_mb_size]
            loss = torch.nn.functional.cross_entropy(model(xb, labels[:len(xb)]), yb)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()

    @torch.no_grad()
    def evaluate():
        model.eval()
        for i in range(0, len(x), eval_mb_size):
            model.forward_single_task(x[i:i + eval_mb_size], task)

    rates = {"images": len(x), "train_mb_size": settings.train_mb_size, "eval_mb_size": eval_mb_size}
    for name, fn in (("train", train_epoch), ("evaluation", evaluate)):
        fn()  # warm-up
        timed = [clocked(fn)[1:] for _ in range(repeats)]
        rates[f"{name}_images_per_second"] = len(x) / statistics.median(wall for wall, _ in timed)
        rates[f"{name}_images_per_cpu_second"] = len(x) / statistics.median(cpu for _, cpu in timed)
    model.end_entry_training()
    return rates


# ---------------------------------------------------------------------- report
def _f(value, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def markdown(report: Dict[str, Any]) -> str:
    """The report as Markdown tables (every figure from ``report``'s measured values)."""
    env = report["environment"]
    lines = [f"# Where the time goes: {report['stream']} (preset {report['preset']}, seed {report['seed']})", "",
             f"torch threads {env['torch_threads']}, device {env['device']}, CPU {env['cpu_model']} "
             f"({env['cpu_count']} CPUs), load average before {' '.join(_f(v) for v in report['loadavg_before'])}, "
             f"after {' '.join(_f(v) for v in report['loadavg_after'])}; torch {env['torch']}.", "",
             "| row | accuracy % | wall s | CPU s (run) | CPU s (with setup) | load before | load after |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for run in report["runs"]:
        lines.append(f"| {run['label']} | {_f(100 * run['average_accuracy'])} | {_f(run['wall_seconds'], 1)} | "
                     f"{_f(run_cpu(run), 1)} | {_f(run['cpu_seconds'], 1)} | {_f(run['loadavg_before'][0])} | "
                     f"{_f(run['loadavg_after'][0])} |")
    lines += ["", "| row | against | wall ratio | CPU ratio |", "|---|---|---:|---:|"]
    lines += [f"| {r['row']} | {r['against']} | {_f(r['wall'])} | {_f(r['cpu'])} |" for r in report["ratios"]]
    lines += ["", "Test experiences passed to `strategy.eval` (group curve + final evaluation):", "",
              "| row | tasks | group | final | per task | re-evaluating every task | evaluation s | "
              "evaluation images/s |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    lines += [f"| {r['row']} | {r['tasks']} | {r['group']} | {r['final']} | {_f(r['per_task'])} | {r['every_task']} | "
              f"{_f(r['evaluation_seconds'], 1)} | {_f(r['evaluation_images_per_second'], 0)} |"
              for r in report["evaluations"]]
    if report["router_runs"]:
        lines += ["", "| row | router | fit s (whole run) | fit s per task |", "|---|---|---:|---:|"]
        lines += [f"| {r['row']} | {r['router']} | {_f(r['seconds'])} | {_f(r['per_task'], 3)} |"
                  for r in report["router_runs"]]
    lines += ["", f"Router `{report['router']}` on a synthetic repository (benchmarks.studies.where_the_time_goes.router_fit), CPU seconds: "
                  "the fit of the task that creates the E-th entry, one repeat's evidence, one refit after a "
                  "learning-reuse update:", "",
              "| E | fit CPU s | fit after detection CPU s | evidence CPU s | refit CPU s |", "|---:|---:|---:|---:|---:|"]
    lines += [f"| {r['entries']} | {_f(r['fit_s'], 3)} | {_f(r.get('fit_after_detection_s'), 3)} | "
              f"{_f(r.get('evidence_s'), 3)} | {_f(r.get('refit_s'), 3)} |" for r in report["router_fit"]]
    t = report["throughput"]
    lines += ["", f"Images per second on one task ({t['images']} images), per wall second (per CPU second): "
                  f"training a new entry {_f(t['train_images_per_second'], 0)} "
                  f"({_f(t['train_images_per_cpu_second'], 0)}) at batch {t['train_mb_size']}, evaluation "
                  f"{_f(t['evaluation_images_per_second'], 0)} ({_f(t['evaluation_images_per_cpu_second'], 0)}) "
                  f"at batch {t['eval_mb_size']}.", ""]
    return "\n".join(lines)


def main(args: argparse.Namespace) -> Dict[str, Any]:
    """Measure everything (module doc), write ``cost.json`` and ``cost.md`` in ``--out``,
    print the Markdown; return the report."""
    cli.set_threads(args.threads, args.device)
    from avalanche_sdr.vocabulary import DEFAULT_ROUTER
    from benchmarks.table2.specs import backbone_file
    from benchmarks.studies.where_the_time_goes.router_fit import router_fit_seconds

    out = Path(args.out)
    loadavg_before = list(os.getloadavg())
    runs = measure_runs(args, out, rows=chosen_rows(args))
    backbone = str(backbone_file(args.stream, args.preset, args.seed, out))
    router_fit = router_fit_seconds(args.entries, DEFAULT_ROUTER, seed=args.seed)
    rates = throughput(args.stream, args.preset, backbone, args.seed, args.data_root, args.device)
    report = {"stream": args.stream, "preset": args.preset, "seed": args.seed, "environment": environment(args.device),
              "loadavg_before": loadavg_before, "loadavg_after": list(os.getloadavg()),
              "runs": runs, "ratios": ratios(runs), "evaluations": evaluations(runs),
              "router_runs": router_seconds_per_task(runs), "router": DEFAULT_ROUTER, "router_fit": router_fit,
              "throughput": rates}
    text = markdown(report)
    out.mkdir(parents=True, exist_ok=True)
    cli.write_json(out / "cost.json", report)
    (out / "cost.md").write_text(text + "\n")
    print(text)
    return report


__all__ = ["ENTRY_COUNTS", "REFERENCE", "ROWS", "chosen_rows", "clocked", "cpu_model", "environment", "evaluations",
           "is_accumulate", "main", "markdown", "measure_runs", "parse_args", "ratios", "router_seconds_per_task",
           "run_cpu", "throughput"]

if __name__ == "__main__":
    cli.run_cli(main, parse_args)
