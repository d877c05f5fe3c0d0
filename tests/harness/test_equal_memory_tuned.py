"""Tests of the tuned equal-memory ER rows (``--tune`` with ``--equal-memory REF``: variant
``mem_REF_tuned``) and of variant references (``--equal-memory METHOD:VARIANT``) in
``benchmarks/table2/command.py`` and ``benchmarks/table2/tuning.py``.

Fast: no training. Runs are faked (``executors.local_results`` replaced by an in-process
fake that records what it is asked to run); the sizing is the real one, on the digits
stream with an untrained E0 saved where the harness looks for it.
"""
import json

import pytest
import torch

from avalanche_sdr import cli
from benchmarks.table2 import command as table2
from benchmarks.table2 import tuning
from benchmarks.table2 import engine
from benchmarks.table2.equal_memory import equal_memory_ids, equal_memory_specs, equal_memory_targets
from benchmarks.table2.specs import backbone_file, run_id, split_reference, tuned_equal_memory_variant
from benchmarks.table2.methods import METHODS

GRIDS = {"replay": {"lr": (1e-3, 1e-2), "epochs": (3,)}}
"""A small ER grid (smoke's own lr 1e-3 and 3 epochs, and lr 1e-2, which the fake scores best)."""

TUNED = {"lr": 1e-2, "epochs": 3}
REF_MB = {"sdr_two_sample_nogen": 0.6, "sdr_two_sample_nogen_accumulate": 0.45}
"""Memory (MB) of the faked reference runs, by method and variant."""


def _save_backbone(out, seed=0):
    backbone = engine.make_backbone("digits")
    path = backbone_file("digits", "smoke", seed, out)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"state_dict": backbone.state_dict(), "torch_rng_state": torch.get_rng_state()}, path)


def _fake_result(spec):
    options = dict(spec.options)
    name = "_".join(p for p in (spec.method, spec.variant) if p)
    if spec.split == "valid":
        accuracy, memory = 10 * options["lr"], 1.0
    else:
        accuracy = 0.6 + (0.1 if spec.variant.endswith("tuned") else 0.0)
        memory = options["replay_mem_size"] * 1e-4 if "replay_mem_size" in options else REF_MB.get(name, 2.0)
    return {"run_id": spec.run_id, "method": spec.method, "variant": spec.variant, "options": options,
            "label": METHODS[spec.method].label + (f" [{spec.variant}]" if spec.variant else ""),
            "stream": spec.stream, "stream_label": "MixedDigits (10 tasks)", "preset": spec.preset,
            "seed": spec.seed, "split": spec.split, "average_accuracy": accuracy, "task_accuracies": [accuracy],
            "memory_mb": memory, "detection": None, "wall_seconds": 1.0, "evaluation_seconds": 0.0,
            "task_sizes": [{"valid": 10}] * 10, **({"tasks": spec.tasks} if spec.tasks else {})}


@pytest.fixture
def harness(monkeypatch, tmp_path, faked_runs):
    """``run(argv)``: ``table2.main`` on ``tmp_path`` with faked runs; ``ran``: the specs executed."""
    monkeypatch.setattr(tuning, "TUNING_GRIDS", GRIDS)
    ran = faked_runs(_fake_result)
    for seed in (0, 1):
        _save_backbone(tmp_path, seed)

    def run(argv):
        argv = ["--stream", "digits", "--preset", "smoke", "--no-plots", "--out", str(tmp_path)] + argv
        return table2.main(table2.parse_args(argv))

    return run, ran, tmp_path


BASE = ["--seeds", "0", "--methods", "sdr_two_sample_nogen", "replay", "--reuse", "head", "accumulate",
        "--equal-memory", "sdr_two_sample_nogen", "sdr_two_sample_nogen:accumulate"]


