"""The closed-form family as SDR's task-free router, chosen on VALIDATION splits only.

For each stream and seed: SDR (two-sample rule, no generators, head-only reuse, the
harness's CPU preset and E0) trains on the stream with original class ids, fitted with
every router (:func:`benchmarks.router_ablation.trained_model`); then, on the stream's
**validation** split (never its test split), the task-free accuracy (share of samples
given their true class id without task labels) of

- ``lda_weighted``: SDR's recommended router, as fitted during training;
- ``kernel_lda`` (:class:`~avalanche_sdr.routers.KernelLDARouter`) at every point of
  :data:`ROUTER_GRID`, refitted after the stream task by task in stream order. Exact:
  the router reads E0's features and the repository's entry map only, neither of which
  changes after a task; with the bytes of its state;
- each of those points combined with the ``"lda"`` router's concatenated term, ``(1 - a)
  log_softmax(kernel scores) + a log p_all`` over the same units, a in
  :data:`COMBINED_WEIGHTS`: not a router, the evidence whether one would help.

The choice (:func:`choose`; rules fixed before any run): the router's settings are the
grid point whose mean validation accuracy over the runs given is within
:data:`WITHIN` points of the best point's, with the fewest random features (memory
grows as D^2), then the higher mean; that router qualifies as SDR's recommended one
only where it is at least as accurate as ``lda_weighted`` on every run's validation
split (the rule that made ``lda_weighted`` the recommended router,
docs/results/task_free.md). Qualifying sets the router's defaults and its rows in the
results; making it the library's default router is a separate change.

    python -m benchmarks.studies.closed_form.router --stream fashion10 --seeds 0 --out results/closed_form_router
    python -m benchmarks.studies.closed_form.router --stream emnist100 --seeds 0 --data-root EMNIST_ROOT \\
        --backbone-weights resnet20-12fca82f.th --out results/closed_form_router

Each (stream, seed) writes ``OUT/<stream>_seed<k>.json`` (a rerun skips it); every call
then writes ``OUT/router.md`` from all the JSONs in ``OUT``.
"""
from __future__ import annotations

import argparse
import itertools
import json
import time
from pathlib import Path
from typing import Any, Dict, List, Sequence

from avalanche_sdr import cli
from benchmarks.table2.catalogue import STREAMS as STREAM_NAMES

if __name__ in ("__main__", "__mp_main__"):
    cli.install_warning_filters()  # before Avalanche is imported

ROUTER_GRID: Dict[str, tuple] = {"dim": (512, 1024, 2048), "gamma_scale": (0.25, 1.0, 4.0),
                                 "shrinkage": (1e-3, 1e-2, 1e-1)}
"""The ``"kernel_lda"`` settings compared (fixed in advance): the ``klda`` baseline's grid
(benchmarks/table2/tuning.py) with 1,024 features added between its two sizes."""

WITHIN = 0.5
"""Points of mean validation accuracy within which a grid point with fewer features is
preferred to the best one."""

COMBINED_WEIGHTS = (0.25, 0.5)
"""Weights a of the ``"lda"`` router's concatenated term combined with ``kernel_lda``'s scores."""


def grid_points() -> List[Dict[str, Any]]:
    """Every point of :data:`ROUTER_GRID`, ``dim`` varying slowest."""
    names = list(ROUTER_GRID)
    return [dict(zip(names, values)) for values in itertools.product(*(ROUTER_GRID[n] for n in names))]


def point_name(point: Dict[str, Any]) -> str:
    """``"kernel_lda D=512 gamma=0.25x s=0.001"``."""
    return f"kernel_lda D={point['dim']} gamma={point['gamma_scale']:g}x s={point['shrinkage']:g}"


def parse_args(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.studies.closed_form.router",
                                     description=cli.description(__doc__))
    parser.add_argument("--stream", nargs="+", required=True, choices=sorted(STREAM_NAMES), metavar="STREAM",
                        help=f"harness streams ({', '.join(sorted(STREAM_NAMES))})")
    parser.add_argument("--seeds", nargs="+", type=cli.seed, default=[0], metavar="SEED", help="seeds (default: 0)")
    parser.add_argument("--data-root", type=cli.existing_dir, default=None, metavar="DIR",
                        help="dataset folder of the streams that need one (emnist100, cifar10)")
    parser.add_argument("--backbone-weights", type=cli.existing_file, default=None, metavar="FILE",
                        help="E0 checkpoint of the cifar_resnet20 streams (emnist100)")
    parser.add_argument("--threads", type=cli.positive_int, default=1, metavar="N", help="torch threads (default 1)")
    parser.add_argument("--out", required=True, type=cli.output_dir, metavar="DIR",
                        help="folder of the runs' JSONs and router.md")
    args = parser.parse_args(argv)
    for stream in args.stream:
        entry = STREAM_NAMES[stream]
        if entry.needs_data_root and not args.data_root:
            parser.error(f"--stream {stream} needs --data-root")
        if entry.backbone == "cifar_resnet20" and not args.backbone_weights:
            parser.error(f"--stream {stream} needs --backbone-weights")
    return args


