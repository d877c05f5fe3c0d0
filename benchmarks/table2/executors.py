"""Where harness runs execute and where their results go: a local process pool (spawn
context, ``--jobs`` workers), Ray tasks (``--executor ray``) or this process; each
finished run is written to ``OUT/runs/<run id>.json`` atomically by the calling process
as it arrives, so that an interrupted call keeps every finished run and a rerun skips it.
"""
from __future__ import annotations

import json
import os
import sys
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

from avalanche_sdr import cli
from benchmarks.table2 import engine
from benchmarks.table2.specs import RunSpec, pending_runs


def _job(spec: RunSpec) -> Dict[str, Any]:
    import warnings

    # Avalanche 0.6 re-enables its DeprecationWarnings (Replay's ``update``) on every
    # call; a worker prints none of them, so the run lines stay readable.
    warnings.showwarning = lambda *args, **kwargs: None
    return engine.execute_run(spec)


def _run_line(spec: RunSpec, r: Dict[str, Any]) -> str:
    line = (f"{spec.run_id}: acc {100 * r['average_accuracy']:.2f}%  "
            f"mem {r['memory_mb']:.2f} MB  {r['wall_seconds']:.1f}s")
    if r.get("bwt") is not None:
        line += f"  bwt {100 * r['bwt']:+.2f}"
    if r["detection"]:
        d = r["detection"]
        line += (f"  correct/miss/incorrect {100 * d['correct']:.0f}/"
                 f"{100 * d['miss']:.0f}/{100 * d['incorrect']:.0f}%")
    return line


def local_results(todo: Sequence[RunSpec], jobs: int):
    """Yield ``(spec, result or exception)`` as the runs of a local process pool finish.

    Interrupted (Ctrl-C, or the consumer stops early): the queued runs are cancelled and
    the workers terminated at once; the pool's own exit would first run every queued run
    to its end, results unused.
    """
    import multiprocessing

    pool = ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn"))
    try:
        futures = {pool.submit(_job, spec): spec for spec in todo}
        for future in as_completed(futures):
            try:
                yield futures[future], future.result()
            except Exception as error:  # keep the other runs going
                yield futures[future], error
    except BaseException:  # KeyboardInterrupt, GeneratorExit
        # The runs in flight are lost anyway (this process writes the JSONs): stop their
        # workers. ProcessPoolExecutor has no public way to (before Python 3.14), and
        # shutdown() forgets its processes: take them first.
        workers = list((getattr(pool, "_processes", None) or {}).values())
        pool.shutdown(wait=False, cancel_futures=True)
        for process in workers:
            process.terminate()
        raise
    pool.shutdown()


def ray_results(todo: Sequence[RunSpec], address: Optional[str], threads: int):
    """Yield ``(spec, result or exception)`` as the runs finish on a Ray cluster.

    ``address=None`` starts a local Ray instance; otherwise ``ray.init(address=...)``
    connects to a running cluster (e.g. ``"auto"`` or ``"ray://head:10001"``). Every
    run is a Ray task asking for ``threads`` CPUs; results come back to this process,
    which writes the run JSONs, so the workers need no shared file system (they need
    this repository on their ``PYTHONPATH`` and the datasets at the same paths).
    """
    try:
        import ray
    except ImportError as err:
        raise SystemExit("--executor ray needs Ray: pip install 'avalanche-sdr[ray]'") from err
    started_here = not ray.is_initialized()
    if started_here:
        # Workers import `benchmarks` from this checkout (a cluster's nodes need it at
        # the same path, or installed).
        repo_root = str(Path(__file__).resolve().parents[2])
        ray.init(address=address, include_dashboard=False, log_to_driver=False,
                 runtime_env={"env_vars": {"PYTHONPATH": repo_root}})
    try:
        remote_job = ray.remote(num_cpus=max(1, threads))(_job)
        pending = {remote_job.remote(spec): spec for spec in todo}
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            spec = pending.pop(done[0])
            try:
                yield spec, ray.get(done[0])
            except Exception as error:  # ray.exceptions.RayTaskError wraps the run's error
                yield spec, error
    finally:
        if started_here:
            ray.shutdown()


