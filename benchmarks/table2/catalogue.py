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
    :param is_sdr: an ``SDRStrategy`` row, with detection outcomes and ``--sweep``
        variants (``Method.is_sdr``).
    :param method_preset: the row is the library's method preset of this name exactly,
        ``SDRStrategy.from_benchmark(..., method=NAME)`` with the library's own defaults
        (a name of ``avalanche_sdr.training.METHODS``; ``None``: a row the harness
        configures). Such a row takes no ``--reuse`` nor update option (its preset's
        are the library's) and is run only when ``--methods`` names it.
    """

    label: str
    task_free: bool = False
    is_sdr: bool = False
    method_preset: Optional[str] = None

    @property
    def takes_reuse(self) -> bool:
        """``--reuse`` (and the update options) act on the row: an SDR row the harness configures."""
        return self.is_sdr and self.method_preset is None

    @property
    def default(self) -> bool:
        """A row of a call without ``--methods``: every row but the library's method presets
        (whose configurations the rows ``sdr`` and ``sdr_two_sample_nogen [accumulate]`` run
        with the harness's settings)."""
        return self.method_preset is None


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
    # Closed-form learners on the frozen E0 (avalanche_sdr.closed_form): one head over the class ids.
    "slda": MethodEntry("SLDA (Avalanche StreamingLDA on frozen E0)", task_free=True),
    "ranpac": MethodEntry("RanPAC (random projection + ridge prototypes on frozen E0)", task_free=True),
    "klda": MethodEntry("KLDA (random Fourier features + shared-covariance LDA on frozen E0)", task_free=True),
    "sdr_paper": MethodEntry("SDR, method='paper' (the library's preset)", is_sdr=True, method_preset="paper"),
    "sdr_recommended": MethodEntry("SDR, method='recommended' (the library's preset)", task_free=True, is_sdr=True,
                                   method_preset="recommended"),
}
"""Harness methods (``--methods``) in the paper's order, then the library's method presets,
as :data:`benchmarks.table2.methods.METHODS`. ``sdr_recommended`` is task-free: the
recommended preset predicts without task labels (its router ``lda_weighted``), on the
stream with the dataset's class ids."""

DEFAULT_METHODS: Tuple[str, ...] = tuple(name for name, method in METHODS.items() if method.default)
"""The rows of a call without ``--methods`` (:attr:`MethodEntry.default`)."""

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
"""What a detected repeat trains in the SDR rows (``--reuse``; ``SDRStrategy(reuse=...)``):
``head`` (the paper's, the rows as defined) and ``accumulate`` (the learning reuse, a
variant row named after it, :func:`benchmarks.table2.variants.reuse_rows`)."""

__all__ = ["DEFAULT_METHODS", "METHODS", "MethodEntry", "PRESETS", "REUSES", "SDR_ROUTER", "STREAMS",
           "SWEPT_BASELINES", "StreamEntry", "TASK_FREE_METHODS"]
