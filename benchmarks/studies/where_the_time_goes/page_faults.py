"""Wall, user and system CPU ms per image and minor page faults of an entry's eval-mode
forward at batches 8, 32, 64 (1,024 random 1x28x28 images, 3 rounds, one torch thread). Run
with and without
``GLIBC_TUNABLES=glibc.malloc.mmap_threshold=4294967295:glibc.malloc.trim_threshold=4294967295``
from the repository root:

    python -m benchmarks.studies.where_the_time_goes.page_faults
"""
import resource
import time
from typing import Dict, List, Sequence

import torch

from avalanche_sdr.models import build_sdr_model, small_cnn_backbone


def measure(batches: Sequence[int] = (8, 32, 64), images: int = 1024, rounds: int = 3) -> List[Dict[str, float]]:
    """One record per batch size: ``wall_ms``, ``user_ms``, ``sys_ms`` per image and
    ``minor_faults`` (this process's, ``getrusage``) of ``rounds`` passes of
    ``model.batched_features`` (eval mode) over ``images`` images."""
    torch.manual_seed(0)
    model = build_sdr_model(small_cnn_backbone(in_channels=1, widths=(32, 64, 128)), in_channels=1, image_size=28,
                            generator=None)
    e = model.create_entry(0)
    with torch.no_grad():
        for p in model.encoder.entry_parameters(e):
            p.add_(0.05 * torch.randn_like(p))
    x = torch.rand(images, 1, 28, 28)
    records = []
    for bs in batches:
        r0 = resource.getrusage(resource.RUSAGE_SELF)
        w = time.perf_counter()
        for _ in range(rounds):
            model.batched_features(x, e, bs)
        r1 = resource.getrusage(resource.RUSAGE_SELF)
        n = rounds * images
        records.append(dict(batch=bs, wall_ms=(time.perf_counter() - w) / n * 1e3,
                            user_ms=(r1.ru_utime - r0.ru_utime) / n * 1e3, sys_ms=(r1.ru_stime - r0.ru_stime) / n * 1e3,
                            minor_faults=r1.ru_minflt - r0.ru_minflt))
    return records


def main() -> None:
    torch.set_num_threads(1)
    for r in measure():
        print(f"batch {r['batch']}: wall {r['wall_ms']:.3f} ms/img, user {r['user_ms']:.3f}, sys {r['sys_ms']:.3f}, "
              f"minor faults {r['minor_faults']}")


__all__ = ["main", "measure"]

if __name__ == "__main__":
    main()
