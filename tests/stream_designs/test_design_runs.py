"""A design as an Avalanche benchmark on the digits source (offline), a tiny run through the runner, resume,
the report on synthetic run files, and the command line's refusals."""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from benchmarks.stream_designs import runner
from benchmarks.stream_designs.__main__ import main
from benchmarks.stream_designs.builder import SourceUnavailable, build_benchmark, load_source, sample_indices
from benchmarks.stream_designs.distribution import E0_RECIPE, draw_design, ground_truth
from benchmarks.stream_designs.report import handling, load_runs, outcomes_by_bin, report

pytestmark = pytest.mark.usefixtures("one_thread")


def tiny_design(seed: int = 12345) -> dict:
    """Five digits tasks: groups {0,1}, {0,1,2} (a superset) and {3,4}; group 0 repeats, flipped and reordered."""
    def task(position, group, occurrence, classes, train, flipped=False):
        mean = sum(train) / len(train)
        return {"position": position, "group": group, "occurrence": occurrence, "classes": classes,
                "train_per_class": train, "test_per_class": [20] * len(classes), "flipped": flipped,
                "mean_per_class": mean, "size_bin": "10-29" if mean < 30 else "30-99"}

    return {
        "version": 1, "seed": seed, "source": "digits", "image_shape": [1, 8, 8],
        "groups": [{"group": 0, "classes": [0, 1], "times_seen": 2, "balance_ratio": 3.0, "weight_order": [0, 1]},
                   {"group": 1, "classes": [0, 1, 2], "times_seen": 1, "balance_ratio": 1.0, "weight_order": [0, 1, 2]},
                   {"group": 2, "classes": [3, 4], "times_seen": 2, "balance_ratio": 1.0, "weight_order": [3, 4]}],
        "tasks": [task(0, 0, 0, [0, 1], [15, 45]), task(1, 1, 0, [2, 0, 1], [20, 20, 20]),
                  task(2, 2, 0, [3, 4], [30, 30]), task(3, 0, 1, [1, 0], [15, 45], flipped=True),
                  task(4, 2, 1, [4, 3], [12, 12])],
        "n_warm_start": 3, "e0": dict(E0_RECIPE, in_channels=1, epochs=2), "data_seed": 77, "training_seed": 5,
    }


@pytest.fixture(scope="module")
def digits():
    design = tiny_design()
    train, test = load_source("digits", data_seed=design["data_seed"])
    return design, train, test


def test_the_benchmark_holds_each_task_as_designed(digits):
    design, train, test = digits
    benchmark = build_benchmark(design, train, test)
    assert len(benchmark.train_stream) == len(benchmark.test_stream) == 5
    assert benchmark.ground_truth == ground_truth(design) == [0, 1, 2, 0, 2]
    samples = sample_indices(design, train.targets.numpy(), test.targets.numpy())
    taken = np.concatenate([np.concatenate(s["train"]) for s in samples])
    assert len(np.unique(taken)) == len(taken), "training images recur across tasks"
    for i, (experience, task) in enumerate(zip(benchmark.train_stream, design["tasks"])):
        assert experience.task_label == i and experience.task_labels == [i]
        assert experience.group == benchmark.ground_truth[i] and experience.split == task["occurrence"]
        labels = np.array([int(experience.dataset[j][1]) for j in range(len(experience.dataset))])
        assert np.bincount(labels).tolist() == task["train_per_class"]
        # Local label j holds images of class classes[j]: the source's labels of the sampled indices.
        for j, (v, idx) in enumerate(zip(task["classes"], samples[i]["train"])):
            assert set(train.targets[idx].tolist()) == {v}
        x, y, t = experience.dataset[0]
        assert tuple(x.shape) == (1, 8, 8) and 0.0 <= float(x.min()) and float(x.max()) <= 1.0 and t == i
        test_labels = [int(benchmark.test_stream[i].dataset[j][1]) for j in range(len(benchmark.test_stream[i].dataset))]
        assert np.bincount(test_labels).tolist() == task["test_per_class"]
    # Sampling is seeded by the design's data_seed alone.
    again = sample_indices(design, train.targets.numpy(), test.targets.numpy())
    assert all(np.array_equal(a, b) for s, r in zip(samples, again) for a, b in zip(s["train"], r["train"]))


