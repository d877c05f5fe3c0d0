"""CPU seconds of one LDA router fit at E entries, split into feature passes (the router's
``_features`` and the repository's ``batched_features``) and the rest, twice, each on a
fresh copy of the repository fitted on the E - 1 tasks before. From the repository root:

    python -m benchmarks.studies.where_the_time_goes.router_fit_split [E]
"""
import contextlib
import copy
import os
import sys
import time
from typing import Dict, Iterator, List, Optional, Sequence

import torch

from avalanche_sdr.models import TaskData
from avalanche_sdr.routers import lda_router, make_router
from benchmarks.studies.where_the_time_goes.router_fit import synthetic_repository


@contextlib.contextmanager
def timed_feature_passes(model_class) -> Iterator[Dict[str, float]]:
    """Within the block, the router's ``lda_router._features`` and ``model_class.batched_features``
    add their CPU seconds (``feat``, ``bf``), calls (``n``) and images (``imgs``) to the dict
    given; both are restored on leaving."""
    acc = {"feat": 0.0, "n": 0, "imgs": 0, "bf": 0.0}
    features, batched = lda_router._features, model_class.batched_features

    def timed(model, x, space):
        s = time.process_time()
        r = features(model, x, space)
        acc["feat"] += time.process_time() - s
        acc["n"] += 1
        acc["imgs"] += x.shape[0]
        return r

    def timed_batched(self, x, e, batch_size=None):
        s = time.process_time()
        r = batched(self, x, e, batch_size)
        acc["bf"] += time.process_time() - s
        return r

    lda_router._features, model_class.batched_features = timed, timed_batched
    try:
        yield acc
    finally:
        lda_router._features, model_class.batched_features = features, batched


def split(entries: int = 32, images: int = 600, repeats: int = 2) -> List[Dict[str, float]]:
    """One record per repeat: ``fit`` (CPU seconds of the last task's fit), ``feat``,
    ``bf``, ``n``, ``imgs`` (:func:`timed_feature_passes`) and ``rest``."""
    model, data = synthetic_repository(entries, images, 0)
    fitter = make_router("lda_weighted")
    for t in range(entries - 1):
        fitter.fit(model, TaskData(t, *data[t]), new_entry=True)
    records = []
    with timed_feature_passes(type(model)) as acc:
        for _ in range(repeats):
            acc.update(feat=0.0, n=0, imgs=0, bf=0.0)
            fresh = copy.deepcopy(model)
            s = time.process_time()
            fitter.fit(fresh, TaskData(entries - 1, *data[entries - 1]), new_entry=True)
            total = time.process_time() - s
            records.append(dict(acc, fit=total, rest=total - acc["feat"] - acc["bf"]))
    return records


def main(argv: Optional[Sequence[str]] = None) -> None:
    argv = sys.argv[1:] if argv is None else list(argv)
    torch.set_num_threads(1)
    entries = int(argv[0]) if argv else 32
    for r in split(entries):
        print(f"E={entries} fit {r['fit']:.3f} CPU s: entry/E0 feature passes {r['feat']:.3f} ({r['n']} calls, "
              f"{r['imgs']} imgs), batched_features {r['bf']:.3f}, rest {r['rest']:.3f}; load {os.getloadavg()[0]:.2f}")


__all__ = ["main", "split", "timed_feature_passes"]

if __name__ == "__main__":
    main()
