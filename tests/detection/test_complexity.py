"""Tests for avalanche_sdr.detection.complexity (ReLU NTK Gram matrix and S)."""

import math

import numpy as np
import pytest
import scipy.linalg
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from avalanche_sdr.detection.complexity import (
    ComplexityResult,
    _factorize_with_jitter,
    complexity_measure,
    normalize_rows,
    relu_ntk_gram,
)


def reference_complexity(features: np.ndarray, labels: np.ndarray, num_classes: int, jitter: float) -> float:
    """Dense float64 S, built with numpy/scipy independently of the package code."""
    x = features.astype(np.float64)
    e = x / np.linalg.norm(x, axis=1, keepdims=True)
    cos = np.clip(e @ e.T, -1.0, 1.0)
    h = cos * (np.pi - np.arccos(cos)) / (2.0 * np.pi)
    h = h + jitter * np.mean(np.diag(h)) * np.eye(len(x))
    y = np.eye(num_classes)[labels]
    a = y.T @ scipy.linalg.cho_solve(scipy.linalg.cho_factor(h, lower=True), y)
    return float(np.sqrt(2.0 * np.linalg.norm(a.T @ a, "fro") ** 2 / len(x)))


def relu_features(n: int, d: int, seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.relu(torch.randn(n, d, generator=generator)) + 0.01


# --------------------------------------------------------------------------- kernel


@pytest.mark.parametrize("angle", [0.0, 0.4, math.pi / 3, math.pi / 2, 2.0, 2.8, math.pi])
def test_kernel_matches_monte_carlo_definition(angle):
    # H_ik = E_w[x^T x' 1{w^T x >= 0, w^T x' >= 0}], w ~ N(0, I), for unit x, x'.
    generator = torch.Generator().manual_seed(1234)
    d = 5
    basis, _ = torch.linalg.qr(torch.randn(d, d, dtype=torch.float64, generator=generator))
    x = basis[:, 0]
    x2 = math.cos(angle) * basis[:, 0] + math.sin(angle) * basis[:, 1]
    gram = relu_ntk_gram(torch.stack([x, x2]))

    w = torch.randn(200_000, d, dtype=torch.float64, generator=generator)
    samples = (x @ x2) * ((w @ x >= 0) & (w @ x2 >= 0)).to(torch.float64)
    estimate = samples.mean().item()
    std_error = samples.std().item() / math.sqrt(len(samples))
    assert abs(gram[0, 1].item() - estimate) <= 5 * std_error + 1e-12
    assert gram[0, 0].item() == pytest.approx(0.5) and gram[1, 1].item() == pytest.approx(0.5)


def test_gram_closed_form_values():
    # cos 0 -> 1/2, cos pi/2 -> 0, cos pi -> 0, cos pi/3 -> (1/2)(2pi/3)/(2pi) = 1/6.
    x = torch.tensor([[1.0, 0.0], [0.0, 2.0], [-3.0, 0.0], [0.5, 0.5 * math.sqrt(3.0)]], dtype=torch.float64)
    gram = relu_ntk_gram(x)
    assert gram.dtype == torch.float64 and gram.shape == (4, 4)
    assert torch.allclose(gram.diagonal(), torch.full((4,), 0.5, dtype=torch.float64))
    assert gram[0, 1].item() == pytest.approx(0.0, abs=1e-15)
    assert gram[0, 2].item() == pytest.approx(0.0, abs=1e-15)
    assert gram[0, 3].item() == pytest.approx(1.0 / 6.0, rel=1e-12)


def accurate_gram(x: torch.Tensor) -> torch.Tensor:
    """Dense H with the angle from chord lengths (accurate also for near-parallel rows)."""
    e = x.double() / x.double().norm(dim=1, keepdim=True)
    chord = torch.cdist(e, e, compute_mode="donot_use_mm_for_euclid_dist")
    angle = 2 * torch.asin((chord / 2).clamp(max=1))
    return torch.cos(angle) * (math.pi - angle) / (2 * math.pi)


@pytest.mark.parametrize("n, d, seed", [(37, 9, 3), (400, 8, 5)])
def test_gram_matches_dense_formula_and_is_symmetric(n, d, seed):
    # n = 400 spans several internal block rows; seed 5 has duplicated rows.
    x = relu_features(n, d, seed=seed) - 0.3
    expected = accurate_gram(x)
    gram = relu_ntk_gram(x)
    assert torch.equal(gram, gram.T)
    cos = normalize_rows(x) @ normalize_rows(x).T
    # Away from cos = +-1 the kernel is well conditioned: agree to rounding.
    well = cos.abs() < 0.999
    assert torch.allclose(gram[well], expected[well], rtol=0, atol=1e-13)
    # Near +-1, d arccos / d cos blows up: a 1e-16 error in cos moves H by up to ~1e-8.
    assert torch.allclose(gram, expected, rtol=0, atol=1e-8)


def test_duplicated_rows_get_exactly_the_diagonal_value():
    x = relu_features(20, 7, seed=14).double()
    x = torch.cat([x, x[:5], 3.7 * x[:5]])
    gram = relu_ntk_gram(x)
    for i in range(5):
        assert gram[i, 20 + i].item() == pytest.approx(0.5, abs=1e-15)
        assert gram[i, 25 + i].item() == pytest.approx(0.5, abs=1e-15)
        assert torch.allclose(gram[i], gram[20 + i], rtol=0, atol=1e-15)


def test_zero_row_normalises_to_zero_without_nan():
    x = torch.tensor([[3.0, 4.0], [0.0, 0.0], [1.0, 0.0]])
    unit = normalize_rows(x)
    assert torch.equal(unit[1], torch.zeros(2, dtype=torch.float64))
    assert torch.allclose(unit[0], torch.tensor([0.6, 0.8], dtype=torch.float64))
    gram = relu_ntk_gram(x)
    assert not torch.isnan(gram).any()
    assert torch.equal(gram[1], torch.zeros(3, dtype=torch.float64))
    assert torch.equal(gram[:, 1], torch.zeros(3, dtype=torch.float64))


def test_normalize_rows_handles_under_and_overflow_and_keeps_input():
    x = torch.tensor([[1e-200, 1e-200], [1e200, -1e200], [3.0, 4.0]], dtype=torch.float64)
    before = x.clone()
    unit = normalize_rows(x)
    expected = torch.tensor(
        [[1.0, 1.0], [1.0, -1.0], [0.6 * math.sqrt(2), 0.8 * math.sqrt(2)]], dtype=torch.float64
    ) / math.sqrt(2)
    assert torch.allclose(unit, expected, rtol=1e-15, atol=0)
    assert torch.equal(x, before)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_inputs_are_not_modified(dtype):
    x = relu_features(12, 5, seed=15).to(dtype)
    before = x.clone()
    normalize_rows(x)
    complexity_measure(x, torch.arange(12) % 3)
    assert torch.equal(x, before)


# ---------------------------------------------------------------------------- S


def test_matches_numpy_scipy_reference():
    features = relu_features(300, 32, seed=0)
    labels = torch.randint(0, 4, (300,), generator=torch.Generator().manual_seed(1))
    value = complexity_measure(features, labels)
    expected = reference_complexity(features.numpy(), labels.numpy(), 4, 1e-6)
    assert isinstance(value, float)
    assert value == pytest.approx(expected, rel=1e-4)


def test_matches_reference_with_empty_class_and_float64_input():
    features = relu_features(280, 16, seed=2).double()
    labels = torch.randint(0, 3, (280,), generator=torch.Generator().manual_seed(3))
    value = complexity_measure(features, labels, num_classes=5, jitter=1e-4)
    expected = reference_complexity(features.numpy(), labels.numpy(), 5, 1e-4)
    assert value == pytest.approx(expected, rel=1e-4)


def test_closed_form_for_orthogonal_features():
    # Orthogonal unit rows: H = I/2 (+ jitter), A = 2 diag(counts), S = sqrt(2 sum (2 n_k)^4 / n).
    features = torch.eye(6)
    labels = torch.tensor([0, 0, 0, 1, 1, 2])
    result = complexity_measure(features, labels, jitter=1e-12, return_details=True)
    counts = torch.tensor([3.0, 2.0, 1.0], dtype=torch.float64)
    expected = math.sqrt(2 * float(((2 * counts) ** 4).sum()) / 6)
    assert result.value == pytest.approx(expected, rel=1e-9)


def test_details_report_jitter_and_sizes():
    features = relu_features(50, 8, seed=4)
    labels = torch.arange(50) % 3
    result = complexity_measure(features, labels, jitter=1e-5, return_details=True)
    assert isinstance(result, ComplexityResult)
    assert result.jitter == 1e-5 and result.attempts == 1
    assert result.diagonal_shift == pytest.approx(1e-5 * 0.5)
    assert (result.n, result.num_classes) == (50, 3)
    assert result.value == complexity_measure(features, labels, jitter=1e-5)


def test_invariant_to_row_and_global_rescaling():
    features = relu_features(120, 16, seed=6).double()
    labels = torch.arange(120) % 4
    base = complexity_measure(features, labels)
    row_scale = torch.exp(torch.empty(120, 1, dtype=torch.float64).uniform_(-3, 3))
    assert complexity_measure(features * row_scale, labels) == pytest.approx(base, rel=1e-8)
    assert complexity_measure(features * 1e-3, labels) == pytest.approx(base, rel=1e-8)
    assert complexity_measure(features * 1e4, labels) == pytest.approx(base, rel=1e-8)


def test_finite_on_duplicated_inputs():
    features = relu_features(60, 10, seed=7)
    labels = torch.arange(60) % 3
    doubled = torch.cat([features, features])
    value = complexity_measure(doubled, torch.cat([labels, labels]))
    assert math.isfinite(value) and value > 0
    # Duplicates with conflicting labels are unexplainable: S grows but stays finite.
    conflicting = complexity_measure(doubled, torch.cat([labels, (labels + 1) % 3]))
    assert math.isfinite(conflicting) and conflicting > value


def test_finite_on_constant_features():
    features = torch.ones(40, 6) * 2.5
    two_classes = complexity_measure(features, torch.arange(40) % 2)
    assert math.isfinite(two_classes) and two_classes > 0
    one_class = complexity_measure(features, torch.zeros(40, dtype=torch.long))
    assert math.isfinite(one_class)
    # One class and identical inputs: H = 11^T/2, A = 1^T H^-1 1 ~ 2, S = A^2 sqrt(2/n).
    assert one_class == pytest.approx(4 * math.sqrt(2 / 40), rel=1e-4)


def test_single_class_task_is_finite():
    features = relu_features(30, 5, seed=8)
    result = complexity_measure(features, torch.zeros(30, dtype=torch.long), return_details=True)
    assert result.num_classes == 1 and math.isfinite(result.value) and result.value > 0


def test_zero_rows_give_finite_values():
    features = relu_features(30, 5, seed=9)
    features[4] = 0
    labels = torch.arange(30) % 2
    value = complexity_measure(features, labels)
    assert math.isfinite(value)
    # A zero row cannot be explained by the others: S is far above the clean value.
    assert value > complexity_measure(relu_features(30, 5, seed=9), labels)
    all_zero = complexity_measure(torch.zeros(8, 3), torch.arange(8) % 2, return_details=True)
    assert math.isfinite(all_zero.value) and all_zero.diagonal_shift == pytest.approx(0.5e-6)


def test_clustered_features_with_matching_labels_have_smaller_s():
    generator = torch.Generator().manual_seed(10)
    centres = 4.0 * torch.randn(3, 16, generator=generator)
    labels = torch.arange(90) % 3
    features = centres[labels] + 0.3 * torch.randn(90, 16, generator=generator)
    shuffled = labels[torch.randperm(90, generator=generator)]
    matched = complexity_measure(features, labels)
    random = complexity_measure(features, shuffled)
    assert matched < 0.5 * random


def test_jitter_escalates_until_factorisation_succeeds():
    # K = [[1, 1.001], [1.001, 1]] has eigenvalue -1e-3: lambda = 1e-6 .. 1e-3 fail.
    buffer = torch.empty(2, 2, dtype=torch.float64)

    def fill() -> float:
        buffer.copy_(torch.tensor([[1.0, 1.001], [1.001, 1.0]], dtype=torch.float64))
        return 2.0

    factor, rel, shift, attempts, scale = _factorize_with_jitter(fill, buffer, 1e-6, 8)
    assert attempts == 5 and rel == pytest.approx(1e-2) and shift == pytest.approx(1e-2)
    expected = torch.tensor([[1.01, 1.001], [1.001, 1.01]], dtype=torch.float64)
    assert torch.allclose(factor @ factor.T, expected, atol=1e-12)

    with pytest.raises(torch.linalg.LinAlgError, match=r"n=2.*1e-05"):
        _factorize_with_jitter(fill, buffer, 1e-6, 2)


def test_tiny_jitter_on_duplicates_escalates_or_succeeds():
    features = relu_features(40, 6, seed=11)
    labels = torch.arange(40) % 2
    result = complexity_measure(
        torch.cat([features, features]), torch.cat([labels, 1 - labels]),
        jitter=1e-20, max_tries=20, return_details=True,
    )
    assert math.isfinite(result.value) and result.jitter >= 1e-20
    assert result.jitter == pytest.approx(1e-20 * 10 ** (result.attempts - 1))


# ------------------------------------------------------------------------- errors


def test_rejects_nan_and_inf_naming_bad_rows():
    features = relu_features(10, 3, seed=12)
    features[2, 1] = float("nan")
    features[7, 0] = float("inf")
    with pytest.raises(ValueError, match="2 of 10 rows"):
        complexity_measure(features, torch.arange(10) % 2)
    with pytest.raises(ValueError, match="NaN or Inf"):
        relu_ntk_gram(features)


@pytest.mark.parametrize(
    "labels, num_classes, message",
    [
        (torch.tensor([0, 1, 2, 3]), 3, "0..2"),
        (torch.tensor([0, 1, -1, 1]), None, "non-negative"),
        (torch.tensor([0.0, 1.0, 1.0, 0.0]), None, "integer"),
        (torch.tensor([0, 1, 1]), None, r"shape \[4\]"),
        (torch.tensor([0, 1, 1, 0]), 0, "num_classes"),
    ],
)
def test_rejects_bad_labels(labels, num_classes, message):
    with pytest.raises(ValueError, match=message):
        complexity_measure(torch.rand(4, 3), labels, num_classes=num_classes)


def test_accepts_label_sequences():
    features = relu_features(6, 3, seed=13)
    assert complexity_measure(features, [0, 1, 0, 1, 2, 2]) == complexity_measure(
        features, torch.tensor([0, 1, 0, 1, 2, 2])
    )


@pytest.mark.parametrize("bad", [torch.rand(5), torch.rand(0, 3), torch.rand(3, 0), torch.rand(2, 3, 4)])
def test_rejects_bad_feature_shapes(bad):
    with pytest.raises(ValueError, match="features"):
        complexity_measure(bad, torch.zeros(len(bad), dtype=torch.long))


def test_rejects_bad_jitter_and_tries():
    features, labels = torch.rand(4, 3), torch.tensor([0, 1, 0, 1])
    for jitter in (0.0, -1e-6, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="jitter"):
            complexity_measure(features, labels, jitter=jitter)
    with pytest.raises(ValueError, match="max_tries"):
        complexity_measure(features, labels, max_tries=0)
    with pytest.raises(TypeError):
        complexity_measure(features.numpy(), labels)


# --------------------------------------------------------------------- properties


@st.composite
def random_features(draw, max_n=24, max_d=6):
    """Random Gaussian or ReLU feature matrices with zero, duplicated and rescaled rows."""
    n = draw(st.integers(1, max_n))
    d = draw(st.integers(1, max_d))
    generator = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
    x = torch.randn(n, d, dtype=torch.float64, generator=generator)
    if draw(st.booleans()):
        x = torch.relu(x)
    x = x * 10.0 ** draw(st.floats(-6, 6))
    if n > 1 and draw(st.booleans()):
        x[draw(st.integers(0, n - 1))] = 0
    if n > 2 and draw(st.booleans()):
        i, k = draw(st.integers(0, n - 1)), draw(st.integers(0, n - 1))
        x[i] = x[k] * draw(st.floats(0.01, 100))
    return x


@settings(max_examples=60, deadline=None)
@given(random_features())
def test_property_gram_symmetric_psd(features):
    gram = relu_ntk_gram(features)
    assert torch.equal(gram, gram.T)
    assert float(torch.linalg.eigvalsh(gram).min()) >= -1e-10
    assert float(gram.abs().max()) <= 0.5


@settings(max_examples=60, deadline=None)
@given(
    random_features(),
    st.integers(0, 2**31 - 1),
    st.floats(1e-3, 1e3),
    st.integers(1, 3),
)
def test_property_s_scale_invariant(features, seed, global_scale, num_classes):
    n = features.shape[0]
    generator = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, num_classes, (n,), generator=generator)
    row_scale = torch.exp(torch.empty(n, 1, dtype=torch.float64).uniform_(-5, 5, generator=generator))
    base = complexity_measure(features, labels, num_classes=num_classes)
    assert math.isfinite(base) and base >= 0
    scaled = complexity_measure(features * row_scale * global_scale, labels, num_classes=num_classes)
    assert scaled == pytest.approx(base, rel=1e-6)


