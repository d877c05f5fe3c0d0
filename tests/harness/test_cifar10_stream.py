"""The harness stream ``cifar10`` (``benchmarks/table2/methods.py``, ``benchmarks/table2/catalogue.py``):
the paper's MixedCIFAR10 from a ``--data-root`` holding ``cifar-10-batches-py/``, E0 the
small CNN on 3 channels pretrained by the harness on the warm-start tasks (never the
CIFAR-10 ResNet weights, which have seen these classes). Fast: a tiny fake root of
python-version pickles (bytes keys, as the official files read with Python 3), a few
images a class."""
import dataclasses
import os
import pickle

import numpy as np
import pytest
import torch

from avalanche_sdr.benchmarks import DatasetNotFoundError
from avalanche_sdr.models.backbones import CifarResNet, ImageBackbone, SmallCNN
from benchmarks.studies.detection import sim as detection_sim
from benchmarks.table2 import catalogue
from benchmarks.table2 import command as table2
from benchmarks.table2 import engine
from benchmarks.table2.specs import RunSpec
from benchmarks.table2.methods import PRESETS, STREAMS

pytestmark = pytest.mark.usefixtures("one_thread")

CIFAR10_NAMES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
TINY_SIZES = (8, 2, 4)
"""(train, valid, test) images per task that the fake root below can supply."""


def write_fake_cifar10(root, n_train=10, n_test=4, seed=0):
    """``root/cifar-10-batches-py`` with ``n_train`` / ``n_test`` random images a class."""
    rng = np.random.default_rng(seed)
    folder = os.path.join(root, "cifar-10-batches-py")
    os.makedirs(folder)

    def dump(name, obj):
        with open(os.path.join(folder, name), "wb") as f:
            pickle.dump(obj, f)

    labels = rng.permutation(np.repeat(np.arange(10), n_train))
    data = rng.integers(0, 256, size=(len(labels), 3072), dtype=np.uint8)
    for b, rows in enumerate(np.array_split(np.arange(len(labels)), 5)):
        dump(f"data_batch_{b + 1}", {b"data": data[rows], b"labels": labels[rows].tolist()})
    test_labels = np.repeat(np.arange(10), n_test)
    dump("test_batch", {b"data": rng.integers(0, 256, size=(len(test_labels), 3072), dtype=np.uint8),
                        b"labels": test_labels.tolist()})
    dump("batches.meta", {"label_names": CIFAR10_NAMES})
    return str(root)


@pytest.fixture
def fake_root(tmp_path):
    return write_fake_cifar10(tmp_path / "data")


def test_cifar10_stream_entry_and_sizes():
    entry, spec = catalogue.STREAMS["cifar10"], STREAMS["cifar10"]
    assert "JPEG-re-encoded" in entry.label and entry.label == spec.label
    assert entry.needs_data_root and spec.needs_data_root
    assert entry.backbone == spec.backbone == "small_cnn"
    assert (spec.in_channels, spec.image_size, spec.latent_dim, spec.vae_width) == (3, 32, 32, 32)
    assert spec.fixed_sizes is None  # the paper preset keeps the full 4500 / 500 / 1000
    assert spec.capped_sizes == (1000, 100, 500)
    assert PRESETS["cpu"].capped and not PRESETS["paper"].capped


def test_cifar10_stream_builds_from_a_fake_root(fake_root):
    spec = STREAMS["cifar10"]
    bm = spec.build(0, capped=True, data_root=fake_root, sizes=TINY_SIZES)
    assert len(bm.train_stream) == len(bm.valid_stream) == len(bm.test_stream) == 10
    assert bm.n_warm_start == 3
    groups = list(bm.stream_groups)
    assert sorted(groups) == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4]  # 5 groups x 2 splits
    assert len(set(groups[:3])) == 3  # the warm-start tasks are dissimilar
    sizes = [(len(bm.train_stream[i].dataset), len(bm.valid_stream[i].dataset), len(bm.test_stream[i].dataset))
             for i in range(10)]
    assert set(sizes) == {TINY_SIZES}
    x, y = bm.train_stream[0].dataset[0][:2]
    assert tuple(x.shape) == (3, 32, 32) and x.dtype == torch.float32 and 0.0 <= float(x.min()) <= float(x.max()) <= 1.0
    assert int(y) in (0, 1)  # local labels
    # The task-free rows' stream (original class ids): same tasks, CIFAR-10's class ids.
    ci = spec.build(0, capped=True, data_root=fake_root, sizes=TINY_SIZES, original_class_ids=True)
    assert list(ci.stream_groups) == groups
    assert {int(v) for e in ci.train_stream for v in e.dataset.targets} == set(range(10))


