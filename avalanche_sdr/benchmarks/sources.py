"""Reading the presets' datasets from their on-disk layouts, with clear errors.

Each loader returns ``(train, test)`` :class:`ImageArrayDataset` s (uint8 images
[N, C, H, W], ``max_value`` 255, int64 ``targets``, ``classes`` names) from
Fashion-MNIST's and EMNIST's idx files (gzipped or not, torchvision's layout or the
Debian package's) and CIFAR-10 / CIFAR-100's python pickles. With ``download=True``
missing files are fetched with torchvision's dataset classes first; without it a
:class:`DatasetNotFoundError` lists the missing files and how to get them, and a file
that cannot be read raises :class:`CorruptDatasetError` naming it.

Why not torchvision's dataset classes: they cannot read gzipped idx files offline,
fail on a bad file with a bare ``AssertionError``, return EMNIST transposed, checksum
every CIFAR file at each build and drop CIFAR-100's coarse labels (the paper's
Table 4 groups).

The layouts and the reasons in full: docs/method.rst, section "Dataset files:
layouts read and why not torchvision's readers".
"""

import gzip
import os
import pickle
import string
import struct
import zlib
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch

from .image_arrays import ImageArrayDataset

#: Fashion-MNIST class names (label order), as torchvision names them.
FASHION_MNIST_CLASSES = [
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
    "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot",
]

#: The 47 EMNIST "balanced" (and "bymerge") classes in label order: digits, the 26
#: upper-case letters (15 of them stand for the merged upper/lower-case class), and
#: the 11 lower-case letters kept apart from their capitals.
EMNIST_CLASSES = list(string.digits + string.ascii_uppercase + "abdefghnqrt")

#: CIFAR-10 class names in label order.
CIFAR10_CLASSES = [
    "airplane", "automobile", "bird", "cat", "deer",
    "dog", "frog", "horse", "ship", "truck",
]