@pytest.mark.parametrize("tune_args", [[], ["--tune-seed", "1", "--tune-tasks", "2"]], ids=["default", "seed_tasks"])
def test_tuned_er_runs_at_each_references_memory_and_resumes(harness, tune_args):
    run, ran, out = harness
    table = run(BASE + ["--tune"] + tune_args)
    tasks = 2 if tune_args else None
    tune_seed = 1 if tune_args else 0
    tuning_runs = [s for s in ran if s.split == "valid"]
    assert {(s.seed, s.tasks) for s in tuning_runs} == {(tune_seed, tasks)} and len(tuning_runs) == 2
    specs = {s.run_id: dict(s.options) for s in ran if s.split == "test"}
    assert specs["digits_smoke_replay_tuned_seed0"] == TUNED
    mem = {ref: specs[f"digits_smoke_replay_mem_{ref}_seed0"]["replay_mem_size"]
           for ref in ("sdr_two_sample_nogen", "sdr_two_sample_nogen_accumulate")}
    assert mem["sdr_two_sample_nogen"] > mem["sdr_two_sample_nogen_accumulate"] > 0  # 0.6 MB vs 0.45 MB targets
    for ref, size in mem.items():
        # The tuned values with the buffer sized exactly as the untuned equal-memory row's.
        assert specs[f"digits_smoke_replay_mem_{ref}_tuned_seed0"] == dict(TUNED, replay_mem_size=size)
        assert f"| ER [mem_{ref}_tuned] | 70.00 ± 0.00 |" in table
        assert f"| ER [mem_{ref}] | 60.00 ± 0.00 |" in table
    assert len(specs) == 3 + 1 + 4  # SDR head + accumulate, ER, ER [tuned]; four equal-memory ER rows
    records = {r["run_id"]: r for r in json.loads((out / "equal_memory.json").read_text())}
    tuned = records["digits_smoke_replay_mem_sdr_two_sample_nogen_accumulate_tuned_seed0"]
    assert tuned["reference"] == "sdr_two_sample_nogen:accumulate" and tuned["options"] == TUNED
    assert tuned["reference_run_id"] == "digits_smoke_sdr_two_sample_nogen_accumulate_seed0"
    assert tuned["status"] == "sized" and tuned["target_mb"] == pytest.approx(0.45) and tuned["mem_size"] == mem[
        "sdr_two_sample_nogen_accumulate"]
    assert tuned["measured_mb"] == pytest.approx(tuned["mem_size"] * 1e-4)
    # Resumable: the same command runs nothing and gives the same table.
    ran.clear()
    assert run(BASE + ["--tune"] + tune_args) == table and ran == []
    # --report-only: the same rows (ER's in memory order) and the records again, without running.
    (out / "equal_memory.json").unlink()
    assert run(BASE + ["--tune", "--report-only"] + tune_args) == table and ran == []
    er_rows = [line.split(" |")[0][2:] for line in table.splitlines() if line.startswith("| ER")]
    assert er_rows == ["ER", "ER [mem_sdr_two_sample_nogen_accumulate]",
                       "ER [mem_sdr_two_sample_nogen_accumulate_tuned]", "ER [mem_sdr_two_sample_nogen]",
                       "ER [mem_sdr_two_sample_nogen_tuned]", "ER [tuned]"]
    again = {r["run_id"]: r for r in json.loads((out / "equal_memory.json").read_text())}
    assert again == records
    # Without --tune: no tuned rows, in the table or the records.
    plain = run(BASE + ["--report-only"])
    assert "tuned]" not in plain and "| ER [mem_sdr_two_sample_nogen] |" in plain
    assert not any("tuned" in r["run_id"] for r in json.loads((out / "equal_memory.json").read_text()))


def test_tuned_only_runs_the_tuned_rows_alone(harness):
    run, ran, out = harness
    table = run(BASE + ["--tune", "--tuned-only"])
    assert sorted(s.run_id for s in ran if s.split == "test") == [
        "digits_smoke_replay_mem_sdr_two_sample_nogen_accumulate_tuned_seed0",
        "digits_smoke_replay_mem_sdr_two_sample_nogen_tuned_seed0", "digits_smoke_replay_tuned_seed0",
        "digits_smoke_sdr_two_sample_nogen_accumulate_seed0", "digits_smoke_sdr_two_sample_nogen_seed0"]
    er_rows = [line.split(" |")[0][2:] for line in table.splitlines() if line.startswith("| ER")]
    assert er_rows == ["ER [mem_sdr_two_sample_nogen_accumulate_tuned]", "ER [mem_sdr_two_sample_nogen_tuned]",
                       "ER [tuned]"]
    # The rows with the preset's values are still there to add: the same call without --tuned-only.
    ran.clear()
    run(BASE + ["--tune"])
    assert sorted(s.run_id for s in ran) == ["digits_smoke_replay_mem_sdr_two_sample_nogen_accumulate_seed0",
                                             "digits_smoke_replay_mem_sdr_two_sample_nogen_seed0",
                                             "digits_smoke_replay_seed0"]


def test_a_stale_tuned_equal_memory_run_is_refused(harness):
    run, ran, out = harness
    run(BASE + ["--tune"])
    path = out / "runs" / "digits_smoke_replay_mem_sdr_two_sample_nogen_tuned_seed0.json"
    saved = json.loads(path.read_text())
    cli.write_json(path, dict(saved, options=dict(saved["options"], lr=1e-3)))
    with pytest.raises(SystemExit, match="other values than the chosen ones.*mem_sdr_two_sample_nogen_tuned"):
        run(BASE + ["--tune", "--report-only"])


def _args(tmp_path, *argv):
    return table2.parse_args(["--stream", "digits", "--preset", "smoke", "--seeds", "0", "--out", str(tmp_path),
                              *argv])


