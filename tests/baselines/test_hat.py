"""HAT (``avalanche_sdr/hat.py``): exact protection of earlier tasks, the gates and their
scale schedule, the regulariser, residual backbones, argument checks, E0 left unchanged.

Fast: the digits stream (~128 8x8 images a task), tiny backbones, one or two epochs.
"""
import math
import warnings

import pytest
import torch
from avalanche.training.plugins import SupervisedPlugin
from torch import nn

from avalanche_sdr import baselines
from avalanche_sdr.benchmarks import experience_tensors
from avalanche_sdr.evaluation import repository_memory_bytes
from avalanche_sdr.evaluation.memory import TensorByteCounter
from avalanche_sdr.hat import (
    HATNet,
    HATPlugin,
    annealed_scale,
    attention_regulariser,
    embedding_gradient_factor,
    hat_strategy,
)


def _task0_logits(strategy, digits):
    x, _, t = experience_tensors(digits.test_stream[0])
    strategy.model.eval()
    with torch.no_grad():
        return strategy.model(x, t)


def _train_two_tasks(backbone, digits, epochs=2, s_max=400.0):
    """Train HAT on tasks 0 and 1; return (strategy, task-0 logits after task 0, after task 1).

    Checks that task 0's gates at ``s_max`` are binary: 1 in float32, or below 1e-6 (most
    are exactly 0) -- the condition under which HAT's protection is exact up to float32
    rounding (a unit with an intermediate gate is shared in proportion to it).

    The embeddings are Adam's here (``embedding_lr=None``): on this 16-unit net the
    paper's SGD step lets the regulariser close every unit of the second conv for task
    0, and then no unit is shared and the control test below could not fail."""
    torch.manual_seed(1)
    strategy = hat_strategy(backbone, epochs=epochs, train_mb_size=32, s_max=s_max, embedding_lr=None)
    strategy.train(digits.train_stream[0])
    mask = strategy.model.cumulative_mask
    assert bool(((mask < 1e-6) | (mask == 1)).all()), "pick a seed / s_max whose task-0 gates are binary"
    before = _task0_logits(strategy, digits)
    strategy.train(digits.train_stream[1])
    return strategy, before, _task0_logits(strategy, digits)


# --------------------------------------------------------------------- protection


def test_earlier_task_logits_are_unchanged_after_a_new_task(digits, tiny_backbone):
    backbone = tiny_backbone()
    strategy, before, after = _train_two_tasks(backbone, digits)
    model = strategy.model
    assert sorted(model.task_embeddings) == ["0", "1"]
    # Task 1 did train the shared backbone (on the units task 0 leaves free) ...
    assert (model.gates(1) > 0.5).any()
    assert (model.cumulative_mask < 0.5).any(), "task 0 should leave some units free"
    torch.testing.assert_close(after, before, rtol=0, atol=1e-6)


def test_without_the_conditioning_the_earlier_task_changes(digits, monkeypatch, tiny_backbone):
    """Control: the same training with the gradient conditioning and the update mask
    switched off changes task 0's logits, so the protection test above can fail."""
    monkeypatch.setattr(HATNet, "condition_gradients", lambda self: None)
    monkeypatch.setattr(HATNet, "mask_update", lambda self, before: None)
    _, before, after = _train_two_tasks(tiny_backbone(), digits)
    assert (after - before).abs().max() > 1e-3


def test_the_callers_backbone_is_not_modified(digits, tiny_backbone):
    backbone = tiny_backbone()
    state = {k: v.clone() for k, v in backbone.state_dict().items()}
    grads = [p.requires_grad for p in backbone.parameters()]
    backbone.train()
    strategy = hat_strategy(backbone, epochs=1, train_mb_size=64)
    strategy.train(digits.train_stream[0])
    assert all(torch.equal(state[k], v) for k, v in backbone.state_dict().items())
    assert [p.requires_grad for p in backbone.parameters()] == grads
    assert all(not m._forward_hooks for m in backbone.modules())
    assert backbone.training
    assert strategy.model.backbone is not backbone


# --------------------------------------------------------------------- gates and schedule


class _LinearE0(nn.Module):
    """[N, 1, 2, 2] -> [N, 3]: one Linear, the only gated module."""

    feature_dim = 3

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 3)

    def forward(self, x):
        return self.linear(x.flatten(1))


