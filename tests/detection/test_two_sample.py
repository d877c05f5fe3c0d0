"""The two-sample repeat test: Hotelling / energy p-values, Bonferroni, the fixed
projection, the settings, and the ``"two_sample"`` detector end to end.

Every statistical check is seeded (deterministic) and sized so that a correct
implementation passes with overwhelming probability (KS p > 0.001, rejection counts
inside 99.9 % binomial bands) while a wrong null law, scaling or degrees of freedom
fails it.
"""
import dataclasses
import functools
import json
import math

import numpy as np
import pytest
import torch
from scipy import stats

from avalanche_sdr.detection.decision import DetectionRecord
from avalanche_sdr.detection.two_sample import (
    DEFAULT_TWO_SAMPLE,
    PROJECTION_SEED,
    TESTS,
    TwoSampleDetector,
    TwoSampleSettings,
    bonferroni,
    bottleneck_matching,
    energy_pvalue,
    hotelling_pvalue,
    random_projection,
)
from avalanche_sdr.models import TaskData, build_sdr_model, small_cnn_backbone

D = 16


# ============================================================== helpers


def _random_mixing(rng: np.random.Generator, d: int, rank: int = None) -> np.ndarray:
    """A [rank, d] matrix A: rows z @ A with z ~ N(0, I) have covariance A^T A (non-identity)."""
    a = rng.standard_normal((d if rank is None else rank, d))
    return a * rng.uniform(0.2, 3.0, size=(a.shape[0], 1))


@functools.lru_cache(maxsize=None)
def _hotelling_null_pvalues(n: int, m: int, d: int = D, reps: int = 2000, seed: int = 0, rank: int = None):
    """p-values of ``reps`` seeded null replications: both samples from the same
    Gaussian N(mu, A^T A) (random non-identity covariance, rank ``rank`` if given)."""
    rng = np.random.default_rng(seed)
    a = _random_mixing(rng, d, rank)
    mu = rng.normal(0.0, 5.0, size=d)
    k = a.shape[0]
    out = np.empty(reps)
    for i in range(reps):
        x = rng.standard_normal((n, k)) @ a + mu
        ref = rng.standard_normal((m, k)) @ a + mu
        out[i] = hotelling_pvalue(torch.from_numpy(x), torch.from_numpy(ref))
    return out


def _band(reps: int, level: float, confidence: float = 0.999):
    """Two-sided binomial band of the rejection count at ``level`` under a uniform p."""
    lo, hi = stats.binom.interval(confidence, reps, level)
    return int(lo), int(hi)


def _reference_hotelling(x: np.ndarray, ref: np.ndarray) -> float:
    """Textbook two-sample Hotelling T^2 with the pooled covariance (full rank)."""
    n, d = x.shape
    m = ref.shape[0]
    pooled = ((n - 1) * np.cov(x, rowvar=False) + (m - 1) * np.cov(ref, rowvar=False)) / (n + m - 2)
    diff = x.mean(0) - ref.mean(0)
    t2 = n * m / (n + m) * diff @ np.linalg.solve(pooled, diff)
    f = (n + m - d - 1) / (d * (n + m - 2)) * t2
    return float(stats.f.sf(f, d, n + m - d - 1))


def _reference_energy(z: np.ndarray, member: np.ndarray) -> float:
    """Energy distance (V-statistic form) of z[member] vs z[~member], written directly."""
    a, b = z[member], z[~member]

    def mean_dist(p, q):
        return np.linalg.norm(p[:, None, :] - q[None, :, :], axis=2).mean()

    return 2 * mean_dist(a, b) - mean_dist(a, a) - mean_dist(b, b)


# ============================================================== hotelling_pvalue


@pytest.mark.slow
@pytest.mark.parametrize("n, m", [(5, 100), (1, 100), (10, 10), (6, 13)])
def test_hotelling_uniform_under_the_null(n, m):
    # (6, 13): n + m - 2 = 17 > d = 16, the smallest full-rank case.
    p = _hotelling_null_pvalues(n, m)
    assert np.isfinite(p).all() and (p >= 0).all() and (p <= 1).all()
    assert stats.kstest(p, "uniform").pvalue > 0.001
    for level in (0.01, 0.05):
        lo, hi = _band(len(p), level)
        assert lo <= int((p < level).sum()) <= hi, (level, int((p < level).sum()))


@pytest.mark.parametrize("n, m", [(3, 4), (1, 10), (5, 13)])
def test_hotelling_singular_pooled_covariance_is_finite_and_keeps_the_level(n, m):
    # n + m - 2 <= d: the pooled covariance is singular. Whatever the law, the test
    # must stay a valid level-alpha test (the false-new promise) and give finite p.
    p = _hotelling_null_pvalues(n, m)
    assert np.isfinite(p).all() and (p >= 0).all() and (p <= 1).all()
    for level in (0.01, 0.05, 0.2):
        _, hi = _band(len(p), level)
        assert int((p < level).sum()) <= hi


@pytest.mark.parametrize("n, m", [(3, 4), (5, 13)])
def test_hotelling_singular_pooled_covariance_uniform_under_the_null(n, m):
    p = _hotelling_null_pvalues(n, m)
    assert stats.kstest(p, "uniform").pvalue > 0.001


@pytest.mark.parametrize("n, m, d, shift", [(40, 60, 5, 0.0), (30, 25, 16, 0.3), (100, 20, 8, 1.0), (17, 300, 16, 0.05)])
def test_hotelling_matches_the_textbook_formula(n, m, d, shift):
    rng = np.random.default_rng(n * 1000 + m)
    a = _random_mixing(rng, d)
    x = rng.standard_normal((n, d)) @ a + shift
    ref = rng.standard_normal((m, d)) @ a
    expected = _reference_hotelling(x, ref)
    got = hotelling_pvalue(torch.from_numpy(x), torch.from_numpy(ref))
    assert got == pytest.approx(expected, rel=1e-6, abs=1e-12)
    # Symmetric in the two samples, float32 input works (computed in float64).
    assert hotelling_pvalue(torch.from_numpy(ref), torch.from_numpy(x)) == pytest.approx(expected, rel=1e-6, abs=1e-12)
    got32 = hotelling_pvalue(torch.from_numpy(x).float(), torch.from_numpy(ref).float())
    assert got32 == pytest.approx(_reference_hotelling(x.astype(np.float32).astype(np.float64),
                                                       ref.astype(np.float32).astype(np.float64)),
                                  rel=1e-5, abs=1e-12)


