"""The ``"lda"`` and ``"lda_weighted"`` task-free routers (``"lda_weighted"`` is SDR's
recommended router): linear discriminant analysis over every (entry, class) pair, in E0's
features and in the features of all entries at once; ``"lda_weighted"`` weighs the two
by evidence from the stream's repeats (the section "Weights chosen on the stream's
repeats").

The ``"gaussian"`` router (:mod:`avalanche_sdr.models.routing`) scores each task in its
own entry's space: no part of it ever compares one group's classes with another's,
and the routing errors it leaves are exactly those confusions of look-alike classes of
different groups (docs/results/task_free.md). This router keeps a little of every
group so that all classes are compared in one space:

- **Units.** A unit u = (entry e, class id c): the classes each entry was trained on.
  A sample's prediction is a unit: its class id is c, its task the latest trained task
  of entry e that has class c, its entry e.
- **E0 statistics** (the stream's whole training data; E0 is fixed): per unit the sum
  and count of E0's features, and, over every task, the scatter ``sum r r^T`` of the
  residuals from each task's class means, their count and ``sum ||r||^4`` (state
  ``lda_base``). A Ledoit-Wolf covariance from these moments
  (:func:`~avalanche_sdr.models.covariance.ledoit_wolf_from_moments`) and the units'
  means give an LDA posterior ``log p_0(u | x)`` over the units.
- **Stored images.** Up to ``per_class`` training images per unit (a seeded draw; uint8
  when they lie in [0, 1]; state ``lda_e<e>``), counted in memory and saved in
  checkpoints. Their features through E0 and through EVERY entry, concatenated and
  square-rooted (``sqrt(max(z, 0))``, a power transform that makes ReLU features
  closer to Gaussian; FeCAM, Goswami et al. NeurIPS 2023, and Tukey's ladder), give
  each unit's mean and a Ledoit-Wolf covariance tied over the units, hence a second
  LDA posterior ``log p_all(u | x)``. This is where groups are told apart: entry e's
  adapted features separate e's own classes, and the stored images of the other groups
  show where those classes fall in e's space.
- **Score.** ``log p_0(u | x) + log p_all(u | x)`` (both normalised over the units);
  the sample goes to the unit with the highest score (ties: the first unit, in entry
  then class-id order).

What is fitted from the stored images (the units' means and the tied whitening in the
concatenated space, [(1 + E) D] wide) is derived state: recomputed after every fit
from the counted state, cached on the model (``_lda_cache``, keyed by the number of
fits, stored in ``lda_base``, and a checksum of the E0 moments) and never stored, so
memory grows with the stored images, not with the square of the concatenated width.

How this was chosen, on validation splits only (seed 0, CPU presets, SDR with the
two-sample rule and head-only reuse; share of validation samples given their true class
without task labels; digits / Fashion-MNIST 10 / EMNIST-100): the ``"gaussian"`` router
98.89 / 78.33 / 70.98 %, this router 98.33 / 76.50 / 80.71 %. Its parts
(``benchmarks/router_ablation.py`` on digits and Fashion-MNIST 10; on EMNIST-100 the same
computation in this router's exploration, with the first 20 images of each class
instead of a seeded draw and one unit per class): E0's LDA alone 97.78 / 77.00 / 63.70 %;
the concatenated LDA alone 98.89 / 75.00 / 80.87 %; both with 10 images per class
96.11 / 73.33 / 78.70 %, with 5 94.44 / 69.33 % (EMNIST not measured); the E0 term at
half weight 98.89 / 75.83 / 81.14 %. Kept: both terms at equal weight, 20 images per
class, the variant that gains about 10 points where the ``"gaussian"`` router loses most
(EMNIST-100) and stays within 2 points of it on the two small validation sets (180 and
600 images, where 2 points are 4 and 12 images). Not kept (exploration, EMNIST-100 /
Fashion-MNIST 10): averaging per-entry LDA posteriors (79.84 / 75.83 %), heads'
confidence (max logit: 44.84 / 25.00 %), a logistic "others" output per entry fitted on
stored features (Fashion-MNIST 10: at best 78.50 %), an "others" output trained into the
entry (Fashion-MNIST 10: 63.33 %).

**Weights chosen on the stream's repeats** (the ``"lda_weighted"`` router; same state,
fitted once): the score ``(1 - a) log p_0(u | x) + a log p_all(u | x)``, with ``a`` the
weight of :data:`TERM_WEIGHTS` (0, 0.25, 0.5, 0.75, 1, fixed in advance; 0.5 ranks the
units as ``"lda"``) that has routed the most images of the stream's detected repeats to
their true unit. A repeat's images are held-out data for the router: right after
detection, before the repeat trains or is fitted into the router, up to
:data:`REPEAT_IMAGES` of them are routed with every weight (:func:`record_repeat`), the
entry the detector reused and each image's class id naming its true unit; the counts
(6 float64 values) are stored with the router's state. Only training data and the
detector's decisions are read; until a repeat comes, ``a = 0.5``. Why: which term tells
the groups apart depends on the stream, and a fixed weight chosen on some streams fails
on others (the ablation of ``benchmarks/router_ablation.py``, validation splits, seed 0:
E0's term alone is 0.6 points below the sum on digits, 0.5 above it on Fashion-MNIST 10,
9.6 above it on CIFAR-10 and 17 below it on EMNIST-100). The concatenated term reads
each entry's features of the entry's own TRAINING images (the stored ones), which are
tighter than those of unseen images where an entry overfits its task (CIFAR-10's small
CNN: task-aware, right on about 8 test images in 10, while the learning reuse's guard
found the heads it checked right on every stored training image), and a repeat's images
are the unseen images of the entry's classes that the stream itself provides.
Measured (validation split, seed 0; ``lda`` -> ``lda_weighted``, the weight chosen):
digits 98.33 -> 98.33 % (0.25), Fashion-MNIST 10 76.50 -> 77.83 % (0.25), CIFAR-10
38.20 -> 47.80 % (0), EMNIST-100 80.71 -> 82.23 % (0.25). On Fashion-MNIST 10,
CIFAR-10 and EMNIST-100 the five weights rank on the repeats exactly as on the
validation split; on digits every weight is within 1.1 points of the others on both
(2 of 180 validation images, 3 of 400 repeat images), and the two rankings differ.
Routing every repeat is the router's main cost on long streams (EMNIST-100's test runs:
about 400 s of loaded time); ``SDRSettings.router_evidence`` stops the evidence after a
number of images (off by default; measured on validation only, docs/results/task_free.md).

Written by hand: Avalanche 0.6.0's ``StreamingLDA`` and ``FeCAMClassifier`` fit one
feature space that the model trains, with one head; here the spaces are E0 and a
changing set of entries, and the concatenated statistics come from stored images.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import torch
from torch import Tensor

from avalanche_sdr._draws import subsample, task_generator
from avalanche_sdr.models.covariance import ledoit_wolf_covariance, ledoit_wolf_from_moments, whitening
from avalanche_sdr.models.repository import float_images, stored_images
from avalanche_sdr.vocabulary import ROUTER_LDA

E0_KEY = f"{ROUTER_LDA}_base"
"""Routing-state key of the E0 moments (:func:`fit_lda`)."""

EXEMPLAR_SEED = 4021
"""Seed of the router's draws of stored images (``task_generator(EXEMPLAR_SEED, task, 0)``)."""


