"""``original_class_ids``: streams labelled with the dataset's original class ids
(class-incremental use) hold the same images, tasks and splits as the default
local-label streams; the default streams are unchanged."""

import hashlib
import inspect

import numpy as np
import pytest
import torch
import torchvision.transforms as T

from avalanche_sdr.benchmarks import (
    CIFAR100_TABLE4_GROUPS,
    MixedCIFAR10,
    MixedCIFAR100,
    MixedDigits,
    MixedEMNIST,
    MixedFashionMNIST,
    experience_tensors,
    mixed_similarity_benchmark,
    sources,
)
from avalanche_sdr.benchmarks.image_arrays import ImageArrayDataset
from avalanche_sdr.benchmarks.mixed_stream import _PRESET_STREAM_OPTIONS

STREAMS = ("train_stream", "valid_stream", "test_stream")
PRESETS = (MixedDigits, MixedFashionMNIST, MixedEMNIST, MixedCIFAR10, MixedCIFAR100)

#: sha256 of every stream of ``MixedDigits(seed=0)`` (:func:`stream_digest`), as built
#: before ``original_class_ids`` existed.
DIGITS_SEED0_DIGEST = "1092b787d9d9c9328136976f16203d986ab36dd28c0279e33b0b00ec6491cfcc"


def stream_digest(bm) -> str:
    """sha256 over every experience of every stream: the images, labels and task labels
    (bytes and dtypes) and the experience's class lists."""
    digest = hashlib.sha256()
    for name in STREAMS:
        for exp in getattr(bm, name):
            for tensor in experience_tensors(exp):
                digest.update(str(tensor.dtype).encode() + tensor.numpy().tobytes())
            digest.update(repr((exp.classes_in_this_experience, exp.previous_classes, exp.classes_seen_so_far,
                                exp.future_classes, exp.task_labels)).encode())
    return digest.hexdigest()


def assert_original_ids_of(local, original):
    """``original`` is ``local`` with local label j of experience i stored as
    ``task_class_ids(i)[j]``: same images, task labels, sizes and sample indices."""
    assert local.original_class_ids is False and original.original_class_ids is True
    assert original.groups == local.groups and original.stream_groups == local.stream_groups
    assert original.stream_splits == local.stream_splits and original.task_sizes == local.task_sizes
    assert original.n_classes_total == local.n_classes_total == max(map(max, local.groups)) + 1
    for a, b in zip(local.sample_indices, original.sample_indices):
        for part in ("train", "valid", "test"):
            np.testing.assert_array_equal(a[part], b[part])
    for name in STREAMS:
        for i, (exp_local, exp_original) in enumerate(zip(getattr(local, name), getattr(original, name))):
            ids = original.task_class_ids(i)
            assert ids == local.task_class_ids(i) == original.groups[original.stream_groups[i]]
            x, y, t = experience_tensors(exp_local)
            x_o, y_o, t_o = experience_tensors(exp_original)
            assert torch.equal(x, x_o) and torch.equal(t, t_o)
            assert y_o.dtype == torch.int64 and torch.equal(y_o, torch.tensor(ids)[y])
            assert exp_original.task_labels == exp_local.task_labels == [i]
            assert exp_original.classes_in_this_experience == sorted(ids[j] for j in exp_local.classes_in_this_experience)


def test_default_digits_streams_are_unchanged():
    default = MixedDigits(seed=0)
    assert stream_digest(default) == DIGITS_SEED0_DIGEST
    assert stream_digest(MixedDigits(seed=0, original_class_ids=False)) == DIGITS_SEED0_DIGEST


def test_digits_original_ids():
    original = MixedDigits(seed=0, original_class_ids=True)
    assert_original_ids_of(MixedDigits(seed=0), original)
    assert original.n_classes_total == 10
    assert original.train_stream[-1].classes_seen_so_far == list(range(10))
    assert stream_digest(original) != DIGITS_SEED0_DIGEST


def tiny_dataset(labels, seed=0):
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256, size=(len(labels), 1, 3, 3), dtype=np.uint8)
    return ImageArrayDataset(images, np.asarray(labels))


@pytest.mark.parametrize("in_memory", [True, False], ids=["in_memory", "lazy"])
def test_generic_groups_of_unequal_size_and_sparse_ids(in_memory):
    """Non-contiguous ids (7 is the largest; 2, 4 and 5 unused), groups of 3 and 2
    classes, not in sorted order; both data paths."""
    train = tiny_dataset(np.repeat(np.arange(8), 12))
    test = tiny_dataset(np.repeat(np.arange(8), 4), seed=1)
    groups = [[7, 0, 3], [1, 6]]
    options = dict(seed=3, n_warm_start=2, in_memory=in_memory,
                   eval_transform=None if in_memory else T.Lambda(lambda x: x))
    local = mixed_similarity_benchmark(train, test, groups, 2, **options)
    original = mixed_similarity_benchmark(train, test, groups, 2, original_class_ids=True, **options)
    assert_original_ids_of(local, original)
    assert original.n_classes_total == 8
    with pytest.raises(IndexError, match="outside 0..3"):
        original.task_class_ids(4)


def _tiny_loader(n_classes, classes=None, coarse=False):
    """A preset loader's replacement: 50 train and 10 test 3x3 images a class."""
    def load(*args, **kwargs):
        out = []
        for n, seed in ((50, 0), (10, 1)):
            data = tiny_dataset(np.repeat(np.arange(n_classes), n), seed)
            data.classes = classes
            if coarse:
                data.coarse_targets = None
            out.append(data)
        return tuple(out)
    return load


CIFAR10_NAMES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
CIFAR100_NAMES = sorted(n.replace(" ", "_") for group in CIFAR100_TABLE4_GROUPS for n in group)


@pytest.mark.parametrize("preset, loader", [
    (MixedFashionMNIST, ("load_fashion_mnist", _tiny_loader(10))),
    (MixedEMNIST, ("load_emnist", _tiny_loader(47, classes=sources.EMNIST_CLASSES))),
    (MixedCIFAR10, ("load_cifar10", _tiny_loader(10, classes=CIFAR10_NAMES))),
    (MixedCIFAR100, ("load_cifar100", _tiny_loader(100, classes=CIFAR100_NAMES, coarse=True))),
], ids=["fashion", "emnist", "cifar10", "cifar100"])
def test_file_presets_forward_original_ids(monkeypatch, preset, loader):
    monkeypatch.setattr(sources, *loader)
    # Multiples of every group size (2 and 5 classes).
    options = dict(n_splits=2, seed=1, train_per_task=40, valid_per_task=10, test_per_task=10)
    local = preset("unused", **options)
    original = preset("unused", original_class_ids=True, **options)
    assert_original_ids_of(local, original)


def test_every_preset_takes_and_documents_the_option():
    assert "original_class_ids" in _PRESET_STREAM_OPTIONS
    for preset in PRESETS:
        parameter = inspect.signature(preset).parameters["original_class_ids"]
        assert parameter.default is False and parameter.kind is inspect.Parameter.KEYWORD_ONLY
        assert ":param original_class_ids:" in preset.__doc__
    assert ":param original_class_ids:" in mixed_similarity_benchmark.__doc__
