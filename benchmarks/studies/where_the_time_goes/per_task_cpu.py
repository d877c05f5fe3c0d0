"""CPU seconds of each task's Avalanche ``train`` call (detection, training and, for SDR, the
entry's bookkeeping) by the task's decision, for Finetune and SDR head-only
(``sdr_two_sample_nogen``) on one harness stream, seed 0, CPU preset, one process, one torch
thread; the run's whole CPU seconds beside them.
Run from the repository root: python docs/results/where_the_time_goes/per_task_cpu.py fashion10 OUT"""
import json
import os
import sys
import time
from pathlib import Path

import torch
from avalanche.training.templates import base as avalanche_base

from benchmarks.table2.engine import execute_run, prepare_backbone
from benchmarks.table2.specs import RunSpec

torch.set_num_threads(1)
calls = []
_train = avalanche_base.BaseTemplate.train


def timed_train(self, *args, **kwargs):
    start = time.process_time()
    out = _train(self, *args, **kwargs)
    calls.append(time.process_time() - start)
    return out


avalanche_base.BaseTemplate.train = timed_train

if __name__ == "__main__":
    stream, out = sys.argv[1], Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    backbone = prepare_backbone(stream, "cpu", 0, out, device="cpu", data_root=None)
    results = []
    for method in ("finetune", "sdr_two_sample_nogen"):
        calls.clear()
        spec = RunSpec(stream, "cpu", method, 0, backbone, "cpu", 1, None)
        load, start = os.getloadavg()[0], time.process_time()
        run = execute_run(spec)
        cpu = time.process_time() - start
        tasks = run["sdr_results"]["tasks"] if "sdr_results" in run else [{"decision": "finetune"}] * len(calls)
        by_decision = {}
        for task, seconds in zip(tasks, calls):
            by_decision.setdefault(task["decision"], []).append(round(seconds, 2))
        result = dict(method=method, run_cpu_seconds=round(cpu, 1), train_calls_cpu_seconds=round(sum(calls), 1),
                      by_decision=by_decision, accuracy=run["average_accuracy"], load=[load, os.getloadavg()[0]],
                      torch_threads=torch.get_num_threads())
        print(json.dumps(result), flush=True)
        results.append(result)
    (out / "per_task_cpu.json").write_text(json.dumps(results, indent=1))
