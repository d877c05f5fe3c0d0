"""The reuse is an object behind a registry, as detectors and routers are (issue #45, item 1).

- the registry's names are the command lines' (``vocabulary.REUSE_MODES``);
- a name builds the reuse with its defaults, an object is copied: the strategy never
  keeps or changes the caller's object;
- a reuse of your own is one class, defined here: the plugin calls its hooks and it runs a
  stream with no change to the library;
- a reuse's options reach the checkpoint's fingerprint through ``config()``: an option
  added to a reuse needs no change outside the reuse's class (here a subclass of the
  learning reuse adds one), and a checkpoint taken with another value is refused.

Prototype stream of conftest.py; decisions from the ``ground_truth`` fixture.
"""
import copy

import pytest
import torch
from avalanche.evaluation.metrics import accuracy_metrics
from avalanche.training.plugins import EvaluationPlugin

from avalanche_sdr import HeadReuse, LearningReuse, NoLossReuse, REUSE_TYPES, SDRSettings, SDRStrategy, build_sdr_model
from avalanche_sdr.models import small_cnn_backbone
from avalanche_sdr.training import CheckpointMismatchError, make_reuse
from avalanche_sdr.training.checkpoint import strategy_fingerprint
from avalanche_sdr.training.reuse import Reuse, ReuseRecord
from avalanche_sdr.vocabulary import REUSE_MODES

pytestmark = pytest.mark.usefixtures("one_thread")

SHORT = SDRSettings(new_task_epochs=2, lr_milestones=(1,), reuse_epochs=2, reuse_lr=0.01, train_mb_size=32)


def _strategy(stream, truth, reuse, **kwargs):
    torch.manual_seed(0)
    model = build_sdr_model(small_cnn_backbone(in_channels=1, widths=(8, 16)), in_channels=1, image_size=8,
                            generator=None)
    return SDRStrategy(model=model, settings=SHORT, reuse=reuse, detector=truth(stream.stream_groups),
                       evaluator=EvaluationPlugin(accuracy_metrics(experience=True), loggers=[]), **kwargs)


def _run(strategy, stream, upto=None):
    for experience in list(stream.train_stream)[:upto]:
        strategy.train(experience, eval_streams=[])
    return strategy


