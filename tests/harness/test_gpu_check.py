"""benchmarks/table2/gpu_check.py: the smoke-budget CPU run of the device check through the
Table 2 engine, its outputs, its argument checks."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from benchmarks.table2 import catalogue
from benchmarks.table2.gpu_check import METHODS, PAPER_STREAMS, device_check, parse_args, run_stream, same_device
from benchmarks.table2.specs import RunProbe, RunSpec

REPO_ROOT = Path(__file__).resolve().parents[2]


def _command(*args):
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    return subprocess.run([sys.executable, "-m", "benchmarks.table2.gpu_check", *args], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    """``python -m benchmarks.table2.gpu_check --device cpu --tasks 4 --preset smoke --out TMP`` with
    no paper stream's data (an empty ``--fashion-root``), so that the digits run instead."""
    out = tmp_path_factory.mktemp("gpu_check")
    empty = tmp_path_factory.mktemp("no_fashion")
    done = _command("--device", "cpu", "--tasks", "4", "--preset", "smoke", "--fashion-root", str(empty),
                    "--out", str(out))
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((out / "gpu_check.json").read_text())
    return done, report, (out / "gpu_check.md").read_text(), out


def test_smoke_run_reports_every_method_on_every_stream_it_found(smoke_run):
    done, report, _, _ = smoke_run
    assert report["complete"] is True and report["preset"] == "smoke" and report["tasks"] == 4
    env = report["environment"]
    assert env["device"] == "cpu" and env["device_name"] and env["torch_threads"] == 1
    ran = [s for s in report["streams"] if s["status"] == "ran"]
    skipped = [s for s in report["streams"] if s["status"] == "skipped"]
    assert [s["stream"] for s in skipped] == list(PAPER_STREAMS)
    assert all("data" in s["reason"] for s in skipped)  # no --data-root, an empty --fashion-root
    assert [s["stream"] for s in ran] == ["digits"] and any("digits" in n for n in report["notes"])
    for stream in ran:
        assert stream["n_warm_start"] == 3 and stream["tasks"] == 4
        assert [r["method"] for r in stream["runs"]] == list(METHODS)
        for run in stream["runs"]:
            name = f"{stream['stream']} {run['method']}"
            assert run["label"] == catalogue.METHODS[run["method"]].label, name
            assert run["tasks_trained"] == 4 and len(run["seconds_per_task"]) == 4, name
            assert run["images_per_second"] > 0 and run["training_images"] > 0, name
            assert all(s > 0 for s in run["seconds_per_task"]), name
            assert run["peak_gpu_memory_mb"] is None, name  # a CPU run has no GPU peak
            assert 0 <= run["accuracy"] <= 1 and len(run["task_accuracies"]) == 4, name
            assert run["memory_mb"] > 0, name
            check = run["device_check"]
            assert check["passed"] and check["misplaced"] == [] and check["tensors"] > 0, name
            assert f"[gpu_check] {name}: task 4/4" in done.stderr
            if catalogue.METHODS[run["method"]].is_sdr:
                assert 0 <= run["detection_share"] < 1, name
                assert run["decisions"][:3] == ["warm_start"] * 3 and run["decisions"][3] in ("new", "reuse"), name
                assert run["checkpoint"]["passed"] and run["checkpoint"]["loaded_on"] == "cpu", name
            else:
                assert run["detection_share"] is None and run["checkpoint"] is None, name
        recommended = next(r for r in stream["runs"] if r["method"] == "sdr_recommended")
        assert recommended["device_check"]["router_state_tensors"] > 0
        assert recommended["device_check"]["predict_lda_weighted_on_device"] is True
        assert set(recommended["task_free"]) == {"lda_weighted", "oracle"}


def test_the_check_runs_are_the_engines_runs(smoke_run):
    """The check's accuracy and memory of a row are those of the engine's ``execute_run``
    on the same spec (E0 of the check's ``OUT/backbones``), probed by a probe that
    measures nothing."""
    from benchmarks.table2.engine import execute_run

    _, report, _, out = smoke_run
    (stream,) = [s for s in report["streams"] if s["status"] == "ran"]
    backbone = str(out / "backbones" / "digits_smoke_seed0.pt")
    for run in stream["runs"]:
        if run["method"] not in ("sdr_recommended", "replay"):
            continue
        again = execute_run(RunSpec("digits", "smoke", run["method"], 0, backbone, threads=1, tasks=4),
                            probe=RunProbe())
        assert again["tasks_trained"] == 4
        assert again["task_accuracies"] == pytest.approx(run["task_accuracies"], abs=1e-9), run["method"]
        assert again["memory_mb"] == pytest.approx(run["memory_mb"], rel=1e-9), run["method"]


