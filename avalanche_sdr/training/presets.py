"""Training settings of :class:`~avalanche_sdr.training.SDRStrategy`: one definition.

:class:`SDRSettings` is the single place where every training setting of SDR is
named, given its default (the paper's value) and documented. The strategy, its
plugin, the checkpoint fingerprint and the results' ``config`` all read an
``SDRSettings``; adding a setting means adding one field here. The budgets by name
(:data:`BUDGETS`), each the constant of its name: ``PAPER_SETTINGS`` holds the paper's
values (meant for a GPU); ``CPU_SETTINGS`` (``"cpu"``) and ``CPU_LARGE_TASK_SETTINGS``
(``"cpu_large_task"``) keep the method and shorten what is long.

Use::

    SDRStrategy(model=model, settings="cpu")                   # a budget by name: CPU_SETTINGS
    SDRStrategy(model=model, settings=CPU_SETTINGS, new_task_epochs=5)  # one value changed
    CPU_SETTINGS.replace(reuse_epochs=5, reuse_lr=0.001)         # a new SDRSettings

The values of each preset and why the CPU ones differ: docs/method.rst, sections
"Training settings" and "Budget presets: the paper's values and the CPU presets".
"""
from __future__ import annotations

import dataclasses
from typing import Any, Dict, Iterator, Optional, Tuple, Union

from avalanche_sdr._batching import check_batch_size
from avalanche_sdr._checks import check_int
from avalanche_sdr.training.learning_reuse import BALANCE_RULES, AlwaysBalance, BalanceRule, make_balance_rule
from avalanche_sdr.vocabulary import REUSE_ACCUMULATE, REUSE_MODES


