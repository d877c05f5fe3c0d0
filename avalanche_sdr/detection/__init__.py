"""Similar-task detection for SDR: the two scores and the decision rules.

* :func:`distribution_consistency` (paper eq. 5) and :func:`complexity_measure`
  (eqs. 7-8): the paper's two scores of a new task against each repository entry.
* :func:`agreement_decision`: the paper's rule (reuse when both scores pick the same
  entry); :class:`DetectionRecord` stores a decision in a JSON-serialisable form.
* :func:`calibrated_decision`, :class:`TwoSampleDetector` (``"two_sample"``): rules
  beyond the paper, with evidence on their own scale or a level fixed in advance.
* :class:`ExpertGateDetector` (``"expert_gate"``): the autoencoder-relatedness baseline.
* :class:`Level` (:class:`FixedLevel`, :class:`LevelBySize`, :class:`LevelByPairedPower`, by name in
  :data:`LEVELS`):
  the two-sample test's level as a function of the task's size.
* :class:`SimilarTaskDetector`: scores a new task against every entry and applies a rule
  (:class:`AgreementDetector`, :class:`CalibratedDetector`).
* :class:`Detector`: what every detector is (the protocol the strategy relies on);
  :data:`DETECTOR_TYPES`: the detector classes by rule name.

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
from .base import Detector, FeatureRuleDetector
from .decision import AGREEMENT_RULE, DECISIONS, DetectionRecord, agreement_decision
from .detector import DECISION_RULES, AgreementDetector, CalibratedDetector, DecisionRule, SimilarTaskDetector
from .expert_gate import DEFAULT_EXPERT_GATE, ExpertGateDetector, ExpertGateSettings
from .level import LEVELS, FixedLevel, Level, LevelByPairedPower, LevelBySize, make_level
from .registry import DETECTOR_TYPES, make_detector
from .small_task import DEFAULT_SMALL_TASK, SmallTaskDetector, SmallTaskSettings
from .two_sample import (
    DEFAULT_HOLDOUT_SHARE,
    DEFAULT_TWO_SAMPLE,
    PRETRAINING_RECORD,
    PretrainingRecord,
    ReferenceHoldout,
    ReferenceWarning,
    TwoSampleDetector,
    TwoSampleSettings,
    bonferroni,
    bottleneck_matching,
    energy_pvalue,
    hotelling_pvalue,
    pretraining_record,
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
    "AgreementDetector",
    "CalibratedDetector",
    "DecisionRule",
    "Detector",
    "FeatureRuleDetector",
    "SimilarTaskDetector",
    "DETECTOR_TYPES",
    "make_detector",
    "DEFAULT_EXPERT_GATE",
    "ExpertGateDetector",
    "ExpertGateSettings",
    "DEFAULT_SMALL_TASK",
    "SmallTaskDetector",
    "SmallTaskSettings",
    "FixedLevel",
    "LEVELS",
    "Level",
    "LevelByPairedPower",
    "LevelBySize",
    "make_level",
    "DEFAULT_HOLDOUT_SHARE",
    "DEFAULT_TWO_SAMPLE",
    "PRETRAINING_RECORD",
    "PretrainingRecord",
    "ReferenceHoldout",
    "ReferenceWarning",
    "pretraining_record",
    "TwoSampleDetector",
    "TwoSampleSettings",
    "bonferroni",
    "bottleneck_matching",
    "energy_pvalue",
    "hotelling_pvalue",
    "random_projection",
]
