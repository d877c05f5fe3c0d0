"""SDRStrategy with the two-sample rule and the Expert Gate baseline, end to end.

The prototype stream of conftest.py (8 tasks, 4 groups x 2 splits, 3 warm-start tasks)
with repositories built without generators: every repeat must reuse its group's entry,
the group first met after the warm start must be new, the entries must keep their
detection state (counted in memory, restored from checkpoints), and a rule that needs
generators must be refused on a generator-free repository before any training.
"""
import pytest
import torch

from avalanche.evaluation.metrics import accuracy_metrics
from avalanche.training.plugins import EvaluationPlugin

from avalanche_sdr import CPU_LARGE_TASK_SETTINGS, SDRSettings, SDRStrategy, build_sdr_model
from avalanche_sdr.detection import TwoSampleDetector, TwoSampleSettings
from avalanche_sdr.evaluation import entry_bytes, repository_memory_bytes
from avalanche_sdr.models import small_cnn_backbone
from avalanche_sdr.training import load_repository
from avalanche_sdr.training.stream_runner import run_sdr_stream

# A short budget: the decisions, not the accuracy, are under test here.
SHORT = dict(CPU_LARGE_TASK_SETTINGS, new_task_epochs=2, lr_milestones=(1,), reuse_epochs=2, reuse_lr=0.01, vae_epochs=3,
             vae_patience=2)


def _model(generator=None):
    torch.manual_seed(0)
    kwargs = dict(latent_dim=4, vae_width=8) if generator else {}
    return build_sdr_model(small_cnn_backbone(in_channels=1, widths=(16, 32)), in_channels=1, image_size=8,
                           generator=generator, **kwargs)


def _strategy(model, **kwargs):
    return SDRStrategy(model=model, settings=SDRSettings(**SHORT),
                       evaluator=EvaluationPlugin(accuracy_metrics(experience=True), loggers=[]),
                       **kwargs)


# The mechanics are under test here, not the level (tests/detection/test_two_sample.py
# checks that): at the default alpha = 0.01 one of this stream's 2 repeats is a false
# "new" (p = 0.0084, an event the level allows); at alpha = 0.001 a false "new" on
# these 2 repeats has probability <= 0.2 %.
STRICT = TwoSampleSettings(alpha=0.001)


@pytest.fixture(scope="module", params=["two_sample", "expert_gate"])
def finished(request, prototype_stream, tmp_path_factory):
    directory = tmp_path_factory.mktemp(request.param)
    detector = TwoSampleDetector(STRICT) if request.param == "two_sample" else request.param
    strategy = _strategy(_model(), detector=detector, checkpoint_dir=directory)
    results = run_sdr_stream(strategy, prototype_stream, seed=0)
    return request.param, strategy, results, directory


def test_decisions(finished, prototype_stream):
    rule, strategy, results, _ = finished
    scored = [r for r in strategy.detection_records if r.decision != "warm_start"]
    assert all(r.rule == rule and r.p_value and not r.consistency for r in scored)
    if rule == "two_sample":
        assert results["detection"]["correct"] == 1.0, [t["outcome"] for t in results["tasks"]]
        assert results["unique_tasks"] == len(set(prototype_stream.stream_groups))
    else:  # Expert Gate: reuse exactly when the best relatedness reaches 0.85
        assert results["detection"]["incorrect"] == 0.0
        for r in scored:
            assert (r.decision == "reuse") == (max(r.p_value) >= 0.85)


def test_entries_keep_their_detection_state_and_no_generator(finished):
    rule, strategy, _, _ = finished
    model = strategy.model
    assert model.generators is None and not model.has_generators
    key = "features" if rule == "two_sample" else "ae_w1"
    for entry in model.entries:
        state = model.detection_state(entry)
        assert key in state
        state_bytes = sum(t.numel() * t.element_size() for t in state.values())
        adapters = sum(t.numel() * t.element_size() for m in model.encoder.entry_modules(entry)
                       for t in list(m.parameters()) + list(m.buffers()))
        assert entry_bytes(model, entry) == adapters + state_bytes
    total = repository_memory_bytes(strategy)
    assert total >= sum(entry_bytes(model, e) for e in model.entries)


