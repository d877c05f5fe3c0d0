"""Task-free prediction: the routers of avalanche_sdr.routers and TaskFreeMetrics.

One SDR run over MixedDigits with original class ids (two-sample rule, no generators,
1 epoch per task) fitted with both routers serves most tests.
"""
import json
import shutil

import pytest
import torch
from avalanche.evaluation.metrics import accuracy_metrics
from avalanche.training.plugins import EvaluationPlugin

from avalanche_sdr import SDRStrategy, build_sdr_model
from avalanche_sdr.benchmarks import MixedDigits
from avalanche_sdr.evaluation import TaskFreeMetrics, repository_memory_bytes
from avalanche_sdr.models import ROUTERS, small_cnn_backbone
from avalanche_sdr.routers import LDARouter, LDAWeightedRouter, lda_router
from avalanche_sdr.routers.covariance import ledoit_wolf_from_moments
from avalanche_sdr.routers.routing import ledoit_wolf_covariance, router_states
from avalanche_sdr.training import CheckpointMismatchError, SDRSettings, load_repository

SETTINGS = SDRSettings(new_task_epochs=2, reuse_epochs=1, train_mb_size=32, eval_mb_size=256)


def _model():
    torch.manual_seed(0)
    return build_sdr_model(small_cnn_backbone(in_channels=1, widths=(8, 16, 16)), in_channels=1, image_size=8,
                           generator=None)


def _strategy(routers, metric=None, checkpoint_dir=None):
    metrics = [accuracy_metrics(experience=True, stream=True)] + ([metric] if metric is not None else [])
    return SDRStrategy(model=_model(), settings=SETTINGS, detector="two_sample", routers=routers,
                       evaluator=EvaluationPlugin(*metrics, loggers=[]), checkpoint_dir=checkpoint_dir)


@pytest.fixture(scope="module")
def run(tmp_path_factory, one_thread):
    benchmark = MixedDigits(seed=0, original_class_ids=True)
    metric = TaskFreeMetrics(routers=ROUTERS)
    directory = tmp_path_factory.mktemp("task_free")
    strategy = _strategy(ROUTERS, metric, checkpoint_dir=directory)
    for experience in benchmark.train_stream:
        strategy.train(experience, eval_streams=[])
    metrics = strategy.eval(benchmark.test_stream)
    return dict(benchmark=benchmark, strategy=strategy, metric=metric, metrics=metrics, directory=directory)


def _test_batch(benchmark, i):
    dataset = benchmark.test_stream[i].dataset
    x = torch.stack([dataset[k][0] for k in range(len(dataset))])
    y = torch.tensor([int(dataset[k][1]) for k in range(len(dataset))])
    return x, y


# ---------------------------------------------------------------------- covariance

