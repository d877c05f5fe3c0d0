"""The ``"kernel_lda"`` task-free router: KLDA on E0's features over every (entry, class) unit.

The closed-form learner ``klda`` (:mod:`avalanche_sdr.closed_form`) as a router: random
Fourier features of E0's features, then one shared-covariance LDA whose classes are the
repository's units u = (entry e, class id c), as the ``"lda"`` router's
(:mod:`avalanche_sdr.routers.lda_router`); a sample's prediction is its highest-scoring
unit: class id c, reported through the latest trained task of entry e that has class c.

- **Map** (state ``kernel_lda_base``: ``weight`` [d, D], ``offset`` [D]):
  :class:`~avalanche_sdr.models.closed_form_heads.RandomFeatures` of kind ``fourier``,
  drawn at the first fit from that task's E0 features (``gamma = gamma_scale / (d
  Var(z))``, scikit-learn's ``RBFSampler`` seeded with :data:`MAP_SEED`).
- **Statistics**: ``scatter`` [D, D] (the within-class scatter of every training image
  around its unit's mean, in ``kernel_lda_base``) and per entry (``kernel_lda_e<e>``) its units' class ids [u],
  sums [u, D] and counts [u]; float32, counted in memory and checkpointed. They read E0
  only, which never changes, so an entry's update (the learning reuse) changes nothing
  here, and no image is stored.
- **Score**: :func:`~avalanche_sdr.models.closed_form_heads.solve_head` (LDA, shrinkage
  ``shrinkage``) over the units, equal priors; solved after each fit and kept on the
  model until the next one (not stored).

Why it exists and how its settings were chosen: the defaults (:data:`DIM`,
:data:`GAMMA_SCALE`, :data:`SHRINKAGE`) are the grid point of
``benchmarks/closed_form/router.py`` with the best mean validation task-free accuracy
over Fashion-MNIST 10 and 50, EMNIST-100 and CIFAR-10 (seed 0; no point with fewer
features within 0.5 points of it). It is not SDR's recommended router: it reads E0
only, and on EMNIST-100's validation split, where the entries' features tell the
groups apart, it is 8.8 points below ``"lda_weighted"`` (docs/results/closed_form.md).
"""
from __future__ import annotations

from typing import Dict, List, Tuple

import weakref

import torch
from torch import Tensor

from avalanche_sdr._checks import check_int, check_positive
from avalanche_sdr.models.closed_form_heads import (FOURIER, LDA, RandomFeatures, accumulate, check_fraction,
                                                    solve_head)
from avalanche_sdr.models.task_data import TaskData
from avalanche_sdr.routers.base import Router, TaskFreePrediction, entry_key
from avalanche_sdr.routers.lda_router import unit_task
from avalanche_sdr.vocabulary import ROUTER_KERNEL_LDA

BASE_KEY = f"{ROUTER_KERNEL_LDA}_base"
"""Routing-state key of the map and the within-class scatter."""

MAP_SEED = 4093
"""Seed of the random Fourier features' draw."""

DIM = 2048
"""Default number of random Fourier features D (its state: 17.1 MB with E0's 128 features)."""

GAMMA_SCALE = 0.25
"""Default kernel width, a multiple of scikit-learn's ``gamma="scale"``."""

SHRINKAGE = 1e-3
"""Default shrinkage of the shared covariance."""


def _key(entry: int) -> str:
    return entry_key(ROUTER_KERNEL_LDA, entry)


_SOLVED: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
"""Repository -> its solved discriminants (:meth:`KernelLDARouter._solved`): derived from
the routing state, never stored; kept here, not on the repository, and let go with it."""


