"""Shared fixtures of the baseline tests: the digits stream, one torch thread, a tiny E0."""
import pytest
import torch

from avalanche_sdr.benchmarks import MixedDigits


@pytest.fixture(scope="module")
def digits():
    """``MixedDigits(seed=0)``: 10 tasks of 8x8 digit images, labels local to each task."""
    return MixedDigits(seed=0)


@pytest.fixture(autouse=True, scope="module")
def _one_thread_here(one_thread):
    """Every test in this folder runs on one torch thread (tests/conftest.py's ``one_thread``)."""
    yield


def _tiny_backbone():
    from avalanche_sdr.models import small_cnn_backbone

    torch.manual_seed(0)
    return small_cnn_backbone(in_channels=1, widths=(8, 8))


@pytest.fixture
def tiny_backbone():
    """``make() -> nn.Module``: a fresh small CNN E0 (two convs of 8 channels, 1 input
    channel), the same weights on every call."""
    return _tiny_backbone
