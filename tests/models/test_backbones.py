"""Tests for avalanche_sdr.models.backbones.

The real CIFAR-10 ResNet checkpoints are read from the shared data folder
(``--shared-data`` / ``SDR_SHARED_DATA``, default ``../shared/data`` beside the
repository; see ``tests/conftest.py``), under ``weights/resnet_cifar10/``; tests
that need them are skipped, with the reason, when they are absent.
"""
import urllib.error
from pathlib import Path

import pytest
import torch
from torch import nn

from avalanche_sdr.models.backbones import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    cifar_resnet_backbone,
    load_cifar_resnet_state,
    resnet18_backbone,
    small_cnn_backbone,
)

CIFAR_FILES = {
    20: "resnet20-12fca82f.th",
    32: "resnet32-d509ac18.th",
    44: "resnet44-014dd654.th",
    56: "resnet56-4bfd9763.th",
}


def _weights(shared_data_dir: Path, depth: int) -> Path:
    path = shared_data_dir / "weights" / "resnet_cifar10" / CIFAR_FILES[depth]
    if not path.is_file():
        pytest.skip(f"CIFAR ResNet weights not found at {path} (set --shared-data or SDR_SHARED_DATA)")
    return path


def _count(module: nn.Module, kind) -> int:
    return sum(isinstance(m, kind) for m in module.modules())


# ------------------------------------------------------------------ ResNet18
def test_resnet18_random_init_shapes_and_grey_input():
    torch.manual_seed(0)
    net = resnet18_backbone().eval()
    assert net.feature_dim == 512
    assert _count(net, nn.Conv2d) == 20 and _count(net, nn.Linear) == 0
    with torch.no_grad():
        assert net(torch.rand(2, 3, 32, 32)).shape == (2, 512)
        grey = resnet18_backbone(in_channels=1).eval()
        x = torch.rand(2, 1, 28, 28)
        grey.load_state_dict(net.state_dict())
        assert torch.allclose(grey(x), net(x.repeat(1, 3, 1, 1)), atol=1e-6)
    with pytest.raises(ValueError, match="expected images"):
        net(torch.rand(2, 1, 32, 32))
    with pytest.raises(ValueError, match="in_channels"):
        resnet18_backbone(in_channels=2)


def test_resnet18_loads_local_state_dict_and_normalises(tmp_path):
    from torchvision.models import resnet18

    torch.manual_seed(1)
    reference = resnet18().eval()
    path = tmp_path / "resnet18.pth"
    torch.save(reference.state_dict(), path)  # includes fc.*, which is ignored
    net = resnet18_backbone(weights=str(path)).eval()
    assert torch.equal(net.body.conv1.weight, reference.conv1.weight)
    reference.fc = nn.Identity()
    x = torch.rand(2, 3, 32, 32)
    mean = torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1)
    std = torch.tensor(IMAGENET_STD).view(1, 3, 1, 1)
    with torch.no_grad():
        assert torch.allclose(net(x), reference((x - mean) / std), atol=1e-5)
    # a checkpoint wrapped as {"state_dict": ...} with "module." prefixes also loads
    wrapped = tmp_path / "wrapped.pth"
    torch.save({"state_dict": {f"module.{k}": v for k, v in reference.state_dict().items()}}, wrapped)
    assert torch.equal(resnet18_backbone(weights=wrapped).body.conv1.weight, reference.conv1.weight)


def test_resnet18_missing_file_names_path(tmp_path):
    missing = tmp_path / "nope.pth"
    with pytest.raises(FileNotFoundError, match="nope.pth"):
        resnet18_backbone(weights=str(missing))


def test_resnet18_enum_without_network_raises_clear_error(monkeypatch, tmp_path):
    import torchvision.models._api as api
    from torchvision.models import ResNet18_Weights

    def offline(*args, **kwargs):
        raise urllib.error.URLError("Temporary failure in name resolution")

    monkeypatch.setattr(api, "load_state_dict_from_url", offline)
    with pytest.raises(RuntimeError, match="no network") as info:
        resnet18_backbone(weights=ResNet18_Weights.IMAGENET1K_V1)
    assert "IMAGENET1K_V1" in str(info.value) and "local" in str(info.value)


def test_resnet18_rejects_other_weight_types():
    with pytest.raises(TypeError, match="weights"):
        resnet18_backbone(weights=3)


