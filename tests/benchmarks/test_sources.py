"""Tests of the file readers and the missing-files error."""

import gzip
import struct

import numpy as np
import pytest

from avalanche_sdr.benchmarks import DatasetNotFoundError, load_cifar10, load_emnist, load_fashion_mnist
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
