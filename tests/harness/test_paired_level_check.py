"""benchmarks.studies.detection.paired_level_check: which recorded reuses the paired level would refuse."""
import json

import pytest

from benchmarks.studies.detection.paired_level_check import check_run, main


def _run(p_value: float, creating_per_class: int, held_out: bool = False, rule: str = "small_task"):
    """Task 0 (warm start, entry 0), task 1 new (entry 1, ``creating_per_class`` a class), task 2 of 150 images
    a class reusing entry 1 at ``p_value``."""
    sizes = [[100, 100], [creating_per_class, creating_per_class], [150, 150]]
    records = [{"task": 0, "decision": "warm_start", "rule": "warm_start", "entry": 0},
               {"task": 1, "decision": "new", "rule": rule, "entry": 1},
               {"task": 2, "decision": "reuse", "rule": rule, "entry": 1, "candidate_entries": [0, 1],
                "p_value": [1e-9, p_value]}]
    tasks = [{"task": 0, "entry": 0, "decision": "warm_start"}, {"task": 1, "entry": 1, "decision": "new"},
             {"task": 2, "entry": 1, "decision": "reuse"}]
    run = {"run_id": "r", "task_sizes": [{"train_per_class": s} for s in sizes], "detection": {"records": records},
           "sdr_results": {"tasks": tasks}}
    if held_out:
        run["e0_references"] = "held_out"
    return run


def test_a_reuse_of_a_small_entry_between_the_levels_is_reported_and_one_of_a_full_entry_is_not():
    changed = check_run(_run(1e-3, 13))["changed"]  # a reference of 13 a class: the level is 0.01
    assert [(c["task"], c["n"], c["m"]) for c in changed] == [(2, 150, 13)] and changed[0]["level"] == 0.01
    assert check_run(_run(1e-3, 150))["changed"] == []  # a full reference (100 kept): 1e-4, as before
    assert check_run(_run(0.02, 13))["changed"] == []  # above 0.01: reused under either level
    assert check_run(_run(1e-3, 150))["reuses"] == 1


def test_a_warm_start_entry_of_a_held_out_run_counts_half_its_class(monkeypatch):
    run = _run(1e-3, 13, held_out=True)
    run["detection"]["records"][2].update(entry=0, candidate_entries=[0, 1], p_value=[1e-3, 1e-9])
    run["sdr_results"]["tasks"][2]["entry"] = 0
    seen = []
    from avalanche_sdr.detection import LevelByPairedPower

    real = LevelByPairedPower.for_test

    def for_test(self, n, m, c, d):
        seen.append(m)
        return real(self, n, m, c, d)

    monkeypatch.setattr(LevelByPairedPower, "for_test", for_test)
    check_run(run)
    assert seen == [50]


def test_runs_of_other_rules_are_refused_and_the_command_prints_the_total(tmp_path, capsys):
    with pytest.raises(ValueError, match="no two-sample records"):
        check_run(_run(1e-3, 13, rule="agreement"))
    path = tmp_path / "run.json"
    path.write_text(json.dumps(_run(1e-3, 13)))
    assert main([str(path)]) == 0
    out = capsys.readouterr().out
    assert "run.json: 1 reuses, 1 below the paired level" in out and out.rstrip().endswith("new entries: 1")
    with pytest.raises(SystemExit):
        main([str(tmp_path / "absent.json")])
