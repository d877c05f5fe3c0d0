"""Fitting one generator entry: only that entry moves, early stopping keeps the best."""
import torch

from avalanche_sdr.models import IndependentVAEBank
from avalanche_sdr.training.generator_fitting import fit_generator


def _bank():
    torch.manual_seed(0)
    bank = IndependentVAEBank(1, 8, latent_dim=4, width=8)
    bank.add_entry(0)
    bank.add_entry(1)
    return bank


def test_fit_improves_the_entry_and_leaves_others_untouched():
    bank = _bank()
    x = (torch.rand(64, 1, 8, 8) > 0.7).float()
    other = [p.clone() for p in bank.entry_parameters(1)]
    torch.manual_seed(1)
    before = bank.elbo(x, 0).mean().item()
    report = fit_generator(bank, 0, x, epochs=10, lr=5e-3, batch_size=16, patience=100)
    torch.manual_seed(1)
    after = bank.elbo(x, 0).mean().item()
    assert after > before + 5
    assert report.epochs_run == 10
    assert len(report.holdout_elbo) == 10
    assert report.best_holdout_elbo == max(report.holdout_elbo)
    for p, q in zip(bank.entry_parameters(1), other):
        assert torch.equal(p, q)
    assert not any(p.requires_grad for p in bank.entry_parameters(0))


def test_early_stopping_restores_the_best_epoch():
    bank = _bank()
    x = torch.rand(40, 1, 8, 8)
    # A learning rate this large makes the held-out ELBO worsen after a few epochs.
    report = fit_generator(
        bank, 0, x, epochs=30, lr=0.5, batch_size=8, patience=2, generator=torch.Generator().manual_seed(0)
    )
    assert report.epochs_run < 30
    assert report.best_epoch == 1 + report.holdout_elbo.index(max(report.holdout_elbo))
    assert report.epochs_run - report.best_epoch == 2
    # The kept state scores like the best epoch on the same held-out inputs.
    hold = x[torch.randperm(40, generator=torch.Generator().manual_seed(0))[:4]]
    with torch.no_grad():
        kept = bank.elbo(hold, 0, n_samples=256).mean().item()
    last = report.holdout_elbo[-1]
    assert abs(kept - report.best_holdout_elbo) < abs(kept - last)


def test_tiny_tasks_train_without_holdout():
    bank = _bank()
    report = fit_generator(bank, 0, torch.rand(5, 1, 8, 8), epochs=3, lr=1e-3, batch_size=2, patience=1)
    assert report.epochs_run == 3
    assert report.holdout_elbo == []
    assert report.best_epoch == 3


def test_fit_stores_the_holdout_reference_elbo_without_touching_the_global_rng():
    bank = _bank()
    x = (torch.rand(80, 1, 8, 8) > 0.7).float()
    assert all(v != v for v in bank.reference_elbo(0))  # NaN before any fit
    report = fit_generator(bank, 0, x, epochs=3, lr=5e-3, batch_size=16, patience=100,
                           generator=torch.Generator().manual_seed(3))
    mean, std = bank.reference_elbo(0)
    assert (mean, std) == report.reference_elbo
    assert std > 0 and abs(mean - report.best_holdout_elbo) < 3 * std
    assert all(v != v for v in bank.reference_elbo(1))  # the other entry is untouched
    # The reference survives a state_dict round trip into a bank with the same entries.
    clone = _bank()
    clone.load_state_dict(bank.state_dict())
    assert clone.reference_elbo(0) == (mean, std)
    # The reference's Monte-Carlo draws use a private RNG: the global stream is untouched.
    other = _bank()
    torch.manual_seed(5)
    fit_generator(bank, 1, x, epochs=1, lr=5e-3, batch_size=16, patience=100,
                  generator=torch.Generator().manual_seed(3), reference_samples=1)
    after_with = torch.rand(1)
    torch.manual_seed(5)
    fit_generator(other, 1, x, epochs=1, lr=5e-3, batch_size=16, patience=100,
                  generator=torch.Generator().manual_seed(3), reference_samples=64)
    assert torch.equal(torch.rand(1), after_with)