def entry_key(entry: int) -> str:
    """Routing-state key of ``entry``'s units and stored images."""
    return f"{ROUTER_LDA}_e{int(entry)}"


def _power(z: Tensor) -> Tensor:
    """``sqrt(max(z, 0))``, elementwise (the power transform of the module doc)."""
    return z.clamp_min(0).sqrt()


@torch.no_grad()
def fit_lda(model, task: int, entry: int, x: Tensor, y: Tensor, num_classes: int, per_class: int,
            entry_moved: bool = False) -> None:
    """Add a just-trained ``task``'s data to the ``"lda"`` router (module doc).

    :param x: [n, C, H, W] the task's training images; ``y``: [n] int64 local labels
        0..c-1 (every class present; local label k is class ``model.class_ids(task)[k]``).
    :param num_classes: c.
    :param per_class: images stored per unit at most (topped up by later tasks of the
        entry until reached).
    :param entry_moved: the task trained its entry's adapters (a learning reuse's update):
        the stored images' features through it are computed again.
    """
    if entry_moved:
        forget_space(model, entry)
    class_ids = torch.tensor(model.class_ids(task), dtype=torch.long)
    y = y.to("cpu")
    # E0 moments: per unit sums and counts; the within-task, within-class residual scatter.
    z0 = model.batched_features(x, None).double()
    state = model.routing_state(E0_KEY)
    dim = z0.shape[1]
    scatter = state.get("scatter", torch.zeros(dim, dim, dtype=torch.float64)).cpu().double()
    moments = state.get("moments", torch.zeros(2, dtype=torch.float64)).cpu().double()  # n, sum ||r||^4
    fits = state.get("fits", torch.zeros(1, dtype=torch.long)).cpu()
    means = torch.stack([z0[y == j].mean(0) for j in range(num_classes)])
    r = z0 - means[y]
    scatter = scatter + r.T @ r
    moments = moments + torch.tensor([float(r.shape[0]), float(((r**2).sum(1) ** 2).sum())], dtype=torch.float64)
    model.set_routing_state(E0_KEY, {"scatter": scatter, "moments": moments, "fits": fits + 1})

    units = model.routing_state(entry_key(entry))
    ids = units.get("class_ids", torch.zeros(0, dtype=torch.long)).cpu()
    sums = units.get("sums", torch.zeros(0, dim, dtype=torch.float64)).cpu().double()
    counts = units.get("counts", torch.zeros(0, dtype=torch.float64)).cpu().double()
    images = units.get("images")
    labels = units.get("labels", torch.zeros(0, dtype=torch.long)).cpu()
    images = torch.zeros((0,) + tuple(x.shape[1:]), dtype=torch.uint8) if images is None else images.cpu()
    g = task_generator(EXEMPLAR_SEED, task, 0)
    new_images, new_labels = [images], [labels]
    for j in range(num_classes):
        cid = int(class_ids[j])
        members = torch.nonzero(y == j).flatten()
        if cid not in ids.tolist():
            ids = torch.cat([ids, torch.tensor([cid])])
            sums = torch.cat([sums, torch.zeros(1, dim, dtype=torch.float64)])
            counts = torch.cat([counts, torch.zeros(1, dtype=torch.float64)])
        u = ids.tolist().index(cid)
        sums[u] += z0[members].sum(0)
        counts[u] += len(members)
        room = per_class - int((labels == cid).sum())
        if room > 0:
            chosen = members[subsample(len(members), room, g)]
            new_images.append(stored_images(x[chosen].cpu()))
            new_labels.append(torch.full((len(chosen),), cid, dtype=torch.long))
    model.set_routing_state(entry_key(entry), {
        "class_ids": ids, "sums": sums, "counts": counts,
        "images": _joined(new_images), "labels": torch.cat(new_labels)})
    _fitted(model)  # the derived state now, so that its cost counts as fitting, not prediction


