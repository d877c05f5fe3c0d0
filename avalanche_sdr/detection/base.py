"""What every detector is: the :class:`Detector` protocol the strategy relies on.

A detector decides, before a new task trains, whether it repeats an entry of the
repository (``detect``), keeps what it needs of each new entry (``remember``), takes
note of what E0 was pretrained on (``use_pretraining``), and says how it reads: its
rule's name, whether it scores with the entries' generators, the configuration that
changes its decisions (recorded in results and checkpoints), its scores in the
one-line report of a task, the legend of those scores, and the entry a new task's
adapters start from with forward transfer. The strategy knows a detector by this
protocol alone, so a new detector is one class: pass an instance as
``SDRStrategy(detector=...)``, or add its class to
:data:`~avalanche_sdr.detection.registry.DETECTOR_TYPES` to reach it by name.
"""
from __future__ import annotations

import abc
from typing import Any, Dict, List, Optional, Sequence

import torch

from avalanche_sdr._batching import check_batch_size
from avalanche_sdr.detection.decision import DetectionRecord, candidate_entries
from avalanche_sdr.models.task_data import TaskData


class Detector(abc.ABC):
    """A similar-task detector (module doc).

    Subclasses set :attr:`rule` and :attr:`needs_generators` (class attributes, or
    properties) and implement :meth:`detect`; the other methods have defaults that suit
    a rule whose per-candidate score is ``DetectionRecord.p_value`` (higher: more alike).
    """

    @property
    @abc.abstractmethod
    def rule(self) -> str:
        """The rule's name, stored as :attr:`DetectionRecord.rule <avalanche_sdr.detection.DetectionRecord>`."""

    @property
    @abc.abstractmethod
    def needs_generators(self) -> bool:
        """Whether the rule scores entries with their generators: the repository must then
        keep one per entry (``from_benchmark`` builds it with ``generator="independent"``;
        a repository without them is refused); ``False``: it reads none, and
        ``from_benchmark`` builds none."""

    remember_after_training: bool = False
    """``True``: :meth:`remember` is called for a new entry after its training (its state
    is read through the trained entry); ``False``: when the entry is created, before
    training."""

    @abc.abstractmethod
    def detect(self, model, data: TaskData) -> DetectionRecord:
        """Score the task of ``data`` against the repository and decide, changing nothing.

        :param model: the repository (:class:`~avalanche_sdr.models.SDRModel`).
        :param data: the task's training data (images, local labels 0..c-1, class ids,
            E0's features computed once).
        :return: a :class:`DetectionRecord` with ``decision`` ``"new"`` (``entry`` -1
            until the strategy creates it) or ``"reuse"``
            (:meth:`DetectionRecord.decided <avalanche_sdr.detection.DetectionRecord.decided>`).
        """

    def remember(self, model, entry: int, data: TaskData) -> None:
        """Keep what the rule needs of the new ``entry`` created by the task of ``data``
        (e.g. reference features, in ``model.set_detection_state``). Default: nothing."""

    def use_pretraining(self, record) -> None:
        """Take note of what E0 was pretrained on. The strategy calls it once, when it is
        built, with the :class:`~avalanche_sdr.detection.two_sample.PretrainingRecord` of
        its repository's E0 (:func:`~avalanche_sdr.training.pretrain_backbone` leaves one;
        :func:`~avalanche_sdr.detection.two_sample.pretraining_record` reads it), or
        ``None`` when E0 carries none. A rule whose decisions depend on which images E0
        was trained on overrides it (the two-sample rule takes the warm-start entries'
        references from the images E0 was pretrained without). Default: nothing.

        :param record: a ``PretrainingRecord``, or ``None``.
        """

    def config(self) -> Dict[str, Any]:
        """Everything that changes this detector's decisions (JSON-safe): recorded in the
        results and compared when a checkpoint is resumed. Default: ``{"rule": rule}``."""
        return {"rule": self.rule}

    # ------------------------------------------------------------------ how a record reads
    score_name: str = "p"
    """The name of the per-candidate score ``p_value`` in :meth:`scores` and :meth:`legend`."""

    def scores(self, record: DetectionRecord) -> str:
        """The record's scores in the task's one-line report (``[SDR] task t: ... [<scores>]``):
        ``T<j>:<score_name>=<p_value>`` per candidate (j: the task that created it), then
        ``power=..`` where the record has one."""
        text = " ".join(f"T{t}:{self.score_name}={v:.3g}" for t, v in zip(record.candidate_tasks, record.p_value))
        if record.power is not None:
            text += f" power={record.power:.2f}"
        return text

    def legend(self) -> List[str]:
        """How to read :meth:`scores`: lines of the command-line legend
        (:func:`avalanche_sdr.cli.output_legend`), each indented by 4 spaces with the
        explanation from column 22."""
        return [f"    Tj:{self.score_name}=..{' ' * (14 - len(self.score_name))}the {self.rule} rule's score of task t "
                "against the entry made by task j",
                "                      (higher = more alike)"]

    def nearest_entry(self, record: DetectionRecord) -> Optional[int]:
        """The entry a new task's adapters start from with forward transfer: the candidate
        with the highest score (``p_value``; ties: the first), ``None`` without scores."""
        if record.p_value:
            best = max(range(len(record.p_value)), key=lambda i: (record.p_value[i], -i))
            return record.candidate_entries[best]
        return None


