"""Tests for avalanche_sdr.detection.consistency (paper eq. 5)."""

import math

import pytest
import torch

from avalanche_sdr.detection.consistency import distribution_consistency


def naive_consistency(log_likelihoods, log_prior=None):
    """Eq. 5 literally: ratios of exp'd likelihoods (only safe for small values)."""
    n, c = log_likelihoods.shape
    prior = [1.0 / c] * c if log_prior is None else [math.exp(v) for v in log_prior.tolist()]
    rows = log_likelihoods.tolist()
    out = [0.0] * c
    for row in rows:
        weighted = [prior[j] * math.exp(row[j]) for j in range(c)]
        total = sum(weighted)
        for j in range(c):
            out[j] += weighted[j] / total / n
    return torch.tensor(out, dtype=torch.float64)


def test_matches_naive_computation_on_small_values():
    generator = torch.Generator().manual_seed(0)
    ll = torch.randn(25, 4, generator=generator) * 3
    log_prior = torch.log(torch.tensor([0.1, 0.2, 0.3, 0.4]))
    assert torch.allclose(distribution_consistency(ll), naive_consistency(ll), atol=1e-12)
    assert torch.allclose(
        distribution_consistency(ll, log_prior), naive_consistency(ll, log_prior), atol=1e-6
    )


def test_sums_to_one_and_is_float64():
    generator = torch.Generator().manual_seed(1)
    p = distribution_consistency(torch.randn(50, 7, generator=generator) * 100)
    assert p.dtype == torch.float64 and p.shape == (7,)
    assert float(p.sum()) == pytest.approx(1.0, abs=1e-12)
    assert bool((p >= 0).all() and (p <= 1).all())


def test_uniform_when_all_likelihoods_equal():
    p = distribution_consistency(torch.full((10, 5), -1234.5))
    assert torch.allclose(p, torch.full((5,), 0.2, dtype=torch.float64), atol=1e-15)


def test_extreme_elbos_are_stable():
    # ELBOs of about -1e5 nats: exp() underflows, the log-sum-exp form does not.
    ll = torch.tensor([[-1.0e5, -1.0e5 - 2.0, -1.0e5 - 5000.0]] * 3, dtype=torch.float64)
    p = distribution_consistency(ll)
    expected = torch.softmax(torch.tensor([0.0, -2.0, -5000.0], dtype=torch.float64), 0)
    assert torch.allclose(p, expected, atol=1e-15)
    assert not torch.isnan(p).any()
    # float32 ELBOs (as a VAE returns them) of -1e5 work too.
    p32 = distribution_consistency(torch.tensor([[-1.0e5, -1.1e5], [-2.0e5, -1.9e5]]))
    assert torch.allclose(p32, torch.tensor([0.5, 0.5], dtype=torch.float64), atol=1e-12)


def test_each_row_counts_equally():
    # Row 0 prefers candidate 0 totally, row 1 candidate 1 totally: p = (1/2, 1/2).
    ll = torch.tensor([[0.0, -1e4], [-1e4, 0.0]])
    assert torch.allclose(distribution_consistency(ll), torch.tensor([0.5, 0.5], dtype=torch.float64))


def test_prior_shifts_the_posterior_and_needs_no_normalisation():
    ll = torch.zeros(4, 2)
    p = distribution_consistency(ll, torch.log(torch.tensor([3.0, 1.0])))
    assert torch.allclose(p, torch.tensor([0.75, 0.25], dtype=torch.float64))
    q = distribution_consistency(ll, torch.log(torch.tensor([0.75, 0.25])))
    assert torch.allclose(p, q)


def test_negative_infinity_is_zero_likelihood():
    ll = torch.tensor([[float("-inf"), 0.0], [0.0, 0.0]])
    p = distribution_consistency(ll)
    assert torch.allclose(p, torch.tensor([0.25, 0.75], dtype=torch.float64))
    zero_prior = distribution_consistency(torch.zeros(3, 2), torch.tensor([0.0, float("-inf")]))
    assert torch.allclose(zero_prior, torch.tensor([1.0, 0.0], dtype=torch.float64))


def test_single_candidate_gets_probability_one():
    p = distribution_consistency(torch.randn(6, 1) * 1000)
    assert torch.equal(p, torch.ones(1, dtype=torch.float64))


@pytest.mark.parametrize(
    "ll, message",
    [
        (torch.tensor([[0.0, float("nan")]]), "1 NaN"),
        (torch.tensor([[0.0, float("inf")]]), r"\+inf"),
        (torch.tensor([[float("-inf"), float("-inf")], [0.0, 1.0]]), "1 of 2 inputs"),
        (torch.zeros(0, 3), "non-empty"),
        (torch.zeros(3, 0), "non-empty"),
        (torch.zeros(3), r"\[n, C\]"),
    ],
)
def test_rejects_bad_log_likelihoods(ll, message):
    with pytest.raises(ValueError, match=message):
        distribution_consistency(ll)


def test_rejects_bad_priors():
    ll = torch.zeros(2, 3)
    with pytest.raises(ValueError, match=r"shape \[3\]"):
        distribution_consistency(ll, torch.zeros(2))
    with pytest.raises(ValueError, match="NaN"):
        distribution_consistency(ll, torch.tensor([0.0, float("nan"), 0.0]))
    with pytest.raises(ValueError, match="every candidate"):
        distribution_consistency(ll, torch.full((3,), float("-inf")))
    with pytest.raises(ValueError, match="1 of 2 inputs"):
        distribution_consistency(
            torch.tensor([[float("-inf"), 0.0], [0.0, 0.0]]), torch.tensor([0.0, float("-inf")])
        )
    with pytest.raises(TypeError):
        distribution_consistency(torch.zeros(2, 3, dtype=torch.long))
