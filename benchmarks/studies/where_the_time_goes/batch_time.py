"""Time E0's and an entry's eval-mode forward per image at several batch sizes, one torch
thread, interleaved rounds (min over rounds), 2,048 Fashion-sized images (1 x SIDE x SIDE,
default 28), the CPU preset's small CNN (32, 64, 128). Also the largest feature difference
against the first batch size. From the repository root:

    nice -n 10 python -m benchmarks.studies.where_the_time_goes.batch_time [SIDE]
"""
import os
import sys
from typing import Any, Dict, Optional, Sequence
import time

import torch

from avalanche_sdr.models import build_sdr_model, small_cnn_backbone

SIZES = (16, 32, 64, 128, 256, 512)
"""Batch sizes timed."""


def measure(side: int = 28, images: int = 2048, sizes: Sequence[int] = SIZES, rounds: int = 5) -> Dict[str, Any]:
    """:return: ``{"ms": {(batch, "E0"|"entry"): ms per image}, "difference": {batch: the largest
    |feature difference| against the first batch size}}``."""
    torch.manual_seed(0)
    model = build_sdr_model(small_cnn_backbone(in_channels=1, widths=(32, 64, 128)), in_channels=1, image_size=side,
                            generator=None)
    e = model.create_entry(0)
    with torch.no_grad():  # give the entry non-trivial adapters and BatchNorm statistics
        for p in model.encoder.entry_parameters(e):
            p.add_(0.05 * torch.randn_like(p))
    model.eval()
    x = torch.rand(images, 1, side, side)
    best = {(bs, en): float("inf") for bs in sizes for en in (None, e)}
    ref, diff = {}, {bs: 0.0 for bs in sizes}
    for _ in range(rounds):
        for bs in sizes:
            for entry in (None, e):
                t = time.perf_counter()
                f = model.batched_features(x, entry, batch_size=bs)
                best[bs, entry] = min(best[bs, entry], (time.perf_counter() - t) / x.shape[0] * 1e3)
                ref.setdefault(entry, f)
                diff[bs] = max(diff[bs], (f - ref[entry]).abs().max().item())
    return {"ms": {(bs, "E0" if en is None else "entry"): ms for (bs, en), ms in best.items()}, "difference": diff}


def main(argv: Optional[Sequence[str]] = None) -> None:
    """Print the table; ``argv[0]``: the image side (default 28)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    torch.set_num_threads(1)
    side = int(argv[0]) if argv else 28
    print("load before:", os.getloadavg())
    result = measure(side)
    print(f"| batch | E0 ms/img | entry ms/img | max |feature difference| vs batch {SIZES[0]} |")
    print("|---|---|---|---|")
    for bs in SIZES:
        print(f"| {bs} | {result['ms'][bs, 'E0']:.3f} | {result['ms'][bs, 'entry']:.3f} | "
              f"{result['difference'][bs]:.1e} |")
    print("load after:", os.getloadavg())


__all__ = ["SIZES", "main", "measure"]

if __name__ == "__main__":
    main()
