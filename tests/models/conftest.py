"""Fixtures for the model tests."""
import pytest
import torch


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Tiny tensors run faster on one intra-op thread, and a busy second core
    (another process) then cannot stall every op; restored afterwards."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)
