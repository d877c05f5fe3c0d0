"""Tests of the harness's equal-memory ER rows, memory sweeps, Pareto front and the paper's
protocol (``benchmarks/table2/command.py``, ``benchmarks/table2/methods.py``, ``avalanche_sdr/baselines.py``).

All fast: the tiny digits stream (10 tasks of ~125 8x8 images) and small backbones; one
epoch per task where something trains.
"""
import dataclasses
import json

import pytest
import torch

from avalanche_sdr import baselines, cli
from benchmarks.table2 import command as table2
from benchmarks.table2 import engine
from benchmarks.table2.report import curve_key, pareto_front, row_points, write_plots
from benchmarks.table2.equal_memory import equal_memory_report, equal_memory_specs
from benchmarks.table2.specs import run_id
from benchmarks.table2.methods import METHODS, PRESETS, STREAMS, size_equal_memory
from benchmarks.table2.variants import SWEEP_EFT, SWEEP_PER_CLASS, Row, equal_memory_rows, harness_rows


def _evaluator():
    from avalanche.evaluation.metrics import accuracy_metrics
    from avalanche.training.plugins import EvaluationPlugin

    return EvaluationPlugin(accuracy_metrics(experience=True), loggers=[])


@pytest.fixture(scope="module")
def digits():
    return STREAMS["digits"].factory(0)


def _small_backbone():
    from avalanche_sdr.models import small_cnn_backbone

    torch.manual_seed(0)
    return small_cnn_backbone(in_channels=1, widths=(8, 8))


@pytest.mark.slow
@pytest.mark.parametrize("shared_head", [False, True], ids=["ours", "paper"])
def test_sized_er_run_measures_within_5_percent_of_the_target(digits, shared_head):
    from avalanche_sdr.evaluation import repository_memory_bytes

    backbone = _small_backbone()
    target = 60_000  # bytes, e.g. an SDR run's memory on the same stream and seed
    row = equal_memory_rows("sdr", ["paper" if shared_head else "ours"])[0]
    sized, sizing = size_equal_memory(row, backbone, digits, target)
    assert sizing.status == "sized" and sized.variant == ("mem_sdr_paper" if shared_head else "mem_sdr")
    assert dict(sized.options)["replay_mem_size"] == sizing.mem_size > 0
    # 8x8 float32 image + class and task labels (8 B each), as the memory counter counts them.
    assert sizing.exemplar_bytes == 8 * 8 * 4 + 16
    preset = dataclasses.replace(PRESETS["smoke"], baselines=baselines.BaselineSettings(epochs=1))
    strategy = METHODS["replay"].build(backbone, digits, STREAMS["digits"], preset, evaluator=_evaluator(),
                                       device="cpu", **dict(sized.options))
    assert isinstance(strategy.model, baselines.SingleHeadNet) == shared_head
    for experience in digits.train_stream:
        strategy.train(experience, eval_streams=[])
    measured = repository_memory_bytes(strategy)
    assert measured == sizing.predicted_bytes  # the prediction is exact, not only close
    assert measured <= target and abs(measured / target - 1) <= 0.05


def test_infeasible_target_is_reported_not_run(digits):
    backbone = _small_backbone()
    sized, sizing = size_equal_memory(Row("replay", "mem_sdr"), backbone, digits, 1_000)
    assert sized is None and sizing.status == "infeasible" and sizing.mem_size is None
    assert sizing.model_bytes > sizing.target_bytes == 1_000
    assert str(sizing.model_bytes) in sizing.note and "1000" in sizing.note


def test_a_target_beyond_the_streams_images_is_capped(digits):
    sizing = baselines.size_replay_buffer(_small_backbone(), digits.train_stream, 10**9)
    assert sizing.status == "capped" and sizing.buffer_images <= sum(len(e.dataset) for e in digits.train_stream)


def test_experience_balanced_occupancy_follows_avalanches_quotas():
    # mem 10 over 4 experiences: quotas 3, 3, 2, 2; the second experience holds only 1 image.
    assert baselines.experience_balanced_occupancy(10, [5, 1, 5, 5]) == 3 + 1 + 2 + 2
    assert baselines.experience_balanced_occupancy(0, [5, 5]) == 0


