"""The ``"kernel_lda"`` router on a finished SDR run: fitted from the run file's entry map.

The router reads two things of a repository: E0's features of each task's training
images, and which entry each task was mapped to (its units are (entry, class id) pairs).
Neither depends on anything else SDR trains, so the router fitted after a run, task by
task in stream order, from the run JSON's per-task ``entry`` and the same E0 and stream,
holds exactly the state it would have held had it been fitted during the run, and
answers the same (``tests/harness/test_closed_form_study.py`` checks this against a
router fitted during training). This scores it on runs made before the router existed
(without training SDR again): the run's test split, every experience, as
:class:`~avalanche_sdr.evaluation.TaskFreeMetrics` scores a router (per experience, then
the mean).

    python -m benchmarks.studies.closed_form.offline --runs docs/results/task_free/when_shifted/emnist100 \\
        --data-root EMNIST_ROOT --backbone-weights resnet20-12fca82f.th --out results/emnist100_kernel

Each SDR task-free run (``sdr_task_free``) found is written to ``OUT/runs/<run id>.json``:
the run as it was, with ``task_free["kernel_lda"]``, ``router_memory_mb["kernel_lda"]``
and ``router_fit_seconds["kernel_lda"]`` added (the router's state added to
``memory_mb``, its fit to ``wall_seconds``, as a run fitting it would count them) and
``"kernel_lda_fitted_after"``: the commit-independent note that it was fitted after the
run, with its settings. ``--settings klda`` fits the router at the ``klda`` baseline's
settings chosen on the stream's validation split (``docs/results/closed_form/<stream>/
tuning/chosen_<stream>_cpu.json``, :func:`benchmarks.studies.closed_form.router.klda_settings`)
instead of its defaults; those runs are written as ``<run id>_kernel_klda.json``, with
``"settings": "klda"`` in the note (the table reads them as their own row). A run already
fitted after (one of this tool's outputs) is refused: its memory and wall time hold the
first fit. A run whose stream needs an E0 file (the small-CNN streams) reads it from
``--backbones`` (a harness ``OUT/backbones`` folder of the same stream, preset and seed).
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any, Dict, List

from avalanche_sdr import cli

if __name__ in ("__main__", "__mp_main__"):
    cli.install_warning_filters()  # before Avalanche is imported


class RepositoryView:
    """What a router reads of an SDR repository, rebuilt from a run: E0, the task -> entry
    map and each task's class ids, every task trained; routing states kept as
    :class:`~avalanche_sdr.models.stored.TensorSet` modules, as the repository keeps
    them.

    :param backbone: E0 (frozen, eval mode).
    :param task_to_entry: task label -> its entry, in stream order.
    :param class_ids: task label -> its class ids (local label k is ``class_ids[task][k]``).
    """

    def __init__(self, backbone, task_to_entry: Dict[int, int], class_ids: Dict[int, List[int]]):
        import torch

        self.backbone = backbone.eval()
        self.task_to_entry = dict(task_to_entry)
        self._class_ids = {int(t): [int(c) for c in ids] for t, ids in class_ids.items()}
        self.entry_creator = {}
        for task, entry in self.task_to_entry.items():
            self.entry_creator.setdefault(entry, task)
        self.routing_states = torch.nn.ModuleDict()
        self.heads = self
        """What a router reads of the repository's heads (``is_trained``, ``class_ids``): here, the view itself."""

    @property
    def entries(self) -> List[int]:
        return sorted(self.entry_creator)

    @property
    def trained_tasks(self) -> List[int]:
        return list(self.task_to_entry)

    def is_trained(self, task: int) -> bool:
        return int(task) in self.task_to_entry

    def entry_of(self, task: int) -> int:
        return self.task_to_entry[int(task)]

    def class_ids(self, task: int) -> List[int]:
        return list(self._class_ids[int(task)])

    def batched_features(self, x, entry):
        """E0's features (``entry`` must be ``None``: the router reads no entry)."""
        import torch

        from avalanche_sdr._batching import eval_batch_size

        if entry is not None:
            raise ValueError("a RepositoryView holds E0 only")
        step = eval_batch_size("cpu")
        with torch.no_grad():
            return torch.cat([self.backbone(x[i:i + step]) for i in range(0, x.shape[0], step)])

    def set_routing_state(self, key: str, tensors) -> None:
        from avalanche_sdr.models.stored import TensorSet

        self.routing_states[key] = TensorSet(tensors)

    def routing_state(self, key: str):
        return self.routing_states[key].as_dict() if key in self.routing_states else {}


