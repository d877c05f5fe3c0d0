"""Tests for avalanche_sdr.models.eft: adapters, per-entry BatchNorm, EFTEncoder."""
import pytest
import torch
from torch import nn

from avalanche_sdr.models.backbones import resnet18_backbone, small_cnn_backbone
from avalanche_sdr.models.eft import EFTAdapter, EFTConv2d, EFTEncoder, TaskBatchNorm2d


def _randomize_bn_stats(module: nn.Module) -> None:
    """Non-trivial running statistics, so that stat drift would be visible."""
    g = torch.Generator().manual_seed(123)
    for m in module.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.copy_(torch.randn(m.num_features, generator=g) * 0.1)
            m.running_var.copy_(torch.rand(m.num_features, generator=g) + 0.5)


def _small_encoder(**kwargs) -> EFTEncoder:
    torch.manual_seed(0)
    backbone = small_cnn_backbone(in_channels=1, widths=(8, 16))
    _randomize_bn_stats(backbone)
    return EFTEncoder(backbone, a=4, b=8, **kwargs)


@pytest.fixture(scope="module")
def resnet18_encoder() -> EFTEncoder:
    torch.manual_seed(0)
    backbone = resnet18_backbone()
    _randomize_bn_stats(backbone)
    return EFTEncoder(backbone, a=8, b=16, gamma=1.0)


# ------------------------------------------------------------------ EFTAdapter
def test_adapter_identity_init_is_identity():
    torch.manual_seed(0)
    adapter = EFTAdapter(32, a=8, b=16)
    f = torch.randn(3, 32, 5, 7)
    assert torch.allclose(adapter(f), f, atol=1e-6)


def test_adapter_parameter_count_and_groups():
    adapter = EFTAdapter(64, a=8, b=16)
    assert adapter.spatial.groups == 64 // 8 and adapter.spatial.kernel_size == (3, 3)
    assert adapter.pointwise.groups == 64 // 16 and adapter.pointwise.kernel_size == (1, 1)
    assert adapter.spatial.bias is not None and adapter.pointwise.bias is not None
    assert sum(p.numel() for p in adapter.parameters()) == 64 * (9 * 8 + 16 + 2)


def test_adapter_group_size_capped_at_channels():
    adapter = EFTAdapter(4, a=8, b=16)  # a' = b' = 4: one group each
    assert (adapter.a, adapter.b) == (4, 4)
    assert sum(p.numel() for p in adapter.parameters()) == 4 * (9 * 4 + 4 + 2)


@pytest.mark.parametrize("channels,a,b", [(12, 8, 4), (24, 8, 16), (10, 3, 5)])
def test_adapter_rejects_indivisible_channels(channels, a, b):
    with pytest.raises(ValueError, match="does not divide"):
        EFTAdapter(channels, a=a, b=b)


def test_adapter_rejects_bad_init():
    with pytest.raises(ValueError, match="init"):
        EFTAdapter(8, init="zeros")


def test_adapter_gamma_zero_drops_pointwise_branch():
    adapter = EFTAdapter(16, a=8, b=16, gamma=0.0)
    assert adapter.pointwise is None
    assert sum(p.numel() for p in adapter.parameters()) == 16 * (9 * 8 + 1)
    assert EFTEncoder.eft_parameter_count([16], 8, 16, gamma=0.0) == 16 * (9 * 8 + 1)


def test_adapter_random_init_and_gamma_scaling():
    torch.manual_seed(0)
    f = torch.randn(2, 16, 4, 4)
    adapter = EFTAdapter(16, a=8, b=8, gamma=2.0, init="random")
    assert not torch.allclose(adapter(f), f)
    expected = adapter.spatial(f) + 2.0 * adapter.pointwise(f)
    assert torch.allclose(adapter(f), expected)


# ------------------------------------------------------------------ EFTConv2d / TaskBatchNorm2d
def test_eftconv_wraps_conv_transpose_and_freezes_it():
    torch.manual_seed(0)
    conv = nn.ConvTranspose2d(8, 16, 3, stride=2, padding=1, output_padding=1)
    layer = EFTConv2d(conv, a=8, b=16)
    assert not any(p.requires_grad for p in layer.conv.parameters())
    x = torch.randn(2, 8, 4, 4)
    layer.add_adapter(0)
    assert list(layer.adapters.keys()) == ["0"]
    with torch.no_grad():
        plain = layer(x)
        layer.set_active(0)
        assert torch.allclose(layer(x), plain, atol=1e-6)
        layer.adapters["0"].spatial.bias.fill_(1.0)
        assert torch.allclose(layer(x), plain + 1.0, atol=1e-5)
    assert plain.shape == (2, 16, 8, 8)


def test_eftconv_rejects_other_modules_and_bad_channels():
    with pytest.raises(TypeError, match="Conv2d"):
        EFTConv2d(nn.Linear(3, 4))
    with pytest.raises(ValueError, match="does not divide"):
        EFTConv2d(nn.Conv2d(3, 12, 3), a=8)


