"""Tests for avalanche_sdr/evaluation/outcomes.py (pure detection scoring)."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from avalanche_sdr.evaluation.outcomes import (
    classify_detection,
    detection_summary,
    score_detection_record,
    score_detection_records,
)


@pytest.mark.parametrize(
    "task_group, earlier, reused_group, expected",
    [
        (3, [0, 1, 2], None, "correct"),  # new task detected as new
        (1, [0, 1, 2], None, "miss"),  # repeated task detected as new
        (1, [0, 1, 2], 1, "correct"),  # repeated task mapped to its group
        (1, [0, 1, 2], 2, "incorrect"),  # repeated task mapped to another group
        (5, [0, 1, 2], 0, "incorrect"),  # new task mapped to an old entry
        (0, [], None, "correct"),  # first task of a stream
    ],
)
def test_classify_detection_cases(task_group, earlier, reused_group, expected):
    assert classify_detection(task_group, earlier, reused_group) == expected


def test_classify_detection_rejects_entry_from_unseen_group():
    with pytest.raises(ValueError, match="reused_entry_group=4"):
        classify_detection(1, [0, 1], 4)


def test_classify_detection_type_errors():
    with pytest.raises(TypeError, match="task_group"):
        classify_detection("1", [0], None)
    with pytest.raises(TypeError, match="reused_entry_group"):
        classify_detection(1, [1], 1.0)


def test_detection_summary_fractions_and_none_skipped():
    summary = detection_summary(["correct", None, "miss", "correct", "incorrect", None])
    assert summary == {"correct": 0.5, "miss": 0.25, "incorrect": 0.25, "n_scored": 4}


def test_detection_summary_empty_and_bad_value():
    assert detection_summary([None]) == {
        "correct": 0.0,
        "miss": 0.0,
        "incorrect": 0.0,
        "n_scored": 0,
    }
    with pytest.raises(ValueError, match="'wrong'"):
        detection_summary(["correct", "wrong"])


@given(st.lists(st.sampled_from(["correct", "miss", "incorrect", None]), min_size=1))
def test_detection_summary_sums_to_one(outcomes):
    summary = detection_summary(outcomes)
    n = sum(o is not None for o in outcomes)
    assert summary["n_scored"] == n
    total = summary["correct"] + summary["miss"] + summary["incorrect"]
    assert math.isclose(total, 1.0 if n else 0.0)


def _record(task, decision, entry, reused=None):
    return {"task": task, "decision": decision, "entry": entry, "reused_entry": reused}


def test_score_detection_records_stream():
    # groups: T0:g0, T1:g1, T2:g2 (warm start), T3:g0 reuse e0 (correct),
    # T4:g1 new (miss), T5:g3 new (correct), T6:g2 reuse e4 created by T4 (g1): incorrect
    groups = {0: 0, 1: 1, 2: 2, 3: 0, 4: 1, 5: 3, 6: 2}
    records = [
        _record(0, "warm_start", 0),
        _record(1, "warm_start", 1),
        _record(2, "warm_start", 2),
        _record(3, "reuse", 0, reused=0),
        _record(4, "new", 3),
        _record(5, "new", 4),
        _record(6, "reuse", 3, reused=3),
    ]
    creators = {0: 0, 1: 1, 2: 2, 3: 4, 4: 5}
    outcomes = score_detection_records(records, groups, creators)
    assert outcomes == [None, None, None, "correct", "miss", "correct", "incorrect"]


def test_score_detection_record_errors_name_the_problem():
    with pytest.raises(ValueError, match="'maybe'"):
        score_detection_record(_record(3, "maybe", 0), 0, [0], {0: 0}.get, {0: 0})
    with pytest.raises(ValueError, match="reused entry 7"):
        score_detection_record(_record(3, "reuse", 7, 7), 0, [0], {0: 0}.get, {0: 0})
    with pytest.raises(ValueError, match="task 9"):
        score_detection_records([_record(9, "new", 0)], {0: 0}, {})
    with pytest.raises(ValueError, match="no field 'decision'"):
        score_detection_record({"task": 1}, 0, [], {}.get, {})


def test_score_detection_record_accepts_objects():
    from types import SimpleNamespace

    record = SimpleNamespace(task=2, decision="reuse", entry=0, reused_entry=0)
    assert score_detection_record(record, 1, [1, 0], {0: 1}.get, {0: 0}) == "correct"
