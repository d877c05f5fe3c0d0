"""Shared test options.

``--shared-data DIR`` (or the environment variable ``SDR_SHARED_DATA``) points at an
optional data folder holding ``emnist/emnist_bymerge_test.npz`` and
``weights/resnet_cifar10/*.th`` (docs/data.rst). Default: ``../shared/data`` beside
the checkout.
Tests that need it skip, with the reason, where it is absent (a user's machine).
"""
import os
import struct
from pathlib import Path

# One thread for each math library of the test process (set before numpy and torch load them;
# a value the caller exported wins). A second OpenMP/OpenBLAS thread spin-waits at every
# barrier: on a loaded 2-core machine that spinning competes with the other processes, and the
# fast suite took 745 s at load 5 against 135 s idle (docs/install.rst, "Running the tests").
for _variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")

import numpy as np  # noqa: E402  (after the thread variables above, which it reads on import)
import pytest
import torch

REPO_ROOT = Path(__file__).resolve().parents[1]


def pytest_addoption(parser):
    parser.addoption(
        "--shared-data",
        default=os.environ.get("SDR_SHARED_DATA", str(REPO_ROOT.parent / "shared" / "data")),
        help="folder with real EMNIST and CIFAR-10 ResNet weights (optional)",
    )


@pytest.fixture(scope="module")
def one_thread():
    """One torch intra-op thread for a test module, restored afterwards: tiny tensors run
    faster on one thread, and a busy second core (another process) then cannot stall
    every op. Request it (``pytestmark = pytest.mark.usefixtures("one_thread")``) or
    make it autouse in a folder's conftest."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture(scope="session")
def shared_data_dir(request) -> Path:
    """The shared data folder; skips the test where it does not exist."""
    path = Path(request.config.getoption("--shared-data"))
    if not path.is_dir():
        pytest.skip(f"shared data folder {path} not found (set --shared-data or SDR_SHARED_DATA)")
    return path


def _write_idx(path, array) -> None:
    """An idx file (big-endian header, uint8 data) as the EMNIST and MNIST archives hold."""
    array = np.ascontiguousarray(array, dtype=np.uint8)
    with open(path, "wb") as f:
        f.write(struct.pack(">HBB", 0, 8, array.ndim) + struct.pack(f">{array.ndim}I", *array.shape))
        f.write(array.tobytes())


@pytest.fixture(scope="session")
def write_emnist_root():
    """``write(root, split, train, test)``: raw EMNIST idx files under ``root/EMNIST/raw``
    from upright ``(images [N, 28, 28] uint8, labels [N])`` pairs, stored transposed as
    torchvision writes them."""

    def write(root, split, train, test):
        raw = Path(root) / "EMNIST" / "raw"
        raw.mkdir(parents=True, exist_ok=True)
        for part, (images, labels) in (("train", train), ("test", test)):
            _write_idx(raw / f"emnist-{split}-{part}-images-idx3-ubyte", np.asarray(images).transpose(0, 2, 1))
            _write_idx(raw / f"emnist-{split}-{part}-labels-idx1-ubyte", labels)

    return write
