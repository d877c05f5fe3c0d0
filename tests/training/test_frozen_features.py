"""Head-only experiences train on features computed once (training/frozen_features.py).

The stream: the tiny 8-task prototype stream (4 groups x 2 splits, 3 warm starts) with a
ground-truth detector, so its repeats reuse an entry head-only; one run with the
features path, one with the per-epoch path forced, from the same seed.
"""
import warnings

import pytest
import torch
import torchvision.transforms as T
from avalanche.core import SupervisedPlugin
from avalanche.evaluation import PluginMetric
from avalanche.evaluation.metrics import accuracy_metrics
from avalanche.evaluation.metrics import MAC_metrics
from avalanche.training import plugins as P
from avalanche.training.plugins import EvaluationPlugin

from avalanche_sdr import SDRStrategy, build_sdr_model
from avalanche_sdr._batching import eval_batch_size
from avalanche_sdr.benchmarks import ImageArrayDataset, mixed_similarity_benchmark
from avalanche_sdr.models import small_cnn_backbone
from avalanche_sdr.models.heads import UntrainedTaskWarning
from avalanche_sdr.training import SDRSettings
from avalanche_sdr.training.frozen_features import FrozenFeaturesPlugin, fixed_inputs, plugin_reads_inputs


SETTINGS = SDRSettings(new_task_epochs=2, reuse_epochs=3, train_mb_size=16, eval_mb_size=64, lr_milestones=(1,))
TOLERANCE = 1e-5
"""Largest difference allowed between the two paths' head weights: the features of the
per-epoch path come from mini-batches of 16, the features path's from one pass of another
batch size, so a convolution may round differently; nothing else differs."""

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


GROUPS = [[0, 1], [2, 3], [4, 5], [6, 7]]


def _dataset(n_per_class, seed):
    """8 classes of 8x8 images: a fixed random prototype per class plus noise."""
    prototypes = torch.rand(8, 1, 8, 8, generator=torch.Generator().manual_seed(123)) > 0.5
    noise = 0.1 * torch.randn(8, n_per_class, 1, 8, 8, generator=torch.Generator().manual_seed(seed))
    images = (prototypes.float().unsqueeze(1) * 0.8 + 0.1 + noise).clamp(0, 1).flatten(0, 1)
    return ImageArrayDataset((images * 255).to(torch.uint8), torch.arange(8).repeat_interleave(n_per_class))


def _stream(train_transform=None):
    return mixed_similarity_benchmark(_dataset(30, seed=1), _dataset(10, seed=2), GROUPS,
                                      n_splits=2, seed=0, train_transform=train_transform)


@pytest.fixture(scope="module")
def stream():
    return _stream()


def _repeats(stream):
    """Positions of the tasks whose group came before: the ground truth reuses them head-only."""
    groups = list(stream.stream_groups)
    return [i for i, g in enumerate(groups) if g in groups[:i]]


class _Recorder(SupervisedPlugin):
    """Records the hooks it sees during training, the shape of ``mb_x`` at every forward
    and the mini-batch labels (the loader's draws); reads no image (says so)."""

    uses_training_images = False

    def __init__(self):
        super().__init__()
        self.hooks, self.shapes, self.labels = [], [], []

    def __getattribute__(self, name):
        attribute = super().__getattribute__(name)
        if (name.startswith("before_") or name.startswith("after_")) and "eval" not in name:
            hooks = super().__getattribute__("hooks")

            def record(strategy, **kwargs):
                hooks.append(name)
                if name == "after_forward":
                    self.shapes.append(tuple(strategy.mb_x.shape))
                    self.labels.append(strategy.mb_y.clone())
                return attribute(strategy, **kwargs)
            return record
        return attribute


def _run(stream, ground_truth, *, enabled=True, plugins=(), experiences=None, evaluator=None, eval_streams=(),
         **kwargs):
    """Train the stream (or ``experiences``) from seed 0; count E0's forward passes per experience."""
    torch.manual_seed(0)
    model = build_sdr_model(small_cnn_backbone(in_channels=1, widths=(8, 16, 16)), in_channels=1, image_size=8,
                            generator=None)
    strategy = SDRStrategy(model=model, settings=SETTINGS, reuse="head", detector=ground_truth(stream.stream_groups),
                           plugins=list(plugins),
                           evaluator=evaluator or EvaluationPlugin(accuracy_metrics(experience=True), loggers=[]),
                           **kwargs)
    strategy.frozen_features.enabled = enabled
    passes = []
    counter = model.encoder.register_forward_hook(lambda *args: passes.__setitem__(-1, passes[-1] + 1))
    for experience in (stream.train_stream if experiences is None else experiences):
        passes.append(0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UntrainedTaskWarning)
            strategy.train(experience, eval_streams=list(eval_streams))
    counter.remove()
    strategy.passes = passes
    return strategy