def test_ledoit_wolf_is_positive_definite_with_fewer_samples_than_dimensions():
    r = torch.randn(5, 20, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    cov = ledoit_wolf_covariance(r - r.mean(0))
    assert torch.linalg.eigvalsh(cov).min() > 0
    assert torch.allclose(cov, cov.T)


def test_ledoit_wolf_keeps_a_well_estimated_anisotropic_covariance():
    g = torch.Generator().manual_seed(1)
    scales = torch.tensor([5.0, 1.0, 0.2], dtype=torch.float64)
    r = torch.randn(20000, 3, generator=g, dtype=torch.float64) * scales
    cov = ledoit_wolf_covariance(r)
    assert torch.allclose(torch.diagonal(cov), scales**2, rtol=0.05)


def test_ledoit_wolf_refuses_too_few_samples_and_constant_features():
    with pytest.raises(ValueError, match="at least 2 samples"):
        ledoit_wolf_covariance(torch.zeros(1, 4))
    with pytest.raises(ValueError, match="do not vary"):
        ledoit_wolf_covariance(torch.zeros(10, 4))


# ---------------------------------------------------------------------- routing

def test_predict_answers_original_class_ids_of_the_routed_task(run):
    model, benchmark = run["strategy"].model, run["benchmark"]
    x, y = _test_batch(benchmark, 0)
    for router in ROUTERS:
        prediction = model.predict(x, router)
        assert prediction.class_ids.shape == prediction.tasks.shape == prediction.entries.shape == y.shape
        assert prediction.class_ids.dtype == torch.long
        for c, t, e in zip(prediction.class_ids.tolist(), prediction.tasks.tolist(), prediction.entries.tolist()):
            assert c in model.heads.class_ids(t)
            assert e == model.entry_of(t)
        if router == "expert_gate":  # routed to the creating task of an entry
            assert set(prediction.tasks.tolist()) <= set(model.entry_creator.values())


def test_gaussian_router_routes_most_digits_to_their_group(run):
    result = run["metric"].result()
    assert set(result) == set(ROUTERS) | {"oracle"}
    assert result["gaussian"]["routing"] > 0.8  # 5 groups: chance 0.2
    assert result["gaussian"]["task_free"] > 0.5  # 10 classes: chance 0.1 (2 epochs per task)
    assert result["oracle"]["routing"] == 1.0


def test_lda_router_routes_most_digits_to_their_group(run):
    result = run["metric"].result()["lda"]
    assert result["routing"] > 0.8  # 5 groups: chance 0.2
    assert result["task_free"] > 0.5  # 10 classes: chance 0.1


def test_lda_router_stores_at_most_router_exemplars_uint8_images_per_unit(run):
    model = run["strategy"].model
    units = lda_router.units(model)
    assert len(units) >= 10  # every class id of the stream, once per entry that learned it
    for entry in lda_router.lda_entries(model):
        state = model.routing_state(lda_router.entry_key(entry))
        assert state["images"].dtype == torch.uint8
        for c in state["class_ids"].tolist():
            assert 1 <= int((state["labels"] == c).sum()) <= LDARouter().exemplars
    stored = sum(t.numel() * t.element_size() for s in router_states(model, "lda") for t in s.buffers())
    images = sum(model.routing_state(lda_router.entry_key(e))["images"].numel() for e in lda_router.lda_entries(model))
    assert stored > images  # the images and the E0 statistics are counted


def test_lda_weighted_gathers_evidence_on_every_detected_repeat_before_it_trains(run):
    model, records = run["strategy"].model, run["strategy"].sdr.records
    counts = model.routing_state(lda_router.REPEATS_KEY)["counts"]
    assert counts.shape == (len(lda_router.TERM_WEIGHTS) + 1,) and counts.dtype == torch.float64
    repeats = [r for r in records if r.decision == "reuse"]
    assert repeats  # MixedDigits repeats every group
    benchmark = run["benchmark"]
    # every repeat of this stream reuses its own group's entry: all its images (at most
    # REPEAT_IMAGES) have a unit, so each repeat adds min(n, REPEAT_IMAGES) images
    sizes = [len(benchmark.train_stream[r.task].dataset) for r in repeats]
    assert float(counts[-1]) == sum(min(n, lda_router.REPEAT_IMAGES) for n in sizes)
    assert bool((counts[:-1] <= counts[-1]).all()) and float(counts[:-1].max()) > 0.5 * float(counts[-1])
    assert lda_router.chosen_weight(model) in lda_router.TERM_WEIGHTS
    # the shared state is fitted once per task, not once per router name
    assert int(model.routing_state(lda_router.E0_KEY)["fits"]) == len(records)
    seconds = run["strategy"].sdr.router_seconds
    assert seconds["lda_weighted"] >= seconds["lda"] > 0


def test_a_repeat_reusing_another_groups_entry_adds_no_evidence(run):
    model, benchmark = run["strategy"].model, run["benchmark"]
    before = model.routing_state(lda_router.REPEATS_KEY)["counts"].clone()
    x, y = _test_batch(benchmark, 0)
    entry = model.entry_of(0)
    other = next(e for e in lda_router.lda_entries(model)
                 if not set(y.tolist()) & {c for u, c in lda_router.units(model) if u == e})
    assert lda_router.record_repeat(model, 99, other, x, y) == 0  # no unit of other's has these classes
    assert torch.equal(model.routing_state(lda_router.REPEATS_KEY)["counts"], before)
    with pytest.raises(ValueError, match="labels"):
        lda_router.record_repeat(model, 99, entry, x, y[:-1])


def test_record_repeat_stops_at_its_limit(run):
    model, benchmark = run["strategy"].model, run["benchmark"]
    before = model.routing_state(lda_router.REPEATS_KEY)["counts"].clone()
    held = lda_router.evidence_images(model)
    assert held == int(before[-1]) > 0
    x, y = _test_batch(benchmark, 0)
    entry = model.entry_of(0)
    assert lda_router.record_repeat(model, 99, entry, x, y, limit=held) == 0  # already at the limit: not routed
    assert torch.equal(model.routing_state(lda_router.REPEATS_KEY)["counts"], before)
    try:  # one image short of the limit: the whole repeat is routed (the limit is checked per repeat)
        added = lda_router.record_repeat(model, 99, entry, x, y, limit=held + 1)
        assert added == min(len(y), lda_router.REPEAT_IMAGES)
        assert lda_router.evidence_images(model) == held + added
    finally:
        model.set_routing_state(lda_router.REPEATS_KEY, {"counts": before})


def test_router_evidence_stops_the_strategys_evidence_after_the_first_repeat(one_thread):
    benchmark = MixedDigits(seed=0, original_class_ids=True)
    strategy = SDRStrategy(model=_model(), settings=SETTINGS, detector="two_sample",
                           routers=(LDAWeightedRouter(evidence=1),), evaluator=EvaluationPlugin(loggers=[]))
    for experience in benchmark.train_stream:
        strategy.train(experience, eval_streams=[])
    repeats = [r for r in strategy.sdr.records if r.decision == "reuse"]
    assert len(repeats) >= 2  # evidence would have grown after the first
    first = len(benchmark.train_stream[repeats[0].task].dataset)
    assert lda_router.evidence_images(strategy.model) == min(first, lda_router.REPEAT_IMAGES)
    with pytest.raises(ValueError, match="evidence must be a positive int or None"):
        LDAWeightedRouter(evidence=0)


def test_lda_weighted_scores_with_the_chosen_weight(run, monkeypatch):
    model = run["strategy"].model
    x, _ = _test_batch(run["benchmark"], 2)
    e0 = model.batched_features(x, None)
    logp0, logp = lda_router.lda_log_posteriors(model, e0, {e: model.batched_features(x, e) for e in model.entries})
    table = lda_router.unit_table(model)
    for weight, expected in ((0.5, logp0 + logp), (0.0, logp0), (1.0, logp)):
        monkeypatch.setattr(lda_router, "chosen_weight", lambda m, w=weight: w)
        prediction = model.predict(x, "lda_weighted")
        assert torch.equal(prediction.class_ids, table[expected.argmax(1), 2])
    monkeypatch.setattr(lda_router, "chosen_weight", lambda m: 0.5)
    assert torch.equal(model.predict(x, "lda_weighted").class_ids, model.predict(x, "lda").class_ids)


class _Evidence:
    def __init__(self, counts):
        self.counts = counts

    def routing_state(self, key):
        assert key == lda_router.REPEATS_KEY
        return {} if self.counts is None else {"counts": torch.tensor(self.counts, dtype=torch.float64)}


def test_chosen_weight_is_the_best_on_repeats_and_equal_weight_without_evidence():
    assert lda_router.chosen_weight(_Evidence(None)) == 0.5
    assert lda_router.chosen_weight(_Evidence([0, 0, 0, 0, 0, 0])) == 0.5
    assert lda_router.chosen_weight(_Evidence([90, 80, 70, 60, 50, 100])) == 0.0
    assert lda_router.chosen_weight(_Evidence([50, 60, 70, 80, 90, 100])) == 1.0
    # ties: the nearest to equal weight, then the smaller
    assert lda_router.chosen_weight(_Evidence([80, 80, 70, 80, 50, 100])) == 0.25
    assert lda_router.chosen_weight(_Evidence([80, 80, 80, 80, 50, 100])) == 0.5


def test_ledoit_wolf_from_moments_equals_the_estimate_from_residuals():
    g = torch.Generator().manual_seed(3)
    r = torch.randn(40, 6, generator=g, dtype=torch.float64) * torch.arange(1, 7)
    r = r - r.mean(0)
    direct = ledoit_wolf_covariance(r)
    halves = [r[:25], r[25:]]
    scatter = sum(h.T @ h for h in halves)
    norm4 = sum(float(((h**2).sum(1) ** 2).sum()) for h in halves)
    assert torch.allclose(ledoit_wolf_from_moments(scatter, 40, norm4), direct)


def test_lda_router_without_stored_images_is_refused_before_training():
    with pytest.raises(ValueError, match="exemplars must be a positive int"):
        LDARouter(exemplars=0)


def test_router_options_live_on_the_router():
    """The former settings router_exemplars and router_evidence are gone: a router's
    options are set on the router object."""
    for name in ("router_exemplars", "router_evidence"):
        with pytest.raises(TypeError, match="unknown SDR setting"):
            SETTINGS.replace(**{name: 5})
        with pytest.raises(TypeError, match="unexpected keyword argument"):
            SDRStrategy(model=_model(), settings=SETTINGS, detector="two_sample", routers=("lda",), **{name: 5})
    strategy = SDRStrategy(model=_model(), settings=SETTINGS, detector="two_sample",
                           routers=(LDAWeightedRouter(exemplars=5, evidence=3),), evaluator=EvaluationPlugin(loggers=[]))
    assert strategy.sdr.routers == (LDAWeightedRouter(exemplars=5, evidence=3),)


def test_routers_sharing_a_state_must_store_the_same_images():
    with pytest.raises(ValueError, match="share one state"):
        _strategy((LDARouter(exemplars=5), LDAWeightedRouter(exemplars=20)))


def test_router_objects_and_names_build_the_same_router():
    assert _strategy(("lda_weighted", "gaussian")).sdr.routers == _strategy((LDAWeightedRouter(), "gaussian")).sdr.routers


def test_oracle_equals_avalanches_task_aware_accuracy(run):
    metrics, benchmark = run["metrics"], run["benchmark"]
    per_exp = [v for k, v in metrics.items() if k.startswith("Top1_Acc_Exp/eval_phase/test_stream")]
    assert len(per_exp) == len(benchmark.test_stream)
    oracle = metrics["TaskFree_Acc_oracle/eval_phase/test_stream"]
    assert oracle == pytest.approx(sum(per_exp) / len(per_exp))
    for router in ROUTERS:
        assert 0.0 <= metrics[f"TaskFree_Acc_{router}/eval_phase/test_stream"] <= 1.0
        assert 0.0 <= metrics[f"Routing_Acc_{router}/eval_phase/test_stream"] <= 1.0


def test_task_free_accuracy_matches_a_direct_count(run):
    model, benchmark, result = run["strategy"].model, run["benchmark"], run["metric"].result()
    accuracies = []
    for i in range(len(benchmark.test_stream)):
        x, y = _test_batch(benchmark, i)
        accuracies.append(float((model.predict(x, "gaussian").class_ids == y).float().mean()))
    assert result["gaussian"]["task_free"] == pytest.approx(sum(accuracies) / len(accuracies))


def test_routing_state_counts_in_memory_and_survives_a_checkpoint(run):
    model = run["strategy"].model
    state_bytes = sum(t.numel() * t.element_size() for s in model.routing_states.values() for t in s.buffers())
    assert state_bytes > 0
    assert repository_memory_bytes(run["strategy"]) >= state_bytes
    restored = load_repository(run["directory"], _model())
    x, _ = _test_batch(run["benchmark"], 3)
    for router in ROUTERS:
        a, b = model.predict(x, router), restored.predict(x, router)
        assert torch.equal(a.class_ids, b.class_ids) and torch.equal(a.tasks, b.tasks)


def test_predict_refuses_bad_input(run):
    model = run["strategy"].model
    x, _ = _test_batch(run["benchmark"], 0)
    with pytest.raises(ValueError, match=r"\[N, C, H, W\]"):
        model.predict(x[0])
    bad = x.clone()
    bad[0, 0, 0, 0] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        model.predict(bad)
    with pytest.raises(ValueError, match="unknown router"):
        model.predict(x, "nearest")


def test_unknown_or_string_routers_are_refused_before_training():
    with pytest.raises(ValueError, match="unknown router"):
        _strategy(("gaussian", "knn"))
    with pytest.raises(ValueError, match="sequence of names"):
        _strategy("gaussian")
    with pytest.raises(ValueError, match="unknown router"):
        TaskFreeMetrics(routers=("oracle",))


def _train_two(benchmark, strategy):
    for experience in list(benchmark.train_stream)[:2]:
        strategy.train(experience, eval_streams=[])


def test_a_repository_without_routers_says_how_to_fit_them():
    benchmark = MixedDigits(seed=0, original_class_ids=True)
    strategy = _strategy(())
    _train_two(benchmark, strategy)
    x, _ = _test_batch(benchmark, 0)
    with pytest.raises(RuntimeError, match=r"routers=\('lda_weighted',\)"):
        strategy.model.predict(x)  # the default router: SDR's recommended one
    with pytest.raises(RuntimeError, match=r"routers=\('gaussian',\)"):
        strategy.predict(x, "gaussian")


def test_a_repository_fitted_with_lda_alone_refuses_the_weighted_router():
    benchmark = MixedDigits(seed=0, original_class_ids=True)
    strategy = _strategy(("lda",))
    _train_two(benchmark, strategy)
    x, _ = _test_batch(benchmark, 0)
    assert strategy.model.predict(x, "lda").class_ids.shape == (x.shape[0],)
    with pytest.raises(RuntimeError, match=r"routers=\('lda_weighted',\)"):
        strategy.model.predict(x, "lda_weighted")


@pytest.mark.parametrize("routers", [("lda", "lda_weighted"), ("lda_weighted", "lda")])
def test_routers_sharing_a_state_fit_it_once_with_the_weighted_routers_mark(routers):
    benchmark = MixedDigits(seed=0, original_class_ids=True)
    strategy = _strategy(routers)
    _train_two(benchmark, strategy)  # warm start: no repeat yet, so no evidence, only its mark
    model = strategy.model
    assert int(model.routing_state(lda_router.E0_KEY)["fits"]) == 2
    assert torch.equal(model.routing_state(lda_router.REPEATS_KEY)["counts"],
                       torch.zeros(len(lda_router.TERM_WEIGHTS) + 1, dtype=torch.float64))
    x, _ = _test_batch(benchmark, 0)
    assert torch.equal(model.predict(x, "lda_weighted").class_ids, model.predict(x, "lda").class_ids)
    seconds = strategy.sdr.router_seconds
    assert seconds["lda"] == seconds["lda_weighted"] > 0


def test_local_labels_are_refused_by_the_metric():
    benchmark = MixedDigits(seed=0)  # labels 0..c-1 in every task
    strategy = _strategy(("gaussian",), TaskFreeMetrics())
    _train_two(benchmark, strategy)
    with pytest.raises(ValueError, match="original_class_ids=True"):
        strategy.eval(benchmark.test_stream[:2])


def test_periodic_evaluation_routes_only_to_finished_tasks():
    """With eval_every=1 the test stream is evaluated after every epoch, while the task in
    training has a head but no router state yet: it is not a routing target until then."""
    benchmark = MixedDigits(seed=0, original_class_ids=True)
    metric = TaskFreeMetrics(routers=ROUTERS)
    strategy = SDRStrategy(model=_model(), settings=SETTINGS, detector="two_sample", routers=ROUTERS,
                           evaluator=EvaluationPlugin(accuracy_metrics(stream=True), metric, loggers=[]),
                           eval_every=1)
    experiences = list(benchmark.train_stream)[:2]
    strategy.train(experiences[0], eval_streams=[benchmark.test_stream[:1]])
    strategy.train(experiences[1], eval_streams=[benchmark.test_stream[:2]])
    assert set(metric.result()) == set(ROUTERS) | {"oracle"}


def test_the_metric_refuses_a_model_without_routers():
    from avalanche.training import Naive

    benchmark = MixedDigits(seed=0, original_class_ids=True)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 10))
    strategy = Naive(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
                     evaluator=EvaluationPlugin(TaskFreeMetrics(), loggers=[]))
    with pytest.raises(TypeError, match="already task-free"):
        strategy.eval(benchmark.test_stream[:1])


