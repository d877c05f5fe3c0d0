"""``predict`` (SDRStrategy's and SDRModel's) checks its images at the boundary: what
E0 takes is float ``[N, C, H, W]`` in [0, 1] of the stream's (C, H, W) and the model's
dtype; anything else gets a message saying what to do, before any work."""
import pytest
import torch
from avalanche.evaluation.metrics import accuracy_metrics
from avalanche.training.plugins import EvaluationPlugin

from avalanche_sdr import SDRStrategy
from avalanche_sdr.benchmarks import experience_tensors
from avalanche_sdr.models import small_cnn_backbone
from avalanche_sdr.training import SDRSettings

pytestmark = pytest.mark.usefixtures("one_thread")

FAST = SDRSettings(new_task_epochs=2, lr_milestones=(), reuse_epochs=1, train_mb_size=32, eval_mb_size=256)


@pytest.fixture(scope="module")
def trained(prototype_stream):
    """A recommended strategy after four tasks, and task 3's test images [N, 1, 8, 8] in [0, 1]."""
    torch.manual_seed(0)
    strategy = SDRStrategy.from_benchmark(small_cnn_backbone(in_channels=1, widths=(8, 16)), prototype_stream,
                                          method="recommended", settings=FAST,
                                          evaluator=EvaluationPlugin(accuracy_metrics(experience=True), loggers=[]))
    for experience in prototype_stream.train_stream[:4]:
        strategy.train(experience)
    x, y, _ = experience_tensors(prototype_stream.test_stream[3])
    return strategy, x, y


BAD = {
    "0-255 pixels": (lambda x: x * 255, ValueError, r"far outside \[0, 1\].*divide 0-255 pixels by 255"),
    "normalised images": (lambda x: (x - 0.5) / 0.1, ValueError, r"far outside \[0, 1\].*Normalize"),
    "uint8 pixels": (lambda x: (x * 255).round().to(torch.uint8), TypeError, r"torch.uint8.*x\.float\(\) / 255"),
    "float64": (lambda x: x.double(), TypeError, r"torch.float64 but the model computes in torch.float32: "
                                                 r"convert it with x\.to\(torch.float32\)"),
    "three channels": (lambda x: x.repeat(1, 3, 1, 1), ValueError, r"3-channel images but the model takes 1-channel "
                                                                   r"8x8 images"),
    "another size": (lambda x: x[:, :, :4], ValueError, r"4x8 images but the model takes 1-channel 8x8"),
    "one image": (lambda x: x[0], ValueError, r"\[N, C, H, W\].*x\.unsqueeze\(0\)"),
    "flat vectors": (lambda x: x.flatten(1), ValueError, r"\[N, C, H, W\], got shape \(\d+, 64\)$"),
    "NaN": (lambda x: x.masked_fill(torch.arange(x.numel()).view_as(x) == 5, float("nan")), ValueError, "NaN"),
    "not a tensor": (lambda x: x.numpy(), TypeError, r"torch\.Tensor of images"),
}


@pytest.mark.parametrize("case", list(BAD))
@pytest.mark.parametrize("caller", ["strategy", "model"])
def test_bad_images_get_a_message_saying_what_to_do(trained, case, caller):
    strategy, x, _ = trained
    change, error, match = BAD[case]
    predict = strategy.predict if caller == "strategy" else strategy.model.predict
    with pytest.raises(error, match=match):
        predict(change(x.clone()))


def test_images_in_range_and_a_resampling_overshoot_are_predicted(trained):
    strategy, x, y = trained
    right = strategy.predict(x).class_ids
    assert right.shape == y.shape and float((right == y).float().mean()) > 0.5
    overshoot = (x - 0.5) * 1.1 + 0.5  # [-0.05, 1.05]: as a bicubic resize of [0, 1] images may give
    assert strategy.predict(overshoot).class_ids.shape == y.shape
