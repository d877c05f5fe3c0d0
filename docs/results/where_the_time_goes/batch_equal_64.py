"""Are E0's and a random entry's eval-mode features at batch 16, 32 and 128 bit-identical to those at 64?
Four models (small CNN on 1x28x28 and 1x8x8, CIFAR ResNet-20 on 3x32x32 and 1x28x28), 300 random images,
one torch thread. Run from the repository root: PYTHONPATH=. python docs/results/where_the_time_goes/batch_equal_64.py"""
import torch
torch.set_num_threads(1)
from avalanche_sdr.models import build_sdr_model, small_cnn_backbone, cifar_resnet_backbone
cases = {"small_cnn_28": (lambda: small_cnn_backbone(in_channels=1, widths=(32, 64, 128)), (1, 28, 28)),
         "small_cnn_8": (lambda: small_cnn_backbone(in_channels=1, widths=(32, 64, 128)), (1, 8, 8)),
         "resnet20_32": (lambda: cifar_resnet_backbone(20, in_channels=3), (3, 32, 32)),
         "resnet20_28grey": (lambda: cifar_resnet_backbone(20, in_channels=1), (1, 28, 28))}
for name, (make, shape) in cases.items():
    torch.manual_seed(0)
    model = build_sdr_model(make(), in_channels=shape[0], image_size=shape[1], generator=None)
    e = model.create_entry(0)
    with torch.no_grad():
        for p in model.encoder.entry_parameters(e):
            p.add_(0.05 * torch.randn_like(p))
    x = torch.rand((300,) + shape)
    out = []
    for entry in (None, e):
        ref = model.batched_features(x, entry, 64)
        out.append(" ".join(f"b{b}:{torch.equal(model.batched_features(x, entry, b), ref)}" for b in (16, 32, 128)))
    print(name, "E0", out[0], "| entry", out[1])
