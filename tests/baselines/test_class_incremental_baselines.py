"""The class-incremental baselines (``avalanche_sdr/baselines.py``): Online EWC, ER and
joint training with ONE shared head over the original class ids of a benchmark built with
``original_class_ids=True``, task labels ignored.

Fast: the digits stream (~125 8x8 images a task), a tiny backbone, one epoch.
"""
from types import SimpleNamespace

import pytest
import torch
from avalanche.models import MultiTaskModule
from avalanche.training import JointTraining

from avalanche_sdr import baselines
from avalanche_sdr.benchmarks import MixedDigits, experience_tensors
from avalanche_sdr.evaluation import repository_memory_bytes
from avalanche_sdr.evaluation.memory import TensorByteCounter


@pytest.fixture(scope="module")
def original():
    return MixedDigits(seed=0, original_class_ids=True)


def _evaluator():
    from avalanche.evaluation.metrics import accuracy_metrics
    from avalanche.training.plugins import EvaluationPlugin

    return EvaluationPlugin(accuracy_metrics(stream=True), loggers=[])


def _accuracy(model, stream) -> float:
    """Top-1 accuracy of ``model`` (no task labels) on the original ids of ``stream``."""
    model.eval()
    correct = total = 0
    with torch.no_grad():
        for exp in stream:
            x, y, _ = experience_tensors(exp)
            correct += int((model(x).argmax(1) == y).sum())
            total += len(y)
    return correct / total


def test_head_size_is_the_number_of_original_ids(original):
    assert baselines.class_incremental_classes(original.train_stream) == original.n_classes_total == 10
    first = original.train_stream[:2]  # digits 4, 5 then 6, 7
    assert baselines.class_incremental_classes(first) == 8
    assert baselines.class_incremental_classes(list(original.test_stream)) == 10


def test_local_labels_are_refused_with_advice(digits, tiny_backbone):
    for stream in (digits.train_stream, list(digits.train_stream), digits.valid_stream):
        with pytest.raises(ValueError, match=r"local to each task.*original_class_ids=True"):
            baselines.class_incremental_classes(stream)
    settings = baselines.BaselineSettings(epochs=1)
    for name in baselines.CLASS_INCREMENTAL_BASELINES:
        with pytest.raises(ValueError, match="original_class_ids=True"):
            baselines.class_incremental_strategy(name, tiny_backbone(), digits.train_stream, settings)


def _experience(classes, group=None):
    """A stand-in experience whose data set has no ``targets`` (labels from its class list)."""
    exp = SimpleNamespace(dataset=object(), classes_in_this_experience=list(classes))
    if group is not None:
        exp.group = group
    return exp


def test_collision_rules_without_a_mixed_stream():
    # Overlapping label sets that differ: local labels of tasks with 2 and 3 classes.
    with pytest.raises(ValueError, match=r"class id 0 is in experience 0 \(classes \[0, 1\].*experience 1"):
        baselines.class_incremental_classes([_experience([0, 1]), _experience([0, 1, 2])])
    # Same label set in two task families.
    with pytest.raises(ValueError, match="group 1"):
        baselines.class_incremental_classes([_experience([0, 1], 0), _experience([0, 1], 1)])
    # Same classes in one family, disjoint ones across families: original ids.
    stream = [_experience([3, 5], 0), _experience([1, 2], 1), _experience([3, 5], 0)]
    assert baselines.class_incremental_classes(stream) == 6
    with pytest.raises(ValueError, match="non-empty"):
        baselines.class_incremental_classes([])


def test_unknown_name(original, tiny_backbone):
    with pytest.raises(ValueError, match=r"unknown class-incremental baseline 'lwf'.*'ewc', 'replay', 'joint'"):
        baselines.class_incremental_strategy("lwf", tiny_backbone(), original.train_stream,
                                             baselines.BaselineSettings(epochs=1))


def test_settings_helpers(original):
    settings = baselines.BaselineSettings(epochs=1, ewc_lambda=3.0, ewc_decay=0.5, replay_per_class=4)
    assert settings.ewc() == dict(ewc_lambda=3.0, decay_factor=0.5)
    assert settings.buffer_size(original.train_stream) == 4 * 2 * 10
    assert baselines.BaselineSettings(epochs=1, replay_mem_size=7).buffer_size(original.train_stream) == 7


def _model_bytes(strategy) -> int:
    return TensorByteCounter().add_module(strategy.model)


@pytest.mark.parametrize("name, n_tasks, options", [
    ("ewc", 4, dict(ewc_lambda=1.0)),
    ("replay", 4, dict(replay_per_class=10)),
    # 10 tasks, mini-batches of 8: Avalanche's task-balanced loader would need >= 10.
    ("joint", 10, dict()),
])
def test_trains_above_chance_on_original_ids(original, name, n_tasks, options, tiny_backbone):
    train, test = original.train_stream[:n_tasks], original.test_stream[:n_tasks]
    settings = baselines.BaselineSettings(epochs=1, lr=1e-2, train_mb_size=8, **options)
    backbone = tiny_backbone()
    before = [p.clone() for p in backbone.parameters()]
    strategy = baselines.class_incremental_strategy(name, backbone, train, settings, evaluator=_evaluator())
    model = strategy.model
    assert isinstance(model, baselines.SingleHeadNet) and not isinstance(model, MultiTaskModule)
    seen = sorted({c for exp in train for c in exp.classes_in_this_experience})
    assert model.head.out_features == max(seen) + 1
    if name == "joint":
        assert isinstance(strategy, JointTraining)
        strategy.train(train)
    else:
        for exp in train:
            strategy.train(exp)
    assert all(torch.equal(a, b) for a, b in zip(before, backbone.parameters()))  # E0 copied, not changed
    chance = 1 / len(seen)
    assert _accuracy(model, test) > chance
    # Avalanche's own evaluation agrees (the model ignores the task labels).
    results = strategy.eval(test)
    assert [round(v, 6) for k, v in results.items() if k.startswith("Top1_Acc_Stream")] == \
        [round(_accuracy(model, test), 6)]
    memory = repository_memory_bytes(strategy)
    if name == "joint":
        assert memory == _model_bytes(strategy)
    else:  # EWC's importances, ER's exemplars
        assert memory > _model_bytes(strategy)
