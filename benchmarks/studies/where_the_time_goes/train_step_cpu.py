"""CPU ms of one training step (batch 32, 28x28 grey, 2 classes, Adam), one process, best of
rounds (:func:`~benchmarks.studies.where_the_time_goes.cpu_timing.best_cpu_ms`): Finetune's
model (the harness's small CNN (32, 64, 128) and a linear head, all trainable) against one
EFT entry on the same CNN frozen (adapters a=8, b=16, gamma=1, BatchNorm copies, head), the
entry without its 1x1 branch (gamma=0), and the entry with its grouped 1x1 convolutions
computed as a batched matmul (the same function; whether its outputs and gradients equal
the convolution's bit for bit is printed). From the repository root:

    python -m benchmarks.studies.where_the_time_goes.train_step_cpu
"""
import os
from typing import Any, Callable, Dict, List, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from avalanche_sdr.models import build_sdr_model, eft, small_cnn_backbone
from benchmarks.studies.where_the_time_goes.cpu_timing import best_cpu_ms
from benchmarks.studies.where_the_time_goes.pointwise_channels_last import adapter_forward


def batch() -> Tuple[torch.Tensor, torch.Tensor]:
    """The step's mini-batch: 32 images [32, 1, 28, 28] in [0, 1] and labels [32] in {0, 1},
    drawn after ``torch.manual_seed(0)``."""
    torch.manual_seed(0)
    return torch.rand(32, 1, 28, 28), torch.randint(0, 2, (32,))


def finetune_step(x: torch.Tensor, y: torch.Tensor) -> Callable[[], None]:
    """One Adam step of Finetune's model on ``(x, y)``."""
    net = nn.Sequential(small_cnn_backbone(1, (32, 64, 128)), nn.Linear(128, 2)).train()
    opt = torch.optim.Adam(net.parameters(), 1e-3)

    def step():
        opt.zero_grad()
        F.cross_entropy(net(x), y).backward()
        opt.step()
    return step


def eft_model(gamma: float):
    """The small CNN with one EFT entry (adapters' ``gamma``) and its head, seeded (1), in training mode."""
    torch.manual_seed(1)
    model = build_sdr_model(small_cnn_backbone(1, (32, 64, 128)), in_channels=1, image_size=28,
                            generator=None, gamma=gamma)
    model.create_entry(0)
    model.heads.add(0, 2)
    model.train()
    return model


def eft_step(gamma: float, x: torch.Tensor, y: torch.Tensor) -> Callable[[], None]:
    """One Adam step of the entry's trainable parameters on ``(x, y)``."""
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


def gradients(model, x: torch.Tensor, y: torch.Tensor):
    """The loss on ``(x, y)`` and its gradients with respect to the trainable parameters."""
    loss = F.cross_entropy(model.forward_single_task(x, 0), y)
    params = [p for p in model.parameters() if p.requires_grad]
    return loss.detach(), torch.autograd.grad(loss, params)


def measure(n: int = 30, rounds: int = 5) -> Dict[str, Any]:
    """CPU ms per step of each variant (``steps``: name -> ms, best of ``rounds`` rounds of
    ``n`` steps, after one step; the matmul variant alone under :func:`matmul_pointwise`)
    and the matmul branch's comparison with the convolution's (``loss_equal``,
    ``gradients_equal``: one bool per parameter, ``largest_difference``)."""
    x, y = batch()
    original = eft.EFTAdapter.forward
    steps: List[Tuple[str, Callable[[], None], Callable]] = [
        ("Finetune (all trainable)", finetune_step(x, y), original),
        ("EFT entry", eft_step(1.0, x, y), original),
        ("EFT entry, gamma=0 (no 1x1 branch)", eft_step(0.0, x, y), original),
        ("EFT entry, 1x1 branch as matmul", eft_step(1.0, x, y), matmul_pointwise)]
    reference = gradients(eft_model(1.0), x, y)
    with adapter_forward(matmul_pointwise):
        changed = gradients(eft_model(1.0), x, y)
    timed = {}
    for name, step, forward in steps:
        with adapter_forward(forward):
            step()
            timed[name] = best_cpu_ms(step, n, rounds)[0]
    return {"steps": timed, "loss_equal": torch.equal(reference[0], changed[0]),
            "gradients_equal": [torch.equal(a, b) for a, b in zip(reference[1], changed[1])],
            "largest_difference": max(float((a - b).abs().max()) for a, b in zip(reference[1], changed[1]))}


def main() -> None:
    torch.set_num_threads(1)
    result = measure()
    for name, ms in result["steps"].items():
        print(f"{name}: {ms:.1f} CPU ms per step", flush=True)
    same = result["gradients_equal"]
    print(f"1x1 branch as matmul: loss equal {result['loss_equal']}, {sum(same)} of {len(same)} gradients "
          f"bit-identical, largest difference {result['largest_difference']:.2e}")
    print(f"torch threads {torch.get_num_threads()}, load {os.getloadavg()[0]:.2f}")


__all__ = ["batch", "eft_model", "eft_step", "finetune_step", "gradients", "main", "matmul_pointwise", "measure"]

if __name__ == "__main__":
    main()
