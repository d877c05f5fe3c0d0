"""Expert Gate's relatedness rule on E0 features: decisions, stored AEs, determinism."""
import json
import math

import pytest
import torch

from avalanche_sdr.detection import expert_gate
from avalanche_sdr.detection.decision import DetectionRecord
from avalanche_sdr.detection.expert_gate import (
    AE_STATE_KEYS,
    DEFAULT_EXPERT_GATE,
    ExpertGateDetector,
    ExpertGateSettings,
    reconstruction_error,
    relatedness,
    train_autoencoder,
)
from avalanche_sdr.models import TaskData, build_sdr_model, small_cnn_backbone

N = 200
FAST = ExpertGateSettings(epochs=30)


def make_model():
    torch.manual_seed(0)
    backbone = small_cnn_backbone(in_channels=1, widths=(8, 16, 32))
    return build_sdr_model(backbone, in_channels=1, image_size=8, generator=None)


def images(kind: str, n: int = N, seed: int = 0):
    """Seeded 8x8 images: a fixed pattern per ``kind`` plus Gaussian noise; 2 classes."""
    g = torch.Generator().manual_seed(seed)
    base = torch.zeros(8, 8)
    if kind == "left":
        base[:, :4] = 0.8
    elif kind == "stripes":
        base[::2, :] = 0.8
    elif kind == "square":
        base[2:6, 2:6] = 0.9
    else:
        raise ValueError(kind)
    x = (base + 0.1 * torch.randn(n, 1, 8, 8, generator=g)).clamp(0, 1)
    return x, torch.arange(n) % 2


def add_entry(model, detector, task, kind, seed, num_classes=2):
    x, y = images(kind, seed=seed)
    y = torch.arange(len(y)) % num_classes
    entry = model.create_entry(task)
    model.heads.add(task, num_classes)
    detector.remember(model, entry, TaskData(task, x, y))
    return entry


@pytest.fixture
def repository():
    """Entries 0 (``left`` images, task 0) and 1 (``stripes`` images, task 1)."""
    model = make_model()
    detector = ExpertGateDetector(FAST)
    add_entry(model, detector, 0, "left", seed=1)
    add_entry(model, detector, 1, "stripes", seed=2)
    return model, detector


# ---------------------------------------------------------------------- decisions


@pytest.mark.parametrize("kind, expected", [("left", 0), ("stripes", 1)])
def test_repeat_of_a_distribution_reuses_its_entry(repository, kind, expected):
    model, detector = repository
    x, y = images(kind, seed=10)
    record = detector.detect(model, TaskData(2, x, y))
    assert isinstance(record, DetectionRecord)
    assert record.decision == "reuse"
    assert record.entry == record.reused_entry == expected
    assert record.rule == "expert_gate"
    assert record.candidate_entries == [0, 1] and record.candidate_tasks == [0, 1]
    rel = record.p_value
    assert len(rel) == 2
    assert rel[expected] >= DEFAULT_EXPERT_GATE.threshold
    assert abs(rel[expected] - 1.0) < 0.15
    assert rel[1 - expected] < 0.0  # the other distribution is far off
    assert record.consistency == [] and record.complexity == []
    assert record.class_count_filter is False
    assert record.detection_seconds > 0.0
    json.dumps(record.to_dict())


def test_new_distribution_is_new(repository):
    model, detector = repository
    x, y = images("square", seed=11)
    record = detector.detect(model, TaskData(2, x, y))
    assert record.decision == "new"
    assert record.entry == -1 and record.reused_entry is None
    assert max(record.p_value) < 0.5


def test_threshold_decides_with_the_same_scores(repository):
    model, _ = repository
    x, y = images("left", seed=10)
    strict = ExpertGateDetector(ExpertGateSettings(epochs=30, threshold=1.5))
    loose = ExpertGateDetector(FAST)
    r_strict, r_loose = strict.detect(model, TaskData(2, x, y)), loose.detect(model, TaskData(2, x, y))
    assert r_strict.p_value == r_loose.p_value
    assert r_strict.decision == "new" and r_loose.decision == "reuse"


