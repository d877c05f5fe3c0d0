"""The LDA routers refit only what changed: the kept sample-space state (stored images'
features, their Gram matrix, the discriminants) gives the scores of a fit from scratch,
and is recomputed when an entry or a stored image changes."""
import copy

import pytest
import torch

from avalanche_sdr.models import TaskData, build_sdr_model, small_cnn_backbone
from avalanche_sdr.routers import GaussianRouter, LDARouter, LDAWeightedRouter, lda_router
from avalanche_sdr.routers.base import route_together
from avalanche_sdr.routers.covariance import (ledoit_wolf_covariance, ledoit_wolf_from_gram,
                                              ledoit_wolf_from_moments, whitening)

pytestmark = pytest.mark.usefixtures("one_thread")



def _repository(entries=3, images=40, seed=0):
    """``entries`` entries, one 2-class task each (class ids 2t, 2t + 1), random adapters."""
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    model = build_sdr_model(small_cnn_backbone(in_channels=1, widths=(8, 16)), in_channels=1, image_size=10,
                            generator=None)
    data = {}
    for t in range(entries):
        e = model.create_entry(t)
        with torch.no_grad():
            for p in model.encoder.entry_parameters(e):
                p.add_(0.2 * torch.randn(p.shape, generator=g))
        model.heads.set_class_ids(t, [2 * t, 2 * t + 1])
        model.heads.add(t, 2)
        y = torch.arange(images) % 2
        data[t] = ((torch.rand(images, 1, 10, 10, generator=g) * (0.5 + 0.5 * y[:, None, None, None])), y)
    return model.eval(), data


def _fresh(model):
    """A copy of ``model`` without anything the router kept (a fit from scratch reads it):
    what the router derives is kept per repository object, not in the repository."""
    copied = copy.deepcopy(model)
    assert copied not in lda_router._DERIVED
    return copied


def _posteriors(model, x):
    e0 = model.batched_features(x, None)
    return lda_router.lda_log_posteriors(model, e0, {e: model.batched_features(x, e) for e in model.entries})


def _assert_same_scores(model, x):
    kept, fresh = _posteriors(model, x), _posteriors(_fresh(model), x)
    for a, b in zip(kept, fresh):
        assert torch.allclose(a, b, atol=1e-6 * float(b.abs().max()), rtol=0)


