"""Scoring of similar-task detection decisions against the ground truth.

Pure functions, no Avalanche import: usable by the plugin metrics, by scripts
that write results files and by the plots.

Definitions (:ref:`definitions`, in docs/method.rst): two tasks are *similar*
when they have the same group ``k``. For a scored task:

- **correct**: a new task detected as new, or a repeated task mapped to an
  entry created by an earlier task of the same group;
- **miss**: a repeated task (its group appeared earlier) detected as new;
- **incorrect**: a task mapped to an entry created by a task of another group.

Warm-start tasks are trained as new without detection and are not scored.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence

from avalanche_sdr.vocabulary import (  # defined once for records, scoring and plots
    CORRECT,
    DECISION_NEW,
    DECISION_REUSE,
    DECISION_WARM_START,
    DECISIONS,
    INCORRECT,
    MISS,
    OUTCOMES,
)


def _check_int(name: str, value: Any) -> int:
    # bool is an int subclass but never a valid group.
    if isinstance(value, bool) or not isinstance(value, int):
        try:
            import numpy as np

            if isinstance(value, np.integer):
                return int(value)
        except ImportError:  # pragma: no cover - numpy is a dependency
            pass
        raise TypeError(f"{name} must be an int, got {value!r} ({type(value).__name__})")
    return value


def classify_detection(
    task_group: int,
    earlier_groups: Sequence[int],
    reused_entry_group: Optional[int],
) -> str:
    """Classify one detection decision as ``"correct"``, ``"miss"`` or ``"incorrect"``.

    :param task_group: ground-truth group ``k`` of the current task.
    :param earlier_groups: groups of all tasks trained before the current one
        (warm-start tasks included), in any order; repeats allowed.
    :param reused_entry_group: group of the task that *created* the repository
        entry the strategy reused, or ``None`` when the task was detected as new.
    :return: ``"correct"``, ``"miss"`` or ``"incorrect"``.
    :raises ValueError: if ``reused_entry_group`` is not among
        ``earlier_groups`` (an entry can only have been created by an earlier task).
    """
    task_group = _check_int("task_group", task_group)
    earlier = {_check_int("earlier_groups[...]", g) for g in earlier_groups}
    if reused_entry_group is None:
        return MISS if task_group in earlier else CORRECT
    reused_entry_group = _check_int("reused_entry_group", reused_entry_group)
    if reused_entry_group not in earlier:
        raise ValueError(
            f"reused_entry_group={reused_entry_group} is not the group of any earlier "
            f"task (earlier groups: {sorted(earlier)}); a reused entry must have been "
            "created by an earlier task"
        )
    return CORRECT if reused_entry_group == task_group else INCORRECT


def detection_summary(outcomes: Iterable[Optional[str]]) -> Dict[str, Any]:
    """Fractions of correct, missed and incorrect detections.

    :param outcomes: outcome strings as returned by :func:`classify_detection`;
        ``None`` entries (unscored tasks, e.g. warm start) are skipped.
    :return: ``{"correct": float, "miss": float, "incorrect": float,
        "n_scored": int}``; fractions in [0, 1] that sum to 1 when
        ``n_scored > 0``, and all 0.0 when nothing was scored.
    :raises ValueError: on an outcome string outside
        ``("correct", "miss", "incorrect")``.
    """
    counts = {name: 0 for name in OUTCOMES}
    for outcome in outcomes:
        if outcome is None:
            continue
        if outcome not in counts:
            raise ValueError(
                f"unknown detection outcome {outcome!r}; expected one of {OUTCOMES} or None"
            )
        counts[outcome] += 1
    n = sum(counts.values())
    summary: Dict[str, Any] = {
        name: (counts[name] / n if n else 0.0) for name in OUTCOMES
    }
    summary["n_scored"] = n
    return summary


def record_field(record: Any, name: str, default: Any = ...) -> Any:
    """Read field ``name`` of a detection record given as an object or a dict.

    :param record: a ``DetectionRecord`` (or any object with attributes) or
        its ``to_dict()`` form.
    :param name: field name, e.g. ``"decision"``.
    :param default: value returned when the field is absent; without it a
        missing field raises.
    :raises ValueError: if the field is missing and no default was given.
    """
    if isinstance(record, Mapping):
        if name in record:
            return record[name]
    elif hasattr(record, name):
        return getattr(record, name)
    if default is ...:
        raise ValueError(
            f"detection record {record!r} has no field {name!r}; expected a "
            "DetectionRecord or its to_dict() form"
        )
    return default


def score_detection_records(
    records: Sequence[Any],
    task_groups: Mapping[int, int],
    entry_creator: Mapping[int, int],
) -> List[Optional[str]]:
    """Score a sequence of detection records in stream order.

    :param records: one detection record per training experience, in the order
        the tasks were trained (``DetectionRecord`` objects or dicts with at
        least ``task``, ``decision`` and ``reused_entry``).
    :param task_groups: ground-truth group of every task id in ``records``.
    :param entry_creator: repository entry id -> id of the task that created it.
    :return: one outcome per record, ``None`` for warm-start records.
    :raises ValueError: on an unknown decision, a task id missing from
        ``task_groups`` or a reused entry missing from ``entry_creator``.
    """
    outcomes: List[Optional[str]] = []
    earlier: List[int] = []
    for record in records:
        task = int(record_field(record, "task"))
        if task not in task_groups:
            raise ValueError(
                f"task {task} has no ground-truth group in task_groups "
                f"(known tasks: {sorted(task_groups)})"
            )
        group = int(task_groups[task])
        outcomes.append(
            score_detection_record(record, group, earlier, task_groups.get, entry_creator)
        )
        earlier.append(group)
    return outcomes


def score_detection_record(
    record: Any,
    group: int,
    earlier_groups: Sequence[int],
    group_of_task: Callable[[int], Optional[int]],
    entry_creator: Mapping[int, int],
) -> Optional[str]:
    """Outcome of one detection record.

    :param record: a ``DetectionRecord`` or its dict form (``task``,
        ``decision``, ``reused_entry``; ``entry`` is used when
        ``reused_entry`` is absent).
    :param group: ground-truth group of the record's task.
    :param earlier_groups: groups of every task trained before it.
    :param group_of_task: task id -> ground-truth group, or None if unknown.
    :param entry_creator: repository entry id -> id of the task that created it.
    :return: ``"correct"``, ``"miss"``, ``"incorrect"``, or None for a
        warm-start record.
    :raises ValueError: on an unknown decision or a reused entry whose creating
        task or its group is unknown.
    """
    decision = record_field(record, "decision")
    if decision == DECISION_WARM_START:
        return None
    if decision == DECISION_NEW:
        return classify_detection(group, earlier_groups, None)
    if decision != DECISION_REUSE:
        raise ValueError(
            f"unknown detection decision {decision!r}; expected one of {DECISIONS}"
        )
    entry = record_field(record, "reused_entry", None)
    if entry is None:
        entry = record_field(record, "entry")
    entry = int(entry)
    if entry not in entry_creator:
        raise ValueError(
            f"reused entry {entry} of task {record_field(record, 'task')} has no "
            f"creating task in entry_creator (known entries: {sorted(entry_creator)})"
        )
    creator = int(entry_creator[entry])
    creator_group = group_of_task(creator)
    if creator_group is None:
        raise ValueError(
            f"the task {creator} that created reused entry {entry} has no known "
            "ground-truth group"
        )
    return classify_detection(group, earlier_groups, int(creator_group))


__all__ = [
    "CORRECT",
    "MISS",
    "INCORRECT",
    "OUTCOMES",
    "DECISIONS",
    "classify_detection",
    "detection_summary",
    "record_field",
    "score_detection_record",
    "score_detection_records",
]
