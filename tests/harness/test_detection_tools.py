"""The detection replay (benchmarks/studies/detection/sim.py) and the detection table
(benchmarks/studies/detection/table.py).

The replay's claim is that, for rules that decide from E0's features, its decisions
are those of a full SDRStrategy run on the same E0: checked here on the digits stream.
"""
import copy
import json

import pytest
import torch

from avalanche.evaluation.metrics import accuracy_metrics
from avalanche.training.plugins import EvaluationPlugin

from avalanche_sdr import CPU_LARGE_TASK_SETTINGS, SDRStrategy, build_sdr_model
from avalanche_sdr.benchmarks import MixedDigits
from avalanche_sdr.models import small_cnn_backbone
from benchmarks.studies.detection import sim as detection_sim
from benchmarks.studies.detection import table as detection_table


@pytest.fixture(scope="module")
def digits():
    torch.manual_seed(0)
    backbone = small_cnn_backbone(in_channels=1, widths=(16, 32)).eval()
    return MixedDigits(seed=3), backbone


@pytest.mark.slow
@pytest.mark.parametrize("rule", ["two_sample", "expert_gate"])
def test_replay_decides_as_the_strategy_does(digits, rule):
    benchmark, backbone = digits
    model = build_sdr_model(copy.deepcopy(backbone), in_channels=1, image_size=8, generator=None)
    settings = CPU_LARGE_TASK_SETTINGS.replace(new_task_epochs=1, lr_milestones=(1,), reuse_epochs=1)
    strategy = SDRStrategy(model=model, settings=settings, detector=rule,
                           evaluator=EvaluationPlugin(accuracy_metrics(experience=True), loggers=[]))
    for experience in benchmark.train_stream:
        strategy.train(experience, eval_streams=[])
    replay = detection_sim.simulate(detection_sim.make_rule(rule), backbone, benchmark, 1, 8)
    assert replay["decisions"] == [r.decision for r in strategy.detection_records]
    trained = [r.to_dict() for r in strategy.detection_records if r.decision != "warm_start"]
    for replayed, record in zip(replay["records"], trained):
        assert replayed["p_value"] == pytest.approx(record["p_value"], rel=1e-6)
        assert replayed["candidate_tasks"] == record["candidate_tasks"]
    n = len(replay["outcomes"])
    assert replay["correct"] + replay["miss"] + replay["incorrect"] == pytest.approx(1.0)
    assert replay["n_new_group"] + replay["n_repeat"] == n


@pytest.mark.slow
def test_replay_summary_rows(digits):
    benchmark, backbone = digits
    result = detection_sim.simulate(detection_sim.make_rule("two_sample"), backbone, benchmark, 1, 8)
    result.update(stream="digits", seed=3, rule="two_sample", train_per_task=None, mean_train_images=126.0)
    table = detection_sim.summary_table([result, dict(result, seed=4)])
    row = [line for line in table.splitlines() if line.startswith("| digits")]
    assert len(row) == 1 and "| 3,4 |" in row[0]
    with pytest.raises(ValueError, match="unknown rule"):
        detection_sim.make_rule("oracle")


def _run(method, stream, seed, correct, miss, incorrect, acc, mem, wall, det=None):
    detection = {"correct": correct, "miss": miss, "incorrect": incorrect}
    if det is not None:
        detection["detection_seconds"] = det
    return {"run_id": f"{stream}_cpu_{method}_seed{seed}", "method": method, "stream": stream, "seed": seed,
            "average_accuracy": acc, "memory_mb": mem, "wall_seconds": wall, "detection": detection}


def test_detection_table_from_run_files(tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir()
    for r in (_run("sdr_two_sample", "s1", 0, 1.0, 0.0, 0.0, 0.98, 1.0, 100.0, det=5.0),
              _run("sdr_two_sample", "s1", 1, 0.9, 0.1, 0.0, 0.96, 1.2, 100.0, det=1.0),
              _run("sdr", "s1", 0, 0.5, 0.25, 0.25, 0.90, 2.0, 50.0)):
        (runs / f"{r['run_id']}.json").write_text(json.dumps(r))
    old = tmp_path / "runs.json"
    old.write_text(json.dumps([_run("optimal", "s2", 0, 1.0, 0.0, 0.0, 0.99, 3.0, 10.0, det=0.0)]))
    text = detection_table.main([str(runs), str(old), "--streams", "s1", "s2", "--no-memory"])
    overview = text.split("###")[0]
    lines = {line.split(" | ")[0]: line for line in overview.splitlines() if line.startswith("| ")}
    assert "95.0/5.0/0.0 · 97.00 · 1.10 · 3.0 % (2)" in lines["| two-sample test"]
    assert "50.0/25.0/25.0 · 90.00 · 2.00 · – (1)" in lines["| paper (agreement)"]  # no detection time
    assert lines["| paper (agreement)"].endswith("| not run |")
    assert "100.0/0.0/0.0 · 99.00 · 3.00 · 0.0 % (1)" in lines["| Optimal (oracle decisions)"]
    (runs / "bad.json").write_text(json.dumps({"seed": 0}))
    with pytest.raises(SystemExit, match="not a benchmarks.table2 run"):
        detection_table.main([str(runs), "--no-memory"])


def test_recommended_variants_name_their_level_and_dimension():
    import dataclasses

    from avalanche_sdr.detection import LevelByPairedPower, LevelBySize
    from avalanche_sdr.training import METHODS

    method = METHODS["recommended"].defaults()["detector"].settings
    assert detection_sim.make_rule("recommended").settings == method
    expected = {"recommended_by_size": (LevelBySize, 16, False), "recommended_paired_power": (LevelByPairedPower, 16, False),
                "recommended_paired_power_confirm_accepts": (LevelByPairedPower, 16, True),
                "recommended_dim32": (LevelByPairedPower, 32, False), "recommended_dim64": (LevelByPairedPower, 64, False)}
    for rule, (level, dim, confirm) in expected.items():
        settings = detection_sim.make_rule(rule).settings
        assert type(settings.two_sample.alpha) is level and settings.two_sample.dim == dim, rule
        assert settings.confirm_accepts is confirm and settings.two_sample.match_classes, rule
        assert settings.familywise is False, rule  # the method's fallback level before validation designs 220-319
        assert dataclasses.replace(settings, two_sample=method.two_sample, confirm_accepts=method.confirm_accepts,
                                   familywise=method.familywise) == method, rule  # nothing else differs
    assert method.familywise is True
    for rule, fallback in (("recommended_familywise", dict(familywise=True)),
                           ("recommended_beta001", dict(beta=0.001, n_decoys=999, familywise=False))):
        settings = detection_sim.make_rule(rule).settings
        assert type(settings.two_sample.alpha) is LevelByPairedPower and settings.two_sample.dim == 16, rule
        assert dataclasses.replace(settings, two_sample=method.two_sample, **{
            name: getattr(method, name) for name in fallback}) == method, rule  # only the fallback's level differs
        assert all(getattr(settings, name) == value for name, value in fallback.items()), rule
