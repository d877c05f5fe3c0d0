"""Are E0's and a random entry's eval-mode features at batch 16, 32 and 128 bit-identical to
those at 64? The four models of
:mod:`~benchmarks.studies.where_the_time_goes.batch_models` (``CASES``, ``model_with_entry``),
300 random images, one torch thread. From the repository root:

    python -m benchmarks.studies.where_the_time_goes.batch_equal_64
"""
from typing import Dict, Optional, Sequence

import torch

from benchmarks.studies.where_the_time_goes.batch_models import CASES, model_with_entry


def compare(images: int = 300, sizes: Sequence[int] = (16, 32, 128), reference: int = 64,
            cases: Optional[Sequence[str]] = None) -> Dict[str, Dict[str, Dict[int, bool]]]:
    """Whether ``model.batched_features`` at each batch size of ``sizes`` equals it at
    ``reference``, bit for bit, on ``images`` random images.

    :return: case -> ``{"E0": {size: equal}, "entry": {size: equal}}``.
    """
    out = {}
    for name in cases or CASES:
        make, shape = CASES[name]
        model, e = model_with_entry(make, shape)
        x = torch.rand((images,) + shape)
        out[name] = {}
        for label, entry in (("E0", None), ("entry", e)):
            ref = model.batched_features(x, entry, reference)
            out[name][label] = {b: torch.equal(model.batched_features(x, entry, b), ref) for b in sizes}
    return out


def main() -> None:
    torch.set_num_threads(1)
    for name, result in compare().items():
        line = [" ".join(f"b{b}:{same}" for b, same in result[label].items()) for label in ("E0", "entry")]
        print(name, "E0", line[0], "| entry", line[1])


__all__ = ["compare", "main"]

if __name__ == "__main__":
    main()