def test_task_batchnorm_copy_starts_equal_and_base_never_updates():
    torch.manual_seed(0)
    bn = nn.BatchNorm2d(4)
    _randomize_bn_stats(bn)
    layer = TaskBatchNorm2d(bn)
    before = {k: v.clone() for k, v in bn.state_dict().items()}
    layer.add_copy(0)
    copy = layer.copies["0"]
    assert torch.equal(copy.running_mean, bn.running_mean) and torch.equal(copy.weight, bn.weight)
    assert copy.weight.requires_grad and not bn.weight.requires_grad
    x = torch.randn(8, 4, 3, 3) * 3 + 1
    layer.train()
    layer.base.train()  # even forced into train mode, the base must not move
    layer(x)
    layer.set_active(0)
    layer(x)
    for k, v in bn.state_dict().items():
        assert torch.equal(v, before[k]), k
    assert not torch.equal(copy.running_mean, before["running_mean"])


# ------------------------------------------------------------------ EFTEncoder on ResNet18
def test_resnet18_wraps_every_conv_and_bn(resnet18_encoder):
    enc = resnet18_encoder
    assert len(enc.convs) == 20 and len(enc.norms) == 20
    assert sum(enc.out_channels) == 4800
    assert not any(isinstance(m, (nn.Conv2d, nn.BatchNorm2d)) and not _inside_wrapper(enc, m) for m in enc.modules())
    assert all(not p.requires_grad for p in enc.parameters())
    assert enc.feature_dim == 512


def _inside_wrapper(enc: EFTEncoder, module: nn.Module) -> bool:
    return any(module is w.conv for w in enc.convs) or any(module is w.base for w in enc.norms) or any(
        module is m for w in enc.convs for m in w.adapters.modules()
    ) or any(module is m for w in enc.norms for m in w.copies.modules())


def test_resnet18_entry_parameter_counts(resnet18_encoder):
    enc = resnet18_encoder
    if 100 not in enc.entries:
        enc.add_entry(100)
    # 20 convs, sum K = 4800: K * (9a + b + 2) = 4800 * 90
    assert enc.entry_parameter_count(100, include_batchnorm=False) == 432_000
    assert enc.entry_parameter_count(100) == 432_000 + 9_600
    assert EFTEncoder.eft_parameter_count(enc.out_channels, 8, 16) == 432_000
    assert all(p.requires_grad for p in enc.entry_parameters(100))


def test_eft_parameter_count_formula_matches_modules():
    for widths, a, b in [((8, 16), 4, 8), ((16, 32, 32), 8, 16), ((4, 64), 8, 16)]:
        enc = EFTEncoder(small_cnn_backbone(in_channels=3, widths=widths), a=a, b=b)
        enc.add_entry(0)
        assert enc.entry_parameter_count(0, include_batchnorm=False) == EFTEncoder.eft_parameter_count(
            enc.out_channels, a, b
        )
        assert enc.entry_parameter_count(0) - enc.entry_parameter_count(0, False) == 2 * sum(widths)