def _heads(strategy):
    return {k: v.clone() for k, v in strategy.model.state_dict().items() if k.startswith("heads.")}


@pytest.fixture(scope="module")
def both(stream, ground_truth):
    return _run(stream, ground_truth), _run(stream, ground_truth, enabled=False)


def test_a_head_only_repeat_computes_its_features_once(stream, both):
    fast, slow = both
    reused = [i for i, r in enumerate(fast.detection_records) if r.decision == "reuse"]
    assert reused == _repeats(stream) and len(reused) == 4
    assert fast.frozen_features.feature_passes == len(reused)
    n = len(stream.train_stream[reused[0]].dataset)
    batch = eval_batch_size("cpu", fast.frozen_features.batch_size)
    for i in reused:
        # one pass over the task's images; the per-epoch path runs E_m on every mini-batch of every epoch
        assert fast.passes[i] == -(-n // batch)
        assert slow.passes[i] == SETTINGS.reuse_epochs * -(-n // SETTINGS.train_mb_size)
    new = [i for i in range(8) if i not in reused]
    assert [fast.passes[i] for i in new] == [slow.passes[i] for i in new]  # new entries train as before
    assert slow.frozen_features.reason.startswith("disabled")


def test_same_decisions_heads_and_accuracies_as_the_per_epoch_path(stream, both):
    fast, slow = both
    assert [r.to_dict() | {"detection_seconds": 0} for r in fast.detection_records] == \
           [r.to_dict() | {"detection_seconds": 0} for r in slow.detection_records]
    heads_fast, heads_slow = _heads(fast), _heads(slow)
    assert heads_fast.keys() == heads_slow.keys()
    for key in heads_fast:
        assert torch.allclose(heads_fast[key], heads_slow[key], atol=TOLERANCE, rtol=0), key
    for a, b in zip(fast.sdr.epoch_accuracies, slow.sdr.epoch_accuracies):
        assert a == pytest.approx(b, abs=1e-9)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UntrainedTaskWarning)
        results = [strategy.eval(stream.test_stream) for strategy in both]
    accuracies = [{k: v for k, v in r.items() if k.startswith("Top1_Acc_Exp")} for r in results]
    assert len(accuracies[0]) == 8 and accuracies[0] == pytest.approx(accuracies[1], abs=1e-9)


def test_evaluation_after_training_sees_images_and_the_model_forward(stream, both):
    fast, _ = both
    assert not fast.frozen_features.active
    experience = stream.test_stream[_repeats(stream)[0]]
    task = experience.task_label
    x = torch.stack([experience.dataset[i][0] for i in range(4)])
    fast.model.eval()
    expected = fast.model.heads.logits(task, fast.model.features(x, fast.model.entry_of(task)))
    assert torch.equal(fast.model(x, task), expected)


def test_hooks_and_mb_x_of_a_head_only_repeat(stream, ground_truth):
    """The hooks a user's plugin sees (docs/plugins.rst), the same as on the per-epoch
    path; ``mb_x`` holds features [B, D] on the features path, images otherwise."""
    seen = {}
    for enabled in (True, False):
        recorder = _Recorder()
        strategy = _run(stream, ground_truth, enabled=enabled, plugins=[recorder],
                        experiences=stream.train_stream[:_repeats(stream)[0] + 1])
        seen[enabled] = recorder
        assert strategy.frozen_features.feature_passes == (1 if enabled else 0)
    fast, slow = seen[True], seen[False]
    assert fast.hooks == slow.hooks
    repeat = fast.hooks[len(fast.hooks) - fast.hooks[::-1].index("before_training") - 1:]
    n_batches = -(-len(stream.train_stream[_repeats(stream)[0]].dataset) // SETTINGS.train_mb_size)
    iteration = ["before_training_iteration", "before_forward", "after_forward", "before_backward",
                 "after_backward", "before_update", "after_update", "after_training_iteration"]
    assert repeat == (["before_training", "before_train_dataset_adaptation", "after_train_dataset_adaptation",
                       "before_training_exp"]
                      + (["before_training_epoch"] + iteration * n_batches + ["after_training_epoch"])
                      * SETTINGS.reuse_epochs
                      + ["after_training_exp", "after_training"])
    per_repeat = SETTINGS.reuse_epochs * n_batches
    feature_dim = fast.shapes[-1][1]
    assert all(len(s) == 2 for s in fast.shapes[-per_repeat:])
    assert all(len(s) == 4 for s in slow.shapes[-per_repeat:])
    assert [s[0] for s in fast.shapes] == [s[0] for s in slow.shapes] and feature_dim > 1
    assert all(torch.equal(a, b) for a, b in zip(fast.labels, slow.labels))  # the loader drew the same samples


def test_augmentation_keeps_the_per_epoch_path(ground_truth):
    flipped = _stream(train_transform=T.RandomHorizontalFlip())
    assert not fixed_inputs(flipped.train_stream[0].dataset.train())
    assert fixed_inputs(flipped.train_stream[0].dataset.eval())
    strategy = _run(flipped, ground_truth, experiences=flipped.train_stream[:_repeats(flipped)[0] + 1])
    assert strategy.detection_records[-1].decision == "reuse"
    assert strategy.frozen_features.feature_passes == 0
    assert "'train' transform" in strategy.frozen_features.reason
    n = len(flipped.train_stream[_repeats(flipped)[0]].dataset)
    assert strategy.passes[-1] == SETTINGS.reuse_epochs * -(-n // SETTINGS.train_mb_size)


@pytest.mark.parametrize("make, fast", [
    (lambda: P.EWCPlugin(ewc_lambda=1.0), True),
    (lambda: P.ReplayPlugin(mem_size=20), False),
    (lambda: P.LwFPlugin(), False),
    (lambda: SupervisedPlugin(), False),
])
def test_user_plugins_that_may_read_images_keep_the_per_epoch_path(stream, ground_truth, make, fast):
    plugin = make()
    assert plugin_reads_inputs(plugin) is not fast
    strategy = _run(stream, ground_truth, plugins=[plugin], experiences=stream.train_stream[:_repeats(stream)[0] + 1])
    assert strategy.detection_records[-1].decision == "reuse"
    assert strategy.frozen_features.feature_passes == int(fast)
    if not fast:
        assert type(plugin).__name__ in strategy.frozen_features.reason


class _BatchMetric(PluginMetric):
    """A user's metric (outside Avalanche and SDR): it may read ``mb_x``."""

    def result(self):
        return None

    def reset(self):
        pass


def test_metrics_that_may_read_mb_x_keep_the_per_epoch_path(stream, ground_truth):
    assert plugin_reads_inputs(EvaluationPlugin(MAC_metrics(minibatch=True), loggers=[]))  # feeds mb_x to the model
    assert not plugin_reads_inputs(EvaluationPlugin(accuracy_metrics(minibatch=True, epoch=True), loggers=[]))
    evaluator = EvaluationPlugin(accuracy_metrics(experience=True), _BatchMetric(), loggers=[])
    assert plugin_reads_inputs(evaluator)
    strategy = _run(stream, ground_truth, experiences=stream.train_stream[:_repeats(stream)[0] + 1],
                    evaluator=evaluator)
    assert strategy.frozen_features.feature_passes == 0 and "EvaluationPlugin" in strategy.frozen_features.reason
    declared = _BatchMetric()
    declared.uses_training_images = False
    assert not plugin_reads_inputs(EvaluationPlugin(declared, loggers=[]))


def test_periodic_evaluation_during_a_head_only_repeat_sees_images(stream, ground_truth):
    shapes = []
    probe = type("Probe", (SupervisedPlugin,), {
        "uses_training_images": False,
        "before_eval_forward": lambda self, strategy, **kw: shapes.append(tuple(strategy.mb_x.shape))})()
    first = _repeats(stream)[0]
    strategy = _run(stream, ground_truth, plugins=[probe], experiences=stream.train_stream[:first + 1], eval_every=1,
                    eval_streams=[stream.test_stream[first]])
    assert strategy.frozen_features.feature_passes == 1
    assert len(shapes) > 5 and all(len(s) == 4 for s in shapes)


def test_a_task_label_trained_again_trains_its_head_on_features(stream, ground_truth):
    first = stream.train_stream[0]
    strategy = _run(stream, ground_truth, experiences=[first, first])
    assert [r.rule for r in strategy.detection_records] == ["warm_start", "known_task"]
    assert strategy.frozen_features.feature_passes == 1 and strategy.frozen_features.reason is None
    assert strategy.passes[1] == -(-len(first.dataset) // eval_batch_size("cpu", strategy.frozen_features.batch_size))


def test_the_features_plugin_needs_the_sdr_plugin():
    with pytest.raises(TypeError, match="SDRPlugin"):
        FrozenFeaturesPlugin(object())