def inline_results(todo: Sequence[RunSpec]) -> Iterator[Tuple[RunSpec, Any]]:
    """Yield ``(spec, result or exception)``, the runs executed one after the other in this
    process (tests, debugging)."""
    for spec in todo:
        try:
            yield spec, engine.execute_run(spec)
        except Exception as error:  # as the pools do: keep the other runs going
            yield spec, error


EXECUTORS = ("local", "ray", "inline")
"""Where runs execute: a local process pool (``--executor local``), Ray tasks (``--executor
ray``), or this process one run after another (``"inline"``: tests, debugging)."""


def check_executor(executor: str) -> None:
    """:raises ValueError: ``executor`` is not one of :data:`EXECUTORS`."""
    if executor not in EXECUTORS:
        raise ValueError(f"executor must be one of {', '.join(map(repr, EXECUTORS))}, got {executor!r}")


def executor_results(todo: Sequence[RunSpec], executor: str, *, jobs: int = 1,
                     ray_address: Optional[str] = None) -> Iterator[Tuple[RunSpec, Any]]:
    """Yield ``(spec, result dict or exception)`` as the runs of ``todo`` finish on
    ``executor`` (:data:`EXECUTORS`): :func:`local_results` with ``jobs`` workers,
    :func:`ray_results` (each task asking for the specs' largest thread count) or
    :func:`inline_results`. Nothing is written: the caller keeps the results."""
    check_executor(executor)
    if executor == "local":
        return local_results(todo, jobs)
    if executor == "ray":
        return ray_results(todo, ray_address, max(s.threads for s in todo))
    return inline_results(todo)


def run_all(specs: Sequence[RunSpec], out_dir: os.PathLike, jobs: int = 1, log=print,
            executor: str = "local", ray_address: Optional[str] = None) -> List[Dict[str, Any]]:
    """Execute the pending specs; return every run's dict (new and old).

    :param executor: one of :data:`EXECUTORS` (:func:`executor_results`).
    :param ray_address: Ray cluster address (``None``: start a local instance).
    Each finished run's JSON is written atomically by this process as it arrives, so a
    harness stopped by Ctrl-C or killed keeps every finished run and loses only the runs
    in flight, which the same command runs again from their start (it says how many
    runs are done and skipped). Ctrl-C also says what is kept. A line is printed on
    stdout per finished run, under a tqdm bar on stderr where stderr is a terminal.
    """
    from tqdm import tqdm

    runs_dir = Path(out_dir) / "runs"
    runs_dir.mkdir(parents=True, exist_ok=True)
    todo = pending_runs(specs, runs_dir)
    skipped = len(specs) - len(todo)
    if skipped and log is not None:
        log(f"skipping {skipped} finished run(s) found in {runs_dir}: {skipped} of {len(specs)} done, "
            f"{len(todo)} to run")
    check_executor(executor)
    if todo:
        results = executor_results(todo, executor, jobs=jobs, ray_address=ray_address)
        finished = 0
        try:
            # disable=None: no bar (no \r frames) where stderr is not a terminal.
            with tqdm(total=len(todo), desc="runs", unit="run", file=sys.stderr, disable=None) as bar:
                for spec, outcome in results:
                    if isinstance(outcome, Exception):
                        line = f"{spec.run_id}: FAILED {type(outcome).__name__}: {outcome}"
                    else:
                        cli.write_json(runs_dir / f"{spec.run_id}.json", outcome)
                        finished += 1
                        line = _run_line(spec, outcome)
                    bar.write(line, file=sys.stdout)
                    bar.update(1)
        except KeyboardInterrupt:
            if log is not None:
                log(f"interrupted: {skipped + finished} of {len(specs)} run(s) done and kept in {runs_dir}; the "
                    "same command runs the others (those in flight start again from their beginning)")
            raise
    return load_runs(runs_dir, [s.run_id for s in specs])


def load_runs(runs_dir: os.PathLike, run_ids: Optional[Sequence[str]] = None) -> List[Dict[str, Any]]:
    """Read run JSONs (those of ``run_ids`` that exist, else all) in a stable order."""
    runs_dir = Path(runs_dir)
    paths = ([runs_dir / f"{r}.json" for r in run_ids] if run_ids is not None
             else sorted(runs_dir.glob("*.json")))
    return [json.loads(p.read_text()) for p in paths if p.exists()]


__all__ = ["EXECUTORS", "check_executor", "executor_results", "inline_results", "load_runs", "local_results",
           "ray_results", "run_all"]
