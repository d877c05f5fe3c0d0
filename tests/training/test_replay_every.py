"""``LearningReuse(replay_every=k)``: the guard's replay joins one update mini-batch in k
(issue #45, item 3: the replay is a large share of an update step).

Prototype stream of conftest.py; decisions from the ``ground_truth`` fixture.
"""
import pytest
import torch

from avalanche_sdr import LearningReuse
from avalanche_sdr.training import learning_reuse
from avalanche_sdr.training.checkpoint import upgrade_strategy_fingerprint

from test_learning_reuse import _strategy, _train  # tests/training is on sys.path (pytest prepend mode)
from test_learning_reuse_update import PLAIN, _repeat_of_warm_start


def _update_steps(strategy, stream, task, monkeypatch):
    """Train ``task`` (an update of its entry); return ``(update mini-batches, the 0-based ones that replayed)``."""
    replayed, steps = [], []
    original = learning_reuse.ExemplarReplay.loss

    def counting(self, *args, **kwargs):
        replayed.append(len(steps) - 1)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(learning_reuse.ExemplarReplay, "loss", counting)
    hook = strategy.sdr.before_training_iteration

    def counted(strategy_, **kwargs):
        steps.append(1)
        return hook(strategy_, **kwargs)

    strategy.sdr.before_training_iteration = counted
    strategy.train(stream.train_stream[task])
    assert strategy.sdr.reuse_records[-1].entry_updated
    return len(steps), replayed


@pytest.mark.parametrize("every", [1, 3])
def test_the_replay_joins_one_update_mini_batch_in_k(prototype_stream, ground_truth, monkeypatch, every):
    repeat, _ = _repeat_of_warm_start(prototype_stream)
    strategy = _strategy(prototype_stream, ground_truth, **dict(PLAIN, replay_every=every))
    _train(strategy, prototype_stream, upto=3)
    steps, replayed = _update_steps(strategy, prototype_stream, repeat, monkeypatch)
    assert steps > every  # several mini-batches, so the spacing shows
    assert replayed == list(range(0, steps, every))


def test_a_spaced_replay_trains_otherwise_as_the_default(prototype_stream, ground_truth):
    """The same update with replay_every=1 given explicitly is bit-identical to the default,
    and a spaced replay changes the entry (the option acts)."""
    repeat, creator = _repeat_of_warm_start(prototype_stream)
    entries = []
    for options in ({}, {"replay_every": 1}, {"replay_every": 4}):
        strategy = _strategy(prototype_stream, ground_truth, **dict(PLAIN, **options))
        _train(strategy, prototype_stream, upto=3)
        strategy.train(prototype_stream.train_stream[repeat])
        model = strategy.model
        entries.append([p.detach().clone() for p in model.encoder.entry_parameters(model.entry_of(creator))])
    assert all(torch.equal(a, b) for a, b in zip(entries[0], entries[1]))
    assert not all(torch.equal(a, b) for a, b in zip(entries[0], entries[2]))


def test_replay_every_refusals_and_config():
    for bad in (0, -1, 1.5, True, "2"):
        with pytest.raises(ValueError, match="replay_every"):
            LearningReuse(replay_every=bad)
    with pytest.raises(ValueError, match="replay_every=2 spaces the guard's replay"):
        LearningReuse(replay_every=2, guard=False)
    with pytest.raises(ValueError, match="guard_exemplars > 0"):
        LearningReuse(replay_every=2, guard_exemplars=0)
    assert LearningReuse(guard=False).replay_every == 1
    assert LearningReuse().config()["replay_every"] == 1
    assert LearningReuse(replay_every=5).config()["replay_every"] == 5
    assert LearningReuse(replay_every=5) != LearningReuse()


def test_a_fingerprint_from_before_the_option_loads_with_its_default():
    saved = {"reuse": {k: v for k, v in LearningReuse().config().items() if k != "replay_every"}}
    assert upgrade_strategy_fingerprint(saved)["reuse"] == LearningReuse().config()
    current = {"reuse": dict(LearningReuse(replay_every=3).config())}
    assert upgrade_strategy_fingerprint(current) == current