def test_hotelling_is_affine_invariant():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((12, D)) + 0.4
    ref = rng.standard_normal((50, D))
    b = rng.standard_normal((D, D)) * 10
    c = rng.standard_normal(D) * 100
    p = hotelling_pvalue(torch.from_numpy(x), torch.from_numpy(ref))
    q = hotelling_pvalue(torch.from_numpy(x @ b + c), torch.from_numpy(ref @ b + c))
    assert 1e-6 < p < 0.5
    assert q == pytest.approx(p, rel=1e-6)


def test_hotelling_power_against_a_one_std_shift():
    rng = np.random.default_rng(11)
    a = _random_mixing(rng, D)
    std = np.sqrt((a * a).sum(0))  # per-dimension std of z @ a
    reps, rejected = 200, 0
    for _ in range(reps):
        x = rng.standard_normal((20, D)) @ a + std
        ref = rng.standard_normal((100, D)) @ a
        rejected += hotelling_pvalue(torch.from_numpy(x), torch.from_numpy(ref)) < 0.01
    assert rejected / reps > 0.95


def test_hotelling_rank_deficient_features():
    # Data in a 3-dim subspace of d = 16 (collinear features): the test works in the
    # subspace: valid p, uniform under the null, powerful against a shift inside it.
    p = _hotelling_null_pvalues(5, 100, reps=1000, seed=4, rank=3)
    assert np.isfinite(p).all() and (p >= 0).all() and (p <= 1).all()
    assert stats.kstest(p, "uniform").pvalue > 0.001
    lo, hi = _band(len(p), 0.05)
    assert lo <= int((p < 0.05).sum()) <= hi
    rng = np.random.default_rng(5)
    a = _random_mixing(rng, D, rank=3)
    x = rng.standard_normal((20, 3)) @ a + 3 * a[0]  # shift of 3 std along a data direction
    ref = rng.standard_normal((100, 3)) @ a
    assert hotelling_pvalue(torch.from_numpy(x), torch.from_numpy(ref)) < 1e-6


def test_hotelling_zero_variance_returns_one():
    x = torch.full((4, D), 0.3)
    assert hotelling_pvalue(x, torch.full((9, D), 0.3)) == 1.0
    assert hotelling_pvalue(torch.zeros(1, D), torch.zeros(2, D)) == 1.0


@pytest.mark.parametrize("bad", ["x_nan", "ref_nan", "x_inf", "ref_ninf"])
def test_hotelling_rejects_nan_and_inf(bad):
    x, ref = torch.randn(5, 4, generator=torch.Generator().manual_seed(0)), torch.randn(9, 4)
    target = x if bad.startswith("x") else ref
    target[1, 2] = {"nan": math.nan, "inf": math.inf, "ninf": -math.inf}[bad.split("_")[1]]
    with pytest.raises(ValueError, match="NaN or Inf"):
        hotelling_pvalue(x, ref)
    with pytest.raises(ValueError, match="NaN or Inf"):
        energy_pvalue(x, ref, 9, torch.Generator().manual_seed(0))


@pytest.mark.parametrize("x_shape, ref_shape", [
    ((5,), (9, 4)),  # 1-D
    ((5, 4), (9,)),
    ((5, 4, 1), (9, 4)),  # 3-D
    ((5, 4), (9, 3)),  # different d
    ((0, 4), (9, 4)),  # no new sample
    ((1, 4), (1, 4)),  # fewer than 3 samples in all
])
def test_two_sample_tests_reject_wrong_shapes(x_shape, ref_shape):
    x, ref = torch.randn(*x_shape), torch.randn(*ref_shape)
    with pytest.raises(ValueError):
        hotelling_pvalue(x, ref)
    with pytest.raises(ValueError):
        energy_pvalue(x, ref, 9, torch.Generator().manual_seed(0))


# ============================================================== energy_pvalue


def test_energy_uniform_under_the_null():
    # Skewed, non-Gaussian data: the permutation test's level is exact for any law.
    rng = np.random.default_rng(7)
    a = _random_mixing(rng, 4)
    g = torch.Generator().manual_seed(7)
    b, reps = 99, 600
    p = np.empty(reps)
    for i in range(reps):
        x = rng.exponential(size=(6, 4)) @ a
        ref = rng.exponential(size=(12, 4)) @ a
        p[i] = energy_pvalue(torch.from_numpy(x), torch.from_numpy(ref), b, g)
    assert np.allclose(p * (b + 1), np.round(p * (b + 1)), rtol=0, atol=1e-9) and (p >= 1 / (b + 1)).all() and (p <= 1).all()
    # Randomised p: exactly U(0, 1) when (B + 1) p is uniform on 1..B+1.
    p_continuous = p - rng.uniform(size=reps) / (b + 1)
    assert stats.kstest(p_continuous, "uniform").pvalue > 0.001
    lo, hi = _band(reps, 0.05)
    assert lo <= int((p <= 0.05).sum()) <= hi


def test_energy_matches_a_direct_permutation_count():
    # Replays the function's permutations (same generator stream, one chunk) with a
    # naively written energy distance.
    rng = np.random.default_rng(2)
    x = rng.standard_normal((7, 3)) + 0.3
    ref = rng.standard_normal((11, 3))
    b, seed = 60, 5
    got = energy_pvalue(torch.from_numpy(x), torch.from_numpy(ref), b, torch.Generator().manual_seed(seed))
    z = np.concatenate([x, ref])
    member = np.arange(len(z)) < len(x)
    observed = _reference_energy(z, member)
    order = torch.argsort(torch.rand(b, len(z), generator=torch.Generator().manual_seed(seed), dtype=torch.float64), dim=1)
    count = sum(_reference_energy(z, row < len(x)) >= observed for row in order.numpy())
    assert got == pytest.approx((1 + count) / (b + 1))
    assert 1 / (b + 1) < got < 1.0  # the check is not trivial


