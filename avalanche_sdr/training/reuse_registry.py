"""The reuses by name: one registry, :data:`REUSE_TYPES`, and :func:`make_reuse`.

``SDRStrategy(reuse=...)`` takes a name of this registry or a reuse object (a
:class:`~avalanche_sdr.training.reuse.Reuse`). A name is built with its default options;
an object keeps its own. A new reuse is one class: it needs no entry here to be passed
as an object.
"""
from __future__ import annotations

import copy
from typing import Dict, Type, Union

from avalanche_sdr.training.kept_update import NoLossReuse
from avalanche_sdr.training.learning_reuse import LearningReuse
from avalanche_sdr.training.reuse import HeadReuse, Reuse

REUSE_TYPES: Dict[str, Type[Reuse]] = {cls.name: cls for cls in (HeadReuse, LearningReuse, NoLossReuse)}
"""Reuse classes by name (the names of :data:`~avalanche_sdr.vocabulary.REUSE_MODES`, which
the command lines offer before importing torch; a test checks the two agree);
``REUSE_TYPES[name](**options)`` builds one with its options, by keyword."""

ReuseSpec = Union[str, Reuse]


def make_reuse(reuse: ReuseSpec) -> Reuse:
    """The reuse ``reuse`` names, built with its default options, or a deep copy of the
    :class:`~avalanche_sdr.training.reuse.Reuse` passed (the strategy's own: the caller's
    object is never kept or changed).

    :raises ValueError: an unknown name (the message lists the names).
    :raises TypeError: neither a name nor a ``Reuse``.
    """
    if isinstance(reuse, Reuse):
        return copy.deepcopy(reuse)
    if isinstance(reuse, str):
        if reuse not in REUSE_TYPES:
            raise ValueError(f"unknown reuse {reuse!r}; pass one of {list(REUSE_TYPES)} or a Reuse object "
                             "(e.g. LearningReuse(epochs=3))")
        return REUSE_TYPES[reuse]()
    raise TypeError(f"reuse must be a name {list(REUSE_TYPES)} or a Reuse object, got {type(reuse).__name__}")


__all__ = ["REUSE_TYPES", "ReuseSpec", "make_reuse"]
