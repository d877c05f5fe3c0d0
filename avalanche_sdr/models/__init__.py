"""Models: EFT adapters, backbones E0, VAE generators and the SDR repository."""
from avalanche_sdr.models.backbones import (
    cifar_resnet_backbone,
    resnet18_backbone,
    small_cnn_backbone,
)
from avalanche_sdr.models.eft import EFTAdapter, EFTConv2d, EFTEncoder, TaskBatchNorm2d
from avalanche_sdr.models.repository import SDRModel, build_sdr_model
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
    "build_sdr_model",
    "ROUTERS",
]


def __getattr__(name):
    if name == "TaskFreePrediction":  # moved to avalanche_sdr.routers (kept here for one release)
        from avalanche_sdr.routers.base import TaskFreePrediction

        return TaskFreePrediction
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
