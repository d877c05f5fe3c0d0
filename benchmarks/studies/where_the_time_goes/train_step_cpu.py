"""CPU ms of one training step (batch 32, 28x28 grey, 2 classes, Adam), one process, best of
rounds (cpu_timing.best_cpu_ms): Finetune's model (the harness's small CNN (32, 64, 128) and a
linear head, all trainable) against one EFT entry on the same CNN frozen (adapters a=8, b=16,
gamma=1, BatchNorm copies, head), the entry without its 1x1 branch (gamma=0), and the entry
with its grouped 1x1 convolutions computed as a batched matmul (the same function; whether its
outputs and gradients equal the convolution's bit for bit is printed).
Run from the repository root: python docs/results/where_the_time_goes/train_step_cpu.py"""
import os
import sys

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cpu_timing import best_cpu_ms  # noqa: E402

from avalanche_sdr.models import build_sdr_model, eft, small_cnn_backbone  # noqa: E402

torch.set_num_threads(1)
torch.manual_seed(0)
x, y = torch.rand(32, 1, 28, 28), torch.randint(0, 2, (32,))


def finetune_step():
    net = nn.Sequential(small_cnn_backbone(1, (32, 64, 128)), nn.Linear(128, 2)).train()
    opt = torch.optim.Adam(net.parameters(), 1e-3)

    def step():
        opt.zero_grad()
        F.cross_entropy(net(x), y).backward()
        opt.step()
    return step


def eft_model(gamma):
    torch.manual_seed(1)
    model = build_sdr_model(small_cnn_backbone(1, (32, 64, 128)), in_channels=1, image_size=28,
                            generator=None, gamma=gamma)
    model.create_entry(0)
    model.add_head(0, 2)
    model.train()
    return model


def eft_step(gamma):
    model = eft_model(gamma)
    opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], 1e-3)

    def step():
        opt.zero_grad()
        F.cross_entropy(model.forward_single_task(x, 0), y).backward()
        opt.step()
    return step


def matmul_pointwise(self, features):
    """EFTAdapter.forward with W^d as a batched matmul over its groups."""
    out = self.spatial(features)
    if self.pointwise is not None:
        n, k, h, w = features.shape
        g = self.pointwise.groups
        pw = torch.matmul(self.pointwise.weight.reshape(g, k // g, k // g).unsqueeze(0),
                          features.reshape(n, g, k // g, h * w)).reshape(n, k, h, w)
        out = out + self.gamma * (pw + self.pointwise.bias.view(1, k, 1, 1))
    return out


def gradients(model):
    loss = F.cross_entropy(model.forward_single_task(x, 0), y)
    params = [p for p in model.parameters() if p.requires_grad]
    return loss.detach(), torch.autograd.grad(loss, params)


if __name__ == "__main__":
    steps = [("Finetune (all trainable)", finetune_step()), ("EFT entry", eft_step(1.0)),
             ("EFT entry, gamma=0 (no 1x1 branch)", eft_step(0.0))]
    original = eft.EFTAdapter.forward
    reference = gradients(eft_model(1.0))
    eft.EFTAdapter.forward = matmul_pointwise
    steps.append(("EFT entry, 1x1 branch as matmul", eft_step(1.0)))
    changed = gradients(eft_model(1.0))
    for name, step in steps:
        step()
        print(f"{name}: {best_cpu_ms(step, 30, 5)[0]:.1f} CPU ms per step", flush=True)
    eft.EFTAdapter.forward = original
    same = [torch.equal(a, b) for a, b in zip(reference[1], changed[1])]
    print(f"1x1 branch as matmul: loss equal {torch.equal(reference[0], changed[0])}, "
          f"{sum(same)} of {len(same)} gradients bit-identical, largest difference "
          f"{max(float((a - b).abs().max()) for a, b in zip(reference[1], changed[1])):.2e}")
    print(f"torch threads {torch.get_num_threads()}, load {os.getloadavg()[0]:.2f}")
