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


def test_summarise_counts_below_the_level_of_the_draws_size():
    # a 2-class task drawn at 100 images a class (alpha(100) = 1e-4), a 1-class task at 40 (0.01)
    per_class = [[5e-5, 0.5, 2e-3], [0.9, 0.2, 0.3], [0.005, 0.02, 0.5]]
    out = lc.summarise(per_class, [2, 1], sizes=[100, 100, 40])
    assert out["class_levels"] == [1e-4, 1e-4, 0.01]
    assert out["class_below_level"] == 2  # 5e-5 < 1e-4, 0.005 < 0.01 (2e-3 is not below 1e-4)
    # combined: task 1: 1e-4, 0.4, 4e-3 against 1e-4 (none strictly below); task 2: 0.005 against 0.01
    assert out["task_below_level"] == 1 and out["task_levels"] == [1e-4, 0.01]
    assert out["task_pvalues_below_level"] == [0.005]
    assert "class_below_level" not in lc.summarise(per_class, [2, 1])


def test_the_default_flow_report_counts_k_of_n():
    condition = dict(n_class_tests=2000, class_below=9, below_by_class=[], n_task_tests=1000, task_below=7,
                     class_below_level=1, task_below_level=0, class_levels=[1e-4], task_levels=[1e-4],
                     task_pvalues_below_level=[])
    rule = dict(correct=1.0, miss=0.0, incorrect=0.0, warm_group_repeats=9, warm_group_repeats_new=0,
                other_repeats=6, other_repeats_new=0, n_new_group=2, power=1.0)
    run = dict(stream="fashion200", share=0.5, seed=0, default_flow=True,
               calibration=dict(draw_sizes=[100, 100], **{k: condition for k in (
                   "old", "old_fresh_reference", "holdout", "holdout_fresh_reference")}),
               decisions={k: rule for k in lc.DEFAULT_FLOW_RULES})
    text = lc.report([run])
    assert ("| fashion200 | 0 | 100 | 0.0001 | held-out images (default flow) | 1 of 2000 (0.05 %) | "
            "0 of 1000 (0.000 %) | 7 of 1000 (0.70 %) |") in text
    assert "| fashion200 | recommended_default_flow | 0 | 100.0 | 0.0 | 0.0 | 0 / 9 | 0 / 6 | 0 / 2 |" in text
    assert "holdout share" not in text  # no table of the share runs


def test_the_default_flow_option_and_draws_are_parsed():
    args = lc.parse_args(["--stream", "fashion200", "--default-flow", "--draws", "50"])
    assert args.default_flow and args.draws == 50 and "fashion200" in lc.STREAMS
