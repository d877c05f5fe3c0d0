"""Router fit seconds against the number of entries E, on a synthetic repository.

The repository is the CPU preset's shape (a small CNN E0 (32, 64, 128) on 1x28x28 images)
with E entries, each created by one 2-class task of ``images`` random training images and
given random adapters (their features differ from E0's). :func:`router_fit_seconds` fits
the router on tasks 0..E-2 untimed, then times the fit of task E-1 (the task that creates
the E-th entry), alone and as in a run whose detector has already read E0's features of the
task (kept by the task's :class:`~avalanche_sdr.models.TaskData`; each on fresh copies of
the repository, the least of three interleaved rounds), and, for
``"lda_weighted"``, the routing of one repeat's evidence
(:meth:`~avalanche_sdr.routers.Router.before_repeat`) and one refit of an entry updated by
the learning reuse. Seconds are CPU seconds of this process (``time.process_time``: with
one torch thread, the work done, little changed by other processes' load). A benchmark,
not a test: the seconds depend on the machine.

    python -m benchmarks.studies.where_the_time_goes.router_fit --entries 4 8 16 32 48 --threads 1
"""
from __future__ import annotations

import argparse
import copy
import os
import time
from typing import Dict, List, Sequence

import torch

from avalanche_sdr.models import TaskData, build_sdr_model, small_cnn_backbone
from avalanche_sdr.routers import make_router


def synthetic_repository(entries: int, images: int = 600, seed: int = 0):
    """A repository with ``entries`` entries, one 2-class task each (task t creates entry t,
    class ids 2t and 2t + 1, a linear head), and each task's training data.

    :return: ``(model, data)`` with ``data[t] = (x, y)``: x [images, 1, 28, 28] float32 in
        [0, 1], y [images] int64 local labels 0/1 (half each).
    """
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    model = build_sdr_model(small_cnn_backbone(in_channels=1, widths=(32, 64, 128)), in_channels=1,
                            image_size=28, generator=None)
    data = {}
    for t in range(entries):
        entry = model.create_entry(t)
        with torch.no_grad():
            for p in model.encoder.entry_parameters(entry):
                p.add_(0.1 * torch.randn(p.shape, generator=g))
        model.heads.set_class_ids(t, [2 * t, 2 * t + 1])
        model.heads.add(t, 2)
        y = torch.arange(images) % 2
        x = (torch.rand(images, 1, 28, 28, generator=g) * (0.6 + 0.4 * y[:, None, None, None])).clamp(0, 1)
        data[t] = (x, y)
    model.eval()
    return model, data


def router_fit_seconds(entries: Sequence[int] = (4, 8, 16, 32, 48), router: str = "lda_weighted",
                       images: int = 600, seed: int = 0, rounds: int = 3) -> List[Dict[str, float]]:
    """Seconds of one router fit at each number of entries E (module doc).

    :param entries: the values of E (each >= 2), each on a fresh repository.
    :param router: a router name of :data:`~avalanche_sdr.routers.ROUTER_TYPES` (default options).
    :param images: training images per task.
    :param rounds: times each fit is timed (on a fresh copy of the repository; the least is
        kept), at least 1.
    :return: one dict per E, CPU seconds: ``entries``, ``fit_s`` (the E-th task's fit),
        ``fit_after_detection_s`` (the same fit with E0's features of the task already computed,
        as a detector that reads them leaves them: the two-sample rule, Expert Gate), and for the LDA
        routers ``refit_s`` (the same task fitted again as a learning-reuse update of its
        entry: ``entry_updated=True``) and ``evidence_s`` (one repeat's
        :meth:`~avalanche_sdr.routers.Router.before_repeat`).
    """
    if not isinstance(rounds, int) or rounds < 1:
        raise ValueError(f"rounds must be a positive int, got {rounds!r}")
    rows = []
    for n_entries in entries:
        if n_entries < 2:
            raise ValueError(f"entries must be >= 2 (the E-th fit is timed after E - 1 untimed ones), got {n_entries}")
        model, data = synthetic_repository(n_entries, images, seed)
        fitter = make_router(router)
        for t in range(n_entries - 1):
            fitter.fit(model, TaskData(t, *data[t]), new_entry=True)
        last = n_entries - 1
        # the fit alone, and as in a run, where the detector has read E0's features of the
        # task (SDRPlugin hands the fit the TaskData the detector read); each on fresh
        # copies of the repository, interleaved, the least of `rounds`
        seconds: Dict[str, List[float]] = {"fit_s": [], "fit_after_detection_s": []}
        for _ in range(rounds):
            for key in seconds:
                twin = copy.deepcopy(model)
                task_data = TaskData(last, *data[last])
                if key == "fit_after_detection_s":
                    task_data.e0_features(twin)  # the detector's pass, untimed
                start = time.process_time()
                fitter.fit(twin, task_data, new_entry=True)
                seconds[key].append(time.process_time() - start)
                del twin
        fitter.fit(model, TaskData(last, *data[last]), new_entry=True)  # what the timings below build on
        row = {"entries": n_entries, **{key: min(values) for key, values in seconds.items()}}
        x, y = data[0]
        start = time.process_time()
        fitter.before_repeat(model, TaskData(10_000 + n_entries, x, y), 0)
        row["evidence_s"] = time.process_time() - start
        with torch.no_grad():  # the learning reuse moves the entry's adapters
            for p in model.encoder.entry_parameters(last):
                p.mul_(1.01)
        start = time.process_time()
        fitter.fit(model, TaskData(last, *data[last]), new_entry=False, entry_updated=True)
        row["refit_s"] = time.process_time() - start
        rows.append(row)
    return rows


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--entries", type=int, nargs="+", default=[4, 8, 16, 32, 48])
    parser.add_argument("--router", default="lda_weighted")
    parser.add_argument("--images", type=int, default=600, help="training images per task")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(f"load before: {os.getloadavg()}; torch threads {torch.get_num_threads()}; router {args.router}")
    print("| E | fit CPU s | fit after detection CPU s | evidence CPU s | refit after an update CPU s |")
    print("|---|---|---|---|---|")
    for row in (r for e in args.entries for r in router_fit_seconds([e], args.router, args.images)):
        print(f"| {row['entries']} | {row['fit_s']:.3f} | {row['fit_after_detection_s']:.3f} | "
              f"{row['evidence_s']:.3f} | {row['refit_s']:.3f} |", flush=True)
    print(f"load after: {os.getloadavg()}")


if __name__ == "__main__":
    main()


__all__ = ["router_fit_seconds", "synthetic_repository"]