def _linear_net(s_max=400.0):
    torch.manual_seed(0)
    net = HATNet(_LinearE0(), s_max=s_max)
    net.task_embeddings["0"] = nn.Parameter(torch.tensor([0.01, -0.002, 0.5]))
    return net


def test_gates_at_evaluation_are_sigmoid_of_s_max_times_the_embedding():
    net = _linear_net().eval()
    x = torch.rand(5, 1, 2, 2)
    e = net.task_embeddings["0"]
    linear = net.backbone.linear
    expected = nn.functional.linear(x.flatten(1), linear.weight, linear.bias) * torch.sigmoid(400.0 * e)
    net._active = net.gates(0)
    try:
        features = net.backbone(x)
    finally:
        net._active = None
    torch.testing.assert_close(features, expected)
    torch.testing.assert_close(net.gates(0), torch.sigmoid(400.0 * e))
    net.train()
    net.s = 2.0
    torch.testing.assert_close(net.gates(0), torch.sigmoid(2.0 * e))


def test_the_backbone_needs_the_gates_of_a_task():
    with pytest.raises(RuntimeError, match="inside HATNet.forward"):
        _linear_net().backbone(torch.rand(2, 1, 2, 2))
    with pytest.raises(KeyError, match="train on an experience of that task first"):
        _linear_net().gates(3)


def test_scale_schedule_values():
    assert annealed_scale(1, 10, 400.0) == pytest.approx(1 / 400)
    assert annealed_scale(10, 10, 400.0) == pytest.approx(400.0)
    assert annealed_scale(2, 3, 400.0) == pytest.approx((1 / 400 + 400) / 2)
    assert annealed_scale(1, 1, 400.0) == 400.0


class _ScaleSpy(SupervisedPlugin):
    def __init__(self):
        super().__init__()
        self.epochs = []

    def before_training_epoch(self, strategy, *args, **kwargs):
        self.epochs.append([])

    def before_forward(self, strategy, *args, **kwargs):
        self.epochs[-1].append(strategy.model.s)


def test_the_plugin_anneals_s_over_every_epoch_and_evaluates_at_s_max(digits, tiny_backbone):
    strategy = hat_strategy(tiny_backbone(), epochs=2, train_mb_size=32, s_max=50.0)
    spy = _ScaleSpy()
    strategy.plugins.append(spy)
    strategy.train(digits.train_stream[0])
    n_batches = math.ceil(len(digits.train_stream[0].dataset) / 32)
    assert len(spy.epochs) == 2
    for scales in spy.epochs:
        assert len(scales) == n_batches
        assert scales[0] == pytest.approx(1 / 50)
        assert scales[-1] == pytest.approx(50.0)
    assert strategy.model.s == 50.0
    torch.testing.assert_close(strategy.model.cumulative_mask, torch.sigmoid(50.0 * strategy.model.embedding(0)))


# --------------------------------------------------------------------- regulariser and compensation


def test_regulariser_on_a_hand_made_case():
    gates = torch.tensor([1.0, 0.5, 0.0, 1.0])
    cumulative = torch.tensor([0.0, 0.0, 0.0, 1.0])
    # free units 0..2: c * (1 + 0.5 + 0) / 3
    assert attention_regulariser(gates, cumulative, 0.75).item() == pytest.approx(0.375)
    assert attention_regulariser(gates, torch.zeros(4), 0.75).item() == pytest.approx(0.75 * 2.5 / 4)
    assert attention_regulariser(gates, torch.ones(4), 0.75).item() == 0.0


def test_embedding_gradient_compensation():
    e = torch.tensor([0.0, 1.0, 5.0])
    factor = embedding_gradient_factor(e, 2.0, 400.0)
    expected = 400.0 / 2.0 * (torch.cosh(2.0 * e) + 1) / (torch.cosh(e) + 1)
    torch.testing.assert_close(factor, expected)
    assert torch.isfinite(embedding_gradient_factor(torch.tensor([6.0]), 400.0, 400.0)).all()  # cosh clamped


# --------------------------------------------------------------------- residual backbones, memory