# ------------------------------------------------------------------ CIFAR ResNets
@pytest.mark.parametrize("depth", [20, 32])
def test_cifar_resnet_architecture(depth):
    torch.manual_seed(0)
    net = cifar_resnet_backbone(depth).eval()
    assert net.feature_dim == 64
    # option A: 3x3 stem + two convs per block, no 1x1 shortcut convs
    assert _count(net, nn.Conv2d) == depth - 1
    assert all(m.kernel_size == (3, 3) for m in net.modules() if isinstance(m, nn.Conv2d))
    assert net.body.conv1.out_channels == 16 and net.body.layer3[-1].conv2.out_channels == 64
    with torch.no_grad():
        assert net(torch.rand(2, 3, 32, 32)).shape == (2, 64)
        assert cifar_resnet_backbone(depth, in_channels=1)(torch.rand(2, 1, 28, 28)).shape == (2, 64)
    if depth == 20:  # He et al.: ResNet-20 has 0.27M parameters (269,722 with the 10-way linear)
        assert sum(p.numel() for p in net.parameters()) + 64 * 10 + 10 == 269_722


def test_cifar_resnet_rejects_bad_depth_and_channels():
    with pytest.raises(ValueError, match="6n"):
        cifar_resnet_backbone(21)
    with pytest.raises(ValueError, match="in_channels"):
        cifar_resnet_backbone(20, in_channels=4)


def test_cifar_resnet_missing_file_names_path(tmp_path):
    missing = tmp_path / "resnet20-missing.th"
    with pytest.raises(FileNotFoundError, match="resnet20-missing.th") as info:
        cifar_resnet_backbone(20, weights_path=missing)
    assert "akamaster" in str(info.value)


@pytest.mark.parametrize("depth", [20, 32, 44, 56])
def test_cifar_resnet_loads_real_checkpoint(shared_data_dir, depth):
    path = _weights(shared_data_dir, depth)
    state = load_cifar_resnet_state(path)
    net = cifar_resnet_backbone(depth, weights_path=path).eval()
    assert torch.equal(net.body.conv1.weight, state["conv1.weight"])
    loaded = net.body.state_dict()
    for key, value in state.items():
        if not key.startswith("linear."):
            assert torch.equal(loaded[key], value), key


def test_cifar_resnet20_with_real_classifier(shared_data_dir):
    path = _weights(shared_data_dir, 20)
    state = load_cifar_resnet_state(path)
    net = cifar_resnet_backbone(20, weights_path=path).eval()
    linear = nn.Linear(64, 10)
    linear.load_state_dict({"weight": state["linear.weight"], "bias": state["linear.bias"]})
    x = torch.rand(16, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        features = net(x)
        logits = linear(features)
        random_features = cifar_resnet_backbone(20).eval()(x)
    assert logits.shape == (16, 10) and torch.isfinite(logits).all()
    assert (features >= 0).all()  # pooled post-ReLU maps
    assert not torch.allclose(features, random_features)
    # grey inputs are repeated to RGB before the same network
    grey = cifar_resnet_backbone(20, weights_path=path, in_channels=1).eval()
    g = torch.rand(4, 1, 32, 32)
    with torch.no_grad():
        assert torch.allclose(grey(g), net(g.repeat(1, 3, 1, 1)), atol=1e-6)


def test_cifar_resnet_wrong_depth_for_checkpoint(shared_data_dir):
    path = _weights(shared_data_dir, 32)
    with pytest.raises(ValueError, match="depth-20"):
        cifar_resnet_backbone(20, weights_path=path)


# ------------------------------------------------------------------ small CNN
@pytest.mark.parametrize("in_channels,size", [(1, 8), (1, 28), (3, 32), (1, 1)])
def test_small_cnn_shapes(in_channels, size):
    torch.manual_seed(0)
    net = small_cnn_backbone(in_channels=in_channels).train()
    assert net.feature_dim == 64
    out = net(torch.rand(4, in_channels, size, size))
    assert out.shape == (4, 64) and torch.isfinite(out).all()


def test_small_cnn_structure_and_validation():
    net = small_cnn_backbone(in_channels=1, widths=(8, 16, 24))
    convs = [m for m in net.modules() if isinstance(m, nn.Conv2d)]
    assert [c.stride for c in convs] == [(1, 1), (2, 2), (2, 2)]
    assert _count(net, nn.BatchNorm2d) == 3 and net.feature_dim == 24
    with pytest.raises(ValueError, match="widths"):
        small_cnn_backbone(widths=())
    with pytest.raises(ValueError, match="widths"):
        small_cnn_backbone(widths=(8, 0))
    with pytest.raises(ValueError, match="in_channels"):
        small_cnn_backbone(in_channels=0)
