"""The names the harness's commands accept, importable without torch or Avalanche.

The parsers of ``python -m benchmarks.table2``, ``benchmarks.studies.detection.sim`` and
``benchmarks.studies.task_free.table`` build their choices and ``--help`` from here, so that
``--help`` and usage errors (exit code 2) come before anything heavy is imported:
:mod:`benchmarks.table2.methods`, which defines the same streams, presets and methods with
their builders, imports torch and Avalanche (a second or more and ~700 MB).

Labels and flags are defined here once: :mod:`benchmarks.table2.methods` reads them when it
builds its :data:`~benchmarks.table2.methods.STREAMS` and :data:`~benchmarks.table2.methods.METHODS`;
``tests/harness/test_catalogue.py`` checks that both offer the same names in the same
order (and the same presets).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional, Tuple

from avalanche_sdr.vocabulary import REUSE_MODES, ROUTER_LDA_WEIGHTED  # plain strings; imports nothing


@dataclass(frozen=True)
class StreamEntry:
    """What a parser needs of a harness stream (:class:`benchmarks.table2.methods.StreamSpec`).

    :param label: human-readable stream name (``StreamSpec.label``).
    :param needs_data_root: the stream reads ``--data-root`` (no default location).
    :param backbone: E0 family, ``"small_cnn"`` (pretrained by the harness on the
        stream's warm-start tasks) or ``"cifar_resnet20"`` (needs ``--backbone-weights``;
        never for a CIFAR-10 stream: those weights have seen its classes).
    """

    label: str
    needs_data_root: bool = False
    backbone: str = "small_cnn"


STREAMS: Dict[str, StreamEntry] = {
    "digits": StreamEntry("MixedDigits (10 tasks)"),
    "fashion10": StreamEntry("MixedFashionMNIST (10 tasks)"),
    "fashion50": StreamEntry("MixedFashionMNIST (50 tasks)"),
    "emnist100": StreamEntry("MixedEMNIST bymerge (100 tasks)", needs_data_root=True, backbone="cifar_resnet20"),
    "fashion100": StreamEntry("MixedFashionMNIST (100 tasks, 300 images each)"),
    "fashion50_small": StreamEntry("MixedFashionMNIST (50 tasks, 40 training images each)"),
    "cifar10": StreamEntry("MixedCIFAR10 (10 tasks, JPEG-re-encoded)", needs_data_root=True),
}
"""Harness streams (``--stream``), as :data:`benchmarks.table2.methods.STREAMS`."""

PRESETS: Tuple[str, ...] = ("smoke", "cpu", "paper")
"""Training budgets (``--preset``), the keys of :data:`benchmarks.table2.methods.PRESETS`."""


@dataclass(frozen=True)
class MethodEntry:
    """What a parser needs of a harness method (:class:`benchmarks.table2.methods.Method`).

    :param label: row label (``Method.label``).
    :param task_free: the run reports task-free accuracies (``Method.task_free``).
    :param is_sdr: an ``SDRStrategy`` row, with detection outcomes and ``--reuse`` /
        ``--sweep`` variants (``Method.is_sdr``).
    """

    label: str
    task_free: bool = False
    is_sdr: bool = False


METHODS: Dict[str, MethodEntry] = {
    "optimal": MethodEntry("Optimal (EFT for E)", is_sdr=True),
    "single_model": MethodEntry("Single Model per task"),
    "finetune": MethodEntry("Finetune"),
    "new_head": MethodEntry("New-Head"),
    "replay": MethodEntry("ER"),
    "ewc": MethodEntry("Online EWC"),
    "dgr": MethodEntry("DGR (Avalanche GenerativeReplay)"),
    "pnn": MethodEntry("PNN (Avalanche, on E0 features)"),
    "hat": MethodEntry("HAT (hard attention to the task)"),
    "sdr": MethodEntry("SDR (EFT for E)", is_sdr=True),
    "sdr_eft_g": MethodEntry("SDR (EFT for E and G)", is_sdr=True),
    "sdr_calibrated": MethodEntry("SDR (EFT for E), calibrated", is_sdr=True),
    "sdr_calibrated_ft": MethodEntry("SDR (EFT for E), calibrated + forward transfer", is_sdr=True),
    "sdr_expert_gate": MethodEntry("SDR repository, Expert Gate relatedness (no VAEs)", is_sdr=True),
    "sdr_two_sample": MethodEntry("SDR (EFT for E), two-sample test", is_sdr=True),
    "sdr_two_sample_nogen": MethodEntry("SDR (EFT for E), two-sample test, no generators", is_sdr=True),
    "sdr_two_sample_entry": MethodEntry("SDR (EFT for E), two-sample test on each entry's encoder, no generators",
                                        is_sdr=True),
    "sdr_task_free": MethodEntry("SDR (EFT for E), two-sample test, no generators, task-free routers",
                                 task_free=True, is_sdr=True),
    "ci_replay": MethodEntry("ER, class-incremental (one head over class ids)", task_free=True),
    "ci_ewc": MethodEntry("Online EWC, class-incremental", task_free=True),
    "joint": MethodEntry("Joint training (one head over class ids, upper bound)", task_free=True),
}
"""Harness methods (``--methods``) in the paper's order, as :data:`benchmarks.table2.methods.METHODS`."""