def test_energy_rejects_a_clear_shift_and_is_deterministic():
    rng = np.random.default_rng(8)
    x = torch.from_numpy(rng.standard_normal((10, 4)) + 1.5)
    ref = torch.from_numpy(rng.standard_normal((30, 4)))
    p = energy_pvalue(x, ref, 199, torch.Generator().manual_seed(0))
    assert p == pytest.approx(1 / 200)
    same = torch.from_numpy(rng.standard_normal((10, 4)))
    p1 = energy_pvalue(same, ref, 199, torch.Generator().manual_seed(1))
    assert p1 == energy_pvalue(same, ref, 199, torch.Generator().manual_seed(1))
    assert p1 != energy_pvalue(same, ref, 199, torch.Generator().manual_seed(2))
    assert p1 > 0.01
    # More permutations than one chunk: same value for every chunk count's total B.
    assert energy_pvalue(x, ref, 600, torch.Generator().manual_seed(0), chunk=256) == pytest.approx(1 / 601)


def test_energy_counts_ties_with_the_observed_statistic():
    # Every relabelling of identical points ties the observed statistic: p = 1
    # (counting only strict exceedances would give the smallest p, 1 / (B + 1)).
    x = torch.ones(4, 3)
    assert energy_pvalue(x, torch.ones(6, 3), 49, torch.Generator().manual_seed(0)) == 1.0
    # Discrete data: ties are frequent; the p-value stays on its grid and valid.
    z = torch.tensor([[0.0], [1.0], [0.0], [1.0], [0.0], [1.0], [1.0], [0.0]], dtype=torch.float64)
    p = energy_pvalue(z[:3], z[3:], 99, torch.Generator().manual_seed(0))
    assert p > 0.3


def test_energy_does_not_touch_the_global_rng():
    state = torch.get_rng_state()
    energy_pvalue(torch.randn(5, 3, generator=torch.Generator().manual_seed(0)),
                  torch.randn(8, 3, generator=torch.Generator().manual_seed(1)), 99, torch.Generator().manual_seed(0))
    assert torch.equal(state, torch.get_rng_state())


# ============================================================== bonferroni


def test_bonferroni():
    assert bonferroni([0.2, 0.01, 0.5]) == pytest.approx(0.03)
    assert bonferroni((0.004,)) == 0.004
    assert bonferroni([0.5, 0.6]) == 1.0
    assert bonferroni([0.0, 1.0, 1.0]) == 0.0
    assert bonferroni([0.3] * 10) == 1.0
    with pytest.raises(ValueError):
        bonferroni([])


# ============================================================== random_projection


def test_random_projection_orthonormal_and_seeded():
    state = torch.get_rng_state()
    q = random_projection(32, 16)
    assert torch.equal(state, torch.get_rng_state())
    assert q.shape == (32, 16) and q.dtype == torch.float64
    assert torch.allclose(q.T @ q, torch.eye(16, dtype=torch.float64), atol=1e-10)
    assert torch.equal(q, random_projection(32, 16))
    assert torch.equal(q, random_projection(32, 16, seed=PROJECTION_SEED))
    other = random_projection(32, 16, seed=PROJECTION_SEED + 1)
    assert torch.allclose(other.T @ other, torch.eye(16, dtype=torch.float64), atol=1e-10)
    assert (q - other).abs().max() > 0.1
    # Not a coordinate selection: a genuinely mixing projection.
    assert (q.abs() > 1e-3).float().mean() > 0.9


def test_random_projection_clipped_to_the_feature_dim():
    q = random_projection(8, 16)
    assert q.shape == (8, 8)
    assert torch.allclose(q.T @ q, torch.eye(8, dtype=torch.float64), atol=1e-10)
    assert torch.allclose(q @ q.T, torch.eye(8, dtype=torch.float64), atol=1e-10)
    assert random_projection(512, 16, seed=3).shape == (512, 16)


# ============================================================== settings


def test_settings_defaults_and_to_dict():
    s = TwoSampleSettings()
    assert s == DEFAULT_TWO_SAMPLE and TESTS == ("hotelling", "energy")
    d = s.to_dict()
    assert d == dict(alpha=0.01, min_power=0.9, test="hotelling", dim=16, reference_per_class=100,
                     max_per_class=500, n_decoys=32, n_permutations=999, class_count_filter=True,
                     feature_space="e0", seed=0, match_classes=False)
    assert json.loads(json.dumps(d)) == d
    assert TwoSampleSettings(**d) == s
    custom = TwoSampleSettings(alpha=0.05, test="energy", dim=8, seed=3, class_count_filter=False)
    assert TwoSampleSettings(**custom.to_dict()) == custom
    d["alpha"] = 0.5  # a copy: the settings do not change
    assert s.alpha == 0.01
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.alpha = 0.5
    with pytest.raises(ValueError, match="feature_space"):
        TwoSampleSettings(feature_space="pixels")


@pytest.mark.parametrize("overrides", [
    dict(alpha=0.0), dict(alpha=1.0), dict(alpha=-0.1), dict(alpha=math.nan), dict(alpha=2),
    dict(min_power=-0.01), dict(min_power=1.01), dict(min_power=math.nan),
    dict(test="t-test"), dict(test="Hotelling"),
    dict(dim=0), dict(dim=1.5), dict(dim=16.0), dict(dim=True), dict(dim="16"),
    dict(reference_per_class=1), dict(reference_per_class=0), dict(max_per_class=1),
    dict(n_decoys=0), dict(n_decoys=-3), dict(n_permutations=0), dict(n_permutations=99.0),
    dict(match_classes=1), dict(match_classes="yes"), dict(match_classes=None),
])
def test_settings_validation(overrides):
    with pytest.raises(ValueError):
        TwoSampleSettings(**overrides)


def test_detector_config_and_type_check():
    det = TwoSampleDetector(TwoSampleSettings(alpha=0.05), batch_size=7)
    cfg = det.config()
    assert cfg["rule"] == "two_sample" and cfg["alpha"] == 0.05 and cfg["batch_size"] == 7
    assert json.loads(json.dumps(cfg)) == cfg
    assert det.needs_generators is False and det.rule == "two_sample"
    with pytest.raises(TypeError):
        TwoSampleDetector(dict(alpha=0.01))


