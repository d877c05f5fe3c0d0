"""Running methods on designs: E0 the README's way, then ``SDRStrategy.from_benchmark`` per method.

A method is data, :data:`METHODS`: a name and the public keywords it passes to
``SDRStrategy.from_benchmark`` (on top of ``settings="cpu"`` and the design's ``n_warm_start``); nothing of
a method's internals is named here, so a changed ``method="recommended"`` is measured as it then is. Per
design, E0 (``small_cnn_backbone`` + ``pretrain_backbone`` on the warm-start tasks, the design's ``e0``
recipe, seeded with its ``training_seed``) is pretrained once and kept (``OUT/e0`` or ``--e0-dir``) with the
record ``pretrain_backbone`` leaves on it (:data:`E0_FILE_FORMAT_KEY`), so that a resumed run reuses it as it
was; every method starts from a fresh copy of it with the global RNGs seeded again. The stream
is run by the library's :func:`~avalanche_sdr.training.stream_runner.run_sdr_stream` (decisions scored
against the ground truth, final task-aware test accuracy, the group curve and BWT). One JSON per
(design, method) in ``OUT/runs``, written atomically; existing ones are skipped (resumable). Several
processes may share one ``OUT`` (two cores, opposite design orders): a process claims a run before it
starts it (:func:`claim_run`, a ``.claim`` file created exclusively beside the run file) and skips a run
another process has claimed, so no run is made twice.
"""
from __future__ import annotations

import copy
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from benchmarks.stream_designs.distribution import check_design

METHODS: Dict[str, Dict[str, Any]] = {
    "recommended": {"method": "recommended"},
    "recommended_head": {"method": "recommended", "reuse": "head"},
    "paper": {"method": "paper"},
}
"""Methods by name: the keywords of ``SDRStrategy.from_benchmark`` each adds (public keywords only)."""

SETTINGS = "cpu"
"""The training budget of every run (``settings=``)."""

RUN_FORMAT = 1
"""The version of a run file's layout (:func:`run_design`)."""


def run_path(out: Path, seed: int, method: str) -> Path:
    """The run file of (design ``seed``, ``method``) under ``out``."""
    return Path(out) / "runs" / f"design{int(seed):04d}_{method}.json"


def claim_path(out: Path, seed: int, method: str) -> Path:
    """The claim file of (design ``seed``, ``method``): :func:`run_path` with the suffix ``.claim``."""
    return run_path(out, seed, method).with_suffix(".claim")


def claim_run(out: Path, seed: int, method: str) -> bool:
    """Claim the run (design ``seed``, ``method``) for this process: create its claim file exclusively
    (``O_CREAT | O_EXCL``, atomic on a local file system), holding this process's id and host.

    :return: ``True`` when this process now holds the claim; ``False`` when another one does (its file
        exists: a process killed before it released its claim leaves it, and the run is then skipped until
        the file is deleted, as the log line says).
    """
    path = claim_path(out, seed, method)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        descriptor = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return False
    with os.fdopen(descriptor, "w") as f:
        f.write(json.dumps({"pid": os.getpid(), "host": os.uname().nodename if hasattr(os, "uname") else ""}))
    return True


def release_run(out: Path, seed: int, method: str) -> None:
    """Delete this process's claim of (design ``seed``, ``method``) (:func:`claim_run`)."""
    claim_path(out, seed, method).unlink(missing_ok=True)


def _load_average() -> Optional[float]:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:  # not on every platform
        return None


E0_FILE_FORMAT_KEY, E0_FILE_FORMAT = "e0_file_format", 2
"""An E0 file (``OUT/e0/designNNNN.pt``) holds ``{"e0_file_format": 2, "state_dict", "pretraining"}``: the
weights and the :class:`~avalanche_sdr.detection.two_sample.PretrainingRecord` ``pretrain_backbone`` left on
E0 (which a ``state_dict`` does not carry), so that a run resumed from the file gives the detector the
references a fresh run gives it. Format 1 (a bare ``state_dict``) is refused."""


