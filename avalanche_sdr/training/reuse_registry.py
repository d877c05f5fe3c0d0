"""The reuses by name: one registry, :data:`REUSE_TYPES`, and :func:`make_reuse`.

``SDRStrategy(reuse=...)`` takes a name of this registry, a reuse object (a
:class:`~avalanche_sdr.training.reuse.Reuse`) or a reuse's configuration, the mapping
``{"name": name, **options}`` that :meth:`~avalanche_sdr.training.reuse.Reuse.config`
returns (JSON-writable: what a command line or a results file can give, e.g. the stream
designs runner's ``--method-keywords``). A name is built with its default options; an
object keeps its own; a configuration is built with the options it names. A new reuse is
one class: it needs no entry here to be passed as an object, and a new option of a
registered reuse is reachable through its configuration with no change here.
"""
from __future__ import annotations

import copy
from typing import Any, Dict, Mapping, Type, Union

from avalanche_sdr.training.kept_update import NoLossReuse
from avalanche_sdr.training.learning_reuse import LearningReuse
from avalanche_sdr.training.reuse import HeadReuse, Reuse

REUSE_TYPES: Dict[str, Type[Reuse]] = {cls.name: cls for cls in (HeadReuse, LearningReuse, NoLossReuse)}
"""Reuse classes by name (the names of :data:`~avalanche_sdr.vocabulary.REUSE_MODES`, which
the command lines offer before importing torch; a test checks the two agree);
``REUSE_TYPES[name](**options)`` builds one with its options, by keyword."""

ReuseSpec = Union[str, Reuse, Mapping[str, Any]]


def _reuse_type(name: Any) -> Type[Reuse]:
    """The registered class of ``name``; an unknown name is refused (the message lists them)."""
    if not isinstance(name, str) or name not in REUSE_TYPES:
        raise ValueError(f"unknown reuse {name!r}; pass one of {list(REUSE_TYPES)}, a Reuse object "
                         "(e.g. LearningReuse(epochs=3)) or its configuration (e.g. {'name': 'accumulate', "
                         "'epochs': 3})")
    return REUSE_TYPES[name]


def make_reuse(reuse: ReuseSpec) -> Reuse:
    """The reuse ``reuse`` names, built with its default options; a deep copy of the
    :class:`~avalanche_sdr.training.reuse.Reuse` passed (the strategy's own: the caller's
    object is never kept or changed); or the reuse a configuration describes
    (``{"name": name, **options}``, the form of ``Reuse.config()``: the named class
    built with those options, each checked by its constructor; the mapping is not kept).

    :raises ValueError: an unknown name; a configuration without ``"name"``, with an option
        the named reuse does not take (the message lists its options), or with a value its
        constructor refuses.
    :raises TypeError: neither a name, a ``Reuse`` nor a mapping.
    """
    if isinstance(reuse, Reuse):
        return copy.deepcopy(reuse)
    if isinstance(reuse, str):
        return _reuse_type(reuse)()
    if isinstance(reuse, Mapping):
        if "name" not in reuse:
            raise ValueError(f"a reuse configuration needs its 'name' (one of {list(REUSE_TYPES)}), got "
                             f"{dict(reuse)!r}")
        kind = _reuse_type(reuse["name"])
        options = {k: v for k, v in reuse.items() if k != "name"}
        unknown = sorted(set(options) - set(kind.OPTIONS))
        if unknown:
            raise ValueError(f"reuse {reuse['name']!r} ({kind.__name__}) does not take {unknown}; its options are "
                             f"{list(kind.OPTIONS)}")
        return kind(**copy.deepcopy(options))
    raise TypeError(f"reuse must be a name {list(REUSE_TYPES)}, a Reuse object or its configuration "
                    f"{{'name': ..., **options}}, got {type(reuse).__name__}")


__all__ = ["REUSE_TYPES", "ReuseSpec", "make_reuse"]
