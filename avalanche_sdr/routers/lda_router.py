"""The ``"lda"`` and ``"lda_weighted"`` task-free routers (``"lda_weighted"`` is SDR's
recommended one): linear discriminant analysis over every (entry, class) unit, in E0's
features and in the features of all entries at once.

- **Units.** A unit u = (entry e, class id c); a sample's prediction is a unit: class
  id c, reported through the latest trained task of entry e that has class c.
- **E0 statistics** (state ``lda_base``): per unit the sum and count of E0's features,
  and the within-class residual scatter of every task, its count and ``sum ||r||^4``;
  a Ledoit-Wolf covariance from these moments gives ``log p_0(u | x)``.
- **Stored images** (state ``lda_e<e>``): up to ``exemplars`` training images per unit
  (a seeded draw, uint8 when in [0, 1]), counted in memory and checkpointed. Their
  features through E0 and EVERY entry, concatenated and square-rooted
  (``sqrt(max(z, 0))``), give each unit's mean and a tied covariance, hence
  ``log p_all(u | x)``: where groups are told apart.
- **Score.** ``"lda"``: ``log p_0 + log p_all``; ``"lda_weighted"``:
  ``(1 - a) log p_0 + a log p_all`` with ``a`` the weight of :data:`TERM_WEIGHTS` that
  routed the most images of the stream's detected repeats right (:func:`record_repeat`:
  routed before each repeat trains; ``a = 0.5`` until one comes). Ties: the first unit.

What is derived from the stored images is kept in this module per repository
(:data:`_DERIVED`, never stored) and updated only where a fit changed it; the tied
covariance goes through the stored images' Gram matrix, never a [W, W] one
(:func:`_sample_space`, :func:`_discriminants`). How the router and its options were
chosen, on validation splits only: docs/method.rst, "How the task-free routers were
chosen". Written by hand: Avalanche 0.6.0's ``StreamingLDA`` and ``FeCAMClassifier``
fit one feature space with one head; here the spaces are E0 and a changing set of
entries.
"""
from __future__ import annotations

import contextlib
import hashlib
import weakref
from typing import Any, Dict, List, Optional, Tuple

import torch
from torch import Tensor

from avalanche_sdr._batching import eval_batch_size
from avalanche_sdr._checks import check_int
from avalanche_sdr._draws import subsample, task_generator
from avalanche_sdr.models.digests import backbone_state_digest, task_state_digest
from avalanche_sdr.models.stored import float_images, stored_images
from avalanche_sdr.models.task_data import TaskData
from avalanche_sdr.routers.base import Router, TaskFreePrediction
from avalanche_sdr.routers.covariance import ledoit_wolf_from_gram, ledoit_wolf_from_moments, whitening
from avalanche_sdr.vocabulary import ROUTER_LDA, ROUTER_LDA_WEIGHTED

E0_KEY = f"{ROUTER_LDA}_base"
"""Routing-state key of the E0 moments (:func:`fit_lda`)."""

EXEMPLAR_SEED = 4021
"""Seed of the router's draws of stored images (``task_generator(EXEMPLAR_SEED, task, 0)``)."""


_DERIVED: "weakref.WeakKeyDictionary[Any, Dict[str, Any]]" = weakref.WeakKeyDictionary()
"""Repository -> what this module derived from its ``"lda"`` state (module doc: never
stored, recomputed where missing or out of date): ``"fitted"`` (:func:`_fitted`),
``"discriminants"`` (:func:`_discriminants`), ``"space"`` (:func:`_sample_space`) and
``"unit_table"`` (:func:`unit_table`). Kept here, not on the repository, and let go with it."""


def _derived(model) -> Dict[str, Any]:
    """The derived state kept for ``model`` (:data:`_DERIVED`), an empty dict at first."""
    kept = _DERIVED.get(model)
    if kept is None:
        kept = _DERIVED[model] = {}
    return kept


def entry_key(entry: int) -> str:
    """Routing-state key of ``entry``'s units and stored images."""
    return f"{ROUTER_LDA}_e{int(entry)}"


