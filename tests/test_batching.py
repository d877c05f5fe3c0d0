"""The batch size of evaluation-mode passes is chosen per device (avalanche_sdr._batching)."""
import pytest
import torch

from avalanche_sdr import SDRSettings
from avalanche_sdr._batching import ACCELERATOR_EVAL_BATCH, CPU_EVAL_BATCH, check_batch_size, eval_batch_size
from avalanche_sdr.baselines import BaselineSettings
from avalanche_sdr.detection import TwoSampleDetector


def test_the_chooser_picks_a_small_batch_on_the_cpu_and_a_large_one_elsewhere():
    # Only the chooser: "cuda" is a device string torch parses without a GPU.
    assert eval_batch_size("cpu") == eval_batch_size(torch.device("cpu")) == eval_batch_size(None) == CPU_EVAL_BATCH
    assert eval_batch_size("cuda") == eval_batch_size("cuda:1") == eval_batch_size(torch.device("cuda", 0)) \
        == ACCELERATOR_EVAL_BATCH
    assert CPU_EVAL_BATCH < ACCELERATOR_EVAL_BATCH


def test_a_given_batch_size_wins_on_every_device():
    assert eval_batch_size("cpu", 7) == eval_batch_size("cuda", 7) == 7


@pytest.mark.parametrize("bad", [0, -3, 2.5, True, "32"])
def test_a_bad_batch_size_is_refused_with_its_name(bad):
    with pytest.raises(ValueError, match="eval_mb_size must be a positive int or None"):
        eval_batch_size("cpu", bad, "eval_mb_size")
    with pytest.raises(ValueError, match="batch_size must be a positive int or None"):
        check_batch_size(bad)
    with pytest.raises(ValueError, match="eval_mb_size"):
        SDRSettings(eval_mb_size=bad)


def test_an_unknown_device_is_refused():
    with pytest.raises(ValueError, match="device must be a torch.device"):
        eval_batch_size("gpu0")


def test_the_defaults_leave_the_choice_to_the_device():
    assert SDRSettings().eval_mb_size is None and BaselineSettings(epochs=1).eval_mb_size is None
    assert TwoSampleDetector().batch_size is None
    assert BaselineSettings(epochs=1).eval_batch_size("cuda") == ACCELERATOR_EVAL_BATCH
    assert BaselineSettings(epochs=1, eval_mb_size=5).eval_batch_size("cuda") == 5


def test_features_are_the_same_at_every_batch_size():
    from avalanche_sdr.models import build_sdr_model, small_cnn_backbone

    torch.manual_seed(0)
    model = build_sdr_model(small_cnn_backbone(in_channels=1, widths=(8, 16)), in_channels=1, image_size=12,
                            generator=None)
    entry = model.create_entry(0)
    x = torch.rand(70, 1, 12, 12)
    default = model.batched_features(x, entry)
    for size in (1, 32, 256):
        assert torch.allclose(model.batched_features(x, entry, size), default, atol=1e-6, rtol=0)
