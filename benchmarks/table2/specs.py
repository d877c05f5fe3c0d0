"""What a harness run is and what its files are called: run specs, run ids, E0's file, the
names of the equal-memory rows, and the hooks of a probed run. Plain Python (no torch), so
that the command lines can name runs and check their arguments before anything heavy is
imported.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Tuple

from benchmarks.table2 import catalogue
from benchmarks.table2.tuning import TUNED_VARIANT


@dataclass(frozen=True)
class RunSpec:
    """One job: a method on a stream with a preset and a seed.

    ``variant`` names a run whose method gets ``options`` (``(name, value)`` pairs handed
    to the method's builder: a baseline's :class:`~avalanche_sdr.baselines.BaselineSettings`
    fields, SDR's EFT ``a`` / ``b``); ``""`` with no options is the method as the
    preset defines it. A variant is a row of its own in the table. ``split`` is the
    stream the run is scored on: ``"test"`` (every table row) or ``"valid"`` (a tuning run
    of :mod:`benchmarks.table2.tuning_runs`; baselines only; ``test_stream`` is never read).
    ``tasks`` (tuning runs only): train on the first ``tasks`` experiences of
    ``train_stream`` and score the first ``tasks`` of the validation stream; ``None``: the
    whole stream.
    """

    stream: str
    preset: str
    method: str
    seed: int
    backbone_path: str
    device: str = "cpu"
    threads: int = 0
    data_root: Optional[str] = None
    variant: str = ""
    options: Tuple[Tuple[str, Any], ...] = ()
    split: str = "test"
    tasks: Optional[int] = None

    @property
    def run_id(self) -> str:
        return run_id(self.stream, self.preset, self.method, self.seed, self.variant)


class RunProbe:
    """What a caller measures of a run beside the engine's own figures (e.g. the device
    check's throughput, placement and checkpoint, :mod:`benchmarks.table2.gpu_check`).

    A run given a probe (:func:`benchmarks.table2.engine.execute_run`) trains its tasks one
    by one, with no group curve, calling the hooks below; this base class measures nothing
    and never stops a run.
    """

    def start(self, spec: RunSpec, strategy, benchmark) -> None:
        """The strategy is built on ``benchmark``, nothing is trained yet (e.g. append a plugin)."""

    def before_task(self, index: int, experience) -> bool:
        """Called before the ``index``-th task trains; ``False``: train no further task."""
        return True

    def after_task(self, index: int, experience, strategy) -> None:
        """Called after the ``index``-th task trained."""

    def finish(self, spec: RunSpec, strategy, run: Dict[str, Any]) -> Dict[str, Any]:
        """The run is scored (``run``: the engine's result); return the keys this probe adds to it."""
        return {}


def run_id(stream: str, preset: str, method: str, seed: int, variant: str = "") -> str:
    """File stem of a run's JSON: ``<stream>_<preset>_<method>[_<variant>]_seed<seed>``."""
    return f"{stream}_{preset}_{method}{'_' + variant if variant else ''}_seed{seed}"


def pending_runs(specs: Iterable[RunSpec], runs_dir: os.PathLike) -> List[RunSpec]:
    """The specs whose run JSON does not exist yet in ``runs_dir``."""
    runs_dir = Path(runs_dir)
    return [s for s in specs if not (runs_dir / f"{s.run_id}.json").exists()]


E0_REFERENCES = ("all", "held_out")
"""What the harness pretrains E0 on (``--e0-references``): ``"all"`` (the default, every committed
harness run's E0) every warm-start training image; ``"held_out"`` the library's default flow,
``pretrain_backbone``'s default holdout (half of each warm-start class kept out as the two-sample
rule's references, recorded on E0 and kept in its file)."""


def backbone_file(stream: str, preset: str, seed: int, out_dir: os.PathLike, references: str = "all") -> Path:
    """Where :func:`benchmarks.table2.engine.prepare_backbone` keeps E0 of (stream, preset, seed),
    pretrained on ``references`` (:data:`E0_REFERENCES`; ``"held_out"`` adds ``_heldout`` to the
    name, so that a call never reuses the other kind's file)."""
    if references not in E0_REFERENCES:
        raise ValueError(f"references must be one of {E0_REFERENCES}, got {references!r}")
    suffix = "_heldout" if references == "held_out" else ""
    return Path(out_dir) / "backbones" / f"{stream}_{preset}_seed{seed}{suffix}.pt"


def split_reference(ref: str) -> Tuple[str, str]:
    """An ``--equal-memory`` reference's method and variant: ``"sdr"`` -> ``("sdr", "")``,
    ``"sdr_two_sample_nogen:accumulate"`` -> ``("sdr_two_sample_nogen", "accumulate")``
    (the run ``<stream>_<preset>_sdr_two_sample_nogen_accumulate_seed<k>``)."""
    method, _, variant = ref.partition(":")
    return method, variant


def equal_memory_variant(ref: str) -> str:
    """The variant of the ER row sized to ``ref`` (under the ``ours`` protocol): ``mem_<method>``,
    ``mem_<method>_<variant>`` for a variant reference."""
    return "mem_" + "_".join(p for p in split_reference(ref) if p)


def referenced_variant(ref: str, variant: str) -> str:
    """The variant of an ER row of :func:`benchmarks.table2.variants.equal_memory_rows` of ``ref``'s
    method (``mem_<method>[_<protocol>]``) for ``ref``: ``mem_<method>_<variant>[_<protocol>]``
    for a variant reference, else unchanged."""
    method, ref_variant = split_reference(ref)
    return equal_memory_variant(ref) + variant[len(f"mem_{method}"):] if ref_variant else variant


def tuned_equal_memory_variant(ref: str) -> Optional[str]:
    """The variant of the tuned ER row sized to ``ref`` (``--tune`` with ``replay`` tuned):
    ``mem_<...>_tuned``; ``None`` for a task-free reference (its row is ``ci_replay``, which
    has no tuning grid)."""
    if catalogue.METHODS[split_reference(ref)[0]].task_free:
        return None
    return f"{equal_memory_variant(ref)}_{TUNED_VARIANT}"


__all__ = ["E0_REFERENCES", "RunProbe", "RunSpec", "backbone_file", "equal_memory_variant", "pending_runs", "referenced_variant", "run_id",
           "split_reference", "tuned_equal_memory_variant"]