def test_a_drawn_digits_design_builds(digits):
    seed = next(s for s in range(50) if draw_design(s)["source"] == "digits")
    design = draw_design(seed)
    train, test = load_source("digits", data_seed=design["data_seed"])
    benchmark = build_benchmark(design, train, test)
    assert len(benchmark.train_stream) == len(design["tasks"])


def test_an_absent_source_is_skipped_with_its_path(tmp_path, capsys):
    with pytest.raises(SourceUnavailable, match="emnist_bymerge_test.npz.*--data-root"):
        load_source("emnist", data_seed=0, data_root=str(tmp_path))
    design = next(d for d in map(draw_design, range(50)) if d["source"] == "cifar10")
    lines = []
    assert runner.run_design(design, {"paper": {"method": "paper"}}, tmp_path / "out", data_root=str(tmp_path),
                             log=lines.append) == []
    assert "skipped" in lines[0] and "cifar10_jpeg.npz" in lines[0]


def test_a_tiny_run_writes_its_record_and_a_second_call_skips_it(digits, tmp_path, monkeypatch):
    design = tiny_design()
    methods = {"head": {"method": "recommended", "reuse": "head"}}
    lines = []
    written = runner.run_design(design, methods, tmp_path, log=lines.append)
    assert written == [runner.run_path(tmp_path, design["seed"], "head")]
    record = json.loads(written[0].read_text())
    assert record["keywords"] == methods["head"] and record["design"] == design
    assert record["ground_truth"] == [0, 1, 2, 0, 2]
    assert len(record["results"]["tasks"]) == 5 and 0.0 <= record["results"]["average_accuracy"] <= 1.0
    assert record["cost"]["torch_threads"] == 1 and record["cost"]["cpu_seconds"] > 0
    assert record["results"]["bwt"] == pytest.approx(0.0, abs=1e-12)  # head-only changes no earlier task
    assert (tmp_path / "e0" / "design12345.pt").is_file()

    def no_data(*args, **kwargs):
        raise AssertionError("a resumed design must not load its data")

    monkeypatch.setattr("benchmarks.stream_designs.builder.load_source", no_data)
    lines.clear()
    assert runner.run_design(design, methods, tmp_path, log=lines.append) == []
    assert "skipping head" in lines[0]
    other = dict(design, data_seed=78)
    with pytest.raises(ValueError, match="another design"):
        runner.run_design(other, methods, tmp_path, log=lines.append)
    assert record["training_seed_offset"] == 0
    with pytest.raises(ValueError, match="training seed offset 0 and seed_each_task False, not 1 and False"):
        runner.run_design(design, methods, tmp_path, training_seed_offset=1, log=lines.append)


def test_a_run_claimed_by_another_process_is_skipped_and_a_claim_is_released(tmp_path, monkeypatch):
    design = tiny_design()
    seed = design["seed"]
    assert runner.claim_run(tmp_path, seed, "head")  # another process holds it
    assert not runner.claim_run(tmp_path, seed, "head")
    assert json.loads(runner.claim_path(tmp_path, seed, "head").read_text())["pid"] == os.getpid()

    def no_data(*args, **kwargs):
        raise AssertionError("no claimed run: nothing to load")

    monkeypatch.setattr("benchmarks.stream_designs.builder.load_source", no_data)
    lines = []
    assert runner.run_design(design, {"head": {"method": "recommended", "reuse": "head"}}, tmp_path,
                             log=lines.append) == []
    assert "claimed by another process" in lines[0] and "design12345_head.claim" in lines[0]
    assert runner.claim_path(tmp_path, seed, "head").is_file()  # the other process's claim stays
    runner.release_run(tmp_path, seed, "head")
    assert not runner.claim_path(tmp_path, seed, "head").exists()

    # This process's claims are released when its run fails (here: the data cannot be read).
    def failing(*args, **kwargs):
        raise OSError("disk gone")

    monkeypatch.setattr("benchmarks.stream_designs.builder.load_source", failing)
    with pytest.raises(OSError, match="disk gone"):
        runner.run_design(design, {"head": {"method": "recommended", "reuse": "head"}}, tmp_path, log=lines.append)
    assert not runner.claim_path(tmp_path, seed, "head").exists()


