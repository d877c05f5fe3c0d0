"""Class-incremental evaluation of SDR: Avalanche's own metrics on predictions made
without task labels.

``SDRStrategy(..., routers=("gaussian",), eval_router="gaussian")`` trains as always
(task-aware) but evaluates every experience **without its task labels**
(:class:`ClassIncrementalEvalPlugin`): the strategy's ``mb_output`` is
:func:`routed_scores` of the router's prediction, a float [N, K] tensor over the
original class ids whose argmax is that prediction, so Avalanche's accuracy,
confusion-matrix and loss metrics and its loggers score task-free predictions
unchanged. Why: SDR is then compared with class-incremental baselines through the
same Avalanche metrics. Labels local to each task are refused (``ValueError``), as is
a repository trained without the router's state (``RuntimeError``).

The layout of ``mb_output``, its loss and every rule: docs/method.rst, section
"Class-incremental evaluation: the routed output and its rules".
"""
from __future__ import annotations

import warnings
from typing import Any, Dict, List, Optional, Sequence

import torch
from torch import Tensor
from avalanche.core import SupervisedPlugin

from avalanche_sdr.dataset_tensors import distinct_labels
from avalanche_sdr.evaluation.task_free import ORIGINAL_IDS_ADVICE, check_original_class_ids, experience_group
from avalanche_sdr.routers.routing import check_routers, routable, route_with_features


class NoRoutableTaskWarning(UserWarning):
    """A task-free evaluation ran before any task's training had finished: there was no
    task to route to, every class scored 0."""


def check_eval_router(eval_router: Optional[str], routers: Sequence[str]) -> Optional[str]:
    """``eval_router`` if it is ``None`` or one of the ``routers`` a strategy fits.

    :param eval_router: the router to evaluate with, a name in
        :data:`~avalanche_sdr.vocabulary.ROUTERS`, or ``None`` (task-aware evaluation).
    :param routers: the strategy's ``routers``.
    :raises ValueError: an unknown name, or a router the strategy does not fit.
    """
    if eval_router is None:
        return None
    eval_router = check_routers((eval_router,))[0].name
    names = tuple(getattr(r, "name", r) for r in routers)
    if eval_router not in names:
        raise ValueError(
            f"eval_router={eval_router!r} needs that router fitted after every task, but the strategy fits "
            f"routers={names}; build it with routers=({eval_router!r},)"
        )
    return eval_router


@torch.no_grad()
def routed_scores(model, x: Tensor, router: str, num_classes: int) -> Tensor:
    """Scores over the original class ids whose argmax is ``model.predict(x, router)``.

    :param model: an :class:`~avalanche_sdr.models.SDRModel` fitted with ``router``.
    :param x: [N, C, H, W] float images in [0, 1], on the model's device.
    :param router: a name in :data:`~avalanche_sdr.vocabulary.ROUTERS`.
    :param num_classes: K, at least 1 + the largest class id of any head.
    :return: [N, K] of ``x``'s dtype, on ``x``'s device: row i holds the head
        logits of the task sample i is routed to at that task's class-id columns, the
        lowest finite value of the dtype elsewhere (module doc); where the router chose
        another of the task's classes than the head's argmax (``"lda"`` chooses the
        class itself), that class's column is set to the row's maximum + 1.
    :raises RuntimeError: the repository was not fitted with ``router`` (from
        :func:`~avalanche_sdr.routers.routing.route`).
    """
    prediction, features = route_with_features(model, x, router)  # features: in eval mode, on the whole batch
    scores = torch.full((x.shape[0], num_classes), torch.finfo(x.dtype).min, dtype=x.dtype, device=x.device)
    was_training = model.training
    model.eval()
    try:
        for task in torch.unique(prediction.tasks).tolist():
            mask = prediction.tasks == task
            logits = model.heads.logits(task, features[model.entry_of(task)][mask])
            scores[mask, : logits.shape[1]] = logits
        # A router that chooses the class itself ("lda") may answer another of the task's
        # classes than its head would: that class's column is raised just above the row.
        rows = torch.nonzero(scores.argmax(dim=1) != prediction.class_ids).flatten()
        scores[rows, prediction.class_ids[rows]] = scores[rows].max(dim=1).values + 1.0
    finally:
        model.train(was_training)
    return scores


def _benchmark_of(experience: Any) -> Any:
    """The benchmark the experience's stream names, or ``None``."""
    try:
        return getattr(experience.origin_stream, "benchmark", None)
    except (AssertionError, AttributeError):  # Avalanche asserts that origin_stream is set
        return None


def _declared_classes(benchmark: Any) -> int:
    """A benchmark's class count (``n_classes_total`` here, ``n_classes`` in Avalanche), else 0."""
    for name in ("n_classes_total", "n_classes"):
        value = getattr(benchmark, name, None)
        if isinstance(value, int):
            return value
    return 0