def _joined(parts: List[Tensor]) -> Tensor:
    """The stored images and the new ones: uint8 if all are, else all float32 (uint8 ones
    divided by 255, as :func:`~avalanche_sdr.models.repository.stored_images` quantised them)."""
    if all(p.dtype == torch.uint8 for p in parts):
        return torch.cat(parts)
    return torch.cat([float_images(p) for p in parts])


def lda_entries(model) -> List[int]:
    """The entries with ``"lda"`` state, in entry order."""
    return [e for e in model.entries if model.routing_state(entry_key(e))]


def units(model) -> List[Tuple[int, int]]:
    """The (entry, class id) units, in entry then stored order."""
    return [(e, int(c)) for e in lda_entries(model) for c in model.routing_state(entry_key(e))["class_ids"].tolist()]


def _fitted(model) -> Dict[str, Tensor]:
    """The derived LDA state (module doc), recomputed when the router was fitted again."""
    state = model.routing_state(E0_KEY)
    # the number of fits, and a checksum that changes with a state loaded from elsewhere
    version = (int(state["fits"].item()), float(state["scatter"].sum()), float(state["moments"][1]))
    cache = getattr(model, "_lda_cache", None)
    if cache is not None and cache["version"] == version:
        return cache
    entries = lda_entries(model)
    states = [model.routing_state(entry_key(e)) for e in entries]
    sums = torch.cat([s["sums"].cpu().double() for s in states])
    counts = torch.cat([s["counts"].cpu().double() for s in states])
    n, norm4 = state["moments"].cpu().tolist()
    white0 = whitening(ledoit_wolf_from_moments(state["scatter"].cpu(), int(n), norm4))
    means0 = (sums / counts[:, None]) @ white0.T
    unit_of = []
    for i, s in enumerate(states):
        offset = sum(len(t["class_ids"]) for t in states[:i])
        index = {int(c): offset + k for k, c in enumerate(s["class_ids"].tolist())}
        unit_of += [index[int(c)] for c in s["labels"].tolist()]
    unit_of = torch.tensor(unit_of, dtype=torch.long)
    z = _concatenated(model, entries, states)
    n_units = len(counts)
    if not bool(torch.isin(torch.arange(n_units), unit_of).all()):
        raise RuntimeError("an (entry, class) unit of the lda router has no stored image; "
                           "build the strategy with a positive router_exemplars")
    means = torch.stack([z[unit_of == u].mean(0) for u in range(n_units)])
    white = whitening(ledoit_wolf_covariance(z - means[unit_of]))
    cache = {"version": version, "entries": entries, "white0": white0.float(), "means0": means0.float(),
             "white": white.float(), "means": (means @ white.T).float()}
    model._lda_cache = cache
    return cache


