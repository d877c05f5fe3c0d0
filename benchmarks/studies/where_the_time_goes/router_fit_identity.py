"""Fit the ``lda_weighted`` router on E synthetic tasks
(:func:`~benchmarks.studies.where_the_time_goes.router_fit.synthetic_repository`); save its
discriminants, offsets, evidence and refit, for a bit-identity check between two trees
(run it under each, e.g. with another worktree first on ``PYTHONPATH``, and compare the two
files with ``torch.equal``). From the repository root:

    python -m benchmarks.studies.where_the_time_goes.router_fit_identity E OUT
"""
import os
import sys
import time
from typing import Any, Dict, Optional, Sequence

import torch

from avalanche_sdr.models import TaskData
from avalanche_sdr.routers import lda_router, make_router
from benchmarks.studies.where_the_time_goes.router_fit import synthetic_repository


def fit(entries: int, images: int = 600) -> Dict[str, Any]:
    """Fit the router after each of ``entries`` tasks, record a repeat of task 0's images,
    move the last entry's weights by 1 % and refit it.

    :return: ``fit<t>`` (CPU seconds of each fit), ``disc`` / ``off`` (the discriminants
        and offsets after the fits), ``evidence_s`` and ``evidence`` (the repeat's CPU
        seconds and the recorded counts), ``refit_s``, ``disc2`` / ``off2`` (after the refit).
    """
    model, data = synthetic_repository(entries, images, 0)
    fitter = make_router("lda_weighted")
    res: Dict[str, Any] = {}
    for t in range(entries):
        s = time.process_time()
        fitter.fit(model, TaskData(t, *data[t]), new_entry=True)
        res[f"fit{t}"] = time.process_time() - s
    _, res["disc"], res["off"] = lda_router._DERIVED[model]["discriminants"]
    x, y = data[0]
    s = time.process_time()
    fitter.before_repeat(model, TaskData(10_000 + entries, x, y), 0)
    res["evidence_s"] = time.process_time() - s
    res["evidence"] = model.routing_state("lda_repeats")["counts"]
    with torch.no_grad():
        for p in model.encoder.entry_parameters(entries - 1):
            p.mul_(1.01)
    s = time.process_time()
    fitter.fit(model, TaskData(entries - 1, *data[entries - 1]), new_entry=False, entry_updated=True)
    res["refit_s"] = time.process_time() - s
    _, res["disc2"], res["off2"] = lda_router._DERIVED[model]["discriminants"]
    return res


def main(argv: Optional[Sequence[str]] = None) -> None:
    argv = sys.argv[1:] if argv is None else list(argv)
    if len(argv) != 2:
        raise SystemExit("usage: python -m benchmarks.studies.where_the_time_goes.router_fit_identity E OUT")
    torch.set_num_threads(1)
    entries, out = int(argv[0]), argv[1]
    res = fit(entries)
    torch.save(res, out)
    print(out, "last fit %.3f evidence %.3f refit %.3f load %s" % (res[f"fit{entries - 1}"], res["evidence_s"],
                                                                  res["refit_s"], os.getloadavg()))


__all__ = ["fit", "main"]

if __name__ == "__main__":
    main()
