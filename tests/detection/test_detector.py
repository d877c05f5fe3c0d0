"""SimilarTaskDetector: scores against every entry of a repository, and the decision."""
import pytest
import torch

from avalanche_sdr.detection import (
    DECISION_RULES,
    SimilarTaskDetector,
    complexity_measure,
    distribution_consistency,
)
from avalanche_sdr.models import TaskData, build_sdr_model, small_cnn_backbone


@pytest.fixture
def repository():
    torch.manual_seed(0)
    model = build_sdr_model(
        small_cnn_backbone(in_channels=1, widths=(8, 16)), in_channels=1, image_size=8,
        latent_dim=4, vae_width=8,
    )
    for task in range(3):
        model.create_entry(task)
    with torch.no_grad():  # make the entries differ
        for entry in (1, 2):
            for p in model.encoder.entry_parameters(entry):
                p.add_(0.3 * torch.randn_like(p))
    model.assign_task(3, 1)
    return model


def test_scores_match_the_pure_functions(repository):
    x, y = torch.rand(30, 1, 8, 8), torch.arange(30) % 3
    detector = SimilarTaskDetector(batch_size=7)
    torch.manual_seed(5)
    p, s = detector.score(repository, x, y, 3)
    assert repository.encoder.active is None  # scoring leaves E0 active
    torch.manual_seed(5)
    log_lik, expected_s = [], []
    repository.eval()
    with torch.no_grad():
        for entry in repository.entries:
            feats = torch.cat([repository.features(x[i : i + 7], entry) for i in range(0, 30, 7)])
            elbos = torch.cat([repository.generators.elbo(x[i : i + 7], entry) for i in range(0, 30, 7)])
            log_lik.append(elbos.double())
            expected_s.append(complexity_measure(feats.double(), y, num_classes=3))
    assert torch.allclose(p, distribution_consistency(torch.stack(log_lik, 1)))
    assert torch.allclose(s, torch.tensor(expected_s, dtype=torch.float64))
    assert p.sum().item() == pytest.approx(1.0)


def test_detect_records_votes_and_decision(repository, monkeypatch):
    x, y = torch.rand(20, 1, 8, 8), torch.arange(20) % 2
    detector = SimilarTaskDetector()
    def fake_evidence(p, s):
        nan = [float("nan")] * 3
        return lambda *a, **k: dict(consistency=p, complexity=s, mean_elbo=nan, reference_elbo=nan,
                                    reference_elbo_std=nan, permuted_complexity=nan)

    monkeypatch.setattr(detector, "evidence", fake_evidence([0.1, 0.7, 0.2], [3.0, 1.0, 2.0]))
    record = detector.detect(repository, TaskData(4, x, y))
    assert (record.decision, record.reused_entry, record.entry) == ("reuse", 1, 1)
    assert record.candidate_entries == [0, 1, 2]
    assert record.candidate_tasks == [0, 1, 2]
    assert (record.vote_consistency, record.vote_complexity) == (1, 1)

    monkeypatch.setattr(detector, "evidence", fake_evidence([0.1, 0.7, 0.2], [0.5, 1.0, 2.0]))
    record = detector.detect(repository, TaskData(4, x, y))
    assert (record.decision, record.reused_entry, record.entry) == ("new", None, -1)
    assert (record.vote_consistency, record.vote_complexity) == (1, 0)


def test_task_prior_weights_entries_by_their_tasks(repository):
    detector = SimilarTaskDetector(prior="tasks")
    log_prior = detector._log_prior(repository, repository.entries)
    assert torch.allclose(log_prior.exp(), torch.tensor([0.25, 0.5, 0.25], dtype=torch.float64))
    # Restricted to candidates (class_count_filter), the prior renormalises over them.
    log_prior = detector._log_prior(repository, [0, 2])
    assert torch.allclose(log_prior.exp(), torch.tensor([0.5, 0.5], dtype=torch.float64))


def test_max_samples_limits_the_data_used(repository):
    x, y = torch.rand(40, 1, 8, 8), torch.arange(40) % 2
    torch.manual_seed(1)
    capped = SimilarTaskDetector(max_samples=10).score(repository, x, y, 2)
    torch.manual_seed(1)
    first = SimilarTaskDetector().score(repository, x[:10], y[:10], 2)
    assert torch.allclose(capped[0], first[0]) and torch.allclose(capped[1], first[1])


def test_unknown_options_are_refused():
    with pytest.raises(ValueError, match="unknown decision rule 'vote'"):
        SimilarTaskDetector(rule="vote")
    with pytest.raises(ValueError, match="prior must be"):
        SimilarTaskDetector(prior="flat")
    assert "agreement" in DECISION_RULES


@pytest.mark.parametrize(
    "images",
    [
        pytest.param(lambda: torch.rand(1, 1, 8, 8).repeat(30, 1, 1, 1), id="duplicated-images"),
        pytest.param(lambda: torch.zeros(30, 1, 8, 8), id="constant-images"),
        pytest.param(lambda: torch.ones(30, 1, 8, 8), id="saturated-images"),
    ],
)
@pytest.mark.parametrize("num_classes", [1, 3])
def test_degenerate_tasks_get_finite_scores(repository, images, num_classes):
    # Identical inputs give identical features e_i: H is singular (rank 1) and only the
    # jitter makes it invertible; the ELBOs of identical images are finite too.
    x, y = images(), torch.arange(30) % num_classes
    p, s = SimilarTaskDetector(elbo_samples=2).score(repository, x, y, num_classes)
    assert torch.isfinite(p).all() and p.sum().item() == pytest.approx(1.0)
    assert torch.isfinite(s).all() and (s > 0).all()
    record = SimilarTaskDetector().detect(repository, TaskData(9, x, y))
    assert record.decision in ("new", "reuse")