def _concatenated(model, entries: List[int], states: List[Dict[str, Tensor]]) -> Tensor:
    """``sqrt(max(0, [E0(x), E_e1(x), ...]))`` of every stored image, the entries' images in
    entry order: [n, (1 + E) D] float64 on the CPU.

    The features of each entry's images through each space are kept on the model
    (``_lda_features``, not stored) and computed only for images stored since, or for a
    space whose entry was updated since (:func:`forget_space`): stored images are only
    ever appended, and an entry's features change only when it trains.
    """
    cache = model.__dict__.setdefault("_lda_features", {})
    rows = []
    spaces = [None] + entries
    # checksums: a state or entry loaded from elsewhere into the same model is not read as kept
    weights = {space: 0.0 if space is None else float(sum(p.detach().double().sum()
                                                         for p in model.encoder.entry_parameters(space)))
               for space in spaces}
    for owner, state in zip(entries, states):
        images = float_images(state["images"]).cpu()
        columns = []
        for space in spaces:
            known, mark = cache.get((owner, space), (None, None))
            if known is not None and (known.shape[0] > images.shape[0]
                                      or mark != (weights[space], float(images[:known.shape[0]].sum()))):
                known = None
            if known is None:
                known = model.batched_features(images, space)
            elif known.shape[0] < images.shape[0]:
                known = torch.cat([known, model.batched_features(images[known.shape[0]:], space)])
            cache[(owner, space)] = (known, (weights[space], float(images.sum())))
            columns.append(known)
        rows.append(torch.cat(columns, dim=1))
    return _power(torch.cat(rows).double())


def forget_space(model, entry: int) -> None:
    """Drop the kept features of stored images through ``entry`` (its features moved: the
    learning reuse updated it)."""
    cache = model.__dict__.get("_lda_features", {})
    for key in [k for k in cache if k[1] == entry]:
        del cache[key]


def lda_scores(model, e0: Tensor, features: Dict[int, Tensor], weight: Optional[float] = None) -> Tensor:
    """Scores [N, U] of N samples for the units (:func:`units`; higher: likelier): the sum
    of the two log-posteriors of :func:`lda_log_posteriors` (the ``"lda"`` router), or with
    ``weight`` a, ``(1 - a) log p_0 + a log p_all`` (the ``"lda_weighted"`` router).

    :param e0: [N, D0] E0 features; ``features``: entry -> [N, D] its features.
    """
    logp0, logp = lda_log_posteriors(model, e0, features)
    if weight is None:
        return logp0 + logp
    return weighted_scores(logp0, logp, weight)


