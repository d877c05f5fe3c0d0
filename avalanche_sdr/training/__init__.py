"""SDR training: the strategy, its plugin, presets, reuses, pretraining, generator fitting, checkpoints."""
from avalanche_sdr.training.checkpoint import (
    CheckpointError,
    CheckpointMismatchError,
    SDRCheckpointPlugin,
    has_checkpoint,
    load_repository,
    read_manifest,
)
from avalanche_sdr.training.data import InvalidTaskDataError, check_task_data, read_task_data
from avalanche_sdr.training.generator_fitting import GeneratorFitReport, fit_generator
from avalanche_sdr.training.kept_update import NoLossReuse
from avalanche_sdr.training.learning_reuse import LearningReuse
from avalanche_sdr.training.methods import METHODS, MethodPreset
from avalanche_sdr.training.presets import BUDGETS, CPU_LARGE_TASK_SETTINGS, CPU_SETTINGS, PAPER_SETTINGS, SDRSettings
from avalanche_sdr.training.pretraining import hold_out_references, pretrain_backbone, pretrain_vae
from avalanche_sdr.training.reuse import HeadReuse, Reuse, ReuseRecord
from avalanche_sdr.training.reuse_registry import REUSE_TYPES, make_reuse
from avalanche_sdr.training.sdr_plugin import SDRPlugin
from avalanche_sdr.training.strategy import SDRStrategy

__all__ = [
    "SDRStrategy",
    "SDRPlugin",
    "SDRSettings",
    "METHODS",
    "MethodPreset",
    "BUDGETS",
    "PAPER_SETTINGS",
    "CPU_LARGE_TASK_SETTINGS",
    "CPU_SETTINGS",
    "Reuse",
    "ReuseRecord",
    "HeadReuse",
    "LearningReuse",
    "NoLossReuse",
    "REUSE_TYPES",
    "make_reuse",
    "hold_out_references",
    "pretrain_backbone",
    "pretrain_vae",
    "fit_generator",
    "GeneratorFitReport",
    "check_task_data",
    "read_task_data",
    "InvalidTaskDataError",
    "SDRCheckpointPlugin",
    "CheckpointError",
    "CheckpointMismatchError",
    "has_checkpoint",
    "load_repository",
    "read_manifest",
]
