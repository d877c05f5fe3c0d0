"""benchmarks/table2/gpu_check.py: the tiny CPU run of the GPU check, its outputs, its argument checks."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from benchmarks.table2.gpu_check import METHODS, PAPER_STREAMS, device_check, parse_args, run_stream, same_device

REPO_ROOT = Path(__file__).resolve().parents[2]


def _command(*args):
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    return subprocess.run([sys.executable, "-m", "benchmarks.table2.gpu_check", *args], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """``python -m benchmarks.table2.gpu_check --device cpu --tasks 2 --tiny --out TMP``, as CI runs it."""
    out = tmp_path_factory.mktemp("gpu_check")
    done = _command("--device", "cpu", "--tasks", "2", "--tiny", "--out", str(out))
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((out / "gpu_check.json").read_text())
    return done, report, (out / "gpu_check.md").read_text()


def test_tiny_run_reports_every_method_on_every_stream_it_found(tiny_run):
    done, report, _ = tiny_run
    assert report["complete"] is True and report["tiny"] is True and report["tasks"] == 2
    env = report["environment"]
    assert env["device"] == "cpu" and env["device_name"] and env["torch_threads"] == 1
    ran = [s for s in report["streams"] if s["status"] == "ran"]
    skipped = [s for s in report["streams"] if s["status"] == "skipped"]
    assert ran, "no stream ran: --tiny must fall back on the digits"
    assert {s["stream"] for s in report["streams"]} >= set(PAPER_STREAMS)
    assert all("data" in s["reason"] for s in skipped)  # e.g. no --data-root given here
    if not any(s["stream"] in PAPER_STREAMS for s in ran):
        assert [s["stream"] for s in ran] == ["digits"] and any("digits" in n for n in report["notes"])
    for stream in ran:
        assert stream["n_warm_start"] == 1 and stream["tasks"] == 2
        assert [r["method"] for r in stream["runs"]] == list(METHODS)
        for run in stream["runs"]:
            name = f"{stream['stream']} {run['method']}"
            assert run["tasks_trained"] == 2 and len(run["seconds_per_task"]) == 2, name
            assert run["images_per_second"] > 0 and run["training_images"] > 0, name
            assert all(s > 0 for s in run["seconds_per_task"]), name
            assert run["peak_gpu_memory_mb"] is None, name  # a CPU run has no GPU peak
            assert 0 <= run["accuracy"] <= 1 and len(run["task_accuracies"]) == 2, name
            assert run["memory_mb"] > 0, name
            check = run["device_check"]
            assert check["passed"] and check["misplaced"] == [] and check["tensors"] > 0, name
            assert f"[gpu_check] {name}: task 2/2" in done.stderr
            if METHODS[run["method"]].sdr:
                assert 0 <= run["detection_share"] < 1, name
                assert run["decisions"][0] == "warm_start" and run["decisions"][1] in ("new", "reuse"), name
                assert run["checkpoint"]["passed"] and run["checkpoint"]["loaded_on"] == "cpu", name
            else:
                assert run["detection_share"] is None and run["checkpoint"] is None, name
        recommended = next(r for r in stream["runs"] if r["method"] == "sdr_recommended")
        assert recommended["device_check"]["router_state_tensors"] > 0
        assert recommended["device_check"]["predict_lda_weighted_on_device"] is True


def test_tiny_run_writes_the_markdown_table(tiny_run):
    _, report, table = tiny_run
    lines = table.splitlines()
    assert lines[0] == f"# GPU check: {report['environment']['device_name']} (cpu)"
    header = next(i for i, line in enumerate(lines) if line.startswith("| stream | method | tasks | images/s"))
    rows = [line for line in lines[header + 2:] if line.startswith("| ")]
    runs = [(s["stream"], r) for s in report["streams"] for r in s.get("runs", [])]
    assert len(rows) == len(runs)
    for row, (stream, run) in zip(rows, runs):
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[:3] == [stream, run["method"], "2"]
        assert float(cells[3]) == pytest.approx(run["images_per_second"], abs=0.5)
        assert cells[5] == "n/a"  # peak GPU memory on a CPU
        assert cells[7] == f"{100 * run['accuracy']:.2f}"
        assert cells[9] == "yes"
    for stream in report["streams"]:
        if stream["status"] == "skipped":
            assert f"- {stream['stream']}: skipped, " in table


def test_run_seconds_stops_a_run_between_tasks_and_each_run_is_saved(tmp_path):
    args = parse_args(["--device", "cpu", "--tiny", "--tasks", "3", "--streams", "digits", "--methods", "ewc",
                       "replay", "--run-seconds", "1", "--out", str(tmp_path)])
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
    (["--data-root", "/nonexistent/sdr-data"], "--data-root"),
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
        done = _command("--device", "cpu", "--tasks", "1", "--tiny", "--out", str(out))
        assert done.returncode == 2 and "--out" in done.stderr
        assert "[gpu_check]" not in done.stderr  # nothing was loaded or trained


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA GPU")
def test_cuda_without_a_gpu_is_a_clear_error(tmp_path):
    done = _command("--device", "cuda", "--tasks", "1", "--tiny", "--out", str(tmp_path / "out"))
    assert done.returncode == 2
    assert "torch sees no CUDA GPU" in done.stderr and "--device cpu" in done.stderr
    assert not (tmp_path / "out").exists()