def _write_reference(out, method, variant="", mb=0.5):
    cli.write_json(out / "runs" / f"{run_id('digits', 'smoke', method, 0, variant)}.json", {"memory_mb": mb})


def test_planned_rows_with_and_without_tuned_replay(tmp_path):
    _save_backbone(tmp_path)
    _write_reference(tmp_path, "sdr")
    args = _args(tmp_path, "--methods", "sdr", "replay", "ewc", "--protocol", "ours", "paper", "--equal-memory", "sdr")
    entry = {"options": dict(TUNED), "label": "ER", "missing": []}
    specs, records = equal_memory_specs(args, tmp_path, threads=1, log=None, tuned={"replay": entry})
    assert [s.run_id for s in specs] == ["digits_smoke_replay_mem_sdr_seed0",
                                         "digits_smoke_replay_mem_sdr_paper_seed0",
                                         "digits_smoke_replay_mem_sdr_tuned_seed0"]
    ours, paper, tuned = (dict(s.options) for s in specs)
    assert tuned == dict(TUNED, replay_mem_size=ours["replay_mem_size"])  # the ours network: the same size
    assert paper["replay_mem_size"] != ours["replay_mem_size"]  # (a network option would change it)
    assert equal_memory_ids(args, 0, {"replay": entry}) == [s.run_id for s in specs]
    assert [r["run_id"] for r in records] == [s.run_id for s in specs]
    # Absent without --tune, and when ER was not tuned (another method was, or ER kept its values).
    for chosen in (None, {}, {"ewc": {"options": {"ewc_lambda": 10.0}, "missing": []}}):
        specs, _ = equal_memory_specs(args, tmp_path, threads=1, log=None, tuned=chosen)
        assert [s.variant for s in specs] == ["mem_sdr", "mem_sdr_paper"]
        assert equal_memory_ids(args, 0, chosen) == [s.run_id for s in specs]


def test_a_task_free_reference_gets_no_tuned_row(tmp_path):
    assert tuned_equal_memory_variant("sdr_task_free") is None
    assert tuned_equal_memory_variant("sdr:a4b8") == "mem_sdr_a4b8_tuned"
    rows = equal_memory_targets("sdr_task_free", ["ours"], {"replay": {"options": TUNED}})
    assert [(r.method, r.variant) for r in rows] == [("ci_replay", "mem_sdr_task_free")]


def test_report_only_without_backbones_records_no_backbone(tmp_path):
    _write_reference(tmp_path, "sdr")
    args = _args(tmp_path, "--methods", "sdr", "replay", "--equal-memory", "sdr", "--report-only")
    specs, records = equal_memory_specs(args, tmp_path, threads=1, log=None, pretrain=False)
    assert specs == [] and [r["status"] for r in records] == ["no_backbone"]
    assert not (tmp_path / "backbones").exists()  # nothing pretrained


def test_variant_references_parse_and_name_their_rows(tmp_path, capsys):
    argv = ["--methods", "sdr_two_sample_nogen", "replay", "--reuse", "head", "accumulate", "--protocol", "ours",
            "paper", "--equal-memory", "sdr_two_sample_nogen:accumulate", "sdr_two_sample_nogen"]
    args = _args(tmp_path, *argv)
    assert args.equal_memory == ["sdr_two_sample_nogen:accumulate", "sdr_two_sample_nogen"]
    assert split_reference(args.equal_memory[0]) == ("sdr_two_sample_nogen", "accumulate")
    assert [r.variant for r in equal_memory_targets(args.equal_memory[0], args.protocol)] == [
        "mem_sdr_two_sample_nogen_accumulate", "mem_sdr_two_sample_nogen_accumulate_paper"]
    assert equal_memory_ids(args, 0)[:2] == [
        "digits_smoke_replay_mem_sdr_two_sample_nogen_accumulate_seed0",
        "digits_smoke_replay_mem_sdr_two_sample_nogen_accumulate_paper_seed0"]
    for bad, message in (
            (["--methods", "sdr", "replay", "--equal-memory", "sdr:accumulate"], "not a row of this call"),
            (["--methods", "sdr", "replay", "--reuse", "accumulate", "--equal-memory", "sdr"], "sdr:accumulate"),
            (["--methods", "sdr", "replay", "--equal-memory", "sdr:"], "variant name"),
            (["--methods", "sdr", "replay", "--equal-memory", "nope"], "invalid method"),
            (["--methods", "ewc", "replay", "--protocol", "ours", "paper", "--equal-memory", "ewc", "ewc:paper"],
             "both give the row replay [mem_ewc_paper]")):
        with pytest.raises(SystemExit) as err:
            _args(tmp_path, *bad)
        assert err.value.code == 2 and message in capsys.readouterr().err
