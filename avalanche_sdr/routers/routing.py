"""Task-free routing: the routers by name (:data:`ROUTER_TYPES`) and name-level helpers.

SDR as published is task-aware: task t is predicted by f_t(E_{m(t)}(x)). A router
removes the need for the task label at test time: for a sample x it chooses a trained
task r (hence an entry m(r)) and answers ``argmax f_r(E_{m(r)}(x))`` as a class id of
r's head. Each router is an object with its options (:class:`~avalanche_sdr.routers.base.Router`),
fitted after every task's training (``SDRStrategy(routers=...)``, names or objects);
its state lives in the repository (counted in memory, saved in checkpoints):

- ``"lda_weighted"`` (:class:`~avalanche_sdr.routers.lda_router.LDAWeightedRouter`,
  SDR's recommended router and the default of ``predict``) and ``"lda"``
  (:class:`~avalanche_sdr.routers.lda_router.LDARouter`): linear discriminant analysis
  over every (entry, class) unit, in E0's features and in all entries' features;
- ``"gaussian"`` (:class:`~avalanche_sdr.routers.gaussian.GaussianRouter`): SDR's first
  router, class-conditional Gaussians in each entry's own space;
- ``"expert_gate"`` (:class:`~avalanche_sdr.routers.expert_gate.ExpertGateRouter`): the
  baseline;
- ``"kernel_lda"`` (:class:`~avalanche_sdr.routers.kernel_lda.KernelLDARouter`): the
  closed-form learner KLDA over every (entry, class) unit, random Fourier features of
  E0's features and one shared-covariance LDA.

The functions taking a router name (:func:`route`, :func:`fit_router`, :func:`routable`,
:func:`router_states`, :func:`state_router`) build the router from the registry and call
it, for callers that hold a name.
"""
from __future__ import annotations

from typing import Dict, List, Sequence, Tuple, Union

import torch
from torch import Tensor

from avalanche_sdr.models.task_data import TaskData
from avalanche_sdr.routers.base import Router, TaskFreePrediction
from avalanche_sdr.routers.covariance import ledoit_wolf_covariance
from avalanche_sdr.routers.expert_gate import ExpertGateRouter
from avalanche_sdr.routers.gaussian import GaussianRouter
from avalanche_sdr.routers.kernel_lda import KernelLDARouter
from avalanche_sdr.routers.lda_router import LDARouter, LDAWeightedRouter
from avalanche_sdr.vocabulary import DEFAULT_ROUTER, ROUTERS

ROUTER_TYPES: Dict[str, type] = {
    GaussianRouter.name: GaussianRouter,
    ExpertGateRouter.name: ExpertGateRouter,
    LDARouter.name: LDARouter,
    LDAWeightedRouter.name: LDAWeightedRouter,
    KernelLDARouter.name: KernelLDARouter,
}
"""Router classes by name (the names of :data:`~avalanche_sdr.vocabulary.ROUTERS`);
``ROUTER_TYPES[name](**options)`` builds one."""

RouterLike = Union[str, Router]


def make_router(router: RouterLike, **options) -> Router:
    """A router object from a name in :data:`ROUTER_TYPES` (with ``options``) or a router.

    :raises ValueError: an unknown name, or options given with a router object.
    :raises TypeError: an option the named router does not take (the message names both).
    """
    if isinstance(router, Router):
        if options:
            raise ValueError(f"options {sorted(options)} have no effect with a router object; "
                             f"set them when building it, e.g. {type(router).__name__}(...)")
        return router
    if router not in ROUTER_TYPES:
        raise ValueError(f"unknown router {router!r}; available: {list(ROUTER_TYPES)} (or a Router object)")
    try:
        return ROUTER_TYPES[router](**options)
    except TypeError as err:
        raise TypeError(f"router {router!r} ({ROUTER_TYPES[router].__name__}) does not take {sorted(options)}: "
                        f"{err}") from err


