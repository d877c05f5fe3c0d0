"""Running an SDR strategy over a whole mixed stream and collecting its results.

:func:`run_sdr_stream` trains a strategy experience by experience, evaluates after
each one the test experiences of its group trained so far (the group curve,
:func:`evaluate_group`; only those whose state changed, :class:`EvaluationCache`)
and returns the results dictionary the examples write with ``--output`` and
:mod:`avalanche_sdr.plots` reads: detection fractions, average accuracy (0-1), memory
in MB (2**20 bytes), one record per task, the group curve, ``bwt`` and ``forgetting``
(:func:`transfer_summary`). Why one definition: the examples and the Table 2 harness
report the same numbers. The dictionary holds no wall-clock values, ground truth is
read only after training, the group evaluation leaves the global RNGs as it found them
(:func:`preserved_rng`), and a strategy with ``checkpoint_dir`` resumes with the
results of an uninterrupted run.

The format, the group curve, ``bwt``, ``forgetting`` and resuming: docs/method.rst,
section "A stream run's results dictionary, group curve and resume".
"""
from __future__ import annotations

import contextlib
import random
import time
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence

import numpy as np
import torch

from avalanche_sdr.evaluation import (
    BYTES_PER_MB,
    DetectionMetrics,
    TaskFreeMetrics,
    classify_detection,
    detection_summary,
    repository_memory_bytes,
)
from avalanche_sdr.evaluation.memory import entry_bytes
from avalanche_sdr.models.digests import backbone_state_digest, task_state_digest
from avalanche_sdr.models.repository import SDRModel
from avalanche_sdr.seeding import seed_everything, task_seed
from avalanche_sdr.training.checkpoint import CheckpointMismatchError, strategy_fingerprint


def _accuracy_key(experience) -> str:
    task = int(experience.task_labels[0])
    stream = experience.origin_stream.name
    return f"Top1_Acc_Exp/eval_phase/{stream}_stream/Task{task:03d}/Exp{experience.current_experience:03d}"


def _without_timing(record: Dict[str, Any]) -> Dict[str, Any]:
    # Wall-clock values differ between identical runs; results must not.
    return {k: v for k, v in record.items() if k != "detection_seconds"}


def final_test_accuracies(strategy, test_stream) -> List[float]:
    """Evaluate every test experience and return its accuracy (0-1), in stream order.

    Any stream works (Avalanche's metric of each experience is read under the stream's
    own name): the harness's tuning scores ``valid_stream`` with it.

    :raises ValueError: if the strategy's evaluator has no per-experience accuracy
        (``accuracy_metrics(experience=True)``).
    """
    metrics = strategy.eval(test_stream)
    accuracies = []
    for experience in test_stream:
        key = _accuracy_key(experience)
        if key not in metrics:
            raise ValueError(
                f"metric {key!r} missing: the strategy's evaluator must include "
                "accuracy_metrics(experience=True)"
            )
        accuracies.append(float(metrics[key]))
    return accuracies


@contextlib.contextmanager
def preserved_rng() -> Iterator[None]:
    """Run a block and then put the global random generators (Python, numpy, torch and
    every CUDA device) back where they were: an evaluation draws a seed per data loader
    from torch's generator, which would otherwise change the training that follows."""
    python, numpy_state, torch_state = random.getstate(), np.random.get_state(), torch.get_rng_state()
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else None
    try:
        yield
    finally:
        random.setstate(python)
        np.random.set_state(numpy_state)
        torch.set_rng_state(torch_state)
        if cuda is not None:
            torch.cuda.set_rng_state_all(cuda)


@contextlib.contextmanager
def _task_free_paused(strategy) -> Iterator[None]:
    """Run a block with the evaluator's :class:`~avalanche_sdr.evaluation.TaskFreeMetrics`
    turned off (``enabled``), then restore them: the group curve reads task-aware
    accuracy only, and routing every evaluated sample after every task with every router
    is work nobody reads."""
    metrics = [m for m in getattr(getattr(strategy, "evaluator", None), "metrics", ())
               if isinstance(m, TaskFreeMetrics)]
    before = [m.enabled for m in metrics]
    for m in metrics:
        m.enabled = False
    try:
        yield
    finally:
        for m, enabled in zip(metrics, before):
            m.enabled = enabled


