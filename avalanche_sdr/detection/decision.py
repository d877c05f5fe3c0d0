"""SDR decision rule and the serialisable record of one detection.

The rule (paper §4.2): with ``b = argmax_j p(P_t = P_j)`` (distributional
consistency) and ``a = argmin_j S(j, t)`` (complexity measure) over the same
candidates, the new task is *similar* to candidate ``a`` when ``a == b`` and *new*
otherwise.

Also :func:`candidate_entries`, the entries every detector compares with.

A record holds the detection's evidence and the decision; what the strategy's reuse did
to the entry afterwards (an update, a rollback) is recorded by the reuse
(:class:`~avalanche_sdr.training.learning_reuse.ReuseRecord`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any, Mapping, Sequence

import torch

from avalanche_sdr.vocabulary import DECISIONS  # allowed values of DetectionRecord.decision

EVIDENCE_FIELDS = ("mean_elbo", "reference_elbo", "reference_elbo_std", "permuted_complexity", "p_value")
"""Optional per-candidate evidence lists of :class:`DetectionRecord` (the ELBO and
permuted-S lists: used by the calibrated rule, recorded by the VAE/NTK detector;
``p_value``: the two-sample rule's and Expert Gate's per-candidate score)."""

AGREEMENT_RULE = "agreement"
"""Name of :func:`agreement_decision` as stored in :attr:`DetectionRecord.rule`."""


def agreement_decision(
    consistency: torch.Tensor | Sequence[float],
    complexity: torch.Tensor | Sequence[float],
) -> int | None:
    """Index of the similar candidate if both votes agree, else ``None`` (new task).

    Ties are broken towards the lowest index for both votes.

    :param consistency: ``[C]`` distributional consistency ``p(P_t = P_j)`` per
        candidate (higher is more similar).
    :param complexity: ``[C]`` complexity measure ``S(j, t)`` per candidate (lower is
        more similar).
    :return: ``j`` with ``j == argmax consistency == argmin complexity``, or ``None``
        when the two disagree or there are no candidates (``C == 0``).
    :raises ValueError: if the inputs are not 1-D of the same length or hold NaN.
    """
    p = _as_float_list(consistency, "consistency")
    s = _as_float_list(complexity, "complexity")
    if len(p) != len(s):
        raise ValueError(
            f"consistency and complexity must have one value per candidate, got "
            f"{len(p)} and {len(s)}"
        )
    if not p:
        return None
    vote_p = max(range(len(p)), key=lambda j: (p[j], -j))
    vote_s = min(range(len(s)), key=lambda j: (s[j], j))
    return vote_p if vote_p == vote_s else None


def candidate_entries(model, num_classes: int, class_count_filter: bool) -> list[int]:
    """The entries a new task is compared with: all of ``model.entries``, or (with
    ``class_count_filter``) those whose creating task has ``num_classes`` classes, as a
    repeat must (tasks carry local labels 0..c-1)."""
    if not class_count_filter:
        return list(model.entries)
    return [e for e in model.entries if model.heads.num_classes(model.entry_creator[e]) == num_classes]


@dataclass
class DetectionRecord:
    """What SDR decided for one training task, and why (JSON-serialisable).

    :param task: task id (the experience's task label).
    :param decision: ``"warm_start"`` (trained as new without detection), ``"new"``
        (no similar task found) or ``"reuse"`` (mapped to an earlier entry).
    :param entry: repository entry the task maps to after the decision.
    :param reused_entry: the reused entry for ``"reuse"`` (equal to ``entry``), else
        ``None``.
    :param candidate_entries: entry ids compared against, in score order.
    :param candidate_tasks: for each candidate entry, the task that created it.
    :param consistency: ``p(P_t = P_j)`` per candidate (probabilities, sum 1).
    :param complexity: ``S(j, t)`` per candidate (dimensionless).
    :param vote_consistency: entry id of ``argmax consistency`` (``None`` if no
        candidates).
    :param vote_complexity: entry id of ``argmin complexity`` (``None`` if no
        candidates).
    :param rule: name of the decision rule used (default ``"agreement"``).
    :param detection_seconds: wall-clock seconds spent on detection.
    :param mean_elbo: per candidate, the mean ELBO of the task's inputs under the
        candidate's generator (nats per image).
    :param reference_elbo: per candidate, the mean ELBO of the candidate's generator on
        held-out inputs of its own task (nats per image; NaN if unknown).
    :param reference_elbo_std: per candidate, the standard deviation of that held-out
        per-image ELBO (nats).
    :param permuted_complexity: per candidate, the mean S of the task's features with
        randomly permuted labels (the random-label scale of S).
    :param p_value: per candidate, the rule's own score: the combined p-value of
        "this task repeats the candidate" (``"two_sample"``), or the relatedness
        (``"expert_gate"``).
    :param power: ``"two_sample"``: estimated power of the test against known-distinct
        decoys for the best candidate (``None`` when not computed).
    :param class_count_filter: candidates were restricted to entries whose creating
        task has the new task's class count.
    :param class_permutation: for a ``"reuse"`` whose classes were matched to the
        reused entry's in another order: element ``k`` is the entry's class (output of
        the entry's head, a local label of the task that created it) that the new
        task's local class ``k`` repeats. Empty: the identity (class k repeats class k).
    :param decoy_rank_pvalue: ``"small_task"`` fallback: Monte-Carlo p-value of "this
        task differs from the best candidate as the decoys do" (a reuse needs it at most
        the rule's ``beta``); ``None`` when the fallback did not decide.
    """

    task: int
    decision: str
    entry: int
    reused_entry: int | None = None
    candidate_entries: list[int] = field(default_factory=list)
    candidate_tasks: list[int] = field(default_factory=list)
    consistency: list[float] = field(default_factory=list)
    complexity: list[float] = field(default_factory=list)
    vote_consistency: int | None = None
    vote_complexity: int | None = None
    rule: str = AGREEMENT_RULE
    detection_seconds: float = 0.0
    mean_elbo: list[float] = field(default_factory=list)
    reference_elbo: list[float] = field(default_factory=list)
    reference_elbo_std: list[float] = field(default_factory=list)
    permuted_complexity: list[float] = field(default_factory=list)
    p_value: list[float] = field(default_factory=list)
    power: float | None = None
    class_count_filter: bool = False
    class_permutation: list[int] = field(default_factory=list)
    decoy_rank_pvalue: float | None = None

    def __post_init__(self) -> None:
        self.task = _as_int(self.task, "task")
        self.entry = _as_int(self.entry, "entry")
        if self.decision not in DECISIONS:
            raise ValueError(f"decision must be one of {DECISIONS}, got {self.decision!r}")
        self.reused_entry = _as_optional_int(self.reused_entry, "reused_entry")
        if self.decision == "reuse" and self.reused_entry != self.entry:
            raise ValueError(
                f"a 'reuse' decision needs reused_entry == entry ({self.entry}), "
                f"got reused_entry={self.reused_entry}"
            )
        if self.decision != "reuse" and self.reused_entry is not None:
            raise ValueError(
                f"reused_entry must be None for decision {self.decision!r}, got {self.reused_entry}"
            )
        self.candidate_entries = [_as_int(v, "candidate_entries") for v in self.candidate_entries]
        self.candidate_tasks = [_as_int(v, "candidate_tasks") for v in self.candidate_tasks]
        self.consistency = _as_float_list(self.consistency, "consistency", allow_nan=True)
        self.complexity = _as_float_list(self.complexity, "complexity", allow_nan=True)
        for name in EVIDENCE_FIELDS:
            setattr(self, name, _as_float_list(getattr(self, name), name, allow_nan=True))
        n_candidates = len(self.candidate_entries)
        for name in ("candidate_tasks", "consistency", "complexity") + EVIDENCE_FIELDS:
            values = getattr(self, name)
            if values and len(values) != n_candidates:
                raise ValueError(
                    f"{name} has {len(values)} values but there are {n_candidates} "
                    "candidate_entries; expected one per candidate (or none)"
                )
        self.vote_consistency = _as_optional_int(self.vote_consistency, "vote_consistency")
        self.vote_complexity = _as_optional_int(self.vote_complexity, "vote_complexity")
        for name in ("vote_consistency", "vote_complexity"):
            vote = getattr(self, name)
            if vote is not None and vote not in self.candidate_entries:
                raise ValueError(
                    f"{name}={vote} is not one of candidate_entries {self.candidate_entries}"
                )
        if not isinstance(self.rule, str):
            raise ValueError(f"rule must be a str, got {self.rule!r}")
        self.detection_seconds = float(self.detection_seconds)
        self.power = None if self.power is None else float(self.power)
        if not isinstance(self.class_count_filter, bool):
            raise ValueError(f"class_count_filter must be a bool, got {self.class_count_filter!r}")
        self.class_permutation = [_as_int(v, "class_permutation") for v in self.class_permutation]
        if self.class_permutation and sorted(self.class_permutation) != list(range(len(self.class_permutation))):
            raise ValueError(f"class_permutation must be a permutation of 0..c-1, got {self.class_permutation}")
        if self.class_permutation and self.decision != "reuse":
            raise ValueError(f"class_permutation is only recorded for a 'reuse', not {self.decision!r}")
        self.decoy_rank_pvalue = None if self.decoy_rank_pvalue is None else float(self.decoy_rank_pvalue)

    def to_dict(self) -> dict[str, Any]:
        """Plain-python dict (int, float, str, None, lists) that ``json.dumps`` accepts.

        Non-finite floats (e.g. an infinite complexity) are written as the strings
        ``"inf"``, ``"-inf"``, ``"nan"`` so that the output is strict JSON;
        :meth:`from_dict` reads them back.
        """
        return {
            "task": self.task,
            "decision": self.decision,
            "entry": self.entry,
            "reused_entry": self.reused_entry,
            "candidate_entries": list(self.candidate_entries),
            "candidate_tasks": list(self.candidate_tasks),
            "consistency": [json_float(v) for v in self.consistency],
            "complexity": [json_float(v) for v in self.complexity],
            "vote_consistency": self.vote_consistency,
            "vote_complexity": self.vote_complexity,
            "rule": self.rule,
            "detection_seconds": json_float(self.detection_seconds),
            **{name: [json_float(v) for v in getattr(self, name)] for name in EVIDENCE_FIELDS},
            "power": None if self.power is None else json_float(self.power),
            "class_count_filter": self.class_count_filter,
            "class_permutation": list(self.class_permutation),
            "decoy_rank_pvalue": None if self.decoy_rank_pvalue is None else json_float(self.decoy_rank_pvalue),
        }

    @classmethod
    def decided(cls, model, *, task: int, entries: Sequence[int], reused: int | None, rule: str,
                **fields: Any) -> "DetectionRecord":
        """The record of a decision over ``entries`` of ``model``: ``"reuse"`` of
        ``reused``, or ``"new"`` (``entry`` -1 until the strategy creates it) when it
        is ``None``; ``fields`` are the remaining :class:`DetectionRecord` fields."""
        return cls(
            task=int(task),
            decision="new" if reused is None else "reuse",
            entry=-1 if reused is None else reused,
            reused_entry=reused,
            candidate_entries=list(entries),
            candidate_tasks=[model.entry_creator[e] for e in entries],
            rule=rule,
            **fields,
        )

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "DetectionRecord":
        """Inverse of :meth:`to_dict` (also accepts the dict after a JSON round trip).

        :raises ValueError: on unknown or missing keys.
        """
        names = {f.name for f in fields(cls)}
        unknown = set(data) - names
        if unknown:
            raise ValueError(f"unknown DetectionRecord keys {sorted(unknown)}; expected {sorted(names)}")
        missing = {"task", "decision", "entry"} - set(data)
        if missing:
            raise ValueError(f"DetectionRecord dict lacks required keys {sorted(missing)}")
        values = dict(data)
        for name in ("consistency", "complexity") + EVIDENCE_FIELDS:
            if name in values:
                values[name] = [float(v) for v in values[name]]
        if "detection_seconds" in values:
            values["detection_seconds"] = float(values["detection_seconds"])
        for name in ("power", "decoy_rank_pvalue"):
            if values.get(name) is not None:
                values[name] = float(values[name])
        return cls(**values)


def json_float(value: float) -> float | str:
    return value if math.isfinite(value) else str(value)


def _as_int(value: Any, name: str) -> int:
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise ValueError(f"{name} must be a single integer, got a tensor of shape {tuple(value.shape)}")
        value = value.item()
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise ValueError(f"{name} must be an int, got {value!r}")
    return int(value.__index__())


def _as_optional_int(value: Any, name: str) -> int | None:
    return None if value is None else _as_int(value, name)


def _as_float_list(values: Any, name: str, allow_nan: bool = False) -> list[float]:
    if isinstance(values, torch.Tensor):
        if values.dim() != 1:
            raise ValueError(f"{name} must be 1-D (one value per candidate), got shape {tuple(values.shape)}")
        out = [float(v) for v in values.detach().cpu().tolist()]
    else:
        try:
            out = [float(v) for v in values]
        except TypeError as err:
            raise ValueError(f"{name} must be a 1-D sequence of numbers, got {values!r}") from err
    if not allow_nan and any(math.isnan(v) for v in out):
        raise ValueError(f"{name} contains NaN: {out}")
    return out


__all__ = ["DECISIONS", "AGREEMENT_RULE", "EVIDENCE_FIELDS", "DetectionRecord", "agreement_decision",
           "candidate_entries", "json_float"]
