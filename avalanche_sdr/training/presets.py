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


@dataclasses.dataclass(frozen=True)
class SDRSettings:
    """How long and how fast SDR trains (the budget): epochs, learning rates, mini-batches,
    generator fitting. What a repeat trains is the strategy's ``reuse``, an object with its
    own options (:mod:`avalanche_sdr.training.reuse`), not a setting.

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
    """Epochs a repeat trains (paper 2: its head only); the learning reuse's update too
    unless its ``epochs`` option is set."""
    reuse_lr: float = 0.001
    """Adam learning rate of head-only training (paper 0.001)."""
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
        for name in ("new_task_epochs", "reuse_epochs", "vae_epochs", "vae_patience"):
            check_int(getattr(self, name), name, minimum=0)
        for name in ("new_task_lr", "reuse_lr", "vae_lr"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(f"{name} must be a positive learning rate, got {value!r}")
        if isinstance(self.lr_decay, bool) or not isinstance(self.lr_decay, (int, float)) or not 0 < self.lr_decay <= 1:
            raise ValueError(f"lr_decay must lie in (0, 1], got {self.lr_decay!r}")
        if any(m < 0 for m in self.lr_milestones) or list(self.lr_milestones) != sorted(set(self.lr_milestones)):
            raise ValueError(f"lr_milestones must be increasing non-negative epochs, got {self.lr_milestones!r}")

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


__all__ = ["BUDGETS", "CPU_LARGE_TASK_SETTINGS", "CPU_SETTINGS", "PAPER_SETTINGS", "SDRSettings",
           "resolve_settings"]
