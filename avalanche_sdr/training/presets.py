"""Training settings of :class:`~avalanche_sdr.training.SDRStrategy`: one definition.

:class:`SDRSettings` is the single place where every training setting of SDR is
named, given its default (the paper's value) and documented. The strategy, its
plugin, the checkpoint fingerprint and the results' ``config`` all read an
``SDRSettings``; adding a setting means adding one field here.

``PAPER_SETTINGS`` are the values of the paper's supplementary material (§A.1):
classification models with newly trained extractors run 100 epochs, batch 128, lr
0.01 reduced by 0.1 at epoch 50; a reused extractor trains its head for 2 epochs at
lr 0.001; VAEs train with batch 64, lr 1e-4, up to 2000 epochs with early stopping.
The paper trains with Adam (its Algorithm 1). These settings are meant for a GPU.

``CPU_SETTINGS`` keep the method unchanged and shorten what is long: 10 epochs for a
new entry (step decay at epoch 7), batch 32, VAEs up to 20 epochs at lr 2e-3 with
patience 5. Head-only training of a reused entry keeps the paper's 2 epochs at lr
0.001. On very small tasks (the ~120-image digits tasks) those are 8 Adam steps, too
few for a fresh head: ``CPU_SMALL_TASK_SETTINGS`` (the quick example's and the Table 2
harness's ``cpu`` preset) raises them to 10 epochs at 0.01 and lets VAEs run 40 epochs.

Use::

    SDRStrategy(model=model, settings=CPU_SETTINGS)                  # a preset
    SDRStrategy(model=model, settings=CPU_SETTINGS, reuse_epochs=10)  # one value changed
    CPU_SETTINGS.replace(reuse_epochs=10, reuse_lr=0.01)              # a new SDRSettings
"""
from __future__ import annotations

import dataclasses
from typing import Any, Dict, Iterator, Optional, Tuple

from avalanche_sdr._checks import check_int
from avalanche_sdr.vocabulary import REUSE_MODES


@dataclasses.dataclass(frozen=True)
class SDRSettings:
    """How SDR trains: epochs, learning rates, mini-batches, generator fitting.

    Every field has the paper's value as its default, so ``SDRSettings()`` equals
    :data:`PAPER_SETTINGS`. Values are checked when the object is built
    (:class:`ValueError` naming the field). Besides attribute access, an
    ``SDRSettings`` unpacks as keyword arguments (``dict(settings)``,
    ``SDRStrategy(model=m, **settings)``) and converts with :meth:`to_dict` for JSON.
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
    keep training on the repeat for ``reuse_epochs`` at ``update_lr``, so every task
    mapped to the entry answers through the updated entry (docs/method.rst,
    "Learning reuse")."""
    update_lr: float = 0.001
    """Adam learning rate of an ``"accumulate"`` update (the paper's head-only 0.001:
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
    memory and checkpointed); 0 keeps none (the gate then compares with accuracy 1)."""
    router_exemplars: int = 20
    """Task-free router ``"lda"`` only (``SDRStrategy(routers=("lda",))``): training
    images stored per (entry, class) at most, uint8 when they lie in [0, 1], counted in
    memory and checkpointed (:mod:`avalanche_sdr.models.lda_router`; 20 chosen on
    validation splits over 5, 10 and 20)."""
    router_evidence: Optional[int] = None
    """Task-free router ``"lda_weighted"`` only: stop gathering its evidence once this
    many repeat images have been routed (a repeat is skipped when the evidence already
    holds at least this many; :func:`~avalanche_sdr.models.lda_router.record_repeat`);
    ``None``, the default, routes every repeat. Routing each repeat through E0 and every
    entry is the weighted router's main cost on long streams; on the validation splits
    (seed 0, ``benchmarks/router_ablation.py``), 2,000 kept EMNIST-100's weight at 17 %
    of the routing time and 500 or 1,000 did not (docs/results/task_free.md, "Capping
    the weighted router's evidence"). Not the default: it changes the weight wherever a
    stream gives more evidence, and no test-split run has used it."""
    train_mb_size: int = 128
    """Training mini-batch size, images (paper 128)."""
    eval_mb_size: int = 256
    """Evaluation mini-batch size, images (not in the paper; no effect on results)."""
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
        for name in ("train_mb_size", "eval_mb_size", "vae_mb_size"):
            check_int(getattr(self, name), name)
        if self.reuse not in REUSE_MODES:
            raise ValueError(f"reuse must be one of {REUSE_MODES}, got {self.reuse!r}")
        if not isinstance(self.reuse_guard, bool):
            raise ValueError(f"reuse_guard must be a bool, got {self.reuse_guard!r}")
        for name in ("new_task_epochs", "reuse_epochs", "vae_epochs", "vae_patience", "guard_exemplars",
                     "router_exemplars"):
            check_int(getattr(self, name), name, minimum=0)
        for name in ("new_task_lr", "reuse_lr", "update_lr", "vae_lr"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(f"{name} must be a positive learning rate, got {value!r}")
        if self.router_evidence is not None:
            check_int(self.router_evidence, "router_evidence", hint=" or None (every repeat)")
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
    train_mb_size=32,
    vae_epochs=20,
    vae_lr=2e-3,
    vae_mb_size=32,
    vae_patience=5,
)
"""The paper's method with shortened training for CPU runs (see the module doc)."""

CPU_SMALL_TASK_SETTINGS = CPU_SETTINGS.replace(reuse_epochs=10, reuse_lr=0.01, vae_epochs=40)
"""``CPU_SETTINGS`` for tasks of a few hundred images or fewer: head-only training of a
reused entry for 10 epochs at lr 0.01, generators up to 40 epochs (see the module doc)."""

__all__ = ["SDRSettings", "PAPER_SETTINGS", "CPU_SETTINGS", "CPU_SMALL_TASK_SETTINGS"]
