"""MixedEMNIST: Table 4 groups, Table 3 sizes, upright images, bymerge scaling, real data."""

import os
from pathlib import Path

import numpy as np
import pytest
import torch

from avalanche_sdr.benchmarks import (
    EMNIST_CLASSES,
    EMNIST_TABLE4_GROUPS,
    DatasetNotFoundError,
    ImageArrayDataset,
    MixedEMNIST,
    emnist_groups,
    experience_tensors,
)
from avalanche_sdr.benchmarks import sources

SHARED_DATA = Path(os.environ.get("SDR_SHARED_DATA", Path(__file__).resolve().parents[2].parent / "shared" / "data"))
REAL_NPZ = SHARED_DATA / "emnist" / "emnist_bymerge_test.npz"


def fake_split(counts, seed):
    rng = np.random.default_rng(seed)
    labels = np.repeat(np.arange(47), counts).astype(np.uint8)
    images = rng.integers(0, 200, size=(len(labels), 28, 28), dtype=np.uint8)
    images[:, 0, 27] = 255  # top-right pixel marks the upright orientation
    images[:, 27, 0] = 0
    return images, labels


def tiny_arrays(train_counts, test_counts):
    """Loader replacement: ImageArrayDatasets of 1x2x2 images with given class counts."""
    def make(counts):
        labels = np.repeat(np.arange(47), counts)
        images = np.zeros((len(labels), 1, 2, 2), dtype=np.uint8)
        return ImageArrayDataset(images, labels, classes=sources.EMNIST_CLASSES)
    return make(train_counts), make(test_counts)


def test_table4_groups_partition_the_47_classes():
    groups = emnist_groups()
    assert [len(g) for g in groups] == [5] * 9 + [2]
    assert sorted(sum(groups, [])) == list(range(47))
    for table_group, ids in zip(EMNIST_TABLE4_GROUPS, groups):
        for name, c in zip(table_group, ids):
            assert EMNIST_CLASSES[c] in (name, name.upper())
    assert [EMNIST_CLASSES[c] for c in groups[4]] == ["T", "a", "b", "C", "d"]


def test_balanced_root_hundred_tasks_upright(tmp_path, write_emnist_root):
    per_task = [5] * 9 + [2]  # 1 image a class
    train = fake_split(22, seed=0)  # 10 splits x (1 train + 1 valid) + 2 spare
    test = fake_split(10, seed=1)
    write_emnist_root(str(tmp_path), "balanced", train, test)
    bm = MixedEMNIST(str(tmp_path), train_per_task=per_task, valid_per_task=per_task, test_per_task=per_task)
    assert len(bm.train_stream) == len(bm.valid_stream) == len(bm.test_stream) == 100
    assert sorted(zip(bm.stream_groups, bm.stream_splits)) == [(k, r) for k in range(10) for r in range(10)]
    assert len(set(bm.stream_groups[:3])) == 3
    assert bm.class_names[9] == ["Y", "Z"]
    i = bm.stream_groups.index(9)
    x, y, t = experience_tensors(bm.train_stream[i])
    assert x.shape == (2, 1, 28, 28) and y.tolist() == [0, 1] and t.tolist() == [i, i]
    assert torch.all(x[:, 0, 0, 27] == 1.0) and torch.all(x[:, 0, 27, 0] == 0.0)
    images, _ = train
    idx = bm.sample_indices[i]["train"]
    torch.testing.assert_close(x[:, 0], torch.from_numpy(images[idx]).float() / 255)


def test_paper_default_sizes(monkeypatch):
    monkeypatch.setattr(sources, "load_emnist", lambda root, split, download: tiny_arrays([2400] * 47, [400] * 47))
    bm = MixedEMNIST("unused", seed=2)
    assert len(bm.train_stream) == 100
    for k, sizes in zip(bm.stream_groups, bm.task_sizes):
        expected = (432, 48, 80) if k == 9 else (1080, 120, 200)
        assert (sizes["train"], sizes["valid"], sizes["test"]) == expected
        assert sizes["scaled"] is False
    # The 10 splits of a class are disjoint and use all its images.
    k0 = [i for i, k in enumerate(bm.stream_groups) if k == 0]
    joined = np.concatenate([np.concatenate([bm.sample_indices[i]["train"], bm.sample_indices[i]["valid"]]) for i in k0])
    assert len(np.unique(joined)) == len(joined) == 5 * 2400


