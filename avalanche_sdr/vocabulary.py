"""The words a run's records and results files use for decisions and outcomes.

Defined once here and imported by :mod:`avalanche_sdr.detection.decision`
(:class:`~avalanche_sdr.detection.decision.DetectionRecord`),
:mod:`avalanche_sdr.evaluation.outcomes` (scoring) and
:mod:`avalanche_sdr.plots.results` (reading results files). Plain strings; this module
imports nothing, so the plots can use it without torch or Avalanche. The outcomes are
defined in :ref:`definitions` (docs/method.rst); the task-free routers in
:ref:`method-task-free`.
"""

DECISION_WARM_START = "warm_start"
"""A warm-start task: trained as new without detection, not scored."""
DECISION_NEW = "new"
"""A task detected as new: it got a new repository entry."""
DECISION_REUSE = "reuse"
"""A task detected as similar to an earlier one: it reuses that task's entry."""
DECISIONS = (DECISION_WARM_START, DECISION_NEW, DECISION_REUSE)
"""Every detection decision (``DetectionRecord.decision``, ``"decision"`` in results files)."""

CORRECT = "correct"
MISS = "miss"
INCORRECT = "incorrect"
OUTCOMES = (CORRECT, MISS, INCORRECT)
"""Every outcome of a scored task (``"outcome"`` in results files; ``null`` for
warm-start tasks)."""

DETECTORS = ("agreement", "calibrated", "two_sample", "expert_gate", "small_task")
"""The names of :data:`avalanche_sdr.detection.DETECTOR_TYPES` (whose classes say what each
detector does), for the command lines' ``--detector`` before torch is imported (a test
checks the two agree). ``DetectionRecord.decision`` is a detector's outcome (:data:`DECISIONS`)."""

REUSE_HEAD = "head"
"""The paper's reuse: a reused entry stays frozen, the repeat trains a new head of its own."""
REUSE_ACCUMULATE = "accumulate"
"""The learning reuse: a repeat keeps training the reused entry (adapters, BatchNorm
copies) and the entry's one head, through which every task mapped to it answers."""
REUSE_NO_LOSS = "no_loss"
"""The learning reuse under the keep rule: a repeat is trained head-only, then an update of
the entry is tried and kept only where held-out evidence shows no loss
(:mod:`~avalanche_sdr.training.kept_update`); otherwise the head-only result stays."""
REUSE_MODES = (REUSE_HEAD, REUSE_ACCUMULATE, REUSE_NO_LOSS)
"""Every reuse by name (:data:`avalanche_sdr.training.reuse_registry.REUSE_TYPES`, whose names a test
keeps equal to these; ``SDRStrategy(reuse=...)``, the examples' and harness's ``--reuse``)."""

ROUTER_GAUSSIAN = "gaussian"
"""SDR's first task-free router (:mod:`avalanche_sdr.routers.gaussian`)."""
ROUTER_EXPERT_GATE = "expert_gate"
"""Expert Gate's routing, the baseline router."""
ROUTER_LDA = "lda"
"""A task-free router: linear discriminant analysis over every (entry,
class) pair in E0's features and in all entries' features, from a few stored images per
class (:mod:`avalanche_sdr.routers.lda_router`)."""
ROUTER_LDA_WEIGHTED = "lda_weighted"
"""SDR's recommended task-free router: the ``"lda"`` router with the weight of its two
terms chosen on the stream's own detected repeats
(:func:`avalanche_sdr.routers.lda_router.record_repeat`); it shares the ``"lda"``
router's state."""
ROUTER_KERNEL_LDA = "kernel_lda"
"""A task-free router: the closed-form learner ``klda`` over every (entry, class) pair,
random Fourier features of E0's features and one shared-covariance LDA
(:mod:`avalanche_sdr.routers.kernel_lda`)."""
ROUTERS = (ROUTER_GAUSSIAN, ROUTER_EXPERT_GATE, ROUTER_KERNEL_LDA, ROUTER_LDA, ROUTER_LDA_WEIGHTED)
"""Every task-free router (``SDRStrategy(routers=...)``, ``model.predict(x, router)``)."""
DEFAULT_ROUTER = ROUTER_LDA_WEIGHTED
"""The router ``model.predict(x)`` and ``strategy.predict(x)`` use when none is named:
SDR's recommended ``"lda_weighted"``."""
ORACLE = "oracle"
"""The true task label as a "router": the task-aware prediction, scored beside the
routers (:class:`~avalanche_sdr.evaluation.TaskFreeMetrics`, results files)."""

__all__ = [
    "CORRECT",
    "DECISIONS",
    "DECISION_NEW",
    "DECISION_REUSE",
    "DECISION_WARM_START",
    "DEFAULT_ROUTER",
    "DETECTORS",
    "INCORRECT",
    "MISS",
    "ORACLE",
    "REUSE_ACCUMULATE",
    "REUSE_HEAD",
    "REUSE_MODES",
    "REUSE_NO_LOSS",
    "OUTCOMES",
    "ROUTERS",
    "ROUTER_EXPERT_GATE",
    "ROUTER_GAUSSIAN",
    "ROUTER_KERNEL_LDA",
    "ROUTER_LDA",
    "ROUTER_LDA_WEIGHTED",
]