def _clear(model, state_name: str) -> None:
    """Remove a router's state and what is kept derived from it."""
    for key in [k for k in model.routing_states if k.startswith(f"{state_name}_")]:
        del model.routing_states[key]
    model.__dict__.pop("_kernel_lda_solved", None)


def validation_scores(model, benchmark) -> Dict[str, Any]:
    """The validation task-free accuracy (%) of ``lda_weighted`` and of every ``kernel_lda``
    point and combination (module doc), and the MB of each point's state:
    ``{"n": images, "lda_weighted": %, "points": [{point, "accuracy", "memory_mb",
    "combined": {"a": %}}]}`` (``"a"``: the weight written ``f"{a:g}"``)."""
    import torch

    from avalanche_sdr.dataset_tensors import experience_tensors
    from avalanche_sdr.evaluation.memory import BYTES_PER_MB, TensorByteCounter
    from avalanche_sdr.routers import KernelLDARouter, lda_router
    from avalanche_sdr.vocabulary import ROUTER_KERNEL_LDA, ROUTER_LDA_WEIGHTED

    with torch.no_grad():
        x, y = zip(*[experience_tensors(e)[:2] for e in benchmark.valid_stream])
        x, y = torch.cat(x), torch.cat(y)
        model.eval()
        e0 = model.batched_features(x, None)
        features = {e: model.batched_features(x, e) for e in model.entries}
        weighted = model.predict(x, ROUTER_LDA_WEIGHTED).class_ids
        _, logp_all = lda_router.lda_log_posteriors(model, e0, features)
        lda_units = {unit: k for k, unit in enumerate(lda_router.units(model))}
        training = []
        for task, experience in enumerate(benchmark.train_stream):  # E0's features once, for every point
            tx, ty, _ = experience_tensors(experience)
            ids = model.heads.class_ids(task)
            training.append((task, model.batched_features(tx, None), torch.tensor([ids.index(int(v)) for v in ty])))
        result = {"n": int(len(y)), ROUTER_LDA_WEIGHTED: 100 * float((weighted == y).double().mean()), "points": []}
        for point in grid_points():
            router = KernelLDARouter(**point)
            _clear(model, ROUTER_KERNEL_LDA)
            for task, z, local in training:
                router.fit_features(model, task, z, local)
            scores, units = router.scores(model, e0)
            accuracy = 100 * float((units[scores.argmax(1), 2] == y).double().mean())
            counter = TensorByteCounter()
            for state in router.state_modules(model):
                counter.add_module(state)
            order = torch.tensor([lda_units[(int(e), int(c))] for _, e, c in units.tolist()])
            kernel = torch.full_like(logp_all, float("-inf"))
            kernel[:, order] = scores.log_softmax(1)
            classes = torch.tensor([c for _, c in lda_router.units(model)])
            combined = {f"{a:g}": 100 * float((classes[((1 - a) * kernel + a * logp_all).argmax(1)] == y)
                                              .double().mean()) for a in COMBINED_WEIGHTS}
            result["points"].append({"point": point, "accuracy": accuracy,
                                     "memory_mb": counter.total / BYTES_PER_MB, "combined": combined})
        _clear(model, ROUTER_KERNEL_LDA)
    return result


def choose(runs: Sequence[Dict[str, Any]]) -> Dict[str, Any]:
    """The rules of the module doc over ``runs`` (:func:`validation_scores` results with
    ``"stream"`` and ``"seed"``): ``{"means": [mean % per grid point], "best": index,
    "chosen": index, "chosen_point", "per_stream": {stream: (kernel_lda %, lda_weighted %)},
    "adopted": bool}`` (per stream: means over its seeds; ``adopted``: it qualifies as the
    recommended router)."""
    streams = sorted({r["stream"] for r in runs})
    n_points = len(runs[0]["points"])

    def stream_mean(stream: str, value) -> float:
        values = [value(r) for r in runs if r["stream"] == stream]
        return sum(values) / len(values)

    means = [sum(stream_mean(s, lambda r, k=k: r["points"][k]["accuracy"]) for s in streams) / len(streams)
             for k in range(n_points)]
    best = max(range(n_points), key=lambda k: means[k])
    near = [k for k in range(n_points) if means[k] >= means[best] - WITHIN]
    chosen = min(near, key=lambda k: (runs[0]["points"][k]["point"]["dim"], -means[k]))
    per_stream = {s: (stream_mean(s, lambda r: r["points"][chosen]["accuracy"]),
                      stream_mean(s, lambda r: r["lda_weighted"])) for s in streams}
    return {"means": means, "best": best, "chosen": chosen, "chosen_point": runs[0]["points"][chosen]["point"],
            "per_stream": per_stream, "adopted": all(k >= w for k, w in per_stream.values())}


