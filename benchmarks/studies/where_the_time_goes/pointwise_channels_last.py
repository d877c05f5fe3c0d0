"""An entry's forward with the adapters' grouped 1x1 convolution on a channels-last copy of
its input: bit-identity and CPU ms against today's (``synthetic_repository`` with 4 entries,
batches 40 and 64, entries 1 and 3, the least of 8 interleaved rounds). From the repository
root:

    python -m benchmarks.studies.where_the_time_goes.pointwise_channels_last
"""
import contextlib
import os
from typing import Callable, Iterator, List, Sequence

import torch

from avalanche_sdr.models import eft
from benchmarks.studies.where_the_time_goes.cpu_timing import best_cpu_ms
from benchmarks.studies.where_the_time_goes.router_fit import synthetic_repository


def channels_last_forward(self, f):
    """``EFTAdapter.forward`` with the 1x1 branch on a channels-last copy of ``f``."""
    out = self.spatial(f)
    if self.pointwise is not None:
        p = self.pointwise(f.contiguous(memory_format=torch.channels_last))
        out = out + self.gamma * p
    return out


def channels_last_in_place_forward(self, f):
    """:func:`channels_last_forward`, its result made contiguous and added in place when
    ``gamma`` is 1."""
    out = self.spatial(f)
    if self.pointwise is not None:
        p = self.pointwise(f.contiguous(memory_format=torch.channels_last)).contiguous()
        if self.gamma == 1.0:
            out += p
        else:
            out = out + self.gamma * p
    return out


@contextlib.contextmanager
def adapter_forward(forward: Callable) -> Iterator[None]:
    """Within the block, ``EFTAdapter.forward`` is ``forward``; restored on leaving."""
    original = eft.EFTAdapter.forward
    eft.EFTAdapter.forward = forward
    try:
        yield
    finally:
        eft.EFTAdapter.forward = original


def compare(batches: Sequence[int] = (40, 64), entries: Sequence[int] = (1, 3), images: int = 600,
            rounds: int = 8, n: int = 4, inner_rounds: int = 3) -> List[dict]:
    """One record per (batch, entry): the least over ``rounds`` of the CPU ms of today's
    forward (``ms``), of :func:`channels_last_forward` (``fast_ms``) and of
    :func:`channels_last_in_place_forward` (``fast2_ms``), and whether their features equal
    today's bit for bit."""
    model, data = synthetic_repository(4, images, 0)
    model.eval()
    original = eft.EFTAdapter.forward
    records = []
    with torch.no_grad():
        for bs in batches:
            x = data[1][0][:bs]
            for e in entries:
                times = {0: [], 1: [], 2: []}
                for _ in range(rounds):
                    for k, forward in enumerate((original, channels_last_forward, channels_last_in_place_forward)):
                        with adapter_forward(forward):
                            ms, result = best_cpu_ms(lambda: model.features(x, e), n, inner_rounds)
                        times[k].append(ms)
                        if k == 0:
                            ref = result
                        elif k == 1:
                            fast = result
                        else:
                            fast2 = result
                records.append(dict(batch=bs, entry=e, ms=min(times[0]), fast_ms=min(times[1]),
                                    fast2_ms=min(times[2]), equal=torch.equal(ref, fast),
                                    equal2=torch.equal(ref, fast2)))
    return records


def main() -> None:
    torch.set_num_threads(1)
    print(os.getloadavg())
    for r in compare():
        print(r["batch"], r["entry"], "orig %.2f  fast %.2f fast2 %.2f ms" % (r["ms"], r["fast_ms"], r["fast2_ms"]),
              r["equal"], r["equal2"])


__all__ = ["adapter_forward", "channels_last_forward", "channels_last_in_place_forward", "compare", "main"]

if __name__ == "__main__":
    main()