def design_e0(design: Dict[str, Any], benchmark, e0_dir: Path, log: Callable[[str], None]):
    """The design's E0, pretrained here or loaded from ``e0_dir``, and its pretraining cost (CPU / wall s)."""
    import torch

    from avalanche_sdr import pretrain_backbone, seed_everything, small_cnn_backbone
    from avalanche_sdr.cli import write_json
    from avalanche_sdr.detection.two_sample import PRETRAINING_RECORD, PretrainingRecord, pretraining_record
    from avalanche_sdr.training.checkpoint import atomic_write

    recipe = design["e0"]
    if recipe["builder"] != "small_cnn_backbone":
        raise ValueError(f"design {design['seed']}: E0 builder {recipe['builder']!r}; this runner builds "
                         "small_cnn_backbone only")
    path = Path(e0_dir) / f"design{int(design['seed']):04d}.pt"
    cost_path = path.with_suffix(".json")
    seed_everything(int(design["training_seed"]))
    backbone = small_cnn_backbone(in_channels=int(recipe["in_channels"]), widths=tuple(recipe["widths"]))
    if path.is_file() and cost_path.is_file():
        saved = torch.load(path, weights_only=True)
        if not isinstance(saved, dict) or E0_FILE_FORMAT_KEY not in saved:
            raise ValueError(f"{path} holds E0 without its pretraining record (written before E0 files kept it): "
                             "a run from it would test other references than a fresh run; delete the file to "
                             "pretrain E0 again")
        backbone.load_state_dict(saved["state_dict"])
        for p in backbone.parameters():
            p.requires_grad_(False)
        setattr(backbone, PRETRAINING_RECORD,
                PretrainingRecord.from_tensors(saved["pretraining"]) if saved["pretraining"] else None)
        return backbone.eval(), json.loads(cost_path.read_text())
    cpu, wall = time.process_time(), time.perf_counter()
    warm = benchmark.train_stream[:int(design["n_warm_start"])]
    pretrain_backbone(backbone, warm, epochs=int(recipe["epochs"]), lr=float(recipe["lr"]),
                      batch_size=int(recipe["batch_size"]), verbose=False)
    cost = {"cpu_seconds": time.process_time() - cpu, "wall_seconds": time.perf_counter() - wall}
    path.parent.mkdir(parents=True, exist_ok=True)
    record = pretraining_record(backbone)
    saved = {E0_FILE_FORMAT_KEY: torch.tensor(E0_FILE_FORMAT), "state_dict": backbone.state_dict(),
             "pretraining": {} if record is None else record.to_tensors()}
    atomic_write(path, lambda f: torch.save(saved, f))
    write_json(cost_path, cost)
    log(f"design {design['seed']}: E0 pretrained, {cost['cpu_seconds']:.1f} CPU s")
    return backbone, cost


def _evaluator():
    from avalanche.evaluation.metrics import accuracy_metrics
    from avalanche.training.plugins import EvaluationPlugin

    from avalanche_sdr.evaluation import DecisionLogger

    # Task-aware accuracy per experience (what run_sdr_stream reads); one line per task on stderr as progress.
    return EvaluationPlugin(accuracy_metrics(experience=True), loggers=[DecisionLogger(file=sys.stderr)])


