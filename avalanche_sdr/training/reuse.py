"""What a detected repeat does with its entry: the :class:`Reuse` protocol, its record and the paper's reuse.

A reuse is an object with its options, as a detector or a router is: ``SDRStrategy(reuse=
"head" | "accumulate" | "no_loss" | <a Reuse object>)``, names built by
:func:`~avalanche_sdr.training.reuse_registry.make_reuse` from
:data:`~avalanche_sdr.training.reuse_registry.REUSE_TYPES`. Three classes implement it:

- :class:`HeadReuse` (``"head"``, the paper's): the entry stays frozen, the repeat trains
  a head of its own (the budget's ``reuse_epochs`` at ``reuse_lr``);
- :class:`~avalanche_sdr.training.learning_reuse.LearningReuse` (``"accumulate"``): the
  entry and its one head keep training on the repeat, behind a gate, a replay, a class
  balance and a rollback;
- :class:`~avalanche_sdr.training.kept_update.NoLossReuse` (``"no_loss"``): head-only first,
  then an update of the entry kept only where held-out evidence shows no loss.

The protocol is the plugin's hooks where a reuse acts, each with the head-only reuse's
behaviour as its default (:class:`Reuse`), so a reuse overrides only what it changes.
A reuse's options are its constructor keywords (``OPTIONS``), checked when it is built,
and make its :meth:`~Reuse.config` (checkpoints' fingerprints, results). What it carries
from one hook to the next within an experience (a replay, an update's snapshot) is the
reuse's own state, emptied by :meth:`~Reuse.start`; a strategy works on its own deep
copy of the object passed (``make_reuse``), so the user's object never changes.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Tuple

from avalanche_sdr.detection.decision import json_float

if TYPE_CHECKING:  # annotations only: this module imports no torch
    from torch import nn


@dataclass
class ReuseRecord:
    """What the strategy's reuse did with one task's entry after the detector's decision
    (JSON-serialisable): the learning reuse's gate, update, early stop, rollback and
    class balance. Beside the task's :class:`~avalanche_sdr.detection.DetectionRecord`,
    which holds the detection's evidence and decision; a run's results and checkpoints
    write both in one dict (:meth:`to_dict` keys after the detection record's).

    :param entry_updated: the learning reuse (:class:`~avalanche_sdr.training.learning_reuse.LearningReuse`):
        the reused entry's adapters, BatchNorm copies and head kept training on this
        task's data (``False``: head-only reuse, the paper's, a new entry, or the guard
        refused the update).
    :param gate_accuracy: the learning reuse with its ``guard``: accuracy of the
        reused entry's head (through the detector's ``class_permutation``) on this task's
        training data, before any training on it (fraction in [0, 1]); ``None`` when not
        measured. A task the gate refused got a new entry (its decision ``"new"``).
    :param gate_threshold: the accuracy ``gate_accuracy`` had to reach for the update
        to go ahead (midway between chance, 1/c, and the entry's accuracy on its stored
        images); ``None`` when not measured.
    :param update_epochs: an update with ``early_stop``: the epochs whose state it
        kept (the best on the repeat's held-out share); ``None`` when not measured.
    :param heldout_accuracy: an update with ``rollback``: the entry's head's
        accuracy on the entry's held-out images (its creating task's, never trained on
        since) before and after the update, ``[before, after]`` (fractions in [0, 1]);
        empty when not measured.
    :param update_rolled_back: the update lowered ``heldout_accuracy`` and was undone:
        the entry, its BatchNorm copies and head are as before this task, which still
        answers through the entry's head (``entry_updated`` stays ``True``).
    :param update_balanced: the update was class-balanced (the ``balance`` rule
        asked for it: class weights, the entry's BatchNorm copies in eval mode).
    :param balance_p_value: an update under the ``"when_shifted"`` balance rule: the
        smallest p-value of its chi-square tests (the repeat's class counts against the
        entry's creating task's and against equal counts, the creating task's against
        equal counts); ``None`` when not tested.
    :param keep_p_value: ``reuse="no_loss"``: the keep rule's pooled sign-test p-value
        (:func:`~avalanche_sdr.training.keep_rule.decide`); ``None`` where no update ran.
    :param keep_sets: ``reuse="no_loss"``: per held-out set compared, ``[task, images,
        losses, gains]`` (the repeat's first); empty where no update ran.
    """

    entry_updated: bool = False
    gate_accuracy: Optional[float] = None
    gate_threshold: Optional[float] = None
    update_epochs: Optional[int] = None
    heldout_accuracy: List[float] = field(default_factory=list)
    update_rolled_back: bool = False
    update_balanced: bool = False
    balance_p_value: Optional[float] = None
    keep_p_value: Optional[float] = None
    keep_sets: List[List[int]] = field(default_factory=list)

    def __post_init__(self) -> None:
        for name in ("entry_updated", "update_rolled_back", "update_balanced"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be a bool, got {getattr(self, name)!r}")
        self.keep_sets = [[int(v) for v in row] for row in self.keep_sets]
        if any(len(row) != 4 for row in self.keep_sets):
            raise ValueError(f"keep_sets rows are [task, images, losses, gains], got {self.keep_sets}")
        for name in ("gate_accuracy", "gate_threshold", "balance_p_value", "keep_p_value"):
            value = getattr(self, name)
            setattr(self, name, None if value is None else float(value))
        if self.update_epochs is not None:
            if isinstance(self.update_epochs, bool) or not hasattr(self.update_epochs, "__index__"):
                raise ValueError(f"update_epochs must be an int or None, got {self.update_epochs!r}")
            self.update_epochs = int(self.update_epochs)
        self.heldout_accuracy = [float(v) for v in self.heldout_accuracy]
        if self.heldout_accuracy and (len(self.heldout_accuracy) != 2 or any(math.isnan(v) for v in
                                                                             self.heldout_accuracy)):
            raise ValueError(f"heldout_accuracy is [before, after], got {self.heldout_accuracy}")
        for name in ("update_rolled_back", "update_balanced"):
            if getattr(self, name) and not self.entry_updated:
                raise ValueError(f"{name} is only set for an update (entry_updated=True)")

    def check_decision(self, decision: str) -> None:
        """Refuse an update recorded for a task that did not reuse an entry.

        :param decision: the task's :attr:`DetectionRecord.decision
            <avalanche_sdr.detection.DetectionRecord.decision>`.
        :raises ValueError: ``entry_updated`` for a decision other than ``"reuse"``.
        """
        if self.entry_updated and decision != "reuse":
            raise ValueError(f"entry_updated is only set for a 'reuse', not {decision!r}")

    def to_dict(self) -> Dict[str, Any]:
        """Plain-python dict that ``json.dumps`` accepts (non-finite floats as strings,
        as :meth:`DetectionRecord.to_dict <avalanche_sdr.detection.DetectionRecord.to_dict>`)."""
        def number(value):
            return None if value is None else json_float(value)

        return {
            "entry_updated": self.entry_updated,
            "gate_accuracy": number(self.gate_accuracy),
            "gate_threshold": number(self.gate_threshold),
            "update_epochs": self.update_epochs,
            "heldout_accuracy": list(self.heldout_accuracy),
            "update_rolled_back": self.update_rolled_back,
            "update_balanced": self.update_balanced,
            "balance_p_value": number(self.balance_p_value),
            "keep_p_value": number(self.keep_p_value),
            "keep_sets": [list(row) for row in self.keep_sets],
        }

    @classmethod
    def field_names(cls) -> Tuple[str, ...]:
        """The record's keys, in :meth:`to_dict` order."""
        return tuple(f.name for f in fields(cls))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "ReuseRecord":
        """Inverse of :meth:`to_dict` (also after a JSON round trip); keys absent from
        ``data`` keep their defaults, other keys are not read (a results or checkpoint
        record holds the detection record's keys too)."""
        return cls(**{name: data[name] for name in cls.field_names() if name in data})

    def describe(self) -> str:
        """The update's part of the task's one-line report (``""`` without an update)."""
        if self.update_rolled_back and self.keep_p_value is not None:
            return f", entry update refused (keep rule p={self.keep_p_value:.3g}: head-only result)"
        if self.update_rolled_back:
            return ", entry update rolled back"
        if self.update_epochs == 0:
            return ", entry update of 0 epochs"
        if self.entry_updated and self.keep_p_value is not None:
            return f", entry update kept (keep rule p={self.keep_p_value:.3g})"
        if self.entry_updated:
            return ", entry updated" + (" (class-balanced)" if self.update_balanced else "")
        return ""

    def describe_gate(self) -> str:
        """The gate's part of the report (``""`` when the gate did not run)."""
        if self.gate_accuracy is None:
            return ""
        return (f" (gate: head accuracy {self.gate_accuracy:.2f} "
                f"{'>=' if self.gate_accuracy >= self.gate_threshold else '<'} {self.gate_threshold:.2f})")


class Reuse:
    """What a detected repeat trains: the hooks the SDR plugin calls, in its order.

    Subclasses set ``name`` (the registry name) and ``OPTIONS`` (their constructor
    keywords, each kept as an attribute of that name). Every hook's default is the
    head-only reuse's: nothing stored, the repeat trains a head of its own for
    ``settings.reuse_epochs`` at ``settings.reuse_lr``. Two reuses are equal when their
    :meth:`config` is.

    Arguments the hooks share: ``model``, the :class:`~avalanche_sdr.models.SDRModel`;
    ``data``, the experience's :class:`~avalanche_sdr.models.task_data.TaskData` (images
    [n, C, H, W] float32, local labels [n] int64); ``record``, its
    :class:`~avalanche_sdr.detection.DetectionRecord`; ``reuse``, its
    :class:`ReuseRecord` (what the hooks record); ``settings``, the strategy's
    :class:`~avalanche_sdr.training.SDRSettings` (the training budget).
    """

    name: str = ""
    OPTIONS: Tuple[str, ...] = ()

    # ------------------------------------------------------------ configuration
    def options(self) -> Dict[str, Any]:
        """The reuse's options, ``{keyword: value}`` in ``OPTIONS`` order (JSON-safe)."""
        return {option: getattr(self, option) for option in self.OPTIONS}

    def config(self) -> Dict[str, Any]:
        """``{"name": name, **options}``: everything that changes what the reuse does
        (checkpoint fingerprints, results)."""
        return {"name": self.name, **self.options()}

    def __eq__(self, other) -> bool:
        return isinstance(other, Reuse) and other.config() == self.config()

    def __hash__(self) -> int:
        return hash(repr(sorted(self.config().items())))

    def __repr__(self) -> str:
        options = ", ".join(f"{key}={value!r}" for key, value in self.options().items())
        return f"{type(self).__name__}({options})"

    # ------------------------------------------------------------ before training
    def start(self) -> None:
        """A new experience begins: drop what the last one carried between hooks."""

    def new_entry(self, model, entry: int, data, settings) -> None:
        """``entry`` was just created for ``data`` (a warm-start or new task): keep what the
        reuse needs of it later (stored images, held-out sets)."""

    def known_task(self, model, task: int, entry: int) -> ReuseRecord:
        """Task label ``task``, trained before on ``entry``, is trained again."""
        return ReuseRecord()

    def decide(self, model, record, data) -> Tuple[Any, ReuseRecord]:
        """The detector decided that ``data`` repeats ``record.reused_entry``: the record to
        keep (a reuse may turn the decision into ``"new"``) and what the reuse will do."""
        return record, ReuseRecord()

    def repeat(self, model, record, data) -> None:
        """The repeat is mapped to its entry (``record.entry``), before any training."""

    def begin(self, model, record, reuse: ReuseRecord, data, settings) -> None:
        """The model is on the strategy's device and training is about to start (after
        :meth:`repeat`, or :meth:`known_task`)."""

    def train_epochs(self, reuse: ReuseRecord, settings) -> int:
        """Epochs a repeat trains."""
        return settings.reuse_epochs

    def train_lr(self, reuse: ReuseRecord, settings) -> float:
        """Adam learning rate of a repeat's training."""
        return settings.reuse_lr

    def update_parameters(self, model, entry: int) -> List[nn.Parameter]:
        """The parameters of ``entry`` an update of it trains (with its head): all of its
        adapters and BatchNorm copies (``model.encoder.entry_parameters``)."""
        return model.encoder.entry_parameters(entry)

    # ------------------------------------------------------------ during training
    def training_indices(self):
        """The repeat's images training reads ([n'] int64), or ``None`` for all."""
        return None

    def before_iteration(self) -> None:
        """Before each training mini-batch (modules' modes)."""

    def loss(self, strategy) -> None:
        """Before the backward pass: change ``strategy.loss`` (a weighting, a replay)."""

    def epoch_done(self, model) -> bool:
        """After each epoch: whether training should stop."""
        return False

    # ------------------------------------------------------------ after training
    def end(self, model, record, reuse: ReuseRecord, data, settings) -> None:
        """Training is over (a new entry's generator fitted); before the detector and the
        routers read the entry again."""


class HeadReuse(Reuse):
    """The paper's reuse: nothing is stored; a repeat trains a head of its own on the
    frozen entry for the budget's ``reuse_epochs`` at ``reuse_lr``. No options."""

    name = "head"


__all__ = ["HeadReuse", "Reuse", "ReuseRecord"]