class EvaluationCache:
    """The test accuracy of every position of a test stream evaluated so far, kept with a
    digest of the state it was evaluated in, so that an evaluation re-evaluates only the
    experiences whose state changed.

    The digest of an experience is E0's (:func:`~avalanche_sdr.models.digests.backbone_state_digest`)
    and its tasks' (:func:`~avalanche_sdr.models.digests.task_state_digest`: entry, head,
    permutation, class ids), i.e.
    everything its task-aware forward reads, hashed from the tensors' bytes (nothing
    relies on the training code reporting what it changed). :meth:`accuracies` passes
    through ``strategy.eval`` (one call) only the experiences whose digest differs from
    the cached one or that have none, and returns the cached accuracy of the others: an
    experience's accuracy depends on that state and its test data alone (eval mode,
    unshuffled data). After a head-only repeat only the task just trained is new; after a
    learning-reuse update every task of the updated entry is evaluated again. With an
    ``eval_router`` (evaluation without task labels: a routed answer reads every entry
    and the router) or an untrained task, every experience is evaluated.

    :param strategy: an :class:`~avalanche_sdr.training.SDRStrategy`.
    :param test_stream: the test experiences; positions index it.
    :raises TypeError: the strategy's model is not an SDR repository.

    ``evaluated``: the test experiences passed to ``strategy.eval`` so far. The cache
    is in memory only: a resumed run starts with an empty one.
    """

    def __init__(self, strategy, test_stream):
        if not isinstance(strategy.model, SDRModel):
            raise TypeError(f"EvaluationCache needs an SDRModel repository, got "
                            f"{type(strategy.model).__name__}; evaluate a baseline with final_test_accuracies")
        self.strategy, self.test_stream = strategy, test_stream
        self.evaluated = 0
        self._cached: Dict[int, tuple] = {}  # position -> (digest, accuracy)

    def _digests(self, positions: Sequence[int]) -> Dict[int, Optional[str]]:
        model = self.strategy.model
        if getattr(self.strategy, "eval_router", None) is not None:
            return {j: None for j in positions}
        backbone = backbone_state_digest(model)
        digests: Dict[int, Optional[str]] = {}
        for j in positions:
            tasks = [int(t) for t in self.test_stream[j].task_labels]
            trained = all(model.heads.is_trained(t) for t in tasks)
            digests[j] = "/".join([backbone] + [task_state_digest(model, t) for t in tasks]) if trained else None
        return digests

    def accuracies(self, positions: Sequence[int]) -> List[float]:
        """The accuracy (0-1) of the test experience at each of ``positions``, in that
        order: evaluated now if its state changed since its last evaluation (or it has
        none), else the accuracy it had then.

        :param positions: indices into the test stream.
        """
        positions = [int(j) for j in positions]
        digests = self._digests(positions)
        stale = [j for j in positions if digests[j] is None or self._cached.get(j, (None,))[0] != digests[j]]
        if stale:
            fresh = final_test_accuracies(self.strategy, [self.test_stream[j] for j in stale])
            self.evaluated += len(stale)
            self._cached.update((j, (digests[j], accuracy)) for j, accuracy in zip(stale, fresh))
        return [self._cached[j][1] for j in positions]


def evaluate_group(strategy, test_stream, groups: Sequence[int], position: int, task: int,
                   cache: Optional[EvaluationCache] = None) -> Dict[str, Any]:
    """The group-curve entry of the experience at ``position`` of the stream, just trained.

    Evaluates (``strategy.eval``, one call; :func:`preserved_rng` around it) the test
    experiences of every position ``j <= position`` with ``groups[j] == groups[position]``;
    with a ``cache``, only those whose state changed since their last evaluation
    (:class:`EvaluationCache`), the others' accuracies come from it (the same values);
    the evaluator's metrics and loggers then see those experiences only (no evaluation
    at all when none changed). The evaluator's :class:`~avalanche_sdr.evaluation.TaskFreeMetrics`, if any, are
    off during it (``enabled``): they score the final evaluation, not these.

    :param test_stream: the test experiences, in the order of the training stream.
    :param groups: the ground-truth group of every position (the runner's, never the
        strategy's).
    :param task: the experience's task label (recorded).
    :param cache: an :class:`EvaluationCache` of ``test_stream``; ``None``: evaluate
        every experience (e.g. a baseline's).
    :return: ``{"task", "group", "times_seen", "group_accuracy_after",
        "initial_accuracy", "evaluated", "accuracies"}`` (JSON-safe).
    :raises ValueError: ``cache`` belongs to another test stream.
    """
    if cache is not None and cache.test_stream is not test_stream:
        raise ValueError("the EvaluationCache was built for another test stream; build one per test stream")
    group = int(groups[position])
    evaluated = [j for j in range(position + 1) if int(groups[j]) == group]
    with preserved_rng(), _task_free_paused(strategy):
        if cache is None:
            accuracies = final_test_accuracies(strategy, [test_stream[j] for j in evaluated])
        else:
            accuracies = cache.accuracies(evaluated)
    return {
        "task": int(task),
        "group": group,
        "times_seen": len(evaluated),
        "group_accuracy_after": sum(accuracies) / len(accuracies),
        "initial_accuracy": accuracies[-1],
        "evaluated": evaluated,
        "accuracies": accuracies,
    }


