"""Tests for avalanche_sdr.models.vae: ConvVAE bounds and the generator banks."""
import math

import pytest
import torch

from avalanche_sdr.models.eft import EFTConv2d
from avalanche_sdr.models.vae import (
    LOG_SCALE_MAX,
    LOG_SCALE_MIN,
    ConvVAE,
    EFTVAEBank,
    IndependentVAEBank,
)


def _digits(n: int = 512) -> torch.Tensor:
    from sklearn.datasets import load_digits

    images = load_digits().images[:n] / 16.0
    return torch.tensor(images, dtype=torch.float32).unsqueeze(1)


def _fit(params, loss_fn, x: torch.Tensor, steps: int, lr: float = 3e-3, seed: int = 0) -> None:
    g = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam(params, lr=lr)
    for _ in range(steps):
        batch = x[torch.randint(0, x.shape[0], (64,), generator=g)]
        opt.zero_grad()
        loss_fn(batch).backward()
        opt.step()


@pytest.fixture(scope="module")
def trained_vae() -> ConvVAE:
    torch.manual_seed(0)
    vae = ConvVAE(1, 8, latent_dim=4, width=8)
    _fit(vae.parameters(), vae.loss, _digits(), steps=150)
    return vae.eval()


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# ------------------------------------------------------------------ ConvVAE
@pytest.mark.parametrize("image_size", [8, 16, 28, 32, 64])
@pytest.mark.parametrize("in_channels", [1, 3])
def test_shapes_round_trip(in_channels, image_size):
    torch.manual_seed(0)
    vae = ConvVAE(in_channels, image_size, latent_dim=6, width=4)
    x = torch.rand(2, in_channels, image_size, image_size)
    mu, logvar = vae.encode(x)
    assert mu.shape == logvar.shape == (2, 6)
    recon = vae(x)
    assert recon.shape == x.shape and (recon > 0).all() and (recon < 1).all()
    elbo = vae.elbo(x)
    assert elbo.shape == (2,) and elbo.dtype == torch.float32
    assert vae.sample(3).shape == (3, in_channels, image_size, image_size)
    assert vae.importance_log_likelihood(x, n_samples=3).shape == (2,)


def test_architecture_layer_counts():
    vae = ConvVAE(1, 28)
    convs = [m for m in vae.encoder if isinstance(m, torch.nn.Conv2d)]
    deconvs = [m for m in vae.decoder if isinstance(m, torch.nn.ConvTranspose2d)]
    assert len(convs) == 4 and len(deconvs) == 4
    assert isinstance(vae.encoder_head, torch.nn.Linear) and isinstance(vae.decoder_head, torch.nn.Linear)
    assert vae.encoder_head.out_features == 2 * 32
    assert vae.sizes == [28, 14, 7, 4, 2]


def test_rejects_wrong_input_shape_and_arguments():
    vae = ConvVAE(1, 8, latent_dim=2, width=4)
    with pytest.raises(ValueError, match="expected images"):
        vae.elbo(torch.rand(2, 3, 8, 8))
    with pytest.raises(ValueError, match="expected images"):
        vae.elbo(torch.rand(2, 1, 16, 16))
    with pytest.raises(ValueError, match="n_samples"):
        vae.elbo(torch.rand(2, 1, 8, 8), n_samples=0)
    with pytest.raises(ValueError, match="image_size"):
        ConvVAE(1, 0)


def test_elbo_is_sum_of_gaussian_likelihood_minus_kl():
    torch.manual_seed(0)
    vae = ConvVAE(1, 8, latent_dim=3, width=4)
    x = torch.rand(4, 1, 8, 8)
    mu, logvar = vae.encode(x)
    eps = torch.randn(mu.shape, generator=_gen(5))
    z = mu + torch.exp(0.5 * logvar) * eps
    mean = vae.decode(z)
    scale = vae.pixel_log_scale().exp()
    rec = torch.distributions.Normal(mean, scale.view(1, -1, 1, 1)).log_prob(x).flatten(1).sum(1)
    q = torch.distributions.Normal(mu, torch.exp(0.5 * logvar))
    kl = torch.distributions.kl_divergence(q, torch.distributions.Normal(0.0, 1.0)).sum(1)
    assert torch.allclose(vae.elbo(x, generator=_gen(5)), rec - kl, atol=1e-3)