def run_method(design: Dict[str, Any], benchmark, e0, method: str, keywords: Dict[str, Any],
               training_seed_offset: int = 0, seed_each_task: bool = False) -> Dict[str, Any]:
    """One method on one design: a fresh copy of ``e0``, ``SDRStrategy.from_benchmark(copy, benchmark,
    settings="cpu", n_warm_start=..., **keywords)``, the stream run; returns the run record (no file written).

    :param training_seed_offset: added to the design's ``training_seed`` before the run (the global RNGs'
        seed; E0, the stream and the data are the design's whatever it is): a second run of one method
        that differs only in its training draws, to measure how far two such runs fall apart.
    :param seed_each_task: seed the global generators before each task from that seed and the task's
        position (:func:`~avalanche_sdr.training.stream_runner.run_sdr_stream`'s ``seed_each_task``): two
        methods then draw alike for every task they train alike (common random numbers).

    :return: ``{"results": run_sdr_stream's dict, "memory_mb", "cost": {"cpu_seconds", "wall_seconds",
        "evaluation_seconds", "evaluated_experiences", "torch_threads", "load_before", "load_after"}}``;
        CPU seconds are ``time.process_time()`` of this process (strategy build + stream run + evaluations).
    """
    import torch

    from avalanche_sdr import SDRStrategy, seed_everything
    from avalanche_sdr.evaluation import repository_memory_mb
    from avalanche_sdr.training.stream_runner import run_sdr_stream

    load_before = _load_average()
    training_seed = int(design["training_seed"]) + int(training_seed_offset)
    seed_everything(training_seed)
    cpu, wall = time.process_time(), time.perf_counter()
    strategy = SDRStrategy.from_benchmark(copy.deepcopy(e0), benchmark, settings=SETTINGS,
                                          n_warm_start=int(design["n_warm_start"]), evaluator=_evaluator(),
                                          **keywords)
    timings: Dict[str, float] = {}
    results = run_sdr_stream(strategy, benchmark, config={"method": method, "keywords": keywords},
                             seed=int(design["seed"]), timings=timings, full_final_evaluation=False,
                             seed_each_task=training_seed if seed_each_task else None)
    cost = {"cpu_seconds": time.process_time() - cpu, "wall_seconds": time.perf_counter() - wall,
            "evaluation_seconds": timings.get("evaluation_seconds"),
            "evaluated_experiences": timings.get("evaluated_experiences"),
            "torch_threads": torch.get_num_threads(), "load_before": load_before, "load_after": _load_average()}
    return {"results": results, "memory_mb": repository_memory_mb(strategy), "cost": cost}


def run_design(design: Dict[str, Any], methods: Dict[str, Dict[str, Any]], out: Path, *,
               data_root: Optional[str] = None, fashion_root: Optional[str] = None, e0_dir: Optional[Path] = None,
               training_seed_offset: int = 0, seed_each_task: bool = False,
               log: Callable[[str], None] = print) -> List[Path]:
    """Run every method of ``methods`` (name -> keywords) on ``design`` that has no run file yet.

    :param design: a design (:func:`~benchmarks.stream_designs.distribution.draw_design`); its ``seed`` names
        the run files.
    :param e0_dir: the folder of the designs' E0 weights (default ``out/e0``).
    :param training_seed_offset: :func:`run_method`'s, recorded in each run file (``"training_seed_offset"``);
        an existing run file written with another offset is refused.
    :param seed_each_task: :func:`run_method`'s, recorded (``"seed_each_task"``) and checked the same way.

    :return: the run files written now (none when every run existed or the source is absent: a line says so).
    :raises ValueError: an inconsistent design (:func:`check_design`), or an existing run file of another
        design under the same seed.
    """
    check_design(design)
    out, seed = Path(out), int(design["seed"])
    todo = {name: kw for name, kw in methods.items() if not run_path(out, seed, name).is_file()}
    done = sorted(set(methods) - set(todo))
    for name in done:
        earlier = json.loads(run_path(out, seed, name).read_text())
        if earlier.get("design") != json.loads(json.dumps(design)):
            raise ValueError(f"{run_path(out, seed, name)} holds a run of another design {seed} (another "
                             f"distribution version or a changed design); write to another --out")
        draws = (int(earlier.get("training_seed_offset", 0)), bool(earlier.get("seed_each_task", False)))
        if draws != (int(training_seed_offset), bool(seed_each_task)):
            raise ValueError(f"{run_path(out, seed, name)} was run with training seed offset {draws[0]} and "
                             f"seed_each_task {draws[1]}, not {training_seed_offset} and {bool(seed_each_task)}; name "
                             f"the method of the other draws differently (--method-keywords) or write to another --out")
    if done:
        log(f"design {seed}: skipping {', '.join(done)} (run files exist)")
    claimed = {name: kw for name, kw in todo.items() if claim_run(out, seed, name)}
    for name in [n for n in claimed if run_path(out, seed, n).is_file()]:  # finished since todo was read
        release_run(out, seed, name)
        del claimed[name]
        todo.pop(name)
    others = sorted(set(todo) - set(claimed))
    if others:
        log(f"design {seed}: skipping {', '.join(others)} (claimed by another process: "
            f"{', '.join(str(claim_path(out, seed, n)) for n in others)}; delete a claim file left by a process "
            "that no longer runs)")
    try:
        return _run_claimed(design, claimed, out, data_root=data_root, fashion_root=fashion_root, e0_dir=e0_dir,
                            training_seed_offset=training_seed_offset, seed_each_task=seed_each_task, log=log)
    finally:
        for name in claimed:
            release_run(out, seed, name)


