"""The whole model in channels-last memory format: bit-identity and CPU ms of its features
against today's (``synthetic_repository`` with 4 entries), batches 40 and 64, E0 and entries
1 and 3. From the repository root:

    python -m benchmarks.studies.where_the_time_goes.model_channels_last
"""
import copy
import os
from typing import List, Sequence

import torch

from benchmarks.studies.where_the_time_goes.cpu_timing import best_cpu_ms
from benchmarks.studies.where_the_time_goes.router_fit import synthetic_repository


def compare(batches: Sequence[int] = (40, 64), entries: Sequence = (None, 1, 3), images: int = 600, n: int = 10,
            rounds: int = 5) -> List[dict]:
    """One record per (batch, entry): CPU ms of ``features`` in the usual format
    (``nchw_ms``), of a channels-last copy of the model on the usual input (``cl_ms``) and on a
    channels-last input (``cl_input_ms``), and whether their features equal the usual ones."""
    model, data = synthetic_repository(4, images, 0)
    model.eval()
    channels_last = copy.deepcopy(model).to(memory_format=torch.channels_last)
    records = []
    with torch.no_grad():
        for bs in batches:
            x = data[1][0][:bs]
            for e in entries:
                ms, ref = best_cpu_ms(lambda: model.features(x, e), n, rounds)
                ms2, r = best_cpu_ms(lambda: channels_last.features(x, e), n, rounds)
                ms3, r3 = best_cpu_ms(lambda: channels_last.features(x.contiguous(memory_format=torch.channels_last),
                                                                     e), n, rounds)
                records.append(dict(batch=bs, entry=e, nchw_ms=ms, cl_ms=ms2, cl_input_ms=ms3,
                                    equal=torch.equal(ref, r), max_difference=(ref - r).abs().max().item(),
                                    equal_cl_input=torch.equal(ref, r3)))
    return records


def main() -> None:
    torch.set_num_threads(1)
    print(os.getloadavg())
    for r in compare():
        print(r["batch"], r["entry"], "nchw %.2f ms  cl %.2f ms cl-in %.2f" % (r["nchw_ms"], r["cl_ms"], r["cl_input_ms"]),
              r["equal"], r["max_difference"], r["equal_cl_input"])


__all__ = ["compare", "main"]

if __name__ == "__main__":
    main()