class KernelLDARouter(Router):
    """The ``"kernel_lda"`` router (module doc).

    :param dim: D, the number of random Fourier features (its state holds a [D, D]
        matrix: 4 D^2 bytes).
    :param gamma_scale: the kernel width, a multiple of scikit-learn's ``gamma="scale"``
        on the first task's E0 features (positive).
    :param shrinkage: s in [0, 1].
    :raises ValueError: a setting out of range.
    """

    name = ROUTER_KERNEL_LDA
    state_name = ROUTER_KERNEL_LDA

    def __init__(self, dim: int = DIM, gamma_scale: float = GAMMA_SCALE, shrinkage: float = SHRINKAGE):
        self.dim = check_int(dim, "dim", hint=" (the number of random Fourier features)")
        self.gamma_scale = float(check_positive(gamma_scale, "gamma_scale"))
        self.shrinkage = check_fraction(shrinkage, "shrinkage", closed_low=True)

    def options(self) -> Dict[str, object]:
        return {"dim": self.dim, "gamma_scale": self.gamma_scale, "shrinkage": self.shrinkage}

    # ------------------------------------------------------------------ fitting
    def _map(self, model, in_dim: int) -> RandomFeatures:
        """The map held in the repository's state, as a module (uncalibrated before the first fit)."""
        features = RandomFeatures(FOURIER, in_dim, self.dim, MAP_SEED, gamma_scale=self.gamma_scale)
        state = model.routing_state(BASE_KEY)
        if state:
            features.weight.copy_(state["weight"].cpu())
            features.offset.copy_(state["offset"].cpu())
            features.gamma = float(state["gamma"])
        return features

    @torch.no_grad()
    def fit(self, model, data: TaskData, *, new_entry: bool, entry_updated: bool = False) -> None:
        """Add a just-trained task's training images to the statistics (module doc).

        :param data: the task's training data (:class:`~avalanche_sdr.models.task_data.TaskData`;
            its E0 features, computed once per task, are what the map reads; local label k is
            class ``model.heads.class_ids(data.task)[k]``).
        """
        self.fit_features(model, data.task, data.e0_features(model), data.y)

    @torch.no_grad()
    def fit_features(self, model, task: int, z: Tensor, y: Tensor) -> None:
        """:meth:`fit` from the images' E0 features ``z`` [n, d] (e.g. computed once for
        several routers' fits); ``y`` as there."""
        features = self._map(model, z.shape[1])
        features.calibrate(z)
        base = model.routing_state(BASE_KEY)
        scatter = base["scatter"].cpu().clone() if base else torch.zeros(self.dim, self.dim)
        entry = model.entry_of(task)
        units = model.routing_state(_key(entry))
        ids = units.get("class_ids", torch.zeros(0, dtype=torch.long)).cpu()
        sums = units.get("sums", torch.zeros(0, self.dim)).cpu()
        counts = units.get("counts", torch.zeros(0)).cpu()
        class_ids = model.heads.class_ids(task)
        for cid in class_ids:  # a unit per class id new to the entry
            if cid not in ids.tolist():
                ids = torch.cat([ids, torch.tensor([cid])])
                sums = torch.cat([sums, torch.zeros(1, self.dim)])
                counts = torch.cat([counts, torch.zeros(1)])
        position = {int(c): k for k, c in enumerate(ids.tolist())}
        rows = torch.tensor([position[int(class_ids[int(j)])] for j in y.tolist()], dtype=torch.long)
        accumulate(scatter, sums, counts, features(z), rows)
        model.set_routing_state(BASE_KEY, {"weight": features.weight, "offset": features.offset,
                                           "gamma": torch.tensor(features.gamma, dtype=torch.float64),
                                           "scatter": scatter})
        model.set_routing_state(_key(entry), {"class_ids": ids, "sums": sums, "counts": counts})
        self._solved(model)  # now, so that its cost counts as fitting, not prediction

    def _entries(self, model) -> List[int]:
        return [e for e in model.entries if model.routing_state(_key(e))]

    def _solved(self, model) -> Dict[str, object]:
        """``{"weights": [D, U], "offsets": [U], "units": [(entry, class id)], "map":
        RandomFeatures}``, kept (:data:`_SOLVED`) until the statistics change."""
        base = model.routing_state(BASE_KEY)
        entries = self._entries(model)
        states = [model.routing_state(_key(e)) for e in entries]
        version = (repr(self), tuple(entries), float(base["scatter"].sum()),
                   tuple(tuple(s["counts"].tolist()) for s in states))
        kept = _SOLVED.get(model)
        if kept is not None and kept["version"] == version:
            return kept
        sums = torch.cat([s["sums"].cpu() for s in states])
        counts = torch.cat([s["counts"].cpu() for s in states])
        weights, offsets, _ = solve_head(LDA, base["scatter"].cpu(), sums, counts, shrinkage=self.shrinkage)
        kept = {"version": version, "weights": weights, "offsets": offsets,
                "units": [(e, int(c)) for e, s in zip(entries, states) for c in s["class_ids"].tolist()],
                "map": self._map(model, base["weight"].shape[0])}
        _SOLVED[model] = kept
        return kept

    # ------------------------------------------------------------------ routing
    def routable(self, model) -> Tuple[List[int], List[int]]:
        if not model.routing_state(BASE_KEY):
            return [], []
        entries = self._entries(model)
        return [t for t in model.task_to_entry if model.heads.is_trained(t) and model.entry_of(t) in entries], entries

    def scores(self, model, e0: Tensor) -> Tuple[Tensor, Tensor]:
        """``(scores [N, U] float32, units [U, 3] int64 (task, entry, class id))`` of E0
        features ``e0`` [N, d] (higher: likelier); a unit's task is the latest trained task
        of its entry with its class."""
        solved = self._solved(model)
        device = e0.device
        h = solved["map"].to(device)(e0)
        units = torch.tensor([[unit_task(model, e, c), e, c] for e, c in solved["units"]], dtype=torch.long)
        return h @ solved["weights"].to(device) + solved["offsets"].to(device), units

    def predict_routed(self, model, x: Tensor, e0: Tensor, features: Dict[int, Tensor], tasks: List[int],
                       entries: List[int]) -> TaskFreePrediction:
        """Each sample's highest-scoring unit, reported through the unit's latest task."""
        scores, units = self.scores(model, e0)
        chosen = units[scores.argmax(dim=1).cpu()].to(x.device)
        return TaskFreePrediction(class_ids=chosen[:, 2], tasks=chosen[:, 0], entries=chosen[:, 1])


__all__ = ["BASE_KEY", "DIM", "GAMMA_SCALE", "KernelLDARouter", "MAP_SEED", "SHRINKAGE"]