def test_lda_router_kept_features_follow_a_learning_reuse_update():
    """With reuse="accumulate" an update moves an entry's features: what the router keeps
    of the stored images' features must be what a fresh computation gives."""
    benchmark = MixedDigits(seed=0, original_class_ids=True)
    strategy = SDRStrategy(model=_model(), settings=SETTINGS, reuse="accumulate", detector="two_sample",
                           routers=("lda",), evaluator=EvaluationPlugin(loggers=[]))
    for experience in list(benchmark.train_stream)[:6]:
        strategy.train(experience, eval_streams=[])
    assert any(r.entry_updated for r in strategy.sdr.reuse_records)
    model = strategy.model
    x, _ = _test_batch(benchmark, 5)
    kept = model.predict(x, "lda")
    fitted = lda_router._fitted(model)
    for kept_state in ("space", "discriminants", "fitted"):
        lda_router._DERIVED[model].pop(kept_state)
    fresh = lda_router._fitted(model)
    scale = float(fresh["discriminants"].abs().max())
    assert torch.allclose(fitted["discriminants"], fresh["discriminants"], atol=1e-6 * scale, rtol=0)
    assert torch.equal(model.predict(x, "lda").class_ids, kept.class_ids)


def test_group_evaluations_do_not_route_and_keep_the_last_scored_result(run, monkeypatch):
    """evaluate_group turns the metric off: no sample is routed, nothing is emitted, and the
    result is still the last full evaluation's; the metric is on again afterwards."""
    from avalanche_sdr.evaluation import task_free
    from avalanche_sdr.training.stream_runner import evaluate_group

    benchmark, strategy, metric = run["benchmark"], run["strategy"], run["metric"]
    strategy.eval(benchmark.test_stream)
    before = metric.result()
    calls = []
    real_route = task_free.route_together
    monkeypatch.setattr(task_free, "route_together", lambda *a, **k: calls.append(1) or real_route(*a, **k))
    entry = evaluate_group(strategy, benchmark.test_stream, benchmark.stream_groups, 3,
                           int(benchmark.train_stream[3].task_labels[0]))
    assert calls == [] and metric.enabled
    assert metric.result() == before
    assert 0.0 <= entry["group_accuracy_after"] <= 1.0
    metric.enabled = False
    strategy.eval(benchmark.test_stream[:2])  # scored, two experiences would give another result
    assert calls == [] and metric.result() == before and metric.after_eval(strategy) == []
    metric.enabled = True
    strategy.eval(benchmark.test_stream)
    assert calls and metric.result() == before  # scored again, the same evaluation