# ============================================================== detector end to end


def make_model():
    with torch.random.fork_rng():
        torch.manual_seed(0)
        backbone = small_cnn_backbone(in_channels=1, widths=(8, 16, 32))
        return build_sdr_model(backbone, in_channels=1, image_size=8, generator=None)


def templates(seed: int, classes: int) -> torch.Tensor:
    """Fixed random class templates [classes, 1, 8, 8] in [0, 1]."""
    return torch.rand(classes, 1, 8, 8, generator=torch.Generator().manual_seed(seed))


def sample(tmpl: torch.Tensor, per_class, seed: int, noise: float = 0.05):
    """Images of each class: its template plus Gaussian noise, clipped to [0, 1]."""
    g = torch.Generator().manual_seed(seed)
    counts = torch.as_tensor([per_class] * len(tmpl) if isinstance(per_class, int) else per_class)
    y = torch.arange(len(tmpl)).repeat_interleave(counts)
    x = (tmpl[y] + noise * torch.randn(len(y), 1, 8, 8, generator=g)).clamp(0, 1)
    return x, y


TEMPLATES = {"A": templates(1, 2), "B": templates(2, 2), "C": templates(3, 3)}


def _add(model, det, task, tmpl, per_class=120, seed=None, noise=0.05):
    entry = model.create_entry(task)
    model.heads.add(task, len(tmpl))
    x, y = sample(tmpl, per_class, seed=100 + task if seed is None else seed, noise=noise)
    det.remember(model, entry, TaskData(task, x, y))
    return entry


@pytest.fixture(scope="module")
def repo():
    """Entries 0 (task 0, templates A), 1 (task 1, B), both 2 classes; 2 (task 2, C), 3 classes."""
    model, det = make_model(), TwoSampleDetector()
    for task, name in enumerate("ABC"):
        _add(model, det, task, TEMPLATES[name])
    return model, det


@pytest.mark.parametrize("name, entry, candidates", [("A", 0, [0, 1]), ("B", 1, [0, 1]), ("C", 2, [2])])
def test_detector_reuses_the_entry_of_a_repeated_task(repo, name, entry, candidates):
    model, det = repo
    x, y = sample(TEMPLATES[name], 60, seed=7)  # new images of the same classes
    r = det.detect(model, TaskData(10, x, y))
    assert r.decision == "reuse" and r.entry == entry and r.reused_entry == entry
    assert r.candidate_entries == candidates and r.candidate_tasks == candidates
    assert r.rule == "two_sample" and r.class_count_filter is True
    assert len(r.p_value) == len(candidates)
    best = candidates.index(entry)
    assert r.p_value[best] >= det.settings.alpha
    assert all(p < det.settings.alpha for i, p in enumerate(r.p_value) if i != best)
    assert r.power is not None and r.power >= det.settings.min_power
    assert r.detection_seconds > 0


@pytest.mark.parametrize("classes", [2, 3])
def test_detector_declares_an_unseen_task_new(repo, classes):
    model, det = repo
    x, y = sample(templates(40 + classes, classes), 60, seed=8)
    r = det.detect(model, TaskData(11, x, y))
    assert r.decision == "new" and r.entry == -1 and r.reused_entry is None
    assert r.p_value and all(p < det.settings.alpha for p in r.p_value)
    assert r.power is None  # not computed: every candidate rejected


def test_detector_class_count_filter(repo):
    model, det = repo
    x, y = sample(templates(50, 4), 30, seed=9)
    r = det.detect(model, TaskData(12, x, y))  # no 4-class entry
    assert r.candidate_entries == [] and r.candidate_tasks == [] and r.p_value == []
    assert r.decision == "new" and r.power is None
    x, y = sample(TEMPLATES["A"][:1], 30, seed=9)
    assert det.detect(model, TaskData(13, x, y)).candidate_entries == []


def test_detector_without_class_count_filter(repo):
    model, _ = repo
    det = TwoSampleDetector(TwoSampleSettings(class_count_filter=False))
    x, y = sample(TEMPLATES["C"], 40, seed=10)  # 3 classes vs 2-class entries 0, 1
    r = det.detect(model, TaskData(14, x, y))
    assert r.candidate_entries == [0, 1, 2] and r.class_count_filter is False
    assert r.decision == "reuse" and r.entry == 2
    assert r.p_value[0] < det.settings.alpha and r.p_value[1] < det.settings.alpha
    x, y = sample(TEMPLATES["A"], 40, seed=10)
    r = det.detect(model, TaskData(15, x, y))  # 2 classes vs the 3-class entry 2
    assert r.candidate_entries == [0, 1, 2] and r.decision == "reuse" and r.entry == 0
    x, y = sample(TEMPLATES["A"][:1], 40, seed=10)  # class 0 of A alone: not a repeat of any entry
    r = det.detect(model, TaskData(16, x, y))
    assert r.candidate_entries == [0, 1, 2] and r.decision == "new"


def test_detector_small_task_with_near_decoys_is_new():
    # Three 1-class entries: a template and two slightly shifted copies. At full
    # reference size they are told apart; with 2 images a class they are not, so the
    # power check refuses to reuse; with 50 images it reuses the right entry.
    g = torch.Generator().manual_seed(1)
    base = torch.rand(1, 1, 8, 8, generator=g) * 0.6 + 0.2
    model, det = make_model(), TwoSampleDetector()
    for task, shift in enumerate((0.0, 0.05, -0.05)):
        _add(model, det, task, base + shift, per_class=100, seed=10 + task, noise=0.1)
    x, y = sample(base, 2, seed=52, noise=0.1)
    r = det.detect(model, TaskData(10, x, y))
    assert max(r.p_value) >= det.settings.alpha  # nothing rejected...
    assert r.power is not None and r.power < det.settings.min_power  # ...but no power to
    assert r.decision == "new"
    x, y = sample(base, 50, seed=100, noise=0.1)
    r = det.detect(model, TaskData(11, x, y))
    assert r.decision == "reuse" and r.entry == 0 and r.power >= det.settings.min_power


