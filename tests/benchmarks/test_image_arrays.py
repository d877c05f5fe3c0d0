"""Tests of image conversion: ``.data`` fast path vs ``__getitem__`` of any image type."""

import numpy as np
import pytest
import torch
from PIL import Image

from avalanche_sdr.benchmarks import ImageArrayDataset, gather_images, mixed_similarity_benchmark


class FakeVisionDataset:
    """torchvision-style: ``targets`` and ``__getitem__``; optional ``data``."""

    def __init__(self, images, targets, kind, with_data=False, transform=None):
        self.images = images  # uint8 [N, H, W, 3]
        self.targets = list(targets)
        self.kind = kind
        self.transform = transform
        if with_data:
            self.data = images

    def __len__(self):
        return len(self.targets)

    def __getitem__(self, i):
        img = self.images[i]
        if self.kind == "pil":
            img = Image.fromarray(img)
        elif self.kind == "numpy_float":
            img = img.astype(np.float64) / 255.0
        elif self.kind == "tensor":
            img = torch.from_numpy(img).permute(2, 0, 1).float() / 255.0
        if self.transform is not None:
            img = self.transform(img)
        return img, self.targets[i]


@pytest.fixture(scope="module")
def rgb():
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, size=(12, 5, 6, 3), dtype=np.uint8)
    labels = np.repeat(np.arange(3), 4)
    expected = torch.from_numpy(images).permute(0, 3, 1, 2).float() / 255.0
    return images, labels, expected


@pytest.mark.parametrize("kind", ["pil", "numpy", "numpy_float", "tensor"])
def test_getitem_path_reads_every_image_type(rgb, kind):
    images, labels, expected = rgb
    stacked, max_value = gather_images(FakeVisionDataset(images, labels, kind), [3, 0, 7])
    assert stacked.shape == (3, 3, 5, 6)
    torch.testing.assert_close(stacked.float() / max_value, expected[[3, 0, 7]])


def test_data_fast_path_matches_getitem_and_respects_transforms(rgb):
    images, labels, expected = rgb
    fast, scale = gather_images(FakeVisionDataset(images, labels, "pil", with_data=True), [1, 2])
    assert fast.dtype == torch.uint8 and scale == 255.0
    torch.testing.assert_close(fast.float() / scale, expected[[1, 2]])
    # With a transform the images must come from __getitem__ (here: inverted).
    inverted = FakeVisionDataset(images, labels, "numpy", with_data=True, transform=lambda a: 255 - a)
    slow, scale = gather_images(inverted, [1])
    torch.testing.assert_close(slow.float() / scale, 1.0 - expected[[1]])


def test_grey_images_get_a_channel_axis():
    images = np.arange(2 * 3 * 3, dtype=np.uint8).reshape(2, 3, 3)
    ds = FakeVisionDataset(images, [0, 1], "numpy")
    stacked, _ = gather_images(ds, [0, 1])
    assert stacked.shape == (2, 1, 3, 3)


def test_normalised_images_are_rejected(rgb):
    images, labels, _ = rgb
    ds = FakeVisionDataset(images, labels, "tensor", transform=lambda t: (t - 0.5) / 0.25)
    with pytest.raises(ValueError, match=r"must lie in \[0, 1\]"):
        gather_images(ds, [0, 1])


def test_generic_generator_on_a_pil_dataset(rgb):
    images, labels, expected = rgb
    ds = FakeVisionDataset(images, labels, "pil")
    bm = mixed_similarity_benchmark(ds, ds, [[2, 0], [1]], 2, n_warm_start=2, valid_fraction=0.0)
    i = bm.stream_groups.index(0)
    x, y = bm.train_stream[i].dataset[0][:2]
    idx = bm.sample_indices[i]["train"][0]
    torch.testing.assert_close(x, expected[idx])
    assert y == [2, 0].index(int(labels[idx]))


def test_image_array_dataset_items():
    ds = ImageArrayDataset(np.full((2, 1, 2, 2), 16, dtype=np.uint8), [3, 4], max_value=16)
    x, y = ds[1]
    assert x.dtype == torch.float32 and torch.all(x == 1.0) and y == 4
    assert ds.images().shape == (2, 1, 2, 2)
    with pytest.raises(ValueError, match=r"\[N, C, H, W\]"):
        ImageArrayDataset(np.zeros((2, 2, 2), dtype=np.uint8), [0, 1])
    with pytest.raises(ValueError, match="differ in length"):
        ImageArrayDataset(np.zeros((2, 1, 2, 2), dtype=np.uint8), [0])


@pytest.mark.parametrize("images, max_value, match", [
    (np.full((2, 1, 2, 2), 0.5, dtype=np.float32), 255.0, r"lie in \[0.5, 0.5\] but max_value=255 would map them to "
                                                          r"\[0, 0.003922\]: pass max_value=1.0"),
    (np.full((2, 1, 2, 2), 0.5), 16, r"pass max_value=1.0"),  # float64 too
    (np.full((2, 1, 2, 2), 200.0, dtype=np.float32), 1.0, r"must lie in \[0, max_value=1\].*\[200, 200\]"),
    (np.full((2, 1, 2, 2), 200, dtype=np.uint8), 1.0, r"must lie in \[0, max_value=1\]"),
    (np.linspace(-2, 2, 8, dtype=np.float32).reshape(2, 1, 2, 2), 1.0, r"must lie in .*\[-2, 2\].*Normalize"),
    (np.full((2, 1, 2, 2), np.nan, dtype=np.float32), 1.0, r"NaN or Inf"),
    (np.zeros((2, 1, 2, 2), dtype=np.uint8), 0, r"max_value must be positive"),
    (np.zeros((2, 1, 2, 2), dtype=np.uint8), float("nan"), r"max_value must be positive"),
])
def test_image_array_dataset_refuses_images_that_would_not_map_to_the_unit_range(images, max_value, match):
    with pytest.raises(ValueError, match=match):
        ImageArrayDataset(images, [0, 1], max_value=max_value)


@pytest.mark.parametrize("images, max_value", [
    (np.zeros((2, 1, 2, 2), dtype=np.uint8), 255.0),  # black images, 8-bit
    (np.zeros((2, 1, 2, 2), dtype=np.float32), 255.0),  # black images, float: nothing to tell apart
    (np.full((2, 1, 2, 2), 255, dtype=np.uint8), 255.0),
    (np.full((2, 1, 2, 2), 16.0), 16),  # scikit-learn's digits
    (np.full((2, 1, 2, 2), 1.0, dtype=np.float32), 1.0),
    (np.zeros((0, 1, 2, 2), dtype=np.float32), 255.0),  # no image
])
def test_image_array_dataset_takes_images_that_map_to_the_unit_range(images, max_value):
    ds = ImageArrayDataset(images, np.zeros(len(images), dtype=np.int64), max_value=max_value)
    assert len(ds) == len(images) and (len(ds) == 0 or float(ds.images().max()) <= 1.0)