def _previous_layout(manifest):
    """The manifest as avalanche-sdr wrote it before routers became objects (commit e6e57b7,
    checked against a checkpoint that commit wrote): the LDA routers' options among the
    strategy's settings (``router_exemplars``, ``router_evidence``), routers as names, the
    detector's ``match_class_count``, no ``method``."""
    old = json.loads(json.dumps(manifest))
    old.pop("method")
    strategy = old["fingerprint"]["strategy"]
    strategy["routers"] = [router["name"] for router in strategy["routers"]]
    strategy.update(router_exemplars=20, router_evidence=None)
    strategy["detector"]["match_class_count"] = strategy["detector"].pop("class_count_filter")
    return old


def test_a_checkpoint_of_the_previous_layout_loads_and_records_the_method(run, tmp_path):
    manifest = json.loads((run["directory"] / "manifest.json").read_text())
    assert manifest["method"] == "paper"
    assert manifest["fingerprint"]["strategy"]["routers"][-1] == {"name": "lda_weighted", "exemplars": 20,
                                                                  "evidence": None}
    old = tmp_path / "old"
    shutil.copytree(run["directory"], old)
    (old / "manifest.json").write_text(json.dumps(_previous_layout(manifest)))
    restored = load_repository(old, _model())
    assert restored.router_names == list(ROUTERS)
    x, _ = _test_batch(run["benchmark"], 3)
    for router in ROUTERS:
        assert torch.equal(restored.predict(x, router).class_ids, run["strategy"].model.predict(x, router).class_ids)
    strategy = _strategy(ROUTERS, checkpoint_dir=old)
    assert strategy.restore_checkpoint() == len(run["benchmark"].train_stream)
    other = _previous_layout(manifest)
    other["fingerprint"]["strategy"]["router_exemplars"] = 5
    (old / "manifest.json").write_text(json.dumps(other))
    with pytest.raises(CheckpointMismatchError, match=r"strategy.routers: checkpoint .*'exemplars': 5"):
        _strategy(ROUTERS, checkpoint_dir=old).restore_checkpoint()


