"""Checkpoints: atomic files, manifest, resume, inference-only loading, mismatches.

A run of the tiny prototype stream (8 tasks) is stopped after 4 experiences; its
checkpoint directory is then resumed, loaded for inference, or refused.
"""
import json
import shutil

import pytest
import torch

from avalanche.evaluation.metrics import accuracy_metrics
from avalanche.training.plugins import EvaluationPlugin

from avalanche_sdr import SDRStrategy, build_sdr_model
from avalanche_sdr.dataset_tensors import experience_tensors
from avalanche_sdr.models import small_cnn_backbone
from avalanche_sdr.training import (
    CheckpointError,
    CheckpointMismatchError,
    has_checkpoint,
    load_repository,
    read_manifest,
)
from avalanche_sdr.training.checkpoint import atomic_write, atomic_write_json
from avalanche_sdr.training.stream_runner import run_sdr_stream

# Explicit (not a preset): the tests' expectations must not move with the presets.
FAST = dict(
    new_task_epochs=3, lr_milestones=(2,), new_task_lr=0.01, lr_decay=0.1, reuse_epochs=2, reuse_lr=0.01,
    train_mb_size=32, eval_mb_size=256, vae_epochs=6, vae_lr=5e-3, vae_mb_size=32, vae_patience=3,
)
STOP_AFTER = 4

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/training/conftest.py


def _model(widths=(16, 32), **kwargs):
    return build_sdr_model(
        small_cnn_backbone(in_channels=1, widths=widths), in_channels=1, image_size=8, latent_dim=4, vae_width=8,
        **kwargs,
    )


def _strategy(model, checkpoint_dir=None, **overrides):
    return SDRStrategy(
        model=model, **{**FAST, **overrides},
        evaluator=EvaluationPlugin(accuracy_metrics(experience=True), loggers=[]),
        checkpoint_dir=checkpoint_dir,
    )


@pytest.fixture(scope="module")
def reference(prototype_stream):
    """An uninterrupted run without checkpoints: (strategy, results)."""
    torch.manual_seed(0)
    strategy = _strategy(_model())
    return strategy, run_sdr_stream(strategy, prototype_stream, seed=0)


@pytest.fixture(scope="module")
def stopped(prototype_stream, tmp_path_factory):
    """(checkpoint directory, strategy) of the same run stopped after STOP_AFTER experiences."""
    directory = tmp_path_factory.mktemp("stopped")
    torch.manual_seed(0)
    strategy = _strategy(_model(), checkpoint_dir=directory)
    strategy.checkpoint.run_info = {"config": {}, "seed": 0}  # what run_sdr_stream records
    for experience in list(prototype_stream.train_stream)[:STOP_AFTER]:
        strategy.train(experience, eval_streams=[])
    return directory, strategy


@pytest.fixture
def copy_of_stopped(stopped, tmp_path):
    """A private copy of the stopped run's checkpoint directory."""
    return shutil.copytree(stopped[0], tmp_path / "checkpoint")