def weighted_scores(logp0: Tensor, logp: Tensor, weight: float) -> Tensor:
    """``(1 - weight) logp0 + weight logp``: the ``"lda_weighted"`` score [N, U] from the two
    log-posteriors of :func:`lda_log_posteriors` (each [N, U])."""
    return (1 - weight) * logp0 + weight * logp


def lda_log_posteriors(model, e0: Tensor, features: Dict[int, Tensor]) -> Tuple[Tensor, Tensor]:
    """The two LDA log-posteriors over the units, each [N, U] (module doc): in E0's
    features, and in the concatenated, square-rooted features of E0 and every entry.

    :param e0: [N, D0] E0 features; ``features``: entry -> [N, D] its features.
    """
    fitted = _fitted(model)
    device = e0.device
    w0 = e0.float() @ fitted["white0"].to(device).T
    logp0 = (-0.5 * torch.cdist(w0, fitted["means0"].to(device)).pow(2)).log_softmax(1)
    z = _power(torch.cat([e0] + [features[e] for e in fitted["entries"]], dim=1).float())
    w = z @ fitted["white"].to(device).T
    logp = (-0.5 * torch.cdist(w, fitted["means"].to(device)).pow(2)).log_softmax(1)
    return logp0, logp


# ---------------------------------------------------------------------- weights chosen on repeats

REPEATS_KEY = f"{ROUTER_LDA}_repeats"
"""Routing-state key of the evidence of :func:`record_repeat` (counted with the ``"lda"``
state, which the ``"lda_weighted"`` router shares)."""

TERM_WEIGHTS = (0.0, 0.25, 0.5, 0.75, 1.0)
"""The weights ``a`` of the concatenated term that ``"lda_weighted"`` chooses from: score
``(1 - a) log p_0(u | x) + a log p_all(u | x)``; ``a = 0.5`` ranks the units as the
``"lda"`` router's sum does. Fixed in advance (an even grid from E0's term alone to the
concatenated term alone), not tuned."""

EQUAL_WEIGHT = 0.5
"""The weight used until a repeat has given evidence, and preferred among equally good ones."""

REPEAT_IMAGES = 100
"""Images of a detected repeat routed as evidence at most (a seeded draw, fixed in advance)."""

REPEAT_SEED = 5077
"""Seed of the draws of :func:`record_repeat` (``task_generator(REPEAT_SEED, task, 0)``)."""


@torch.no_grad()
def record_repeat(model, task: int, entry: int, x: Tensor, class_ids: Tensor, limit: Optional[int] = None) -> int:
    """Route a detected repeat's images with every weight of :data:`TERM_WEIGHTS`, before
    the repeat trains or is fitted, and add how many each sends to its true unit to the
    evidence (state :data:`REPEATS_KEY`: ``counts``, [len(TERM_WEIGHTS) + 1] float64, the
    images routed right per weight, then the images routed).

    These images are held out for the router: its E0 statistics and stored images do not
    include them yet, and the entry has not trained on them (a head-only reuse never
    does; the learning reuse updates the entry only afterwards). Their true unit is
    (``entry``, their class id), the detector's decision standing in for the task label:
    images of a class the entry has no unit of (a wrong reuse of another group's entry)
    are left out, as they cannot be routed right by any weight.

    :param task: the repeat's task label (seeds the draw).
    :param entry: the entry the detector reused.
    :param x: [n, C, H, W] the repeat's training images; ``class_ids``: [n] int64 their class ids.
    :param limit: ``SDRSettings.router_evidence``: where the evidence already holds at least
        this many images, the repeat is not routed (nothing is added); ``None``: no limit.
    :return: the number of images added to the evidence (0 before the router's first fit
        or once the evidence has reached ``limit``).
    """
    if x.shape[0] != class_ids.shape[0]:
        raise ValueError(f"x holds {x.shape[0]} images and class_ids {class_ids.shape[0]} labels")
    if not model.routing_state(E0_KEY):
        return 0
    if limit is not None and evidence_images(model) >= limit:
        return 0
    index = {unit: k for k, unit in enumerate(units(model))}
    targets = torch.tensor([index.get((int(entry), int(c)), -1) for c in class_ids.tolist()], dtype=torch.long)
    pick = subsample(x.shape[0], REPEAT_IMAGES, task_generator(REPEAT_SEED, task, 0))
    pick = pick[targets[pick] >= 0]
    if not len(pick):
        return 0
    images = x[pick]
    e0 = model.batched_features(images, None)
    features = {e: model.batched_features(images, e) for e in _fitted(model)["entries"]}
    logp0, logp = lda_log_posteriors(model, e0, features)
    right = [float((weighted_scores(logp0, logp, a).argmax(1) == targets[pick]).sum()) for a in TERM_WEIGHTS]
    open_evidence(model)
    counts = model.routing_state(REPEATS_KEY)["counts"].cpu().double()
    model.set_routing_state(REPEATS_KEY, {"counts": counts + torch.tensor(right + [float(len(pick))],
                                                                          dtype=torch.float64)})
    return len(pick)