def test_detector_small_task_with_far_decoys_has_power(repo):
    # With well-separated class templates, even 2 images a class reject every stored
    # (known-distinct) decoy: the estimated power is genuinely high, and the task is
    # reused. (The power is against stored distributions only.)
    model, det = repo
    x, y = sample(TEMPLATES["A"], 2, seed=23)
    r = det.detect(model, TaskData(17, x, y))
    assert r.power is not None and r.power >= det.settings.min_power
    assert r.decision == "reuse" and r.entry == 0


def test_detect_does_not_change_the_model_nor_the_global_rng(repo):
    model, det = repo
    model.train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    other = make_model()
    entry = other.create_entry(0)  # entries and heads draw their init from the global RNG,
    other.heads.add(0, 2)  # remember and detect must not
    x, y = sample(TEMPLATES["B"], 30, seed=11)
    state = torch.get_rng_state()
    det.detect(model, TaskData(18, x, y))
    TwoSampleDetector().remember(other, entry, TaskData(0, x, y))
    assert torch.equal(state, torch.get_rng_state())
    assert model.training  # mode restored
    after = model.state_dict()
    assert before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before)
    model.eval()


def _strip_time(record):
    d = record.to_dict()
    d.pop("detection_seconds")
    return d


def test_detector_is_deterministic():
    def run(global_seed):
        torch.manual_seed(global_seed)  # decisions must not depend on the global RNG
        model, det = make_model(), TwoSampleDetector(TwoSampleSettings(reference_per_class=50, max_per_class=40))
        for task, name in enumerate("AB"):
            _add(model, det, task, TEMPLATES[name])
        states = [model.detection_state(e) for e in model.entries]
        out = []
        for task, (name, per) in enumerate([("A", 60), ("B", 3), ("C", 20)], start=5):
            tmpl = TEMPLATES[name][:2]
            x, y = sample(tmpl, per, seed=task)
            out.append(_strip_time(det.detect(model, TaskData(task, x, y))))
        return states, out

    with torch.random.fork_rng():
        s1, r1 = run(1)
        s2, r2 = run(2)
    assert r1 == r2
    assert [r["decision"] for r in r1] == ["reuse", "reuse", "new"]
    for a, b in zip(s1, s2):
        assert torch.equal(a["features"], b["features"]) and torch.equal(a["labels"], b["labels"])


def test_stored_reference(repo):
    model, det = repo
    for e, classes in [(0, 2), (1, 2), (2, 3)]:
        state = model.detection_state(e)
        feats, labels = state["features"], state["labels"]
        assert feats.dtype == torch.float32 and labels.dtype == torch.int64
        assert feats.shape == (100 * classes, D)  # 120 images a class, 100 kept
        assert torch.equal(torch.bincount(labels), torch.full((classes,), 100))
    # Fewer images than reference_per_class: all kept; rows are the task's projected
    # features (a seeded subsample), whether passed in or computed.
    small = TwoSampleDetector(TwoSampleSettings(reference_per_class=7))
    m2 = make_model()
    e = m2.create_entry(0)
    m2.heads.add(0, 2)
    x, y = sample(TEMPLATES["A"], [5, 20], seed=3)
    small.remember(m2, e, TaskData(0, x, y))
    state = m2.detection_state(e)
    assert torch.equal(torch.bincount(state["labels"]), torch.tensor([5, 7]))
    full = small.project(m2, x)
    assert full.shape == (25, D) and full.dtype == torch.float64
    stored = state["features"].double()
    dist = torch.cdist(stored, full.float().double())
    assert dist.min(1).values.max() < 1e-6  # each stored row is one of the task's rows
    hit = dist.argmin(1)
    assert torch.equal(y[hit], state["labels"])  # with its own label
    assert len(set(hit.tolist())) == 12
    small.remember(m2, e, TaskData(0, x, y))
    assert torch.equal(m2.detection_state(e)["features"], state["features"])
    # after a detect of the same task, its projected features are the rows (not computed again)
    fake = torch.arange(25 * D, dtype=torch.float64).view(25, D)
    small._last = (0, fake)
    small.remember(m2, e, TaskData(0, x, y))
    assert set(m2.detection_state(e)["features"][:, 0].tolist()) <= set(fake[:, 0].tolist())


def test_project_and_cached_features(repo):
    model, det = repo
    x, y = sample(TEMPLATES["A"], 10, seed=12)
    f = det.project(model, x)
    assert f.shape == (20, D) and f.dtype == torch.float64
    batched = TwoSampleDetector(batch_size=3).project(model, x)
    assert torch.allclose(f, batched, atol=1e-10)
    det.detect(model, TaskData(19, x, y))
    assert torch.equal(det.cached_features(19), f)
    assert det.cached_features(20) is None


def test_record_json_round_trip(repo):
    model, det = repo
    for tmpl, classes in [(TEMPLATES["A"], 2), (templates(60, 2), 2), (templates(61, 5), 5)]:
        x, y = sample(tmpl, 30, seed=13)
        r = det.detect(model, TaskData(21, x, y))
        back = DetectionRecord.from_dict(json.loads(json.dumps(r.to_dict())))
        assert back == r


def test_entry_without_reference_raises(repo):
    model = make_model()
    model.create_entry(0)
    model.heads.add(0, 2)
    x, y = sample(TEMPLATES["A"], 10, seed=14)
    with pytest.raises(RuntimeError, match="no reference features"):
        TwoSampleDetector().detect(model, TaskData(1, x, y))


def test_entry_with_a_single_image_class_does_not_break_detection():
    model, det = make_model(), TwoSampleDetector()
    _add(model, det, 0, TEMPLATES["A"], per_class=[50, 1])
    x, y = sample(TEMPLATES["A"], 30, seed=15)
    r = det.detect(model, TaskData(1, x, y))
    assert r.candidate_entries == [0]


@pytest.mark.slow
def test_energy_detector_end_to_end(repo):
    # n_permutations = 999: resolution 0.001 < alpha / c = 0.005.
    model, _ = repo
    det = TwoSampleDetector(TwoSampleSettings(test="energy", n_decoys=8))
    x, y = sample(TEMPLATES["B"], 30, seed=16)
    r = det.detect(model, TaskData(22, x, y))
    assert r.decision == "reuse" and r.entry == 1 and r.power >= 0.9
    assert r.p_value[0] == pytest.approx(2 / 1000)  # c * the smallest possible p
    x, y = sample(templates(70, 2), 30, seed=16)
    r = det.detect(model, TaskData(23, x, y))
    assert r.decision == "new" and all(p < 0.01 for p in r.p_value)


