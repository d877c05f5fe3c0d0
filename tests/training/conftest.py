"""Fixtures for the training tests: a tiny synthetic mixed stream, scikit-learn's digits."""
import pytest
import torch
from torch.utils.data import TensorDataset

from avalanche_sdr.benchmarks import ImageArrayDataset, mixed_similarity_benchmark
from avalanche_sdr.detection.base import Detector
from avalanche_sdr.detection.decision import DetectionRecord

GROUPS = [[0, 1], [2, 3], [4, 5], [6, 7]]


def _prototype_dataset(n_per_class: int, seed: int) -> ImageArrayDataset:
    """8 classes; class c = prototype_c (fixed across calls) + fresh noise."""
    prototypes = torch.rand(8, 1, 8, 8, generator=torch.Generator().manual_seed(123)) > 0.5
    g = torch.Generator().manual_seed(seed)
    images, labels = [], []
    for c in range(8):
        base = prototypes[c].float() * 0.8 + 0.1
        noisy = (base + 0.1 * torch.randn(n_per_class, 1, 8, 8, generator=g)).clamp(0, 1)
        images.append((noisy * 255).to(torch.uint8))
        labels += [c] * n_per_class
    return ImageArrayDataset(torch.cat(images), torch.tensor(labels))


@pytest.fixture(scope="session")
def prototype_stream():
    """8 tasks: 4 groups of 2 classes x 2 splits, seed 0, 3 warm-start tasks."""
    return mixed_similarity_benchmark(
        _prototype_dataset(60, seed=1), _prototype_dataset(20, seed=2), GROUPS, n_splits=2, seed=0
    )




def _tensor_dataset(x, y) -> TensorDataset:
    dataset = TensorDataset(x, y)
    dataset.targets = y.tolist()  # what Avalanche's benchmark generators read the classes from
    return dataset


@pytest.fixture(scope="session")
def digits_split():
    """scikit-learn's digits as ``(train, test)`` ``TensorDataset`` s with ``targets``:
    1,200 / 597 images ``[N, 1, 8, 8]`` float32 in [0, 1], int64 labels 0-9, split by a
    permutation of seed 0."""
    from sklearn.datasets import load_digits

    data = load_digits()
    x = torch.tensor(data.images, dtype=torch.float32).unsqueeze(1) / 16.0
    y = torch.tensor(data.target, dtype=torch.long)
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(0))
    train, test = order[:1200], order[1200:]
    return _tensor_dataset(x[train], y[train]), _tensor_dataset(x[test], y[test])


class GroundTruthDetector(Detector):
    """A detector that knows the stream's groups: reuses the entry of the first earlier
    task of the same group; ``wrong`` maps a task to the entry it reuses instead (a wrong
    reuse on purpose); ``permutation`` a task to the class permutation it reports."""

    rule = "ground_truth"
    needs_generators = False

    def __init__(self, groups, wrong=None, permutation=None):
        self.groups, self.wrong, self.permutation = list(groups), dict(wrong or {}), dict(permutation or {})

    def detect(self, model, data):
        task = data.task
        reused = self.wrong.get(task)
        if reused is None:
            creators = {self.groups[t]: e for e, t in sorted(model.entry_creator.items(), reverse=True)}
            reused = creators.get(self.groups[task])
        fields = {"class_permutation": self.permutation[task]} if task in self.permutation else {}
        return DetectionRecord.decided(model, task=task, entries=model.entries, reused=reused, rule=self.rule,
                                       **fields)


@pytest.fixture(scope="session")
def ground_truth():
    """:class:`GroundTruthDetector`, the class (build it with the stream's groups)."""
    return GroundTruthDetector
