"""Wall ms of each op of one entry's forward of the CPU preset's small CNN at batch 64
(:func:`~benchmarks.studies.where_the_time_goes.router_fit.synthetic_repository`, entry 1),
summed over 30 repeats, with each op's share. From the repository root:

    python -m benchmarks.studies.where_the_time_goes.entry_forward_ops
"""
import os
import time
from typing import Dict

import torch

from benchmarks.studies.where_the_time_goes.router_fit import synthetic_repository


def op_times(batch: int = 64, repeats: int = 30, images: int = 600) -> Dict[str, int]:
    """Nanoseconds of each op (the input normalisation, per layer: an EFT convolution's
    frozen convolution ``conv<i>``, its spatial ``spat<i>`` and pointwise ``pw<i>``
    branches and their sum ``add<i>``, every other layer by its class, then the pooling)
    over ``repeats`` forwards of ``batch`` images of task 1 through entry 1."""
    model, data = synthetic_repository(2, images, 0)
    model.eval()
    x = data[1][0][:batch]
    times: Dict[str, int] = {}

    def rec(name, f, *a):
        s = time.perf_counter_ns()
        r = f(*a)
        times[name] = times.get(name, 0) + time.perf_counter_ns() - s
        return r

    body = model.encoder.backbone.body.features
    with torch.no_grad():
        model.encoder.set_active(1)
        for _ in range(repeats):
            h = rec("norm", model.encoder.backbone.normalize, x)
            for i, layer in enumerate(body):
                name = type(layer).__name__
                if name == "EFTConv2d":
                    f = rec(f"conv{i}", layer.conv, h)
                    ad = layer.adapters["1"]
                    s = rec(f"spat{i}", ad.spatial, f)
                    p = rec(f"pw{i}", ad.pointwise, f)
                    h = rec(f"add{i}", lambda: s + ad.gamma * p)
                else:
                    h = rec(f"{name}{i}", layer, h)
            rec("pool", lambda: h.mean(dim=(2, 3)))
    return times


def main() -> None:
    torch.set_num_threads(1)
    print(os.getloadavg())
    batch, repeats = 64, 30
    times = op_times(batch, repeats)
    total = sum(times.values())
    for k, v in times.items():
        print(f"{k:12s} {v / repeats / 1e6:7.3f} ms  {100 * v / total:5.1f}%")
    print("total ms per img", total / repeats / 1e6 / batch)


__all__ = ["main", "op_times"]

if __name__ == "__main__":
    main()