# ============================================================== false-new rate


@pytest.mark.slow
def test_false_new_rate_on_held_out_halves():
    # A class-structured Gaussian "task" (3 classes, own mean and covariance each);
    # the entry stores one half, the other half is the repeat. The combined p-value
    # (Bonferroni over classes) rejects a true repeat at most alpha of the time.
    rng = np.random.default_rng(21)
    classes, alpha, reps = 3, 0.05, 1000
    means = rng.normal(0, 3, size=(classes, D))
    mixes = [_random_mixing(rng, D) for _ in range(classes)]
    new = 0
    for _ in range(reps):
        pvalues = []
        for j in range(classes):
            n_ref, n_new = int(rng.integers(20, 101)), int(rng.integers(5, 60))
            z = rng.standard_normal((n_ref + n_new, D)) @ mixes[j] + means[j]
            pvalues.append(hotelling_pvalue(torch.from_numpy(z[:n_new]), torch.from_numpy(z[n_new:])))
        new += bonferroni(pvalues) < alpha
    _, hi = stats.binom.interval(0.999, reps, alpha)
    # Bonferroni over independent classes: rate 1 - (1 - alpha / c)^c ~ 0.049, so
    # also not far below (a test that never rejects would pass the bound trivially).
    lo, _ = stats.binom.interval(0.999, reps, 1 - (1 - alpha / classes) ** classes)
    assert lo <= new <= hi, new


@pytest.mark.slow
def test_detector_false_new_rate_on_held_out_halves():
    # Same property through the detector on real (CNN) features of images: each
    # replication stores one half of a fresh 2-class sample and tests the other half.
    alpha, reps = 0.2, 40
    settings = TwoSampleSettings(alpha=alpha, n_decoys=1)
    tmpl = templates(80, 2)
    rejected = 0
    for i in range(reps):
        x, y = sample(tmpl, 60, seed=1000 + i, noise=0.15)
        half = torch.arange(len(y)) % 2 == 0
        model = make_model()
        det = TwoSampleDetector(settings)
        e = model.create_entry(0)
        model.heads.add(0, 2)
        det.remember(model, e, TaskData(0, x[half], y[half]))
        r = det.detect(model, TaskData(1 + i, x[~half], y[~half]))
        rejected += r.p_value[0] < alpha
    _, hi = stats.binom.interval(0.999, reps, alpha)
    assert rejected <= hi, rejected


def test_decoy_power_is_measured_on_other_data_than_the_decoy_selection(repo, monkeypatch):
    """Known-distinct decoys are selected on one half of a stored class reference and
    the decoy samples come from the other half: selecting decoys because they were
    rejected and then measuring the rejection rate on the same rows would make the
    power check vacuous when tasks are as small as the references."""
    model, _ = repo
    det = TwoSampleDetector()
    refs = {e: det._references(model, e) for e in model.entries}
    halves = {(e, j): det._halves(refs, (e, j)) for e in refs for j in range(len(refs[e]))}
    for (first, second), rows in zip(halves.values(), (refs[e][j] for e, j in halves)):
        assert len(first) + len(second) == len(rows)
        joined = torch.cat([first, second])
        assert torch.equal(torch.sort(joined, dim=0).values, torch.sort(rows, dim=0).values)

    def rows_of(t):
        return {tuple(r.tolist()) for r in t}

    first_rows = set().union(*(rows_of(f) for f, _ in halves.values()))
    second_rows = set().union(*(rows_of(s) for _, s in halves.values()))
    seen = []
    real = det._pvalue
    monkeypatch.setattr(det, "_pvalue", lambda x, ref, g: seen.append(rows_of(x)) or real(x, ref, g))
    power = det.decoy_power(model, 0, [30, 30], task=5, refs=refs)
    assert 0.0 <= power <= 1.0
    selections = [s for s in seen if s <= first_rows and not s <= second_rows]
    decoys = [s for s in seen if s <= second_rows and not s <= first_rows]
    assert selections and decoys and len(selections) + len(decoys) == len(seen)
    assert len(decoys) == det.settings.n_decoys * 2


# ============================================================== classes in another order (match_classes)


def _brute_force_best(p: np.ndarray):
    """Every permutation with its Bonferroni-combined p-value and sum of log p."""
    import itertools

    c = len(p)
    return [(list(s), bonferroni([p[k, s[k]] for k in range(c)]),
             float(np.sum(np.log(np.maximum([p[k, s[k]] for k in range(c)], np.finfo(float).tiny)))))
            for s in itertools.permutations(range(c))]


@pytest.mark.parametrize("matrix, sigma, combined", [
    ([[0.001, 0.4], [0.3, 0.002]], [1, 0], 0.6),  # the swap: bottleneck 0.3, times c = 2
    ([[0.5, 0.5], [0.5, 0.5]], [0, 1], 1.0),  # all tied: the identity
    ([[0.6, 0.9], [0.9, 0.6]], [0, 1], 1.0),  # the swap's bottleneck is larger, but both give p = 1
    ([[0.0, 0.0], [0.0, 0.0]], [0, 1], 0.0),
    ([[0.2]], [0], 0.2),
    ([[0.01, 0.2, 0.3], [0.25, 0.02, 0.001], [0.4, 0.001, 0.03]], [1, 0, 2], 0.09),  # bottleneck 0.03
    ([[0.1, 0.9, 0.2], [0.2, 0.1, 0.9], [0.9, 0.2, 0.1]], [1, 2, 0], 1.0),
    # Two permutations reach min p = 0.05 (combined 0.15), not the identity (0.01):
    # [1, 2, 0] (p 0.05, 0.2, 0.2) and [2, 0, 1] (0.05 each): the larger sum of log p.
    ([[0.01, 0.05, 0.05], [0.05, 0.01, 0.2], [0.2, 0.05, 0.01]], [1, 2, 0], 0.15),
])
def test_bottleneck_matching_small_matrices(matrix, sigma, combined):
    got_sigma, got = bottleneck_matching(matrix)
    assert got_sigma == sigma
    assert got == pytest.approx(combined, rel=1e-12, abs=0)
    assert got == bonferroni([matrix[k][j] for k, j in enumerate(got_sigma)])


