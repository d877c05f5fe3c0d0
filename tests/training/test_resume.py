"""SIGKILL in the middle of a run, then the same command again: it resumes and its
results JSON is byte for byte the one of an uninterrupted run (CPU, same seed).

Runs ``examples/quickstart.py`` in subprocesses (about 30 s on two CPU cores): the
uninterrupted reference, without a checkpoint directory, runs beside the run that is
killed once its checkpoint shows at least 4 finished tasks. Also: what a script keeps
from before the stream (:func:`~avalanche_sdr.training.checkpoint.save_pretrained`).
"""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from avalanche_sdr.models import small_cnn_backbone
from avalanche_sdr.training.checkpoint import (
    CheckpointError,
    CheckpointMismatchError,
    load_pretrained,
    save_pretrained,
)

REPO = Path(__file__).resolve().parents[2]
QUICKSTART = REPO / "examples" / "quickstart.py"
N_TASKS = 10  # MixedDigits' default stream


def _env():
    # One thread per process: the two concurrent runs do not fight over two cores, and
    # every run computes with the same thread count (reductions in the same order).
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


def _command(output, checkpoint_dir=None):
    command = [sys.executable, str(QUICKSTART), "--seed", "0", "--quiet", "--output", str(output)]
    if checkpoint_dir is not None:
        command += ["--checkpoint-dir", str(checkpoint_dir)]
    return command


def _finished(checkpoint_dir: Path) -> int:
    """Finished experiences in the checkpoint (0 before the first one).

    The manifest is replaced atomically, so it is never read half-written: a JSON
    error here is a failure of the test.
    """
    try:
        text = (checkpoint_dir / "manifest.json").read_text()
    except FileNotFoundError:
        return 0
    return json.loads(text)["step"]


@pytest.mark.slow
def test_sigkill_then_resume_gives_the_uninterrupted_results(tmp_path):
    checkpoint_dir = tmp_path / "checkpoint"
    resumed_json, reference_json = tmp_path / "resumed.json", tmp_path / "reference.json"
    with open(tmp_path / "reference.log", "w") as reference_log, open(tmp_path / "killed.log", "w") as killed_log:
        reference = subprocess.Popen(
            _command(reference_json), cwd=REPO, env=_env(), stdout=reference_log, stderr=subprocess.STDOUT
        )
        victim = subprocess.Popen(
            _command(resumed_json, checkpoint_dir), cwd=REPO, env=_env(), stdout=killed_log, stderr=subprocess.STDOUT
        )
        try:
            deadline = time.monotonic() + 300
            while _finished(checkpoint_dir) < 4:
                assert victim.poll() is None, (tmp_path / "killed.log").read_text()
                assert time.monotonic() < deadline, "no checkpoint of 4 tasks within 300 s"
                time.sleep(0.02)
            os.kill(victim.pid, signal.SIGKILL)
            assert victim.wait(timeout=60) == -signal.SIGKILL
        finally:
            if victim.poll() is None:
                victim.kill()
    at_kill = _finished(checkpoint_dir)
    assert 4 <= at_kill < N_TASKS, f"the run was not interrupted mid-stream (checkpoint at {at_kill})"
    assert not resumed_json.exists()
    # The kill may land between the new manifest and the removal of the previous
    # tensor file: that one is stale and removed by the next save.
    assert (checkpoint_dir / f"state-{at_kill:06d}.pt").is_file()

    resumed = subprocess.run(
        _command(resumed_json, checkpoint_dir), cwd=REPO, env=_env(), capture_output=True, text=True, timeout=300
    )
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert f"{at_kill} of {N_TASKS} experiences done" in resumed.stdout
    assert "[pretrain E0]" not in resumed.stdout  # E0 came from the checkpoint
    assert reference.wait(timeout=300) == 0, (tmp_path / "reference.log").read_text()

    assert resumed_json.read_bytes() == reference_json.read_bytes()
    results = json.loads(resumed_json.read_text())
    assert len(results["tasks"]) == N_TASKS and _finished(checkpoint_dir) == N_TASKS
    assert sorted(p.name for p in checkpoint_dir.iterdir()) == ["manifest.json", f"state-{N_TASKS:06d}.pt"]


RUN_INFO = {"config": {"stream": "MixedDigits", "backbone": "small_cnn(8,16)"}, "seed": 0}


def _draws():
    """One draw of each global RNG the library's training uses."""
    import random

    return random.random(), float(np.random.rand()), torch.rand(3)


def test_pretrained_modules_and_rng_states_come_back(tmp_path):
    torch.manual_seed(0)
    backbone = small_cnn_backbone(in_channels=1, widths=(8, 16))
    save_pretrained(tmp_path / "pretrained.pt", {"backbone": backbone}, RUN_INFO)
    expected = _draws()

    torch.manual_seed(1)  # another init and other RNG states: all must come from the file
    np.random.seed(1)
    fresh = small_cnn_backbone(in_channels=1, widths=(8, 16))
    load_pretrained(tmp_path / "pretrained.pt", {"backbone": fresh}, RUN_INFO)
    drawn = _draws()
    assert drawn[:2] == expected[:2] and torch.equal(drawn[2], expected[2])
    for (name, saved), loaded in zip(backbone.state_dict().items(), fresh.state_dict().values()):
        assert torch.equal(saved, loaded), name
    assert [p.name for p in tmp_path.iterdir()] == ["pretrained.pt"]  # no temporary file left


def test_pretrained_modules_of_another_run_are_refused(tmp_path):
    path = tmp_path / "pretrained.pt"
    save_pretrained(path, {"backbone": small_cnn_backbone(in_channels=1, widths=(8, 16))}, RUN_INFO)
    other = dict(RUN_INFO, config=dict(RUN_INFO["config"], backbone="small_cnn(8,32)"))
    with pytest.raises(CheckpointMismatchError,
                       match=r"run_info\.config\.backbone: checkpoint 'small_cnn\(8,16\)', here 'small_cnn\(8,32\)'"):
        load_pretrained(path, {"backbone": small_cnn_backbone(in_channels=1, widths=(8, 32))}, other)
    with pytest.raises(CheckpointMismatchError, match=r"modules: checkpoint \['backbone'\], here \['vae'\]"):
        load_pretrained(path, {"vae": small_cnn_backbone(in_channels=1, widths=(8, 16))}, RUN_INFO)
    with pytest.raises(CheckpointMismatchError, match=r"modules\.backbone"):
        load_pretrained(path, {"backbone": small_cnn_backbone(in_channels=1, widths=(8, 32))}, RUN_INFO)
    path.write_bytes(path.read_bytes()[:100])  # truncated
    with pytest.raises(CheckpointError, match="is unreadable"):
        load_pretrained(path, {"backbone": small_cnn_backbone(in_channels=1, widths=(8, 16))}, RUN_INFO)
