"""What every task-free router is: the :class:`Router` protocol and its answer.

A router is an object with its options (as a detector is): it fits its state into the
repository after each task (``SDRModel.routing_states``: counted in memory, saved in
checkpoints), and routes a batch of images to trained tasks, whose heads then give
the class ids (:class:`TaskFreePrediction`). The routers themselves and their registry
by name: :mod:`avalanche_sdr.routers.routing`.
"""
from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Any, Dict, List, Sequence, Tuple

import torch
from torch import Tensor

from avalanche_sdr.models.task_data import TaskData


@dataclass
class TaskFreePrediction:
    """What a router answers for N samples (all int64 tensors [N] on the inputs' device).

    :ivar class_ids: predicted class id (the routed task's head output, in the class-id
        space the task was trained on).
    :ivar tasks: the task each sample was routed to.
    :ivar entries: the entry of that task.
    """

    class_ids: Tensor
    tasks: Tensor
    entries: Tensor


def entry_key(prefix: str, entry: int) -> str:
    """Routing-state key of a router's state of ``entry``: ``<prefix>_e<entry>``."""
    return f"{prefix}_e{int(entry)}"


def task_key(prefix: str, task: int) -> str:
    """Routing-state key of a router's state of ``task``: ``<prefix>_t<task>``."""
    return f"{prefix}_t{int(task)}"


def required_state(model, key: str, router: str) -> Dict[str, Tensor]:
    """The routing state under ``key``, or a :class:`RuntimeError` saying how to fit it."""
    state = model.routing_state(key)
    if not state:
        raise RuntimeError(
            f"the repository has no {router!r} routing state {key!r}: the router must be fitted on every "
            f"task from the first one (build the strategy with routers=({router!r},))"
        )
    return state


class Router(abc.ABC):
    """A task-free router: fitted after every task, then routes images without task labels.

    Subclasses set ``name`` (their registry name) and ``state_name`` (the prefix of
    their routing-state keys; routers with the same ``state_name`` share one state,
    fitted once), and implement :meth:`fit`, :meth:`routable` and :meth:`predict_routed`.
    Options are constructor keywords, returned by :meth:`options` (recorded in results
    and checkpoints through :meth:`config`). Two routers are equal when their
    configurations are.
    """

    name: str = ""
    state_name: str = ""

    def options(self) -> Dict[str, Any]:
        """The router's options (JSON-safe); none by default."""
        return {}

    def config(self) -> Dict[str, Any]:
        """``{"name": name, **options}``: everything that changes what the router does."""
        return {"name": self.name, **self.options()}

    def __eq__(self, other) -> bool:
        return isinstance(other, Router) and other.config() == self.config()

    def __hash__(self) -> int:
        return hash(repr(self))

    def __repr__(self) -> str:
        options = ", ".join(f"{k}={v!r}" for k, v in self.options().items())
        return f"{type(self).__name__}({options})"

    # ------------------------------------------------------------------ fitting
    @abc.abstractmethod
    def fit(self, model, data: TaskData, *, new_entry: bool, entry_updated: bool = False) -> None:
        """Fit the router's state for the just-trained task ``data.task`` (its entry:
        ``model.entry_of(data.task)``).

        :param data: the task's training data (:class:`~avalanche_sdr.models.task_data.TaskData`:
            images, local labels 0..c-1, class ids, E0's features computed once).
        :param new_entry: the task created its entry (warm start or new).
        :param entry_updated: the task trained a reused entry's adapters (the learning
            reuse): features read through the entry moved.
        """

    def before_repeat(self, model, data: TaskData, entry: int) -> int:
        """Called with a detected repeat's training data before it trains (held-out
        evidence for routers that learn from repeats), ``entry`` the entry it reuses;
        returns the images used. Default: nothing (0)."""
        return 0

    def state_modules(self, model) -> List[torch.nn.Module]:
        """The modules holding this router's state in the repository (shared ones
        included), e.g. to count its bytes."""
        prefix = f"{self.state_name}_"
        return [state for key, state in model.routing_states.items() if key.startswith(prefix)]

    # ------------------------------------------------------------------ routing
    @abc.abstractmethod
    def routable(self, model) -> Tuple[List[int], List[int]]:
        """The trained tasks the router can send samples to, and their entries (empty
        lists when none is fitted yet, e.g. a task still in training)."""

    @abc.abstractmethod
    def predict_routed(self, model, x: Tensor, e0: Tensor, features: Dict[int, Tensor], tasks: List[int],
                       entries: List[int]) -> TaskFreePrediction:
        """The answer for ``x`` [N, C, H, W] from its E0 features ``e0`` [N, D0] and
        ``features`` (entry -> [N, D]) of the routable ``entries``."""

    def not_fitted(self, model) -> None:
        """Raise the error of a repository without this router's state."""
        required_state(model, entry_key(self.name, model.entries[0]), self.name)

    def route_with_features(self, model, x: Tensor) -> Tuple[TaskFreePrediction, Dict[int, Tensor]]:
        """:meth:`route`, and the features it computed: entry -> [N, D] ``E_entry(x)`` for
        every entry the router reads, so that a caller needing the routed heads' logits
        does not compute them again. Same arguments and errors as :meth:`route`."""
        predictions, features = route_together(model, x, [self])
        return predictions[self.name], features

    def route(self, model, x: Tensor) -> TaskFreePrediction:
        """Predict without task labels: route each sample, then apply the routed task's head.

        :param model: an :class:`~avalanche_sdr.models.SDRModel` fitted with this router.
        :param x: [N, C, H, W] float images in [0, 1] (on the model's device).
        :return: a :class:`TaskFreePrediction` (int64 [N] tensors on ``x``'s device).
        :raises RuntimeError: the repository was not fitted with this router, or holds no task.
        :raises ValueError: ``x`` is not [N, C, H, W] or contains NaN or Inf.
        """
        return self.route_with_features(model, x)[0]


