"""Tests of the file readers and the missing-files error."""

import gzip
import struct

import numpy as np
import pytest

from avalanche_sdr.benchmarks import (
    CorruptDatasetError,
    DatasetNotFoundError,
    load_cifar10,
    load_emnist,
    load_fashion_mnist,
)
from avalanche_sdr.benchmarks.sources import read_idx


def idx_bytes(array):
    array = np.ascontiguousarray(array, dtype=np.uint8)
    header = struct.pack(">HBB", 0, 8, array.ndim) + struct.pack(f">{array.ndim}I", *array.shape)
    return header + array.tobytes()


def test_read_idx_plain_and_gzipped(tmp_path):
    images = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    (tmp_path / "a-idx3-ubyte").write_bytes(idx_bytes(images))
    with gzip.open(tmp_path / "b-idx3-ubyte.gz", "wb") as f:
        f.write(idx_bytes(images))
    np.testing.assert_array_equal(read_idx(str(tmp_path / "a-idx3-ubyte")), images)
    np.testing.assert_array_equal(read_idx(str(tmp_path / "b-idx3-ubyte.gz")), images)


def test_read_idx_rejects_bad_files(tmp_path):
    (tmp_path / "bad").write_bytes(b"\x01\x02\x08\x01" + struct.pack(">I", 3) + b"abc")
    with pytest.raises(ValueError, match="magic"):
        read_idx(str(tmp_path / "bad"))
    (tmp_path / "short").write_bytes(idx_bytes(np.zeros(5, dtype=np.uint8))[:-1])
    with pytest.raises(ValueError, match="header announces 5 bytes"):
        read_idx(str(tmp_path / "short"))


def test_missing_files_error_is_a_file_not_found_error(tmp_path):
    with pytest.raises(FileNotFoundError) as info:
        load_cifar10(str(tmp_path))
    err = info.value
    assert isinstance(err, DatasetNotFoundError)
    assert err.root == str(tmp_path)
    assert str(tmp_path / "cifar-10-batches-py" / "data_batch_1") in err.missing
    assert len(err.missing) == 7 and "download=True" in str(err)


def test_labels_out_of_range_are_rejected(tmp_path):
    (tmp_path / "train-images-idx3-ubyte").write_bytes(idx_bytes(np.zeros((2, 28, 28))))
    (tmp_path / "train-labels-idx1-ubyte").write_bytes(idx_bytes(np.array([0, 10])))
    (tmp_path / "t10k-images-idx3-ubyte").write_bytes(idx_bytes(np.zeros((1, 28, 28))))
    (tmp_path / "t10k-labels-idx1-ubyte").write_bytes(idx_bytes(np.array([0])))
    with pytest.raises(ValueError, match=r"labels span \[0, 10\]; expected 0..9"):
        load_fashion_mnist(str(tmp_path))


def test_emnist_split_must_be_balanced_or_bymerge(tmp_path):
    with pytest.raises(ValueError, match="'balanced' or 'bymerge'"):
        load_emnist(str(tmp_path), split="letters")


def _write_fashion_files(directory, n_train=3):
    for prefix, n in (("train", n_train), ("t10k", 2)):
        with gzip.open(directory / f"{prefix}-images-idx3-ubyte.gz", "wb") as f:
            f.write(idx_bytes(np.zeros((n, 28, 28))))
        with gzip.open(directory / f"{prefix}-labels-idx1-ubyte.gz", "wb") as f:
            f.write(idx_bytes(np.arange(n) % 10))


@pytest.mark.parametrize("cut", [0.5, 0.95])
def test_truncated_gzip_idx_file_is_named(tmp_path, cut):
    _write_fashion_files(tmp_path)
    train, _ = load_fashion_mnist(str(tmp_path))
    assert len(train) == 3
    path = tmp_path / "train-images-idx3-ubyte.gz"
    raw = path.read_bytes()
    path.write_bytes(raw[: int(len(raw) * cut)])
    with pytest.raises(CorruptDatasetError, match="unreadable gzip stream") as info:
        load_fashion_mnist(str(tmp_path))
    assert info.value.path == str(path)
    assert str(info.value).startswith(str(path)) and "fetch it again" in str(info.value)


def test_truncated_plain_idx_file_and_header_are_named(tmp_path):
    path = tmp_path / "x-idx3-ubyte"
    path.write_bytes(idx_bytes(np.zeros((4, 28, 28)))[:100])
    with pytest.raises(CorruptDatasetError, match="header announces 3136 bytes"):
        read_idx(str(path))
    path.write_bytes(idx_bytes(np.zeros((4, 28, 28)))[:9])
    with pytest.raises(CorruptDatasetError, match="truncated idx header"):
        read_idx(str(path))


def test_truncated_cifar_pickle_is_named(tmp_path):
    import pickle

    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    batch = {"data": np.zeros((2, 3072), dtype=np.uint8), "labels": [0, 1]}
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        (folder / name).write_bytes(pickle.dumps(batch))
    (folder / "batches.meta").write_bytes(pickle.dumps({"label_names": [str(i) for i in range(10)]}))
    assert len(load_cifar10(str(tmp_path))[0]) == 10
    path = folder / "data_batch_3"
    path.write_bytes(path.read_bytes()[:200])
    with pytest.raises(CorruptDatasetError, match="unreadable pickle") as info:
        load_cifar10(str(tmp_path))
    assert info.value.path == str(path)