def test_a_router_without_the_protocols_methods_is_refused_when_built():
    """``Router`` is abstract: a subclass missing ``fit``, ``routable`` or ``predict_routed``
    fails at construction, naming them, not in the middle of a stream."""
    from avalanche_sdr.routers.base import Router

    class Incomplete(Router):
        name = state_name = "incomplete"

    with pytest.raises(TypeError, match="fit, predict_routed, routable"):
        Incomplete()


def _first_tasks(routers, experiences=5):
    """SDR (two-sample rule) with ``routers`` over MixedDigits' first ``experiences`` tasks;
    returns the strategy."""
    benchmark = MixedDigits(seed=0, original_class_ids=True)
    strategy = _strategy(routers)
    for experience in benchmark.train_stream[:experiences]:
        strategy.train(experience, eval_streams=[])
    return strategy


def test_e0_features_of_a_task_are_computed_once_for_the_detector_and_every_router(monkeypatch, one_thread):
    from avalanche_sdr.models import SDRModel, TaskData

    inner_passes, inner_init = SDRModel.batched_features, TaskData.__init__
    kept, passes = [], []

    def made(self, task, x, y, class_ids=None):
        kept.append(x)
        passes.append(0)
        inner_init(self, task, x, y, class_ids)

    def counted(self, images, entry, batch_size=None):
        if entry is None and kept and images is kept[-1]:
            passes[-1] += 1
        return inner_passes(self, images, entry, batch_size)

    monkeypatch.setattr(SDRModel, "batched_features", counted)
    monkeypatch.setattr(TaskData, "__init__", made)
    strategy = _first_tasks(ROUTERS)
    rules = [r.rule for r in strategy.sdr.records]
    assert "warm_start" in rules and "two_sample" in rules
    assert passes == [1] * 5  # the detector (a warm start's references, else its test) and three router states
    assert strategy.sdr._data is None  # let go at the end of each experience

    # the same run computing them for every reader: the same decisions, p-values and router states, bit for bit
    monkeypatch.setattr(TaskData, "e0_features", lambda self, model, batch_size=None:
                        inner_passes(model, self.x, None, batch_size))
    plain = _first_tasks(ROUTERS)
    assert [(r.decision, r.p_value, r.power) for r in plain.sdr.records] == \
        [(r.decision, r.p_value, r.power) for r in strategy.sdr.records]
    ours, theirs = strategy.model.routing_states, plain.model.routing_states
    assert sorted(ours) == sorted(theirs)
    for key in ours:
        a, b = ours[key].state_dict(), theirs[key].state_dict()
        assert sorted(a) == sorted(b) and all(torch.equal(a[k], b[k]) for k in a), key