@torch.no_grad()
def route_together(model, x: Tensor, routers: Sequence[Router]) -> Tuple[Dict[str, TaskFreePrediction], Dict[int, Tensor]]:
    """Every router's answer for ``x`` (:meth:`Router.route`), with E0's and each entry's
    features of ``x`` computed once for all of them.

    :param routers: router objects with distinct names.
    :return: ``{router name: TaskFreePrediction}`` and the features computed (entry ->
        [N, D] ``E_entry(x)``, every entry some router reads).
    :raises: the errors of :meth:`Router.route`, for the first router that raises one.
    """
    if not isinstance(x, Tensor) or x.dim() != 4:
        raise ValueError(f"x must be a [N, C, H, W] batch of images, got shape {tuple(getattr(x, 'shape', ()))}")
    if not bool(torch.isfinite(x).all()):
        raise ValueError("x contains NaN or Inf values; a router cannot score them")
    answerable = []
    for router in routers:
        tasks, entries = router.routable(model)
        if not tasks:
            if not any(model.heads.is_trained(t) for t in model.task_to_entry):
                raise RuntimeError("the repository holds no trained task to route to")
            router.not_fitted(model)
        answerable.append((router, tasks, entries))
    was_training = model.training
    model.eval()
    features: Dict[int, Tensor] = {}
    predictions: Dict[str, TaskFreePrediction] = {}
    try:
        e0 = None
        for router, tasks, entries in answerable:
            for e in entries:
                if e not in features:
                    features[e] = model.features(x, e)
            if e0 is None:
                e0 = model.features(x, None)
            predictions[router.name] = router.predict_routed(model, x, e0, {e: features[e] for e in entries},
                                                             tasks, entries)
    finally:
        model.encoder.set_active(None)
        model.train(was_training)
    return predictions, features


def heads_prediction(model, x: Tensor, tasks: List[int], choice: Tensor, features: Dict[int, Tensor]) -> TaskFreePrediction:
    """The answer of a router that chose ``tasks[choice[i]]`` for sample i ([N] int64):
    each routed task's head applied to its entry's ``features``."""
    routed_tasks = torch.tensor(tasks, device=x.device)[choice.to(x.device)]
    routed_entries = torch.tensor([model.entry_of(int(t)) for t in routed_tasks.tolist()], device=x.device,
                                  dtype=torch.long)
    class_ids = torch.empty(x.shape[0], dtype=torch.long, device=x.device)
    for t in torch.unique(routed_tasks).tolist():
        mask = routed_tasks == t
        logits = model.heads.logits(int(t), features[model.entry_of(int(t))][mask])
        class_ids[mask] = logits.argmax(dim=1)  # head_logits' columns are the class ids
    return TaskFreePrediction(class_ids=class_ids, tasks=routed_tasks.long(), entries=routed_entries)


__all__ = ["Router", "TaskFreePrediction", "entry_key", "heads_prediction", "required_state", "route_together", "task_key"]