def test_empty_repository_is_new():
    model = make_model()
    x, y = images("left", seed=1)
    record = ExpertGateDetector(FAST).detect(model, TaskData(0, x, y))
    assert record.decision == "new" and record.candidate_entries == [] and record.p_value == []


def test_ties_go_to_the_lowest_entry(repository):
    model, detector = repository
    model.create_entry(5)
    model.heads.add(5, 2)
    model.set_detection_state(2, model.detection_state(1))  # entry 2 == entry 1
    model.set_detection_state(0, model.detection_state(1))  # entry 0 == entry 1 too
    x, y = images("stripes", seed=10)
    record = detector.detect(model, TaskData(6, x, y))
    assert record.p_value[0] == record.p_value[1] == record.p_value[2]
    assert record.decision == "reuse" and record.entry == 0


def test_detect_leaves_the_model_as_it_was(repository):
    model, detector = repository
    model.train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    x, y = images("left", seed=10)
    detector.detect(model, TaskData(2, x, y))
    assert model.training
    assert model.encoder.active is None
    after = model.state_dict()
    assert before.keys() == after.keys()
    assert all(torch.equal(before[k], after[k]) for k in before)


# ---------------------------------------------------------------------- the formula


def test_relatedness_formula():
    assert relatedness(0.2, 0.2) == pytest.approx(1.0)
    assert relatedness(0.3, 0.2) == pytest.approx(0.5)
    assert relatedness(0.1, 0.2) == pytest.approx(1.5)
    assert math.isfinite(relatedness(1.0, 0.0))  # Er_own floored, no division by zero


def test_reconstruction_error_uses_the_aes_own_statistics():
    g = torch.Generator().manual_seed(3)
    train = torch.rand(50, 6, generator=g) * 3
    ae = train_autoencoder(train, ExpertGateSettings(hidden=4, epochs=3), task=0)
    assert {k: tuple(v.shape) for k, v in ae.items()} == {
        "ae_mean": (6,), "ae_std": (6,), "ae_w1": (4, 6), "ae_b1": (4,), "ae_w2": (6, 4), "ae_b2": (6,)}
    assert all(v.dtype == torch.float32 for v in ae.values())
    assert torch.allclose(ae["ae_mean"], train.mean(0))
    assert torch.allclose(ae["ae_std"], train.std(0, correction=0))
    other = torch.rand(30, 6, generator=g) + 5
    u = torch.sigmoid((other - ae["ae_mean"]) / ae["ae_std"])
    out = torch.sigmoid(torch.relu(u @ ae["ae_w1"].T + ae["ae_b1"]) @ ae["ae_w2"].T + ae["ae_b2"])
    assert reconstruction_error(ae, other) == pytest.approx(float(((out - u) ** 2).mean()), rel=1e-5)


def test_constant_features_do_not_divide_by_zero():
    ae = train_autoencoder(torch.ones(10, 4), ExpertGateSettings(hidden=2, epochs=2), task=0)
    assert torch.all(ae["ae_std"] == expert_gate.STD_FLOOR)
    assert math.isfinite(reconstruction_error(ae, torch.ones(3, 4)))


def test_training_reduces_the_error():
    g = torch.Generator().manual_seed(4)
    feats = torch.relu(torch.randn(128, 3, generator=g) @ torch.randn(3, 16, generator=g))  # rank 3
    short = train_autoencoder(feats, ExpertGateSettings(hidden=8, epochs=1, lr=1e-2), task=0)
    long = train_autoencoder(feats, ExpertGateSettings(hidden=8, epochs=40, lr=1e-2), task=0)
    assert reconstruction_error(long, feats) < 0.5 * reconstruction_error(short, feats)


def test_bad_features_are_rejected():
    with pytest.raises(ValueError, match="NaN or Inf"):
        train_autoencoder(torch.tensor([[1.0, float("nan")]]), FAST, task=0)
    with pytest.raises(ValueError, match=r"\[n, D\]"):
        train_autoencoder(torch.ones(4), FAST, task=0)
    ae = train_autoencoder(torch.rand(8, 3), ExpertGateSettings(hidden=2, epochs=1), task=0)
    with pytest.raises(ValueError, match="reads 3 features"):
        reconstruction_error(ae, torch.rand(8, 4))


