"""Plugin metric: the task-aware accuracy of a learner with one head over the class ids.

A class-incremental learner (one head over the dataset's original class ids: ER or
Online EWC class-incremental, joint training, the closed-form learners of
:mod:`avalanche_sdr.closed_form`) predicts without task labels, and Avalanche's
``accuracy_metrics`` scores that. Given the task label, the same head answers among the
classes that task was trained on: :class:`TaskAwareAccuracy` takes the strategy's
output ``mb_output`` [N, K] of every evaluation mini-batch, keeps for sample i only the
columns of the classes its task label ``mb_task_id[i]`` was trained on, and scores the
argmax of those. Why: such a learner is then compared with SDR (task-aware by design)
on SDR's own terms, from the same evaluation pass as its task-free accuracy.

- **The classes of a task label**: every (task label, class id) pair of the data a
  training call trained on (``strategy.adapted_dataset`` after each training
  experience: an experience's data, or joint training's whole concatenated stream),
  accumulated over the stream.
- **Scored**: per evaluated experience, the share of its samples whose restricted
  argmax is their label; the result is the mean over the experiences of the last
  evaluation that hold a trained task label (an experience whose task label no training
  call carried is left out: there is no class set to restrict to), as
  ``TaskAware_Acc/eval_phase/<stream>_stream`` (a float in [0, 1]).
"""
from __future__ import annotations

from typing import Any, Dict, List, Set

import torch
from avalanche.evaluation.metric_definitions import PluginMetric
from avalanche.evaluation.metric_results import MetricValue

from avalanche_sdr.evaluation.naming import logging_metric_name


def task_classes(dataset: Any) -> Dict[int, Set[int]]:
    """The class ids of every task label in an Avalanche classification dataset.

    :param dataset: a dataset with ``targets`` and ``targets_task_labels`` (Avalanche's
        data attributes), e.g. ``experience.dataset``.
    :return: ``{task label: {class id, ...}}``.
    :raises ValueError: the dataset lacks either attribute (the message names it).
    """
    missing = [name for name in ("targets", "targets_task_labels") if getattr(dataset, name, None) is None]
    if missing:
        raise ValueError(f"task-aware accuracy reads the trained data's {' and '.join(missing)}; give the strategy "
                         "an Avalanche classification dataset (e.g. an experience of an Avalanche benchmark)")
    out: Dict[int, Set[int]] = {}
    for task, label in zip(dataset.targets_task_labels, dataset.targets):
        out.setdefault(int(task), set()).add(int(label))
    return out


def restricted_predictions(scores: torch.Tensor, tasks: torch.Tensor, classes: Dict[int, Set[int]]) -> torch.Tensor:
    """The argmax of each row of ``scores`` among the classes of its task label.

    :param scores: [N, K] float scores over the class ids (higher: likelier).
    :param tasks: [N] int64 task labels; every one must be a key of ``classes``.
    :param classes: task label -> class ids it was trained on (ids < K).
    :return: [N] int64 class ids, on ``scores``' device.
    :raises KeyError: a task label without classes.
    """
    allowed = torch.zeros_like(scores, dtype=torch.bool)
    for task in torch.unique(tasks).tolist():
        ids = torch.tensor(sorted(classes[int(task)]), dtype=torch.long, device=scores.device)
        rows = torch.nonzero(tasks == task).flatten()
        allowed[rows.unsqueeze(1), ids.unsqueeze(0)] = True
    lowest = torch.finfo(scores.dtype).min if scores.dtype.is_floating_point else torch.iinfo(scores.dtype).min
    return scores.masked_fill(~allowed, lowest).argmax(dim=1)


class TaskAwareAccuracy(PluginMetric[float]):
    """Task-aware accuracy of a one-head learner over the class ids (module doc).

    The metric must observe the stream from its first training experience (it records
    the classes of every trained task label). ``result()``: the mean over the last
    evaluation's scored experiences (``None`` before any); :attr:`per_experience`: their
    accuracies, in evaluation order.
    """

    def __init__(self) -> None:
        super().__init__()
        self._classes: Dict[int, Set[int]] = {}
        self.per_experience: List[float] = []
        self._counts = [0, 0]
        self._scored = False

    def reset(self) -> None:
        """Forget the last evaluation's scores (not the trained tasks' classes)."""
        self.per_experience = []
        self._counts = [0, 0]

    def result(self):
        """Mean task-aware accuracy of the last evaluation's scored experiences, or ``None``."""
        if not self.per_experience:
            return None
        return sum(self.per_experience) / len(self.per_experience)

    # ------------------------------------------------------------------ callbacks
    def after_training_exp(self, strategy: Any) -> None:
        for task, ids in task_classes(strategy.adapted_dataset).items():
            self._classes.setdefault(task, set()).update(ids)

    def before_eval(self, strategy: Any) -> None:
        self.reset()

    def before_eval_exp(self, strategy: Any) -> None:
        self._counts = [0, 0]
        self._scored = all(int(t) in self._classes for t in strategy.experience.task_labels)

    def after_eval_iteration(self, strategy: Any) -> None:
        if not self._scored:
            return
        with torch.no_grad():
            predicted = restricted_predictions(strategy.mb_output, strategy.mb_task_id, self._classes)
        self._counts[0] += int((predicted == strategy.mb_y).sum())
        self._counts[1] += int(strategy.mb_y.shape[0])

    def after_eval_exp(self, strategy: Any) -> None:
        if self._scored and self._counts[1]:
            self.per_experience.append(self._counts[0] / self._counts[1])

    def after_eval(self, strategy: Any) -> List[MetricValue]:
        value = self.result()
        if value is None:
            return []
        return [MetricValue(self, logging_metric_name(self, strategy), value, strategy.clock.train_iterations)]

    def __str__(self) -> str:
        return "TaskAware_Acc"


__all__ = ["TaskAwareAccuracy", "restricted_predictions", "task_classes"]