def test_a_training_seed_offset_changes_the_training_draws_only(digits, tmp_path):
    """--training-seed-offset: the same design, E0 and data, other global training draws (the run-to-run
    spread of one method); recorded in the run file."""
    design = tiny_design()
    head = {"method": "recommended", "reuse": "head"}
    first = runner.run_design(design, {"head": head}, tmp_path, log=lambda line: None)[0]
    again = runner.run_design(design, {"again": head}, tmp_path, training_seed_offset=1, log=lambda line: None)[0]
    a, b = (json.loads(p.read_text()) for p in (first, again))
    assert b["training_seed_offset"] == 1 and a["training_seed_offset"] == 0
    assert a["ground_truth"] == b["ground_truth"] and a["design"] == b["design"]
    def curves(run):  # every task's training accuracy per epoch: other mini-batch orders move them
        return [t["train_accuracy_per_epoch"] for t in run["results"]["tasks"]]

    assert curves(a) != curves(b)
    each = runner.run_design(design, {"each": head}, tmp_path, seed_each_task=True, log=lambda line: None)[0]
    assert json.loads(each.read_text())["seed_each_task"] is True and a["seed_each_task"] is False
    with pytest.raises(ValueError, match="seed_each_task True, not 0 and False"):
        runner.run_design(design, {"each": head}, tmp_path, log=lambda line: None)


def test_a_run_from_the_kept_e0_equals_a_run_from_the_fresh_one(digits, tmp_path):
    """The E0 file keeps pretrain_backbone's record (the held-out references): a method run after the
    first one of a design, or in a resumed call, loads E0 and must see what the first run saw."""
    import torch

    from avalanche_sdr.detection.two_sample import PretrainingRecord, pretraining_record

    design = tiny_design()
    same = {"method": "recommended", "reuse": "head"}
    written = runner.run_design(design, {"fresh": same, "loaded": same}, tmp_path, log=lambda line: None)
    fresh, loaded = (json.loads(path.read_text())["results"] for path in written)
    assert [t["decision"] for t in fresh["tasks"]] == [t["decision"] for t in loaded["tasks"]]
    assert loaded["average_accuracy"] == fresh["average_accuracy"]
    e0_file = tmp_path / "e0" / "design12345.pt"
    saved = torch.load(e0_file, weights_only=True)
    assert saved[runner.E0_FILE_FORMAT_KEY] == runner.E0_FILE_FORMAT
    record = PretrainingRecord.from_tensors(saved["pretraining"])
    assert record.holdout is not None and list(record.tasks) == [0, 1, 2]
    # a bare state_dict (the files written before the record was kept) is refused, not silently used
    torch.save(saved["state_dict"], e0_file)
    with pytest.raises(ValueError, match="pretraining record"):
        runner.run_design(design, {"third": same}, tmp_path, log=lambda line: None)
    assert pretraining_record(torch.nn.Linear(1, 1)) is None