# ---------------------------------------------------------------------- remember


def test_remember_after_new_stores_the_detect_ae_without_retraining(repository, monkeypatch):
    model, detector = repository
    calls = []
    real = expert_gate.train_autoencoder
    monkeypatch.setattr(expert_gate, "train_autoencoder", lambda *a, **k: calls.append(1) or real(*a, **k))
    x, y = images("square", seed=11)
    record = detector.detect(model, TaskData(2, x, y))
    assert record.decision == "new" and len(calls) == 1
    feats = detector.cached_features(2)
    assert feats is not None and feats.shape == (N, 32) and feats.dtype == torch.float32
    assert detector.cached_features(3) is None
    trained = {k: v.clone() for k, v in detector._last[2].items()}
    entry = model.create_entry(2)
    detector.remember(model, entry, TaskData(2, x, y))  # the plugin's call
    assert len(calls) == 1  # no retraining
    stored = model.detection_state(entry)
    assert set(stored) == set(AE_STATE_KEYS)
    assert all(torch.equal(stored[k], trained[k]) for k in AE_STATE_KEYS)
    # and it is what a fresh training on the same features gives (determinism)
    fresh = real(feats, FAST, 2)
    assert all(torch.equal(stored[k], fresh[k]) for k in AE_STATE_KEYS)


def test_remember_without_features_reuses_the_detect_ae(repository):
    model, detector = repository
    x, y = images("square", seed=11)
    detector.detect(model, TaskData(2, x, y))
    trained = {k: v.clone() for k, v in detector._last[2].items()}
    entry = model.create_entry(2)
    detector.remember(model, entry, TaskData(2, torch.zeros_like(x), y))  # x ignored: AE cached
    assert all(torch.equal(model.detection_state(entry)[k], trained[k]) for k in AE_STATE_KEYS)


def test_remember_of_another_task_trains_on_its_features(repository):
    model, detector = repository
    x, y = images("square", seed=11)
    detector.detect(model, TaskData(2, x, y))
    x3, y3 = images("left", seed=12)
    entry = model.create_entry(3)
    detector.remember(model, entry, TaskData(3, x3, y3))
    expected = train_autoencoder(detector.features(model, x3), FAST, 3)
    assert all(torch.equal(model.detection_state(entry)[k], expected[k]) for k in AE_STATE_KEYS)


def test_a_second_remember_of_the_task_trains_on_its_features(repository):
    """The detect's AE is stored once; remembering the task again trains on its features."""
    model, detector = repository
    x, y = images("square", seed=11)
    detector.detect(model, TaskData(2, x, y))
    detector.remember(model, model.create_entry(2), TaskData(2, x, y))
    x2 = images("left", seed=12)[0]
    entry = model.create_entry(2)
    detector.remember(model, entry, TaskData(2, x2, y))
    expected = train_autoencoder(detector.features(model, x2), FAST, 2)
    assert all(torch.equal(model.detection_state(entry)[k], expected[k]) for k in AE_STATE_KEYS)


def test_entry_without_state_raises(repository):
    model, detector = repository
    model.create_entry(7)  # never remembered
    model.heads.add(7, 2)
    x, y = images("left", seed=10)
    with pytest.raises(RuntimeError, match="must see every entry's creating task"):
        detector.detect(model, TaskData(8, x, y))


# ---------------------------------------------------------------------- RNG, determinism


def test_global_rng_untouched(repository):
    model, detector = repository
    x, y = images("square", seed=11)
    torch.manual_seed(123)
    state = torch.get_rng_state()
    detector.detect(model, TaskData(2, x, y))
    assert torch.equal(torch.get_rng_state(), state)
    new_entries = model.create_entry(2), model.create_entry(3)  # (adapter init uses the global RNG)
    state = torch.get_rng_state()
    detector.remember(model, new_entries[0], TaskData(2, x, y))
    detector.remember(model, new_entries[1], TaskData(3, x, y))  # fresh training
    assert torch.equal(torch.get_rng_state(), state)


