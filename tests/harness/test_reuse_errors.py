"""benchmarks/studies/learning_reuse/errors.py: the injected wrong reuses and the damage table."""
import pytest
import torch

from avalanche_sdr import build_sdr_model
from avalanche_sdr.models import TaskData, small_cnn_backbone
from benchmarks.studies.detectors import ErringOracle
from benchmarks.studies.learning_reuse.errors import parse_args, report


def _task(task, classes):
    """A task of ``classes`` classes, one blank image each (the oracle reads the label only)."""
    return TaskData(task, torch.zeros(classes, 1, 8, 8), torch.arange(classes))


def _model(groups_of_entries):
    model = build_sdr_model(small_cnn_backbone(in_channels=1, widths=(8, 8)), in_channels=1, image_size=8,
                            generator=None)
    for task in groups_of_entries:
        model.create_entry(task)
        model.heads.add(task, 2)
    return model


def test_rate_zero_is_the_oracle_and_rate_one_always_a_wrong_entry():
    groups = [0, 1, 2, 0, 1, 2, 0]
    model = _model([0, 1, 2])
    right = ErringOracle(groups, rate=0.0, seed=0)
    assert [right.detect(model, _task(t, 2)).reused_entry for t in (3, 4, 5)] == [0, 1, 2]
    assert right.injected == {}
    wrong = ErringOracle(groups, rate=1.0, seed=0)
    for task in (3, 4, 5, 6):
        record = wrong.detect(model, _task(task, 2))
        assert record.decision == "reuse" and groups[model.entry_creator[record.reused_entry]] != groups[task]
    assert sorted(wrong.injected) == [3, 4, 5, 6]
    # the injected tasks depend on the seed and the task only, not on earlier calls
    again = ErringOracle(groups, rate=0.5, seed=3)
    first = [again.detect(model, _task(t, 2)).rule for t in range(3, 7)]
    assert [ErringOracle(groups, rate=0.5, seed=3).detect(model, _task(t, 2)).rule for t in range(3, 7)] == first


def test_a_task_with_no_wrong_entry_of_its_class_count_keeps_the_oracle():
    model = _model([0, 1])
    erring = ErringOracle([0, 1, 0], rate=1.0, seed=0)
    record = erring.detect(model, _task(2, 3))
    assert record.rule == "oracle" and record.reused_entry == 0 and erring.injected == {}


def test_report_measures_the_damage_against_rate_zero():
    base = dict(config="accumulate_noguard", seed=0, memory_mb=1.0, wall_seconds=1.0, torch_threads=1,
                average_accuracy=0.9)
    runs = [dict(base, rate=0.0, task_accuracies=[0.9, 0.8, 1.0], injected={}, refused=[], victims={}),
            dict(base, rate=0.2, task_accuracies=[0.7, 0.8, 0.5], injected={"2": 0}, refused=[],
                 victims={"2": [0]})]
    row = [line for line in report(runs).splitlines() if "| 0.2 |" in line][0]
    assert "| 70.00 | 90.00 | -20.00 | 50.00 |" in row


@pytest.mark.parametrize("argv", [["--rates", "1.5", "--out", "x"], ["--threads", "0", "--out", "x"]])
def test_bad_arguments_are_usage_errors(argv):
    with pytest.raises(SystemExit) as stop:
        parse_args(argv)
    assert stop.value.code == 2
