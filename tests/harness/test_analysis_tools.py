"""The detection analysis tools of ``benchmarks/``: error classification, threshold
replay and the calibrated-options table, on hand-made run JSONs."""
import json

from avalanche_sdr.detection import CalibrationThresholds
from benchmarks.studies.calibrated import errors as detection_errors
from benchmarks.studies.calibrated import table as calibrated_table
from benchmarks.studies.calibrated import thresholds as calibrate_thresholds


def _record(task, decision, candidate_tasks=(), p=(), s=(), gap_elbo=(), entry=0, reused=None):
    n = len(candidate_tasks)
    return {
        "task": task, "decision": decision, "entry": entry, "reused_entry": reused,
        "candidate_entries": list(range(n)), "candidate_tasks": list(candidate_tasks),
        "consistency": list(p), "complexity": list(s),
        "vote_consistency": None, "vote_complexity": None, "rule": "agreement",
        "mean_elbo": list(gap_elbo), "reference_elbo": [-100.0] * n, "reference_elbo_std": [10.0] * n,
        "permuted_complexity": [1000.0] * n,
    }


def _harness_run():
    """Groups 0, 1, 2 warm start; task 3 repeats group 0 (right reuse); task 4 is group 3,
    new, but both votes agree on task 1's entry (an incorrect reuse) with a large
    likelihood gap (3 standard deviations)."""
    records = [
        _record(0, "warm_start", entry=0), _record(1, "warm_start", entry=1), _record(2, "warm_start", entry=2),
        _record(3, "reuse", (0, 1, 2), p=(0.8, 0.1, 0.1), s=(1.0, 20.0, 30.0),
                gap_elbo=(-101.0, -300.0, -300.0), entry=0, reused=0),
        _record(4, "reuse", (0, 1, 2), p=(0.2, 0.6, 0.2), s=(40.0, 10.0, 30.0),
                gap_elbo=(-200.0, -130.0, -200.0), entry=1, reused=1),
    ]
    return {
        "run_id": "toy_sdr_seed0", "method": "sdr", "label": "SDR", "stream_label": "toy", "seed": 0,
        "average_accuracy": 0.9, "memory_mb": 1.0, "wall_seconds": 2.0,
        "detection": {"correct": 0.5, "miss": 0.0, "incorrect": 0.5, "n_scored": 2,
                      "decisions": [r["decision"] for r in records],
                      "outcomes": [None, None, None, "correct", "incorrect"],
                      "groups": [0, 1, 2, 0, 3], "records": records,
                      "train_accuracy_per_epoch": [[0.5, 0.8, 0.95]] * 3 + [[0.9], [0.85]]},
    }


def test_errors_are_classified_with_margins_and_evidence():
    rows = detection_errors.analyse_run(_harness_run(), "toy")
    assert [r["outcome"] for r in rows] == ["correct", "incorrect"]
    right, wrong = rows
    assert right["true"] == 0 and right["p_ok"] and right["s_ok"]
    assert wrong["true"] is None and wrong["vote_p"] == wrong["vote_s"] == 1
    assert abs(wrong["gap"] - 3.0) < 1e-12 and abs(wrong["s_margin"] - 3.0) < 1e-12
    assert "both votes agreed" in detection_errors.explain(wrong)
    table = detection_errors.format_rows(rows)
    assert table.count("\n") == 4  # header, rule, two rows


def test_threshold_replay_counts_right_decisions():
    cases = calibrate_thresholds.scored_cases(_harness_run())
    assert [c["true"] for c in cases] == [0, None]
    assert calibrate_thresholds.count_right(cases, CalibrationThresholds(max_elbo_gap=1.0)) == 2
    assert calibrate_thresholds.count_right(cases, CalibrationThresholds(max_elbo_gap=5.0)) == 1
    best_right, best = calibrate_thresholds.sweep(cases)[0]
    assert best_right == 2 and best.max_elbo_gap < 3.0


def test_calibrated_table_reads_harness_folders(tmp_path):
    runs = tmp_path / "toy" / "runs"
    runs.mkdir(parents=True)
    (runs / "toy_sdr_seed0.json").write_text(json.dumps(_harness_run()))
    table = calibrated_table.format_table([tmp_path / "toy"])
    row = [line for line in table.splitlines() if line.startswith("| toy |")]
    assert len(row) == 1 and "| 50.0 ± 0.0 |" in row[0]
    # No task got a new entry after the warm start: the transfer columns are empty.
    assert row[0].count("–") == 2
    assert calibrated_table.epochs_to([0.5, 0.8, 0.95]) == 3 and calibrated_table.epochs_to([0.1, 0.2]) == 2
