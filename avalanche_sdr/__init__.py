"""avalanche-sdr: Similar-task Detection and Repurposing (SDR) for Avalanche.

``from avalanche_sdr import SDRStrategy`` is all a training script needs; the
subpackages hold the pieces:

- :mod:`avalanche_sdr.models` — EFT adapters, backbones, VAEs, the repository model;
- :mod:`avalanche_sdr.detection` — consistency score, complexity measure, decisions;
- :mod:`avalanche_sdr.training` — ``SDRStrategy``, its plugin, presets, pretraining;
- :mod:`avalanche_sdr.benchmarks` — mixed similar/dissimilar task streams;
- :mod:`avalanche_sdr.evaluation` — detection and memory metrics;
- :mod:`avalanche_sdr.plots` — figures from a run's results JSON.
"""
from avalanche_sdr.detection import DetectionRecord, SimilarTaskDetector
from avalanche_sdr.models import SDRModel, build_sdr_model
from avalanche_sdr.training import CPU_SETTINGS, PAPER_SETTINGS, SDRPlugin, SDRStrategy

__version__ = "0.1.0"

__all__ = [
    "SDRStrategy",
    "SDRPlugin",
    "SDRModel",
    "build_sdr_model",
    "SimilarTaskDetector",
    "DetectionRecord",
    "PAPER_SETTINGS",
    "CPU_SETTINGS",
    "__version__",
]
