"""Similar-task detection against a knowledge repository (paper §4.2, Algorithm 1).

Given a new task's training data D_t and the repository's C unique entries, the
detector computes, *without training anything*:

- p(P_t = P_j) for every entry j (eq. 5): the mean posterior of entry j under a
  mixture whose components are the entries' VAEs, log p(x|φ_j) ≈ ELBO_j(x);
- S(j, t) for every entry j (eqs. 7–8): the complexity measure of D_t's labels on the
  features of the entry's encoder E_j;

and applies a decision rule to the two score vectors. Entries are the unit of
comparison: a task that reused an entry adds no candidate of its own.
"""
from __future__ import annotations

import time
from typing import Callable, Dict, List, Mapping, Optional, Tuple

import torch
from torch import Tensor

from avalanche_sdr._batching import check_batch_size, eval_batch_size
from avalanche_sdr._checks import check_int
from avalanche_sdr.detection.calibrated import (
    DEFAULT_THRESHOLDS,
    CalibrationThresholds,
    calibrated_decision,
)
from avalanche_sdr.detection.base import Detector
from avalanche_sdr.detection.complexity import permuted_label_complexity
from avalanche_sdr.detection.consistency import distribution_consistency
from avalanche_sdr.detection.decision import DetectionRecord, agreement_decision, candidate_entries
from avalanche_sdr.models.task_data import TaskData

Evidence = Mapping[str, List[float]]
"""Per-candidate evidence lists: ``consistency``, ``complexity``, ``mean_elbo``,
``reference_elbo``, ``reference_elbo_std``, ``permuted_complexity``."""

DecisionRule = Callable[[Evidence, CalibrationThresholds], Optional[int]]


def _agreement_rule(evidence: Evidence, thresholds: CalibrationThresholds) -> Optional[int]:
    return agreement_decision(evidence["consistency"], evidence["complexity"])


def _calibrated_rule(evidence: Evidence, thresholds: CalibrationThresholds) -> Optional[int]:
    return calibrated_decision(**evidence, thresholds=thresholds)


DECISION_RULES: Dict[str, DecisionRule] = {"agreement": _agreement_rule, "calibrated": _calibrated_rule}
"""Decision rules by name: ``(evidence, thresholds) -> candidate index or None``.
``"agreement"``: the paper's rule (argmax p == argmin S); ``"calibrated"``:
:func:`~avalanche_sdr.detection.calibrated.calibrated_decision` (thresholds used only by it)."""