def _record(seed, method, accuracy, bwt, outcomes, cpu, source="digits", task_accuracies=None, detections=None):
    """A run record of ``tiny_design(seed)``: tasks 3 and 4 scored with ``outcomes`` (a miss declared
    new, the others reused), every task at ``accuracy`` unless ``task_accuracies`` says otherwise,
    ``detections`` the tasks' reuse records (default: none)."""
    design = tiny_design(seed)
    design["source"] = source
    task_accuracies = task_accuracies or [accuracy] * 5
    detections = detections or [{}] * 5
    decisions = ["warm_start"] * 3 + ["new" if o == "miss" else "reuse" for o in outcomes]
    tasks = [{"task": i, "group": g, "outcome": o, "decision": d, "test_accuracy": a, "detection": r}
             for i, (g, o, d, a, r) in enumerate(zip([0, 1, 2, 0, 2], [None, None, None] + outcomes, decisions,
                                                     task_accuracies, detections))]
    scored = [o for o in outcomes]
    detection = {o: scored.count(o) / len(scored) for o in ("correct", "miss", "incorrect")}
    detection["n_scored"] = len(scored)
    return {"format": 1, "design_version": 1, "design_seed": seed, "method": method, "design": design,
            "results": {"average_accuracy": accuracy, "bwt": bwt, "detection": detection, "tasks": tasks},
            "cost": {"cpu_seconds": cpu, "load_after": 2.0}, "memory_mb": 1.0}


def test_the_report_computes_the_issue_figures_from_run_files(tmp_path):
    records = [
        _record(1, "recommended", 0.950, -0.002, ["correct", "miss"], 30.0),
        _record(1, "recommended_head", 0.948, 0.0, ["correct", "miss"], 10.0),
        _record(1, "paper", 0.960, 0.0, ["incorrect", "correct"], 20.0),
        _record(2, "recommended", 0.900, 0.001, ["correct", "correct"], 12.0,
                task_accuracies=[0.9, 0.9, 0.9, 0.925, 0.875],
                detections=[{}] * 3 + [{"entry_updated": True}, {"entry_updated": True, "update_rolled_back": True}]),
        _record(2, "recommended_head", 0.905, 0.0, ["correct", "correct"], 6.0,
                task_accuracies=[0.9, 0.9, 0.9, 0.9, 0.93]),
        _record(2, "paper", 0.800, 0.0, ["correct", "correct"], 9.0),
        _record(3, "paper", 0.5, 0.0, ["correct", "correct"], 1.0),
    ]
    (tmp_path / "runs").mkdir()
    for r in records:
        (tmp_path / "runs" / f"design{r['design_seed']:04d}_{r['method']}.json").write_text(json.dumps(r))
    runs = load_runs(tmp_path)
    assert sorted(runs) == [1, 2, 3]
    bins = outcomes_by_bin(runs[1]["recommended"])
    # Tasks 3 (30 images a class) and 4 (12): a repeat each.
    assert bins["30-99"] == {"correct": 1, "miss": 0, "incorrect": 0, "scored": 1, "repeats": 1}
    assert bins["10-29"] == {"correct": 0, "miss": 1, "incorrect": 0, "scored": 1, "repeats": 1}
    text = report(runs)
    assert "| 1 | digits | 5 | 95.00 | 94.80 | +0.20 | 96.00 | no | -0.20 | 1/1/0 | 1/0/1 | 30.0 | 10.0 | 3.00 |" in text
    assert "Worst Δ (recommended - recommended_head): -0.50 pt (design 2); designs below -0.1 pt: 1/2 (50.0 %) [2]" in text
    assert "negative on 1/2 (50.0 %) designs, below -0.1 pt on 1/2 (50.0 %) [1]; worst -0.20 pt" in text
    assert "Mean Δ over the designs: -0.15 pt (95 % interval -4.60 to +4.30, 2 designs)" in text
    assert "recommended ≥ paper in accuracy: 1/2 (50.0 %) designs" in text
    assert "median 2.50, min 2.00, max 3.00" in text
    assert "| recommended | 10-29 | 2 | 2 | 1/2 (50.0 %) | 1/2 (50.0 %) | 0/2 (0.0 %) |" in text
    assert "Designs left out (a method's run missing): 3 (recommended, recommended_head missing)" in text
    assert "Designs where recommended's Incorrect exceeds 1 % of its scored tasks: 0/2 (0.0 %)" in text
    # design 2, below the margin: where the recommended method lost, task by task
    assert "| reused, update kept | reused, head-only | 1 | +0.50 |" in text
    assert "| reused, update rolled back | reused, head-only | 1 | -1.10 |" in text
    assert "| warm start | warm start | 3 | +0.00 |" in text
    assert ("- design 2, task 4 (group 2, 12 a class): reused, update rolled back 87.5 / reused, head-only 93.0: "
            "-1.10") in text
    # over both complete designs: design 2's rolled-back task 4 (-5.5 pt, -1.1 / 2 designs of the mean Δ)
    assert "How each method handled the tasks, over the 2 designs:" in text
    assert "| reused, update rolled back | reused, head-only | 1 | -5.50 pt (1 task) | -0.55 |" in text
    # design 1's task 3 and design 2's task 3 (kept update): +0.0 and +2.5 pt, mean +1.25
    assert ("| reused, update kept | reused, head-only | 1 | +2.50 pt (1 task) | +0.25 |" in text)
    assert "| reused, head-only | reused, head-only | 1 | +0.20 pt (1 task) | +0.02 |" in text


