"""``TaskAwareAccuracy`` (``avalanche_sdr/evaluation/task_aware.py``): a one-head learner
over the class ids scored given each sample's task label, from the same evaluation pass.

Hand-made scores through the metric's callbacks (a stand-in strategy), and the class
sets read from a real benchmark's data. Fast.
"""
from types import SimpleNamespace

import pytest
import torch

from avalanche_sdr.benchmarks import MixedDigits
from avalanche_sdr.evaluation.task_aware import TaskAwareAccuracy, restricted_predictions, task_classes


def test_the_argmax_is_taken_among_the_tasks_classes_only():
    scores = torch.tensor([[0.1, 0.5, 0.2, 0.9],   # task 0 ({0, 1}): 1, though 3 is higher
                           [0.9, 0.1, 0.2, 0.3],   # task 1 ({2, 3}): 3
                           [-5.0, -7.0, -1.0, -9.0]])  # task 0 with all scores negative: 0
    tasks = torch.tensor([0, 1, 0])
    assert restricted_predictions(scores, tasks, {0: {0, 1}, 1: {2, 3}}).tolist() == [1, 3, 0]
    with pytest.raises(KeyError):
        restricted_predictions(scores, torch.tensor([0, 2, 0]), {0: {0, 1}, 1: {2, 3}})


def test_task_classes_are_read_from_the_data_trained_on():
    benchmark = MixedDigits(seed=0, original_class_ids=True)
    first = benchmark.train_stream[0]
    classes = task_classes(first.dataset)
    assert classes == {int(first.task_labels[0]): set(int(c) for c in first.classes_in_this_experience)}
    with pytest.raises(ValueError, match="targets_task_labels"):
        task_classes(SimpleNamespace(targets=[0, 1]))


class _Data:
    def __init__(self, tasks, labels):
        self.targets_task_labels, self.targets = tasks, labels


def _strategy(tasks_trained):
    return SimpleNamespace(adapted_dataset=_Data(*tasks_trained), clock=SimpleNamespace(train_iterations=0),
                           experience=None, is_eval=True)


def _evaluate(metric, strategy, experiences):
    """Run the evaluation callbacks over ``experiences``: [(task label, scores, labels)]."""
    metric.before_eval(strategy)
    for task, scores, labels in experiences:
        strategy.experience = SimpleNamespace(task_labels=[task])
        metric.before_eval_exp(strategy)
        strategy.mb_output, strategy.mb_y = scores, labels
        strategy.mb_task_id = torch.full((len(labels),), task)
        metric.after_eval_iteration(strategy)
        metric.after_eval_exp(strategy)


def test_the_metric_scores_each_experience_given_its_task_and_leaves_out_untrained_ones():
    metric = TaskAwareAccuracy()
    strategy = _strategy(([0, 0, 1, 1], [0, 1, 2, 3]))  # task 0: {0, 1}; task 1: {2, 3}
    metric.after_training_exp(strategy)
    scores = torch.tensor([[0.1, 0.5, 0.2, 0.9], [0.6, 0.5, 0.2, 0.9]])
    _evaluate(metric, strategy, [(0, scores, torch.tensor([1, 1])),     # restricted: 1, 0 -> 1/2
                                 (1, scores, torch.tensor([3, 2])),     # restricted: 3, 3 -> 1/2
                                 (5, scores, torch.tensor([0, 0]))])    # task 5 never trained: left out
    assert metric.per_experience == [0.5, 0.5] and metric.result() == 0.5
    metric.before_eval(strategy)
    assert metric.result() is None  # a new evaluation forgets the last one's scores...
    _evaluate(metric, strategy, [(1, scores, torch.tensor([3, 3]))])
    assert metric.result() == 1.0  # ...not the trained tasks' classes
