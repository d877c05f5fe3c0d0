"""One harness run, executed and measured: E0 made once per (stream, preset, seed) and
loaded by every run, then a method built, trained on the stream and scored.

Every method runs the same way (:func:`execute_run`): accuracy after the last task with
Avalanche's ``accuracy_metrics``, memory with
:func:`avalanche_sdr.evaluation.repository_memory_bytes`, wall time from building the
strategy to the end of the final evaluation, and the group curve and backward transfer
after every experience. The definitions: docs/reproducing.rst, "What a harness run
measures and writes".
"""
from __future__ import annotations

import os
import time
from typing import Any, Dict, Optional, Sequence

from avalanche_sdr import cli
from avalanche_sdr.evaluation.memory import BYTES_PER_MB
from avalanche_sdr.vocabulary import ROUTER_LDA_WEIGHTED, ROUTERS
from benchmarks.table2.specs import RunProbe, RunSpec, backbone_file
from benchmarks.table2.methods import METHODS, PRESETS, STREAMS


def make_backbone(stream_name: str, weights: Optional[str] = None):
    """E0's architecture for a stream (random weights unless ``weights`` is a CIFAR
    ResNet checkpoint for a ``cifar_resnet20`` stream)."""
    from avalanche_sdr.models import cifar_resnet_backbone, small_cnn_backbone

    stream = STREAMS[stream_name]
    if stream.backbone == "cifar_resnet20":
        return cifar_resnet_backbone(20, weights_path=weights, in_channels=stream.in_channels)
    return small_cnn_backbone(in_channels=stream.in_channels, widths=(32, 64, 128))


def backbone_note(stream_name: str, preset: str, references: str = "all") -> str:
    """One sentence naming E0, stored with every run (``references``: what it was pretrained on,
    :data:`~benchmarks.table2.specs.E0_REFERENCES`)."""
    if STREAMS[stream_name].backbone == "cifar_resnet20":
        return "CIFAR-10 ResNet-20 (--backbone-weights), frozen, not trained on the stream"
    note = (f"small_cnn(32,64,128) pretrained {PRESETS[preset].pretrain_epochs} epochs on the "
            "warm-start tasks' training data")
    if references == "held_out":
        note += (", less the references pretrain_backbone holds out by default (half of each class), "
                 "recorded on E0")
    return note


