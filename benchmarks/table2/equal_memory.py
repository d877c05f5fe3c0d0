"""The ``--equal-memory`` rows of a harness call: ER rows sized after the first phase so
that their memory meets a reference run's (the call's other rows:
:func:`benchmarks.table2.variants.harness_variant_rows`), and the sizing's record,
``OUT/equal_memory.json``.
"""
from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from avalanche_sdr import cli
from avalanche_sdr.evaluation.memory import BYTES_PER_MB
from benchmarks.table2.engine import load_backbone, memory_mb_with_routers, prepare_backbone
from benchmarks.table2.specs import (RunSpec, backbone_file, referenced_variant, run_id, split_reference,
                                      tuned_equal_memory_variant)
from benchmarks.table2.methods import METHODS, PRESETS, SDR_ROUTER, STREAMS, size_equal_memory
from benchmarks.table2.variants import Row, equal_memory_rows
from benchmarks.table2.tuning import tuned_options


def equal_memory_targets(ref: str, protocols: Sequence[str] = ("ours",),
                         tuned: Optional[Dict[str, Dict[str, Any]]] = None, tuned_only: bool = False) -> List[Row]:
    """The ER rows sized to reference ``ref`` (``METHOD`` or ``METHOD:VARIANT``,
    :func:`split_reference`), before sizing: :func:`benchmarks.table2.variants.equal_memory_rows` of
    its method (variant ``mem_<method>``, under each protocol; ``mem_<method>_<variant>`` for
    a variant reference), then, where ``tuned`` (the ``--tune`` choices that get a
    ``[tuned]`` row, :func:`benchmarks.table2.tuning_runs.harness_tune`) has ``replay`` and the
    reference is not task-free, ER with the tuned options as its ``[tuned]`` row has them
    (variant :func:`tuned_equal_memory_variant`, ``mem_<...>_tuned``); with ``tuned_only``
    (``--tuned-only``) that row alone."""
    method, variant = split_reference(ref)
    rows = equal_memory_rows(method, protocols)
    rows = [dataclasses.replace(r, variant=referenced_variant(ref, r.variant)) for r in rows]
    tuned_variant = tuned_equal_memory_variant(ref)
    if tuned and "replay" in tuned and tuned_variant:
        rows = [] if tuned_only else rows
        rows.append(Row("replay", tuned_variant, tuned_options(tuned["replay"])))
    return rows


def equal_memory_ids(args, seed: int, tuned: Optional[Dict[str, Dict[str, Any]]] = None) -> List[str]:
    """Run ids of the ``--equal-memory`` ER rows of ``seed`` (sized or not;
    :func:`equal_memory_targets`)."""
    return [run_id(args.stream, args.preset, row.method, seed, row.variant)
            for ref in (getattr(args, "equal_memory", None) or [])
            for row in equal_memory_targets(ref, getattr(args, "protocol", None) or ["ours"], tuned,
                                            getattr(args, "tuned_only", False))]