def test_bottleneck_matching_prefers_the_identity_only_when_it_is_optimal():
    # The identity ties the optimum (3 * 0.1 = 0.3) with [0, 2, 1] (whose sum of log p
    # is larger): the identity wins. Lower its bottleneck and the other one is taken.
    p = np.array([[0.2, 0.01, 0.01], [0.01, 0.1, 0.1], [0.01, 0.15, 0.1]])
    assert bottleneck_matching(p) == ([0, 1, 2], pytest.approx(0.3))
    p[1, 1] = 0.09
    assert bottleneck_matching(p) == ([0, 2, 1], pytest.approx(0.3))
    # Clipped at 1: the identity (3 * 0.4 >= 1) ties [0, 2, 1] (larger p) at p = 1.
    p = np.array([[0.9, 0.01, 0.01], [0.01, 0.4, 0.8], [0.01, 0.8, 0.4]])
    assert bottleneck_matching(p) == ([0, 1, 2], 1.0)
    p[1, 1] = 0.3
    assert bottleneck_matching(p) == ([0, 2, 1], 1.0)


@pytest.mark.parametrize("c", [1, 2, 3, 4, 5])
def test_bottleneck_matching_equals_brute_force(c):
    rng = np.random.default_rng(c)
    for trial in range(60):
        # Values on a coarse grid (many ties), some exact zeros, some near-one entries.
        p = rng.choice([0.0, 1e-30, 0.001, 0.004, 0.02, 0.2, 0.34, 0.5, 0.9, 1.0], size=(c, c))
        if trial % 3 == 0:
            p = rng.uniform(size=(c, c)) ** 4
        sigma, combined = bottleneck_matching(p)
        table = _brute_force_best(p)
        best = max(value for _, value, _ in table)
        assert combined == best
        assert sorted(sigma) == list(range(c))
        assert bonferroni([p[k, sigma[k]] for k in range(c)]) == best
        optimal = [(s, logs) for s, value, logs in table if value == best]
        if any(s == list(range(c)) for s, _ in optimal):
            assert sigma == list(range(c))
        else:
            assert dict((tuple(s), logs) for s, logs in optimal)[tuple(sigma)] == pytest.approx(
                max(logs for _, logs in optimal), rel=1e-9, abs=1e-9)
        assert bottleneck_matching(p) == (sigma, combined)  # deterministic


@pytest.mark.parametrize("bad", [[[0.1, 0.2]], [], [[0.1, math.nan], [0.2, 0.3]], [[1.5, 0.1], [0.1, 0.1]],
                                 [[-0.1, 0.1], [0.1, 0.1]], [0.1, 0.2]])
def test_bottleneck_matching_rejects_bad_matrices(bad):
    with pytest.raises(ValueError):
        bottleneck_matching(bad)


MATCH = TwoSampleSettings(match_classes=True)


def _relabel(y: torch.Tensor, permutation) -> torch.Tensor:
    """Labels after a shuffle: the class labelled j is now labelled ``permutation[j]``."""
    return torch.tensor(permutation)[y]


def _inverse(permutation):
    return [permutation.index(k) for k in range(len(permutation))]


@pytest.mark.parametrize("name, entry, permutation", [
    ("A", 0, [1, 0]), ("B", 1, [1, 0]), ("C", 2, [2, 0, 1]), ("C", 2, [1, 2, 0]), ("C", 2, [0, 2, 1]),
])
def test_detector_matches_the_classes_of_a_shuffled_repeat(repo, name, entry, permutation):
    model, _ = repo
    x, y = sample(TEMPLATES[name], 60, seed=7)
    y = _relabel(y, permutation)
    r = TwoSampleDetector(MATCH).detect(model, TaskData(30, x, y))
    assert r.decision == "reuse" and r.entry == entry
    # New class k holds the images of the entry's class permutation^-1[k].
    assert r.class_permutation == _inverse(permutation)
    assert r.power >= MATCH.min_power and max(r.p_value) >= MATCH.alpha
    assert DetectionRecord.from_dict(json.loads(json.dumps(r.to_dict()))) == r
    # Without matching the same task is declared new: every class is compared with
    # another class of the entry.
    off = TwoSampleDetector().detect(model, TaskData(30, x, y))
    assert off.decision == "new" and off.class_permutation == []
    assert all(p < MATCH.alpha for p in off.p_value)


@pytest.mark.slow
@pytest.mark.parametrize("name, entry", [("A", 0), ("B", 1), ("C", 2)])
def test_detector_with_matching_keeps_the_identity_of_an_unshuffled_repeat(repo, name, entry):
    model, _ = repo
    x, y = sample(TEMPLATES[name], 60, seed=7)
    on = TwoSampleDetector(MATCH).detect(model, TaskData(31, x, y))
    off = TwoSampleDetector().detect(model, TaskData(31, x, y))
    assert on.decision == off.decision == "reuse" and on.entry == off.entry == entry
    assert on.class_permutation == [] and off.class_permutation == []
    # The identity reaches the optimum: the same combined p-value as without matching.
    assert on.p_value[on.candidate_entries.index(entry)] == off.p_value[off.candidate_entries.index(entry)]


@pytest.mark.parametrize("classes", [2, 3])
def test_detector_with_matching_declares_an_unseen_task_new(repo, classes):
    model, _ = repo
    x, y = sample(templates(40 + classes, classes), 60, seed=8)
    r = TwoSampleDetector(MATCH).detect(model, TaskData(32, x, y))
    assert r.decision == "new" and r.entry == -1 and r.class_permutation == []
    assert r.p_value and all(p < MATCH.alpha for p in r.p_value) and r.power is None


