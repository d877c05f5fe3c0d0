"""Models: EFT adapters, backbones E0, VAE generators and the SDR repository.

The repository (:class:`SDRModel`) with its parts by owner: the task heads
(:class:`~avalanche_sdr.models.heads.TaskHeads`), the stored tensors' formats
(:mod:`avalanche_sdr.models.stored`), the state digests
(:mod:`avalanche_sdr.models.digests`), and the per-task data object handed to the
detector, the learning reuse and the routers (:class:`~avalanche_sdr.models.task_data.TaskData`).
"""
from avalanche_sdr.models.backbones import (
    cifar_resnet_backbone,
    resnet18_backbone,
    small_cnn_backbone,
)
from avalanche_sdr.models.eft import EFTAdapter, EFTConv2d, EFTEncoder, TaskBatchNorm2d
from avalanche_sdr.models.heads import TaskHeads
from avalanche_sdr.models.repository import SDRModel, build_sdr_model
from avalanche_sdr.models.task_data import TaskData
from avalanche_sdr.models.vae import ConvVAE, EFTVAEBank, IndependentVAEBank
from avalanche_sdr.vocabulary import ROUTERS  # the router names; the routers: avalanche_sdr.routers

__all__ = [
    "EFTAdapter",
    "EFTConv2d",
    "EFTEncoder",
    "TaskBatchNorm2d",
    "resnet18_backbone",
    "cifar_resnet_backbone",
    "small_cnn_backbone",
    "ConvVAE",
    "IndependentVAEBank",
    "EFTVAEBank",
    "SDRModel",
    "TaskData",
    "TaskHeads",
    "build_sdr_model",
    "ROUTERS",
]
