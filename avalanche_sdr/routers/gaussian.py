"""The ``"gaussian"`` task-free router, SDR's first: class-conditional Gaussians per entry.

Class-conditional Gaussians with a covariance tied within each entry (linear
discriminant analysis; the score of Lee et al., NeurIPS 2018), in the features
``z = [E0(x), E_e(x)]`` ([D0 + D] float): E0's fixed features concatenated with the
entry's own. When an entry is created, its tied within-class covariance is estimated
from its creating task's features (Ledoit-Wolf shrinkage,
:mod:`avalanche_sdr.routers.covariance`) and stored as the lower triangle of its
whitening matrix; every task mapped to the entry stores its whitened class means. A
sample goes to the task with the lowest squared Mahalanobis distance to its nearest
class (ties: the earliest task). How it was chosen: docs/method.rst, "Task-free
prediction"; it is no longer the default router (:class:`~avalanche_sdr.routers.LDAWeightedRouter` is).
"""
from __future__ import annotations

from typing import Dict, List, Tuple

import torch
from torch import Tensor

from avalanche_sdr.models.task_data import TaskData
from avalanche_sdr.routers.base import Router, TaskFreePrediction, entry_key, heads_prediction, required_state, task_key
from avalanche_sdr.routers.covariance import ledoit_wolf_covariance, whitening
from avalanche_sdr.vocabulary import ROUTER_GAUSSIAN


def _class_means(z: Tensor, y: Tensor, num_classes: int) -> Tensor:
    """[c, D] means of ``z`` [n, D] per label 0..c-1 of ``y`` [n]."""
    return torch.stack([z[y == j].mean(0) for j in range(num_classes)])


def _nearest_class_distance(w: Tensor, means: Tensor) -> Tensor:
    """min_j ||w_i - m_j||^2: [N] for whitened features [N, D] and means [c, D]."""
    return torch.cdist(w, means).pow(2).min(dim=1).values


def fit_gaussian(model, task: int, entry: int, data: TaskData, new_entry: bool) -> None:
    """Store the ``"gaussian"`` router's state of ``task`` (and of ``entry`` when new).

    :param data: training images of ``task``'s classes with ``task``'s local labels
        0..c-1 (every class present) in ``data.y``.
    """
    z = torch.cat([data.e0_features(model), model.batched_features(data.x, entry)], dim=1).double()
    y = data.y.to("cpu")
    means = _class_means(z, y, data.num_classes)
    if new_entry:
        whiten = whitening(ledoit_wolf_covariance(z - means[y]))
        rows, cols = torch.tril_indices(*whiten.shape)
        model.set_routing_state(entry_key(ROUTER_GAUSSIAN, entry), {"whiten_tril": whiten[rows, cols].float()})
    whiten = _whitening(model, entry).to("cpu", torch.float64)
    model.set_routing_state(task_key(ROUTER_GAUSSIAN, task), {"means": (means @ whiten.T).float()})


def _whitening(model, entry: int) -> Tensor:
    """The entry's lower-triangular whitening matrix [D', D'] (float32), unpacked from
    its stored lower triangle (``whiten_tril``, [D' (D' + 1) / 2])."""
    packed = required_state(model, entry_key(ROUTER_GAUSSIAN, entry), ROUTER_GAUSSIAN)["whiten_tril"]
    dim = int(round(((8 * packed.numel() + 1) ** 0.5 - 1) / 2))
    rows, cols = torch.tril_indices(dim, dim, device=packed.device)
    whiten = torch.zeros(dim, dim, dtype=packed.dtype, device=packed.device)
    whiten[rows, cols] = packed
    return whiten


def _gaussian_scores(model, tasks: List[int], features: Dict[int, Tensor], e0: Tensor) -> Tensor:
    """Scores [N, T] (lower: nearer) of the N samples for each of ``tasks``."""
    whitened: Dict[int, Tensor] = {}
    columns = []
    for t in tasks:
        e = model.entry_of(t)
        if e not in whitened:
            whitened[e] = torch.cat([e0, features[e]], dim=1) @ _whitening(model, e).to(e0.device).T
        means = required_state(model, task_key(ROUTER_GAUSSIAN, t), ROUTER_GAUSSIAN)["means"].to(e0.device)
        columns.append(_nearest_class_distance(whitened[e], means))
    return torch.stack(columns, dim=1)


def _refit_entry_tasks(model, entry: int, data: TaskData) -> None:
    """The ``"gaussian"`` class means of the other tasks on an updated ``entry``: they
    share its head, so the task's data (its local labels mapped into the head's class
    order, then into each other task's own order through its
    :meth:`~avalanche_sdr.models.heads.TaskHeads.permutation`) give their means in the
    entry's new feature space."""
    head_y = model.heads.labels(data.task, data.y)
    for other in model.trained_tasks:
        if other != data.task and model.entry_of(other) == entry:
            inverse = torch.argsort(torch.as_tensor(list(model.heads.permutation(other)), dtype=torch.long))
            fit_gaussian(model, other, entry, data.with_labels(inverse[head_y]), False)


class GaussianRouter(Router):
    """The ``"gaussian"`` router (module doc). No options."""

    name = ROUTER_GAUSSIAN
    state_name = ROUTER_GAUSSIAN

    def fit(self, model, data: TaskData, *, new_entry: bool, entry_updated: bool = False) -> None:
        """:meth:`Router.fit`; an updated entry's covariance is refitted as for a new entry,
        and so are the class means of every other task on it (:func:`_refit_entry_tasks`)."""
        entry = model.entry_of(data.task)
        fit_gaussian(model, data.task, entry, data, new_entry or entry_updated)
        if entry_updated:
            _refit_entry_tasks(model, entry, data)

    def routable(self, model) -> Tuple[List[int], List[int]]:
        tasks = [t for t in model.task_to_entry if model.heads.is_trained(t) and model.routing_state(task_key(self.name, t))
                 and model.routing_state(entry_key(self.name, model.entry_of(t)))]
        return tasks, sorted({model.entry_of(t) for t in tasks})

    def predict_routed(self, model, x: Tensor, e0: Tensor, features: Dict[int, Tensor], tasks: List[int],
                       entries: List[int]) -> TaskFreePrediction:
        choice = _gaussian_scores(model, tasks, features, e0).argmin(dim=1)
        return heads_prediction(model, x, tasks, choice, features)


__all__ = ["GaussianRouter", "fit_gaussian"]
