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
from typing import Callable, Dict, Optional, Tuple

import torch
from torch import Tensor

from avalanche_sdr.detection.complexity import complexity_measure
from avalanche_sdr.detection.consistency import distribution_consistency
from avalanche_sdr.detection.decision import DetectionRecord, agreement_decision

DecisionRule = Callable[[Tensor, Tensor], Optional[int]]

DECISION_RULES: Dict[str, DecisionRule] = {"agreement": agreement_decision}
"""Decision rules by name: ``(consistency [C], complexity [C]) -> candidate index or None``."""


class SimilarTaskDetector:
    """Scores a new task against every repository entry and decides reuse or new.

    :param rule: name of the decision rule in :data:`DECISION_RULES`
        (``"agreement"``: the paper's rule, reuse when argmax p == argmin S).
    :param prior: mixing weights π_j of eq. 5: ``"uniform"`` (π_j = 1/C, default) or
        ``"tasks"`` (π_j proportional to the number of tasks mapped to entry j).
    :param elbo_samples: Monte-Carlo samples per ELBO evaluation.
    :param max_samples: use at most this many training samples of the new task
        (the first ones of the experience; ``None``: all, as in the paper).
    :param batch_size: batch size for feature and ELBO evaluation.
    :param jitter: initial relative diagonal jitter of the Cholesky solve in S.
    """

    def __init__(
        self,
        *,
        rule: str = "agreement",
        prior: str = "uniform",
        elbo_samples: int = 1,
        max_samples: Optional[int] = None,
        batch_size: int = 256,
        jitter: float = 1e-6,
    ):
        if rule not in DECISION_RULES:
            raise ValueError(f"unknown decision rule {rule!r}; available: {sorted(DECISION_RULES)}")
        if prior not in ("uniform", "tasks"):
            raise ValueError(f"prior must be 'uniform' or 'tasks', got {prior!r}")
        self.rule = rule
        self.prior = prior
        self.elbo_samples = int(elbo_samples)
        self.max_samples = max_samples
        self.batch_size = int(batch_size)
        self.jitter = float(jitter)

    def _log_prior(self, model) -> Optional[Tensor]:
        if self.prior == "uniform":
            return None
        counts = torch.zeros(model.num_entries, dtype=torch.float64)
        for entry in model.task_to_entry.values():
            counts[entry] += 1
        return torch.log(counts / counts.sum())

    @torch.no_grad()
    def score(self, model, x: Tensor, y: Tensor, num_classes: int) -> Tuple[Tensor, Tensor]:
        """Consistency p [C] and complexity S [C] of a task's data against every entry.

        :param model: the :class:`~avalanche_sdr.models.SDRModel` repository.
        :param x: [n, C, H, W] training inputs of the new task, in [0, 1].
        :param y: [n] local labels 0..num_classes-1.
        :param num_classes: c, the number of classes of the new task.
        :return: (p [C] float64 summing to 1, S [C] float64), in entry order.
        """
        if self.max_samples is not None:
            x, y = x[: self.max_samples], y[: self.max_samples]
        device = next(model.parameters()).device
        was_training = model.training
        model.eval()
        log_lik = torch.empty(x.shape[0], model.num_entries, dtype=torch.float64)
        complexity = torch.empty(model.num_entries, dtype=torch.float64)
        try:
            for j, entry in enumerate(model.entries):
                feats, ll = [], []
                for i in range(0, x.shape[0], self.batch_size):
                    xb = x[i : i + self.batch_size].to(device)
                    feats.append(model.features(xb, entry).double().cpu())
                    elbos = model.generators.elbo(xb, entry, n_samples=self.elbo_samples)
                    ll.append(elbos.double().cpu())
                log_lik[:, j] = torch.cat(ll)
                complexity[j] = complexity_measure(
                    torch.cat(feats), y, num_classes=num_classes, jitter=self.jitter
                )
        finally:
            model.encoder.set_active(None)
            model.train(was_training)
        consistency = distribution_consistency(log_lik, self._log_prior(model))
        return consistency, complexity

    def detect(self, model, task: int, x: Tensor, y: Tensor, num_classes: int) -> DetectionRecord:
        """Score task ``task`` against the repository and decide (no model change).

        :return: a :class:`DetectionRecord` with ``decision`` "new" or "reuse";
            ``entry`` is the reused entry, or -1 for "new" until the strategy
            creates the entry.
        """
        start = time.perf_counter()
        consistency, complexity = self.score(model, x, y, num_classes)
        choice = DECISION_RULES[self.rule](consistency, complexity)
        entries = model.entries
        reused = None if choice is None else entries[choice]
        return DetectionRecord(
            task=int(task),
            decision="new" if reused is None else "reuse",
            entry=-1 if reused is None else reused,
            reused_entry=reused,
            candidate_entries=list(entries),
            candidate_tasks=[model.entry_creator[e] for e in entries],
            consistency=[float(v) for v in consistency],
            complexity=[float(v) for v in complexity],
            vote_consistency=entries[int(torch.argmax(consistency))],
            vote_complexity=entries[int(torch.argmin(complexity))],
            rule=self.rule,
            detection_seconds=time.perf_counter() - start,
        )


__all__ = ["SimilarTaskDetector", "DECISION_RULES", "DecisionRule"]