def test_the_mean_difference_over_designs_comes_with_its_t_interval():
    from benchmarks.stream_designs.report import mean_interval

    # 1, 2, 3, 4 points: mean 2.5, s = 1.291, t(0.975, 3) = 3.182 -> half-width 2.05
    assert mean_interval([0.01, 0.02, 0.03, 0.04]) == "+2.50 pt (95 % interval +0.45 to +4.55, 4 designs)"
    assert mean_interval([0.003]) == "+0.30 pt (1 design)"


def test_handling_names_what_a_run_did_with_a_task():
    assert handling({"decision": "warm_start"}) == "warm start"
    assert handling({"decision": "new", "detection": {"gate_accuracy": None}}) == "new (detected)"
    assert handling({"decision": "new", "detection": {"gate_accuracy": 0.4}}) == "new (gate refused)"
    assert handling({"decision": "reuse", "detection": {"entry_updated": False}}) == "reused, head-only"
    assert handling({"decision": "reuse", "detection": {"entry_updated": True}}) == "reused, update kept"
    assert handling({"decision": "reuse", "detection": {"entry_updated": True, "update_rolled_back": True}}) == \
        "reused, update rolled back"


def test_the_report_refuses_mixed_distribution_versions(tmp_path):
    (tmp_path / "runs").mkdir()
    for version, method in ((1, "paper"), (2, "recommended")):
        r = _record(1, method, 0.9, 0.0, ["correct", "correct"], 1.0)
        r["design_version"] = version
        (tmp_path / "runs" / f"design0001_{method}.json").write_text(json.dumps(r))
    with pytest.raises(ValueError, match="several distribution versions"):
        load_runs(tmp_path)


def test_the_command_refuses_report_seeds_and_unknown_methods(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["run", "--seeds", "1005", "--out", str(tmp_path)])
    assert exit_info.value.code == 2 and "report seeds" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["run", "--seeds", "next_report", "--out", str(tmp_path)])
    assert "[2000, 2001," in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["run", "--seeds", "validation", "--methods", "nope", "--out", str(tmp_path)])
    assert "unknown ['nope']" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["run", "--seeds", "1", "--method-keywords", "x={bad", "--out", str(tmp_path)])
    assert "not JSON" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # a reuse given by its configuration is checked before any design runs
        main(["run", "--seeds", "1", "--method-keywords", 'x={"reuse": {"name": "accumulate", "epoch": 3}}',
              "--out", str(tmp_path)])
    assert "x: reuse 'accumulate' (LearningReuse) does not take ['epoch']" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


def test_a_design_file_is_run_as_recorded(tmp_path, capsys):
    path = tmp_path / "design.json"
    path.write_text(json.dumps({"design": tiny_design()}))
    out = tmp_path / "out"
    assert main(["run", "--design-files", str(path), "--methods", "paper", "--out", str(out), "--threads", "1"]) == 0
    record = json.loads(runner.run_path(out, 12345, "paper").read_text())
    assert record["design"] == tiny_design() and record["method"] == "paper"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"design": {"seed": 1}}))
    with pytest.raises(SystemExit):
        main(["run", "--design-files", str(bad), "--out", str(out)])
    assert "holds no valid design" in capsys.readouterr().err