def test_residual_backbone_is_gated_on_every_conv_and_protected(digits):
    from avalanche_sdr.models import cifar_resnet_backbone

    torch.manual_seed(0)
    backbone = cifar_resnet_backbone(depth=8, in_channels=1)
    # 240 gated units: at s_max = 400 a few embeddings within 17 / 400 of 0 would keep an
    # intermediate gate after one epoch; a larger s_max makes every gate binary.
    strategy, before, after = _train_two_tasks(backbone, digits, epochs=1, s_max=1e5)
    model = strategy.model
    convs = [m for m in model.backbone.modules() if isinstance(m, nn.Conv2d)]
    assert len(model._layers) == len(convs) == 7  # stem + 3 blocks x 2 convs
    assert model.n_units == sum(m.out_channels for m in convs)
    for bn_copy, bn in zip((m for m in model.backbone.modules() if isinstance(m, nn.BatchNorm2d)),
                           (m for m in backbone.modules() if isinstance(m, nn.BatchNorm2d))):
        assert not bn_copy.training and not bn_copy.weight.requires_grad
        assert torch.equal(bn_copy.running_mean, bn.running_mean)
    torch.testing.assert_close(after, before, rtol=0, atol=1e-6)


def test_memory_counts_embeddings_and_cumulative_mask(digits, tiny_backbone):
    strategy = hat_strategy(tiny_backbone(), epochs=1, train_mb_size=64)
    strategy.train(digits.train_stream[0])
    model = strategy.model
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an unknown plugin holding tensors would warn
        total = repository_memory_bytes(strategy)
    assert total == TensorByteCounter().add_module(model)
    names = {n for n, _ in model.named_parameters()} | {n for n, _ in model.named_buffers()}
    assert {"task_embeddings.0", "cumulative_mask"} <= names


def test_harness_row_builds_hat_with_the_presets_settings(digits, tiny_backbone):
    from benchmarks.table2.methods import METHODS, PRESETS

    strategy = METHODS["hat"].build(tiny_backbone(), digits, None, PRESETS["smoke"], evaluator=None, device="cpu",
                                    hat_c=0.5)
    plugin = next(p for p in strategy.plugins if isinstance(p, HATPlugin))
    assert plugin.c == 0.5
    assert strategy.model.s_max == baselines.HAT_S_MAX == PRESETS["smoke"].baselines.hat_s_max
    assert strategy.train_epochs == PRESETS["smoke"].baselines.epochs


@pytest.mark.parametrize("embedding_lr", [baselines.HAT_EMBEDDING_LR, None])
def test_embeddings_take_the_papers_sgd_step_not_adams(digits, embedding_lr, tiny_backbone):
    """By default the embeddings move by the plugin's SGD step and the strategy's Adam
    never sees them; with ``embedding_lr=None`` they are Adam's."""
    torch.manual_seed(1)
    strategy = hat_strategy(tiny_backbone(), epochs=1, train_mb_size=64, embedding_lr=embedding_lr)
    strategy.model.adaptation(digits.train_stream[0])
    start = strategy.model.embedding(0).detach().clone()
    strategy.train(digits.train_stream[0])
    e = strategy.model.embedding(0)
    assert not torch.equal(e.detach(), start)
    assert (e in strategy.optimizer.state) == (embedding_lr is None)
    assert float(e.abs().max()) <= 6.0


# --------------------------------------------------------------------- argument checks


@pytest.mark.parametrize("options, message", [
    (dict(epochs=0), "epochs must be a positive int"),
    (dict(epochs=1, lr=0.0), "lr must be a number > 0"),
    (dict(epochs=1, s_max=1.0), "s_max must be a number > 1"),
    (dict(epochs=1, c=-0.1), "c must be a number >= 0"),
    (dict(epochs=1, embedding_lr=0.0), "embedding_lr must be a number > 0"),
    (dict(epochs=1, train_mb_size=0), "train_mb_size must be a positive int"),
    (dict(epochs=1, eval_mb_size=2.5), "eval_mb_size must be a positive int"),
])
def test_bad_arguments_raise_value_error(options, message, tiny_backbone):
    with pytest.raises(ValueError, match=message):
        baselines.hat_strategy(tiny_backbone(), **options)


def test_backbones_hat_cannot_gate_raise_value_error():
    with pytest.raises(ValueError, match="feature_dim"):
        HATNet(nn.Linear(3, 3))
    no_layers = nn.Sequential(nn.ReLU())
    no_layers.feature_dim = 3
    with pytest.raises(ValueError, match="Conv2d and Linear"):
        HATNet(no_layers)
