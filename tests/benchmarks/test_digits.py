"""End-to-end test of MixedDigits on scikit-learn's bundled digits."""

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from avalanche_sdr.benchmarks import DIGITS_GROUPS, MixedDigits, experience_tensors, stream_tensors


@pytest.fixture(scope="module")
def digits():
    return MixedDigits(seed=0)


def test_ten_tasks_of_two_digits(digits):
    assert len(digits.train_stream) == len(digits.valid_stream) == len(digits.test_stream) == 10
    assert digits.groups == DIGITS_GROUPS
    assert digits.class_names == [["0", "1"], ["2", "3"], ["4", "5"], ["6", "7"], ["8", "9"]]
    assert sorted(zip(digits.stream_groups, digits.stream_splits)) == [
        (k, r) for k in range(5) for r in range(2)
    ]
    assert len(set(digits.stream_groups[:3])) == 3
    for i, exp in enumerate(digits.train_stream):
        assert exp.task_label == i and exp.classes_in_this_experience == [0, 1]
        assert exp.group == digits.stream_groups[i]


def test_images_and_sizes(digits):
    x, y, t = experience_tensors(digits.train_stream[0])
    assert x.shape[1:] == (1, 8, 8) and x.dtype == torch.float32
    assert float(x.min()) >= 0.0 and float(x.max()) == 1.0
    assert set(y.tolist()) == {0, 1} and torch.all(t == 0)
    totals = {part: sum(s[part] for s in digits.task_sizes) for part in ("train", "valid", "test")}
    assert sum(totals.values()) == 1797  # every image used exactly once
    shares = {part: n / 1797 for part, n in totals.items()}
    assert shares["train"] == pytest.approx(0.7, abs=0.02)
    assert shares["valid"] == pytest.approx(0.1, abs=0.02)
    assert shares["test"] == pytest.approx(0.2, abs=0.02)
    for sizes in digits.task_sizes:
        assert 120 <= sizes["train"] <= 130 and 16 <= sizes["valid"] <= 20 and 33 <= sizes["test"] <= 38
    batch = next(iter(DataLoader(digits.test_stream[3].dataset, batch_size=4)))
    assert [b.dtype for b in batch] == [torch.float32, torch.int64, torch.int64]


def test_seeded(digits):
    again = MixedDigits(seed=0)
    other = MixedDigits(seed=1)
    assert again.stream_groups == digits.stream_groups
    for a, b in zip(again.sample_indices, digits.sample_indices):
        np.testing.assert_array_equal(a["train"], b["train"])
        np.testing.assert_array_equal(a["test"], b["test"])
    assert list(zip(other.stream_groups, other.stream_splits)) != list(
        zip(digits.stream_groups, digits.stream_splits)
    )


def test_a_whole_stream_as_tensors_is_its_experiences_in_order(digits):
    x, y, t = stream_tensors(digits.test_stream)
    parts = [experience_tensors(exp) for exp in digits.test_stream]
    assert torch.equal(x, torch.cat([p[0] for p in parts])) and torch.equal(y, torch.cat([p[1] for p in parts]))
    assert torch.equal(t, torch.cat([torch.full_like(p[1], i) for i, p in enumerate(parts)]))
    assert x.dtype == torch.float32 and y.dtype == torch.int64 and x.shape[1:] == (1, 8, 8)
    with pytest.raises(ValueError, match="no experience"):
        stream_tensors(digits.test_stream[:0])
