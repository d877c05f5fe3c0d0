"""Plugin metric for task-free prediction: routing and task-free accuracy beside the task-aware one.

During every evaluation of an :class:`~avalanche_sdr.training.SDRStrategy` built with
``routers=(...)``, the metric predicts each evaluation mini-batch again **without its
task labels** with every router it was given, and also scores the **oracle** (the
true task label). It reports the task-free accuracy (the predicted class id equals
the label; labels must be the dataset's original class ids, local labels are refused
with a ``ValueError``) and the routing accuracy (the sample went to an entry of its
own group), averaged per experience then over the stream, as
``TaskFree_Acc_<router>/eval_phase/<stream>_stream`` and
``Routing_Acc_<router>/eval_phase/<stream>_stream`` (floats in [0, 1]).

Why: task-free prediction is beyond the paper; this puts the router's cost next to
the task-aware accuracy Avalanche already reports.

The definitions, the oracle and the periodic-evaluation cases in full:
docs/method.rst, section "The task-free metric: what it scores and how it is named".
"""
from __future__ import annotations

from typing import Any, Dict, List, Mapping, Sequence

import torch
from avalanche.evaluation.metric_definitions import PluginMetric
from avalanche.evaluation.metric_results import MetricValue

from avalanche_sdr.evaluation.detection_metrics import experience_ground_truth
from avalanche_sdr.evaluation.naming import logging_metric_name
from avalanche_sdr.routers.base import route_together
from avalanche_sdr.routers.routing import check_routers
from avalanche_sdr.vocabulary import DEFAULT_ROUTER, ORACLE


def experience_group(experience: Any) -> Any:
    """The hidden ``group`` of an experience (an int), else the sorted tuple of its classes."""
    try:
        return int(experience_ground_truth(experience, "group"))
    except AttributeError:
        classes = getattr(experience, "classes_in_this_experience", None)
        if classes is None:
            raise ValueError("TaskFreeMetrics needs experiences with a `group` attribute or "
                             "`classes_in_this_experience` to score routing") from None
        return tuple(sorted(int(c) for c in classes))


ORIGINAL_IDS_ADVICE = ("build the benchmark with original_class_ids=True "
                       "(Avalanche: class_ids_from_zero_in_each_exp=False)")
"""What an error about labels local to each task tells the user to do (every task-free check)."""


def check_original_class_ids(model: Any, task_groups: Mapping[int, Any]) -> None:
    """Refuse labels local to each task: two trained tasks of different groups with the
    same class ids (e.g. both 0..c-1), which no prediction without task labels can tell
    apart.

    :param model: the :class:`~avalanche_sdr.models.SDRModel`.
    :param task_groups: task label -> its group (:func:`experience_group` of its
        training experience); tasks without a head are skipped.
    :raises ValueError: two groups share class ids; the message says how to build the
        benchmark with original class ids.
    """
    by_ids: Dict[tuple, Any] = {}
    for task, group in task_groups.items():
        if not model.heads.is_trained(task):
            continue
        ids = tuple(model.heads.class_ids(task))
        if ids in by_ids and by_ids[ids] != group:
            raise ValueError(
                f"task-free accuracy needs class ids that identify classes across tasks, but tasks of "
                f"groups {by_ids[ids]} and {group} both use the class ids {list(ids)}; {ORIGINAL_IDS_ADVICE}"
            )
        by_ids[ids] = group