@pytest.mark.slow
def test_decisions_are_deterministic():
    records, states = [], []
    for _ in range(2):
        model = make_model()
        detector = ExpertGateDetector(FAST)
        add_entry(model, detector, 0, "left", seed=1)
        torch.manual_seed(99 + len(records))  # the global RNG does not matter
        x, y = images("square", seed=11)
        record = detector.detect(model, TaskData(1, x, y)).to_dict()
        record.pop("detection_seconds")
        records.append(record)
        states.append(model.detection_state(0))
    assert records[0] == records[1]
    assert all(torch.equal(states[0][k], states[1][k]) for k in AE_STATE_KEYS)


def test_seed_and_task_change_the_ae():
    feats = torch.rand(40, 5, generator=torch.Generator().manual_seed(0))
    s = ExpertGateSettings(hidden=3, epochs=2)
    a = train_autoencoder(feats, s, task=0)
    b = train_autoencoder(feats, s, task=1)
    c = train_autoencoder(feats, ExpertGateSettings(hidden=3, epochs=2, seed=1), task=0)
    assert not torch.equal(a["ae_w1"], b["ae_w1"]) and not torch.equal(a["ae_w1"], c["ae_w1"])


# ---------------------------------------------------------------------- class counts


def test_class_count_filter_filters_candidates():
    model = make_model()
    detector = ExpertGateDetector(ExpertGateSettings(epochs=30, class_count_filter=True))
    add_entry(model, detector, 0, "left", seed=1, num_classes=3)
    add_entry(model, detector, 1, "stripes", seed=2, num_classes=2)
    x, y = images("left", seed=10)
    record = detector.detect(model, TaskData(2, x, y))
    assert record.class_count_filter is True
    assert record.candidate_entries == [1] and record.candidate_tasks == [1]
    assert record.decision == "new"  # the matching 'left' entry has 3 classes
    unfiltered = ExpertGateDetector(FAST).detect(model, TaskData(2, x, y))
    assert unfiltered.candidate_entries == [0, 1] and unfiltered.decision == "reuse"
    assert unfiltered.entry == 0


# ---------------------------------------------------------------------- settings, config


@pytest.mark.parametrize("kwargs, message", [
    (dict(threshold=float("nan")), "threshold"),
    (dict(threshold="0.85"), "threshold"),
    (dict(hidden=0), "hidden"),
    (dict(hidden=2.0), "hidden"),
    (dict(epochs=-1), "epochs"),
    (dict(batch_size=True), "batch_size"),
    (dict(lr=0.0), "lr"),
    (dict(lr=float("inf")), "lr"),
    (dict(class_count_filter=1), "class_count_filter"),
    (dict(seed=-1), "seed"),
    (dict(seed=1.5), "seed"),
])
def test_settings_validation(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ExpertGateSettings(**kwargs)


def test_detector_argument_validation():
    with pytest.raises(TypeError, match="ExpertGateSettings"):
        ExpertGateDetector({"threshold": 0.85})
    with pytest.raises(ValueError, match="batch_size"):
        ExpertGateDetector(batch_size=0)


def test_defaults_and_config_are_json_safe():
    assert DEFAULT_EXPERT_GATE == ExpertGateSettings(
        threshold=0.85, hidden=100, epochs=50, lr=1e-3, batch_size=64, class_count_filter=False, seed=0)
    assert ExpertGateSettings(**DEFAULT_EXPERT_GATE.to_dict()) == DEFAULT_EXPERT_GATE
    detector = ExpertGateDetector(batch_size=32)
    assert detector.rule == "expert_gate" and detector.needs_generators is False
    config = json.loads(json.dumps(detector.config()))
    assert config == dict(rule="expert_gate", threshold=0.85, hidden=100, epochs=50, lr=1e-3,
                          batch_size=64, class_count_filter=False, seed=0, feature_batch_size=32)