def test_resnet18_identity_init_matches_e0(resnet18_encoder):
    enc = resnet18_encoder
    if 101 not in enc.entries:
        enc.add_entry(101)
    x = torch.rand(2, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    enc.eval()
    with torch.no_grad():
        enc.set_active(None)
        plain = enc(x)
        enc.set_active(101)
        adapted = enc(x)
    enc.set_active(None)
    assert plain.shape == (2, 512)
    assert torch.allclose(adapted, plain, atol=1e-5)


def test_resnet18_frozen_bn_buffers_never_change(resnet18_encoder):
    enc = resnet18_encoder
    if 102 not in enc.entries:
        enc.add_entry(102)
    base_buffers = {id(n): {k: v.clone() for k, v in n.base.state_dict().items()} for n in enc.norms}
    copy_before = enc.norms[0].copies["102"].running_mean.clone()
    x = torch.rand(4, 3, 32, 32, generator=torch.Generator().manual_seed(2))
    enc.train()
    assert all(not n.base.training for n in enc.norms)
    with torch.no_grad():
        enc.set_active(102)
        enc(x)
        enc.set_active(None)
        enc(x)
    enc.eval()
    for n in enc.norms:
        for k, v in n.base.state_dict().items():
            assert torch.equal(v, base_buffers[id(n)][k]), k
    assert not torch.equal(enc.norms[0].copies["102"].running_mean, copy_before)


def test_resnet18_gradients_reach_active_entry_only(resnet18_encoder):
    enc = resnet18_encoder
    for key in (103, 104):
        if key not in enc.entries:
            enc.add_entry(key)
    entry_ids = {id(p) for k in enc.entries for p in enc.entry_parameters(k)}
    x = torch.rand(2, 3, 32, 32, generator=torch.Generator().manual_seed(3))
    enc.train()
    enc.set_active(104)
    enc(x).pow(2).sum().backward()
    enc.set_active(None)
    enc.eval()
    for p in enc.parameters():
        if id(p) not in entry_ids:
            assert p.grad is None
    assert all(p.grad is not None for p in enc.entry_parameters(104))
    assert any(p.grad.abs().sum() > 0 for p in enc.entry_parameters(104))
    assert all(p.grad is None for p in enc.entry_parameters(103))
    for p in enc.entry_parameters(104):
        p.grad = None


# ------------------------------------------------------------------ EFTEncoder API
def test_training_one_entry_leaves_others_and_e0_unchanged():
    enc = _small_encoder()
    enc.add_entry(0)
    enc.add_entry(1)
    x = torch.rand(16, 1, 8, 8, generator=torch.Generator().manual_seed(4))

    def features(key):
        enc.eval()
        enc.set_active(key)
        with torch.no_grad():
            return enc(x)

    before = {k: features(k) for k in (None, 0, 1)}
    opt = torch.optim.SGD(enc.entry_parameters(1), lr=0.1)
    enc.train()
    enc.set_active(1)
    for _ in range(3):
        opt.zero_grad()
        enc(x).sum().backward()
        opt.step()
    assert torch.equal(features(None), before[None])
    assert torch.equal(features(0), before[0])
    assert not torch.allclose(features(1), before[1])


def test_add_entry_init_from_copies_values():
    enc = _small_encoder()
    enc.add_entry(0)
    with torch.no_grad():
        for p in enc.entry_parameters(0):
            p.add_(0.05 * torch.randn_like(p))
    enc.train()
    enc.set_active(0)
    enc(torch.rand(8, 1, 8, 8))  # moves entry 0's BN running stats
    enc.add_entry(1, init_from=0)
    for p0, p1 in zip(enc.entry_parameters(0), enc.entry_parameters(1)):
        assert torch.equal(p0, p1) and p0 is not p1 and p1.requires_grad
    assert torch.equal(enc.norms[0].copies["0"].running_var, enc.norms[0].copies["1"].running_var)
    enc.eval()
    x = torch.rand(3, 1, 8, 8)
    with torch.no_grad():
        enc.set_active(0)
        a = enc(x)
        enc.set_active(1)
        b = enc(x)
    assert torch.equal(a, b)
    with torch.no_grad():
        enc.entry_parameters(1)[0].add_(1.0)
    assert not torch.equal(enc.entry_parameters(0)[0], enc.entry_parameters(1)[0])


def test_entry_bookkeeping_and_errors():
    enc = _small_encoder()
    assert enc.entries == [] and enc.active is None
    enc.add_entry(3)
    enc.add_entry(1)
    assert enc.entries == [3, 1]
    with pytest.raises(ValueError, match="already exists"):
        enc.add_entry(3)
    with pytest.raises(KeyError):
        enc.add_entry(5, init_from=9)
    with pytest.raises(KeyError):
        enc.set_active(7)
    with pytest.raises(TypeError):
        enc.add_entry("a")
    with pytest.raises(TypeError):
        enc.set_active(1.0)
    enc.set_active(1)
    assert enc.active == 1
    assert all(c.active == "1" for c in enc.convs)
    assert len(enc.entry_modules(3)) == len(enc.convs) + len(enc.norms)


def test_without_task_batchnorm_entries_share_frozen_bn():
    enc = _small_encoder(task_batchnorm=False)
    enc.add_entry(0)
    assert enc.entry_parameter_count(0) == enc.entry_parameter_count(0, include_batchnorm=False)
    assert all(len(n.copies) == 0 for n in enc.norms)
    enc.train()
    enc.set_active(0)
    before = enc.norms[0].base.running_mean.clone()
    enc(torch.rand(4, 1, 8, 8))
    assert torch.equal(enc.norms[0].base.running_mean, before)


def test_encoder_rejects_backbones_without_feature_dim_or_convs():
    with pytest.raises(TypeError, match="feature_dim"):
        EFTEncoder(nn.Sequential(nn.Conv2d(1, 8, 3)))
    mlp = nn.Sequential(nn.Flatten(), nn.Linear(4, 4))
    mlp.feature_dim = 4
    with pytest.raises(ValueError, match="no Conv2d"):
        EFTEncoder(mlp)
    enc = _small_encoder()
    with pytest.raises(ValueError, match="already"):
        EFTEncoder(enc.backbone)


def test_state_dict_round_trip():
    enc = _small_encoder()
    enc.add_entry(0)
    with torch.no_grad():
        for p in enc.entry_parameters(0):
            p.add_(0.1)
    state = enc.state_dict()
    other = _small_encoder()
    other.add_entry(0)
    other.load_state_dict(state)
    x = torch.rand(2, 1, 8, 8)
    enc.eval(), other.eval()
    enc.set_active(0), other.set_active(0)
    with torch.no_grad():
        assert torch.equal(enc(x), other(x))