def test_each_range_word_gives_its_fixed_seeds_and_a_wrong_word_is_refused(capsys):
    import argparse

    from benchmarks.stream_designs import distribution as dist
    from benchmarks.stream_designs.__main__ import SEED_RANGES, _seeds

    parser = argparse.ArgumentParser(prog="stream_designs")
    expected = {"validation": dist.VALIDATION_SEEDS, "validation2": dist.SECOND_VALIDATION_SEEDS,
                "report": dist.REPORT_SEEDS, "next_report": dist.NEXT_REPORT_SEEDS,
                "validation3": dist.THIRD_VALIDATION_SEEDS, "third_report": dist.THIRD_REPORT_SEEDS,
                "validation4": dist.FOURTH_VALIDATION_SEEDS, "fourth_report": dist.FOURTH_REPORT_SEEDS,
                "validation5": dist.FIFTH_VALIDATION_SEEDS}
    assert {word: seeds for word, (seeds, _) in SEED_RANGES.items()} == expected
    for word, seeds in expected.items():
        assert _seeds([word], parser) == list(seeds)
    assert _seeds(["3", "validation", "3"], parser) == [3] + [s for s in dist.VALIDATION_SEEDS if s != 3]  # once
    with pytest.raises(SystemExit):
        _seeds(["valdation"], parser)
    words = ("'validation' / 'validation2' / 'report' / 'next_report' / 'validation3' / 'third_report' / "
             "'validation4' / 'fourth_report' / 'validation5'")
    assert f"neither a design seed nor {words}" in capsys.readouterr().err


def test_list_prints_one_line_per_design(capsys):
    assert main(["list", "--seeds", "0", "1", "2"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert [int(r.split("|")[1]) for r in rows] == [0, 1, 2]


def test_a_replay_decides_as_the_full_run_and_its_table_counts_the_outcomes(digits, tmp_path):
    """The detector's decisions replayed without training equal a full run's where no gate acts
    (head-only reuse), on the same E0 file; resumable; unknown rules refused before any work."""
    from benchmarks.stream_designs.replay import load_replays, replay_design, replay_path, replay_table

    design = tiny_design()
    with pytest.raises(ValueError, match="unknown rule"):
        replay_design(design, ["recommended", "nope"], tmp_path, log=lambda line: None)
    assert not (tmp_path / "replays").exists() and not (tmp_path / "e0").exists()
    run_file, = runner.run_design(design, {"head": {"method": "recommended", "reuse": "head"}}, tmp_path,
                                  log=lambda line: None)
    lines = []
    written = replay_design(design, ["recommended", "recommended_confirm_accepts"], tmp_path, log=lines.append)
    assert written == [replay_path(tmp_path, design["seed"], r) for r in ("recommended", "recommended_confirm_accepts")]
    full = json.loads(run_file.read_text())["results"]["tasks"]
    replayed = json.loads(written[0].read_text())
    assert replayed["decisions"] == [t["decision"] for t in full]
    assert replayed["outcomes"] == [t["outcome"] for t in full[3:]]
    assert replay_design(design, ["recommended"], tmp_path, log=lines.append) == []  # resumed: nothing to do
    table = replay_table(load_replays(tmp_path), ["recommended", "recommended_confirm_accepts"])
    assert "Designs with every rule: 1." in table
    counts = [replayed["outcomes"].count(o) for o in ("correct", "miss", "incorrect")]
    assert f"| recommended | all | 2 | {counts[0]} | {counts[1]} | {counts[2]} |" in table
    row, = [line for line in table.splitlines() if line.startswith("| recommended | all | ") and line.count("|") == 10]
    incorrect, fallback, two_sample, new_groups, ranked, reused = (int(v) for v in row.split("|")[3:9])
    assert incorrect == counts[2] and fallback + two_sample == incorrect
    assert new_groups == sum(t["occurrence"] == 0 for t in design["tasks"][design["n_warm_start"]:])
    assert reused <= ranked <= new_groups and reused <= fallback
