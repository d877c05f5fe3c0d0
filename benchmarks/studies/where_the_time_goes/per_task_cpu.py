"""CPU seconds of each task's Avalanche ``train`` call (detection, training and, for SDR, the
entry's bookkeeping) by the task's decision, for Finetune and SDR head-only
(``sdr_two_sample_nogen``) on one harness stream, seed 0, CPU preset, one process, one torch
thread; the run's whole CPU seconds beside them. From the repository root:

    python -m benchmarks.studies.where_the_time_goes.per_task_cpu fashion10 OUT

Writes ``OUT/per_task_cpu.json``.
"""
import contextlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence

import torch

from benchmarks.table2.engine import execute_run, prepare_backbone
from benchmarks.table2.specs import RunSpec

METHODS = ("finetune", "sdr_two_sample_nogen")
"""The rows measured."""


@contextlib.contextmanager
def timed_train_calls() -> Iterator[List[float]]:
    """Within the block, every Avalanche ``train`` call appends its CPU seconds to the
    list given; Avalanche's ``BaseTemplate.train`` is restored on leaving."""
    from avalanche.training.templates import base as avalanche_base

    calls: List[float] = []
    original = avalanche_base.BaseTemplate.train

    def timed_train(self, *args, **kwargs):
        start = time.process_time()
        out = original(self, *args, **kwargs)
        calls.append(time.process_time() - start)
        return out

    avalanche_base.BaseTemplate.train = timed_train
    try:
        yield calls
    finally:
        avalanche_base.BaseTemplate.train = original


def measure(stream: str, out: Path, preset: str = "cpu", methods: Sequence[str] = METHODS) -> List[Dict[str, Any]]:
    """One record per method of ``methods``: the run's CPU seconds, its ``train`` calls' CPU
    seconds by decision (``"finetune"`` for a baseline's), its accuracy and the load before
    and after; written to ``OUT/per_task_cpu.json``."""
    out.mkdir(parents=True, exist_ok=True)
    backbone = prepare_backbone(stream, preset, 0, out, device="cpu", data_root=None)
    results = []
    for method in methods:
        spec = RunSpec(stream, preset, method, 0, backbone, "cpu", 1, None)
        load, start = os.getloadavg()[0], time.process_time()
        with timed_train_calls() as calls:
            run = execute_run(spec)
        cpu = time.process_time() - start
        tasks = run["sdr_results"]["tasks"] if "sdr_results" in run else [{"decision": "finetune"}] * len(calls)
        by_decision: Dict[str, List[float]] = {}
        for task, seconds in zip(tasks, calls):
            by_decision.setdefault(task["decision"], []).append(round(seconds, 2))
        result = dict(method=method, run_cpu_seconds=round(cpu, 1), train_calls_cpu_seconds=round(sum(calls), 1),
                      by_decision=by_decision, accuracy=run["average_accuracy"], load=[load, os.getloadavg()[0]],
                      torch_threads=torch.get_num_threads())
        print(json.dumps(result), flush=True)
        results.append(result)
    (out / "per_task_cpu.json").write_text(json.dumps(results, indent=1))
    return results


def main(argv: Optional[Sequence[str]] = None) -> None:
    argv = sys.argv[1:] if argv is None else list(argv)
    if len(argv) != 2:
        raise SystemExit("usage: python -m benchmarks.studies.where_the_time_goes.per_task_cpu STREAM OUT")
    torch.set_num_threads(1)
    measure(argv[0], Path(argv[1]))


__all__ = ["METHODS", "main", "measure", "timed_train_calls"]

if __name__ == "__main__":
    main()
