"""Reading a whole dataset (an experience's data) into stacked tensors, or its labels."""
from __future__ import annotations

from typing import Any, Iterable, List, Optional, Tuple

import torch
from torch.utils.data import DataLoader, Subset


def dataset_tensors(dataset: Any, batch_size: int = 1024, max_samples: Optional[int] = None) -> Tuple[torch.Tensor, ...]:
    """All samples of a dataset as stacked tensors, in dataset order.

    The dataset is read once through a ``DataLoader`` with the dataset's own
    ``collate_fn`` (so its transforms apply). About 15 us a sample on one CPU core
    for the datasets of a :class:`~avalanche_sdr.benchmarks.MixedSimilarityBenchmark`.

    :param dataset: an Avalanche dataset (``experience.dataset``) or any dataset whose
        samples are ``(x, y, ...)``.
    :param batch_size: loader batch size (speed only).
    :param max_samples: read only the first ``max_samples`` samples (``None``: all).
    :return: one tensor per sample field, concatenated: ``(x, y, t)`` for Avalanche
        experiences (x float32 [N, C, H, W], y int64 [N], t int64 [N]).
    :raises ValueError: if the dataset is empty.
    """
    collate = getattr(dataset, "collate_fn", None)
    if max_samples is not None and max_samples < len(dataset):
        dataset = Subset(dataset, range(int(max_samples)))
    loader = DataLoader(dataset, batch_size=batch_size, shuffle=False, collate_fn=collate)
    batches = list(loader)
    if not batches:
        raise ValueError("the dataset is empty")
    return tuple(torch.cat([b[j] for b in batches]) for j in range(len(batches[0])))


def experience_tensors(experience: Any) -> Tuple[torch.Tensor, ...]:
    """``dataset_tensors(experience.dataset)``: (x, y, t) of one experience."""
    return dataset_tensors(experience.dataset)


def stream_tensors(stream: Iterable[Any]) -> Tuple[torch.Tensor, ...]:
    """Every experience of ``stream`` as tensors (:func:`experience_tensors`), concatenated
    in stream order: e.g. every task's test images and labels at once, to predict
    without task labels (``strategy.predict(x)``).

    :param stream: experiences (``benchmark.test_stream``, or a slice of it).
    :return: ``(x, y, t)``: x float32 [N, C, H, W], y int64 [N], t int64 [N] (each
        sample's task label), N the stream's samples.
    :raises ValueError: an empty stream, or an empty experience.
    """
    parts = [experience_tensors(experience) for experience in stream]
    if not parts:
        raise ValueError("the stream holds no experience")
    return tuple(torch.cat(field) for field in zip(*parts))


def distinct_labels(experience: Any) -> Optional[List[int]]:
    """The distinct labels of an experience's dataset, sorted, read from its ``targets``
    (Avalanche's kept ``uniques`` when there, else every target); ``None`` when the
    dataset has no ``targets``."""
    targets = getattr(experience.dataset, "targets", None)
    if targets is None:
        return None
    uniques = getattr(targets, "uniques", None)
    return sorted(int(v) for v in (set(targets) if uniques is None else uniques))


__all__ = ["dataset_tensors", "distinct_labels", "experience_tensors", "stream_tensors"]