def transfer_summary(curve: Sequence[Optional[Dict[str, Any]]], final_accuracies: Sequence[float]
                     ) -> Dict[str, Optional[float]]:
    """``{"bwt", "forgetting"}`` of a run (module docstring) from its group curve (one
    :func:`evaluate_group` entry per position) and the final accuracy of every task.

    Both are means over every task but the last (Lopez-Paz & Ranzato's 1 / (T - 1); the
    last task's difference is 0 by construction); ``None`` for a stream of one task or a
    curve with a missing entry.
    """
    n = len(final_accuracies)
    if n < 2 or len(curve) != n or any(entry is None for entry in curve):
        return {"bwt": None, "forgetting": None}
    seen: List[List[float]] = [[] for _ in range(n)]
    for entry in curve:
        for j, accuracy in zip(entry["evaluated"], entry["accuracies"]):
            seen[j].append(float(accuracy))
    earlier = range(n - 1)
    bwt = sum(float(final_accuracies[j]) - float(curve[j]["initial_accuracy"]) for j in earlier) / (n - 1)
    forgetting = sum(max(seen[j]) - float(final_accuracies[j]) for j in earlier) / (n - 1)
    return {"bwt": bwt, "forgetting": forgetting}


def all_new_memory_bytes(strategy, n_tasks: int) -> int:
    """Repository bytes had all ``n_tasks`` tasks been trained as new entries.

    Computed from the current repository: its size now, plus one more entry (mean
    size of the existing entries) for every task that reused one.
    """
    model = strategy.model
    now = repository_memory_bytes(strategy)
    entries = model.entries
    if not entries:
        return now
    per_entry = sum(entry_bytes(model, e) for e in entries) / len(entries)
    return int(now + per_entry * (n_tasks - len(entries)))


def _catch_up_detection_metrics(strategy, finished_experiences) -> None:
    """After a resume: every :class:`~avalanche_sdr.evaluation.DetectionMetrics` of the
    strategy's evaluator scores the restored records of the finished experiences
    (:meth:`~avalanche_sdr.evaluation.DetectionMetrics.catch_up`), so that it knows
    their ground truth when a later task reuses their entries."""
    for metric in getattr(getattr(strategy, "evaluator", None), "metrics", []) or []:
        if isinstance(metric, DetectionMetrics):
            metric.catch_up(strategy.detection_records, finished_experiences, strategy.model.entry_creator)