def _local_labels_declared(benchmark: Any) -> bool:
    return getattr(benchmark, "original_class_ids", True) is False or \
        getattr(benchmark, "class_ids_from_zero_in_each_exp", False) is True


def _labels(experience: Any) -> List[int]:
    """The distinct labels of an experience's dataset (its ``targets``, else the
    experience's ``classes_in_this_experience``)."""
    labels = distinct_labels(experience)
    if labels is None:
        return [int(c) for c in getattr(experience, "classes_in_this_experience", ())]
    return labels


class ClassIncrementalEvalPlugin(SupervisedPlugin):
    """The evaluation side of ``SDRStrategy(eval_router=...)`` (module doc): the checks
    before each evaluated experience and the scores the strategy's ``forward`` returns.

    Built by :class:`~avalanche_sdr.training.SDRStrategy`, which calls
    :meth:`scores` from its ``forward`` during evaluation; training is untouched.

    :param router: the router to predict with, a name in
        :data:`~avalanche_sdr.vocabulary.ROUTERS`.
    """

    def __init__(self, router: str):
        super().__init__()
        self.router = check_routers((router,))[0].name
        self.num_classes = 0
        """K of the experience being evaluated (module doc)."""
        self._task_groups: Dict[int, Any] = {}
        self._in_training: tuple = ()
        self._can_route = False
        self._warned = False

    # ------------------------------------------------------------------ training
    def before_training_exp(self, strategy, **kwargs):
        self._in_training = tuple(int(t) for t in strategy.experience.task_labels)

    def after_training_exp(self, strategy, **kwargs):
        for task in self._in_training:
            self._task_groups[task] = experience_group(strategy.experience)
        self._in_training = ()

    # ------------------------------------------------------------------ evaluation
    def before_eval(self, strategy, **kwargs):
        self._warned = False
        check_original_class_ids(strategy.model, self._task_groups)

    def before_eval_exp(self, strategy, **kwargs):
        model, experience = strategy.model, strategy.experience
        benchmark = _benchmark_of(experience)
        if _local_labels_declared(benchmark):
            raise ValueError(f"evaluation without task labels needs the original class ids, but the stream's "
                             f"labels are local to each task; {ORIGINAL_IDS_ADVICE}")
        labels = _labels(experience)
        if labels and labels[0] < 0:
            raise ValueError(f"evaluation labels must be class ids >= 0, got {labels[0]}")
        self._check_group_labels(model, experience, labels)
        tasks, entries = routable(model, self.router)
        self._check_fitted(model, entries)
        self._can_route = bool(tasks)
        heads = [max(model.heads.class_ids(t)) for t in model.trained_tasks]
        self.num_classes = 1 + max(heads + labels + [_declared_classes(benchmark) - 1, 0])

    def _check_group_labels(self, model, experience, labels: List[int]) -> None:
        """Refuse labels of one group that are the class ids of a trained task of another."""
        group = experience_group(experience)
        if not isinstance(group, int):  # no hidden group: nothing to compare
            return
        for task, other in self._task_groups.items():
            if other != group and model.heads.is_trained(task) and set(model.heads.class_ids(task)) & set(labels):
                raise ValueError(
                    f"evaluation without task labels needs class ids that identify classes across tasks, but "
                    f"the experience of group {group} has labels {labels} and task {task} of group {other} was "
                    f"trained on class ids {model.heads.class_ids(task)}; {ORIGINAL_IDS_ADVICE}"
                )

    def _check_fitted(self, model, routed_entries: List[int]) -> None:
        """Refuse finished tasks whose entry has no state of the router."""
        finished = [t for t in model.trained_tasks if t not in self._in_training]
        missing = sorted({model.entry_of(t) for t in finished} - set(routed_entries))
        if missing:
            raise RuntimeError(
                f"the repository has no {self.router!r} routing state for entries {missing}: the router must be "
                f"fitted after every task from the first one (build the strategy with routers=({self.router!r},) "
                "before training)"
            )

    def scores(self, strategy) -> Tensor:
        """``mb_output`` of the current evaluation mini-batch: float [N, K] (module doc)."""
        x, y = strategy.mb_x, strategy.mb_y
        width = max(self.num_classes, int(y.max()) + 1 if y.numel() else 1)
        if self._can_route:
            return routed_scores(strategy.model, x, self.router, width)
        if not self._warned:
            self._warned = True
            warnings.warn(
                f"no task has finished training, so the {self.router!r} router has no task to route to: every "
                "class scores 0 (each sample is predicted as class 0)", NoRoutableTaskWarning, stacklevel=2,
            )
        return torch.zeros(x.shape[0], width, device=x.device)


__all__ = ["ClassIncrementalEvalPlugin", "NoRoutableTaskWarning", "check_eval_router", "routed_scores"]