def prepare_backbone(stream: str, preset: str, seed: int, out_dir: os.PathLike, device: str = "cpu",
                     data_root: Optional[str] = None, weights: Optional[str] = None, references: str = "all") -> str:
    """Make E0 for (stream, preset, seed) once: pretrain the small CNN on the warm-start
    tasks, or load the CIFAR ResNet-20 checkpoint ``weights``; save it with the torch RNG
    state and the thread count it was made with (``{"state_dict", "torch_rng_state",
    "torch_threads"}``, and with ``references="held_out"`` the pretraining record
    ``"pretraining"``, :meth:`~avalanche_sdr.detection.two_sample.PretrainingRecord.to_tensors`);
    return the path.

    :param references: :data:`~benchmarks.table2.specs.E0_REFERENCES`: ``"all"`` pretrains on
        every warm-start image (``holdout=None``); ``"held_out"`` with ``pretrain_backbone``'s
        default holdout, for streams whose E0 is pretrained on the stream only.
    :raises ValueError: ``"held_out"`` for a stream whose E0 is not pretrained on it.
    """
    import torch

    from avalanche_sdr.detection.two_sample import pretraining_record
    from avalanche_sdr.training import pretrain_backbone
    from avalanche_sdr.training.checkpoint import atomic_write

    if references == "held_out" and STREAMS[stream].backbone == "cifar_resnet20":
        raise ValueError(f"--e0-references held_out: E0 of {stream} is a CIFAR-10 ResNet-20, not pretrained on "
                         "the stream, so there are no warm-start images to hold out")
    path = backbone_file(stream, preset, seed, out_dir, references)
    if path.exists():
        return str(path)
    cli.seed_everything(seed)
    record = None
    if STREAMS[stream].backbone == "cifar_resnet20":
        if not weights:
            raise SystemExit(f"--stream {stream} needs --backbone-weights (a CIFAR-10 resnet20-*.th file)")
        backbone = make_backbone(stream, weights)
    else:
        benchmark = STREAMS[stream].build(seed, PRESETS[preset].capped, data_root)
        warm = [benchmark.train_stream[i] for i in range(benchmark.n_warm_start)]
        backbone = make_backbone(stream)
        epochs = PRESETS[preset].pretrain_epochs
        # Minutes on a loaded CPU, before any run reports: say what is happening.
        print(f"E0 for {stream} seed {seed}: pretraining on the {len(warm)} warm-start tasks "
              f"({epochs} epochs, {torch.get_num_threads()} torch threads) -> {path}", flush=True)
        tick = time.perf_counter()
        # "all": every warm-start image (holdout=None), as every committed harness run; "held_out": the
        # library's default, half of them held out as the two-sample references (its record kept below).
        holdout = {} if references == "held_out" else {"holdout": None}
        pretrain_backbone(backbone, warm, epochs=epochs, lr=2e-3, batch_size=32, device=device, verbose=False,
                          **holdout)
        if references == "held_out":
            record = pretraining_record(backbone)
        print(f"E0 for {stream} seed {seed}: pretrained in {time.perf_counter() - tick:.0f}s", flush=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    # The RNG state after pretraining travels with E0: every run continues from it, as
    # examples/quickstart.py does after pretraining in the same process. The thread count
    # is kept for provenance: E0's weights depend on it (docs/reproducing.rst).
    saved = {"state_dict": backbone.state_dict(), "torch_rng_state": torch.get_rng_state(),
             "torch_threads": torch.get_num_threads()}
    if record is not None:
        saved["pretraining"] = record.to_tensors()
    atomic_write(path, lambda f: torch.save(saved, f))
    return str(path)


def load_backbone(spec: RunSpec):
    """E0 of ``spec`` from ``spec.backbone_path`` (:func:`prepare_backbone`'s file), frozen and
    in eval mode; restores the torch RNG state saved after pretraining."""
    import torch

    from avalanche_sdr.detection.two_sample import PRETRAINING_RECORD, PretrainingRecord

    saved = torch.load(spec.backbone_path, weights_only=True)
    backbone = make_backbone(spec.stream)
    backbone.load_state_dict(saved["state_dict"])
    torch.set_rng_state(saved["torch_rng_state"])
    if "pretraining" in saved:  # --e0-references held_out: the record pretrain_backbone left on E0
        setattr(backbone, PRETRAINING_RECORD, PretrainingRecord.from_tensors(saved["pretraining"]))
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
    return benchmark, load_backbone(spec)


def build_strategy(spec: RunSpec, benchmark, backbone, metrics: Sequence[Any] = ()):
    """The strategy of ``spec``'s method on ``benchmark`` and E0 ``backbone`` (as
    :func:`load_run` gives them), with an evaluator of ``metrics`` (plus, for a task-free
    SDR row, the task-free metric of the row's routers, :attr:`Method.routers`).

    :return: ``(strategy, task_free_metric or None)``.
    """
    from avalanche.training.plugins import EvaluationPlugin

    method, stream, preset = METHODS[spec.method], STREAMS[spec.stream], PRESETS[spec.preset]
    metrics = list(metrics)
    task_free_metric = None
    if method.task_free and method.is_sdr:  # SDR's routers, scored without task labels
        from avalanche_sdr.evaluation import TaskFreeMetrics

        task_free_metric = TaskFreeMetrics(method.routers)
        metrics.append(task_free_metric)
    evaluator = EvaluationPlugin(*metrics, loggers=[])
    strategy = method.build(backbone, benchmark, stream, preset, evaluator=evaluator, device=spec.device,
                            **dict(spec.options))
    return strategy, task_free_metric


def execute_run(spec: RunSpec, probe: Optional[RunProbe] = None) -> Dict[str, Any]:
    """Run one method on one seed; return its result dict (JSON-safe).

    :param probe: ``None`` (every table row): the run as docs/reproducing.rst defines it.
        A :class:`RunProbe`: the run trains the first ``spec.tasks`` tasks (all with
        ``None``) one by one, calling the probe's hooks, and is scored on the test tasks
        it trained, without group curve; its result has ``"tasks_trained"`` and the
        probe's keys (:meth:`RunProbe.finish`).
    """
    import avalanche.training  # noqa: F401  (imported before the clock starts, for every method)
    import torch
    from avalanche.evaluation.metrics import accuracy_metrics, bwt_metrics

    import avalanche_sdr  # noqa: F401
    from avalanche_sdr.evaluation import repository_memory_bytes
    from avalanche_sdr.training.stream_runner import (evaluate_group, final_test_accuracies, run_sdr_stream,
                                                      transfer_summary)

    if spec.threads:
        torch.set_num_threads(spec.threads)
    method, stream = METHODS[spec.method], STREAMS[spec.stream]
    if spec.split not in ("test", "valid") or (spec.split == "valid" and method.is_sdr):
        raise ValueError(f"{spec.run_id}: split {spec.split!r} (validation runs are for baselines only)")
    if spec.tasks is not None and spec.split != "valid" and probe is None:
        raise ValueError(f"{spec.run_id}: a run on the first {spec.tasks} task(s) must be a tuning run "
                         "(split='valid') or a probed run (probe=...)")
    if probe is not None and spec.method in NO_CURVE_METHODS:
        raise ValueError(f"{spec.run_id}: {spec.method} trains once on the whole stream: it has no tasks to probe")
    from avalanche_sdr.detection.two_sample import PRETRAINING_RECORD

    benchmark, backbone = load_run(spec)
    e0_references = "held_out" if getattr(backbone, PRETRAINING_RECORD, None) is not None else "all"
    start = time.perf_counter()
    metrics = [accuracy_metrics(experience=True)]
    # The group curve and BWT (docs/reproducing.rst): test runs trained experience by experience.
    curve_measured = spec.split == "test" and spec.method not in NO_CURVE_METHODS and probe is None
    if curve_measured:
        metrics += bwt_metrics(experience=False, stream=True)
    task_aware_metric = None
    if method.task_free and not method.is_sdr:  # one head over the class ids: also scored given the task label
        from avalanche_sdr.evaluation.task_aware import TaskAwareAccuracy

        task_aware_metric = TaskAwareAccuracy()
        metrics.append(task_aware_metric)
    strategy, task_free_metric = build_strategy(spec, benchmark, backbone, metrics)
    detection = None
    curve, evaluation_seconds, evaluated_experiences = None, 0.0, None
    extra: Dict[str, Any] = {}
    if probe is not None:
        trained = _probed_tasks(spec, strategy, benchmark, probe)
        accuracies = final_test_accuracies(strategy, benchmark.test_stream[:trained])
        memory_mb = repository_memory_bytes(strategy) / BYTES_PER_MB
        extra["tasks_trained"] = trained
        if method.is_sdr:
            records = strategy.detection_records
            detection = {"decisions": [r.decision for r in records],
                         "detection_seconds": sum(r.detection_seconds for r in records)}
    elif method.is_sdr:
        timings: Dict[str, float] = {}
        sdr = run_sdr_stream(strategy, benchmark, seed=spec.seed, timings=timings)
        curve, evaluation_seconds = sdr["group_curve"], timings["evaluation_seconds"]
        evaluated_experiences = {"group": int(timings["evaluated_experiences"]),
                                 "final": int(timings["final_evaluated_experiences"])}
        accuracies = [t["test_accuracy"] for t in sdr["tasks"]]
        memory_mb = sdr["memory_mb"]
        detection = dict(sdr["detection"], unique_tasks=sdr["unique_tasks"],
                         decisions=[t["decision"] for t in sdr["tasks"]],
                         outcomes=[t["outcome"] for t in sdr["tasks"]],
                         groups=[t["group"] for t in sdr["tasks"]],
                         records=[t["detection"] for t in sdr["tasks"]],
                         train_accuracy_per_epoch=[t["train_accuracy_per_epoch"] for t in sdr["tasks"]],
                         detection_seconds=sum(r.detection_seconds for r in strategy.detection_records))
        extra["sdr_results"] = sdr
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
        # A tuning run (benchmarks.table2.tuning) is scored on valid_stream: test_stream is never read.
        scored = benchmark.valid_stream if spec.split == "valid" else benchmark.test_stream
        accuracies = final_test_accuracies(strategy, scored if spec.tasks is None else scored[:spec.tasks])
        memory_mb = repository_memory_bytes(strategy) / BYTES_PER_MB
    wall = time.perf_counter() - start
    transfer = {"bwt": None, "forgetting": None, "avalanche_bwt": None, "group_curve": curve}
    if curve is not None:
        transfer.update(transfer_summary(curve, accuracies), avalanche_bwt=stream_bwt(strategy))
    if method.task_free:
        extra.update(task_free_results(strategy, task_free_metric, sum(accuracies) / len(accuracies)))
    if task_aware_metric is not None:  # the final evaluation's (the last one run)
        extra["task_aware"] = {"average_accuracy": task_aware_metric.result(),
                               "task_accuracies": list(task_aware_metric.per_experience)}
    run = {
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
        # Test experiences passed to strategy.eval by the group curve and the final evaluation
        # (SDR rows evaluate only tasks whose state changed; None for the baselines).
        "evaluated_experiences": evaluated_experiences,
        **transfer,
        "torch_threads": torch.get_num_threads(),
        "backbone": backbone_note(spec.stream, spec.preset, e0_references),
        "e0_references": e0_references,
        "task_sizes": getattr(benchmark, "task_sizes", None),
        **({"tasks": spec.tasks} if spec.tasks is not None else {}),
        **extra,
    }
    if probe is not None:
        run.update(probe.finish(spec, strategy, run))
    return run


def _probed_tasks(spec: RunSpec, strategy, benchmark, probe: RunProbe) -> int:
    """Train the first ``spec.tasks`` tasks of ``benchmark`` (all with ``None``) one by one
    under ``probe`` (:meth:`RunProbe.before_task` may stop earlier); return how many trained."""
    tasks = benchmark.train_stream
    if spec.tasks is not None:
        if not 0 < spec.tasks <= len(tasks):
            raise ValueError(f"{spec.run_id}: tasks {spec.tasks} not in 1..{len(tasks)}")
        tasks = tasks[:spec.tasks]
    probe.start(spec, strategy, benchmark)
    trained = 0
    for index, experience in enumerate(tasks):
        if not probe.before_task(index, experience):
            break
        strategy.train(experience, eval_streams=[])
        probe.after_task(index, experience, strategy)
        trained += 1
    if not trained:
        raise ValueError(f"{spec.run_id}: the probe stopped the run before its first task")
    return trained


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
    (:func:`avalanche_sdr.routers.routing.router_states`), counted as the memory counter counts it."""
    from avalanche_sdr.evaluation.memory import TensorByteCounter
    from avalanche_sdr.routers.routing import router_states

    mb = {}
    for router in routers:
        counter = TensorByteCounter()
        for state in router_states(model, router):
            counter.add_module(state)
        mb[router] = counter.total / BYTES_PER_MB
    return mb


def task_free_results(strategy, metric, average_accuracy: float) -> Dict[str, Any]:
    """The run JSON keys of a task-free row (:attr:`benchmarks.table2.methods.Method.task_free`).

    SDR (``metric``: its :class:`~avalanche_sdr.evaluation.TaskFreeMetrics`): ``"task_free"``,
    ``{router or "oracle": {"task_free": acc, "routing": acc}}`` (means over the test
    experiences), ``"router_memory_mb"``, ``{router: MB of its state}`` (included in
    ``memory_mb``), ``"router_fit_seconds"``, ``{router: wall seconds of its fitting
    after every task}`` (included in ``wall_seconds``), and with the ``"lda_weighted"``
    router ``"lda_weight"``, the weight it chose on the stream's repeats
    (:func:`avalanche_sdr.routers.lda_router.chosen_weight`), and ``"lda_evidence_images"``,
    the repeat images that choice rests on
    (:func:`~avalanche_sdr.routers.lda_router.evidence_images`). A class-incremental baseline
    (``metric`` None: one head over the class ids, so its accuracy is task-free): ``{"task_free": {"self": {"task_free":
    average_accuracy, "routing": None}}}``; :func:`execute_run` adds its ``"task_aware"``,
    ``{"average_accuracy", "task_accuracies"}``, the same head given each sample's task label
    (:class:`~avalanche_sdr.evaluation.task_aware.TaskAwareAccuracy`).
    """
    if metric is None:
        return {"task_free": {"self": {"task_free": average_accuracy, "routing": None}}}
    from avalanche_sdr.routers import lda_router

    results = {"task_free": metric.result(), "router_memory_mb": router_memory_mb(strategy.model, metric.routers),
               "router_fit_seconds": dict(strategy.sdr.router_seconds)}
    if ROUTER_LDA_WEIGHTED in metric.routers:
        results["lda_weight"] = lda_router.chosen_weight(strategy.model)
        results["lda_evidence_images"] = lda_router.evidence_images(strategy.model)
    return results


def memory_mb_with_routers(run: Dict[str, Any], keep: Sequence[str] = ()) -> float:
    """A run's ``memory_mb`` less the state of every router not in ``keep``
    (``router_memory_mb`` of a task-free SDR run; a run without it: its ``memory_mb``).
    A state two routers share (the same ``state_name``, e.g. ``"lda"`` and
    ``"lda_weighted"``: :func:`~avalanche_sdr.routers.routing.state_router`) is counted
    once, and kept when either router is. A name in ``keep`` that is no router
    (``"oracle"``, a baseline's ``"self"``) keeps no router state."""
    from avalanche_sdr.routers.routing import state_router

    owners = {state_router(router): mb for router, mb in (run.get("router_memory_mb") or {}).items()}
    kept = {state_router(router) for router in keep if router in ROUTERS}
    return run["memory_mb"] - sum(mb for owner, mb in owners.items() if owner not in kept)


__all__ = ["NO_CURVE_METHODS", "STREAM_BWT_KEY", "backbone_note", "build_strategy", "execute_run", "load_backbone",
           "load_run", "make_backbone", "memory_mb_with_routers", "prepare_backbone", "router_memory_mb", "stream_bwt",
           "task_free_results"]
