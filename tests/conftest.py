"""Shared test options.

``--shared-data DIR`` (or the environment variable ``SDR_SHARED_DATA``) points at a
folder laid out like the team's ``shared/data`` (``emnist/emnist_bymerge_test.npz``,
``weights/resnet_cifar10/*.th``). Default: ``../shared/data`` beside the checkout.
Tests that need it skip, with the reason, where it is absent (a user's machine).
"""
import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]


def pytest_addoption(parser):
    parser.addoption(
        "--shared-data",
        default=os.environ.get("SDR_SHARED_DATA", str(REPO_ROOT.parent / "shared" / "data")),
        help="folder with real EMNIST and CIFAR-10 ResNet weights (optional)",
    )


@pytest.fixture(scope="session")
def shared_data_dir(request) -> Path:
    """The shared data folder; skips the test where it does not exist."""
    path = Path(request.config.getoption("--shared-data"))
    if not path.is_dir():
        pytest.skip(f"shared data folder {path} not found (set --shared-data or SDR_SHARED_DATA)")
    return path
