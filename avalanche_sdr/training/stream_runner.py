"""Running an SDR strategy over a whole mixed stream and collecting its results.

The results dictionary is the one the examples write with ``--output`` and
:mod:`avalanche_sdr.plots` reads::

    {"config": {...}, "seed": int,
     "detection": {"correct", "miss", "incorrect": fractions of scored tasks, "n_scored"},
     "average_accuracy": mean final test accuracy over all tasks (0-1),
     "memory_mb": repository size after the last task (MB = 2**20 bytes),
     "memory_mb_all_new": the same repository had every task been trained as new,
     "unique_tasks": C,
     "tasks": [{"task", "group", "split", "decision", "entry", "chosen_task",
                "outcome", "test_accuracy", "train_accuracy_per_epoch" (training accuracy of
                each epoch, 0-1), "memory_mb", "detection": {...}}, ...],
     "group_curve": [{"task", "group", "times_seen", "group_accuracy_after",
                      "initial_accuracy", "evaluated", "accuracies"}, ...],
     "bwt": float or null, "forgetting": float or null}

The group curve (:func:`evaluate_group`): after training experience i, of group g,
the test experiences of group g's tasks trained so far (i included) are evaluated
with ``strategy.eval``; one entry per experience: ``times_seen`` (how many tasks of
group g are trained so far), ``group_accuracy_after`` (mean accuracy over those test
experiences, 0-1), ``initial_accuracy`` (task i's own test accuracy right after
training it), ``evaluated`` (their stream positions) and ``accuracies`` (each one's
accuracy). :func:`transfer_summary` computes from it and the final accuracies:

- ``bwt``: backward transfer (Lopez-Paz & Ranzato 2017), the mean over every task but
  the last of (final accuracy - initial accuracy); positive: earlier tasks got
  better. It equals Avalanche's ``StreamBWT`` (``bwt_metrics(stream=True)``: same
  sign; Avalanche's ``StreamForgetting`` is its negative) read after the final
  evaluation, since the group evaluation sets every task's initial accuracy the way
  Avalanche does (the experience evaluated is the one just trained);
- ``forgetting`` (Chaudhry et al. 2018, over the evaluations made here): the mean
  over every task but the last of (its best accuracy in the group evaluations -
  its final accuracy); >= 0 up to the final evaluation's own gains.

The group evaluation leaves the global random generators as it found them
(:func:`preserved_rng`), so the training of the next experiences is the one of a run
without it.

The dictionary holds no wall-clock values, so identical runs give identical results
(timings go to the strategy's loggers instead). Ground truth (``group``, ``split``) is read from the experiences in Avalanche's
logging mode, after training: the strategy never sees it.

With a strategy built with ``checkpoint_dir``, the run resumes from the checkpoint
there: finished experiences are skipped, their memory figures and group-curve entries
come from the checkpoint (``progress[i]["group_curve"]``; the last finished
experience's entry is evaluated again on the restored model, which is the model after
it), the evaluator's :class:`~avalanche_sdr.evaluation.DetectionMetrics` are
brought up to date with their records, and the results equal those of an
uninterrupted run (bit for bit on CPU).
A stream no longer than the warm start has every task trained as ``warm_start`` and
nothing scored (``"detection"`` fractions 0.0, ``n_scored`` 0).
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
from avalanche_sdr.training.checkpoint import CheckpointMismatchError


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


def evaluate_group(strategy, test_stream, groups: Sequence[int], position: int, task: int) -> Dict[str, Any]:
    """The group-curve entry of the experience at ``position`` of the stream, just trained.

    Evaluates (``strategy.eval``, one call; :func:`preserved_rng` around it) the test
    experiences of every position ``j <= position`` with ``groups[j] == groups[position]``.
    The evaluator's :class:`~avalanche_sdr.evaluation.TaskFreeMetrics`, if any, are
    off during it (``enabled``): they score the final evaluation, not these.

    :param test_stream: the test experiences, in the order of the training stream.
    :param groups: the ground-truth group of every position (the runner's, never the
        strategy's).
    :param task: the experience's task label (recorded).
    :return: ``{"task", "group", "times_seen", "group_accuracy_after",
        "initial_accuracy", "evaluated", "accuracies"}`` (JSON-safe).
    """
    group = int(groups[position])
    evaluated = [j for j in range(position + 1) if int(groups[j]) == group]
    with preserved_rng(), _task_free_paused(strategy):
        accuracies = final_test_accuracies(strategy, [test_stream[j] for j in evaluated])
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
    per_entry = sum(model.entry_bytes(e) for e in entries) / len(entries)
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
) -> Dict[str, Any]:
    """Train ``strategy`` on every experience of ``benchmark.train_stream`` in order,
    then evaluate every task on ``benchmark.test_stream``; return the results dict.

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
        call's group evaluations (:func:`evaluate_group`; not the final evaluation);
        kept out of the results, which hold no wall-clock values.
    :raises CheckpointMismatchError: the strategy's checkpoint directory holds a
        checkpoint of another configuration, ``config``, ``seed`` or stream.
    """
    train_stream, test_stream = benchmark.train_stream, benchmark.test_stream
    memory_after: List[float] = []
    group_curve: List[Optional[Dict[str, Any]]] = []
    groups: List[int] = []  # ground truth, read after each experience's training
    evaluation_seconds = 0.0
    finished = 0
    checkpoint = getattr(strategy, "checkpoint", None)
    if checkpoint is not None:
        checkpoint.run_info = {"config": dict(config or {}), "seed": seed}
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
                                            checkpoint.progress[-1]["task"])
            evaluation_seconds += time.perf_counter() - tick
            checkpoint.progress[-1]["group_curve"] = group_curve[-1]
            if log is not None:
                log(f"resumed from {str(checkpoint.directory)!r}: {finished} of {len(train_stream)} experiences done")
    for position, experience in enumerate(list(train_stream)[finished:], start=finished):
        strategy.train(experience, eval_streams=[])
        memory_after.append(repository_memory_bytes(strategy) / BYTES_PER_MB)
        groups.append(int(experience.group))
        tick = time.perf_counter()
        group_curve.append(evaluate_group(strategy, test_stream, groups, position, int(experience.task_labels[0])))
        evaluation_seconds += time.perf_counter() - tick
        if checkpoint is not None:  # saved with the next experience's checkpoint
            checkpoint.progress[position]["group_curve"] = group_curve[-1]
    if timings is not None:
        timings["evaluation_seconds"] = evaluation_seconds
    accuracies = final_test_accuracies(strategy, test_stream)

    model = strategy.model
    records = strategy.detection_records
    group_of_task = {int(e.task_labels[0]): int(e.group) for e in train_stream}
    groups_seen: List[int] = []
    tasks, outcomes = [], []
    curves = list(strategy.sdr.epoch_accuracies)
    curves += [[] for _ in range(len(records) - len(curves))]  # none recorded (older checkpoint)
    for experience, record, accuracy, memory, curve in zip(train_stream, records, accuracies, memory_after, curves):
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
                "detection": _without_timing(record.to_dict()),
            }
        )
    summary = detection_summary(outcomes)
    results = {
        "config": dict(config or {}),
        "seed": seed,
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


__all__ = ["run_sdr_stream", "final_test_accuracies", "all_new_memory_bytes", "evaluate_group", "preserved_rng",
           "transfer_summary"]