class TaskFreeMetrics(PluginMetric[Dict[str, Dict[str, float]]]):
    """Routing and task-free accuracy of SDR's routers and of the oracle (module doc).

    The metric must observe the stream from its first training experience (it records
    the group of every trained task).

    :param routers: routers to score (names in
        :data:`~avalanche_sdr.vocabulary.ROUTERS` or router objects; the strategy must
        have been built with them; default: SDR's recommended ``"lda_weighted"``); the
        oracle is always scored.

    ``enabled`` (default True): set it to False and evaluations are not scored (no
    sample is routed, nothing is emitted, :meth:`result` keeps the last scored
    evaluation's); training experiences are still recorded.
    :func:`~avalanche_sdr.training.stream_runner.evaluate_group` turns it off during
    its per-group evaluations after every task, which measure the task-aware group
    curve only: routing their samples with every router is work nobody reads.
    """

    def __init__(self, routers: Sequence = (DEFAULT_ROUTER,)):
        super().__init__()
        self._router_objects = {router.name: router for router in check_routers(routers)}
        self.routers = tuple(self._router_objects)
        self.enabled = True
        self._scoring = False
        self._task_groups: Dict[int, Any] = {}
        self.reset()

    def reset(self) -> None:
        """Forget the current evaluation's counts (not the trained tasks' groups)."""
        self._counts: Dict[str, List[List[int]]] = {}
        self._current: Dict[str, List[int]] = {}
        self._group: Any = None
        self._answering: tuple = ()

    def result(self) -> Dict[str, Dict[str, float]]:
        """``{router: {"task_free": acc, "routing": acc}}`` of the last evaluation
        (means over its experiences; empty before any)."""
        out = {}
        for name, per_exp in self._counts.items():
            scored = [c for c in per_exp if c[2] > 0]  # experiences the router could answer
            if scored:
                out[name] = {"task_free": sum(c[0] / c[2] for c in scored) / len(scored),
                             "routing": sum(c[1] / c[2] for c in scored) / len(scored)}
        return out

    # ------------------------------------------------------------------ callbacks
    def after_training_exp(self, strategy: Any) -> None:
        for task in strategy.experience.task_labels:
            self._task_groups[int(task)] = experience_group(strategy.experience)

    def before_eval(self, strategy: Any) -> None:
        self._scoring = self.enabled
        if not self._scoring:
            return
        self.reset()
        model = strategy.model
        if not hasattr(model, "routing_states"):
            raise TypeError(
                f"TaskFreeMetrics scores the routers of an SDRModel (SDRStrategy(routers=...)); the strategy's "
                f"model is a {type(model).__name__}. A one-head baseline over the class ids needs no router: "
                "its Avalanche accuracy is already task-free"
            )
        check_original_class_ids(model, self._task_groups)

    def before_eval_exp(self, strategy: Any) -> None:
        if not self._scoring:
            return
        self._group = experience_group(strategy.experience)
        self._current = {name: [0, 0, 0] for name in self.routers + (ORACLE,)}
        # Routers with a fitted task (none during a periodic evaluation inside the first
        # task); the repository does not change during an evaluation.
        # The oracle reads the strategy's task-aware output, which an evaluation without
        # task labels (SDRStrategy(eval_router=...)) replaces by a router's.
        oracle = () if getattr(strategy, "eval_router", None) is not None else (ORACLE,)
        self._answering = tuple(name for name in self.routers
                                if self._router_objects[name].routable(strategy.model)[0]) + oracle

    def after_eval_iteration(self, strategy: Any) -> None:
        if not self._scoring:
            return
        model = strategy.model
        x, y = strategy.mb_x, strategy.mb_y
        with torch.no_grad():
            # E0's and every entry's features of the mini-batch are computed once for all routers
            routed = route_together(model, x, [self._router_objects[name] for name in self._answering
                                               if name != ORACLE])[0]
            for name in self._answering:
                if name == ORACLE:
                    predicted = strategy.mb_output.argmax(dim=1)
                    routed_ok = len(y)
                else:
                    prediction = routed[name]
                    predicted = prediction.class_ids
                    routed_ok = sum(int(self._task_groups.get(model.entry_creator[int(e)]) == self._group)
                                    for e in prediction.entries.tolist())
                counts = self._current[name]
                counts[0] += int((predicted == y).sum())
                counts[1] += routed_ok
                counts[2] += int(y.shape[0])

    def after_eval_exp(self, strategy: Any) -> None:
        if not self._scoring:
            return
        for name, counts in self._current.items():
            self._counts.setdefault(name, []).append(counts)
        self._current = {}

    def after_eval(self, strategy: Any) -> List[MetricValue]:
        if not self._scoring:
            return []
        x = strategy.clock.train_iterations
        values = []
        for name, result in self.result().items():
            values.append(MetricValue(self, logging_metric_name(f"TaskFree_Acc_{name}", strategy),
                                      result["task_free"], x))
            values.append(MetricValue(self, logging_metric_name(f"Routing_Acc_{name}", strategy),
                                      result["routing"], x))
        return values

    def __str__(self) -> str:
        return "TaskFree"


__all__ = ["ORACLE", "ORIGINAL_IDS_ADVICE", "TaskFreeMetrics", "check_original_class_ids", "experience_group"]
