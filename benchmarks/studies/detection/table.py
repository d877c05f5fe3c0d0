"""The detection table: every decision rule on every stream, from harness runs.

Reads run JSONs written by :mod:`benchmarks.table2` (``OUT/runs/*.json`` folders, or
a ``runs.json`` list of runs) and prints, per stream, one row per SDR rule with the
mean (± sample std over seeds) of Correct / Miss / Incorrect, accuracy, memory and the
share of the run's wall time spent in detection (runs that did not record their
detection time show "–"). A compact overview table (rows = rules, columns = streams)
comes first, then the per-stream tables, then the bytes one entry costs per component.

    python -m benchmarks.studies.detection.table docs/results/detection/*/runs docs/results/table2_fashion10_cpu/runs.json
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Dict, List, Sequence

from avalanche_sdr import cli

if __name__ == "__main__":
    cli.install_warning_filters()  # before benchmarks.table2.report imports Avalanche

# benchmarks.table2.report and avalanche_sdr.evaluation import torch and Avalanche: they are
# imported by the functions that need them, after the arguments are parsed.

RULE_ROWS = ("sdr", "sdr_calibrated", "sdr_expert_gate", "sdr_two_sample", "sdr_two_sample_nogen",
             "sdr_two_sample_entry", "optimal")
"""Rows, in order: the paper's agreement rule, calibrated, Expert Gate, the two-sample
test (with and without generators), and Optimal (ground-truth decisions) for reference."""

ROW_LABELS = {
    "sdr": "paper (agreement)",
    "sdr_calibrated": "calibrated",
    "sdr_expert_gate": "Expert Gate relatedness",
    "sdr_two_sample": "two-sample test",
    "sdr_two_sample_nogen": "two-sample test, no generators",
    "sdr_two_sample_entry": "two-sample test in each entry's encoder, no generators",
    "optimal": "Optimal (oracle decisions)",
}


def read_runs(sources: Sequence[str]) -> List[Dict[str, Any]]:
    """Runs from folders of run JSONs or from ``runs.json`` lists; a later source's run
    replaces an earlier one with the same ``run_id``."""
    runs: Dict[str, Dict[str, Any]] = {}
    for source in sources:
        path = Path(source)
        if path.is_dir():
            items = [json.loads(p.read_text()) for p in sorted(path.glob("*.json"))]
        elif path.exists():
            items = json.loads(path.read_text())
        else:
            raise SystemExit(f"no such run folder or file: {source}")
        for r in items:
            if "run_id" not in r or "method" not in r:
                raise SystemExit(f"{source} holds a JSON that is not a benchmarks.table2 run (no run_id/method)")
            runs[r["run_id"]] = r
    return list(runs.values())


def _pm(values: Sequence[float], digits: int) -> str:
    from benchmarks.table2.report import mean_std

    if not values:
        return "–"
    mean, std = mean_std(values)
    return f"{mean:.{digits}f} ± {std:.{digits}f}" if len(values) > 1 else f"{mean:.{digits}f}"


def cell_values(runs: Sequence[Dict[str, Any]]) -> Dict[str, Any]:
    """Means over the runs (seeds) of one rule on one stream."""
    det = [r["detection"] for r in runs]
    share = [100 * d["detection_seconds"] / r["wall_seconds"] for d, r in zip(det, runs)
             if d.get("detection_seconds") is not None]
    return {
        "seeds": sorted(r["seed"] for r in runs),
        "correct": [100 * d["correct"] for d in det],
        "miss": [100 * d["miss"] for d in det],
        "incorrect": [100 * d["incorrect"] for d in det],
        "accuracy": [100 * r["average_accuracy"] for r in runs],
        "memory": [r["memory_mb"] for r in runs],
        "share": share,
        "wall": [r["wall_seconds"] for r in runs],
    }


def group(runs: Sequence[Dict[str, Any]]) -> Dict[str, Dict[str, List[Dict[str, Any]]]]:
    """``{stream: {method: [runs]}}`` for the SDR rows of :data:`RULE_ROWS`."""
    out: Dict[str, Dict[str, List[Dict[str, Any]]]] = {}
    for r in runs:
        if r["method"] in RULE_ROWS and r.get("detection"):
            out.setdefault(r["stream"], {}).setdefault(r["method"], []).append(r)
    return out


def overview(grouped, streams: Sequence[str]) -> str:
    """Rows = rules, columns = streams; cell "C/M/I % · acc % · MB · detection %"."""
    lines = ["| rule | " + " | ".join(streams) + " |", "|---" * (len(streams) + 1) + "|"]
    for method in RULE_ROWS:
        cells = []
        for stream in streams:
            rs = grouped.get(stream, {}).get(method)
            if not rs:
                cells.append("not run")
                continue
            v = cell_values(rs)
            mean = lambda k: sum(v[k]) / len(v[k])  # noqa: E731
            share = f"{mean('share'):.1f} %" if v["share"] else "–"
            cells.append(f"{mean('correct'):.1f}/{mean('miss'):.1f}/{mean('incorrect'):.1f} · "
                         f"{mean('accuracy'):.2f} · {mean('memory'):.2f} · {share} ({len(rs)})")
        lines.append(f"| {ROW_LABELS[method]} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def stream_table(grouped, stream: str) -> str:
    """One stream's rows with ± sample std over seeds."""
    lines = ["| rule | seeds | Correct % | Miss % | Incorrect % | Acc % | Mem MB | detection % of wall | wall s |",
             "|---|---|---|---|---|---|---|---|---|"]
    for method in RULE_ROWS:
        rs = grouped.get(stream, {}).get(method)
        if not rs:
            continue
        v = cell_values(rs)
        lines.append(f"| {ROW_LABELS[method]} | {','.join(map(str, v['seeds']))} | {_pm(v['correct'], 1)} | "
                     f"{_pm(v['miss'], 1)} | {_pm(v['incorrect'], 1)} | {_pm(v['accuracy'], 2)} | "
                     f"{_pm(v['memory'], 2)} | {_pm(v['share'], 1)} | {_pm(v['wall'], 0)} |")
    return "\n".join(lines) + "\n"