class SimilarTaskDetector(Detector):
    """Scores a new task against every repository entry and decides reuse or new.

    The rules by name: :class:`AgreementDetector` (``"agreement"``) and
    :class:`CalibratedDetector` (``"calibrated"``) fix ``rule``.

    :param rule: name of the decision rule in :data:`DECISION_RULES`
        (``"agreement"``: the paper's rule, reuse when argmax p == argmin S).
    :param prior: mixing weights π_j of eq. 5: ``"uniform"`` (π_j = 1/C, default) or
        ``"tasks"`` (π_j proportional to the number of tasks mapped to entry j).
    :param elbo_samples: Monte-Carlo samples per ELBO evaluation.
    :param max_samples: use at most this many training samples of the new task
        (the first ones of the experience; ``None``: all, as in the paper).
    :param batch_size: batch size for feature and ELBO evaluation; ``None``: chosen for the
        model's device (:func:`~avalanche_sdr._batching.eval_batch_size`).
    :param jitter: initial relative diagonal jitter of the Cholesky solve in S.
    :param thresholds: thresholds of the ``"calibrated"`` rule (``None``:
        :data:`~avalanche_sdr.detection.calibrated.DEFAULT_THRESHOLDS`); refused with
        another rule, which does not read them.
    :param n_permutations: label permutations per candidate for the random-label
        scale of S (recorded for every rule; used by ``"calibrated"``). They use a
        private RNG seeded with the task id, so the global RNG is not advanced.
    :param class_count_filter: score only the entries whose creating task has the new
        task's class count (a repeat has the same label-set size); off by default (the
        paper compares with every entry). Recorded in the detection record.
    """

    needs_generators = True
    rule = ""  # set per object (the rule argument), or fixed by a subclass

    def __init__(
        self,
        *,
        rule: str = "agreement",
        prior: str = "uniform",
        elbo_samples: int = 1,
        max_samples: Optional[int] = None,
        batch_size: Optional[int] = None,
        jitter: float = 1e-6,
        thresholds: Optional[CalibrationThresholds] = None,
        n_permutations: int = 8,
        class_count_filter: bool = False,
    ):
        if rule not in DECISION_RULES:
            raise ValueError(f"unknown decision rule {rule!r}; available: {sorted(DECISION_RULES)}")
        if prior not in ("uniform", "tasks"):
            raise ValueError(f"prior must be 'uniform' or 'tasks', got {prior!r}")
        self.rule = rule
        self.prior = prior
        self.elbo_samples = int(elbo_samples)
        self.max_samples = max_samples
        self.batch_size = check_batch_size(batch_size)
        self.jitter = float(jitter)
        if thresholds is not None and rule != "calibrated":
            raise ValueError(f"thresholds have no effect with the {rule!r} rule (only 'calibrated' reads them); "
                             "remove them")
        thresholds = DEFAULT_THRESHOLDS if thresholds is None else thresholds
        if not isinstance(thresholds, CalibrationThresholds):
            raise TypeError(f"thresholds must be a CalibrationThresholds, got {type(thresholds).__name__}")
        self.thresholds = thresholds
        self.n_permutations = check_int(n_permutations, "n_permutations")
        self.class_count_filter = bool(class_count_filter)

    def candidates(self, model, num_classes: int) -> List[int]:
        """Entries scored (:func:`~avalanche_sdr.detection.decision.candidate_entries`)."""
        return candidate_entries(model, num_classes, self.class_count_filter)

    def config(self) -> Dict[str, object]:
        """Everything that changes this detector's decisions (JSON-safe)."""
        return dict(rule=self.rule, thresholds=self.thresholds.to_dict(), prior=self.prior,
                    elbo_samples=self.elbo_samples, max_detection_samples=self.max_samples,
                    detection_batch_size=self.batch_size, jitter=self.jitter,
                    class_count_filter=self.class_count_filter)

    def _log_prior(self, model, entries: List[int]) -> Optional[Tensor]:
        if self.prior == "uniform":
            return None
        position = {e: i for i, e in enumerate(entries)}
        counts = torch.zeros(len(entries), dtype=torch.float64)
        for entry in model.task_to_entry.values():
            if entry in position:
                counts[position[entry]] += 1
        return torch.log(counts / counts.sum())

    def score(self, model, x: Tensor, y: Tensor, num_classes: int) -> Tuple[Tensor, Tensor]:
        """Consistency p [C] and complexity S [C] of a task's data against every entry.

        :param model: the :class:`~avalanche_sdr.models.SDRModel` repository.
        :param x: [n, C, H, W] training inputs of the new task, in [0, 1].
        :param y: [n] local labels 0..num_classes-1.
        :param num_classes: c, the number of classes of the new task.
        :return: (p [C] float64 summing to 1, S [C] float64), in entry order.
        """
        evidence = self.evidence(model, x, y, num_classes)
        return (torch.tensor(evidence["consistency"], dtype=torch.float64),
                torch.tensor(evidence["complexity"], dtype=torch.float64))

    @torch.no_grad()
    def evidence(self, model, x: Tensor, y: Tensor, num_classes: int, task: int = 0) -> Dict[str, List[float]]:
        """Every per-entry score the decision rules use (lists in entry order).

        ``consistency`` p (eq. 5), ``complexity`` S (eqs. 7-8), ``mean_elbo`` (mean
        per-image ELBO of the task under each entry's generator, nats),
        ``reference_elbo`` / ``reference_elbo_std`` (each generator's held-out ELBO
        on its own task, nats; NaN if unknown) and ``permuted_complexity`` (mean S
        over ``n_permutations`` label permutations, RNG seeded with ``task``).
        Arguments as :meth:`score`.
        """
        if self.max_samples is not None:
            x, y = x[: self.max_samples], y[: self.max_samples]
        device = next(model.parameters()).device
        was_training = model.training
        model.eval()
        entries = self.candidates(model, num_classes)
        log_lik = torch.empty(x.shape[0], len(entries), dtype=torch.float64)
        complexity, permuted, references = [], [], []
        try:
            for j, entry in enumerate(entries):
                feats, ll = [], []
                step = eval_batch_size(device, self.batch_size)
                for i in range(0, x.shape[0], step):
                    xb = x[i : i + step].to(device)
                    feats.append(model.features(xb, entry).double().cpu())
                    elbos = model.generators.elbo(xb, entry, n_samples=self.elbo_samples)
                    ll.append(elbos.double().cpu())
                log_lik[:, j] = torch.cat(ll)
                rng = torch.Generator().manual_seed(int(task))
                value, perm_values = permuted_label_complexity(
                    torch.cat(feats), y, num_classes=num_classes, n_permutations=self.n_permutations,
                    generator=rng, jitter=self.jitter,
                )
                complexity.append(value)
                permuted.append(sum(perm_values) / len(perm_values))
                references.append(model.generators.reference_elbo(entry))
        finally:
            model.encoder.set_active(None)
            model.train(was_training)
        consistency = (distribution_consistency(log_lik, self._log_prior(model, entries)) if entries
                       else torch.empty(0, dtype=torch.float64))
        return {
            "consistency": [float(v) for v in consistency],
            "complexity": complexity,
            "mean_elbo": [float(v) for v in log_lik.mean(dim=0)],
            "reference_elbo": [r[0] for r in references],
            "reference_elbo_std": [r[1] for r in references],
            "permuted_complexity": permuted,
        }

    def detect(self, model, data: TaskData) -> DetectionRecord:
        """Score the task of ``data`` against the repository and decide (no model change).

        :return: a :class:`DetectionRecord` with ``decision`` "new" or "reuse";
            ``entry`` is the reused entry, or -1 for "new" until the strategy
            creates the entry.
        """
        start = time.perf_counter()
        task, num_classes = data.task, data.num_classes
        evidence = self.evidence(model, data.x, data.y, num_classes, task=task)
        choice = DECISION_RULES[self.rule](evidence, self.thresholds)
        consistency, complexity = evidence["consistency"], evidence["complexity"]
        entries = self.candidates(model, num_classes)
        reused = None if choice is None else entries[choice]
        return DetectionRecord.decided(
            model, task=task, entries=entries, reused=reused, rule=self.rule,
            consistency=consistency,
            complexity=complexity,
            vote_consistency=entries[max(range(len(consistency)), key=lambda j: (consistency[j], -j))] if entries else None,
            vote_complexity=entries[min(range(len(complexity)), key=lambda j: (complexity[j], j))] if entries else None,
            detection_seconds=time.perf_counter() - start,
            mean_elbo=evidence["mean_elbo"],
            reference_elbo=evidence["reference_elbo"],
            reference_elbo_std=evidence["reference_elbo_std"],
            permuted_complexity=evidence["permuted_complexity"],
            class_count_filter=self.class_count_filter,
        )

    # ------------------------------------------------------------------ how a record reads
    def scores(self, record: DetectionRecord) -> str:
        """``T<j>:p=..,S=..`` per candidate: consistency p and complexity S."""
        return " ".join(f"T{t}:p={p:.2f},S={s:.3f}"
                        for t, p, s in zip(record.candidate_tasks, record.consistency, record.complexity))

    def legend(self) -> List[str]:
        """The p and S scores, and the rule."""
        lines = [
            "    Tj:p=..,S=..      scores against the entry made by task j:",
            "                      p = consistency p(P_t = P_j), how likely t's images are under",
            "                      j's generator (the p of all entries sum to 1; higher = more alike)",
            "                      S = complexity S(j,t) of t's labels on j's features (lower = more",
            "                      alike)",
        ]
        if self.rule == "agreement":
            return lines + ["                      rule: reuse the entry when argmax p and argmin S agree"]
        return lines + ["                      rule (calibrated): reuse when the votes agree and t's images",
                        "                      are as likely under those entries' VAEs as their own held-out images"]

    def nearest_entry(self, record: DetectionRecord) -> Optional[int]:
        """The complexity vote: the entry with the lowest S(j, t)."""
        return record.vote_complexity