def equal_memory_specs(args, out: os.PathLike, threads: int, log=print,
                       tuned: Optional[Dict[str, Dict[str, Any]]] = None,
                       pretrain: bool = True) -> Tuple[List[RunSpec], List[Dict[str, Any]]]:
    """``--equal-memory``: after the first phase, an ER row per reference, seed and
    protocol (and with ``tuned``, the tuned ER row; :func:`equal_memory_targets`) with its
    buffer sized so that its memory after the stream meets the reference run's
    (``OUT/runs/<reference run id>.json``, its ``memory_mb``; a reference ``METHOD:VARIANT``
    is the run of that variant row; :func:`benchmarks.table2.methods.size_equal_memory`, on the
    network the row's options give: the tuned options hold no network option, so the tuned
    row gets the ``ours`` row's size). A task-free reference (``sdr_task_free``)
    gets one class-incremental ER row (``ci_replay``, sized on the stream with the class ids)
    whose target is the reference's memory with SDR's own router only
    (:func:`memory_mb_with_routers` keeping :data:`benchmarks.table2.methods.SDR_ROUTER`).

    :param pretrain: make E0 where its file is missing (:func:`prepare_backbone`); ``False``
        (``--report-only``): never train, a seed without its E0 file gets ``no_backbone``.
    :return: the specs to run (variant ``mem_<reference>[...]``, option ``replay_mem_size``) and
        one record per row: the sizing's numbers (bytes; ``status`` ``sized``, ``capped``,
        ``infeasible`` (not run: the model alone exceeds the target), ``no_reference`` or
        ``no_backbone``) and the row's ``options``.
    """
    out = Path(out)
    protocols = getattr(args, "protocol", None) or ["ours"]
    specs, records = [], []
    for seed in args.seeds:
        benchmarks: Dict[bool, Any] = {}  # original_class_ids -> the seed's stream
        loaded: Dict[str, Any] = {}  # the seed's E0: "path", "backbone"
        for ref in args.equal_memory:
            method, variant = split_reference(ref)
            ref_id = run_id(args.stream, args.preset, method, seed, variant)
            ref_path = out / "runs" / f"{ref_id}.json"
            for row in equal_memory_targets(ref, protocols, tuned, getattr(args, "tuned_only", False)):
                record = dict(seed=seed, reference=ref, reference_run_id=ref_id,
                              run_id=run_id(args.stream, args.preset, row.method, seed, row.variant),
                              options=dict(row.options))
                if not ref_path.exists():
                    records.append(dict(record, status="no_reference", note=f"{ref_path} does not exist"))
                    continue
                target = round(memory_mb_with_routers(json.loads(ref_path.read_text()), (SDR_ROUTER,))
                               * BYTES_PER_MB)
                if not loaded:
                    path = backbone_file(args.stream, args.preset, seed, out, args.e0_references)
                    if pretrain or path.exists():
                        path = prepare_backbone(args.stream, args.preset, seed, out, device=args.device,
                                                data_root=args.data_root, weights=args.backbone_weights,
                                                references=args.e0_references)
                        loaded.update(path=path, backbone=load_backbone(
                            RunSpec(args.stream, args.preset, "replay", seed, path)))
                    else:
                        loaded.update(path=None)
                if loaded["path"] is None:
                    records.append(dict(record, status="no_backbone",
                                        note=f"{backbone_file(args.stream, args.preset, seed, out, args.e0_references)} "
                                             "does not exist"))
                    continue
                task_free = METHODS[row.method].task_free
                if task_free not in benchmarks:
                    benchmarks[task_free] = STREAMS[args.stream].build(seed, PRESETS[args.preset].capped,
                                                                       args.data_root, original_class_ids=task_free)
                sized, sizing = size_equal_memory(row, loaded["backbone"], benchmarks[task_free], target)
                record.update(sizing.as_dict(), target_mb=target / BYTES_PER_MB,
                              predicted_mb=sizing.predicted_bytes / BYTES_PER_MB)
                records.append(record)
                if log is not None:
                    log(f"equal memory {record['run_id']}: {sizing.status}: {sizing.note}")
                if sized is not None:
                    specs.append(RunSpec(args.stream, args.preset, sized.method, seed, loaded["path"], args.device,
                                         threads, args.data_root, variant=sized.variant, options=sized.options))
    return specs, records


def equal_memory_report(records: Sequence[Dict[str, Any]], out: os.PathLike) -> str:
    """Add each sized run's measured memory to its record (``measured_mb``, ``deviation``:
    measured / target - 1), write ``OUT/equal_memory.json``; return one line per record."""
    out = Path(out)
    lines = []
    for record in records:
        path = out / "runs" / f"{record['run_id']}.json"
        if record.get("mem_size") is not None and path.exists():
            measured = json.loads(path.read_text())["memory_mb"]
            record.update(measured_mb=measured, deviation=measured / record["target_mb"] - 1)
            lines.append(f"{record['run_id']}: mem_size {record['mem_size']}, measured {measured:.4f} MB against "
                         f"{record['target_mb']:.4f} MB of {record['reference_run_id']} "
                         f"({100 * record['deviation']:+.2f} %), {record['status']}")
        else:
            lines.append(f"{record['run_id']}: {record['status']}: {record.get('note', 'no run JSON')}")
    cli.write_json(out / "equal_memory.json", list(records))
    return "\n".join(lines)


__all__ = ["equal_memory_ids", "equal_memory_report", "equal_memory_specs", "equal_memory_targets"]
