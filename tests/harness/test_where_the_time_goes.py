"""The probes of docs/results/where_the_time_goes.md (benchmarks/studies/where_the_time_goes/),
each on tiny inputs: what they return, that their patches of library functions are undone,
and the invariants their printed tables rest on. Timings are not checked (benchmark scripts
print them; a test cannot judge them)."""
import json

import pytest
import torch

from avalanche.training.templates import base as avalanche_base

from avalanche_sdr.models import eft
from avalanche_sdr.routers import lda_router
from benchmarks.studies.where_the_time_goes import (batch_equal_64, batch_models, batch_time, compare_runs, cpu_runs,
                                                    cpu_timing, entry_forward_ops, model_channels_last, page_faults,
                                                    per_task_cpu, pointwise_channels_last, router_fit_identity,
                                                    router_fit_split, train_step_cpu)


def test_cpu_timing_calls_n_times_per_round_and_returns_the_last_result():
    calls = []
    ms, result = cpu_timing.best_cpu_ms(lambda: calls.append(1) or len(calls), 3, 2)
    assert len(calls) == 6 and result == 6 and ms >= 0
    with pytest.raises(ValueError, match="at least 1"):
        cpu_timing.best_cpu_ms(lambda: None, 0, 1)


def test_batch_models_times_e0_and_the_entry_at_each_batch_size():
    result = batch_models.measure(sizes=(2, 4), images=8, rounds=1, cases=["small_cnn_8"])["small_cnn_8"]
    assert set(result["ms"]) == {(2, "E0"), (2, "entry"), (4, "E0"), (4, "entry")}
    assert all(ms > 0 for ms in result["ms"].values())
    assert result["equal"][2] is True  # the first batch size is the reference itself
    assert result["largest_activation"] >= 32 * 8 * 8  # the first convolution's 32 maps of 8 x 8
    (a, e), (b, f) = batch_models.model_with_entry(*batch_models.CASES["small_cnn_8"]), \
        batch_models.model_with_entry(*batch_models.CASES["small_cnn_8"])
    assert all(torch.equal(p, q) for p, q in zip(a.encoder.entry_parameters(e), b.encoder.entry_parameters(f)))


def test_batch_equal_64_finds_the_reference_batch_size_equal_to_itself():
    result = batch_equal_64.compare(images=20, sizes=(64, 16), reference=64, cases=["small_cnn_8"])["small_cnn_8"]
    assert result["E0"][64] is True and result["entry"][64] is True
    assert isinstance(result["E0"][16], bool) and isinstance(result["entry"][16], bool)


def test_batch_time_measures_each_size_against_the_first():
    result = batch_time.measure(side=8, images=16, sizes=(4, 8), rounds=1)
    assert result["difference"][4] == 0.0 and result["difference"][8] < 1e-4
    assert all(ms > 0 for ms in result["ms"].values())


def _run(decisions, accuracies):
    return {"run_id": "r", "average_accuracy": sum(accuracies) / len(accuracies), "task_accuracies": accuracies,
            "detection": {"decisions": decisions, "unique_tasks": 2}, "memory_mb": 1.0, "bwt": 0.0,
            "wall_seconds": 1.0, "group_curve": [{"accuracies": accuracies, "evaluated": [0]}]}


def test_compare_runs_names_where_two_runs_differ(tmp_path, capsys):
    a, b = _run(["new", "reuse", "new"], [0.5, 0.75, 1.0]), _run(["new", "new", "new"], [0.5, 0.5, 1.0])
    out = compare_runs.compare(a, b)
    assert out["decisions_equal"] is False and out["decisions_differ_at"] == [1]
    assert out["task_accuracies_max_abs_diff"] == 0.25 and out["tasks_differing"] == 1
    assert out["group_curve_max_abs_diff"] == 0.25 and out["memory_mb"] == (1.0, 1.0, 0.0)
    assert compare_runs.compare(a, a)["decisions_equal"] is True
    paths = [tmp_path / "a.json", tmp_path / "b.json"]
    for path, run in zip(paths, (a, b)):
        path.write_text(json.dumps(run))
    compare_runs.main([str(p) for p in paths])
    assert json.loads(capsys.readouterr().out)["decisions_differ_at"] == [1]
    with pytest.raises(SystemExit, match="usage"):
        compare_runs.main([str(paths[0])])


