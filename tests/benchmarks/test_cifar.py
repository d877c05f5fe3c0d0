"""MixedCIFAR10 / MixedCIFAR100 on fake python-pickle roots and with Table 3 sizes."""

import os
import pickle

import numpy as np
import pytest
import torch

from avalanche_sdr.benchmarks import (
    CIFAR10_TABLE4_GROUPS,
    CIFAR100_TABLE4_GROUPS,
    DatasetNotFoundError,
    ImageArrayDataset,
    MixedCIFAR10,
    MixedCIFAR100,
    experience_tensors,
)
from avalanche_sdr.benchmarks import sources

CIFAR10_NAMES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
FINE_NAMES = sorted(n.replace(" ", "_") for g in CIFAR100_TABLE4_GROUPS for n in g)
COARSE_NAMES = [f"superclass_{k}" for k in range(20)]


def dump(path, obj):
    with open(path, "wb") as f:
        pickle.dump(obj, f)


def cifar_rows(labels, rng):
    return rng.integers(0, 256, size=(len(labels), 3072), dtype=np.uint8)


def write_cifar10(root, n_train, n_test, seed=0):
    """Fake cifar-10-batches-py (bytes keys, as in the original pickles)."""
    rng = np.random.default_rng(seed)
    folder = os.path.join(root, "cifar-10-batches-py")
    os.makedirs(folder)
    labels = np.repeat(np.arange(10), n_train)
    rng.shuffle(labels)
    data = cifar_rows(labels, rng)
    for b, chunk in enumerate(np.array_split(np.arange(len(labels)), 5)):
        dump(os.path.join(folder, f"data_batch_{b + 1}"), {b"data": data[chunk], b"labels": labels[chunk].tolist()})
    test_labels = np.repeat(np.arange(10), n_test)
    test_data = cifar_rows(test_labels, rng)
    dump(os.path.join(folder, "test_batch"), {b"data": test_data, b"labels": test_labels.tolist()})
    dump(os.path.join(folder, "batches.meta"), {"label_names": CIFAR10_NAMES})
    return data, labels


def write_cifar100(root, n_train, n_test, coarse_of=None, seed=0):
    rng = np.random.default_rng(seed)
    folder = os.path.join(root, "cifar-100-python")
    os.makedirs(folder)
    if coarse_of is None:
        coarse_of = {FINE_NAMES.index(n.replace(" ", "_")): k for k, g in enumerate(CIFAR100_TABLE4_GROUPS) for n in g}
    out = {}
    for part, n in (("train", n_train), ("test", n_test)):
        fine = np.repeat(np.arange(100), n)
        rng.shuffle(fine)
        data = cifar_rows(fine, rng)
        coarse = [coarse_of[int(c)] for c in fine]
        dump(os.path.join(folder, part), {"data": data, "fine_labels": fine.tolist(), "coarse_labels": coarse})
        out[part] = (data, fine)
    dump(os.path.join(folder, "meta"), {"fine_label_names": FINE_NAMES, "coarse_label_names": COARSE_NAMES})
    return out


def tiny_arrays(n_classes, n_train, n_test, classes):
    def make(n):
        labels = np.repeat(np.arange(n_classes), n)
        return ImageArrayDataset(np.zeros((len(labels), 3, 1, 1), dtype=np.uint8), labels, classes=classes)
    return make(n_train), make(n_test)


def test_cifar10_fake_root(tmp_path):
    data, labels = write_cifar10(str(tmp_path), n_train=10, n_test=4)
    bm = MixedCIFAR10(str(tmp_path), train_per_task=8, valid_per_task=2, test_per_task=4)
    assert len(bm.train_stream) == len(bm.valid_stream) == len(bm.test_stream) == 10
    assert bm.groups == [[0, 2], [1, 9], [3, 5], [4, 7], [6, 8]]
    assert bm.class_names == CIFAR10_TABLE4_GROUPS
    assert len(set(bm.stream_groups[:3])) == 3
    for sizes in bm.task_sizes:
        assert (sizes["train"], sizes["valid"], sizes["test"]) == (8, 2, 4)
    x, y, t = experience_tensors(bm.train_stream[2])
    idx = bm.sample_indices[2]["train"]
    assert x.shape == (8, 3, 32, 32)
    torch.testing.assert_close(x, torch.from_numpy(data[idx]).float().reshape(-1, 3, 32, 32) / 255)
    group = bm.groups[bm.stream_groups[2]]
    assert y.tolist() == [group.index(int(c)) for c in labels[idx]]


def test_cifar100_fake_root_superclasses(tmp_path):
    write_cifar100(str(tmp_path), n_train=4, n_test=2)
    bm = MixedCIFAR100(str(tmp_path), train_per_task=5, valid_per_task=5, test_per_task=5)
    assert len(bm.train_stream) == len(bm.valid_stream) == len(bm.test_stream) == 40
    assert [[n.replace("_", " ") for n in g] for g in bm.class_names] == CIFAR100_TABLE4_GROUPS
    assert bm.group_names == COARSE_NAMES
    assert sorted(zip(bm.stream_groups, bm.stream_splits)) == [(k, r) for k in range(20) for r in range(2)]
    for i, exp in enumerate(bm.test_stream):
        assert exp.classes_in_this_experience == [0, 1, 2, 3, 4] and exp.task_label == i


def test_cifar100_coarse_labels_must_agree_with_table4(tmp_path):
    coarse_of = {c: c % 20 for c in range(100)}
    write_cifar100(str(tmp_path), n_train=4, n_test=2, coarse_of=coarse_of)
    with pytest.raises(ValueError, match="one shared superclass"):
        MixedCIFAR100(str(tmp_path), train_per_task=5, valid_per_task=5, test_per_task=5)


def test_paper_default_sizes(monkeypatch):
    monkeypatch.setattr(sources, "load_cifar10", lambda root, download: tiny_arrays(10, 5000, 1000, CIFAR10_NAMES))
    bm = MixedCIFAR10("unused", seed=4)
    assert len(bm.train_stream) == 10
    assert all((s["train"], s["valid"], s["test"]) == (4500, 500, 1000) for s in bm.task_sizes)
    x, y, t = experience_tensors(bm.valid_stream[0])
    assert x.shape == (500, 3, 1, 1) and y.bincount().tolist() == [250, 250]

    def cifar100(root, download):
        train, test = tiny_arrays(100, 500, 100, FINE_NAMES)
        train.coarse_targets = None
        return train, test

    monkeypatch.setattr(sources, "load_cifar100", cifar100)
    bm = MixedCIFAR100("unused", seed=4)
    assert len(bm.train_stream) == 40 and bm.group_names is None
    assert all((s["train"], s["valid"], s["test"]) == (1125, 125, 250) for s in bm.task_sizes)


def test_missing_files_messages(tmp_path):
    with pytest.raises(DatasetNotFoundError) as info:
        MixedCIFAR10(str(tmp_path))
    message = str(info.value)
    for name in ["data_batch_1", "data_batch_5", "test_batch", "batches.meta"]:
        assert os.path.join(str(tmp_path), "cifar-10-batches-py", name) in message
    assert "download=True" in message and "CIFAR10" in message
    with pytest.raises(DatasetNotFoundError) as info:
        MixedCIFAR100(str(tmp_path))
    for name in ("train", "test", "meta"):
        assert os.path.join(str(tmp_path), "cifar-100-python", name) in info.value.missing