def test_ledoit_wolf_from_the_gram_matrix_is_the_one_from_moments():
    r = torch.randn(30, 50, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    r = r - r.mean(0)
    alpha, beta = ledoit_wolf_from_gram(r @ r.T, 50)
    expected = ledoit_wolf_from_moments(r.T @ r, 30, float(((r**2).sum(1) ** 2).sum()))
    assert torch.allclose(alpha * torch.eye(50, dtype=torch.float64) + beta * (r.T @ r), expected, atol=1e-12)
    with pytest.raises(ValueError, match="at least 2 samples"):
        ledoit_wolf_from_gram(torch.ones(1, 1, dtype=torch.float64), 5)


def test_discriminants_score_as_the_whitened_distances_of_the_module_doc():
    model, data = _repository()
    for t in range(3):
        lda_router.fit_lda(model, TaskData(t, *data[t]), t, 8)
    x = data[1][0][:20]
    _, logp = _posteriors(model, x)
    # the definition in float64: whitening by the Cholesky factor of the tied covariance
    states = [model.routing_state(lda_router.entry_key(e)) for e in model.entries]
    images = [s["images"].float() / 255 if s["images"].dtype == torch.uint8 else s["images"] for s in states]
    units = [(e, c) for e, s in zip(model.entries, states) for c in s["class_ids"].tolist()]
    unit_of = torch.tensor([units.index((e, c)) for e, s in zip(model.entries, states) for c in s["labels"].tolist()])
    spaces = [None] + model.entries

    def concat(xs):
        return torch.cat([model.batched_features(xs, s) for s in spaces], 1).double().clamp_min(0).sqrt()

    z = torch.cat([concat(i) for i in images])
    means = torch.stack([z[unit_of == u].mean(0) for u in range(len(units))])
    white = whitening(ledoit_wolf_covariance(z - means[unit_of]))
    expected = (-0.5 * torch.cdist(concat(x) @ white.T, means @ white.T).pow(2)).log_softmax(1)
    assert torch.allclose(logp.double(), expected, atol=1e-4 * float(expected.abs().max()) + 1e-5, rtol=0)


def test_a_fit_after_every_task_scores_as_one_fit_from_scratch():
    model, data = _repository(entries=4, images=16)
    x = data[2][0]
    for t in range(4):  # 8 images per class, 10 stored at most: later tasks top the units up
        lda_router.fit_lda(model, TaskData(t, *data[t]), t, 10)
        _assert_same_scores(model, x)
    # a repeat of task 1 on entry 1 tops its units up (new rows only)
    model.assign_task(10, 1)
    model.link_head(10, 1)
    lda_router.fit_lda(model, TaskData(10, data[1][0].flip(3), data[1][1]), 1, 10)
    _assert_same_scores(model, x)
    # a learning-reuse update of entry 2: its column block is replaced
    with torch.no_grad():
        for p in model.encoder.entry_parameters(2):
            p.mul_(1.1)
    lda_router.fit_lda(model, TaskData(2, *data[2]), 2, 10, entry_moved=True)
    _assert_same_scores(model, x)


def test_an_entry_changed_without_being_announced_is_read_again():
    model, data = _repository()
    for t in range(3):
        lda_router.fit_lda(model, TaskData(t, *data[t]), t, 8)
    with torch.no_grad():  # moved, and fitted without entry_moved: the digest tells
        for p in model.encoder.entry_parameters(0):
            p.add_(0.3)
    lda_router.fit_lda(model, TaskData(1, *data[1]), 1, 8)
    _assert_same_scores(model, data[0][0])


def test_stored_images_replaced_from_elsewhere_are_read_again():
    model, data = _repository()
    for t in range(3):
        lda_router.fit_lda(model, TaskData(t, *data[t]), t, 8)
    state = dict(model.routing_state(lda_router.entry_key(1)))
    state["images"] = 255 - state["images"]  # e.g. a state loaded from another run
    model.set_routing_state(lda_router.entry_key(1), state)
    lda_router.fit_lda(model, TaskData(2, *data[2]), 2, 8)
    _assert_same_scores(model, data[1][0])


def test_a_fit_that_stores_nothing_new_computes_no_stored_image_features(monkeypatch):
    model, data = _repository(images=40)
    for t in range(3):
        lda_router.fit_lda(model, TaskData(t, *data[t]), t, 8)
    kept = lda_router._DERIVED[model]["discriminants"]
    calls = []
    original = type(model).batched_features

    def counting(self, x, entry, batch_size=None):
        calls.append((x.shape[0], entry))
        return original(self, x, entry, batch_size)

    monkeypatch.setattr(type(model), "batched_features", counting)
    kept_features = lda_router._features
    monkeypatch.setattr(lda_router, "_features", lambda m, x, entry: calls.append((x.shape[0], entry))
                        or kept_features(m, x, entry))
    model.assign_task(7, 0)  # a head-only repeat of task 0: entry 0's units are full
    model.link_head(7, 0)
    lda_router.fit_lda(model, TaskData(7, *data[0]), 0, 8)
    assert calls == [(40, None)]  # E0's features of the repeat's data, for the E0 moments only
    assert lda_router._DERIVED[model]["discriminants"] is kept  # nothing of the concatenated term recomputed


def test_routing_together_answers_as_each_router_alone():
    model, data = _repository()
    routers = [LDAWeightedRouter(exemplars=8), LDARouter(exemplars=8), GaussianRouter()]
    for t in range(3):
        for router in routers[1:]:
            router.fit(model, TaskData(t, *data[t]), new_entry=True)
        lda_router.open_evidence(model)
    x = torch.cat([data[t][0][:10] for t in range(3)])
    together, features = route_together(model, x, routers)
    assert sorted(features) == model.entries
    for router in routers:
        alone = router.route(model, x)
        assert torch.equal(together[router.name].class_ids, alone.class_ids)
        assert torch.equal(together[router.name].tasks, alone.tasks)