def test_the_smoke_run_writes_the_markdown_table(smoke_run):
    _, report, table, _ = smoke_run
    lines = table.splitlines()
    assert lines[0] == f"# GPU check: {report['environment']['device_name']} (cpu)"
    header = next(i for i, line in enumerate(lines) if line.startswith("| stream | method | tasks | images/s"))
    rows = [line for line in lines[header + 2:] if line.startswith("| ")]
    runs = [(s["stream"], r) for s in report["streams"] for r in s.get("runs", [])]
    assert len(rows) == len(runs)
    for row, (stream, run) in zip(rows, runs):
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[:3] == [stream, run["method"], "4"]
        assert float(cells[3]) == pytest.approx(run["images_per_second"], abs=0.5)
        assert cells[5] == "n/a"  # peak GPU memory on a CPU
        assert cells[7] == f"{100 * run['accuracy']:.2f}"
        assert cells[9] == "yes"
    for stream in report["streams"]:
        if stream["status"] == "skipped":
            assert f"- {stream['stream']}: skipped, " in table


def test_run_seconds_stops_a_run_between_tasks_and_each_run_is_saved(tmp_path):
    args = parse_args(["--device", "cpu", "--preset", "smoke", "--tasks", "3", "--streams", "digits", "--methods",
                       "ewc", "replay", "--run-seconds", "1", "--out", str(tmp_path)])
    args.run_seconds = 1e-9  # past as soon as the first task has begun
    saved = []
    entry = run_stream("digits", args, torch.device("cpu"), str(tmp_path),
                       lambda e: saved.append([r["method"] for r in e["runs"]]))
    assert saved == [["ewc"], ["ewc", "replay"]]
    for run in entry["runs"]:
        assert run["tasks_trained"] == 1 and len(run["task_accuracies"]) == 1 and len(run["seconds_per_task"]) == 1


def test_device_check_names_a_misplaced_buffer():
    model = torch.nn.Linear(2, 2)
    assert device_check(model, torch.device("cpu"))["passed"]
    model.register_buffer("stray", torch.zeros(3, device="meta"))
    check = device_check(model, torch.device("cpu"))
    assert not check["passed"] and check["misplaced"] == ["buffer stray on meta"] and check["tensors"] == 3
    assert same_device(torch.device("cpu"), torch.device("cpu"))
    assert not same_device(torch.device("meta"), torch.device("cpu"))


@pytest.mark.parametrize("argv, message", [
    (["--device", "nonsense"], "is not a torch device"),
    (["--tasks", "0"], "--tasks"),
    (["--streams", "imagenet"], "invalid choice"),
    (["--methods", "sdr"], "invalid choice"),
    (["--preset", "tiny"], "invalid choice"),
    (["--tiny"], "unrecognized arguments: --tiny"),  # the budget is --preset (smoke)
    (["--data-root", "/nonexistent/sdr-data"], "--data-root"),
    (["--backbone-weights", "/nonexistent/resnet20.th"], "--backbone-weights"),
    (["--run-seconds", "0"], "--run-seconds"),
])
def test_bad_arguments_are_usage_errors(argv, message, capsys):
    with pytest.raises(SystemExit) as info:
        parse_args(["--device", "cpu", *argv] if "--device" not in argv else argv)
    assert info.value.code == 2 and message in capsys.readouterr().err


def test_an_out_that_cannot_be_a_folder_stops_before_any_work(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    for out in (blocker, blocker / "inside"):
        done = _command("--device", "cpu", "--tasks", "1", "--preset", "smoke", "--out", str(out))
        assert done.returncode == 2 and "--out" in done.stderr
        assert "[gpu_check]" not in done.stderr  # nothing was loaded or trained


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA GPU")
def test_cuda_without_a_gpu_is_a_clear_error(tmp_path):
    done = _command("--device", "cuda", "--tasks", "1", "--preset", "smoke", "--out", str(tmp_path / "out"))
    assert done.returncode == 2
    assert "torch sees no CUDA GPU" in done.stderr and "--device cpu" in done.stderr
    assert not (tmp_path / "out").exists()