def open_evidence(model) -> None:
    """Start the evidence of :func:`record_repeat` (zero counts) if the repository has none:
    the mark that the ``"lda_weighted"`` router is fitted, so that a repository fitted
    with ``"lda"`` alone refuses it instead of scoring with :data:`EQUAL_WEIGHT`."""
    if not model.routing_state(REPEATS_KEY):
        model.set_routing_state(REPEATS_KEY, {"counts": torch.zeros(len(TERM_WEIGHTS) + 1, dtype=torch.float64)})


def evidence_images(model) -> int:
    """Repeat images routed as the evidence of :func:`record_repeat` so far (0 before any)."""
    counts = model.routing_state(REPEATS_KEY).get("counts")
    return 0 if counts is None else int(counts[-1])


def chosen_weight(model) -> float:
    """The weight of the concatenated term that ``"lda_weighted"`` scores with: the one of
    :data:`TERM_WEIGHTS` that routed the most repeat images right (:func:`record_repeat`);
    among equals the nearest to :data:`EQUAL_WEIGHT`, then the smaller; :data:`EQUAL_WEIGHT`
    before any evidence."""
    if evidence_images(model) == 0:
        return EQUAL_WEIGHT
    right = model.routing_state(REPEATS_KEY)["counts"][:-1].tolist()
    return max(TERM_WEIGHTS, key=lambda a: (right[TERM_WEIGHTS.index(a)], -abs(a - EQUAL_WEIGHT), -a))


def unit_task(model, entry: int, class_id: int) -> int:
    """The latest trained task of ``entry`` with class ``class_id`` (the task a unit's
    prediction is reported through)."""
    tasks = [t for t in model.task_to_entry if model.entry_of(t) == entry and model.is_trained(t)
             and class_id in model.class_ids(t)]
    if not tasks:
        raise RuntimeError(f"no trained task of entry {entry} has class {class_id}")
    return max(tasks)


def unit_table(model) -> Tensor:
    """[U, 3] int64 (task, entry, class id) of every unit (:func:`units`, :func:`unit_task`),
    kept on the model until the router is fitted again or another task gets a head, so
    that a prediction does not search the tasks for every unit of every mini-batch."""
    key = (_fitted(model)["version"], tuple(model.trained_tasks))
    kept = model.__dict__.get("_lda_unit_table")
    if kept is None or kept[0] != key:
        table = torch.tensor([[unit_task(model, e, c), e, c] for e, c in units(model)], dtype=torch.long)
        kept = model.__dict__["_lda_unit_table"] = (key, table)
    return kept[1]


__all__ = ["E0_KEY", "EQUAL_WEIGHT", "REPEATS_KEY", "REPEAT_IMAGES", "TERM_WEIGHTS", "chosen_weight", "entry_key",
           "evidence_images", "fit_lda", "forget_space", "lda_entries", "lda_log_posteriors", "lda_scores",
           "open_evidence", "record_repeat", "unit_table", "weighted_scores", "unit_task", "units"]