SETTINGS = ("defaults", "klda")
"""Where ``--settings`` takes the router's settings from (module doc)."""


def router_for(stream: str, settings: str):
    """The ``"kernel_lda"`` router of ``--settings`` for ``stream``.

    :raises SystemExit: ``settings`` is ``"klda"`` and the stream has no klda tuning file.
    """
    from avalanche_sdr.routers import KernelLDARouter
    from benchmarks.studies.closed_form.router import KLDA_TUNING, klda_settings

    if settings == "defaults":
        return KernelLDARouter()
    options = klda_settings(stream)
    if options is None:
        raise SystemExit(f"{stream}: no klda tuning file under {KLDA_TUNING / stream / 'tuning'}; "
                         f"run the harness with --methods klda --tune on it first")
    return KernelLDARouter(**options)


def fit_and_score(run: Dict[str, Any], benchmark, backbone, router) -> Dict[str, Any]:
    """Fit ``router`` from ``run``'s entry map on ``benchmark`` (original class ids) with E0
    ``backbone``; score it on the test stream. :return: ``{"task_free", "routing",
    "memory_mb", "fit_seconds"}``."""
    import torch

    from avalanche_sdr.dataset_tensors import experience_tensors
    from avalanche_sdr.evaluation.memory import BYTES_PER_MB, TensorByteCounter

    tasks = run["sdr_results"]["tasks"]
    classes = {t: sorted(int(c) for c in exp.classes_in_this_experience)
               for t, exp in enumerate(benchmark.train_stream)}
    view = RepositoryView(backbone, {int(r["task"]): int(r["entry"]) for r in tasks}, classes)
    tick = time.perf_counter()
    for task, experience in enumerate(benchmark.train_stream):
        x, y, _ = experience_tensors(experience)
        local = torch.tensor([classes[task].index(int(v)) for v in y.tolist()])
        router.fit_features(view, task, view.batched_features(x, None), local)
    fit_seconds = time.perf_counter() - tick
    group_of_entry = {e: int(benchmark.stream_groups[t]) for e, t in view.entry_creator.items()}
    free, routing = [], []
    for position, experience in enumerate(benchmark.test_stream):
        x, y, _ = experience_tensors(experience)
        scores, units = router.scores(view, view.batched_features(x, None))
        chosen = units[scores.argmax(1)]
        free.append(float((chosen[:, 2] == y).double().mean()))
        group = int(benchmark.stream_groups[position])
        routing.append(sum(group_of_entry[int(e)] == group for e in chosen[:, 1].tolist()) / len(y))
    counter = TensorByteCounter()
    for state in router.state_modules(view):
        counter.add_module(state)
    return {"task_free": sum(free) / len(free), "routing": sum(routing) / len(routing),
            "memory_mb": counter.total / BYTES_PER_MB, "fit_seconds": fit_seconds}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.studies.closed_form.offline",
                                     description=cli.description(__doc__))
    parser.add_argument("--runs", nargs="+", required=True, type=cli.existing_dir, metavar="DIR",
                        help="harness --out folders holding sdr_task_free runs (runs/*.json, else runs.json)")
    parser.add_argument("--backbones", type=cli.existing_dir, metavar="DIR",
                        help="a harness OUT/backbones folder with E0 of the small-CNN streams' runs")
    parser.add_argument("--data-root", type=cli.existing_dir, default=None, metavar="DIR",
                        help="dataset folder of the streams that need one (emnist100, cifar10)")
    parser.add_argument("--backbone-weights", type=cli.existing_file, default=None, metavar="FILE",
                        help="E0 checkpoint of the cifar_resnet20 streams (emnist100)")
    parser.add_argument("--out", required=True, type=cli.output_dir, metavar="DIR", help="folder of the new run files")
    parser.add_argument("--threads", type=cli.positive_int, default=1, metavar="N", help="torch threads (default 1)")
    parser.add_argument("--settings", choices=SETTINGS, default=SETTINGS[0],
                        help="the router's settings: its defaults, or the klda baseline's chosen on the stream's "
                             "validation split (default: defaults)")
    return parser.parse_args(argv)