TASK_FREE_METHODS: Tuple[str, ...] = tuple(name for name, method in METHODS.items() if method.task_free)
"""The methods whose runs report task-free accuracies, in row order."""

SDR_ROUTER = ROUTER_LDA_WEIGHTED
"""SDR's recommended task-free router: an equal-memory row sized to a task-free SDR run meets that
run's memory with this router's state and without the other routers'
(:func:`benchmarks.table2.engine.memory_mb_with_routers`; ``"lda_weighted"`` shares ``"lda"``'s
state, so both size alike); the router ``benchmarks.studies.task_free.table`` judges SDR by."""

SWEPT_BASELINES: Tuple[str, ...] = ("replay",)
"""The baselines with ``--sweep`` variants (ER's buffer per class,
:func:`benchmarks.table2.variants.sweep_rows`); every SDR row has its own (EFT sizes)."""

REUSES: Tuple[str, ...] = REUSE_MODES
"""What a detected repeat trains in the SDR rows (``--reuse``; ``SDRSettings.reuse``):
``head`` (the paper's, the rows as defined) and ``accumulate`` (the learning reuse, a
variant row named after it, :func:`benchmarks.table2.variants.reuse_rows`)."""

@dataclass(frozen=True)
class MethodPresetEntry:
    """The harness rows of one of the library's method presets (``--method NAME``,
    ``SDRStrategy(method=NAME)``).

    :param method: the harness method of its row (a key of :data:`METHODS`).
    :param reuse: the row's reuse (:data:`REUSES`; other than ``head``, the variant row
        named after it, as ``--reuse`` makes it).
    :param task_free_method: the harness method of its row where a call has task-free rows
        (:data:`TASK_FREE_METHODS`), under the same reuse; ``None``: the harness has none.
    :param summary: one line for ``--help``.
    """

    method: str
    reuse: str
    task_free_method: Optional[str]
    summary: str


METHOD_PRESETS: Dict[str, MethodPresetEntry] = {
    "paper": MethodPresetEntry(
        "sdr", "head", None, "the paper's SDR: agreement rule, a VAE per entry, head-only reuse (row sdr)"),
    "recommended": MethodPresetEntry(
        "sdr_two_sample_nogen", "accumulate", "sdr_task_free",
        "two-sample test, no generators, learning reuse (row sdr_two_sample_nogen [accumulate]); with a "
        f"task-free row in --methods also sdr_task_free [accumulate], read with its router {SDR_ROUTER}; "
        "the rows test classes in the stream's order, as the results pages measured, where the library's "
        "preset matches them in any order"),
}
"""The library's method presets by name (``avalanche_sdr.training.METHODS``, whose module
imports torch: the names are repeated here for the parser, and
``tests/harness/test_catalogue.py`` checks that they are the registry's keys), each as the
harness rows that run it (:func:`benchmarks.table2.equal_memory.method_preset_rows`)."""

__all__ = ["METHODS", "METHOD_PRESETS", "MethodEntry", "MethodPresetEntry", "PRESETS", "REUSES", "SDR_ROUTER",
           "STREAMS", "SWEPT_BASELINES", "StreamEntry", "TASK_FREE_METHODS"]
