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

**Route with the closed-form scores, answer with the adapted head** (``--answer``; a
second study on the same validation splits, grid fixed before its first run). A task
score is the log-sum-exp of the log-posteriors of the units (entry, class id) of the
task (its entry, its classes); the highest-scoring task is chosen (ties: the latest
task), and that task's head, on its entry's features, answers the class id. Compared
to the unit's own class id (the routers as they are). Unit log-posteriors from
(:data:`ANSWER_SCORES`):

- ``kernel``: ``kernel_lda`` at its defaults (D=2048, gamma 0.25x, shrinkage 1e-3);
- ``kernel_tuned``: ``kernel_lda`` at the ``klda`` baseline's settings chosen on the
  stream's validation split of seed 0 (``docs/results/closed_form/<stream>/tuning/``);
- ``combined``: ``(1 - a) log_softmax(kernel) + a log p_all`` with ``a`` =
  :data:`ANSWER_WEIGHT` (the ``"lda"`` router's concatenated term);
- ``combined_tuned``: the same with ``kernel_tuned``;
- ``lda_weighted``: the recommended router's own score (its chosen weight).

each answered (a) by the unit (``unit``) and (b) by the routed task's head
(``head``): 10 rows; ``lda_weighted`` by unit is the recommended router as it is.
The rule, fixed in advance: a variant qualifies for a router if it is at least as
accurate as ``lda_weighted`` on every validation split run AND above ``kernel``
answered by unit on each. Also recorded per head row: the share of samples routed to
a task that has their class (the head's answer can be right only there).

    python -m benchmarks.studies.closed_form.router --answer --stream fashion10 --seeds 0 --threads 1 \\
        --out docs/results/closed_form/router/answer

writes ``OUT/<stream>_seed<k>.json`` and ``OUT/answer.md``.
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

ANSWER_SCORES = ("kernel", "kernel_tuned", "combined", "combined_tuned", "lda_weighted")
"""The unit scores of the ``--answer`` study (module doc), in table order."""

ANSWERS = ("unit", "head")
"""How a routed sample is answered in the ``--answer`` study: the unit's class id, or the
routed task's head."""

ANSWER_WEIGHT = 0.25
"""Weight a of the concatenated term in the ``--answer`` study's combined scores (the
best weight of the kernel grid's combined rows, docs/results/closed_form.md)."""

KLDA_TUNING = Path(__file__).resolve().parents[3] / "docs" / "results" / "closed_form"
"""Where the ``klda`` baseline's chosen settings are read (``<stream>/tuning/chosen_<stream>_cpu.json``)."""


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
    parser.add_argument("--answer", action="store_true",
                        help="run the route-then-head study (module doc) instead of the kernel grid")
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


def _validation_inputs(model, benchmark) -> tuple:
    """What both studies read, computed once: the validation split's images ``x`` [N, C, H, W]
    and class ids ``y`` [N], their E0 features [N, d] and every entry's features (entry ->
    [N, D]), and per training task in stream order (task, E0 features [n, d], local labels
    [n]). The model is left in eval mode."""
    import torch

    from avalanche_sdr.dataset_tensors import experience_tensors

    with torch.no_grad():
        x, y = zip(*[experience_tensors(e)[:2] for e in benchmark.valid_stream])
        x, y = torch.cat(x), torch.cat(y)
        model.eval()
        e0 = model.batched_features(x, None)
        features = {e: model.batched_features(x, e) for e in model.entries}
        training = []
        for task, experience in enumerate(benchmark.train_stream):  # E0's features once, for every point
            tx, ty, _ = experience_tensors(experience)
            ids = model.heads.class_ids(task)
            training.append((task, model.batched_features(tx, None), torch.tensor([ids.index(int(v)) for v in ty])))
    return x, y, e0, features, training


def validation_scores(model, benchmark) -> Dict[str, Any]:
    """The validation task-free accuracy (%) of ``lda_weighted`` and of every ``kernel_lda``
    point and combination (module doc), and the MB of each point's state:
    ``{"n": images, "lda_weighted": %, "points": [{point, "accuracy", "memory_mb",
    "combined": {"a": %}}]}`` (``"a"``: the weight written ``f"{a:g}"``)."""
    import torch

    from avalanche_sdr.evaluation.memory import BYTES_PER_MB, TensorByteCounter
    from avalanche_sdr.routers import KernelLDARouter, lda_router
    from avalanche_sdr.vocabulary import ROUTER_KERNEL_LDA, ROUTER_LDA_WEIGHTED

    x, y, e0, features, training = _validation_inputs(model, benchmark)
    with torch.no_grad():
        weighted = model.predict(x, ROUTER_LDA_WEIGHTED).class_ids
        _, logp_all = lda_router.lda_log_posteriors(model, e0, features)
        lda_units = {unit: k for k, unit in enumerate(lda_router.units(model))}
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


def klda_settings(stream: str):
    """The ``klda`` baseline's settings chosen on ``stream``'s validation split (seed 0) as
    ``kernel_lda`` options, or ``None`` where its tuning file is absent."""
    path = KLDA_TUNING / stream / "tuning" / f"chosen_{stream}_cpu.json"
    if not path.exists():
        return None
    options = json.loads(path.read_text())["klda"]["options"]
    return {"dim": int(options["klda_dim"]), "gamma_scale": float(options["klda_gamma"]),
            "shrinkage": float(options["klda_shrinkage"])}


def task_scores(model, logp, table) -> tuple:
    """Task scores ``[N, T]`` (log-sum-exp of the unit log-posteriors ``logp`` [N, U] over
    each task's units) and the tasks [T] (latest first, so that ties go to the latest).

    :param table: [U, 3] int64 (task, entry, class id) of the units, ``logp``'s columns.
    """
    import torch

    tasks = sorted((t for t in model.task_to_entry if model.heads.is_trained(t)), reverse=True)
    columns = []
    for t in tasks:
        member = (table[:, 1] == model.entry_of(t)) & torch.isin(table[:, 2], torch.tensor(model.heads.class_ids(t)))
        columns.append(logp[:, member].logsumexp(1) if bool(member.any()) else torch.full_like(logp[:, 0], float("-inf")))
    return torch.stack(columns, 1), tasks


def answers(model, x, y, logp, table, features) -> Dict[str, float]:
    """The task-free accuracies (%) of unit scores ``logp`` [N, U] (units ``table`` [U, 3]):
    answered by the unit, by the routed task's head (:func:`task_scores`), and the share of
    samples routed to a task holding their class."""
    from avalanche_sdr.routers.base import heads_prediction

    unit = table[logp.argmax(1), 2]
    scores, tasks = task_scores(model, logp, table)
    choice = scores.argmax(1)
    head = heads_prediction(model, x, tasks, choice, features)
    holds = [int(c) in model.heads.class_ids(int(t)) for c, t in zip(y.tolist(), head.tasks.tolist())]
    return {"unit": 100 * float((unit == y).double().mean()), "head": 100 * float((head.class_ids == y).double().mean()),
            "head_task_has_class": 100 * sum(holds) / len(holds)}


def answer_scores(model, benchmark, stream: str) -> Dict[str, Any]:
    """The ``--answer`` study's validation accuracies (module doc): ``{"n", "variants":
    {score: {"unit": %, "head": %, "head_task_has_class": %}}, "settings": {score: options},
    "seconds": {score: s}}``."""
    import torch

    from avalanche_sdr.routers import KernelLDARouter, lda_router
    from avalanche_sdr.vocabulary import ROUTER_KERNEL_LDA

    x, y, e0, features, training = _validation_inputs(model, benchmark)
    with torch.no_grad():
        lda_table = lda_router.unit_table(model)
        logp0, logp_all = lda_router.lda_log_posteriors(model, e0, features)
        weight = lda_router.chosen_weight(model)
        lda_units = {(int(e), int(c)): k for k, (_, e, c) in enumerate(lda_table.tolist())}
        variants, settings, seconds = {}, {}, {}
        tick = time.perf_counter()
        variants["lda_weighted"] = answers(model, x, y, lda_router.weighted_scores(logp0, logp_all, weight),
                                           lda_table, features)
        settings["lda_weighted"], seconds["lda_weighted"] = {"weight": weight}, time.perf_counter() - tick
        kernels = {"kernel": {"dim": 2048, "gamma_scale": 0.25, "shrinkage": 1e-3}, "kernel_tuned": klda_settings(stream)}
        for name, point in kernels.items():
            if point is None:
                continue
            tick = time.perf_counter()
            router = KernelLDARouter(**point)
            _clear(model, ROUTER_KERNEL_LDA)
            for task, z, local in training:
                router.fit_features(model, task, z, local)
            scores, table = router.scores(model, e0)
            variants[name] = answers(model, x, y, scores.log_softmax(1), table, features)
            settings[name], seconds[name] = point, time.perf_counter() - tick
            tick = time.perf_counter()
            order = torch.tensor([lda_units[(int(e), int(c))] for _, e, c in table.tolist()])
            kernel = torch.full_like(logp_all, float("-inf"))
            kernel[:, order] = scores.log_softmax(1)
            combined = name.replace("kernel", "combined")
            variants[combined] = answers(model, x, y, (1 - ANSWER_WEIGHT) * kernel + ANSWER_WEIGHT * logp_all,
                                         lda_table, features)
            settings[combined] = dict(point, weight=ANSWER_WEIGHT)
            seconds[combined] = time.perf_counter() - tick
        _clear(model, ROUTER_KERNEL_LDA)
    return {"n": int(len(y)), "variants": variants, "settings": settings, "seconds": seconds}


def answer_qualifies(runs: Sequence[Dict[str, Any]]) -> Dict[str, bool]:
    """Per ``"<score> <answer>"`` variant: the rule of the module doc over ``runs``
    (:func:`answer_scores` results): at least ``lda_weighted`` by unit and above ``kernel``
    by unit on every run."""
    names = [f"{s} {a}" for s in ANSWER_SCORES for a in ANSWERS]
    result = {}
    for name in names:
        score, answer = name.split()
        ok = True
        for r in runs:
            v = r["variants"].get(score)
            if v is None:
                ok = False
                break
            ok &= v[answer] >= r["variants"]["lda_weighted"]["unit"] and v[answer] > r["variants"]["kernel"]["unit"]
        result[name] = bool(ok)
    return result


def format_answer_report(runs: Sequence[Dict[str, Any]]) -> str:
    """``answer.md``: the ``--answer`` study's table (validation accuracy % per run) and which
    variants qualify (:func:`answer_qualifies`)."""
    runs = sorted(runs, key=lambda r: (r["stream"], r["seed"]))
    qualifies = answer_qualifies(runs)
    labels = [f"{r['stream']} seed {r['seed']} ({r['n']} images)" for r in runs]
    lines = ["Task-free accuracy (%) on the VALIDATION split (SDR two-sample, head-only reuse, CPU preset, "
             f"torch threads {runs[0]['threads']}); in brackets, for head answers: samples routed to a task "
             "holding their class (%).", "",
             "| Unit scores | Answer | " + " | ".join(labels) + " | qualifies |", "|---" * (len(labels) + 3) + "|"]
    for score in ANSWER_SCORES:
        for answer in ANSWERS:
            cells = []
            for r in runs:
                v = r["variants"].get(score)
                if v is None:
                    cells.append("–")
                elif answer == "head":
                    cells.append(f"{v['head']:.2f} ({v['head_task_has_class']:.1f})")
                else:
                    cells.append(f"{v['unit']:.2f}")
            label = " (recommended router)" if (score, answer) == ("lda_weighted", "unit") else ""
            lines.append(f"| {score}{label} | {answer} | " + " | ".join(cells)
                         + f" | {'yes' if qualifies[f'{score} {answer}'] else 'no'} |")
    lines += ["", "Settings per run: " + "; ".join(
        f"{r['stream']} seed {r['seed']}: " + ", ".join(f"{k} {v}" for k, v in r["settings"].items()) for r in runs)
              + ".", "", "Wall seconds per run (SDR's training, then the whole run), load average (1 min) at its "
              "start and end: " + "; ".join(
                  f"{r['stream']} seed {r['seed']} {r['train_seconds']:.0f} / {r['wall_seconds']:.0f} s, load "
                  f"{r['load_start']:.1f} / {r['load_end']:.1f}" for r in runs) + "."]
    return "\n".join(lines) + "\n"


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

    torch.set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.answer:
        return run_study(args, out, answer_scores, format_answer_report, "answer.md",
                         lambda r: ", ".join(f"{k} unit {v['unit']:.2f} head {v['head']:.2f}"
                                             for k, v in r["variants"].items()))
    return run_study(args, out, lambda model, benchmark, stream: validation_scores(model, benchmark), format_report,
                     "router.md", lambda r: f"lda_weighted {r['lda_weighted']:.2f} %, best kernel_lda "
                     f"{max(p['accuracy'] for p in r['points']):.2f} %")


def run_study(args, out: Path, score, report, name: str, summary) -> str:
    """Each (stream, seed) of ``args``: SDR trained, then ``score(model, benchmark, stream)``
    (a dict) with the stream, seed, torch threads, wall seconds (training, whole run) and
    the 1-minute load average at its start and end, written to ``OUT/<stream>_seed<k>.json``
    (a rerun skips it) and summarised (``summary(result)``, one line); then ``OUT/<name>``:
    ``report`` of every such JSON in ``OUT``."""
    import os

    import torch

    from benchmarks.studies.task_free.router_ablation import trained_model

    for stream in args.stream:
        for seed in args.seeds:
            path = out / f"{stream}_seed{seed}.json"
            if path.exists():
                print(f"{path}: done before, skipped", flush=True)
                continue
            tick = time.perf_counter()
            load = os.getloadavg()[0]
            root = args.data_root if STREAM_NAMES[stream].needs_data_root else None
            model, benchmark = trained_model(stream, seed, root, args.backbone_weights, out / "work" / stream)
            trained = time.perf_counter() - tick
            result = score(model, benchmark, stream)
            result.update(stream=stream, seed=seed, threads=torch.get_num_threads(), train_seconds=trained,
                          wall_seconds=time.perf_counter() - tick, load_start=load, load_end=os.getloadavg()[0])
            cli.write_json(path, result)
            print(f"{stream} seed {seed}: {summary(result)} ({result['wall_seconds']:.0f} s)", flush=True)
    runs = [json.loads(p.read_text()) for p in sorted(out.glob("*_seed*.json"))]
    text = report(runs)
    (out / name).write_text(text)
    print(text)
    return text


__all__ = ["ANSWERS", "ANSWER_SCORES", "ANSWER_WEIGHT", "COMBINED_WEIGHTS", "KLDA_TUNING", "ROUTER_GRID", "WITHIN",
           "answer_qualifies", "answer_scores", "answers", "choose", "format_answer_report",
           "format_report", "grid_points", "klda_settings", "main", "parse_args", "point_name", "run_study", "task_scores",
           "validation_scores"]

if __name__ == "__main__":
    cli.run_cli(main, parse_args)
