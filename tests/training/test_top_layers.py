"""``LearningReuse(top_layers=k)``: an update trains only the top of its entry (issue #45,
item 3): the adapters of the last k adapted convolutions and the BatchNorm copies after the
first of them, with the head; everything below stays bit-identical, running statistics
included.

Prototype stream of conftest.py (a 2-convolution small CNN); decisions from the
``ground_truth`` fixture.
"""
import pytest
import torch
from torch import nn

from avalanche_sdr import LearningReuse, build_sdr_model, small_cnn_backbone
from avalanche_sdr.models.eft import EFTAdapter
from avalanche_sdr.training.checkpoint import upgrade_strategy_fingerprint

from test_learning_reuse import _strategy, _train  # tests/training is on sys.path (pytest prepend mode)
from test_learning_reuse_update import PLAIN, _imbalanced, _repeat_of_warm_start


def _tensors(modules):
    return [t.detach().clone() for m in modules for t in list(m.parameters()) + list(m.buffers())]


def _same(a, b):
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b))


def test_top_entry_modules_follow_module_order():
    model = build_sdr_model(small_cnn_backbone(in_channels=1, widths=(8, 16, 32)), in_channels=1, image_size=8,
                            generator=None)
    model.create_entry(0)
    encoder = model.encoder
    every = encoder.entry_modules(0)
    one = encoder.top_entry_modules(0, 1)
    # the last convolution's adapter and the BatchNorm copy after it
    assert [type(m) for m in one] == [EFTAdapter, nn.BatchNorm2d]
    assert one[0] is encoder.convs[-1].adapters["0"] and one[1] is encoder.norms[-1].copies["0"]
    two = encoder.top_entry_modules(0, 2)
    assert [m.weight.shape[0] if isinstance(m, nn.BatchNorm2d) else None for m in two] == [None, 16, None, 32]
    assert {id(m) for m in encoder.top_entry_modules(0, 3)} == {id(m) for m in every}
    assert {id(m) for m in encoder.top_entry_modules(0, 99)} == {id(m) for m in every}
    with pytest.raises(ValueError, match="convolutions"):
        encoder.top_entry_modules(0, 0)


def test_an_update_of_the_top_leaves_the_lower_entry_exactly_as_it_was(prototype_stream, ground_truth):
    repeat, creator = _repeat_of_warm_start(prototype_stream)
    strategy = _strategy(prototype_stream, ground_truth, lr=0.01, **dict(PLAIN, top_layers=1))
    _train(strategy, prototype_stream, upto=3)
    model = strategy.model
    entry = model.entry_of(creator)
    top = model.encoder.top_entry_modules(entry, 1)
    lower = [m for m in model.encoder.entry_modules(entry) if all(m is not t for t in top)]
    assert lower and top
    lower_before, top_before = _tensors(lower), _tensors(top)
    strategy.train(_imbalanced(prototype_stream, repeat))  # the plain update would move the statistics
    assert strategy.sdr.reuse_records[-1].entry_updated and not strategy.sdr.reuse_records[-1].update_balanced
    assert _same(_tensors(lower), lower_before)
    assert not _same(_tensors(top), top_before)
    assert not any(p.requires_grad for p in model.parameters())  # frozen again after the experience


def test_an_update_of_the_whole_entry_moves_the_lower_entry(prototype_stream, ground_truth):
    """The check above can fail: without top_layers the same update moves the lower layers."""
    repeat, creator = _repeat_of_warm_start(prototype_stream)
    strategy = _strategy(prototype_stream, ground_truth, lr=0.01, **PLAIN)
    _train(strategy, prototype_stream, upto=3)
    model = strategy.model
    entry = model.entry_of(creator)
    top = model.encoder.top_entry_modules(entry, 1)
    lower = [m for m in model.encoder.entry_modules(entry) if all(m is not t for t in top)]
    before = _tensors(lower)
    strategy.train(_imbalanced(prototype_stream, repeat))
    assert strategy.sdr.reuse_records[-1].entry_updated
    assert not _same(_tensors(lower), before)