def entry_memory_table() -> str:
    """Bytes of one 2-class entry per component, for the harness's two E0 families."""
    import torch

    from avalanche_sdr.detection import ExpertGateDetector, TwoSampleDetector
    from avalanche_sdr.evaluation.memory import BYTES_PER_MB, entry_bytes
    from avalanche_sdr.models import TaskData, build_sdr_model, cifar_resnet_backbone, small_cnn_backbone

    lines = ["| E0 | adapters + BatchNorm copies | VAE (latent 16, width 32) | two-sample reference (2 classes x 100) | "
             "Expert Gate autoencoder | entry with VAE + reference | entry without generators |",
             "|---|---|---|---|---|---|---|"]
    x = torch.rand(200, 1, 28, 28)
    y = torch.arange(200) % 2
    makers = (("small CNN (32, 64, 128)", lambda: small_cnn_backbone(in_channels=1, widths=(32, 64, 128))),
              ("CIFAR-10 ResNet-20", lambda: cifar_resnet_backbone(20, in_channels=1)))
    for name, make in makers:
        sizes = {}
        for generator in ("independent", None):
            model = build_sdr_model(make(), in_channels=1, image_size=28, generator=generator, latent_dim=16,
                                    vae_width=32)
            model.create_entry(0)
            model.heads.add(0, 2)
            TwoSampleDetector().remember(model, 0, TaskData(0, x, y))
            sizes[generator] = entry_bytes(model, 0)
            adapters = sum(t.numel() * t.element_size() for m in model.encoder.entry_modules(0)
                           for t in list(m.parameters()) + list(m.buffers()))
            reference = sum(t.numel() * t.element_size() for t in model.detection_state(0).values())
            if generator is None:
                ExpertGateDetector().remember(model, 0, TaskData(0, x, y))
                gate = sum(t.numel() * t.element_size() for t in model.detection_state(0).values())
        vae = sizes["independent"] - sizes[None]
        lines.append(f"| {name} | {adapters / BYTES_PER_MB:.3f} MB | {vae / BYTES_PER_MB:.3f} MB | {reference / 1024:.1f} kB | "
                     f"{gate / 1024:.1f} kB | {sizes['independent'] / BYTES_PER_MB:.3f} MB | {sizes[None] / BYTES_PER_MB:.3f} MB |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> str:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.studies.detection.table",
                                     description=cli.description(__doc__))
    parser.add_argument("sources", nargs="+", type=cli.existing_path, metavar="SOURCE",
                        help="folders of run JSONs (a benchmarks.table2 OUT/runs) or runs.json files")
    parser.add_argument("--streams", nargs="+", default=None, metavar="STREAM",
                        help="harness streams, in the order of the overview's columns (default: as found)")
    parser.add_argument("--no-memory", action="store_true", help="skip the per-entry memory table")
    cli.add_debug_argument(parser)
    args = parser.parse_args(argv)
    grouped = group(read_runs(args.sources))
    streams = args.streams or sorted(grouped)
    parts = ["Cell: Correct/Miss/Incorrect % · accuracy % · memory MB · detection share of run time "
             "(seeds)\n\n", overview(grouped, streams)]
    for stream in streams:
        parts += [f"\n### {stream}\n\n", stream_table(grouped, stream)]
    if not args.no_memory:
        parts += ["\n### Memory of one 2-class entry (28x28 grey images)\n\n", entry_memory_table()]
    text = "".join(parts)
    print(text)
    return text


if __name__ == "__main__":
    cli.run_cli(main)
