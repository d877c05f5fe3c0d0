"""``--checkpoint-dir`` of the paper-stream examples, and their output when piped.

A user runs ``examples/emnist_100.py`` (on a small fake EMNIST bymerge root, 6 tasks,
1 epoch of everything, ``--compare``) with ``--checkpoint-dir``, stops it with Ctrl-C
(SIGINT) in the middle of the SDR stream, runs the same command again and kills it
(SIGKILL) in the middle of the baselines, then runs it a third time: the results JSON
equals the one of an uninterrupted run of the same command without
``--checkpoint-dir`` (same seed, one thread), ``wall_seconds`` and
``evaluation_seconds`` aside (each run's own seconds). The reference run, with stdout and stderr piped, also shows the plain
output: no progress-bar frames, one ``[SDR] task t:`` line per task, a labelled
pretraining line.

Cost: the module's fixture runs about 40 s on two CPU cores (the reference and the
interrupted runs side by side, then the two resumptions); the tests marked ``slow``
need it.
"""
import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

N_TASKS = 6
TIMEOUT = 300


def _strip_wall_seconds(value):
    """``value`` without its ``wall_seconds`` and ``evaluation_seconds`` keys (at any depth)."""
    if isinstance(value, dict):
        return {k: _strip_wall_seconds(v) for k, v in value.items()
                if k not in ("wall_seconds", "evaluation_seconds")}
    if isinstance(value, list):
        return [_strip_wall_seconds(v) for v in value]
    return value


def _wait_for(condition, proc, log_path: Path, what: str) -> None:
    """Poll ``condition()`` every 20 ms while ``proc`` runs (at most ``TIMEOUT`` s)."""
    deadline = time.monotonic() + TIMEOUT
    while not condition():
        assert proc.poll() is None, f"the run ended before {what}:\n{log_path.read_text()}"
        assert time.monotonic() < deadline, f"no {what} within {TIMEOUT} s"
        time.sleep(0.02)


