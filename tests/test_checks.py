"""The shared argument check, and that the constructors which use it word mistakes alike."""

import pytest

from avalanche_sdr._checks import check_int
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