def test_elbo_deterministic_given_rng(trained_vae):
    x = _digits(16)
    with torch.no_grad():
        assert torch.equal(trained_vae.elbo(x, 4, generator=_gen(1)), trained_vae.elbo(x, 4, generator=_gen(1)))
        torch.manual_seed(7)
        a = trained_vae.elbo(x, 4)
        torch.manual_seed(7)
        b = trained_vae.elbo(x, 4)
        c = trained_vae.elbo(x, 4)
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_training_improves_elbo(trained_vae):
    x = _digits(64)
    torch.manual_seed(0)
    fresh = ConvVAE(1, 8, latent_dim=4, width=8)
    with torch.no_grad():
        assert trained_vae.elbo(x, 8, _gen(0)).mean() > fresh.elbo(x, 8, _gen(0)).mean() + 50
        loss = float(trained_vae.loss(x, generator=_gen(2)))
        assert loss == pytest.approx(-float(trained_vae.elbo(x, generator=_gen(2)).mean()))


def test_elbo_below_importance_sampled_log_likelihood(trained_vae):
    x = _digits(128)
    with torch.no_grad():
        # Same draws for both: log-mean-exp >= mean (Jensen) up to the MC noise of the
        # KL term, which the ELBO computes exactly.
        elbo = trained_vae.elbo(x, n_samples=256, generator=_gen(3))
        iwae = trained_vae.importance_log_likelihood(x, n_samples=256, generator=_gen(3))
        assert (elbo <= iwae + 0.1).all(), (iwae - elbo).min()
        # Independent draws: on average the bound gap is clearly positive.
        iwae_other = trained_vae.importance_log_likelihood(x, n_samples=256, generator=_gen(4))
    assert (iwae_other - elbo).mean() > 0.2


def test_importance_log_likelihood_single_sample_is_unbiased_elbo_estimate(trained_vae):
    x = _digits(256)
    with torch.no_grad():
        one = trained_vae.importance_log_likelihood(x, n_samples=1, generator=_gen(0))
        elbo = trained_vae.elbo(x, n_samples=1, generator=_gen(0))
    # same z; differs only by the sampled vs exact KL, which agree on average
    assert abs(float((one - elbo).mean())) < 0.5


@pytest.mark.parametrize("fill", ["zeros", "ones", "random"])
def test_elbo_finite_on_extreme_inputs(trained_vae, fill):
    x = {"zeros": torch.zeros(4, 1, 8, 8), "ones": torch.ones(4, 1, 8, 8), "random": torch.rand(4, 1, 8, 8)}[fill]
    with torch.no_grad():
        assert torch.isfinite(trained_vae.elbo(x, n_samples=4)).all()
        assert torch.isfinite(trained_vae.importance_log_likelihood(x, n_samples=8)).all()


def test_log_scale_clamped():
    vae = ConvVAE(3, 8, latent_dim=2, width=4)
    s = vae.pixel_log_scale()
    assert s.shape == (3,) and ((s > LOG_SCALE_MIN) & (s < LOG_SCALE_MAX)).all()
    with torch.no_grad():
        vae.log_scale.raw.copy_(torch.tensor([-1e4, 0.0, 1e4]))
        s = vae.pixel_log_scale()
    assert float(s[0]) == pytest.approx(LOG_SCALE_MIN) and float(s[2]) == pytest.approx(LOG_SCALE_MAX)
    assert torch.isfinite(vae.elbo(torch.rand(2, 3, 8, 8))).all()
    # an upper bound on the density: every pixel contributes at most -LOG_SCALE_MIN - log(2 pi)/2 nats
    assert vae.elbo(torch.rand(2, 3, 8, 8)).max() < 3 * 64 * (-LOG_SCALE_MIN - 0.5 * math.log(2 * math.pi))


# ------------------------------------------------------------------ banks
def _train_entry(bank, key, x, steps=20):
    bank.train()
    _fit(bank.entry_parameters(key), lambda b: bank.loss(b, key), x, steps=steps, lr=1e-2, seed=key)
    bank.eval()


def _elbo(bank, key, x):
    with torch.no_grad():
        return bank.elbo(x, key, 2, _gen(11))