def _heads(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_the_registry_names_are_the_command_lines():
    assert tuple(REUSE_TYPES) == REUSE_MODES
    assert [cls.name for cls in REUSE_TYPES.values()] == list(REUSE_MODES)
    assert (HeadReuse, LearningReuse, NoLossReuse) == tuple(REUSE_TYPES.values())


def test_make_reuse_builds_names_and_copies_objects():
    assert make_reuse("head") == HeadReuse() and make_reuse("accumulate") == LearningReuse()
    mine = LearningReuse(epochs=3)
    made = make_reuse(mine)
    assert made == mine and made is not mine
    assert made != LearningReuse() and NoLossReuse(epochs=2) != NoLossReuse()
    with pytest.raises(ValueError, match=r"unknown reuse 'both'; pass one of \['head', 'accumulate', 'no_loss'\]"):
        make_reuse("both")
    with pytest.raises(TypeError, match="reuse must be a name"):
        make_reuse(LearningReuse)  # the class, not an object
    assert repr(NoLossReuse()) == "NoLossReuse(lr=0.001, replay_exemplars=5, epochs=3)"


def test_make_reuse_builds_a_configuration_the_form_config_returns():
    for reuse in (HeadReuse(), LearningReuse(), LearningReuse(top_layers=2, replay_every=4, balance="always"),
                  NoLossReuse(epochs=2)):
        config = reuse.config()
        made = make_reuse(config)
        assert made == reuse and made.config() == config  # the round trip: a results file's record rebuilds it
    options = {"name": "accumulate", "epochs": 3}
    assert make_reuse(options) == LearningReuse(epochs=3) and options == {"name": "accumulate", "epochs": 3}
    with pytest.raises(ValueError, match="needs its 'name'"):
        make_reuse({"epochs": 3})
    with pytest.raises(ValueError, match="unknown reuse 'both'"):
        make_reuse({"name": "both"})
    with pytest.raises(ValueError, match=r"'head' \(HeadReuse\) does not take \['epochs'\]; its options are \[\]"):
        make_reuse({"name": "head", "epochs": 3})
    with pytest.raises(ValueError, match="epochs"):  # the constructor's own check
        make_reuse({"name": "accumulate", "epochs": 0})


@pytest.mark.parametrize("bad, message", [
    (dict(lr=0), r"lr must be a positive number \(Adam's learning rate of an update\), got 0"),
    (dict(replay_exemplars=-1), "replay_exemplars"),
    (dict(epochs=0), "epochs"),
])
def test_no_loss_options_are_checked(bad, message):
    with pytest.raises(ValueError, match=message):
        NoLossReuse(**bad)


def test_the_strategy_works_on_its_own_copy(prototype_stream, ground_truth):
    mine = LearningReuse(epochs=1)
    before = copy.deepcopy(mine.__dict__)
    strategy = _run(_strategy(prototype_stream, ground_truth, mine), prototype_stream)
    assert strategy.sdr.reuse is not mine and strategy.sdr.reuse == mine
    assert any(r.entry_updated for r in strategy.sdr.reuse_records)
    assert mine.__dict__.keys() == before.keys() and all(mine.__dict__[k] == before[k] for k in before)


class CountingReuse(HeadReuse):
    """The head-only reuse, counting the hooks the plugin calls (a reuse of one's own)."""

    name = "counting"

    def __init__(self):
        self.calls = {}

    def _count(self, hook):
        self.calls[hook] = self.calls.get(hook, 0) + 1

    def start(self):
        self._count("start")

    def new_entry(self, model, entry, data, settings):
        self._count("new_entry")

    def decide(self, model, record, data):
        self._count("decide")
        return record, ReuseRecord()

    def repeat(self, model, record, data):
        self._count("repeat")

    def begin(self, model, record, reuse, data, settings):
        self._count("begin")

    def loss(self, strategy):
        self._count("loss")

    def end(self, model, record, reuse, data, settings):
        self._count("end")


def test_a_reuse_of_ones_own_runs_a_stream_through_the_hooks(prototype_stream, ground_truth):
    counting = _run(_strategy(prototype_stream, ground_truth, CountingReuse()), prototype_stream)
    head = _run(_strategy(prototype_stream, ground_truth, "head"), prototype_stream)
    decisions = [r.decision for r in counting.detection_records]
    repeats, new = decisions.count("reuse"), len(decisions) - decisions.count("reuse")
    calls = counting.sdr.reuse.calls
    assert repeats >= 2 and calls["start"] == len(decisions) and calls["new_entry"] == new
    assert calls["decide"] == calls["repeat"] == calls["begin"] == calls["end"] == repeats
    assert calls["loss"] > 0  # every repeat's mini-batch
    def decisions_of(strategy):  # the records less their seconds
        return [{k: v for k, v in r.to_dict().items() if k != "detection_seconds"} for r in strategy.detection_records]

    assert decisions_of(counting) == decisions_of(head)
    state, reference = _heads(counting.model), _heads(head.model)
    assert state.keys() == reference.keys() and all(torch.equal(state[k], reference[k]) for k in state)
    assert isinstance(counting.sdr.reuse, Reuse)


class WarmerLearningReuse(LearningReuse):
    """The learning reuse with one option more (``warmup``: an update's first epoch at a
    tenth of its rate), added in this class alone."""

    OPTIONS = LearningReuse.OPTIONS + ("warmup",)

    def __init__(self, *, warmup: bool = False, **options):
        super().__init__(**options)
        self.warmup = bool(warmup)
        self._epoch = 0

    def start(self):
        super().start()
        self._epoch = 0

    def train_lr(self, reuse, settings):
        lr = super().train_lr(reuse, settings)
        return lr / 10 if self.warmup and reuse.entry_updated and self._epoch == 0 else lr

    def epoch_done(self, model):
        self._epoch += 1
        return super().epoch_done(model)


def test_a_new_option_reaches_the_fingerprint_and_guards_the_checkpoint(prototype_stream, ground_truth, tmp_path):
    strategy = _strategy(prototype_stream, ground_truth, WarmerLearningReuse(warmup=True), checkpoint_dir=tmp_path)
    assert strategy_fingerprint(strategy)["reuse"] == dict(LearningReuse().config(), warmup=True)
    _run(strategy, prototype_stream, upto=5)
    other = _strategy(prototype_stream, ground_truth, WarmerLearningReuse(warmup=False), checkpoint_dir=tmp_path)
    with pytest.raises(CheckpointMismatchError, match="strategy.reuse.warmup"):
        other.restore_checkpoint()
    same = _strategy(prototype_stream, ground_truth, WarmerLearningReuse(warmup=True), checkpoint_dir=tmp_path)
    assert same.restore_checkpoint() == 5