def design_stream(design: Dict[str, Any], out: Path, *, data_root: Optional[str] = None,
                  fashion_root: Optional[str] = None, e0_dir: Optional[Path] = None,
                  log: Callable[[str], None] = print) -> Optional[Tuple[Any, Any, Dict[str, float]]]:
    """A design's benchmark and E0 (:func:`design_e0`, kept in ``e0_dir``, default ``out/e0``), with E0's
    pretraining cost; ``None`` (and a line saying so) where the design's image source is absent here."""
    from benchmarks.stream_designs.builder import FASHION_MNIST_ROOT, SourceUnavailable, build_benchmark, load_source

    try:
        train, test = load_source(design["source"], data_seed=design["data_seed"], data_root=data_root,
                                  fashion_root=fashion_root or FASHION_MNIST_ROOT)
    except SourceUnavailable as err:
        log(f"design {design['seed']}: skipped, {err}")
        return None
    benchmark = build_benchmark(design, train, test)
    e0, e0_cost = design_e0(design, benchmark, Path(e0_dir) if e0_dir is not None else Path(out) / "e0", log)
    return benchmark, e0, e0_cost


def _run_claimed(design: Dict[str, Any], todo: Dict[str, Dict[str, Any]], out: Path, *, data_root, fashion_root,
                 e0_dir, training_seed_offset: int, seed_each_task: bool, log: Callable[[str], None]) -> List[Path]:
    """:func:`run_design`'s runs this process has claimed: the source, E0, then each method; the files written."""
    from avalanche_sdr.cli import write_json

    seed = int(design["seed"])
    if not todo:
        return []
    made = design_stream(design, out, data_root=data_root, fashion_root=fashion_root, e0_dir=e0_dir, log=log)
    if made is None:
        return []
    benchmark, e0, e0_cost = made
    written = []
    for name, keywords in todo.items():
        log(f"design {seed} ({design['source']}, {len(design['tasks'])} tasks): {name} {keywords}")
        record = run_method(design, benchmark, e0, name, keywords, training_seed_offset, seed_each_task)
        record = {"format": RUN_FORMAT, "design_version": design["version"], "design_seed": int(seed), "method": name,
                  "keywords": keywords, "training_seed_offset": int(training_seed_offset),
                  "seed_each_task": bool(seed_each_task), "settings": SETTINGS, "design": design,
                  "ground_truth": benchmark.ground_truth, "e0_cost": e0_cost, **record}
        path = run_path(out, seed, name)
        write_json(path, record)
        written.append(path)
        summary = record["results"]["detection"]
        log(f"design {seed}: {name} accuracy {100 * record['results']['average_accuracy']:.2f} %, "
            f"BWT {_points(record['results'].get('bwt'))}, Correct {100 * summary['correct']:.1f} % of "
            f"{summary['n_scored']}, Incorrect {100 * summary['incorrect']:.1f} %, "
            f"{record['cost']['cpu_seconds']:.1f} CPU s, {record['cost']['wall_seconds']:.1f} s wall, "
            f"{record['memory_mb']:.3f} MB, load {record['cost']['load_after']}")
    return written


def _points(value: Optional[float]) -> str:
    return "n/a" if value is None else f"{100 * value:+.2f} pt"


def run_designs(designs: Sequence[Dict[str, Any]], methods: Dict[str, Dict[str, Any]], out: Path,
                **options) -> List[Path]:
    """:func:`run_design` on each design, in order (every design checked first); returns every run file written."""
    for design in designs:
        check_design(design)
    written: List[Path] = []
    for design in designs:
        written += run_design(design, methods, out, **options)
    return written


__all__ = ["E0_FILE_FORMAT", "E0_FILE_FORMAT_KEY", "METHODS", "RUN_FORMAT", "SETTINGS", "claim_path", "claim_run", "design_e0", "design_stream",
           "release_run", "run_design", "run_designs", "run_method", "run_path"]