def test_independent_bank_entries():
    torch.manual_seed(0)
    bank = IndependentVAEBank(1, 8, latent_dim=4, width=8)
    bank.add_entry(0)
    bank.add_entry(1)
    assert bank.entries == [0, 1]
    n = sum(p.numel() for p in ConvVAE(1, 8, latent_dim=4, width=8).parameters())
    assert bank.entry_parameter_count(0) == n
    assert not {id(p) for p in bank.entry_parameters(0)} & {id(p) for p in bank.entry_parameters(1)}
    with pytest.raises(ValueError, match="already exists"):
        bank.add_entry(1)
    with pytest.raises(KeyError):
        bank.elbo(torch.rand(2, 1, 8, 8), 5)
    x = _digits(128)
    before0, before1 = _elbo(bank, 0, x), _elbo(bank, 1, x)
    _train_entry(bank, 1, x)
    assert torch.equal(_elbo(bank, 0, x), before0)
    assert _elbo(bank, 1, x).mean() > before1.mean()
    bank.add_entry(2, init_from=1)
    assert torch.equal(_elbo(bank, 2, x), _elbo(bank, 1, x))
    bank.set_active(2)
    with torch.no_grad():
        assert bank(x[:4]).shape == (4,)
    assert bank.entries == [0, 1, 2] and bank.active == 2


@pytest.fixture()
def eft_bank():
    torch.manual_seed(0)
    base = ConvVAE(1, 8, latent_dim=4, width=8)
    _fit(base.parameters(), base.loss, _digits(), steps=40)
    return EFTVAEBank(base, a=4, b=8)


def test_eft_bank_wraps_every_conv_and_freezes_base(eft_bank):
    wrapped = [m for m in eft_bank.base.modules() if isinstance(m, EFTConv2d)]
    assert len(wrapped) == 8  # 4 conv + 4 transposed conv
    assert not any(p.requires_grad for p in eft_bank.parameters())
    eft_bank.add_entry(0)
    assert all(p.requires_grad for p in eft_bank.entry_parameters(0))
    base_ids = {id(p) for p in eft_bank.parameters()} - {id(p) for p in eft_bank.entry_parameters(0)}
    assert all(not p.requires_grad for p in eft_bank.parameters() if id(p) in base_ids)


def test_eft_bank_fresh_entry_equals_base(eft_bank):
    eft_bank.add_entry(0)
    x = _digits(32)
    eft_bank.eval()
    assert torch.allclose(_elbo(eft_bank, 0, x), _elbo(eft_bank, None, x), atol=1e-4)
    with torch.no_grad():
        iw = eft_bank.importance_log_likelihood(x, 0, 4, _gen(0))
        assert torch.allclose(iw, eft_bank.importance_log_likelihood(x, None, 4, _gen(0)), atol=1e-4)
    assert eft_bank.active is None  # elbo(x, key) restores the routing


def test_eft_bank_entry_much_smaller_than_independent_entry():
    for in_channels, size in [(1, 8), (3, 32)]:
        independent = IndependentVAEBank(in_channels, size)
        independent.add_entry(0)
        eft = EFTVAEBank(ConvVAE(in_channels, size))
        eft.add_entry(0)
        assert eft.entry_parameter_count(0) < 0.4 * independent.entry_parameter_count(0)


def test_eft_bank_training_one_entry_leaves_others_unchanged(eft_bank):
    eft_bank.add_entry(0)
    eft_bank.add_entry(1)
    x = _digits(128)
    eft_bank.eval()
    before = {k: _elbo(eft_bank, k, x) for k in (None, 0, 1)}
    _train_entry(eft_bank, 1, x)
    assert torch.equal(_elbo(eft_bank, None, x), before[None])
    assert torch.equal(_elbo(eft_bank, 0, x), before[0])
    assert _elbo(eft_bank, 1, x).mean() > before[1].mean()
    eft_bank.add_entry(2, init_from=1)
    assert torch.equal(_elbo(eft_bank, 2, x), _elbo(eft_bank, 1, x))
    assert eft_bank.entries == [0, 1, 2]
    with pytest.raises(KeyError):
        eft_bank.set_active(3)


def test_eft_bank_state_dict_round_trip(eft_bank):
    eft_bank.add_entry(0)
    with torch.no_grad():
        for p in eft_bank.entry_parameters(0):
            p.add_(0.01)
    torch.manual_seed(0)
    other = EFTVAEBank(ConvVAE(1, 8, latent_dim=4, width=8), a=4, b=8)
    other.add_entry(0)
    other.load_state_dict(eft_bank.state_dict())
    x = _digits(8)
    assert torch.equal(_elbo(other, 0, x), _elbo(eft_bank, 0, x))


def test_eft_bank_rejects_wrapped_or_foreign_base(eft_bank):
    with pytest.raises(ValueError, match="already wrapped"):
        EFTVAEBank(eft_bank.base)
    with pytest.raises(TypeError, match="ConvVAE"):
        EFTVAEBank(torch.nn.Linear(2, 2))
