"""Task-free prediction: route a sample to a trained task, then predict its class id.

SDR as published is task-aware: task t is predicted by f_t(E_{m(t)}(x)). A router
removes the need for the task label at test time: for a sample x it chooses a trained
task r (hence an entry m(r)) and answers ``argmax f_r(E_{m(r)}(x))`` as the class id of
r's head (the dataset's original class id when the stream was trained on original
class ids, e.g. ``original_class_ids=True`` in this package's benchmarks).

Four routers (:data:`~avalanche_sdr.vocabulary.ROUTERS`), each fitted per task right after the task's training
(:class:`~avalanche_sdr.training.SDRStrategy` with ``routers=(...)``); their state is
stored in the repository (``SDRModel.routing_states``: counted in memory, saved in
checkpoints):

``"lda_weighted"`` (SDR's recommended router) and ``"lda"`` — linear discriminant
analysis over every (entry, class) pair, in E0's features and in all entries' features
at once, from 20 stored images per class: :mod:`avalanche_sdr.models.lda_router` (its
docstring says how it was chosen, on validation splits, against the router below).
``"lda"`` adds the two LDA terms; ``"lda_weighted"`` weighs them with the weight that
routed the most images of the stream's detected repeats right, each repeat routed before
it trained (:func:`~avalanche_sdr.models.lda_router.record_repeat`). They share one
state, fitted once when both are named (:func:`state_router`).

``"gaussian"`` (SDR's first router) — class-conditional Gaussians with a covariance tied
within each entry (linear discriminant analysis; Lee et al., NeurIPS 2018, "A simple
unified framework for detecting out-of-distribution samples", use the same score), in
the features ``z = [E0(x), E_e(x)]`` ([D0 + D] float): the fixed E0 features, shared by
every entry, concatenated with the entry's own adapted features:

1. When an entry e is created, its tied within-class covariance Σ_e is estimated from
   its creating task's features after training: the residuals ``z_i - mu_{y_i}`` give
   the sample covariance S, shrunk towards ``(tr S / D) I`` with the Ledoit-Wolf
   intensity (Ledoit & Wolf 2004, estimated from the same residuals), so Σ_e is
   invertible for any n. The entry stores the whitening matrix ``W_e = L^{-1}``
   (Σ_e = L L^T; lower triangular, so only its lower triangle is kept:
   (D0 + D)(D0 + D + 1) / 2 float32 values).
2. Every task t mapped to e (creator or reuse) stores its class means in whitened
   coordinates ``m_{t,j} = W_e mu_{t,j}`` ([c, D0 + D] float32).
3. A sample's score for task t is ``min_j ||W_e z(x) - m_{t,j}||^2``, the squared
   Mahalanobis distance to the nearest class of t; the sample goes to the task with the
   lowest score (ties: the earliest task).

How this was chosen (validation streams only: seed 0 of the CPU presets of digits and
Fashion-MNIST-10; share of validation samples routed to a task of their own group,
digits / Fashion-MNIST): the entry's features alone 98.9 % / 71.8 %, E0's alone
98.3 % / 77.7 %, the concatenation 99.4 % / 79.7 %. Not kept: dividing each task's
distance by its training samples' median (entry features: 98.9 % / 71.3 %), adding
``log det Σ_e`` (a full Gaussian likelihood; concatenation: 98.9 % / 52.2 %), one
covariance per class (E0: 61.0 % on Fashion-MNIST).

``"expert_gate"`` (baseline, Aljundi et al., CVPR 2017) — one undercomplete autoencoder
per entry on E0's features of its creating task
(:func:`~avalanche_sdr.detection.expert_gate.train_autoencoder`, Expert Gate's
settings :data:`~avalanche_sdr.detection.expert_gate.DEFAULT_EXPERT_GATE`); a sample goes
to the entry whose autoencoder reconstructs it best (lowest
:func:`~avalanche_sdr.detection.expert_gate.reconstruction_errors`), and is predicted
with the head of that entry's creating task.

Written by hand: neither Avalanche 0.6.0 nor torch has class-conditional Gaussian
scoring or a Ledoit-Wolf estimator (scikit-learn's is not a dependency of this
package); it is a few lines of float64 linear algebra on [n, D] matrices.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Sequence, Tuple

import torch
from torch import Tensor

from avalanche_sdr.detection.expert_gate import DEFAULT_EXPERT_GATE, reconstruction_errors, train_autoencoder
from avalanche_sdr.models import lda_router
from avalanche_sdr.models.covariance import ledoit_wolf_covariance, whitening
from avalanche_sdr.vocabulary import (ROUTER_EXPERT_GATE, ROUTER_GAUSSIAN, ROUTER_LDA, ROUTER_LDA_WEIGHTED, ROUTERS,
                                      SHARED_ROUTER_STATE)


def check_routers(routers: Sequence[str]) -> tuple:
    """``routers`` as a tuple of distinct names from :data:`~avalanche_sdr.vocabulary.ROUTERS`.

    :raises ValueError: an unknown or repeated name, or a single string given instead
        of a sequence.
    """
    if isinstance(routers, str):
        raise ValueError(f"routers must be a sequence of names, e.g. ({routers!r},); got the string {routers!r}")
    routers = tuple(routers)
    unknown = [r for r in routers if r not in ROUTERS]
    if unknown:
        raise ValueError(f"unknown router(s) {unknown}; available: {list(ROUTERS)}")
    if len(set(routers)) != len(routers):
        raise ValueError(f"routers must be distinct, got {list(routers)}")
    return routers


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


# ---------------------------------------------------------------------- keys

def _entry_key(router: str, entry: int) -> str:
    return f"{router}_e{int(entry)}"


def _task_key(router: str, task: int) -> str:
    return f"{router}_t{int(task)}"


def state_router(router: str) -> str:
    """The router whose state ``router`` reads: ``"lda"`` for ``"lda_weighted"`` (both
    score with the same fitted state), else ``router`` itself."""
    return SHARED_ROUTER_STATE.get(router, router)


def router_states(model, router: str) -> List[torch.nn.Module]:
    """The modules (:class:`~avalanche_sdr.models.repository.TensorSet`) holding
    ``router``'s state in the repository, e.g. to count its bytes (``"lda"`` and
    ``"lda_weighted"``: the same, shared modules; :func:`state_router`)."""
    prefix = f"{state_router(router)}_"
    return [state for key, state in model.routing_states.items() if key.startswith(prefix)]


def _state(model, key: str, router: str) -> Dict[str, Tensor]:
    state = model.routing_state(key)
    if not state:
        raise RuntimeError(
            f"the repository has no {router!r} routing state {key!r}: the router must be fitted on every "
            f"task from the first one (build the strategy with routers=({router!r},))"
        )
    return state


# ---------------------------------------------------------------------- Gaussian

def _class_means(z: Tensor, y: Tensor, num_classes: int) -> Tensor:
    """[c, D] means of ``z`` [n, D] per label 0..c-1 of ``y`` [n]."""
    return torch.stack([z[y == j].mean(0) for j in range(num_classes)])


def _nearest_class_distance(w: Tensor, means: Tensor) -> Tensor:
    """min_j ||w_i - m_j||^2: [N] for whitened features [N, D] and means [c, D]."""
    return torch.cdist(w, means).pow(2).min(dim=1).values


def fit_gaussian(model, task: int, entry: int, x: Tensor, y: Tensor, num_classes: int, new_entry: bool) -> None:
    """Store the ``"gaussian"`` router's state of ``task`` (and of ``entry`` when new).

    :param x: [n, C, H, W] the task's training images; ``y``: [n] int64 local labels
        0..c-1 (every class present).
    """
    z = torch.cat([model.batched_features(x, None), model.batched_features(x, entry)], dim=1).double()
    y = y.to("cpu")
    means = _class_means(z, y, num_classes)
    if new_entry:
        whiten = whitening(ledoit_wolf_covariance(z - means[y]))
        rows, cols = torch.tril_indices(*whiten.shape)
        model.set_routing_state(_entry_key(ROUTER_GAUSSIAN, entry), {"whiten_tril": whiten[rows, cols].float()})
    whiten = _whitening(model, entry).to("cpu", torch.float64)
    model.set_routing_state(_task_key(ROUTER_GAUSSIAN, task), {"means": (means @ whiten.T).float()})


def _whitening(model, entry: int) -> Tensor:
    """The entry's lower-triangular whitening matrix [D', D'] (float32), unpacked from
    its stored lower triangle (``whiten_tril``, [D' (D' + 1) / 2])."""
    packed = _state(model, _entry_key(ROUTER_GAUSSIAN, entry), ROUTER_GAUSSIAN)["whiten_tril"]
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
        means = _state(model, _task_key(ROUTER_GAUSSIAN, t), ROUTER_GAUSSIAN)["means"].to(e0.device)
        columns.append(_nearest_class_distance(whitened[e], means))
    return torch.stack(columns, dim=1)


def routable(model, router: str) -> Tuple[List[int], List[int]]:
    """The trained tasks ``router`` can send samples to, and their entries: those whose
    router state is fitted (not a task still in training, e.g. during a periodic
    evaluation). Both lists are empty when there are none.

    :return: ``(tasks, entries)``; for ``"expert_gate"`` the tasks are the entries'
        creating tasks, in entry order.
    """
    check_routers((router,))
    if router == ROUTER_GAUSSIAN:
        tasks = [t for t in model.task_to_entry if model.is_trained(t) and model.routing_state(_task_key(router, t))
                 and model.routing_state(_entry_key(router, model.entry_of(t)))]
        return tasks, sorted({model.entry_of(t) for t in tasks})
    if state_router(router) == ROUTER_LDA:
        if not model.routing_state(lda_router.E0_KEY) or (
                router == ROUTER_LDA_WEIGHTED and not model.routing_state(lda_router.REPEATS_KEY)):
            return [], []
        entries = lda_router.lda_entries(model)
        tasks = [t for t in model.task_to_entry if model.is_trained(t) and model.entry_of(t) in entries]
        return tasks, entries
    entries = [e for e in model.entries if model.routing_state(_entry_key(router, e))]
    return [model.entry_creator[e] for e in entries], entries


# ---------------------------------------------------------------------- Expert Gate

def fit_expert_gate(model, task: int, entry: int, x: Tensor, new_entry: bool) -> None:
    """Store the ``"expert_gate"`` router's autoencoder of a NEW ``entry`` (trained on
    E0 features of its creating ``task``); nothing for a reused entry."""
    if not new_entry:
        return
    feats = model.batched_features(x, None).float()
    model.set_routing_state(_entry_key(ROUTER_EXPERT_GATE, entry), train_autoencoder(feats, DEFAULT_EXPERT_GATE, task))


# ---------------------------------------------------------------------- fit / route

def fit_router(router: str, model, task: int, x: Tensor, y: Tensor, num_classes: int, new_entry: bool,
               exemplars_per_class: int = 20, entry_updated: bool = False) -> None:
    """Fit ``router``'s state for a just-trained ``task`` (its entry: ``model.entry_of(task)``).

    :param router: a name in :data:`~avalanche_sdr.vocabulary.ROUTERS`.
    :param model: the :class:`~avalanche_sdr.models.SDRModel`, the task trained.
    :param x: [n, C, H, W] float images of the task's training data.
    :param y: [n] int64 local labels 0..c-1.
    :param num_classes: c.
    :param new_entry: whether the task created its entry (warm start or new).
    :param exemplars_per_class: ``"lda"`` / ``"lda_weighted"`` only: training images
        stored per (entry, class) at most (``SDRSettings.router_exemplars``). These two
        routers share one state: fit it once per task, under either name (the
        :class:`~avalanche_sdr.training.SDRPlugin` does), not under both.
    :param entry_updated: the task trained a reused entry's adapters (the learning
        reuse), so features read through the entry moved: ``"gaussian"`` refits the
        entry's covariance as for a new entry and the class means of every other task
        on the entry (:func:`_refit_entry_tasks`), ``"lda"`` recomputes the stored
        images' features through it.
    """
    entry = model.entry_of(task)
    if router == ROUTER_GAUSSIAN:  # an updated entry's features moved: its covariance is refitted too
        fit_gaussian(model, task, entry, x, y, num_classes, new_entry or entry_updated)
        if entry_updated:
            _refit_entry_tasks(model, task, entry, x, y, num_classes)
    elif router == ROUTER_EXPERT_GATE:
        fit_expert_gate(model, task, entry, x, new_entry)
    elif state_router(router) == ROUTER_LDA:
        lda_router.fit_lda(model, task, entry, x, y, num_classes, exemplars_per_class, entry_moved=entry_updated)
        if router == ROUTER_LDA_WEIGHTED:
            lda_router.open_evidence(model)
    else:
        check_routers((router,))


def _refit_entry_tasks(model, task: int, entry: int, x: Tensor, y: Tensor, num_classes: int) -> None:
    """The ``"gaussian"`` class means of the other tasks on an updated ``entry``: they
    share its head, so ``task``'s data [n, C, H, W] with local labels ``y`` [n] (mapped
    into the head's class order, then into each other task's own order through its
    :meth:`~avalanche_sdr.models.SDRModel.head_permutation`) give their means in the
    entry's new feature space."""
    head_y = model.head_labels(task, y)
    for other in model.trained_tasks:
        if other != task and model.entry_of(other) == entry:
            inverse = torch.argsort(torch.as_tensor(list(model.head_permutation(other)), dtype=torch.long))
            fit_gaussian(model, other, entry, x, inverse[head_y], num_classes, False)


