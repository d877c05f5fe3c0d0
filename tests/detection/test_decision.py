"""Tests for avalanche_sdr.detection.decision (rule and DetectionRecord)."""

import json

import numpy as np
import pytest
import torch

from avalanche_sdr.detection.decision import DECISIONS, DetectionRecord, agreement_decision


def reuse_record(**overrides):
    fields = dict(
        task=7,
        decision="reuse",
        entry=2,
        reused_entry=2,
        candidate_entries=[0, 1, 2],
        candidate_tasks=[0, 1, 4],
        consistency=[0.1, 0.2, 0.7],
        complexity=[3.5, 2.9, 1.25],
        vote_consistency=2,
        vote_complexity=2,
        rule="agreement",
        detection_seconds=0.42,
    )
    fields.update(overrides)
    return DetectionRecord(**fields)


# --------------------------------------------------------------------------- rule


def test_agreement_returns_index_when_votes_agree():
    assert agreement_decision([0.1, 0.7, 0.2], [3.0, 1.0, 2.0]) == 1


def test_agreement_returns_none_when_votes_differ():
    assert agreement_decision([0.1, 0.7, 0.2], [3.0, 2.0, 1.0]) is None


def test_agreement_accepts_tensors_and_arrays():
    p = torch.tensor([0.6, 0.4], dtype=torch.float64)
    s = torch.tensor([0.5, 0.9], dtype=torch.float64)
    assert agreement_decision(p, s) == 0
    assert agreement_decision(np.array([0.2, 0.8]), np.array([2.0, 1.0])) == 1


def test_agreement_with_no_candidates_is_new():
    assert agreement_decision([], []) is None
    assert agreement_decision(torch.zeros(0), torch.zeros(0)) is None


def test_agreement_single_candidate_always_agrees():
    assert agreement_decision([1.0], [123.0]) == 0


def test_agreement_breaks_ties_towards_lowest_index():
    assert agreement_decision([0.5, 0.5], [1.0, 1.0]) == 0
    assert agreement_decision([0.5, 0.5], [2.0, 1.0]) is None


def test_agreement_handles_infinite_complexity():
    assert agreement_decision([0.3, 0.7], [float("inf"), 5.0]) == 1


@pytest.mark.parametrize(
    "p, s, message",
    [
        ([0.5, 0.5], [1.0], "one value per candidate"),
        ([0.5, float("nan")], [1.0, 2.0], "NaN"),
        ([0.5, 0.5], [float("nan"), 2.0], "NaN"),
        (torch.zeros(2, 2), torch.zeros(2), "1-D"),
    ],
)
def test_agreement_rejects_bad_inputs(p, s, message):
    with pytest.raises(ValueError, match=message):
        agreement_decision(p, s)


# ------------------------------------------------------------------------- record


def test_record_json_round_trip():
    record = reuse_record()
    data = record.to_dict()
    text = json.dumps(data, allow_nan=False)
    restored = DetectionRecord.from_dict(json.loads(text))
    assert restored == record
    assert restored.to_dict() == data


def test_to_dict_has_plain_python_types_from_tensor_inputs():
    record = reuse_record(
        task=torch.tensor(7),
        entry=np.int64(2),
        reused_entry=torch.tensor(2),
        consistency=torch.tensor([0.1, 0.2, 0.7], dtype=torch.float64),
        complexity=np.array([3.5, 2.9, 1.25]),
        detection_seconds=np.float32(0.5),
    )
    data = record.to_dict()

    def plain(value):
        if isinstance(value, list):
            return all(plain(v) for v in value)
        return value is None or type(value) in (int, float, str, bool)

    assert all(plain(v) for v in data.values()), data
    assert data["consistency"] == pytest.approx([0.1, 0.2, 0.7])
    assert data["task"] == 7 and data["entry"] == 2


def test_warm_start_and_new_records_round_trip():
    warm = DetectionRecord(task=0, decision="warm_start", entry=0, rule="warm_start")
    assert DetectionRecord.from_dict(json.loads(json.dumps(warm.to_dict()))) == warm
    new = reuse_record(decision="new", entry=3, reused_entry=None, vote_consistency=1)
    assert DetectionRecord.from_dict(json.loads(json.dumps(new.to_dict()))) == new


def test_non_finite_scores_survive_strict_json():
    record = reuse_record(complexity=[float("inf"), 2.0, 1.0])
    text = json.dumps(record.to_dict(), allow_nan=False)
    restored = DetectionRecord.from_dict(json.loads(text))
    assert restored.complexity[0] == float("inf")
    assert restored == record


def test_record_dict_keys_follow_spec():
    """The detection's evidence and decision only; what the reuse did to the entry is the
    reuse's record (tests/training/test_learning_reuse_update.py: the two together keep
    the results files' keys)."""
    assert list(reuse_record().to_dict()) == [
        "task", "decision", "entry", "reused_entry", "candidate_entries",
        "candidate_tasks", "consistency", "complexity", "vote_consistency",
        "vote_complexity", "rule", "detection_seconds",
        "mean_elbo", "reference_elbo", "reference_elbo_std", "permuted_complexity", "p_value",
        "power", "class_count_filter", "class_permutation", "decoy_rank_pvalue",
    ]
    assert DECISIONS == ("warm_start", "new", "reuse")


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(decision="maybe"), "decision must be one of"),
        (dict(reused_entry=1), "reused_entry == entry"),
        (dict(decision="new", reused_entry=2), "must be None"),
        (dict(consistency=[0.5, 0.5]), "consistency has 2 values"),
        (dict(candidate_tasks=[0]), "candidate_tasks has 1 values"),
        (dict(vote_complexity=9), "not one of candidate_entries"),
        (dict(task=1.5), "task must be an int"),
        (dict(entry=True), "entry must be an int"),
        (dict(class_permutation=[0, 0]), "permutation of 0..c-1"),
        (dict(decision="new", reused_entry=None, class_permutation=[1, 0]), "only recorded for a 'reuse'"),
    ],
)
def test_record_validation(overrides, message):
    with pytest.raises(ValueError, match=message):
        reuse_record(**overrides)


def test_from_dict_rejects_unknown_and_missing_keys():
    data = reuse_record().to_dict()
    with pytest.raises(ValueError, match="unknown"):
        DetectionRecord.from_dict({**data, "extra": 1})
    del data["entry"]
    with pytest.raises(ValueError, match="entry"):
        DetectionRecord.from_dict(data)


def test_class_permutation_and_decoy_rank_round_trip():
    record = reuse_record(class_permutation=[2, 0, 1], decoy_rank_pvalue=0.01)
    restored = DetectionRecord.from_dict(json.loads(json.dumps(record.to_dict())))
    assert restored == record
    assert restored.class_permutation == [2, 0, 1] and restored.decoy_rank_pvalue == 0.01
