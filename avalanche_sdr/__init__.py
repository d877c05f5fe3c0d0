"""avalanche-sdr: Similar-task Detection and Repurposing (SDR) for Avalanche.

The names a first script needs are importable from here: ``SDRStrategy`` (with
``SDRStrategy.from_benchmark``), its settings, a CPU backbone with its pretraining,
and ``seed_everything``. The subpackages hold the pieces:
:mod:`avalanche_sdr.models` (EFT adapters, backbones, VAEs, the repository model),
:mod:`avalanche_sdr.detection` (the scores and decision rules),
:mod:`avalanche_sdr.routers` (task-free prediction), :mod:`avalanche_sdr.training`
(the strategy, its plugin, presets, pretraining), :mod:`avalanche_sdr.benchmarks`
(mixed similar/dissimilar streams), :mod:`avalanche_sdr.evaluation` (detection and
memory metrics), :mod:`avalanche_sdr.plots`, :mod:`avalanche_sdr.baselines`,
:mod:`avalanche_sdr.vocabulary`, :mod:`avalanche_sdr.seeding` and
:mod:`avalanche_sdr.cli`. The names are imported on first use (PEP 562), so ``import
avalanche_sdr`` alone does not import Avalanche: a command-line entry point installs
its warning filters (:func:`avalanche_sdr.cli.install_warning_filters`) first.
"""
import importlib

__version__ = "0.1.0"

_EXPORTS = {
    "SDRStrategy": "avalanche_sdr.training",
    "SDRPlugin": "avalanche_sdr.training",
    "SDRModel": "avalanche_sdr.models",
    "build_sdr_model": "avalanche_sdr.models",
    "SimilarTaskDetector": "avalanche_sdr.detection",
    "DetectionRecord": "avalanche_sdr.detection",
    "SDRSettings": "avalanche_sdr.training",
    "PAPER_SETTINGS": "avalanche_sdr.training",
    "CPU_LARGE_TASK_SETTINGS": "avalanche_sdr.training",
    "CPU_SETTINGS": "avalanche_sdr.training",
    "METHODS": "avalanche_sdr.training",
    "BUDGETS": "avalanche_sdr.training",
    "HeadReuse": "avalanche_sdr.training",
    "LearningReuse": "avalanche_sdr.training",
    "NoLossReuse": "avalanche_sdr.training",
    "REUSE_TYPES": "avalanche_sdr.training",
    "pretrain_backbone": "avalanche_sdr.training",
    "small_cnn_backbone": "avalanche_sdr.models",
    "seed_everything": "avalanche_sdr.seeding",
}
_SUBPACKAGES = ("models", "detection", "routers", "training", "benchmarks", "evaluation", "plots", "baselines", "vocabulary",
                "cli", "seeding")

__all__ = [
    "SDRStrategy",
    "SDRPlugin",
    "SDRModel",
    "build_sdr_model",
    "SimilarTaskDetector",
    "DetectionRecord",
    "SDRSettings",
    "PAPER_SETTINGS",
    "CPU_LARGE_TASK_SETTINGS",
    "CPU_SETTINGS",
    "METHODS",
    "BUDGETS",
    "HeadReuse",
    "LearningReuse",
    "NoLossReuse",
    "REUSE_TYPES",
    "pretrain_backbone",
    "small_cnn_backbone",
    "seed_everything",
    "__version__",
]


def __getattr__(name):
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
        globals()[name] = value
        return value
    if name in _SUBPACKAGES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS) | set(_SUBPACKAGES))
