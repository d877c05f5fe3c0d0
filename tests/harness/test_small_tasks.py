"""benchmarks.studies.small_tasks (issue #36 item 3): its rules, its refusals and its report
tables come from the run files it is given. Nothing here trains or reads a data set."""
import json

import pytest
import torch

from avalanche_sdr.detection import SmallTaskDetector, TwoSampleDetector
from avalanche_sdr.models import TaskData
from avalanche_sdr.training import METHODS
from benchmarks.studies import small_tasks
from benchmarks.studies.detectors import AllNewDetector


def test_rules_are_the_library_detectors():
    assert isinstance(small_tasks.make_rule("two_sample"), TwoSampleDetector)
    assert isinstance(small_tasks.make_rule("small_task"), SmallTaskDetector)
    assert small_tasks.make_rule("small_task_any_size").settings.min_per_class == 2
    assert small_tasks.make_rule("small_task_no_confirm").settings.confirm_below is None
    assert small_tasks.make_rule("small_task_confirm_all").settings.confirm_below == small_tasks.CONFIRM_ALL
    assert small_tasks.make_rule("small_task").settings.confirm_below == 40
    assert small_tasks.make_rule("all_new").config() == {"rule": "all_new"}
    recommended = small_tasks.make_rule("recommended")
    assert recommended.config() == METHODS["recommended"].defaults()["detector"].config()
    assert small_tasks.DEFAULT_FLOW == ("recommended",)  # E0 with pretrain_backbone's default holdout
    with pytest.raises(ValueError, match="unknown rule"):
        small_tasks.make_rule("oracle")


def test_all_new_declares_every_task_new():
    class Model:
        entries = [0, 1]
        entry_creator = {0: 0, 1: 1}

    record = AllNewDetector().detect(Model(), TaskData(5, torch.zeros(2, 1, 8, 8), torch.arange(2)))
    assert record.decision == "new" and record.candidate_entries == [0, 1] and record.rule == "all_new"


def test_bad_arguments_are_refused(capsys):
    with pytest.raises(SystemExit):
        small_tasks.parse_args(["replay", "--per-class", "1", "--out", "x"])
    assert "--per-class must be >= 2" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        small_tasks.parse_args(["replay", "--rules", "agreement", "--out", "x"])


def _replay(rule, seed, correct, incorrect, fallback_reused):
    records = [{"decision": "reuse", "decoy_rank_pvalue": 0.01 if fallback_reused else None}]
    return {"mode": "replay", "rule": rule, "seed": seed, "per_class": 10, "correct": correct, "miss": 0.0,
            "incorrect": incorrect, "repeats_reused": 1.0, "first_tasks_reused": 0.0, "unique_entries": 5,
            "records": records, "outcomes": ["incorrect" if incorrect else "correct"], "torch_threads": 1,
            "load_average": 3.0}


def test_report_averages_the_run_files(tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir()
    for seed, (correct, incorrect) in enumerate([(1.0, 0.0), (0.5, 0.5)]):
        (runs / f"r{seed}.json").write_text(json.dumps(_replay("small_task", seed, correct, incorrect, True)))
    text = small_tasks.report(type("Args", (), {"out": str(tmp_path)})())
    row = [line for line in text.splitlines() if "| small_task |" in line][0]
    assert "| 0,1 | 75.0 ± 35.4 |" in row and "| 25.0 ± 35.4 |" in row
    assert "| 2 / 2 / 1 |" in row  # the fallback decided both, reused both, one wrong