def test_bymerge_scales_groups_to_their_rarest_class(monkeypatch):
    train_counts = [2400] * 47
    test_counts = [400] * 47
    q = EMNIST_CLASSES.index("Q")
    train_counts[q], test_counts[q] = 356, 59  # like the real bymerge data
    monkeypatch.setattr(sources, "load_emnist", lambda root, split, download: tiny_arrays(train_counts, test_counts))
    bm = MixedEMNIST("unused", split="bymerge")
    group_q = next(k for k, g in enumerate(emnist_groups()) if q in g)
    for k, sizes in zip(bm.stream_groups, bm.task_sizes):
        if k == group_q:
            # 356 // 10 = 35 per split, 9:1 -> 31 train + 4 valid; 59 // 10 = 5 test.
            assert sizes["train_per_class"] == [31] * 5 and sizes["valid_per_class"] == [4] * 5
            assert sizes["test_per_class"] == [5] * 5 and sizes["scaled"] is True
        else:
            assert sizes["scaled"] is False and sizes["train"] in (1080, 432)
    with pytest.raises(ValueError, match=r"class 26 \('Q'\) of group 3 has 356 training images"):
        MixedEMNIST("unused", split="bymerge", scale_to_available=False)


def test_missing_files_messages(tmp_path):
    with pytest.raises(DatasetNotFoundError) as info:
        MixedEMNIST(str(tmp_path))
    message = str(info.value)
    assert os.path.join(str(tmp_path), "EMNIST", "raw", "emnist-balanced-train-images-idx3-ubyte") in message
    assert "download=True" in message
    with pytest.raises(DatasetNotFoundError) as info:
        MixedEMNIST(str(tmp_path), split="bymerge")
    message = str(info.value)
    assert "emnist-bymerge-test-labels-idx1-ubyte" in message and "uint8 idx files" in message
    assert "--download" in message
    with pytest.raises(ValueError, match="'balanced' or 'bymerge'"):
        MixedEMNIST(str(tmp_path), split="byclass")


@pytest.mark.skipif(not REAL_NPZ.is_file(), reason=f"real EMNIST npz not found at {REAL_NPZ} (set SDR_SHARED_DATA)")
def test_real_bymerge_hundred_task_stream(tmp_path, write_emnist_root):
    data = np.load(REAL_NPZ)
    x, y = data["x"], data["y"]
    parts = {part: data[f"{part}_index"] for part in ("train", "test")}
    write_emnist_root(str(tmp_path), "bymerge", *[(x[parts[p]], y[parts[p]]) for p in ("train", "test")])
    bm = MixedEMNIST(str(tmp_path), split="bymerge", seed=0)
    assert len(bm.train_stream) == len(bm.valid_stream) == len(bm.test_stream) == 100
    train_counts = np.bincount(y[parts["train"]], minlength=47)
    test_counts = np.bincount(y[parts["test"]], minlength=47)
    for k, sizes in zip(bm.stream_groups, bm.task_sizes):
        group = emnist_groups()[k]
        capacity = min(train_counts[group]) // 10
        n_train, n_valid, n_test = (sizes[f"{p}_per_class"] for p in ("train", "valid", "test"))
        assert len(set(n_train)) == len(set(n_valid)) == len(set(n_test)) == 1
        assert n_train[0] + n_valid[0] == min(240, capacity)
        assert n_test[0] == min(40, min(test_counts[group]) // 10)
        assert sizes["scaled"] == (capacity < 240 or min(test_counts[group]) // 10 < 40)
    digits_sizes = [s for k, s in zip(bm.stream_groups, bm.task_sizes) if k < 2]
    assert all((s["train"], s["valid"], s["test"]) == (1080, 120, 200) for s in digits_sizes)
    # Images come back upright and equal to the npz's.
    i = 0
    xs, ys, _ = experience_tensors(bm.test_stream[i])
    expected = x[parts["test"][bm.sample_indices[i]["test"]]]
    torch.testing.assert_close(xs[:, 0], torch.from_numpy(expected).float() / 255)
    group = emnist_groups()[bm.stream_groups[i]]
    assert ys.tolist() == [group.index(int(c)) for c in y[parts["test"][bm.sample_indices[i]["test"]]]]
