"""Reading and checking a run's results JSON, and the tables the figures draw.

The results dictionary is the one ``examples/quickstart.py --output`` writes
(:mod:`avalanche_sdr.training.stream_runner`): ``config``, ``seed``, ``detection``
fractions, ``average_accuracy`` (0-1), ``memory_mb``, ``unique_tasks`` and one record
per task in stream order. The functions here check it and turn it into the tables
the figures draw, and name a task as the printed results table and the ``[SDR] task
t: ...`` lines do: ``task 3`` (:func:`task_label`), with its 0-based group and split
where they are shown (:func:`task_description`).

Why separate from the figures: no Avalanche and no plotting here, plain dicts, lists
and numpy, so the format is checked and tested without matplotlib.

The format field by field: docs/method.rst, section "The results JSON the plots
read".
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

import numpy as np

from avalanche_sdr.vocabulary import DECISIONS, OUTCOMES

TASK_KEYS_DETECTION = ("task", "group", "split", "decision", "entry", "detection")
TASK_KEYS_MEMORY = ("task", "memory_mb")
TASK_KEYS_ACCURACY = ("task", "group", "split", "decision", "outcome", "test_accuracy")
DETECTION_KEYS = ("candidate_entries", "consistency", "complexity")


class ResultsFormatError(ValueError):
    """A results JSON lacks a key or holds a value of the wrong kind."""


def load_results(source: Union[str, os.PathLike, Mapping[str, Any]]) -> Dict[str, Any]:
    """Load a results JSON file (or pass a dict through) and check its top level.

    :param source: path to the JSON file, or the already-parsed dict.
    :return: the results dict.
    :raises FileNotFoundError: if the path does not exist.
    :raises ResultsFormatError: if the file is not JSON or has no ``tasks`` list.
    """
    if isinstance(source, Mapping):
        results = dict(source)
        where = "results"
    else:
        path = Path(source)
        if not path.is_file():
            raise FileNotFoundError(f"results file {str(path)!r} does not exist")
        try:
            results = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as err:
            raise ResultsFormatError(f"{path} is not valid JSON: {err}") from err
        where = str(path)
    if not isinstance(results, dict):
        raise ResultsFormatError(f"{where}: expected a JSON object, got {type(results).__name__}")
    tasks = results.get("tasks")
    if not isinstance(tasks, list) or not tasks:
        raise ResultsFormatError(
            f"{where}: missing or empty 'tasks' list (one entry per task, in stream order)"
        )
    return results


def require_task_keys(
    results: Mapping[str, Any],
    task_keys: Sequence[str],
    detection_keys: Sequence[str] = (),
) -> List[Dict[str, Any]]:
    """Check that every task has ``task_keys`` (and scored tasks ``detection_keys``).

    :param results: a results dict (see module docstring).
    :param task_keys: keys each ``results["tasks"][i]`` must have.
    :param detection_keys: keys each non-warm-start task's ``detection`` must
        have; list-valued ones must all have the length of ``candidate_entries``.
    :return: ``results["tasks"]``.
    :raises ResultsFormatError: naming the first offending task and key.
    """
    tasks = results.get("tasks")
    if not isinstance(tasks, list) or not tasks:
        raise ResultsFormatError("results: missing or empty 'tasks' list")
    task_keys = list(dict.fromkeys(task_keys))
    for i, task in enumerate(tasks):
        if not isinstance(task, Mapping):
            raise ResultsFormatError(f"results['tasks'][{i}] is not an object: {task!r}")
        missing = [key for key in task_keys if key not in task]
        if missing:
            raise ResultsFormatError(
                f"results['tasks'][{i}] is missing key(s) {missing}; "
                f"expected at least {list(task_keys)}"
            )
        if "decision" in task and task["decision"] not in DECISIONS:
            raise ResultsFormatError(
                f"results['tasks'][{i}]['decision'] is {task['decision']!r}; "
                f"expected one of {DECISIONS}"
            )
        if "outcome" in task_keys and task["outcome"] not in (*OUTCOMES, None):
            raise ResultsFormatError(
                f"results['tasks'][{i}]['outcome'] is {task['outcome']!r}; "
                f"expected one of {OUTCOMES} or null"
            )
        if "test_accuracy" in task_keys:
            acc = task["test_accuracy"]
            if not isinstance(acc, (int, float)) or not 0.0 <= acc <= 1.0:
                raise ResultsFormatError(
                    f"results['tasks'][{i}]['test_accuracy'] is {acc!r}; expected a "
                    "fraction in [0, 1]"
                )
        if detection_keys and task.get("decision") != "warm_start":
            _check_detection(i, task.get("detection"), detection_keys)
    return tasks


def _check_detection(i: int, detection: Any, keys: Sequence[str]) -> None:
    where = f"results['tasks'][{i}]['detection']"
    if not isinstance(detection, Mapping):
        raise ResultsFormatError(f"{where} must be a DetectionRecord dict, got {detection!r}")
    missing = [key for key in keys if key not in detection]
    if missing:
        raise ResultsFormatError(f"{where} is missing key(s) {missing}; expected {list(keys)}")
    n = len(detection["candidate_entries"])
    for key in keys:
        value = detection[key]
        if isinstance(value, list) and len(value) != n:
            raise ResultsFormatError(
                f"{where}[{key!r}] has {len(value)} values but there are {n} candidate entries"
            )


def task_label(task: Mapping[str, Any]) -> str:
    """Name of a task dict in figures: ``"task 3"`` (its 0-based task id).

    The id is Avalanche's experience id, as in the printed results table and the
    ``[SDR] task 3: ...`` lines.
    """
    return f"task {int(task['task'])}"


def task_description(task: Mapping[str, Any]) -> str:
    """:func:`task_label` with the 0-based group and split: ``"task 3 (group 3, split 1)"``."""
    return f"{task_label(task)} (group {int(task['group'])}, split {int(task['split'])})"


def entry_creators(results: Mapping[str, Any]) -> Dict[int, int]:
    """Repository entry id -> id of the task that created it.

    Read from the tasks trained as new (``warm_start`` or ``new``), completed
    by the detection records' ``candidate_entries`` / ``candidate_tasks``.
    """
    creators: Dict[int, int] = {}
    for task in results["tasks"]:
        detection = task.get("detection") or {}
        for entry, creator in zip(
            detection.get("candidate_entries") or [], detection.get("candidate_tasks") or []
        ):
            creators.setdefault(int(entry), int(creator))
    for task in results["tasks"]:
        if task.get("decision") in ("warm_start", "new") and "entry" in task:
            creators[int(task["entry"])] = int(task["task"])
    return creators


_TASK_NAME = re.compile(r"(?:task)?(-?\d+)", re.IGNORECASE)  # spaces removed first
_LEGACY_LABEL = re.compile(r"T(\d+),(\d+)", re.IGNORECASE)


def find_task(results: Mapping[str, Any], task: Union[int, str]) -> Dict[str, Any]:
    """The task dict for a task id: an int, ``"3"`` or ``"task 3"`` (0-based id).

    The legacy label ``"T4,2"`` of earlier versions (paper style: 1-based group
    and split, here group 3, split 1) is still accepted.

    :raises ResultsFormatError: if no task matches or ``task`` is neither form
        (the message lists the task ids the results have).
    """
    tasks = results["tasks"]
    ids = _describe_ids([int(t["task"]) for t in tasks])
    if isinstance(task, str):
        text = task.strip().replace(" ", "")
        legacy = _LEGACY_LABEL.fullmatch(text)
        if legacy:
            group, split = int(legacy.group(1)) - 1, int(legacy.group(2)) - 1
            for t in tasks:
                if (int(t["group"]), int(t["split"])) == (group, split):
                    return t
            raise ResultsFormatError(
                f"no task with group {group}, split {split} (legacy label {task!r}: 1-based "
                f"group and split); name a task by its 0-based id instead, e.g. "
                f"'task {int(tasks[-1]['task'])}'; the results have ids {ids}"
            )
        named = _TASK_NAME.fullmatch(text)
        if not named:
            last = int(tasks[-1]["task"])
            raise ResultsFormatError(
                f"cannot read task {task!r}: give a task id such as {last} or 'task {last}' "
                f"(0-based, as in the printed results table); the results have ids {ids}"
            )
        task = named.group(1)
    task_id = int(task)
    for t in tasks:
        if int(t["task"]) == task_id:
            return t
    raise ResultsFormatError(f"no task with id {task_id}; the results have ids {ids}")


def _describe_ids(ids: Sequence[int]) -> str:
    """``"0 to 99"`` for consecutive ids, else the list."""
    if len(ids) > 2 and list(ids) == list(range(ids[0], ids[0] + len(ids))):
        return f"{ids[0]} to {ids[-1]}"
    return str(list(ids))


def default_example_task(results: Mapping[str, Any]) -> Optional[Dict[str, Any]]:
    """The first reused task, else the first scored task, else None."""
    for decision in ("reuse", "new"):
        for task in results["tasks"]:
            if task.get("decision") == decision:
                return task
    return None


def chosen_entry(task: Mapping[str, Any]) -> Optional[int]:
    """Entry reused by a task (None when it was trained as new)."""
    if task.get("decision") != "reuse":
        return None
    detection = task.get("detection") or {}
    entry = detection.get("reused_entry")
    return int(entry if entry is not None else task["entry"])


@dataclass
class DetectionGrid:
    """One detection score laid out as current tasks x repository entries.

    :ivar values: float64 ``[n_rows, n_cols]``, NaN where the entry did not
        exist yet when the row's task was detected.
    :ivar rows: the scored task dicts (rows), stream order.
    :ivar entries: entry ids (columns), in creation order.
    :ivar row_labels: :func:`task_label` (``"task 3"``) of each row task.
    :ivar col_labels: :func:`task_label` of the task that created each entry
        (``"entry 4"`` when that task is not in the results).
    :ivar similar: bool ``[n_rows, n_cols]``, True where the entry's creator
        has the row task's group (ground truth).
    :ivar chosen: column index of the reused entry per row, or None.
    :ivar vote: column index of this score's own vote per row, or None.
    """

    values: np.ndarray
    rows: List[Dict[str, Any]]
    entries: List[int]
    row_labels: List[str]
    col_labels: List[str]
    similar: np.ndarray
    chosen: List[Optional[int]]
    vote: List[Optional[int]]


def detection_grid(results: Mapping[str, Any], score: str) -> DetectionGrid:
    """Lay out ``score`` (``"complexity"`` or ``"consistency"``) as a grid.

    :raises ResultsFormatError: on missing keys or when no task was scored.
    :raises ValueError: on an unknown ``score``.
    """
    if score not in ("complexity", "consistency"):
        raise ValueError(f"score must be 'complexity' or 'consistency', got {score!r}")
    tasks = require_task_keys(results, TASK_KEYS_DETECTION, DETECTION_KEYS)
    rows = [t for t in tasks if t["decision"] != "warm_start"]
    if not rows:
        raise ResultsFormatError(
            "results have no scored task (every task is warm start): nothing to plot"
        )
    by_id = {int(t["task"]): t for t in tasks}
    creators = entry_creators(results)
    entries = sorted(creators, key=lambda e: (_position(tasks, creators[e]), e))
    column = {e: j for j, e in enumerate(entries)}
    values = np.full((len(rows), len(entries)), np.nan)
    similar = np.zeros_like(values, dtype=bool)
    chosen: List[Optional[int]] = []
    vote: List[Optional[int]] = []
    vote_key = "vote_complexity" if score == "complexity" else "vote_consistency"
    for i, task in enumerate(rows):
        detection = task["detection"]
        for entry, value in zip(detection["candidate_entries"], detection[score]):
            if int(entry) not in column:
                raise ResultsFormatError(
                    f"task {task['task']}: candidate entry {entry} has no creating task "
                    "(add candidate_tasks to its detection record)"
                )
            values[i, column[int(entry)]] = _as_float(value)
        for entry, j in column.items():
            creator = by_id.get(creators[entry])
            similar[i, j] = creator is not None and int(creator["group"]) == int(task["group"])
        reused = chosen_entry(task)
        chosen.append(column.get(reused) if reused is not None else None)
        voted = detection.get(vote_key)
        vote.append(column.get(int(voted)) if voted is not None else None)
    col_labels = [
        task_label(by_id[creators[e]]) if creators[e] in by_id else f"entry {e}" for e in entries
    ]
    return DetectionGrid(
        values=values,
        rows=rows,
        entries=entries,
        row_labels=[task_label(t) for t in rows],
        col_labels=col_labels,
        similar=similar,
        chosen=chosen,
        vote=vote,
    )


def _position(tasks: Sequence[Mapping[str, Any]], task_id: int) -> int:
    for i, t in enumerate(tasks):
        if int(t["task"]) == task_id:
            return i
    return len(tasks) + task_id


def _as_float(value: Any) -> float:
    """JSON number (or null / "NaN" string) -> float; None -> NaN."""
    if value is None:
        return math.nan
    return float(value)


@dataclass
class GroupCurveLine:
    """One row's line in :func:`group_curve_lines`: ``label``, and at each
    ``times_seen`` (1, 2, ...) the ``accuracy`` on the group's tasks trained so far
    (0-1, mean over the runs that saw the group that often) and ``runs`` (how many)."""

    label: str
    times_seen: List[int]
    accuracy: List[float]
    runs: List[int]


def default_curve_group(runs: Sequence[Mapping[str, Any]]) -> int:
    """The group seen most often in the runs' ``group_curve`` (the most entries of one
    run); ties: the lowest group id.

    :raises ResultsFormatError: no run has a group curve.
    """
    counts: Dict[int, int] = {}
    for run in runs:
        seen: Dict[int, int] = {}
        for entry in run.get("group_curve") or []:
            if entry is not None:  # None: not measured (a resumed run's checkpoint without it)
                seen[int(entry["group"])] = seen.get(int(entry["group"]), 0) + 1
        for group, n in seen.items():
            counts[group] = max(counts.get(group, 0), n)
    if not counts:
        raise ResultsFormatError("no run has a group_curve (runs of the Table 2 harness or run_sdr_stream)")
    return min(counts, key=lambda g: (-counts[g], g))


def group_curve_lines(runs: Sequence[Mapping[str, Any]], group: Optional[int] = None):
    """The lines of :func:`avalanche_sdr.plots.plot_group_curve`: for ``group`` (default
    :func:`default_curve_group`), one :class:`GroupCurveLine` per row, in the order rows
    first appear in ``runs``.

    :param runs: run dicts with ``group_curve`` (entries ``group``, ``times_seen``,
        ``group_accuracy_after``) and ``label`` (a row: its runs share ``method`` and
        ``variant``, or the label; several seeds are averaged); runs without a curve are
        left out.
    :return: ``(group, lines)``.
    :raises ResultsFormatError: no run has a group curve, or none holds ``group``.
    """
    group = default_curve_group(runs) if group is None else int(group)
    by_row: Dict[Any, Dict[str, Any]] = {}
    for run in runs:
        entries = [e for e in run.get("group_curve") or [] if e is not None and int(e["group"]) == group]
        if not entries:
            continue
        key = (run.get("method"), run.get("variant", "")) if "method" in run else run.get("label")
        row = by_row.setdefault(key, {"label": str(run.get("label", key)), "values": {}})
        for entry in entries:
            row["values"].setdefault(int(entry["times_seen"]), []).append(float(entry["group_accuracy_after"]))
    if not by_row:
        raise ResultsFormatError(f"no run's group_curve holds group {group}")
    lines = []
    for row in by_row.values():
        seen = sorted(row["values"])
        lines.append(GroupCurveLine(row["label"], seen, [sum(row["values"][k]) / len(row["values"][k]) for k in seen],
                                    [len(row["values"][k]) for k in seen]))
    return group, lines


__all__ = [
    "DETECTION_KEYS",
    "DetectionGrid",
    "GroupCurveLine",
    "ResultsFormatError",
    "TASK_KEYS_ACCURACY",
    "TASK_KEYS_DETECTION",
    "TASK_KEYS_MEMORY",
    "chosen_entry",
    "default_curve_group",
    "default_example_task",
    "detection_grid",
    "entry_creators",
    "find_task",
    "group_curve_lines",
    "load_results",
    "require_task_keys",
    "task_description",
    "task_label",
]