# ------------------------------------------------------------------ atomic files
def test_atomic_write_interrupted_mid_write_leaves_the_old_file(tmp_path):
    path = tmp_path / "manifest.json"
    atomic_write_json(path, {"step": 1})

    def write_half_then_fail(f):
        f.write(b'{"step": 2, "trunc')
        raise KeyboardInterrupt  # stands for a kill between two writes

    with pytest.raises(KeyboardInterrupt):
        atomic_write(path, write_half_then_fail)
    assert json.loads(path.read_text()) == {"step": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["manifest.json"]  # no temporary file left


def test_atomic_write_json_writes_the_bytes_of_json_dump(tmp_path):
    value = {"a": [1, 0.1, None, "\u00e9"], "b": {"c": True, "d": []}}
    path, reference = tmp_path / "value.json", tmp_path / "reference.json"
    atomic_write_json(path, value)
    with open(reference, "w") as f:
        json.dump(value, f, indent=1)
    assert path.read_bytes() == reference.read_bytes()
    with pytest.raises(ValueError):  # strict by default (checkpoint manifests) ...
        atomic_write_json(path, {"x": float("nan")})
    assert json.loads(path.read_text()) == value  # ... and the refused value wrote nothing
    atomic_write_json(path, {"x": float("nan")}, allow_nan=True)  # results files
    assert path.read_text() == '{\n "x": NaN\n}'


def test_failed_tensor_write_keeps_the_last_checkpoint(copy_of_stopped, prototype_stream, monkeypatch):
    torch.manual_seed(0)
    strategy = _strategy(_model(), checkpoint_dir=copy_of_stopped)
    assert strategy.restore_checkpoint() == STOP_AFTER

    def torch_save_dies_halfway(obj, f, *args, **kwargs):
        f.write(b"PK\x03\x04 partial zip")
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", torch_save_dies_halfway)
    with pytest.raises(OSError, match="disk full"):
        strategy.train(prototype_stream.train_stream[STOP_AFTER], eval_streams=[])
    monkeypatch.undo()
    assert read_manifest(copy_of_stopped)["step"] == STOP_AFTER
    assert sorted(p.name for p in copy_of_stopped.iterdir()) == ["manifest.json", f"state-{STOP_AFTER:06d}.pt"]
    assert load_repository(copy_of_stopped, _model()).num_entries == 3


# ------------------------------------------------------------------ manifest
def test_manifest_records_the_run(stopped):
    directory, strategy = stopped
    manifest = read_manifest(directory)
    assert manifest["step"] == STOP_AFTER and manifest["tensors"] == f"state-{STOP_AFTER:06d}.pt"
    assert sorted(p.name for p in directory.iterdir()) == ["manifest.json", manifest["tensors"]]
    assert manifest["records"] == [dict(d.to_dict(), **r.to_dict())
                                   for d, r in zip(strategy.detection_records, strategy.sdr.reuse_records)]
    assert manifest["repository"] == strategy.model.layout()
    assert [p["task"] for p in manifest["progress"]] == list(range(STOP_AFTER))
    assert manifest["clock"]["train_exp_counter"] == STOP_AFTER
    assert manifest["fingerprint"]["repository"]["a"] == 8
    assert manifest["run_info"] == {"config": {}, "seed": 0}
    tensors = torch.load(directory / manifest["tensors"], weights_only=True)
    state = strategy.model.state_dict()
    assert tensors["model"].keys() == state.keys()
    assert all(torch.equal(tensors["model"][k], state[k]) for k in state)
    assert tensors["rng_torch"].dtype == torch.uint8


def test_a_corrupt_manifest_is_a_named_error(copy_of_stopped):
    (copy_of_stopped / "manifest.json").write_text('{"format": "avalanche-sdr-checkpoint", "ver')
    with pytest.raises(CheckpointError, match="unreadable"):
        load_repository(copy_of_stopped, _model())


def test_a_truncated_tensor_file_is_a_named_error(copy_of_stopped):
    path = copy_of_stopped / f"state-{STOP_AFTER:06d}.pt"
    path.write_bytes(path.read_bytes()[:1000])
    with pytest.raises(CheckpointError, match="unreadable"):
        load_repository(copy_of_stopped, _model())


# ------------------------------------------------------------------ resume
def test_resumed_run_equals_the_uninterrupted_run(reference, copy_of_stopped, prototype_stream):
    reference_strategy, reference_results = reference
    torch.manual_seed(12345)  # whatever the RNG holds now: the checkpoint's states are restored
    strategy = _strategy(_model(), checkpoint_dir=copy_of_stopped)
    results = run_sdr_stream(strategy, prototype_stream, seed=0)
    # The stopped run trained in a plain loop, without the runner's group evaluations: its
    # checkpoint holds no group-curve entries; the last finished experience's is evaluated
    # again on resuming, the later ones are the uninterrupted run's.
    curve, reference_curve = results["group_curve"], reference_results["group_curve"]
    assert curve[:STOP_AFTER - 1] == [None] * (STOP_AFTER - 1)
    assert curve[STOP_AFTER - 1:] == reference_curve[STOP_AFTER - 1:]
    assert results["bwt"] is None and results["forgetting"] is None
    untracked = ("group_curve", "bwt", "forgetting")
    assert json.dumps({k: v for k, v in results.items() if k not in untracked}) == \
        json.dumps({k: v for k, v in reference_results.items() if k not in untracked})
    without_time = lambda r: {k: v for k, v in r.to_dict().items() if k != "detection_seconds"}  # noqa: E731
    assert list(map(without_time, strategy.detection_records)) == list(
        map(without_time, reference_strategy.detection_records)
    )
    state, expected = strategy.model.state_dict(), reference_strategy.model.state_dict()
    assert state.keys() == expected.keys()
    assert all(torch.equal(state[k], expected[k]) for k in expected)
    assert read_manifest(copy_of_stopped)["step"] == len(prototype_stream.train_stream)


def test_a_directory_with_a_checkpoint_is_not_overwritten_without_restoring(copy_of_stopped, prototype_stream):
    strategy = _strategy(_model(), checkpoint_dir=copy_of_stopped)
    with pytest.raises(CheckpointError, match="already holds a checkpoint of 4 experiences"):
        strategy.train(prototype_stream.train_stream[0], eval_streams=[])
    assert read_manifest(copy_of_stopped)["step"] == STOP_AFTER


def test_an_empty_directory_starts_from_the_beginning(tmp_path):
    strategy = _strategy(_model(), checkpoint_dir=tmp_path / "new")
    assert not has_checkpoint(tmp_path / "new")
    assert strategy.restore_checkpoint() == 0
    assert strategy.model.num_entries == 0


# ------------------------------------------------------------------ inference only
def test_inference_only_load_predicts_like_the_trained_model(stopped, prototype_stream):
    directory, strategy = stopped
    torch.manual_seed(99)  # another random init: every value must come from the checkpoint
    loaded = load_repository(directory, _model())
    assert not loaded.training and not any(p.requires_grad for p in loaded.parameters())
    assert loaded.task_to_entry == strategy.model.task_to_entry
    trained = strategy.model.eval()
    with torch.no_grad():
        for task in range(STOP_AFTER):
            x = experience_tensors(prototype_stream.test_stream[task])[0]
            assert torch.equal(loaded(x, task), trained(x, task))


# ------------------------------------------------------------------ mismatches
@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(a=4, b=8), r"repository\.a: checkpoint 8, here 4; repository\.b: checkpoint 16, here 8"),
        (dict(widths=(16, 64)), r"repository\.conv_channels: checkpoint \[16, 32\], here \[16, 64\]"),
        (dict(head_hidden=32), r"repository\.head_hidden: checkpoint None, here 32"),
    ],
)
def test_another_model_configuration_is_refused(stopped, kwargs, message):
    with pytest.raises(CheckpointMismatchError, match=message) as info:
        load_repository(stopped[0], _model(**kwargs))
    assert info.value.directory == str(stopped[0])