def format_report(runs: Sequence[Dict[str, Any]]) -> str:
    """``router.md``: the validation accuracy of every router variant per run, the memory of
    each ``kernel_lda`` point's state, and the choice (:func:`choose`)."""
    runs = sorted(runs, key=lambda r: (r["stream"], r["seed"]))
    decision = choose(runs)
    labels = [f"{r['stream']} seed {r['seed']} ({r['n']} images)" for r in runs]
    lines = ["Task-free accuracy (%) on the VALIDATION split (SDR two-sample, head-only reuse, CPU preset, "
             f"torch threads {runs[0]['threads']}); memory: the router's state (MB, largest run).", "",
             "| Router | " + " | ".join(labels) + " | mean | state MB |", "|---" * (len(labels) + 3) + "|",
             "| lda_weighted (recommended) | " + " | ".join(f"{r['lda_weighted']:.2f}" for r in runs)
             + f" | {sum(r['lda_weighted'] for r in runs) / len(runs):.2f} | – |"]
    for k, mean in enumerate(decision["means"]):
        mark = " (chosen)" if k == decision["chosen"] else (" (best)" if k == decision["best"] else "")
        memory = max(r["points"][k]["memory_mb"] for r in runs)
        lines.append(f"| {point_name(runs[0]['points'][k]['point'])}{mark} | "
                     + " | ".join(f"{r['points'][k]['accuracy']:.2f}" for r in runs) + f" | {mean:.2f} | {memory:.2f} |")
    chosen = decision["chosen"]
    for a in COMBINED_WEIGHTS:
        values = [r["points"][chosen]["combined"][f"{a:g}"] for r in runs]
        lines.append(f"| chosen kernel_lda + lda's concatenated term at weight {a:g} (not a router) | "
                     + " | ".join(f"{v:.2f}" for v in values) + f" | {sum(values) / len(values):.2f} | – |")
    point = decision["chosen_point"]
    lines += ["", f"Chosen settings (mean within {WITHIN} points of the best, fewest features): "
              f"dim={point['dim']}, gamma_scale={point['gamma_scale']:g}, shrinkage={point['shrinkage']:g}. "
              "Per stream (kernel_lda / lda_weighted, %): "
              + "; ".join(f"{s} {k:.2f} / {w:.2f}" for s, (k, w) in decision["per_stream"].items()) + ". "
              + ("Qualifies as the recommended router: at least as accurate as lda_weighted on every stream's "
                 "validation split." if decision["adopted"] else
                 "Does not qualify as the recommended router: below lda_weighted on the validation split of "
                 + ", ".join(s for s, (k, w) in decision["per_stream"].items() if k < w) + ".")]
    return "\n".join(lines) + "\n"


def main(args) -> str:
    import torch

    from benchmarks.router_ablation import trained_model

    torch.set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for stream in args.stream:
        for seed in args.seeds:
            path = out / f"{stream}_seed{seed}.json"
            if path.exists():
                print(f"{path}: done before, skipped", flush=True)
                continue
            tick = time.perf_counter()
            root = args.data_root if STREAM_NAMES[stream].needs_data_root else None
            model, benchmark = trained_model(stream, seed, root, args.backbone_weights, out / "work" / stream)
            trained = time.perf_counter() - tick
            result = validation_scores(model, benchmark)
            result.update(stream=stream, seed=seed, threads=torch.get_num_threads(), train_seconds=trained,
                          wall_seconds=time.perf_counter() - tick)
            cli.write_json(path, result)
            print(f"{stream} seed {seed}: lda_weighted {result['lda_weighted']:.2f} %, best kernel_lda "
                  f"{max(p['accuracy'] for p in result['points']):.2f} % ({result['wall_seconds']:.0f} s)", flush=True)
    runs = [json.loads(p.read_text()) for p in sorted(out.glob("*_seed*.json"))]
    report = format_report(runs)
    (out / "router.md").write_text(report)
    print(report)
    return report


__all__ = ["COMBINED_WEIGHTS", "ROUTER_GRID", "WITHIN", "choose", "format_report", "grid_points", "main",
           "parse_args", "point_name", "validation_scores"]

if __name__ == "__main__":
    cli.run_cli(main, parse_args)
