"""The shared argument checks, and that the constructors which use them word mistakes alike."""

import pytest
import torch

from avalanche_sdr._checks import PIXEL_SLACK, check_images, check_int, check_positive
from avalanche_sdr.models.eft import EFTAdapter
from avalanche_sdr.training.presets import CPU_LARGE_TASK_SETTINGS


@pytest.mark.parametrize("value", [1, 7, 10**6])
def test_positive_ints_pass_unchanged(value):
    assert check_int(value, "n") is value


@pytest.mark.parametrize("value", [0, -3, 2.0, 2.5, "3", None, True, False])
def test_anything_else_is_refused_with_its_name_and_value(value):
    with pytest.raises(ValueError, match=rf"^n_epochs must be a positive int, got {value!r}$"):
        check_int(value, "n_epochs")


def test_minimum_and_hint_appear_in_the_message():
    assert check_int(0, "patience", minimum=0) == 0
    with pytest.raises(ValueError, match=r"^patience must be an int >= 0, got -1$"):
        check_int(-1, "patience", minimum=0)
    with pytest.raises(ValueError, match=r"^k must be a positive int \(at least one entry\), got 0$"):
        check_int(0, "k", hint=" (at least one entry)")


def test_constructors_share_the_wording():
    with pytest.raises(ValueError, match="channels must be a positive int, got 0"):
        EFTAdapter(0)
    with pytest.raises(ValueError, match="train_mb_size must be a positive int, got 0"):
        CPU_LARGE_TASK_SETTINGS.replace(train_mb_size=0)
    with pytest.raises(ValueError, match="vae_patience must be an int >= 0, got -1"):
        CPU_LARGE_TASK_SETTINGS.replace(vae_patience=-1)


@pytest.mark.parametrize("value", [1e-3, 2, 0.5])
def test_positive_numbers_pass_unchanged(value):
    assert check_positive(value, "lr") is value


@pytest.mark.parametrize("value", [0, 0.0, -1e-3, float("nan"), float("inf"), "1e-3", None, True])
def test_anything_else_is_not_a_positive_number(value):
    with pytest.raises(ValueError, match=rf"^lr must be a positive number \(Adam's\), got {value!r}$"):
        check_positive(value, "lr", hint=" (Adam's)")


def test_images_in_the_unit_range_pass_up_to_the_slack():
    x = torch.rand(4, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    check_images(x, shape=(1, 8, 8), dtype=torch.float32, device=torch.device("cpu"))
    check_images(x * (1 + PIXEL_SLACK) - PIXEL_SLACK / 2)  # within the slack on both sides
    check_images(torch.zeros(0, 1, 8, 8), shape=(1, 8, 8))  # an empty batch has no range to check
    with pytest.raises(ValueError, match=r"values in \[0, 1.2\], far outside \[0, 1\]"):
        check_images(x.index_fill(0, torch.tensor([0]), 1.2).index_fill(0, torch.tensor([1]), 0.0))


def test_images_are_named_as_the_caller_spells_them():
    with pytest.raises(TypeError, match=r"^images is torch.int64: give float images in \[0, 1\], e.g. "
                                        r"images.float\(\) / 255 for 0-255 pixels$"):
        check_images(torch.zeros(2, 1, 8, 8, dtype=torch.long), "images")
    with pytest.raises(ValueError, match=r"^batch is on cpu but the model is on cuda:1: move it with "
                                         r"batch.to\('cuda:1'\)$"):
        check_images(torch.zeros(2, 1, 8, 8), "batch", device=torch.device("cuda", 1))
