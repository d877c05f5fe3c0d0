"""Checks on a task's data before SDR uses it."""
import pytest
import torch

from avalanche_sdr.training.data import InvalidTaskDataError, check_task_data


def test_returns_number_of_classes():
    x = torch.rand(6, 1, 4, 4)
    assert check_task_data(x, torch.tensor([0, 1, 2, 2, 1, 0]), task=3) == 3


def test_single_class_task_is_allowed():
    assert check_task_data(torch.rand(4, 1, 4, 4), torch.zeros(4, dtype=torch.long), task=0) == 1


@pytest.mark.parametrize(
    "x, y, message",
    [
        (torch.rand(0, 1, 4, 4), torch.zeros(0, dtype=torch.long), "holds no samples"),
        (torch.rand(3, 4, 4), torch.zeros(3, dtype=torch.long), r"expected images \[N, C, H, W\]"),
        (torch.rand(3, 1, 4, 4), torch.tensor([0, -1, 1]), "labels must be local class indices >= 0"),
        (torch.rand(3, 1, 4, 4), torch.tensor([0, 2, 2]), r"classes \[1\] are missing"),
    ],
)
def test_bad_data_is_refused_with_the_reason(x, y, message):
    with pytest.raises(InvalidTaskDataError, match=message):
        check_task_data(x, y, task=7)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_inputs_are_counted(bad):
    x = torch.rand(5, 1, 4, 4)
    x[1, 0, 2, 2] = bad
    x[3, 0, 0, 0] = bad
    with pytest.raises(InvalidTaskDataError, match="task 7: 2 of 5 inputs contain NaN or Inf"):
        check_task_data(x, torch.tensor([0, 1, 0, 1, 0]), task=7)


def test_images_of_another_shape_than_the_model_takes_are_refused():
    y = torch.tensor([0, 1, 0])
    assert check_task_data(torch.rand(3, 1, 8, 8), y, task=2, input_shape=(1, 8, 8)) == 2
    with pytest.raises(InvalidTaskDataError, match=r"task 2: images are 3x8x8 \(C x H x W\) but the repository takes 1x8x8"):
        check_task_data(torch.rand(3, 3, 8, 8), y, task=2, input_shape=(1, 8, 8))
    with pytest.raises(InvalidTaskDataError, match="images are 1x28x28"):
        check_task_data(torch.rand(3, 1, 28, 28), y, task=2, input_shape=(1, 8, 8))