class FeatureRuleDetector(Detector):
    """What the detectors that decide from encoder features alone, without
    generators, share (:class:`~avalanche_sdr.detection.two_sample.TwoSampleDetector`,
    :class:`~avalanche_sdr.detection.expert_gate.ExpertGateDetector`): the settings'
    type check, the candidate filter, the choice of the best-scoring candidate and the
    features kept from the last ``detect``.

    Subclasses set ``rule`` (the name stored in :attr:`DetectionRecord.rule`) and
    ``settings_type`` (a frozen settings dataclass with a bool ``class_count_filter``),
    and their ``detect`` stores ``(task, features, ...)`` in ``self._last``.

    :param settings: an instance of ``settings_type``.
    :param batch_size: batch size of the feature pass (images); ``None``: chosen for the
        model's device (:func:`~avalanche_sdr._batching.eval_batch_size`).
    :raises TypeError: if ``settings`` is not one.
    :raises ValueError: if ``batch_size`` is not ``None`` or a positive int.
    """

    settings_type: type
    needs_generators = False

    def __init__(self, settings, batch_size: Optional[int] = None) -> None:
        if not isinstance(settings, self.settings_type):
            name = self.settings_type.__name__
            article = "an" if name[0] in "AEIOU" else "a"
            raise TypeError(f"settings must be {article} {name}, got {type(settings).__name__}")
        self.settings = settings
        self.batch_size = check_batch_size(batch_size)
        self._last: Optional[tuple] = None  # (task, features, ...) of the last detect

    def candidates(self, model, num_classes: int) -> List[int]:
        """Entries compared against (:func:`~avalanche_sdr.detection.decision.candidate_entries`,
        with the settings' ``class_count_filter``)."""
        return candidate_entries(model, num_classes, self.settings.class_count_filter)

    def cached_features(self, task: int) -> Optional[torch.Tensor]:
        """The features computed by the last ``detect`` if it was for ``task``, else
        ``None``: E0's [n, D] float32 (Expert Gate) or the projected [n, dim] float64
        (two-sample rule in E0's feature space), on the CPU."""
        last = self._last
        return last[1] if last is not None and last[0] == int(task) else None

    @staticmethod
    def best_candidate(scores: Sequence[float]) -> Optional[int]:
        """Index of the highest of the per-candidate ``scores`` (ties: the lowest
        index); ``None`` when there are no candidates."""
        return max(range(len(scores)), key=lambda i: (scores[i], -i)) if scores else None


__all__ = ["Detector", "FeatureRuleDetector"]