def check_routers(routers: Sequence[RouterLike]) -> Tuple[Router, ...]:
    """``routers`` (names or router objects) as a tuple of distinct router objects.

    :raises ValueError: an unknown or repeated router, a single string given instead of
        a sequence, or two routers sharing one state with different options (``"lda"``
        and ``"lda_weighted"`` read one set of stored images: give them the same
        ``exemplars``).
    """
    if isinstance(routers, (str, Router)):
        raise ValueError(f"routers must be a sequence of names or routers, e.g. ({routers!r},); got {routers!r}")
    objects = tuple(make_router(r) for r in routers)
    names = [r.name for r in objects]
    if len(set(names)) != len(names):
        raise ValueError(f"routers must be distinct, got {names}")
    shared: Dict[str, Router] = {}
    for router in objects:
        other = shared.setdefault(router.state_name, router)
        exemplars = getattr(router, "exemplars", None), getattr(other, "exemplars", None)
        if exemplars[0] != exemplars[1]:
            raise ValueError(f"routers {other.name!r} and {router.name!r} share one state and must store the same "
                             f"number of images: exemplars {exemplars[1]} and {exemplars[0]}")
    return objects


# ---------------------------------------------------------------------- by name

def state_router(router: str) -> str:
    """The router whose state ``router`` reads: ``"lda"`` for ``"lda_weighted"`` (both
    score with the same fitted state), else ``router`` itself."""
    return make_router(router).state_name


def router_states(model, router: RouterLike) -> list:
    """The modules (:class:`~avalanche_sdr.models.repository.TensorSet`) holding
    ``router``'s state in the repository, e.g. to count its bytes (``"lda"`` and
    ``"lda_weighted"``: the same, shared modules)."""
    return make_router(router).state_modules(model)


def routable(model, router: RouterLike) -> Tuple[List[int], List[int]]:
    """The trained tasks ``router`` can send samples to, and their entries: those whose
    router state is fitted (not a task still in training, e.g. during a periodic
    evaluation). Both lists are empty when there are none."""
    return make_router(router).routable(model)


def fit_router(router: RouterLike, model, task: int, x: Tensor, y: Tensor, num_classes: int, new_entry: bool,
               exemplars_per_class: int = 20, entry_updated: bool = False) -> None:
    """Fit ``router``'s state for a just-trained ``task`` (:meth:`Router.fit <avalanche_sdr.routers.base.Router.fit>`).

    Other parameters: as :meth:`Router.fit <avalanche_sdr.routers.base.Router.fit>`.

    :param router: a name in :data:`ROUTER_TYPES` or a router object.
    :param x: [n, C, H, W] the task's training images; ``y``: [n] int64 local labels 0..c-1
        (local label k is class ``model.heads.class_ids(task)[k]``); ``num_classes``: c.
    :param exemplars_per_class: for a router NAME ``"lda"`` / ``"lda_weighted"`` only, its
        ``exemplars`` (a router object carries its own).
    """
    if isinstance(router, str) and router in ROUTER_TYPES and issubclass(ROUTER_TYPES[router], LDARouter):
        router = make_router(router, exemplars=exemplars_per_class)
    if int(y.max()) + 1 != num_classes:
        raise ValueError(f"y holds labels 0..{int(y.max())} but num_classes={num_classes}; every class must be present")
    data = TaskData(task, x, y, torch.tensor(model.heads.class_ids(task), dtype=torch.long))
    make_router(router).fit(model, data, new_entry=new_entry, entry_updated=entry_updated)


def route(model, x: Tensor, router: RouterLike = DEFAULT_ROUTER) -> TaskFreePrediction:
    """Predict without task labels (:meth:`Router.route <avalanche_sdr.routers.base.Router.route>`)."""
    return make_router(router).route(model, x)


def route_with_features(model, x: Tensor, router: RouterLike = DEFAULT_ROUTER) -> Tuple[TaskFreePrediction, dict]:
    """:func:`route`, and the features it computed (:meth:`Router.route_with_features
    <avalanche_sdr.routers.base.Router.route_with_features>`)."""
    return make_router(router).route_with_features(model, x)


__all__ = ["DEFAULT_ROUTER", "ROUTERS", "ROUTER_TYPES", "Router", "RouterLike", "TaskFreePrediction", "check_routers",
           "fit_router", "ledoit_wolf_covariance", "make_router", "routable", "route", "route_with_features",
           "router_states", "state_router"]
