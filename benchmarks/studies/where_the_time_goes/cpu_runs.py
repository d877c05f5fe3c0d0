"""Per-run CPU seconds through benchmarks/studies/where_the_time_goes/cost.py's measure_runs, with whatever avalanche_sdr
PYTHONPATH gives (used for the baseline worktree). argv: stream out rows(comma list method[:variant])"""
import importlib.util, sys, types, json
from pathlib import Path
import torch
torch.set_num_threads(1)
spec = importlib.util.spec_from_file_location("cost_h4", Path(__file__).resolve().parents[3] / "benchmarks" / "cost.py")
cost = importlib.util.module_from_spec(spec); spec.loader.exec_module(cost)
import avalanche_sdr, benchmarks
print(avalanche_sdr.__file__, benchmarks.__file__, flush=True)
stream, out, rows = sys.argv[1], sys.argv[2], sys.argv[3].split(",")
table = []
for r in rows:
    m, _, v = r.partition(":")
    table.append((m, v, (("reuse", v),) if v else ()))
args = types.SimpleNamespace(stream=stream, preset="cpu", seed=0, device="cpu", data_root=None, threads=1)
from pathlib import Path
runs = cost.measure_runs(args, Path(out), rows=table)
summary = [{k: r[k] for k in ("run_id", "wall_seconds", "cpu_seconds", "setup_cpu_seconds", "loadavg_before",
            "loadavg_after", "average_accuracy", "evaluated_experiences")} for r in runs]
json.dump(summary, open(Path(out) / "summary.json", "w"), indent=1)
print(json.dumps(summary, indent=1))