def _power(z: Tensor) -> Tensor:
    """``sqrt(max(z, 0))``, elementwise (the power transform of the module doc)."""
    return z.clamp_min(0).sqrt()


@torch.no_grad()
def fit_lda(model, data: TaskData, entry: int, per_class: int, entry_moved: bool = False) -> None:
    """Add a just-trained task's data to the ``"lda"`` router (module doc).

    :param data: the task's training data: images, local labels 0..c-1 (every class
        present; local label k is class ``model.heads.class_ids(data.task)[k]``), E0's
        features.
    :param entry: the task's entry.
    :param per_class: images stored per unit at most (topped up by later tasks of the
        entry until reached).
    :param entry_moved: the task trained its entry's adapters (a learning reuse's update):
        the stored images' features through it are computed again.
    """
    task, x, num_classes = data.task, data.x, data.num_classes
    if entry_moved:
        forget_space(model, entry)
    class_ids = torch.tensor(model.heads.class_ids(task), dtype=torch.long)
    y = data.y.to("cpu")
    # E0 moments: per unit sums and counts; the within-task, within-class residual scatter.
    z0 = data.e0_features(model).double()
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
    divided by 255, as :func:`~avalanche_sdr.models.stored.stored_images` quantised them)."""
    if all(p.dtype == torch.uint8 for p in parts):
        return torch.cat(parts)
    return torch.cat([float_images(p) for p in parts])


def lda_entries(model) -> List[int]:
    """The entries with ``"lda"`` state, in entry order."""
    return [e for e in model.entries if model.routing_state(entry_key(e))]


def units(model) -> List[Tuple[int, int]]:
    """The (entry, class id) units, in entry then stored order."""
    return [(e, int(c)) for e in lda_entries(model) for c in model.routing_state(entry_key(e))["class_ids"].tolist()]


def _fitted(model) -> Dict[str, Any]:
    """The derived LDA state (module doc), recomputed when the router was fitted again: E0's
    whitening and whitened means, and the concatenated term's discriminants
    (:func:`_discriminants`, themselves recomputed only when a stored image or an entry's
    features changed)."""
    state = model.routing_state(E0_KEY)
    # the number of fits, and a checksum that changes with a state loaded from elsewhere
    version = (int(state["fits"].item()), float(state["scatter"].sum()), float(state["moments"][1]))
    cache = _derived(model).get("fitted")
    if cache is not None and cache["version"] == version:
        return cache
    entries = lda_entries(model)
    states = [model.routing_state(entry_key(e)) for e in entries]
    sums = torch.cat([s["sums"].cpu().double() for s in states])
    counts = torch.cat([s["counts"].cpu().double() for s in states])
    n, norm4 = state["moments"].cpu().tolist()
    white0 = whitening(ledoit_wolf_from_moments(state["scatter"].cpu(), int(n), norm4))
    means0 = (sums / counts[:, None]) @ white0.T
    discriminants, offsets = _discriminants(model, entries, states)
    cache = {"version": version, "entries": entries, "white0": white0.float(), "means0": means0.float(),
             "discriminants": discriminants, "offsets": offsets}
    _derived(model)["fitted"] = cache
    return cache


# ---------------------------------------------------------------------- the concatenated term

def _discriminants(model, entries: List[int], states: List[Dict[str, Tensor]]) -> Tuple[Tensor, Tensor]:
    """The concatenated term's linear discriminants: ``A`` [W, U] float64 with column u
    ``Sigma^{-1} m_u``, and ``c`` [U] float64, ``m_u^T Sigma^{-1} m_u`` (W = (1 + E) D; m_u:
    unit u's mean of the square-rooted concatenated features of its stored images; Sigma:
    their tied Ledoit-Wolf covariance), so that ``log p_all(u | x) = log_softmax_u(z^T A -
    c / 2)``: the Mahalanobis distances of the module doc less ``z^T Sigma^{-1} z``, the
    same for every unit.

    Computed in the space of the n stored images (Woodbury: ``Sigma = a I + b R^T R``, R the
    [n, W] residuals), from their Gram matrix ``Z Z^T`` kept by :func:`_sample_space`:
    a [W, W] matrix is never formed or factorised. Kept (:data:`_DERIVED`) until a stored image,
    a unit or an entry's features change.
    """
    with _evaluating(model):
        space = _sample_space(model, entries, states)
    index = {}
    for e, s in zip(entries, states):
        for c in s["class_ids"].tolist():
            index[(e, int(c))] = len(index)
    n_units = len(index)
    labels = {e: s["labels"].cpu().tolist() for e, s in zip(entries, states)}
    unit_of = torch.tensor([index[(int(o), int(labels[int(o)][int(i)]))] for o, i in space["rows"].tolist()],
                           dtype=torch.long)
    key = (space["version"], tuple(index), tuple(unit_of.tolist()))
    kept = _derived(model).get("discriminants")
    if kept is not None and kept[0] == key:
        return kept[1], kept[2]
    z, gram = space["z"], space["gram"]
    counts = torch.bincount(unit_of, minlength=n_units).double()
    if not bool((counts > 0).all()):
        raise RuntimeError("an (entry, class) unit of the lda router has no stored image; "
                           "build the router with a positive exemplars (LDARouter(exemplars=20))")
    # P[i, u] = z_i . m_u, Q[u, v] = m_u . m_v, residual Gram G[i, j] = (z_i - m_u(i)) . (z_j - m_u(j))
    p = torch.zeros(gram.shape[0], n_units, dtype=torch.float64).index_add_(1, unit_of, gram) / counts
    q = torch.zeros(n_units, n_units, dtype=torch.float64).index_add_(0, unit_of, p) / counts[:, None]
    # in place, in the order of (gram - pu) - pu^T + Q[u(i), u(j)]: no other [n, n] temporaries
    pu = p[:, unit_of]
    g = gram - pu
    g -= pu.T
    del pu
    g += q[unit_of[:, None], unit_of[None, :]]
    alpha, beta = ledoit_wolf_from_gram(g, z.shape[1])
    means = torch.zeros(n_units, z.shape[1], dtype=torch.float64).index_add_(0, unit_of, z) / counts[:, None]
    if beta > 0:
        # Sigma^{-1} = (I - R^T (a/b I + G)^{-1} R) / a; R M^T [n, U] = P - Q[u(i)]
        g.diagonal().add_(alpha / beta)  # G + (a/b) I, entry by entry as with an identity matrix
        chol = torch.linalg.cholesky(g)
        del g
        x = torch.cholesky_solve(p - q[unit_of], chol)
        rx = z.T @ x - means.T @ torch.zeros(n_units, n_units, dtype=torch.float64).index_add_(0, unit_of, x)
        discriminants = (means.T - rx) / alpha
    else:  # full shrinkage: Sigma = a I
        discriminants = means.T / alpha
    offsets = (means * discriminants.T).sum(1)
    _derived(model)["discriminants"] = (key, discriminants, offsets)
    return discriminants, offsets


def _sample_space(model, entries: List[int], states: List[Dict[str, Tensor]]) -> Dict[str, Any]:
    """The square-rooted concatenated features of every stored image and their Gram matrix,
    kept (:data:`_DERIVED`, not stored) and updated with what changed since:

    - ``z`` [n, W] float64: ``sqrt(max(0, [E0(x), E_e1(x), ...]))``, column blocks in
      entry order (``spaces``: ``None`` for E0, then the entries);
    - ``gram`` [n, n] float64: ``z z^T``;
    - ``rows`` [n, 2] int64: each row's owner entry and index among its stored images
      (rows in the order the images were stored);
    - ``version``: an int, changed by every update.

    Stored images are only ever appended, and an entry's features change only when it
    trains: a new image adds a row (its features through every space), a new entry a
    column block, an entry whose features moved has its block replaced (``gram`` updated
    by the block's outer products). What has changed is read from content digests: each
    entry's (:func:`~avalanche_sdr.models.digests.task_state_digest` of its creating
    task, with E0's :func:`~avalanche_sdr.models.digests.backbone_state_digest`) and each
    owner's stored images, so that a state or an entry loaded from elsewhere is not read
    as kept. Cost per update: the new features, and O(n^2) per changed column or row
    block; nothing of size W x W.
    """
    backbone = backbone_state_digest(model)
    marks = {None: backbone}
    for e in entries:
        marks[e] = backbone + task_state_digest(model, model.entry_creator[e])
    images = {e: float_images(s["images"]).cpu() for e, s in zip(entries, states)}
    digests = {e: _image_digest(s["images"]) for e, s in zip(entries, states)}
    space = _derived(model).get("space")
    spaces = [None] + list(entries)
    if space is None or space["spaces"] != spaces[:len(space["spaces"])]:
        space = {"spaces": [], "marks": {}, "owners": {}, "rows": torch.zeros(0, 2, dtype=torch.long),
                 "z": torch.zeros(0, 0, dtype=torch.float64), "gram": torch.zeros(0, 0, dtype=torch.float64),
                 "widths": [], "version": 0}
    changed = False
    # owners whose stored images are gone or differ from what was read: their rows go
    drop = [o for o, (count, digest) in space["owners"].items()
            if o not in images or images[o].shape[0] < count or _image_digest(states[entries.index(o)]["images"][:count]) != digest]
    if drop:
        keep = ~torch.isin(space["rows"][:, 0], torch.tensor(drop, dtype=torch.long))
        space["rows"], space["z"] = space["rows"][keep], space["z"][keep]
        space["gram"] = space["gram"][keep][:, keep]
        for o in drop:
            del space["owners"][o]
        changed = True
    # column blocks of spaces whose features moved
    offsets = [0]
    for width in space["widths"]:
        offsets.append(offsets[-1] + width)
    for k, s in enumerate(space["spaces"]):
        if space["marks"].get(s) != marks[s] and space["rows"].shape[0]:
            old = space["z"][:, offsets[k]:offsets[k + 1]]
            new = _space_columns(model, s, space["rows"], images)
            space["gram"] += new @ new.T - old @ old.T
            space["z"][:, offsets[k]:offsets[k + 1]] = new
            changed = True
    # new spaces (entries created since)
    for s in spaces[len(space["spaces"]):]:
        new = _space_columns(model, s, space["rows"], images)
        space["z"] = torch.cat([space["z"], new], dim=1)
        space["gram"] += new @ new.T
        space["spaces"].append(s)
        space["widths"].append(new.shape[1] if new.shape[0] else _feature_width(model, s, images))
        changed = True
    space["marks"] = {s: marks[s] for s in spaces}
    if not space["rows"].shape[0]:
        space["z"] = torch.zeros(0, sum(space["widths"]), dtype=torch.float64)
    # new rows (images stored since)
    for o in entries:
        count = space["owners"].get(o, (0, None))[0]
        if images[o].shape[0] > count:
            rows = torch.stack([torch.full((images[o].shape[0] - count,), o, dtype=torch.long),
                                torch.arange(count, images[o].shape[0])], dim=1)
            new = torch.cat([_space_columns(model, s, rows, images) for s in spaces], dim=1)
            cross = new @ space["z"].T
            space["gram"] = torch.cat([torch.cat([space["gram"], cross.T], dim=1),
                                       torch.cat([cross, new @ new.T], dim=1)])
            space["z"] = torch.cat([space["z"], new])
            space["rows"] = torch.cat([space["rows"], rows])
            changed = True
        space["owners"][o] = (images[o].shape[0], digests[o])
    if changed:
        space["version"] += 1
    _derived(model)["space"] = space
    return space


def _image_digest(images: Tensor) -> str:
    """A BLAKE2b digest (16 bytes, hex) of stored images' dtype, shape and bytes."""
    t = images.detach().cpu().contiguous()
    h = hashlib.blake2b(digest_size=16)
    h.update(f"{t.dtype}:{tuple(t.shape)};".encode())
    h.update(t.reshape(-1).view(torch.uint8).numpy())
    return h.hexdigest()


def _space_columns(model, space: Optional[int], rows: Tensor, images: Dict[int, Tensor]) -> Tensor:
    """``sqrt(max(0, E_space(x)))`` of the stored images at ``rows`` ([n, 2]: owner, index):
    [n, D] float64 (n may be 0: [0, 0])."""
    if not rows.shape[0]:
        return torch.zeros(0, 0, dtype=torch.float64)
    out = None
    for o in torch.unique(rows[:, 0]).tolist():
        at = torch.nonzero(rows[:, 0] == o).flatten()
        feats = _power(_features(model, images[o][rows[at, 1]], space).double())
        if out is None:
            out = torch.zeros(rows.shape[0], feats.shape[1], dtype=torch.float64)
        out[at] = feats
    return out


def _feature_width(model, space: Optional[int], images: Dict[int, Tensor]) -> int:
    """D, the feature width of ``space`` (read from one stored image)."""
    some = next(x for x in images.values() if x.shape[0])
    return int(_features(model, some[:1], space).shape[1])


@contextlib.contextmanager
def _evaluating(model):
    """The model in eval mode for a block of feature passes through many spaces, set once
    (``model.eval()`` visits every entry's modules: once per space it would cost O(E^2)
    per fit); the training mode and the active entry are restored afterwards."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        model.encoder.set_active(None)
        model.train(was_training)


def _features(model, x: Tensor, space: Optional[int]) -> Tensor:
    """``E_space(x)`` [n, D] float32 on the CPU, in batches chosen for the model's device;
    inside :func:`_evaluating` (as :meth:`~avalanche_sdr.models.SDRModel.batched_features`,
    without setting the mode again)."""
    device = next(model.parameters()).device
    step = eval_batch_size(device)
    return torch.cat([model.features(x[i:i + step].to(device), space).cpu() for i in range(0, x.shape[0], step)])


def forget_space(model, entry: int) -> None:
    """Mark the stored images' features through ``entry`` as moved (the learning reuse
    updated it): the next fit computes them again."""
    space = _derived(model).get("space")
    if space is not None:
        space["marks"].pop(entry, None)


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
    z = _power(torch.cat([e0] + [features[e] for e in fitted["entries"]], dim=1).double())
    scores = z @ fitted["discriminants"].to(device) - 0.5 * fitted["offsets"].to(device)
    return logp0, scores.log_softmax(1).float()


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
    :param limit: :class:`LDAWeightedRouter`'s ``evidence``: where the evidence already holds at least
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
    with _evaluating(model):
        e0 = _features(model, images, None)
        features = {e: _features(model, images, e) for e in _fitted(model)["entries"]}
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
    tasks = [t for t in model.task_to_entry if model.entry_of(t) == entry and model.heads.is_trained(t)
             and class_id in model.heads.class_ids(t)]
    if not tasks:
        raise RuntimeError(f"no trained task of entry {entry} has class {class_id}")
    return max(tasks)


def unit_table(model) -> Tensor:
    """[U, 3] int64 (task, entry, class id) of every unit (:func:`units`, :func:`unit_task`),
    kept (:data:`_DERIVED`) until the router is fitted again or another task gets a head, so
    that a prediction does not search the tasks for every unit of every mini-batch."""
    key = (_fitted(model)["version"], tuple(model.trained_tasks))
    kept = _derived(model).get("unit_table")
    if kept is None or kept[0] != key:
        table = torch.tensor([[unit_task(model, e, c), e, c] for e, c in units(model)], dtype=torch.long)
        kept = _derived(model)["unit_table"] = (key, table)
    return kept[1]


# ---------------------------------------------------------------------- the router objects

class LDARouter(Router):
    """The ``"lda"`` router: both LDA terms at equal weight (module doc).

    :param exemplars: training images stored per (entry, class) unit at most (uint8 when
        they lie in [0, 1]; counted in memory and checkpointed); at least 1. 20 by default
        (chosen on validation splits over 5, 10 and 20: docs/results/task_free.md).
    :raises ValueError: ``exemplars`` is not a positive int.
    """

    name = ROUTER_LDA
    state_name = ROUTER_LDA

    def __init__(self, exemplars: int = 20):
        self.exemplars = check_int(exemplars, "exemplars",
                                   hint=" (training images stored per class; the router needs at least 1)")

    def options(self) -> Dict[str, object]:
        return {"exemplars": self.exemplars}

    def fit(self, model, data: TaskData, *, new_entry: bool, entry_updated: bool = False) -> None:
        """:func:`fit_lda` with this router's ``exemplars`` (the stored images' features
        through an updated entry are computed again)."""
        fit_lda(model, data, model.entry_of(data.task), self.exemplars, entry_moved=entry_updated)

    def routable(self, model) -> Tuple[List[int], List[int]]:
        if not model.routing_state(E0_KEY):
            return [], []
        entries = lda_entries(model)
        return [t for t in model.task_to_entry if model.heads.is_trained(t) and model.entry_of(t) in entries], entries

    def weight(self, model) -> Optional[float]:
        """The weight of the concatenated term (``None``: the two terms' plain sum)."""
        return None

    def predict_routed(self, model, x: Tensor, e0: Tensor, features: Dict[int, Tensor], tasks: List[int],
                       entries: List[int]) -> TaskFreePrediction:
        """Each sample's highest-scoring (entry, class id) unit, reported through the unit's
        latest task."""
        scores = lda_scores(model, e0, features, self.weight(model))
        chosen = unit_table(model)[scores.argmax(dim=1).cpu()].to(x.device)
        return TaskFreePrediction(class_ids=chosen[:, 2], tasks=chosen[:, 0], entries=chosen[:, 1])


class LDAWeightedRouter(LDARouter):
    """The ``"lda_weighted"`` router, SDR's recommended one: the ``"lda"`` router with the
    weight of its two terms chosen on the stream's own detected repeats (module doc,
    :func:`record_repeat`). It shares the ``"lda"`` router's state.

    :param exemplars: as :class:`LDARouter`.
    :param evidence: stop gathering the weight's evidence once this many repeat images
        have been routed (a repeat is skipped when the evidence already holds at least
        this many); ``None``, the default, routes every repeat. Not the default
        elsewhere: it changes the weight wherever a stream gives more evidence (measured
        on validation only: docs/results/task_free.md, "Capping the weighted router's
        evidence").
    :raises ValueError: ``exemplars`` or ``evidence`` is not a positive int.
    """

    name = ROUTER_LDA_WEIGHTED
    state_name = ROUTER_LDA

    def __init__(self, exemplars: int = 20, evidence: Optional[int] = None):
        super().__init__(exemplars)
        self.evidence = None if evidence is None else check_int(evidence, "evidence", hint=" or None (every repeat)")

    def options(self) -> Dict[str, object]:
        return {"exemplars": self.exemplars, "evidence": self.evidence}

    def fit(self, model, data: TaskData, *, new_entry: bool, entry_updated: bool = False) -> None:
        """:meth:`LDARouter.fit`, then the mark of its evidence (:func:`open_evidence`)."""
        super().fit(model, data, new_entry=new_entry, entry_updated=entry_updated)
        open_evidence(model)

    def before_repeat(self, model, data: TaskData, entry: int) -> int:
        """:func:`record_repeat` of the repeat's images and class ids, with this router's
        ``evidence`` limit."""
        return record_repeat(model, data.task, entry, data.x, data.class_id_labels, limit=self.evidence)

    def routable(self, model) -> Tuple[List[int], List[int]]:
        if not model.routing_state(REPEATS_KEY):
            return [], []
        return super().routable(model)

    def weight(self, model) -> Optional[float]:
        return chosen_weight(model)


__all__ = ["E0_KEY", "EQUAL_WEIGHT", "LDARouter", "LDAWeightedRouter", "REPEATS_KEY", "REPEAT_IMAGES", "TERM_WEIGHTS", "chosen_weight", "entry_key",
           "evidence_images", "fit_lda", "forget_space", "lda_entries", "lda_log_posteriors", "lda_scores",
           "open_evidence", "record_repeat", "unit_table", "weighted_scores", "unit_task", "units"]