@dataclasses.dataclass(frozen=True)
class SDRSettings:
    """How SDR trains: epochs, learning rates, mini-batches, generator fitting.

    Every field has the paper's value as its default, so ``SDRSettings()`` equals
    :data:`PAPER_SETTINGS`. Values are checked when the object is built
    (:class:`ValueError` naming the field). Besides attribute access, an
    ``SDRSettings`` unpacks as keyword arguments (``dict(settings)``,
    ``SDRSettings(**dict(settings, reuse_epochs=5))``) and converts with :meth:`to_dict`
    for JSON. A strategy takes it whole, ``SDRStrategy(model=m, settings=settings)``.
    """

    new_task_epochs: int = 100
    """Epochs that train a new entry's adapters and its head (paper 100; 0 leaves them
    at their initial values)."""
    new_task_lr: float = 0.01
    """Initial Adam learning rate of a new entry (paper 0.01)."""
    lr_milestones: Tuple[int, ...] = (50,)
    """0-based epochs of a new entry's training at which the learning rate is
    multiplied by ``lr_decay`` (paper: (50,)); increasing, each < ``new_task_epochs``
    to have an effect."""
    lr_decay: float = 0.1
    """Learning-rate factor at each milestone, in (0, 1] (paper 0.1)."""
    reuse_epochs: int = 2
    """Epochs of head-only training when a task reuses an entry (paper 2)."""
    reuse_lr: float = 0.001
    """Adam learning rate of head-only training (paper 0.001)."""
    reuse: str = "head"
    """What a repeat trains (:data:`~avalanche_sdr.vocabulary.REUSE_MODES`): ``"head"``,
    the paper's, a new head of its own on the frozen entry; ``"accumulate"`` (beyond
    the paper), the reused entry's adapters, BatchNorm copies and its one shared head
    keep training on the repeat for :attr:`epochs_per_update` at ``update_lr``, so every task
    mapped to the entry answers through the updated entry (docs/method.rst,
    "Learning reuse"); ``"no_loss"`` (beyond the paper), head-only first, then an update of
    the entry at ``update_lr`` with ``guard_exemplars`` replay images per class, kept only
    where held-out evidence shows no loss (:mod:`~avalanche_sdr.training.kept_update`)."""
    update_lr: float = 0.001
    """Adam learning rate of an ``"accumulate"`` or ``"no_loss"`` update (the paper's head-only 0.001:
    the entry and its head are trained already, so they continue at the low rate)."""
    reuse_guard: bool = True
    """``"accumulate"`` only: guard the entries against a wrong reuse. Before an update
    the entry's head must classify the repeat's training data at least midway between
    chance and its accuracy on its stored images (else the repeat gets a head of its
    own on the frozen entry, as ``"head"``), and the stored images are replayed during
    the update."""
    guard_exemplars: int = 5
    """``"accumulate"`` with ``reuse_guard``: training images kept per class of each
    entry (its creating task's, stored as uint8 when they lie in [0, 1]; counted in
    memory and checkpointed); 0 keeps none (the gate then compares with accuracy 1).
    ``"no_loss"``: the replay images kept per class of a new entry's creating task."""
    update_balance: Union[None, bool, str] = None
    """``"accumulate"`` only. A balanced update weights the repeat's cross-entropy so that
    each of its classes counts equally (weights n / (c n_k)), and the entry's BatchNorm
    copies normalise with their stored statistics and keep them, so a repeat in another
    class balance moves neither the head's class balance nor the statistics its earlier
    tasks were trained with. Which updates are balanced: a rule name of
    :data:`~avalanche_sdr.training.learning_reuse.BALANCE_RULES`: ``"when_shifted"``
    (every update but a repeat whose class counts match both its entry's creating task's
    and equal counts, chi-square tests at ``learning_reuse.BALANCE_LEVEL``: that one is
    plain; needs ``reuse_guard`` and ``guard_exemplars > 0``, the counts are kept beside
    the stored images) or
    ``"always"`` (every update; ``True`` means the same, the option's meaning before
    ``"when_shifted"``). ``None``: ``"when_shifted"`` where the guard stores images, else
    ``"always"``. ``False``: never (the plain mean and train-mode BatchNorm, the learning
    reuse before this option)."""
    update_early_stop: Optional[bool] = None
    """``"accumulate"`` only (``None``: off, as ``False``: measured to cost accuracy,
    docs/results/learning_reuse.md): the update trains on all but a held-out share
    of each class of the repeat (``learning_reuse.REPEAT_HOLDOUT_SHARE``) and stops, at
    most after :attr:`epochs_per_update`, once the class-balanced loss there has not fallen for
    ``learning_reuse.EARLY_STOP_PATIENCE`` epoch, keeping its best epoch (at least the
    first). ``False``: all :attr:`epochs_per_update` on all the repeat's images."""
    update_rollback: Optional[bool] = None
    """``"accumulate"`` with ``reuse_guard`` only (``None``: on with the guard): a new entry
    keeps ``learning_reuse.GUARD_HELDOUT_PER_CLASS`` further training images per class,
    never replayed (memory, checkpoints); an update that classifies fewer of them right
    than before it is undone (the entry's adapters, BatchNorm copies and head restored
    exactly; ``ReuseRecord.update_rolled_back``)."""
    update_epochs: Optional[int] = None
    """``"accumulate"`` only: epochs of a learning-reuse update (``None``: ``reuse_epochs``,
    as before this option; :attr:`epochs_per_update`). A repeat's update continues an entry
    already trained at the low ``update_lr``; fewer epochs make it cheaper. Which count keeps
    the learning reuse's accuracy was measured on validation streams
    (docs/results/learning_reuse.md, "Fewer epochs per update")."""
    train_mb_size: int = 128
    """Training mini-batch size, images (paper 128)."""
    eval_mb_size: Optional[int] = None
    """Evaluation mini-batch size, images (not in the paper; no effect on results);
    ``None``: chosen for the strategy's device (:func:`~avalanche_sdr._batching.eval_batch_size`)."""
    vae_epochs: int = 2000
    """Maximum epochs of a new entry's generator (paper 2000, early stopped)."""
    vae_lr: float = 1e-4
    """Adam learning rate of a generator (paper 1e-4)."""
    vae_mb_size: int = 64
    """Generator mini-batch size, images (paper 64)."""
    vae_patience: int = 20
    """Early-stopping patience of a generator, epochs without a better held-out ELBO
    (not in the paper)."""

    def __post_init__(self):
        milestones = self.lr_milestones
        if isinstance(milestones, (int, float)) or not all(isinstance(m, int) and not isinstance(m, bool)
                                                           for m in milestones):
            raise ValueError(f"lr_milestones must be a sequence of ints (0-based epochs), got {milestones!r}")
        object.__setattr__(self, "lr_milestones", tuple(milestones))
        for name in ("train_mb_size", "vae_mb_size"):
            check_int(getattr(self, name), name)
        check_batch_size(self.eval_mb_size, "eval_mb_size")
        if self.reuse not in REUSE_MODES:
            raise ValueError(f"reuse must be one of {REUSE_MODES}, got {self.reuse!r}")
        if not isinstance(self.reuse_guard, bool):
            raise ValueError(f"reuse_guard must be a bool, got {self.reuse_guard!r}")
        for name in UPDATE_OPTIONS:
            value = getattr(self, name)
            rules = sorted(BALANCE_RULES) if name == "update_balance" else []
            if not (value is None or isinstance(value, bool) or (isinstance(value, str) and value in rules)):
                raise ValueError(f"{name} must be None (the mode's default) or a bool"
                                 + (f" or a balance rule name {rules}" if rules else "") + f", got {value!r}")
            if value is not None and self.reuse != REUSE_ACCUMULATE:
                raise ValueError(f"{name} acts only on the learning reuse's update (reuse='accumulate'); with "
                                 f"reuse={self.reuse!r} leave it None")
        if (isinstance(self.update_balance, str) and BALANCE_RULES[self.update_balance].needs_counts
                and not self.stores_guard_images):
            raise ValueError(f"update_balance={self.update_balance!r} compares a repeat's class counts with those "
                             "kept beside the guard's stored images: it needs reuse_guard=True and "
                             "guard_exemplars > 0; set update_balance='always', False or None")
        if self.update_rollback and not self.stores_guard_images:
            raise ValueError("update_rollback=True needs reuse_guard=True and guard_exemplars > 0 (its held-out "
                             "images are kept beside the guard's stored ones); set update_rollback=False or None")
        for name in ("new_task_epochs", "reuse_epochs", "vae_epochs", "vae_patience", "guard_exemplars"):
            check_int(getattr(self, name), name, minimum=0)
        if self.update_epochs is not None:
            check_int(self.update_epochs, "update_epochs", minimum=1)
            if self.reuse != REUSE_ACCUMULATE:
                raise ValueError(f"update_epochs acts only on the learning reuse's update (reuse='accumulate'); "
                                 f"with reuse={self.reuse!r} leave it None (head-only repeats train reuse_epochs)")
        for name in ("new_task_lr", "reuse_lr", "update_lr", "vae_lr"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(f"{name} must be a positive learning rate, got {value!r}")
        if isinstance(self.lr_decay, bool) or not isinstance(self.lr_decay, (int, float)) or not 0 < self.lr_decay <= 1:
            raise ValueError(f"lr_decay must lie in (0, 1], got {self.lr_decay!r}")
        if any(m < 0 for m in self.lr_milestones) or list(self.lr_milestones) != sorted(set(self.lr_milestones)):
            raise ValueError(f"lr_milestones must be increasing non-negative epochs, got {self.lr_milestones!r}")

    @property
    def stores_guard_images(self) -> bool:
        """``reuse_guard`` with ``guard_exemplars > 0``: the guard keeps images of each
        entry's creating task, beside which the rollback's held-out images and the balance
        rule's class counts are kept."""
        return self.reuse_guard and self.guard_exemplars > 0

    @property
    def epochs_per_update(self) -> int:
        """Epochs of a learning-reuse update: ``update_epochs``, or ``reuse_epochs`` where it is ``None``."""
        return self.reuse_epochs if self.update_epochs is None else self.update_epochs

    def update_option(self, name: str) -> bool:
        """Whether the learning reuse's update option ``name`` (:data:`UPDATE_OPTIONS`) acts:
        its value, or for ``None`` its default (``update_balance`` on with
        ``reuse="accumulate"``, ``update_rollback`` too where ``reuse_guard`` and
        ``guard_exemplars > 0``; ``update_early_stop`` off: measured to cost accuracy,
        docs/results/learning_reuse.md)."""
        if name not in UPDATE_OPTIONS:
            raise KeyError(f"{name!r} is not an update option; they are {UPDATE_OPTIONS}")
        value = getattr(self, name)
        if value is not None:
            return value is not False
        if self.reuse != REUSE_ACCUMULATE or name == "update_early_stop":
            return False
        return name == "update_balance" or self.stores_guard_images

    def balance_rule(self) -> Optional[BalanceRule]:
        """The rule deciding which updates are balanced (``update_balance``): a
        :class:`~avalanche_sdr.training.learning_reuse.BalanceRule`, or ``None`` where no
        update is (``False``, or ``reuse`` is not ``"accumulate"``)."""
        if not self.update_option("update_balance"):
            return None
        value = self.update_balance
        if value is True:
            return AlwaysBalance()
        if value is None:
            value = "when_shifted" if self.stores_guard_images else "always"
        return make_balance_rule(value)

    @classmethod
    def field_names(cls) -> Tuple[str, ...]:
        """The settings' names, in definition order."""
        return tuple(f.name for f in dataclasses.fields(cls))

    def replace(self, **changes: Any) -> "SDRSettings":
        """A copy with ``changes`` applied (checked like a new object).

        :raises TypeError: a name that is not a setting (the message lists them).
        """
        unknown = sorted(set(changes) - set(self.field_names()))
        if unknown:
            raise TypeError(f"unknown SDR setting(s) {unknown}; the settings are {list(self.field_names())}")
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> Dict[str, Any]:
        """The settings as a plain dict in definition order (JSON-safe once the
        milestone tuple is written as a list, as ``json`` does)."""
        return {name: getattr(self, name) for name in self.field_names()}

    # Mapping protocol, so that ``dict(settings)`` and ``**settings`` work.
    def keys(self) -> Tuple[str, ...]:
        return self.field_names()

    def __getitem__(self, name: str) -> Any:
        if name not in self.field_names():
            raise KeyError(name)
        return getattr(self, name)

    def __iter__(self) -> Iterator[str]:
        return iter(self.field_names())


UPDATE_OPTIONS = ("update_balance", "update_early_stop", "update_rollback")
"""The learning reuse's update options (:meth:`SDRSettings.update_option`); ``None`` means
the mode's default, any other value is refused unless ``reuse="accumulate"``."""

REUSE_OPTIONS = ("reuse_guard", "guard_exemplars") + UPDATE_OPTIONS
"""The learning reuse's options besides its schedule (``update_lr``, ``update_epochs``):
set in ``settings`` (``SDRSettings(...)``, ``CPU_SETTINGS.replace(...)``), not as
``SDRStrategy`` keywords."""

PAPER_SETTINGS = SDRSettings()
"""The paper's training values (supplementary §A.1); meant for a GPU."""

CPU_SETTINGS = SDRSettings(
    new_task_epochs=10,
    lr_milestones=(7,),
    reuse_epochs=10,
    reuse_lr=0.01,
    train_mb_size=32,
    vae_epochs=40,
    vae_lr=2e-3,
    vae_mb_size=32,
    vae_patience=5,
)
"""The budget ``"cpu"``: the paper's method with shortened training for CPU runs on tasks
of a few hundred images or fewer (head-only training of a reused entry for 10 epochs at
lr 0.01, generators up to 40 epochs); the budget of every CPU results page."""

CPU_LARGE_TASK_SETTINGS = CPU_SETTINGS.replace(reuse_epochs=2, reuse_lr=0.001, vae_epochs=20)
"""The budget ``"cpu_large_task"``: :data:`CPU_SETTINGS` with the paper's head-only reuse
(2 epochs at lr 0.001) and generators up to 20 epochs, for tasks of thousands of images."""

BUDGETS: Dict[str, SDRSettings] = {
    "paper": PAPER_SETTINGS,
    "cpu": CPU_SETTINGS,
    "cpu_large_task": CPU_LARGE_TASK_SETTINGS,
}
"""Budget presets by name, accepted wherever an :class:`SDRSettings` is (``settings="cpu"``):
``"paper"`` is :data:`PAPER_SETTINGS`; ``"cpu"`` is :data:`CPU_SETTINGS`, the
budget of the harness's ``--preset cpu`` and of every CPU results page; ``"cpu_large_task"``
is :data:`CPU_LARGE_TASK_SETTINGS` (head-only reuse at the paper's 2 epochs, for tasks of thousands
of images)."""


def resolve_settings(settings: Union[str, SDRSettings]) -> SDRSettings:
    """``settings`` as an :class:`SDRSettings`: a budget name of :data:`BUDGETS`, or the object itself.

    :raises ValueError: an unknown budget name (the message lists them).
    :raises TypeError: neither a name nor an ``SDRSettings``.
    """
    if isinstance(settings, str):
        if settings not in BUDGETS:
            raise ValueError(f"unknown budget {settings!r}; the budgets are {list(BUDGETS)} (or an SDRSettings)")
        return BUDGETS[settings]
    if not isinstance(settings, SDRSettings):
        raise TypeError(f"settings must be an SDRSettings or a budget name {list(BUDGETS)}, "
                        f"got {type(settings).__name__}")
    return settings


__all__ = ["BUDGETS", "CPU_LARGE_TASK_SETTINGS", "CPU_SETTINGS", "PAPER_SETTINGS", "REUSE_OPTIONS",
           "SDRSettings", "UPDATE_OPTIONS", "resolve_settings"]