class AgreementDetector(SimilarTaskDetector):
    """The paper's rule, ``"agreement"``: reuse an entry when argmax p == argmin S
    (options: those of :class:`SimilarTaskDetector`, no ``thresholds``)."""

    rule = "agreement"

    def __init__(self, *, prior: str = "uniform", elbo_samples: int = 1, max_samples: Optional[int] = None,
                 batch_size: Optional[int] = None, jitter: float = 1e-6, n_permutations: int = 8,
                 class_count_filter: bool = False):
        super().__init__(rule="agreement", prior=prior, elbo_samples=elbo_samples, max_samples=max_samples,
                         batch_size=batch_size, jitter=jitter, n_permutations=n_permutations,
                         class_count_filter=class_count_filter)


class CalibratedDetector(SimilarTaskDetector):
    """The ``"calibrated"`` rule (:func:`~avalanche_sdr.detection.calibrated.calibrated_decision`)
    with ``thresholds`` (default :data:`~avalanche_sdr.detection.calibrated.DEFAULT_THRESHOLDS`,
    set on Fashion-MNIST); other options: those of :class:`SimilarTaskDetector`."""

    rule = "calibrated"

    def __init__(self, *, thresholds: CalibrationThresholds = DEFAULT_THRESHOLDS, prior: str = "uniform",
                 elbo_samples: int = 1, max_samples: Optional[int] = None, batch_size: Optional[int] = None,
                 jitter: float = 1e-6, n_permutations: int = 8, class_count_filter: bool = False):
        super().__init__(rule="calibrated", thresholds=thresholds, prior=prior, elbo_samples=elbo_samples,
                         max_samples=max_samples, batch_size=batch_size, jitter=jitter,
                         n_permutations=n_permutations, class_count_filter=class_count_filter)


__all__ = ["AgreementDetector", "CalibratedDetector", "SimilarTaskDetector", "DECISION_RULES", "DecisionRule",
           "Evidence"]