_FASHION_FILES = (
    "train-images-idx3-ubyte", "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte",
)
_CIFAR10_FILES = (
    [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch", "batches.meta"]
)
_CIFAR100_FILES = ["train", "test", "meta"]


class DatasetNotFoundError(FileNotFoundError):
    """A dataset's files are missing.

    :param dataset: the dataset's name.
    :param root: the root directory searched.
    :param missing: the full paths expected and not found.
    :param hint: how to obtain the files.

    Attributes: ``dataset``, ``root``, ``missing`` (list of str), ``hint``.
    """

    def __init__(self, dataset: str, root: str, missing: Sequence[str], hint: str):
        self.dataset = dataset
        self.root = str(root)
        self.missing = [str(p) for p in missing]
        self.hint = hint
        listed = "\n  ".join(self.missing)
        super().__init__(
            f"{dataset} not found under root {self.root!r}. Missing files:\n  {listed}\n"
            f"{hint}"
        )


class CorruptDatasetError(ValueError):
    """A dataset file exists but cannot be read: truncated, a broken gzip stream, or
    not in the expected format. The message starts with the file's path.

    :param path: the file.
    :param reason: what is wrong with it.

    Attributes: ``path`` (str), ``reason`` (str).
    """

    def __init__(self, path: str, reason: str):
        self.path = str(path)
        self.reason = reason
        super().__init__(
            f"{self.path}: {reason}. The file is damaged (an interrupted download or copy?); "
            "delete it and fetch it again."
        )


def read_idx(path: str) -> np.ndarray:
    """Read an idx file (the MNIST family's format), gzipped when ``path`` ends in .gz.

    :return: uint8 array with the file's dimensions (e.g. [N, 28, 28] or [N]).
    :raises CorruptDatasetError: a truncated file or gzip stream, a malformed header,
        or a non-uint8 payload.
    """
    opener = gzip.open if str(path).endswith(".gz") else open
    try:
        with opener(path, "rb") as f:
            raw = f.read()
    except (EOFError, gzip.BadGzipFile, zlib.error) as err:
        raise CorruptDatasetError(path, f"unreadable gzip stream ({type(err).__name__}: {err})") from err
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0:
        raise CorruptDatasetError(path, "not an idx file (bad magic number)")
    dtype_code, ndim = raw[2], raw[3]
    if dtype_code != 0x08:
        raise CorruptDatasetError(path, f"idx data type 0x{dtype_code:02x}; only uint8 (0x08) is supported")
    if len(raw) < 4 + 4 * ndim:
        raise CorruptDatasetError(path, f"truncated idx header ({len(raw)} bytes for {ndim} dimensions)")
    dims = struct.unpack(f">{ndim}I", raw[4:4 + 4 * ndim])
    offset = 4 + 4 * ndim
    expected = int(np.prod(dims)) if dims else 0
    if len(raw) - offset != expected:
        raise CorruptDatasetError(
            path,
            f"header announces {expected} bytes of data for shape {dims}, the file holds {len(raw) - offset}",
        )
    return np.frombuffer(raw, dtype=np.uint8, offset=offset).reshape(dims).copy()


def _find(directory: str, stem: str) -> Optional[str]:
    for name in (stem, stem + ".gz"):
        path = os.path.join(directory, name)
        if os.path.isfile(path):
            return path
    return None


def _check_labels(labels: np.ndarray, n_classes: int, what: str) -> None:
    if labels.size and (labels.min() < 0 or labels.max() >= n_classes):
        raise ValueError(
            f"{what}: labels span [{labels.min()}, {labels.max()}]; "
            f"expected 0..{n_classes - 1}"
        )


def _mnist_pair(images_path: str, labels_path: str, n_classes: int, what: str):
    images = read_idx(images_path)
    labels = read_idx(labels_path).astype(np.int64)
    if images.ndim != 3 or labels.ndim != 1 or len(images) != len(labels):
        raise ValueError(
            f"{what}: expected images [N, H, W] and labels [N]; got {images.shape} "
            f"and {labels.shape}"
        )
    _check_labels(labels, n_classes, what)
    return images, labels


def _fashion_dir(root: str) -> Tuple[Optional[str], List[str]]:
    """The directory holding all four Fashion-MNIST files, and the files missing."""
    candidates = [root, os.path.join(root, "FashionMNIST", "raw")]
    for directory in candidates:
        if all(_find(directory, stem) for stem in _FASHION_FILES):
            return directory, []
    missing = [os.path.join(root, stem + ".gz") for stem in _FASHION_FILES
               if not _find(root, stem)]
    return None, missing


def load_fashion_mnist(
    root: str = "/usr/share/datasets/fashion-mnist", download: bool = False
) -> Tuple[ImageArrayDataset, ImageArrayDataset]:
    """Fashion-MNIST train (60,000) and test (10,000) images, 1x28x28 uint8.

    :param root: a directory holding ``train-images-idx3-ubyte.gz``,
        ``train-labels-idx1-ubyte.gz``, ``t10k-images-idx3-ubyte.gz`` and
        ``t10k-labels-idx1-ubyte.gz`` (or the uncompressed files), either directly
        (Debian package layout) or under ``FashionMNIST/raw`` (torchvision layout).
    :param download: fetch the files with ``torchvision.datasets.FashionMNIST`` into
        ``root/FashionMNIST/raw`` when they are missing.
    :raises DatasetNotFoundError: if the files are missing and not downloaded.
    """
    root = os.path.expanduser(str(root))
    directory, missing = _fashion_dir(root)
    if directory is None and download:
        from torchvision.datasets import FashionMNIST

        for train in (True, False):
            FashionMNIST(root, train=train, download=True)
        directory, missing = _fashion_dir(root)
    if directory is None:
        raise DatasetNotFoundError(
            "Fashion-MNIST",
            root,
            missing,
            "Expected the four idx files (gzipped or not) directly in root (layout of the "
            "Debian package) or in root/FashionMNIST/raw (torchvision layout). Get them "
            "with `apt-get install dataset-fashion-mnist` (installs "
            "/usr/share/datasets/fashion-mnist) or pass download=True (the examples' "
            "--download) to fetch them with torchvision into root/FashionMNIST/raw.",
        )
    out = []
    for prefix in ("train", "t10k"):
        images, labels = _mnist_pair(
            _find(directory, f"{prefix}-images-idx3-ubyte"),
            _find(directory, f"{prefix}-labels-idx1-ubyte"),
            10,
            f"Fashion-MNIST {prefix} files in {directory}",
        )
        out.append(ImageArrayDataset(images[:, None], labels, classes=FASHION_MNIST_CLASSES))
    return out[0], out[1]


def emnist_files(root: str, split: str) -> List[str]:
    """The four raw files torchvision's EMNIST reads for ``split``: train images,
    train labels, test images, test labels."""
    raw = os.path.join(os.path.expanduser(str(root)), "EMNIST", "raw")
    return [
        os.path.join(raw, f"emnist-{split}-{part}-{kind}-ubyte")
        for part in ("train", "test")
        for kind in ("images-idx3", "labels-idx1")
    ]


def load_emnist(
    root: str, split: str = "balanced", download: bool = False
) -> Tuple[ImageArrayDataset, ImageArrayDataset]:
    """EMNIST ``balanced`` or ``bymerge`` train and test images, 1x28x28 uint8, upright.

    Both splits have the same 47 classes in the same label order
    (:data:`EMNIST_CLASSES`). The raw files store images transposed; they are
    transposed back here.

    :param root: torchvision EMNIST root (files in ``root/EMNIST/raw``, see
        :func:`emnist_files`; a ``.gz`` beside a missing plain file is read too).
    :param split: ``"balanced"`` or ``"bymerge"``.
    :param download: fetch the official archive with ``torchvision.datasets.EMNIST``
        when files are missing.
    :raises DatasetNotFoundError: if the files are missing and not downloaded.
    """
    if split not in ("balanced", "bymerge"):
        raise ValueError(f"split must be 'balanced' or 'bymerge'; got {split!r}")
    root = os.path.expanduser(str(root))
    paths = emnist_files(root, split)

    def resolve():
        found = [_find(os.path.dirname(p), os.path.basename(p)) for p in paths]
        return found, [p for p, f in zip(paths, found) if f is None]

    found, missing = resolve()
    if missing and download:
        from torchvision.datasets import EMNIST

        EMNIST(root, split=split, train=True, download=True)
        found, missing = resolve()
    if missing:
        hint = (
            f"Pass download=True (the examples' --download) to fetch the official EMNIST archive "
            f"with torchvision.datasets.EMNIST(root, split={split!r}, download=True)."
        )
        if split == "bymerge":
            hint += (
                " Or write the four files yourself from another copy of EMNIST bymerge: "
                "uint8 idx files (images idx3 [N, 28, 28] stored transposed like the official "
                "files, labels idx1 [N] in 0..46) named as listed above."
            )
        raise DatasetNotFoundError(f"EMNIST ({split})", root, missing, hint)
    out = []
    for images_path, labels_path in ((found[0], found[1]), (found[2], found[3])):
        images, labels = _mnist_pair(images_path, labels_path, 47, f"EMNIST {images_path}")
        upright = np.ascontiguousarray(images.transpose(0, 2, 1))[:, None]
        out.append(ImageArrayDataset(upright, labels, classes=EMNIST_CLASSES))
    return out[0], out[1]


def _unpickle(path: str) -> Dict[str, Any]:
    """A CIFAR python-version batch file as a dict with str keys.

    :raises CorruptDatasetError: a truncated or non-pickle file, or not a dict.
    """
    try:
        with open(path, "rb") as f:
            entry = pickle.load(f, encoding="latin1")
    except (EOFError, pickle.UnpicklingError, ValueError, TypeError, AttributeError, IndexError) as err:
        raise CorruptDatasetError(path, f"unreadable pickle ({type(err).__name__}: {err})") from err
    if not isinstance(entry, dict):
        raise CorruptDatasetError(path, f"expected a pickled dict, got {type(entry).__name__}")
    return {k.decode() if isinstance(k, bytes) else k: v for k, v in entry.items()}


def _cifar_paths(
    root: str, folder: str, names: Sequence[str], download: bool, dataset: str, cls: str
) -> List[str]:
    """The paths of a CIFAR version's pickles ``root/folder/name``, fetched first with
    ``torchvision.datasets.<cls>(root, download=True)`` when some are missing and
    ``download`` is set.

    :param dataset: the dataset's name, for messages (``"CIFAR-10"``).
    :param cls: the torchvision class that downloads it (``"CIFAR10"``).
    :raises DatasetNotFoundError: if files are (still) missing.
    """
    paths = [os.path.join(root, folder, name) for name in names]
    missing = [p for p in paths if not os.path.isfile(p)]
    if missing and download:
        import torchvision.datasets

        getattr(torchvision.datasets, cls)(root, train=True, download=True)
        missing = [p for p in paths if not os.path.isfile(p)]
    if missing:
        raise DatasetNotFoundError(
            dataset,
            root,
            missing,
            f"Pass download=True (the examples' --download) to fetch and extract the python version with "
            f"torchvision.datasets.{cls}(root, download=True), or extract the official "
            f"'python version' archive into root.",
        )
    return paths


def _cifar_images(entries: List[Dict[str, Any]], path: str) -> np.ndarray:
    data = np.concatenate([np.asarray(e["data"], dtype=np.uint8) for e in entries])
    if data.ndim != 2 or data.shape[1] != 3 * 32 * 32:
        raise ValueError(f"{path}: expected 'data' rows of 3072 bytes; got shape {data.shape}")
    return data.reshape(-1, 3, 32, 32)


def load_cifar10(root: str, download: bool = False) -> Tuple[ImageArrayDataset, ImageArrayDataset]:
    """CIFAR-10 train (50,000) and test (10,000) images, 3x32x32 uint8.

    :param root: directory holding ``cifar-10-batches-py/`` (``data_batch_1`` ..
        ``data_batch_5``, ``test_batch``, ``batches.meta``).
    :param download: fetch with ``torchvision.datasets.CIFAR10`` when files are missing.
    :raises DatasetNotFoundError: if the files are missing and not downloaded.
    """
    root = os.path.expanduser(str(root))
    paths = _cifar_paths(root, "cifar-10-batches-py", _CIFAR10_FILES, download, "CIFAR-10", "CIFAR10")
    meta = _unpickle(paths[-1])
    classes = [str(n) for n in meta.get("label_names", CIFAR10_CLASSES)]
    out = []
    for batch_paths in (paths[:5], paths[5:6]):
        entries = [_unpickle(p) for p in batch_paths]
        images = _cifar_images(entries, batch_paths[0])
        labels = np.concatenate([np.asarray(e["labels"], dtype=np.int64) for e in entries])
        _check_labels(labels, len(classes), f"CIFAR-10 {batch_paths[0]}")
        out.append(ImageArrayDataset(images, labels, classes=classes))
    return out[0], out[1]


def load_cifar100(root: str, download: bool = False) -> Tuple[ImageArrayDataset, ImageArrayDataset]:
    """CIFAR-100 train (50,000) and test (10,000) images, 3x32x32 uint8, fine labels.

    Each returned dataset also carries ``coarse_targets`` (int64 tensor [N], the
    superclass of each image, when the pickles hold ``coarse_labels``, else None) and
    ``coarse_classes`` (list of the 20 superclass names, or None).

    :param root: directory holding ``cifar-100-python/`` (``train``, ``test``, ``meta``).
    :param download: fetch with ``torchvision.datasets.CIFAR100`` when files are missing.
    :raises DatasetNotFoundError: if the files are missing and not downloaded.
    """
    root = os.path.expanduser(str(root))
    paths = _cifar_paths(root, "cifar-100-python", _CIFAR100_FILES, download, "CIFAR-100", "CIFAR100")
    meta = _unpickle(paths[2])
    if "fine_label_names" not in meta:
        raise ValueError(f"{paths[2]}: no 'fine_label_names' entry")
    classes = [str(n) for n in meta["fine_label_names"]]
    coarse_names = meta.get("coarse_label_names")
    out = []
    for path in paths[:2]:
        entry = _unpickle(path)
        images = _cifar_images([entry], path)
        labels = np.asarray(entry["fine_labels"], dtype=np.int64)
        _check_labels(labels, len(classes), f"CIFAR-100 {path}")
        dataset = ImageArrayDataset(images, labels, classes=classes)
        coarse = entry.get("coarse_labels")
        dataset.coarse_targets = (
            torch.as_tensor(np.asarray(coarse, dtype=np.int64)) if coarse is not None else None
        )
        dataset.coarse_classes = [str(n) for n in coarse_names] if coarse_names else None
        out.append(dataset)
    return out[0], out[1]


__all__ = [
    "CIFAR10_CLASSES",
    "CorruptDatasetError",
    "DatasetNotFoundError",
    "EMNIST_CLASSES",
    "FASHION_MNIST_CLASSES",
    "emnist_files",
    "load_cifar10",
    "load_cifar100",
    "load_emnist",
    "load_fashion_mnist",
    "read_idx",
]