def test_the_optimizer_holds_the_top_and_the_head_only(prototype_stream, ground_truth):
    repeat, creator = _repeat_of_warm_start(prototype_stream)
    strategy = _strategy(prototype_stream, ground_truth, **dict(PLAIN, top_layers=1))
    _train(strategy, prototype_stream, upto=3)
    seen = {}

    def record(**kwargs):
        seen["params"] = {id(p) for group in strategy.optimizer.param_groups for p in group["params"]}

    strategy.sdr.before_training_exp = lambda strategy_, **kwargs: record()
    strategy.train(prototype_stream.train_stream[repeat])
    model = strategy.model
    entry = model.entry_of(creator)
    expected = {id(p) for m in model.encoder.top_entry_modules(entry, 1) for p in m.parameters()}
    expected |= {id(p) for p in model.heads.module(creator).parameters()}
    assert seen["params"] == expected


def test_a_new_entry_still_trains_every_layer(prototype_stream, ground_truth):
    strategy = _strategy(prototype_stream, ground_truth, **dict(PLAIN, top_layers=1))
    model = strategy.model
    strategy.train(prototype_stream.train_stream[0])
    entry = model.entry_of(0)
    # trained from identity adapters: every adapter moved, the lowest included
    lowest = model.encoder.convs[0].adapters[str(entry)]
    fresh = build_sdr_model(small_cnn_backbone(in_channels=1, widths=(16, 32)), in_channels=1, image_size=8,
                            generator=None)
    fresh.create_entry(0)
    assert not _same(_tensors([lowest]), _tensors([fresh.encoder.convs[0].adapters["0"]]))


def test_top_layers_refusals_and_config():
    for bad in (0, -1, 1.5, True, "1"):
        with pytest.raises(ValueError, match="top_layers"):
            LearningReuse(top_layers=bad)
    assert LearningReuse().top_layers is None
    assert LearningReuse(top_layers=2).config()["top_layers"] == 2


def test_trainable_for_refuses_parameters_of_another_entry_and_changes_nothing():
    model = build_sdr_model(small_cnn_backbone(in_channels=1, widths=(8, 16)), in_channels=1, image_size=8,
                            generator=None)
    for task in (0, 1):
        model.create_entry(task)
        model.heads.add(task, 2)
    flags = [p.requires_grad for p in model.parameters()]
    with pytest.raises(ValueError, match="entry_parameters must be parameters of task 0's entry"):
        model.trainable_for(0, True, entry_parameters=model.encoder.entry_parameters(model.entry_of(1)))
    with pytest.raises(ValueError, match="train_encoder_entry=True"):
        model.trainable_for(0, False, entry_parameters=[])
    assert [p.requires_grad for p in model.parameters()] == flags
    chosen = model.encoder.entry_parameters(model.entry_of(0))[:2]
    params = model.trainable_for(0, True, entry_parameters=chosen)
    assert {id(p) for p in params} == {id(p) for p in list(model.heads.module(0).parameters()) + chosen}
    assert {id(p) for p in model.parameters() if p.requires_grad} == {id(p) for p in params}


def test_a_fingerprint_from_before_an_option_loads_with_its_default():
    saved = {"reuse": {k: v for k, v in LearningReuse().config().items() if k != "top_layers"}}
    assert upgrade_strategy_fingerprint(saved)["reuse"] == LearningReuse().config()
    other = {"reuse": dict(LearningReuse(top_layers=1).config())}
    assert upgrade_strategy_fingerprint(other) == other  # a current fingerprint is unchanged
    unknown = {"reuse": {"name": "accumulate", "warmup": 3}}
    assert upgrade_strategy_fingerprint(unknown) == unknown  # an option this version lacks: left to refuse