@torch.no_grad()
def route(model, x: Tensor, router: str = ROUTER_GAUSSIAN) -> TaskFreePrediction:
    """Predict without task labels: route each sample, then apply the routed task's head.

    :param model: an :class:`~avalanche_sdr.models.SDRModel` fitted with ``router``.
    :param x: [N, C, H, W] float images in [0, 1] (on the model's device).
    :param router: a name in :data:`~avalanche_sdr.vocabulary.ROUTERS`.
    :return: a :class:`TaskFreePrediction` (int64 [N] tensors on ``x``'s device).
    :raises RuntimeError: the repository was not fitted with ``router``, or holds no task.
    :raises ValueError: ``x`` is not [N, C, H, W] or contains NaN or Inf.
    """
    return route_with_features(model, x, router)[0]


@torch.no_grad()
def route_with_features(model, x: Tensor, router: str = ROUTER_GAUSSIAN) -> Tuple[TaskFreePrediction, Dict[int, Tensor]]:
    """:func:`route`, and the features it computed: entry -> [N, D] ``E_entry(x)`` for
    every entry the router reads (those of the routed tasks among them), so that a
    caller needing the routed heads' logits (:func:`~avalanche_sdr.evaluation.class_incremental.routed_scores`)
    does not compute them again. Same arguments and errors as :func:`route`."""
    check_routers((router,))
    if x.dim() != 4:
        raise ValueError(f"x must be a [N, C, H, W] batch of images, got shape {tuple(x.shape)}")
    if not bool(torch.isfinite(x).all()):
        raise ValueError("x contains NaN or Inf values; a router cannot score them")
    tasks, entries = routable(model, router)
    if not tasks:
        if not any(model.is_trained(t) for t in model.task_to_entry):
            raise RuntimeError("the repository holds no trained task to route to")
        _state(model, _entry_key(router, model.entries[0]), router)  # raises: how to fit the router
    was_training = model.training
    model.eval()
    try:
        features = {e: model.features(x, e) for e in entries}
        e0 = model.features(x, None)
        if state_router(router) == ROUTER_LDA:
            weight = lda_router.chosen_weight(model) if router == ROUTER_LDA_WEIGHTED else None
            return _lda_prediction(model, x, lda_router.lda_scores(model, e0, features, weight)), features
        if router == ROUTER_GAUSSIAN:
            choice = _gaussian_scores(model, tasks, features, e0).argmin(dim=1)
        else:
            choice = torch.stack([reconstruction_errors(_state(model, _entry_key(router, e), router), e0)
                                  for e in entries], dim=1).argmin(dim=1)
        routed_tasks = torch.tensor(tasks, device=x.device)[choice.to(x.device)]
        routed_entries = torch.tensor([model.entry_of(int(t)) for t in routed_tasks.tolist()], device=x.device,
                                      dtype=torch.long)
        class_ids = torch.empty(x.shape[0], dtype=torch.long, device=x.device)
        for t in torch.unique(routed_tasks).tolist():
            mask = routed_tasks == t
            logits = model.head_logits(int(t), features[model.entry_of(int(t))][mask])
            class_ids[mask] = logits.argmax(dim=1)  # head_logits' columns are the class ids
    finally:
        model.encoder.set_active(None)
        model.train(was_training)
    return TaskFreePrediction(class_ids=class_ids, tasks=routed_tasks.long(), entries=routed_entries), features


def _lda_prediction(model, x: Tensor, scores: Tensor) -> TaskFreePrediction:
    """The ``"lda"`` router's answer from its unit scores [N, U]: each sample's
    highest-scoring (entry, class id) unit, reported through the unit's latest task."""
    chosen = lda_router.unit_table(model)[scores.argmax(dim=1).cpu()].to(x.device)
    return TaskFreePrediction(class_ids=chosen[:, 2], tasks=chosen[:, 0], entries=chosen[:, 1])


__all__ = ["ROUTERS", "TaskFreePrediction", "check_routers", "fit_router", "ledoit_wolf_covariance", "routable",
           "route", "route_with_features", "router_states", "state_router"]