def _save_backbone(out, stream="digits", preset="smoke", seed=0):
    """An E0 file where prepare_backbone looks for it (random weights: sizing needs no training)."""
    backbone = engine.make_backbone(stream)
    path = out / "backbones" / f"{stream}_{preset}_seed{seed}.pt"
    path.parent.mkdir(parents=True)
    torch.save({"state_dict": backbone.state_dict(), "torch_rng_state": torch.get_rng_state()}, path)


def test_harness_sizes_er_to_the_reference_runs_memory(tmp_path):
    _save_backbone(tmp_path)
    args = table2.parse_args(["--stream", "digits", "--preset", "smoke", "--seeds", "0", "--methods", "replay",
                              "sdr", "optimal", "--equal-memory", "sdr", "optimal", "--protocol", "ours", "paper",
                              "--out", str(tmp_path)])
    # sdr's run: 0.5 MB; optimal's: 1 KB (below ER's model); no run JSON for a third reference.
    for method, mb in (("sdr", 0.5), ("optimal", 1 / 1024)):
        cli.write_json(tmp_path / "runs" / f"{run_id('digits', 'smoke', method, 0)}.json", {"memory_mb": mb})
    specs, records = equal_memory_specs(args, tmp_path, threads=1, log=None)
    assert [s.run_id for s in specs] == ["digits_smoke_replay_mem_sdr_seed0", "digits_smoke_replay_mem_sdr_paper_seed0"]
    assert dict(specs[1].options) == {"shared_head": True, "replay_mem_size": records[1]["mem_size"]}
    by_id = {r["run_id"]: r for r in records}
    sized = by_id["digits_smoke_replay_mem_sdr_seed0"]
    assert sized["status"] == "sized" and sized["target_mb"] == 0.5
    assert abs(sized["predicted_mb"] / 0.5 - 1) <= 0.05 and sized["predicted_mb"] <= 0.5
    assert {by_id[f"digits_smoke_replay_mem_optimal{p}_seed0"]["status"] for p in ("", "_paper")} == {"infeasible"}
    # The report adds the measured memory of the runs that ran.
    cli.write_json(tmp_path / "runs" / f"{specs[0].run_id}.json", {"memory_mb": 0.495})
    lines = equal_memory_report(records, tmp_path)
    assert "mem_size" in lines and "infeasible" in lines
    saved = {r["run_id"]: r for r in json.loads((tmp_path / "equal_memory.json").read_text())}
    assert saved[specs[0].run_id]["deviation"] == pytest.approx(-0.01)
    args.equal_memory = ["sdr", "new_head"]
    _, records = equal_memory_specs(args, tmp_path, threads=1, log=None)
    assert records[-1]["status"] == "no_reference"


def test_equal_memory_reference_must_be_a_row(capsys):
    with pytest.raises(SystemExit):
        table2.parse_args(["--methods", "replay", "--equal-memory", "sdr"])
    assert "must also be in --methods" in capsys.readouterr().err


def test_protocol_and_sweep_rows_have_distinct_run_ids():
    rows = harness_rows(["finetune", "new_head", "ewc", "replay", "sdr"], ["ours", "paper"], sweep=True)
    variants = {(r.method, r.variant): dict(r.options) for r in rows}
    # The paper's protocol changes EWC and ER only; finetune / new_head / SDR rows appear once.
    assert [v for m, v in variants if m in ("finetune", "new_head")] == ["", ""]
    assert variants[("ewc", "paper")] == {"shared_head": True} and variants[("ewc", "")] == {}
    assert variants[("replay", "pc5_paper")] == {"shared_head": True, "replay_per_class": 5}
    assert {v for m, v in variants if m == "replay"} == (
        {"", "paper"} | {f"pc{k}" for k in SWEEP_PER_CLASS} | {f"pc{k}_paper" for k in SWEEP_PER_CLASS})
    assert {v for m, v in variants if m == "sdr"} == {""} | {f"a{a}b{b}" for a, b in SWEEP_EFT}
    assert variants[("sdr", "a4b8")] == {"a": 4, "b": 8}
    ids = [run_id("digits", "smoke", r.method, 0, r.variant) for r in rows]
    assert len(ids) == len(set(ids)) and "digits_smoke_ewc_paper_seed0" in ids
    # Without --protocol / --sweep: the methods as before.
    assert harness_rows(["ewc", "sdr"]) == [Row("ewc"), Row("sdr")]
    assert [r.variant for r in harness_rows(["ewc"], ["paper"])] == ["paper"]


