"""Streams over torchvision-style datasets with train/eval transform groups.

The generator's two data paths: in memory (the fast path, default for in-memory data
and for datasets without transforms) and lazy (the experiences index the source
dataset). ``train_transform`` / ``eval_transform`` become Avalanche's ``"train"`` /
``"eval"`` transform groups; SDR's detection reads tasks through the eval group.
"""

import gzip
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from torch import nn
from torch.utils.data import DataLoader, Dataset
from torchvision import transforms as T

from avalanche_sdr.benchmarks import (
    FASHION_MNIST_GROUPS,
    ImageArrayDataset,
    MixedDigits,
    MixedFashionMNIST,
    dataset_tensors,
    experience_tensors,
    mixed_similarity_benchmark,
)
from avalanche_sdr.training.data import read_task_data

GROUPS = [[0, 1], [2, 3]]
DEBIAN_FASHION_MNIST = Path("/usr/share/datasets/fashion-mnist")


class PILDataset(Dataset):
    """torchvision-style: ``targets``, ``classes``, ``dataset[i] = (PIL image, label)``,
    optional ``transform``; 10x10 grey images, 20 a class."""

    def __init__(self, seed, transform=None):
        rng = np.random.default_rng(seed)
        self.targets = np.repeat(np.arange(4), 20).tolist()
        self.images = rng.integers(0, 256, size=(len(self.targets), 10, 10), dtype=np.uint8)
        self.classes = ["a", "b", "c", "d"]
        self.transform = transform

    def __len__(self):
        return len(self.targets)

    def __getitem__(self, i):
        image = Image.fromarray(self.images[i])
        if self.transform is not None:
            image = self.transform(image)
        return image, self.targets[i]

    def expected(self, indices):
        """The images at ``indices`` as ToTensor makes them: float32 [n, 1, 10, 10]."""
        return torch.from_numpy(self.images[np.asarray(indices)]).float().unsqueeze(1) / 255


def augmentation():
    # Random shifts of up to 3 pixels: two reads of a task differ almost surely.
    return T.Compose([T.RandomCrop(10, padding=3), T.ToTensor()])


@pytest.fixture(scope="module")
def lazy():
    train, test = PILDataset(0), PILDataset(1)
    torch.manual_seed(0)
    bm = mixed_similarity_benchmark(
        train, test, GROUPS, 2, n_warm_start=2, train_transform=augmentation(), eval_transform=T.ToTensor()
    )
    return bm, train, test


def test_lazy_train_reads_differ_eval_reads_are_the_images(lazy):
    bm, train, _ = lazy
    exp = bm.train_stream[1]
    first = dataset_tensors(exp.dataset.train())[0]
    second = dataset_tensors(exp.dataset.train())[0]
    assert first.shape == second.shape == (len(exp.dataset), 1, 10, 10)
    assert not torch.equal(first, second)
    expected = train.expected(bm.sample_indices[1]["train"])
    for _ in range(2):
        torch.testing.assert_close(dataset_tensors(exp.dataset.eval())[0], expected, rtol=0, atol=0)


def test_read_task_data_uses_the_eval_group(lazy):
    bm, train, _ = lazy
    exp = bm.train_stream[0]
    assert exp.dataset._flat_data._transform_groups.current_group == "train"
    x, y = read_task_data(exp)
    torch.testing.assert_close(x, train.expected(bm.sample_indices[0]["train"]), rtol=0, atol=0)
    k = bm.stream_groups[0]
    assert y.tolist() == [GROUPS[k].index(train.targets[i]) for i in bm.sample_indices[0]["train"]]
    assert torch.equal(read_task_data(exp)[0], x)
    # The experience's dataset keeps its group: training still augments.
    assert not torch.equal(dataset_tensors(exp.dataset)[0], x)


def test_valid_and_test_streams_start_in_the_eval_group(lazy):
    bm, train, test = lazy
    for stream, part, source in ((bm.valid_stream, "valid", train), (bm.test_stream, "test", test)):
        x, y, t = experience_tensors(stream[2])
        torch.testing.assert_close(x, source.expected(bm.sample_indices[2][part]), rtol=0, atol=0)
        assert torch.all(t == 2)


@pytest.mark.filterwarnings("ignore:No loggers specified")
def test_strategy_trains_with_train_group_and_evaluates_with_eval_group():
    from avalanche.core import SupervisedPlugin
    from avalanche.training import Naive

    class Record(SupervisedPlugin):
        def __init__(self):
            super().__init__()
            self.train, self.eval = [], []

        def before_forward(self, strategy, **kwargs):
            self.train.append(strategy.mb_x.clone())

        def before_eval_forward(self, strategy, **kwargs):
            self.eval.append(strategy.mb_x.clone())

    data = PILDataset(0)
    marked = T.Compose([T.ToTensor(), T.Lambda(lambda x: x + 2.0)])  # train images in [2, 3]
    bm = mixed_similarity_benchmark(
        data, data, GROUPS, 2, n_warm_start=2, valid_fraction=0.0, train_transform=marked
    )
    record = Record()
    model = nn.Sequential(nn.Flatten(), nn.Linear(100, 2))
    strategy = Naive(
        model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.01), train_mb_size=16,
        train_epochs=1, eval_mb_size=16, plugins=[record], evaluator=None,
    )
    strategy.train(bm.train_stream[0])
    strategy.eval([bm.test_stream[0]])
    assert record.train and record.eval
    assert all(float(x.min()) >= 2.0 for x in record.train)
    assert all(float(x.max()) <= 1.0 for x in record.eval)