def test_cpu_runs_parses_rows_and_summarises_each_run(tmp_path):
    assert cpu_runs.rows_of("finetune,sdr_two_sample_nogen:accumulate") == [
        ("finetune", "", ()), ("sdr_two_sample_nogen", "accumulate", (("reuse", "accumulate"),))]
    summary = cpu_runs.measure("digits", tmp_path, cpu_runs.rows_of("finetune"), preset="smoke")
    assert [s["run_id"] for s in summary] == ["digits_smoke_finetune_seed0"]
    assert set(summary[0]) == set(cpu_runs.SUMMARY_KEYS) and summary[0]["cpu_seconds"] > 0
    assert json.loads((tmp_path / "summary.json").read_text()) == summary


def test_entry_forward_ops_times_every_op_of_the_entrys_forward():
    times = entry_forward_ops.op_times(batch=4, repeats=1, images=8)
    convs = [k[len("conv"):] for k in times if k.startswith("conv")]
    assert convs and all(f"{op}{i}" in times for i in convs for op in ("spat", "pw", "add"))
    assert "norm" in times and "pool" in times and all(v > 0 for v in times.values())


def test_model_channels_last_gives_the_same_features_to_rounding():
    records = model_channels_last.compare(batches=(4,), entries=(None, 1), images=8, n=1, rounds=1)
    assert [(r["batch"], r["entry"]) for r in records] == [(4, None), (4, 1)]
    assert all(r["max_difference"] < 1e-4 and r["nchw_ms"] > 0 for r in records)


def test_page_faults_measures_each_batch_size():
    (record,) = page_faults.measure(batches=(4,), images=8, rounds=1)
    assert record["batch"] == 4 and record["wall_ms"] > 0 and record["minor_faults"] >= 0


def test_per_task_cpu_times_each_train_call_by_decision_and_restores_avalanche(tmp_path):
    original = avalanche_base.BaseTemplate.train
    results = per_task_cpu.measure("digits", tmp_path, preset="smoke")
    assert avalanche_base.BaseTemplate.train is original
    finetune, sdr = results
    assert list(finetune["by_decision"]) == ["finetune"] and len(finetune["by_decision"]["finetune"]) == 10
    assert len(sdr["by_decision"]["warm_start"]) == 3 and sum(map(len, sdr["by_decision"].values())) == 10
    assert json.loads((tmp_path / "per_task_cpu.json").read_text()) == results
    with per_task_cpu.timed_train_calls():
        assert avalanche_base.BaseTemplate.train is not original
    assert avalanche_base.BaseTemplate.train is original


def test_pointwise_channels_last_restores_the_adapter_and_matches_it():
    original = eft.EFTAdapter.forward
    (record,) = pointwise_channels_last.compare(batches=(4,), entries=(1,), images=8, rounds=1, n=1, inner_rounds=1)
    assert eft.EFTAdapter.forward is original
    assert (record["batch"], record["entry"]) == (4, 1) and isinstance(record["equal"], bool)
    with pytest.raises(RuntimeError), pointwise_channels_last.adapter_forward(pointwise_channels_last.channels_last_forward):
        assert eft.EFTAdapter.forward is pointwise_channels_last.channels_last_forward
        raise RuntimeError("restored even so")
    assert eft.EFTAdapter.forward is original


def test_router_fit_identity_is_bit_identical_on_one_tree_and_the_refit_moves_it():
    first, second = router_fit_identity.fit(2, images=20), router_fit_identity.fit(2, images=20)
    for key in ("disc", "off", "disc2", "off2"):
        assert torch.equal(first[key], second[key]), key
    assert not torch.equal(first["disc"], first["disc2"])  # the last entry moved by 1 %: its discriminant too
    assert set(first) >= {"fit0", "fit1", "evidence_s", "evidence", "refit_s"}


def test_router_fit_split_splits_the_fit_and_restores_what_it_timed():
    features = lda_router._features
    (record,) = router_fit_split.split(entries=3, images=20, repeats=1)
    assert lda_router._features is features
    assert record["n"] > 0 and record["imgs"] > 0
    assert record["rest"] == pytest.approx(record["fit"] - record["feat"] - record["bf"])


def test_train_step_cpu_times_the_four_steps_and_compares_the_matmul_branch():
    original = eft.EFTAdapter.forward
    result = train_step_cpu.measure(n=1, rounds=1)
    assert eft.EFTAdapter.forward is original
    assert list(result["steps"]) == ["Finetune (all trainable)", "EFT entry", "EFT entry, gamma=0 (no 1x1 branch)",
                                     "EFT entry, 1x1 branch as matmul"]
    assert all(ms > 0 for ms in result["steps"].values())
    assert result["gradients_equal"] and result["largest_difference"] < 1e-4  # the same function, to rounding
