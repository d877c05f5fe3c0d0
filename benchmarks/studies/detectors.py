"""The detectors of the studies that decide from ground truth the harness hands over
(never from the experience): each a :class:`~avalanche_sdr.detection.base.Detector`.

Here, not in the study modules, because those are commands whose ``--help`` and usage
errors must not import torch; a study imports this module when it runs.
"""
from __future__ import annotations

from typing import Dict, Sequence

from avalanche_sdr.detection.base import Detector
from benchmarks.table2.methods import OracleDetector


INJECTION_SEED = 0xE44
"""Base seed of the draws of :class:`ErringOracle` that choose the injected tasks and wrong
entries (:mod:`benchmarks.studies.learning_reuse.errors`)."""


class ErringOracle(Detector):
    """Ground-truth decisions (:class:`benchmarks.table2.methods.OracleDetector`), except that each
    scored task, with probability ``rate``, reuses a wrong entry (module doc).

    The draws come from a numpy Generator seeded by (:data:`INJECTION_SEED`, ``seed``, task),
    so the injected tasks do not depend on the configuration or on earlier decisions,
    only the wrong entry's choice among the candidates does.
    """

    rule = "erring_oracle"
    needs_generators = False

    def __init__(self, task_groups: Sequence[int], rate: float, seed: int):
        self.oracle = OracleDetector(task_groups)
        self.groups = [int(g) for g in task_groups]
        self.rate, self.seed = float(rate), int(seed)
        self.injected: Dict[int, int] = {}  # task -> the wrong entry it reused

    def detect(self, model, data):
        import numpy as np

        from avalanche_sdr.detection.decision import DetectionRecord

        task, num_classes = data.task, data.num_classes
        rng = np.random.default_rng([INJECTION_SEED, self.seed, int(task)])
        if rng.random() >= self.rate:
            return self.oracle.detect(model, data)
        wrong = [e for e in model.entries if self.groups[model.entry_creator[e]] != self.groups[int(task)]
                 and model.heads.num_classes(model.entry_creator[e]) == num_classes]
        if not wrong:
            return self.oracle.detect(model, data)
        entry = int(wrong[int(rng.integers(len(wrong)))])
        self.injected[int(task)] = entry
        return DetectionRecord.decided(model, task=task, entries=model.entries, reused=entry, rule=self.rule)


class AllNewDetector(Detector):
    """Declares every task new: the all-new reference (memory of one entry per task)."""

    rule = "all_new"
    needs_generators = False

    def detect(self, model, data):
        """Same contract as ``Detector.detect``; always ``"new"``."""
        from avalanche_sdr.detection import DetectionRecord

        return DetectionRecord.decided(model, task=data.task, entries=list(model.entries), reused=None,
                                       rule=self.rule)


class TruthDetector(Detector):
    """Ground-truth decisions: reuse the entry of the task's group (the first task of the
    group created it), with the true class matching (``label_matching``) of a shuffled repeat."""

    rule = "ground_truth"
    needs_generators = False

    def __init__(self, benchmark):
        self.benchmark = benchmark

    def detect(self, model, data):
        from avalanche_sdr.detection.decision import DetectionRecord

        task = data.task
        groups = self.benchmark.stream_groups
        creators = [e for e, t in model.entry_creator.items() if groups[t] == groups[int(task)]]
        reused = creators[0] if creators else None
        fields = {}
        if reused is not None:
            matching = self.benchmark.label_matching(int(task), model.entry_creator[reused])
            if matching != list(range(len(matching))):
                fields["class_permutation"] = matching
        return DetectionRecord.decided(model, task=task, entries=model.entries, reused=reused, rule=self.rule,
                                       **fields)


__all__ = ["AllNewDetector", "ErringOracle", "INJECTION_SEED", "TruthDetector"]
