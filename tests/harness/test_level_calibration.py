"""benchmarks/studies/detection/level_calibration.py: its arguments, its counts and its tables (no training)."""
import pytest

from benchmarks.studies.detection import level_calibration as lc


@pytest.mark.parametrize("argv, message", [
    (["--stream", "fashion60", "--share", "0"], "--share must lie in"),
    (["--stream", "fashion60", "--share", "1.5"], "--share must lie in"),
    ([], "--stream is required"),
    (["--stream", "mnist"], "invalid choice"),
])
def test_bad_arguments_are_refused_before_any_work(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        lc.parse_args(argv)
    assert exit_info.value.code == 2 and message in capsys.readouterr().err


def test_summarise_counts_per_class_and_combined():
    # two tasks: 2 classes then 1 class, 3 draws each
    per_class = [[0.001, 0.5, 0.004], [0.9, 0.002, 0.3], [0.0001, 0.02, 0.5]]
    out = lc.summarise(per_class, [2, 1])
    assert out["n_class_tests"] == 9 and out["class_below"] == 4 and out["below_by_class"] == [2, 1, 1]
    # combined: task 1 draws min(1, 2 * min) = 0.002, 0.004, 0.008; task 2: 0.0001, 0.02, 0.5
    assert out["n_task_tests"] == 6 and out["task_below"] == 4


def test_report_reads_the_run_fields():
    condition = dict(n_class_tests=10, class_below=1, below_by_class=[1, 0], n_task_tests=5, task_below=0)
    rule = dict(correct=0.5, miss=0.5, incorrect=0.0, warm_group_repeats=2, warm_group_repeats_new=1,
                other_repeats=0, other_repeats_new=0, powers=[None, 1.0], decisions=["warm_start", "new", "reuse"])
    run = dict(stream="fashion60", share=0.5, seed=0,
               calibration={k: condition for k in ("old", "old_fresh_reference", "holdout", "holdout_fresh_reference")},
               decisions={k: rule for k in lc.RULES if k != "matched_external"})
    text = lc.report([run])
    assert "| fashion60 | 0.5 | 0 | pretraining images (old E0) | 10 | 10.00 % | 5 | 0.00 % |" in text
    assert "| fashion60 | 0.5 | matched_holdout | 0 | 50.0 | 50.0 | 0.0 | 1 / 2 | 0 / 0 | 1.0 |" in text
    assert "external" not in text