def test_other_strategy_settings_are_refused(copy_of_stopped):
    strategy = _strategy(_model(), checkpoint_dir=copy_of_stopped, reuse_epochs=5)
    with pytest.raises(CheckpointMismatchError, match=r"strategy\.reuse_epochs: checkpoint 2, here 5"):
        strategy.restore_checkpoint()
    assert strategy.model.num_entries == 0  # refused before anything was loaded


def test_a_checkpoint_that_differs_only_in_the_evaluation_batch_size_loads(copy_of_stopped):
    # taken with eval_mb_size=256 (FAST), as every checkpoint before None (chosen for the
    # device) became the default: a speed-only field (checkpoint.SPEED_ONLY_FIELDS)
    strategy = _strategy(_model(), checkpoint_dir=copy_of_stopped, eval_mb_size=None)
    assert strategy.restore_checkpoint() == STOP_AFTER


def test_another_seed_of_the_run_is_refused(copy_of_stopped, prototype_stream):
    strategy = _strategy(_model(), checkpoint_dir=copy_of_stopped)
    with pytest.raises(CheckpointMismatchError, match=r"run_info\.seed: checkpoint 0, here 1"):
        run_sdr_stream(strategy, prototype_stream, seed=1)


def test_a_run_seeded_per_task_does_not_resume_a_checkpoint_of_a_run_that_was_not(copy_of_stopped, prototype_stream):
    strategy = _strategy(_model(), checkpoint_dir=copy_of_stopped)
    with pytest.raises(CheckpointMismatchError, match=r"run_info\.seed_each_task: checkpoint '<absent>', here 3"):
        run_sdr_stream(strategy, prototype_stream, seed=0, seed_each_task=3)