def test_checkpoint_restores_the_detection_state(finished):
    _, strategy, _, directory = finished
    restored = load_repository(directory, _model())
    for entry in strategy.model.entries:
        saved = strategy.model.detection_state(entry)
        loaded = restored.detection_state(entry)
        assert saved.keys() == loaded.keys()
        assert all(torch.equal(saved[k], loaded[k]) for k in saved)


def test_two_sample_reuse_records_power_and_filter(finished):
    rule, strategy, _, _ = finished
    if rule != "two_sample":
        pytest.skip("two-sample records only")
    reused = [r for r in strategy.detection_records if r.decision == "reuse"]
    assert reused
    alpha, min_power = STRICT.alpha, STRICT.min_power
    for r in reused:
        assert r.class_count_filter is True
        assert r.p_value[r.candidate_entries.index(r.reused_entry)] >= alpha
        assert r.power is not None and r.power >= min_power


def test_a_rule_that_needs_generators_is_refused_without_them():
    with pytest.raises(ValueError, match="generator=None"):
        _strategy(_model(), detector="agreement")


def test_an_injected_detector_is_used(prototype_stream):
    detector = TwoSampleDetector(TwoSampleSettings(min_power=1.0, n_decoys=4))
    strategy = _strategy(_model(), detector=detector)
    assert strategy.sdr.detector is detector


def test_two_sample_with_generators_still_fits_them(prototype_stream):
    strategy = _strategy(_model("independent"), detector="two_sample")
    for experience in list(prototype_stream.train_stream)[:4]:
        strategy.train(experience, eval_streams=[])
    bank = strategy.model.generators
    assert all(bank.reference_elbo(e)[0] == bank.reference_elbo(e)[0] for e in strategy.model.entries)  # not NaN


def test_entry_feature_space_takes_references_after_training(prototype_stream):
    """feature_space="entry": references come from each entry's own trained encoder."""
    settings = TwoSampleSettings(alpha=0.001, feature_space="entry")
    strategy = _strategy(_model(), detector=TwoSampleDetector(settings))
    detector = strategy.sdr.detector
    experiences = list(prototype_stream.train_stream)
    strategy.train(experiences[0], eval_streams=[])
    model = strategy.model
    stored = model.detection_state(0)["features"]
    x = torch.stack([experiences[0].dataset[i][0] for i in range(len(experiences[0].dataset))])
    entry_space = detector.project(model, x, 0).float()
    e0_space = detector.project(model, x, None).float()
    # Each stored row is one of the task's images under the trained E_0-entry encoder, not under E0.
    assert all(any(torch.allclose(row, r, atol=1e-5) for r in entry_space) for row in stored[:5])
    assert not all(any(torch.allclose(row, r, atol=1e-5) for r in e0_space) for row in stored[:5])
    for experience in experiences[1:]:
        strategy.train(experience, eval_streams=[])
    records = [r for r in strategy.detection_records if r.decision != "warm_start"]
    assert [r.decision for r in records] == ["reuse", "reuse", "new", "reuse", "reuse"]


def test_forward_transfer_starts_from_the_candidate_with_the_highest_p_value(prototype_stream):
    strategy = _strategy(_model(), detector=TwoSampleDetector(STRICT), forward_transfer=True)
    experiences = list(prototype_stream.train_stream)
    for experience in experiences[:5]:
        strategy.train(experience, eval_streams=[])
    model = strategy.model
    before = {e: [p.clone() for p in model.encoder.entry_parameters(e)] for e in model.entries}
    new_task = experiences[5]  # group 0, first met here: a new entry
    strategy.sdr.settings = strategy.sdr.settings.replace(new_task_epochs=0)  # the initial values only
    strategy.train(new_task, eval_streams=[])
    record = strategy.detection_records[-1]
    assert record.decision == "new"
    nearest = record.candidate_entries[max(range(len(record.p_value)), key=lambda i: record.p_value[i])]
    started = list(model.encoder.entry_parameters(record.entry))
    assert all(torch.equal(a, b) for a, b in zip(started, before[nearest]))