def run_sdr_stream(
    strategy,
    benchmark,
    *,
    config: Optional[Dict[str, Any]] = None,
    seed: Optional[int] = None,
    log: Optional[Callable[[str], None]] = None,
    timings: Optional[Dict[str, float]] = None,
    full_final_evaluation: bool = True,
    seed_each_task: Optional[int] = None,
) -> Dict[str, Any]:
    """Train ``strategy`` on every experience of ``benchmark.train_stream`` in order,
    then evaluate every task on ``benchmark.test_stream``; return the results dict.

    The group evaluation after each experience re-evaluates only the tasks whose state
    changed since their last evaluation (:class:`EvaluationCache`; after a head-only
    repeat, the new task alone) and reuses the others' accuracies: the results are
    those of evaluating every one of them again.

    :param strategy: an :class:`~avalanche_sdr.training.SDRStrategy`.
    :param benchmark: a mixed-similarity benchmark (experiences carry ``group``
        and ``split`` attributes).
    :param config: settings to record under ``"config"``.
    :param seed: seed to record.
    :param log: called with one line when the run resumes from a checkpoint (e.g.
        ``print`` in a script; ``None``: silent). Per-experience lines go to the
        strategy's loggers (``SDR_Decision``); :func:`avalanche_sdr.cli.results_table`
        prints the results as a table.
    :param timings: a dict that receives ``"evaluation_seconds"``, the wall time of this
        call's group evaluations (:func:`evaluate_group`; not the final evaluation),
        ``"evaluated_experiences"``, the test experiences they passed to
        ``strategy.eval``, and ``"final_evaluated_experiences"``, those the final
        evaluation passed; kept out of the results, which hold no wall-clock values.
    :param full_final_evaluation: ``True`` (default): the final evaluation passes every
        test experience to ``strategy.eval`` in one call, so the evaluator's metrics and
        loggers see a whole evaluation of the test stream (stream accuracy, Avalanche's
        ``StreamBWT`` / ``StreamForgetting``,
        :class:`~avalanche_sdr.evaluation.TaskFreeMetrics` over every experience).
        ``False``: it passes only the experiences whose state changed since their last
        group evaluation (none after a head-only run) and takes the others' accuracies
        from the :class:`EvaluationCache`: the results are the same, but the evaluator's
        last evaluation then covers only those experiences (its stream metrics and
        ``TaskFreeMetrics`` are over them), or is the last group evaluation when none
        changed. For callers that read the results only.
    :param seed_each_task: ``None`` (default): the global generators are left as the caller
        seeded them. An int: before each experience trains, they are seeded
        (:func:`~avalanche_sdr.seeding.seed_everything`) with
        :func:`~avalanche_sdr.seeding.task_seed` (``seed_each_task``, its position), so a
        task's training draws (initial weights, mini-batch order) do not depend on what
        earlier tasks drew: two configurations compared task by task draw alike for a task
        they train alike (common random numbers). Recorded as ``results["seed_each_task"]``
        and in a checkpoint's run description (a checkpoint resumes only with the same value).
    :raises TypeError: ``full_final_evaluation`` is not a bool.
    :raises ValueError: ``seed_each_task`` is not a seed (:func:`~avalanche_sdr.seeding.task_seed`).
    :raises CheckpointMismatchError: the strategy's checkpoint directory holds a
        checkpoint of another configuration, ``config``, ``seed``, ``seed_each_task`` or stream.
    """
    if not isinstance(full_final_evaluation, bool):
        raise TypeError(f"full_final_evaluation must be True or False, got {full_final_evaluation!r}")
    if seed_each_task is not None:
        try:
            task_seed(seed_each_task, 0)
        except TypeError as err:
            raise ValueError(f"seed_each_task must be None or a seed: {err}") from err
    train_stream, test_stream = benchmark.train_stream, benchmark.test_stream
    memory_after: List[float] = []
    group_curve: List[Optional[Dict[str, Any]]] = []
    groups: List[int] = []  # ground truth, read after each experience's training
    evaluation_seconds = 0.0
    cache = EvaluationCache(strategy, test_stream)  # empty after a resume: filled as evaluated
    finished = 0
    checkpoint = getattr(strategy, "checkpoint", None)
    if checkpoint is not None:
        run_info = {"config": dict(config or {}), "seed": seed}
        if seed_each_task is not None:  # a run seeded per task resumes only as one (older checkpoints: unchanged)
            run_info["seed_each_task"] = seed_each_task
        checkpoint.run_info = run_info
        finished = strategy.restore_checkpoint()
        if finished > len(train_stream):
            raise CheckpointMismatchError(
                checkpoint.directory, [("stream length", f">= {finished}", len(train_stream))]
            )
        for done, experience in zip(checkpoint.progress, train_stream):
            if done["task"] != int(experience.task_labels[0]):
                raise CheckpointMismatchError(
                    checkpoint.directory,
                    [(f"stream experience {done['experience']} task", done["task"], int(experience.task_labels[0]))],
                )
        memory_after = [done["memory_bytes"] / BYTES_PER_MB for done in checkpoint.progress]
        _catch_up_detection_metrics(strategy, list(train_stream)[:finished])
        groups = [int(e.group) for e in list(train_stream)[:finished]]
        group_curve = [done.get("group_curve") for done in checkpoint.progress]
        if finished:
            # The last finished experience's entry was evaluated after its checkpoint was
            # written; the restored model is the model after it: evaluate it again.
            tick = time.perf_counter()
            group_curve[-1] = evaluate_group(strategy, test_stream, groups, finished - 1,
                                            checkpoint.progress[-1]["task"], cache=cache)
            evaluation_seconds += time.perf_counter() - tick
            checkpoint.progress[-1]["group_curve"] = group_curve[-1]
            if log is not None:
                log(f"resumed from {str(checkpoint.directory)!r}: {finished} of {len(train_stream)} experiences done")
    for position, experience in enumerate(list(train_stream)[finished:], start=finished):
        if seed_each_task is not None:
            seed_everything(task_seed(seed_each_task, position))
        strategy.train(experience, eval_streams=[])
        memory_after.append(repository_memory_bytes(strategy) / BYTES_PER_MB)
        groups.append(int(experience.group))
        tick = time.perf_counter()
        group_curve.append(evaluate_group(strategy, test_stream, groups, position, int(experience.task_labels[0]),
                                          cache=cache))
        evaluation_seconds += time.perf_counter() - tick
        if checkpoint is not None:  # saved with the next experience's checkpoint
            checkpoint.progress[position]["group_curve"] = group_curve[-1]
    group_evaluated = cache.evaluated
    if full_final_evaluation:
        accuracies = final_test_accuracies(strategy, test_stream)
        final_evaluated = len(test_stream)
    else:
        accuracies = cache.accuracies(range(len(test_stream)))
        final_evaluated = cache.evaluated - group_evaluated
    if timings is not None:
        timings.update(evaluation_seconds=evaluation_seconds, evaluated_experiences=group_evaluated,
                       final_evaluated_experiences=final_evaluated)

    model = strategy.model
    records = strategy.detection_records
    group_of_task = {int(e.task_labels[0]): int(e.group) for e in train_stream}
    groups_seen: List[int] = []
    tasks, outcomes = [], []
    curves = list(strategy.sdr.epoch_accuracies)
    curves += [[] for _ in range(len(records) - len(curves))]  # none recorded (older checkpoint)
    record_dicts = strategy.sdr.record_dicts()  # the detection's and the reuse's records, one dict each
    for experience, record, record_dict, accuracy, memory, curve in zip(train_stream, records, record_dicts, accuracies,
                                                                         memory_after, curves):
        group, split = int(experience.group), int(experience.split)
        outcome = None
        chosen_task = None
        if record.decision != "warm_start":
            reused_group = None
            if record.reused_entry is not None:
                chosen_task = model.entry_creator[record.reused_entry]
                reused_group = group_of_task[chosen_task]
            outcome = classify_detection(group, groups_seen, reused_group)
            outcomes.append(outcome)
        groups_seen.append(group)
        tasks.append(
            {
                "task": record.task,
                "group": group,
                "split": split,
                "decision": record.decision,
                "entry": record.entry,
                "chosen_task": chosen_task,
                "outcome": outcome,
                "test_accuracy": accuracy,
                "train_accuracy_per_epoch": list(curve),
                "memory_mb": memory,
                "detection": _without_timing(record_dict),
            }
        )
    summary = detection_summary(outcomes)
    results = {
        "config": dict(config or {}),
        "method_preset": getattr(strategy, "method", None),  # the preset's name, beside its expanded values:
        "strategy_config": strategy_fingerprint(strategy),  # settings, detector, routers (as checkpoints match them)
        "seed": seed,
        "seed_each_task": seed_each_task,
        "detection": summary,
        "average_accuracy": sum(accuracies) / len(accuracies),
        "memory_mb": memory_after[-1],
        "memory_mb_all_new": all_new_memory_bytes(strategy, len(tasks)) / BYTES_PER_MB,
        "unique_tasks": model.num_entries,
        "tasks": tasks,
        "group_curve": group_curve,
        **transfer_summary(group_curve, accuracies),
    }
    return results


__all__ = ["run_sdr_stream", "final_test_accuracies", "all_new_memory_bytes", "evaluate_group", "EvaluationCache",
           "preserved_rng", "transfer_summary"]
