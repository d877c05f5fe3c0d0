"""Similar-task detection for SDR: the two scores and the decision rule.

* :func:`distribution_consistency` -- paper eq. 5, mean posterior responsibility of
  each candidate generator over the new task's inputs (from ELBOs, nats).
* :func:`complexity_measure` -- paper eqs. 7-8, ``S(j, t)`` from one encoder's
  features of the new task's inputs and the task's labels (ReLU NTK Gram matrix,
  Cholesky solve in float64).
* :func:`agreement_decision` -- the task is similar to candidate ``j`` when
  ``argmax p == argmin S == j``, otherwise new; :class:`DetectionRecord` stores the
  outcome in a JSON-serialisable form.
* :func:`calibrated_decision` -- the "calibrated" rule (beyond the paper): reuse
  ``argmax p`` only if its likelihood gap, consistency lift and label ratio
  (S against permuted labels, :func:`permuted_label_complexity`) pass thresholds.
* :class:`SimilarTaskDetector` -- scores a new task against every repository entry
  with the functions above and applies a decision rule.
* :class:`TwoSampleDetector` -- the ``"two_sample"`` rule (beyond the paper): a
  label-aware repeat test on E0 features with a level fixed in advance and a power
  check (optionally over every matching of the classes, :func:`bottleneck_matching`);
  needs no generators.
* :class:`ExpertGateDetector` -- the ``"expert_gate"`` baseline: Aljundi et al.'s
  autoencoder relatedness, on E0 features.

Functions on tensors and detectors over an ``SDRModel``; nothing here imports Avalanche.
"""

from .calibrated import (
    DEFAULT_THRESHOLDS,
    CalibrationThresholds,
    calibrated_decision,
    complexity_margin,
    label_ratio,
    likelihood_gap,
)
from .complexity import (
    ComplexityResult,
    complexity_measure,
    normalize_rows,
    permuted_label_complexity,
    relu_ntk_gram,
)
from .consistency import distribution_consistency
from .decision import AGREEMENT_RULE, DECISIONS, DetectionRecord, agreement_decision
from .detector import DECISION_RULES, DecisionRule, SimilarTaskDetector
from .expert_gate import DEFAULT_EXPERT_GATE, ExpertGateDetector, ExpertGateSettings
from .two_sample import (
    DEFAULT_TWO_SAMPLE,
    TwoSampleDetector,
    TwoSampleSettings,
    bonferroni,
    bottleneck_matching,
    energy_pvalue,
    hotelling_pvalue,
    random_projection,
)

__all__ = [
    "ComplexityResult",
    "complexity_measure",
    "permuted_label_complexity",
    "CalibrationThresholds",
    "DEFAULT_THRESHOLDS",
    "calibrated_decision",
    "complexity_margin",
    "label_ratio",
    "likelihood_gap",
    "normalize_rows",
    "relu_ntk_gram",
    "distribution_consistency",
    "AGREEMENT_RULE",
    "DECISIONS",
    "DetectionRecord",
    "agreement_decision",
    "DECISION_RULES",
    "DecisionRule",
    "SimilarTaskDetector",
    "DEFAULT_EXPERT_GATE",
    "ExpertGateDetector",
    "ExpertGateSettings",
    "DEFAULT_TWO_SAMPLE",
    "TwoSampleDetector",
    "TwoSampleSettings",
    "bonferroni",
    "bottleneck_matching",
    "energy_pvalue",
    "hotelling_pvalue",
    "random_projection",
]