@pytest.mark.slow
def test_detector_with_matching_in_each_entrys_feature_space():
    # feature_space="entry": references in each entry's own encoder space, decoys only
    # from the candidate's own classes (a 2-class entry's only decoys that differ under
    # every matching repeat one of its classes twice).
    settings = TwoSampleSettings(match_classes=True, feature_space="entry")
    model, det = make_model(), TwoSampleDetector(settings)
    for task, name in enumerate("ABC"):
        _add(model, det, task, TEMPLATES[name])
    for name, entry, permutation in [("A", 0, [1, 0]), ("C", 2, [2, 0, 1]), ("B", 1, [0, 1])]:
        x, y = sample(TEMPLATES[name], 60, seed=7)
        r = det.detect(model, TaskData(40, x, _relabel(y, permutation)))
        assert r.decision == "reuse" and r.entry == entry and r.power >= settings.min_power
        expected = _inverse(permutation)
        assert r.class_permutation == ([] if expected == list(range(len(expected))) else expected)
    x, y = sample(TEMPLATES["A"], 60, seed=7)
    off = TwoSampleDetector(dataclasses.replace(settings, match_classes=False))
    assert off.detect(model, TaskData(41, x, 1 - y)).decision == "new"
    x, y = sample(templates(42, 2), 60, seed=8)
    assert det.detect(model, TaskData(42, x, y)).decision == "new"


def test_matching_off_is_the_detector_as_measured(repo):
    """``match_classes=False`` (the default) decides exactly as before the option
    existed: records computed with the code of the commit before it (decisions, entries,
    powers; p-values to 1e-4 relative: the 5-image case's covariance is ill-conditioned, and
    another CPU's BLAS kernel moved its p-value by 4e-6 relative)."""
    model, _ = repo
    det = TwoSampleDetector(TwoSampleSettings(n_decoys=8))
    golden = [
        ("reuse", 0, [1.0, 3.425671398897663e-125], 1.0),
        ("reuse", 2, [0.3120545265356947], 1.0),
        ("new", -1, [1.8938606854673206e-116, 1.2492012332865673e-122], None),
        ("reuse", 1, [2.483666398108501e-43, 0.7601127582287658], 1.0),
    ]
    cases = [(TEMPLATES["A"], 60, 7), (TEMPLATES["C"], 5, 8), (templates(41, 2), 30, 9), (TEMPLATES["B"], 3, 10)]
    for task, ((tmpl, per, seed), (decision, entry, pvalues, power)) in enumerate(zip(cases, golden), start=10):
        x, y = sample(tmpl, per, seed=seed)
        r = det.detect(model, TaskData(task, x, y))
        assert (r.decision, r.entry, r.power, r.class_permutation) == (decision, entry, power, [])
        assert r.p_value == pytest.approx(pvalues, rel=1e-4)


def _near_copies():
    """Three 2-class entries: templates a and two slightly shifted copies (told apart
    at full reference size, not with a few images)."""
    g = torch.Generator().manual_seed(1)
    a = torch.rand(2, 1, 8, 8, generator=g) * 0.6 + 0.2
    model, det = make_model(), TwoSampleDetector()
    for task, shift in enumerate((0.0, 0.05, -0.05)):
        _add(model, det, task, a + shift, per_class=100, seed=10 + task, noise=0.1)
    return model, a


@pytest.mark.parametrize("n", [3, 5, 12])
def test_matched_power_is_the_unmatched_power_of_the_chosen_pairing(n):
    """With ``match_classes`` the power check tests the chosen pairing as the unmatched
    rule tests the identity, so matching costs no power: on near copies of an entry
    (decoys close to it), a repeat whose classes come in another order gets exactly
    the power the unmatched rule has on the same images in the entry's order."""
    model, a = _near_copies()
    x, y = sample(a, [n, n + 1], seed=61, noise=0.1)
    off = TwoSampleDetector().detect(model, TaskData(60, x, y))
    on = TwoSampleDetector(MATCH).detect(model, TaskData(60, x, y))
    shuffled = TwoSampleDetector(MATCH).detect(model, TaskData(60, x, 1 - y))
    assert off.power is not None and on.power == off.power
    assert shuffled.power == off.power and shuffled.decision == off.decision
    if shuffled.decision == "reuse":
        assert shuffled.class_permutation == [1, 0] and shuffled.entry == off.entry
    refs = {e: TwoSampleDetector()._references(model, e) for e in model.entries}
    unmatched = TwoSampleDetector().decoy_power(model, 0, [n, n + 1], task=5, refs=refs)
    assert TwoSampleDetector(MATCH).decoy_power(model, 0, [n + 1, n], task=5, refs=refs, pairing=[1, 0]) == unmatched


def test_decoys_of_a_pairing_have_the_paired_class_sizes(repo, monkeypatch):
    """Entry class j is tested against decoys of the size of the new class paired with it."""
    model, _ = repo
    det = TwoSampleDetector(MATCH)
    refs = {e: det._references(model, e) for e in model.entries}
    seen = []
    real = det._pvalue
    monkeypatch.setattr(det, "_pvalue", lambda x, ref, g: (seen.append((len(x), len(ref))), real(x, ref, g))[1])
    det.decoy_power(model, 2, [7, 9, 11], task=3, refs=refs, pairing=[2, 0, 1])
    sizes = [n for n, m in seen if n in (7, 9, 11)]  # decoy samples (selection halves are 50 rows)
    assert sizes == [9, 11, 7] * MATCH.n_decoys  # entry classes 0, 1, 2 <- new classes 1, 2, 0
    for bad in ([0, 0, 1], [0, 1], [1, 2, 3]):
        with pytest.raises(ValueError, match="pairing must be a permutation"):
            det.decoy_power(model, 2, [7, 9, 11], task=3, refs=refs, pairing=bad)


@pytest.mark.slow
def test_matching_and_the_global_rng(repo):
    model, _ = repo
    x, y = sample(TEMPLATES["C"], 20, seed=44)
    state, np_state = torch.get_rng_state(), np.random.get_state()
    a = _strip_time(TwoSampleDetector(MATCH).detect(model, TaskData(50, x, _relabel(y, [2, 0, 1]))))
    assert torch.equal(state, torch.get_rng_state())
    assert np.array_equal(np_state[1], np.random.get_state()[1]) and np_state[2] == np.random.get_state()[2]
    with torch.random.fork_rng():
        torch.manual_seed(123)
        b = _strip_time(TwoSampleDetector(MATCH).detect(model, TaskData(50, x, _relabel(y, [2, 0, 1]))))
    assert a == b and a["class_permutation"] == [1, 2, 0]