def _ctrl_c_reaches_python() -> None:
    """In the child before it starts: SIGINT back to its default. A test run started in
    the background by a shell without job control inherits SIGINT ignored, and a
    Python started with SIGINT ignored never raises KeyboardInterrupt: the signal that
    stands for the user's Ctrl-C would be lost."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _finished_tasks(checkpoint_dir: Path) -> int:
    """Finished SDR tasks in the checkpoint (its manifest is replaced atomically)."""
    try:
        return json.loads((checkpoint_dir / "manifest.json").read_text())["step"]
    except FileNotFoundError:
        return 0


@pytest.fixture(scope="module")
def resumed(tmp_path_factory, commands, write_emnist_root, fake_emnist):
    """The reference run and the interrupted, resumed one; a namespace of what each left."""
    root = tmp_path_factory.mktemp("resume")
    write_emnist_root(root / "data", "bymerge", *fake_emnist(seed=1))

    def command(output, *extra):
        return commands.example("emnist_100") + [
            "--data-root", root / "data", "--split", "bymerge", "--max-tasks", N_TASKS, "--preset", "cpu",
            "--pretrain-epochs", 1, "--new-task-epochs", 1, "--vae-epochs", 1, "--compare", "--seed", 3,
            "--output", output, *extra,
        ]

    checkpoint = root / "checkpoint"
    resumable = command(root / "resumed.json", "--checkpoint-dir", checkpoint)
    commands.start("reference", command(root / "reference.json"))
    outcome = {"command": resumable, "root": root, "checkpoint": checkpoint}

    # 1. Ctrl-C in the middle of the SDR stream.
    log = root / "interrupted.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, *map(str, resumable)], cwd=commands.root, env=commands.env(),
                                stdout=out, stderr=subprocess.STDOUT, preexec_fn=_ctrl_c_reaches_python)
        try:
            _wait_for(lambda: _finished_tasks(checkpoint) >= 4, proc, log, "a checkpoint of 4 tasks")
            proc.send_signal(signal.SIGINT)
            outcome["sigint_code"] = proc.wait(timeout=TIMEOUT)
        finally:
            if proc.poll() is None:
                proc.kill()
    outcome["sigint_log"] = log.read_text()
    outcome["sigint_tasks"] = _finished_tasks(checkpoint)

    # 2. The same command, killed (SIGKILL) once the first baseline is saved.
    log = root / "killed.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, *map(str, resumable)], cwd=commands.root, env=commands.env(),
                                stdout=out, stderr=subprocess.STDOUT)
        try:
            _wait_for(lambda: (checkpoint / "baseline-ewc.json").is_file(), proc, log, "the EWC baseline's file")
            proc.kill()
            outcome["sigkill_code"] = proc.wait(timeout=TIMEOUT)
        finally:
            if proc.poll() is None:
                proc.kill()
    outcome["sigkill_log"] = log.read_text()
    outcome["sigkill_files"] = sorted(p.name for p in checkpoint.iterdir())

    # 3. The same command to the end.
    commands.start("resumed", resumable)
    outcome["resumed"] = commands("resumed")
    outcome["reference"] = commands("reference")
    return outcome


@pytest.mark.slow
def test_ctrl_c_and_sigkill_then_resume_give_the_uninterrupted_results(resumed):
    assert resumed["sigint_code"] == 130, resumed["sigint_log"]
    assert 4 <= resumed["sigint_tasks"] < N_TASKS, "Ctrl-C did not land in the middle of the stream"
    kept = f"interrupted: E0, {resumed['sigint_tasks']} of {N_TASKS} SDR tasks and 0 of 2 baselines are kept"
    assert kept in resumed["sigint_log"] and "run the same command again to resume" in resumed["sigint_log"]
    assert "Traceback" not in resumed["sigint_log"]

    assert resumed["sigkill_code"] == -signal.SIGKILL
    assert f"{resumed['sigint_tasks']} of {N_TASKS} experiences done" in resumed["sigkill_log"]
    assert "[resume] E0 loaded from" in resumed["sigkill_log"]
    assert "[pretrain E0]" not in resumed["sigkill_log"]  # loaded, not trained again
    assert {"pretrained.pt", "manifest.json", "baseline-ewc.json"} <= set(resumed["sigkill_files"])
    assert "baseline-replay.json" not in resumed["sigkill_files"]

    code, out, err = resumed["resumed"]
    assert code == 0, err
    assert f"{N_TASKS} of {N_TASKS} experiences done" in out
    assert "[resume] Online EWC: finished before" in out and "[resume] ER:" not in out  # ER ran again
    code, out, err = resumed["reference"]
    assert code == 0, err

    root = resumed["root"]
    reference = json.loads((root / "reference.json").read_text())
    result = json.loads((root / "resumed.json").read_text())
    assert len(result["tasks"]) == N_TASKS and set(result["baselines"]) == {"ewc", "replay"}
    assert _strip_wall_seconds(result) == _strip_wall_seconds(reference)


@pytest.mark.slow
def test_piped_output_is_plain_lines_one_per_task(resumed):
    code, out, err = resumed["reference"]
    assert code == 0, err
    assert "\r" not in out and "\r" not in err  # no progress-bar frames
    # Each decision line starts a line of its own (the legend quotes "[SDR] task t:").
    assert re.findall(r"^\[SDR\] task (\d+): ", out, re.M) == [str(t) for t in range(N_TASKS)]
    assert len(re.findall(r"\[SDR\] task \d+:", out)) == N_TASKS
    assert "SDR_Decision" not in out  # not inside Avalanche's metric dump
    # Pretraining's progress is labelled, on stderr (the script's results stay alone on stdout).
    assert re.search(r"^\[pretrain E0\] 1 epochs on 3 warm-start tasks \(\d+ images\): loss ", err, re.M)
    assert "[pretrain" not in out


@pytest.mark.slow
def test_a_checkpoint_dir_of_other_options_is_refused(resumed, commands):
    other = [str(a) for a in resumed["command"]]
    other[other.index("--pretrain-epochs") + 1] = "2"
    commands.start("other_options", other)
    code, out, err = commands("other_options")
    assert code == 1
    assert "made with another configuration (run_info.config.backbone: checkpoint 'small_cnn(32,64,128) " \
        "pretrained 1 epochs on the warm-start tasks', here 'small_cnn(32,64,128) pretrained 2 epochs" in err
    assert "Run the command with the options of the run that wrote it" in err
    assert "Traceback" not in err


@pytest.mark.slow
def test_a_checkpoint_dir_of_another_command_is_refused(tmp_path, commands):
    (tmp_path / "manifest.json").write_text("{}")  # what examples/quickstart.py leaves, in short
    commands.start("foreign", commands.example("emnist_100") + [
        "--data-root", tmp_path / "no_data", "--checkpoint-dir", tmp_path])
    code, out, err = commands("foreign")
    assert code == 1
    assert "holds an SDR checkpoint without pretrained.pt" in err and "another --checkpoint-dir" in err
    assert "not found" not in err  # refused before any data is read
    assert "Traceback" not in err
