"""``python -m benchmarks.table2 --e0-references``: E0 pretrained on every warm-start image (``all``,
every committed run's) or the library's default flow (``held_out``: ``pretrain_backbone``'s default
holdout, its record kept in E0's own file and given back to the runs).

Fast: E0 on the digits stream's smoke preset (a few seconds), the parser's refusal.
"""
import pytest
import torch

from avalanche_sdr.detection.two_sample import DEFAULT_HOLDOUT_SHARE, PRETRAINING_RECORD
from benchmarks.table2 import command as table2
from benchmarks.table2 import engine
from benchmarks.table2.specs import RunSpec, backbone_file


def test_held_out_e0_keeps_its_record_in_its_own_file(tmp_path):
    every = engine.prepare_backbone("digits", "smoke", 0, tmp_path)
    held = engine.prepare_backbone("digits", "smoke", 0, tmp_path, references="held_out")
    assert held != every and held == str(backbone_file("digits", "smoke", 0, tmp_path, "held_out"))
    assert held.endswith("digits_smoke_seed0_heldout.pt") and every.endswith("digits_smoke_seed0.pt")
    assert "pretraining" not in torch.load(every, weights_only=True)
    loaded = engine.load_backbone(RunSpec("digits", "smoke", "finetune", 0, held))
    record = getattr(loaded, PRETRAINING_RECORD)
    assert record.tasks == (0, 1, 2)  # the stream's three warm-start tasks
    assert record.holdout is not None and record.holdout.share == DEFAULT_HOLDOUT_SHARE
    assert getattr(engine.load_backbone(RunSpec("digits", "smoke", "finetune", 0, every)), PRETRAINING_RECORD,
                   None) is None
    # Trained on other images: other weights (so a call never mixes the two files).
    a = torch.load(every, weights_only=True)["state_dict"]
    b = torch.load(held, weights_only=True)["state_dict"]
    assert any(not torch.equal(a[k], b[k]) for k in a if a[k].is_floating_point())
    # Made once: a second call returns the file without pretraining again.
    stamp = (tmp_path / "backbones" / "digits_smoke_seed0_heldout.pt").stat().st_mtime_ns
    assert engine.prepare_backbone("digits", "smoke", 0, tmp_path, references="held_out") == held
    assert (tmp_path / "backbones" / "digits_smoke_seed0_heldout.pt").stat().st_mtime_ns == stamp


def test_the_note_names_the_held_out_references():
    assert "holds out" in engine.backbone_note("digits", "smoke", "held_out")
    assert "holds out" not in engine.backbone_note("digits", "smoke")
    with pytest.raises(ValueError, match="references must be one of"):
        backbone_file("digits", "smoke", 0, ".", "some")


def test_a_stream_whose_e0_is_not_pretrained_on_it_refuses_held_out(tmp_path, capsys):
    weights = tmp_path / "resnet20.th"
    weights.write_bytes(b"")
    with pytest.raises(SystemExit) as stop:
        table2.parse_args(["--stream", "emnist100", "--data-root", str(tmp_path), "--backbone-weights", str(weights),
                           "--methods", "sdr_recommended", "--e0-references", "held_out", "--out", str(tmp_path / "o")])
    assert stop.value.code == 2
    assert "not pretrained on the stream" in capsys.readouterr().err
    with pytest.raises(ValueError, match="not pretrained on the stream"):
        engine.prepare_backbone("emnist100", "smoke", 0, tmp_path, references="held_out")
    assert table2.parse_args(["--stream", "digits", "--out", str(tmp_path / "o")]).e0_references == "all"
