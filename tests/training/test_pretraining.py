"""Offline pretraining of E0 and the base VAE on warm-start experiences only."""
import pytest
import torch

from avalanche_sdr.models import ConvVAE, small_cnn_backbone
from avalanche_sdr.training import pretrain_backbone, pretrain_vae


def test_backbone_learns_the_warm_start_tasks_and_ends_frozen(prototype_stream):
    torch.manual_seed(0)
    backbone = small_cnn_backbone(in_channels=1, widths=(8, 16))
    before = [p.clone() for p in backbone.parameters()]
    warm = [prototype_stream.train_stream[i] for i in range(3)]
    pretrain_backbone(backbone, warm, epochs=2, lr=1e-2, batch_size=16, verbose=False)
    assert any(not torch.equal(p, q) for p, q in zip(backbone.parameters(), before))
    assert not backbone.training
    assert not any(p.requires_grad for p in backbone.parameters())


def test_vae_pretraining_raises_the_elbo_and_ends_frozen(prototype_stream):
    torch.manual_seed(0)
    vae = ConvVAE(1, 8, latent_dim=4, width=8)
    warm = [prototype_stream.train_stream[i] for i in range(3)]
    x = torch.cat([torch.stack([warm[0].dataset[i][0] for i in range(20)])])
    torch.manual_seed(1)
    before = vae.elbo(x).mean().item()
    pretrain_vae(vae, warm, epochs=3, lr=5e-3, batch_size=16, verbose=False)
    torch.manual_seed(1)
    after = vae.elbo(x).mean().item()
    assert after > before
    assert not any(p.requires_grad for p in vae.parameters())


def test_pretraining_needs_experiences():
    with pytest.raises(ValueError, match="at least one warm-start experience"):
        pretrain_backbone(small_cnn_backbone(), [], epochs=1)
