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


class _Unread:
    """A warm-start experience that fails the test if its data is read."""

    task_labels = [0]

    @property
    def dataset(self):
        raise AssertionError("the experience's data was read before the arguments were checked")


@pytest.mark.parametrize("pretrain", ["backbone", "vae"])
@pytest.mark.parametrize("kwargs, match", [
    (dict(epochs=-1), r"epochs must be an int >= 0 \(0: no pretraining"),
    (dict(epochs=2.0), r"epochs must be an int >= 0"),
    (dict(epochs=1, lr=0), r"lr must be a positive number"),
    (dict(epochs=1, lr=-1e-3), r"lr must be a positive number"),
    (dict(epochs=1, lr=float("nan")), r"lr must be a positive number"),
    (dict(epochs=1, batch_size=0), r"batch_size must be a positive int"),
    (dict(epochs=1, batch_size=-32), r"batch_size must be a positive int"),
    (dict(epochs=1, device="tpu9"), r"device must be"),
])
def test_a_budget_that_cannot_act_is_refused_before_any_data_is_read(pretrain, kwargs, match):
    torch.manual_seed(0)
    module = small_cnn_backbone(in_channels=1, widths=(8, 16)) if pretrain == "backbone" else ConvVAE(1, 8, 4, 8)
    before = {k: v.clone() for k, v in module.state_dict().items()}
    run = pretrain_backbone if pretrain == "backbone" else pretrain_vae
    with pytest.raises(ValueError, match=match):
        run(module, [_Unread()], verbose=False, **kwargs)
    assert all(torch.equal(v, before[k]) for k, v in module.state_dict().items())
    assert all(p.requires_grad for p in module.parameters())  # not even frozen


def test_zero_epochs_only_freezes_the_backbone(prototype_stream):
    torch.manual_seed(0)
    backbone = small_cnn_backbone(in_channels=1, widths=(8, 16))
    before = {k: v.clone() for k, v in backbone.state_dict().items()}
    pretrain_backbone(backbone, [prototype_stream.train_stream[0]], epochs=0, verbose=False)
    assert all(torch.equal(v, before[k]) for k, v in backbone.state_dict().items())
    assert not backbone.training and not any(p.requires_grad for p in backbone.parameters())


def test_a_backbone_without_feature_dim_is_refused_before_any_data_is_read():
    with pytest.raises(TypeError, match="feature_dim"):
        pretrain_backbone(torch.nn.Conv2d(1, 4, 3), [_Unread()], epochs=1, verbose=False)
