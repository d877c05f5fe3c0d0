"""Task-free routers: predict without task labels, found by name in one registry.

Each router is an object with its options (:class:`Router`): ``"lda_weighted"``
(:class:`LDAWeightedRouter`, SDR's recommended router and the default of
``strategy.predict(x)`` / ``model.predict(x)``), ``"lda"`` (:class:`LDARouter`),
``"gaussian"`` (:class:`GaussianRouter`, SDR's first), ``"expert_gate"``
(:class:`ExpertGateRouter`, a baseline) and ``"kernel_lda"`` (:class:`KernelLDARouter`,
the closed-form learner KLDA over the repository's units). :data:`ROUTER_TYPES` maps the names to the
classes; ``SDRStrategy(routers=...)`` takes names or objects (:func:`check_routers`).
"""
from avalanche_sdr.routers.base import Router, TaskFreePrediction
from avalanche_sdr.routers.expert_gate import ExpertGateRouter
from avalanche_sdr.routers.gaussian import GaussianRouter
from avalanche_sdr.routers.kernel_lda import KernelLDARouter
from avalanche_sdr.routers.lda_router import LDARouter, LDAWeightedRouter
from avalanche_sdr.routers.routing import ROUTER_TYPES, check_routers, make_router, route
from avalanche_sdr.vocabulary import DEFAULT_ROUTER, ROUTERS

__all__ = [
    "DEFAULT_ROUTER",
    "ExpertGateRouter",
    "GaussianRouter",
    "KernelLDARouter",
    "LDARouter",
    "LDAWeightedRouter",
    "ROUTERS",
    "ROUTER_TYPES",
    "Router",
    "TaskFreePrediction",
    "check_routers",
    "make_router",
    "route",
]
