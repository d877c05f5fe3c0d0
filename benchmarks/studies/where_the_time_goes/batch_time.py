"""Time E0's and an entry's eval-mode forward per image at several batch sizes, one torch
thread, interleaved rounds (min over rounds), 2,048 Fashion-sized images (1 x SIDE x SIDE,
default 28), the CPU preset's small CNN (32, 64, 128). Also the largest feature difference
against the first batch size. From the repository root:

    nice -n 10 python -m benchmarks.studies.where_the_time_goes.batch_time [SIDE]
"""
import os
import sys
from typing import Any, Dict, Optional, Sequence

import torch

from avalanche_sdr.models import small_cnn_backbone
from benchmarks.studies.where_the_time_goes.batch_models import model_with_entry, time_batch_sizes

SIZES = (16, 32, 64, 128, 256, 512)
"""Batch sizes timed."""


def measure(side: int = 28, images: int = 2048, sizes: Sequence[int] = SIZES, rounds: int = 5) -> Dict[str, Any]:
    """The small CNN with one random entry
    (:func:`~benchmarks.studies.where_the_time_goes.batch_models.model_with_entry`) timed on
    ``images`` random 1 x ``side`` x ``side`` images
    (:func:`~benchmarks.studies.where_the_time_goes.batch_models.time_batch_sizes`)."""
    model, e = model_with_entry(lambda: small_cnn_backbone(in_channels=1, widths=(32, 64, 128)), (1, side, side))
    model.eval()
    x = torch.rand(images, 1, side, side)
    return time_batch_sizes(model, e, x, sizes, rounds)


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