def test_cifar10_needs_a_data_root_with_the_files(tmp_path, capsys):
    spec = STREAMS["cifar10"]
    with pytest.raises(ValueError, match="needs --data-root"):
        spec.build(0, capped=True)
    # The parsers stop before anything runs (exit code 2), naming what to pass.
    for parse in (lambda: table2.parse_args(["--stream", "cifar10", "--preset", "cpu", "--out", str(tmp_path / "o")]),
                  lambda: detection_sim.parse_args(["--stream", "cifar10"])):
        with pytest.raises(SystemExit) as stop:
            parse()
        assert stop.value.code == 2
        assert "--stream cifar10 needs --data-root" in capsys.readouterr().err
    args = table2.parse_args(["--stream", "cifar10", "--preset", "cpu", "--data-root", str(tmp_path),
                              "--out", str(tmp_path / "o")])
    assert args.data_root == str(tmp_path) and args.backbone_weights is None  # no ResNet weights asked for
    # A data root without cifar-10-batches-py/: the loader's message names the missing files.
    with pytest.raises(DatasetNotFoundError, match="data_batch_1"):
        spec.build(0, capped=True, data_root=str(tmp_path))


def test_cifar10_backbone_is_the_small_cnn_pretrained_on_the_warm_start_tasks(fake_root, tmp_path, monkeypatch):
    import avalanche_sdr.training as training

    backbone = engine.make_backbone("cifar10")
    assert isinstance(backbone, ImageBackbone) and isinstance(backbone.body, SmallCNN)
    assert not any(isinstance(m, CifarResNet) for m in backbone.modules())
    first = backbone.body.features[0]
    assert isinstance(first, torch.nn.Conv2d) and first.in_channels == 3
    assert tuple(backbone(torch.rand(2, 3, 32, 32)).shape) == (2, 128)
    assert "warm-start" in engine.backbone_note("cifar10", "cpu")

    # prepare_backbone pretrains that CNN on the stream's 3 warm-start tasks (caps shrunk
    # to what the fake root holds) and saves it; every run loads it frozen.
    monkeypatch.setitem(STREAMS, "cifar10", dataclasses.replace(STREAMS["cifar10"], capped_sizes=TINY_SIZES))
    seen = {}
    real = training.pretrain_backbone

    def recording(model, experiences, **kwargs):
        seen["model"], seen["tasks"] = model, [e.current_experience for e in experiences]
        seen["before"] = {k: v.clone() for k, v in model.state_dict().items()}
        return real(model, experiences, **kwargs)

    monkeypatch.setattr(training, "pretrain_backbone", recording)
    path = engine.prepare_backbone("cifar10", "smoke", 0, tmp_path / "out", data_root=fake_root)
    assert seen["tasks"] == [0, 1, 2]
    assert isinstance(seen["model"].body, SmallCNN) and seen["model"].body.features[0].in_channels == 3
    saved = torch.load(path, weights_only=True)["state_dict"]
    assert not torch.equal(saved["body.features.0.weight"], seen["before"]["body.features.0.weight"])
    loaded = engine.load_backbone(RunSpec("cifar10", "smoke", "optimal", 0, path))
    assert torch.equal(loaded.body.features[0].weight, saved["body.features.0.weight"])
    assert not any(p.requires_grad for p in loaded.parameters())


@pytest.mark.slow
def test_cifar10_sdr_rows_run_on_the_stream(tmp_path, monkeypatch):
    """``optimal`` (independent ConvVAEs on 3x32x32, latent 32) and ``sdr_two_sample_nogen``
    run end to end in-process on a fake root (smoke preset, tiny caps)."""
    root = write_fake_cifar10(tmp_path / "data", n_train=20, n_test=8)
    monkeypatch.setitem(STREAMS, "cifar10", dataclasses.replace(STREAMS["cifar10"], capped_sizes=(16, 4, 8)))
    path = engine.prepare_backbone("cifar10", "smoke", 0, tmp_path / "out", data_root=root)
    for method in ("optimal", "sdr_two_sample_nogen"):
        run = engine.execute_run(RunSpec("cifar10", "smoke", method, 0, path, threads=1, data_root=root))
        assert run["stream_label"] == "MixedCIFAR10 (10 tasks, JPEG-re-encoded)"
        assert len(run["task_accuracies"]) == 10 and run["memory_mb"] > 0
        assert run["detection"]["n_scored"] == 7
        assert "warm-start" in run["backbone"]
        assert {s["train"] for s in run["task_sizes"]} == {16}