def test_dataset_own_transform_and_normalising_eval_transform():
    # A dataset with a transform of its own is read lazily, through that transform,
    # and the eval transform may leave [0, 1] (normalisation).
    train = PILDataset(0, transform=T.ToTensor())
    bm = mixed_similarity_benchmark(
        train, PILDataset(1, transform=T.ToTensor()), GROUPS, 2, n_warm_start=2,
        eval_transform=T.Normalize([0.5], [0.5]),
    )
    x, _ = read_task_data(bm.train_stream[0])
    torch.testing.assert_close(x, train.expected(bm.sample_indices[0]["train"]) * 2 - 1)
    # Without a train transform, training reads the images as they are.
    torch.testing.assert_close(
        experience_tensors(bm.train_stream[0])[0], train.expected(bm.sample_indices[0]["train"])
    )


def test_in_memory_path_with_tensor_augmentation_keeps_the_data():
    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(4), 20)
    data = ImageArrayDataset(rng.integers(0, 256, size=(80, 1, 10, 10), dtype=np.uint8), labels)
    plain = mixed_similarity_benchmark(data, data, GROUPS, 2, n_warm_start=2)
    torch.manual_seed(0)
    augmented = mixed_similarity_benchmark(
        data, data, GROUPS, 2, n_warm_start=2, train_transform=T.RandomCrop(10, padding=3)
    )
    for i in range(4):
        for part in ("train", "valid", "test"):
            np.testing.assert_array_equal(augmented.sample_indices[i][part], plain.sample_indices[i][part])
        x_plain = read_task_data(plain.train_stream[i])[0]
        assert torch.equal(read_task_data(augmented.train_stream[i])[0], x_plain)
        assert torch.equal(experience_tensors(augmented.test_stream[i])[0], experience_tensors(plain.test_stream[i])[0])
    exp = augmented.train_stream[0]
    assert not torch.equal(dataset_tensors(exp.dataset.train())[0], dataset_tensors(exp.dataset.train())[0])
    # Training batches are float32 images of the same shape, task labels included.
    x, y, t = next(iter(DataLoader(exp.dataset, batch_size=8, collate_fn=exp.dataset.collate_fn)))
    assert x.dtype == torch.float32 and x.shape == (8, 1, 10, 10) and torch.all(t == 0)


def test_fast_path_unchanged_without_transforms():
    # No transforms: in-memory datasets without transform groups, as before.
    bm = MixedDigits(seed=0)
    exp = bm.train_stream[0]
    assert exp.dataset._flat_data._transform_groups.transform_groups["train"] is None
    augmented = MixedDigits(seed=0, train_transform=T.RandomCrop(8, padding=1))
    assert torch.equal(read_task_data(augmented.train_stream[0])[0], read_task_data(exp)[0])


def test_in_memory_false_reads_lazily_with_the_same_data():
    train, test = PILDataset(0), PILDataset(1)
    memory = mixed_similarity_benchmark(train, test, GROUPS, 2, n_warm_start=2)
    lazy = mixed_similarity_benchmark(train, test, GROUPS, 2, n_warm_start=2, in_memory=False)
    for i in range(4):
        for stream in ("train_stream", "valid_stream", "test_stream"):
            a = experience_tensors(getattr(memory, stream)[i])
            b = experience_tensors(getattr(lazy, stream)[i])
            assert all(torch.equal(u, v) for u, v in zip(a, b))


@pytest.fixture(scope="module")
def torchvision_fashion_root(tmp_path_factory):
    """The Debian package's gzipped idx files unpacked into a torchvision root
    (``root/FashionMNIST/raw``): torchvision reads only uncompressed files there."""
    if not all((DEBIAN_FASHION_MNIST / f"{s}.gz").is_file() for s in (
        "train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"
    )):
        pytest.skip(f"Fashion-MNIST idx files not found in {DEBIAN_FASHION_MNIST} (apt-get install dataset-fashion-mnist)")
    root = tmp_path_factory.mktemp("tv")
    raw = root / "FashionMNIST" / "raw"
    raw.mkdir(parents=True)
    for path in DEBIAN_FASHION_MNIST.glob("*-ubyte.gz"):
        with gzip.open(path, "rb") as src, open(raw / path.name[:-3], "wb") as dst:
            shutil.copyfileobj(src, dst)
    return root


def test_torchvision_fashion_mnist_matches_the_preset(torchvision_fashion_root):
    from torchvision.datasets import FashionMNIST

    sizes = dict(train_per_task=20, valid_per_task=4, test_per_task=10)
    preset = MixedFashionMNIST(str(DEBIAN_FASHION_MNIST), seed=3, **sizes)
    train = FashionMNIST(str(torchvision_fashion_root), train=True)
    test = FashionMNIST(str(torchvision_fashion_root), train=False)
    # No transforms: the in-memory path straight from torchvision's uint8 `data`.
    memory = mixed_similarity_benchmark(train, test, FASHION_MNIST_GROUPS, 2, seed=3, **sizes)
    torch.manual_seed(0)
    lazy = mixed_similarity_benchmark(
        train, test, FASHION_MNIST_GROUPS, 2, seed=3, **sizes,
        train_transform=T.Compose([T.RandomCrop(28, padding=4), T.ToTensor()]), eval_transform=T.ToTensor(),
    )
    assert memory.class_names == preset.class_names
    for i in (0, 5):
        expected = experience_tensors(preset.train_stream[i])
        assert all(torch.equal(a, b) for a, b in zip(experience_tensors(memory.train_stream[i]), expected))
        x, y = read_task_data(lazy.train_stream[i])
        assert torch.equal(x, expected[0]) and torch.equal(y, expected[1])
        dataset = lazy.train_stream[i].dataset
        assert not torch.equal(dataset_tensors(dataset.train())[0], dataset_tensors(dataset.train())[0])
        assert torch.equal(experience_tensors(lazy.test_stream[i])[0], experience_tensors(preset.test_stream[i])[0])