def main(args) -> List[str]:
    import torch

    from avalanche_sdr.vocabulary import ROUTER_KERNEL_LDA
    from benchmarks.studies.closed_form.table import _relative, load
    from benchmarks.table2.engine import load_backbone, make_backbone
    from benchmarks.table2.specs import RunSpec, backbone_file
    from benchmarks.table2.methods import PRESETS, STREAMS

    torch.set_num_threads(args.threads)
    written = []
    for run in load(args.runs):
        if run["method"] != "sdr_task_free":
            continue
        if "kernel_lda_fitted_after" in run:
            raise SystemExit(f"{run['run_id']} ({run['source']}) was written by this tool already; give the "
                             f"harness's run file ({run['kernel_lda_fitted_after']['from']})")
        stream, preset, seed = run["stream"], run["preset"], run["seed"]
        if STREAMS[stream].backbone == "cifar_resnet20":
            if not args.backbone_weights:
                raise SystemExit(f"{run['run_id']}: --backbone-weights is needed for {stream}")
            backbone = make_backbone(stream, args.backbone_weights)
        else:
            if not args.backbones:
                raise SystemExit(f"{run['run_id']}: --backbones is needed for {stream} (its pretrained E0)")
            path = backbone_file(stream, preset, seed, Path(args.backbones).parent)
            backbone = load_backbone(RunSpec(stream, preset, run["method"], seed, str(path)))
        root = args.data_root if STREAMS[stream].needs_data_root else None
        benchmark = STREAMS[stream].build(seed, PRESETS[preset].capped, root, original_class_ids=True)
        router = router_for(stream, args.settings)
        scored = fit_and_score(run, benchmark, backbone, router)
        out = {k: v for k, v in run.items() if k != "source"}
        out["task_free"] = dict(run["task_free"], **{ROUTER_KERNEL_LDA: {"task_free": scored["task_free"],
                                                                         "routing": scored["routing"]}})
        out["router_memory_mb"] = dict(run["router_memory_mb"], **{ROUTER_KERNEL_LDA: scored["memory_mb"]})
        out["router_fit_seconds"] = dict(run["router_fit_seconds"], **{ROUTER_KERNEL_LDA: scored["fit_seconds"]})
        out["memory_mb"] = run["memory_mb"] + scored["memory_mb"]
        out["wall_seconds"] = run["wall_seconds"] + scored["fit_seconds"]
        out["kernel_lda_fitted_after"] = {"router": router.config(), "from": _relative(run["source"]),
                                          "torch_threads": torch.get_num_threads(), "settings": args.settings}
        out["run_id"] = run["run_id"] + ("" if args.settings == "defaults" else f"_kernel_{args.settings}")
        path = Path(args.out) / "runs" / f"{out['run_id']}.json"
        cli.write_json(path, out)
        written.append(str(path))
        print(f"{out['run_id']}: kernel_lda {router.options()} task-free {100 * scored['task_free']:.2f} % "
              f"(lda_weighted {100 * run['task_free']['lda_weighted']['task_free']:.2f} %), state {scored['memory_mb']:.2f} MB, "
              f"fit {scored['fit_seconds']:.0f} s", flush=True)
    return written


__all__ = ["RepositoryView", "SETTINGS", "fit_and_score", "main", "parse_args", "router_for"]

if __name__ == "__main__":
    cli.run_cli(main, parse_args)