def test_paper_protocol_builds_ewc_and_er_on_one_shared_head(digits):
    backbone = _small_backbone()
    stream, preset = STREAMS["digits"], PRESETS["smoke"]
    n_classes = baselines.max_classes(digits.train_stream)
    for name in ("ewc", "replay"):
        ours = METHODS[name].build(backbone, digits, stream, preset, evaluator=_evaluator(), device="cpu")
        paper = METHODS[name].build(backbone, digits, stream, preset, evaluator=_evaluator(), device="cpu",
                                    shared_head=True)
        assert type(ours.model).__name__ == "MultiHeadNet"
        assert isinstance(paper.model, baselines.SingleHeadNet) and paper.model.head.out_features == n_classes
    with pytest.raises(TypeError, match="unknown baseline option"):
        METHODS["ewc"].build(backbone, digits, stream, preset, evaluator=_evaluator(), device="cpu", mem=1)
    with pytest.raises(ValueError, match="num_classes"):
        baselines.baseline_net(backbone, shared_head=True)


def _run(method, variant, acc, mem, options=None, seed=0):
    label = METHODS[method].label + (f" [{variant}]" if variant else "")
    return {"run_id": run_id("digits", "smoke", method, seed, variant), "method": method,
            "variant": variant, "options": options or {}, "label": label, "stream": "digits",
            "stream_label": "MixedDigits", "preset": "smoke", "seed": seed, "average_accuracy": acc,
            "memory_mb": mem, "wall_seconds": 1.0, "detection": None, "task_accuracies": [acc]}


def _hand_made_runs():
    return [
        _run("replay", "", 0.80, 2.0, {}),
        _run("replay", "pc2", 0.70, 1.0, {"replay_per_class": 2}),
        _run("replay", "pc50", 0.85, 5.0, {"replay_per_class": 50}),
        _run("replay", "paper", 0.40, 2.0, {"shared_head": True}),
        _run("sdr", "", 0.90, 1.5, {}),
        _run("sdr", "", 0.80, 1.5, {}, seed=1),  # mean 0.85 at 1.5 MB: dominates replay's 0.80 at 2.0
        _run("sdr", "a4b8", 0.84, 1.2, {"a": 4, "b": 8}),
        _run("ewc", "", 0.85, 3.0, {}),  # dominated by sdr (0.85 at 1.5 MB)
        _run("finetune", "", 0.30, 0.5, {}),
    ]


def test_pareto_front_keeps_the_undominated_rows():
    front = pareto_front(_hand_made_runs())
    assert [(p["method"], p["variant"]) for p in front] == [
        ("finetune", ""), ("replay", "pc2"), ("sdr", "a4b8"), ("sdr", ""), ]
    assert front[-1]["accuracy"] == pytest.approx(85.0) and front[-1]["seeds"] == [0, 1]
    # Equal points do not dominate each other; a tuning run (split valid) is not a point.
    tie = [_run("ewc", "", 0.5, 1.0), _run("finetune", "", 0.5, 1.0),
           dict(_run("replay", "", 0.99, 0.1), split="valid")]
    assert {p["method"] for p in pareto_front(tie)} == {"ewc", "finetune"}


def test_curves_group_a_methods_memory_knob_variants(tmp_path):
    runs = _hand_made_runs()
    curves = {}
    for p in row_points(runs):
        curves.setdefault(p["curve"], []).append(p["variant"])
    assert curves[curve_key("replay", {})] == ["", "pc2", "pc50"]
    assert curves[curve_key("replay", {"shared_head": True})] == ["paper"]
    assert curves[curve_key("sdr", {"a": 8})] == ["", "a4b8"]
    written = write_plots(runs, tmp_path, log=None)
    assert written == [tmp_path / "plots" / "accuracy_memory.png"] and written[0].stat().st_size > 0