# ------------------------------------------------------------ permuted labels


def test_permuted_label_complexity_true_value_equals_complexity_measure():
    from avalanche_sdr.detection import permuted_label_complexity

    torch.manual_seed(0)
    feats, labels = torch.randn(60, 12), torch.arange(60) % 3
    value, perms = permuted_label_complexity(feats, labels, 3, n_permutations=5)
    assert value == pytest.approx(complexity_measure(feats, labels, 3), rel=1e-12)
    assert len(perms) == 5 and all(v > 0 for v in perms)


def test_permuted_label_complexity_separates_learnable_from_random_labels():
    from avalanche_sdr.detection import permuted_label_complexity

    torch.manual_seed(0)
    labels = torch.arange(90) % 3
    # Features that encode the class (cluster centres far apart) + small noise.
    feats = torch.nn.functional.one_hot(labels, 3).double() * 5 + 0.3 * torch.randn(90, 3).double()
    feats = torch.cat([feats, torch.randn(90, 5).double() * 0.3], dim=1)
    value, perms = permuted_label_complexity(feats, labels, 3, n_permutations=8)
    assert value < 0.5 * min(perms)
    # Unrelated features: the true labels are no easier than permuted ones.
    noise = torch.randn(90, 8)
    value, perms = permuted_label_complexity(noise, labels, 3, n_permutations=8)
    assert 0.7 * (sum(perms) / 8) < value < 1.3 * (sum(perms) / 8)


def test_permuted_label_complexity_is_reproducible_and_leaves_global_rng_alone():
    from avalanche_sdr.detection import permuted_label_complexity

    feats, labels = torch.randn(40, 6), torch.arange(40) % 2
    torch.manual_seed(7)
    a = permuted_label_complexity(feats, labels, 2, 4, generator=torch.Generator().manual_seed(1))
    after_a = torch.rand(1)
    torch.manual_seed(7)
    b = permuted_label_complexity(feats, labels, 2, 4, generator=torch.Generator().manual_seed(1))
    assert a == b and torch.equal(torch.rand(1), after_a)
    assert permuted_label_complexity(feats, labels, 2, 4) == permuted_label_complexity(feats, labels, 2, 4)
    with pytest.raises(ValueError, match="n_permutations"):
        permuted_label_complexity(feats, labels, 2, 0)
