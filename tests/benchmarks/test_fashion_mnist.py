"""MixedFashionMNIST on fake idx roots (Debian and torchvision layouts) and the real package."""

import gzip
import os
import struct

import numpy as np
import pytest
import torch

from avalanche_sdr.benchmarks import (
    FASHION_MNIST_GROUPS,
    DatasetNotFoundError,
    MixedFashionMNIST,
    experience_tensors,
)

DEBIAN_ROOT = "/usr/share/datasets/fashion-mnist"
FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")


def idx_bytes(array):
    array = np.ascontiguousarray(array, dtype=np.uint8)
    header = struct.pack(">HBB", 0, 8, array.ndim) + struct.pack(f">{array.ndim}I", *array.shape)
    return header + array.tobytes()


def write_fashion(directory, n_train, n_test, gz, seed=0):
    """Fake Fashion-MNIST: n_train / n_test 28x28 images a class; returns the arrays."""
    rng = np.random.default_rng(seed)
    os.makedirs(directory, exist_ok=True)
    arrays = {}
    for prefix, n in (("train", n_train), ("t10k", n_test)):
        labels = np.repeat(np.arange(10), n).astype(np.uint8)
        rng.shuffle(labels)
        images = rng.integers(0, 256, size=(len(labels), 28, 28), dtype=np.uint8)
        arrays[prefix] = (images, labels)
        for kind, array in (("images-idx3", images), ("labels-idx1", labels)):
            path = os.path.join(directory, f"{prefix}-{kind}-ubyte")
            if gz:
                with gzip.open(path + ".gz", "wb", compresslevel=1) as f:
                    f.write(idx_bytes(array))
            else:
                with open(path, "wb") as f:
                    f.write(idx_bytes(array))
    return arrays


def test_debian_layout_ten_tasks(tmp_path):
    arrays = write_fashion(str(tmp_path), n_train=12, n_test=4, gz=True)
    bm = MixedFashionMNIST(str(tmp_path), n_splits=2, train_per_task=8, valid_per_task=2, test_per_task=4)
    assert len(bm.train_stream) == len(bm.valid_stream) == len(bm.test_stream) == 10
    assert bm.groups == FASHION_MNIST_GROUPS
    assert bm.class_names[0] == ["T-shirt/top", "Trouser"]
    for sizes in bm.task_sizes:
        assert (sizes["train"], sizes["valid"], sizes["test"]) == (8, 2, 4)
    i = 6
    x, y, t = experience_tensors(bm.train_stream[i])
    images, labels = arrays["train"]
    idx = bm.sample_indices[i]["train"]
    torch.testing.assert_close(x, torch.from_numpy(images[idx]).float()[:, None] / 255)
    group = bm.groups[bm.stream_groups[i]]
    assert y.tolist() == [group.index(int(c)) for c in labels[idx]]


def test_torchvision_layout_fifty_tasks(tmp_path):
    write_fashion(str(tmp_path / "FashionMNIST" / "raw"), n_train=20, n_test=10, gz=False)
    bm = MixedFashionMNIST(
        str(tmp_path), n_splits=10, seed=3, train_per_task=2, valid_per_task=2, test_per_task=2
    )
    assert len(bm.train_stream) == 50
    assert sorted(zip(bm.stream_groups, bm.stream_splits)) == [(k, r) for k in range(5) for r in range(10)]
    assert len(set(bm.stream_groups[:3])) == 3


def test_defaults_need_the_full_dataset(tmp_path):
    write_fashion(str(tmp_path), n_train=12, n_test=4, gz=True)
    with pytest.raises(ValueError, match="has 12 training images; 2 splits x \\(2700 train \\+ 300 valid\\)"):
        MixedFashionMNIST(str(tmp_path))


def test_missing_files_message(tmp_path):
    with pytest.raises(DatasetNotFoundError) as info:
        MixedFashionMNIST(str(tmp_path / "nowhere"))
    message = str(info.value)
    for name in FILES:
        assert os.path.join(str(tmp_path / "nowhere"), name + ".gz") in message
    assert "apt-get install dataset-fashion-mnist" in message and "download=True" in message


@pytest.mark.skipif(
    not os.path.isfile(os.path.join(DEBIAN_ROOT, "train-images-idx3-ubyte.gz")),
    reason="Debian package dataset-fashion-mnist is not installed",
)
def test_real_debian_package_default_sizes():
    for n_splits, expected in ((2, (5400, 600, 1000)), (10, (1080, 120, 200))):
        bm = MixedFashionMNIST(n_splits=n_splits, seed=1)
        assert len(bm.train_stream) == 5 * n_splits
        for sizes in bm.task_sizes:
            assert (sizes["train"], sizes["valid"], sizes["test"]) == expected
            assert sizes["scaled"] is False
    x, y, t = experience_tensors(bm.test_stream[0])
    assert x.shape == (200, 1, 28, 28) and x.dtype == torch.float32
    assert y.bincount().tolist() == [100, 100]
