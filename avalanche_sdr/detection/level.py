"""The level of the repeat test: fixed, or falling with the task's size (beyond the paper).

The two-sample repeat test (:mod:`~avalanche_sdr.detection.two_sample`) declares a true
repeat new with probability ``alpha``, its level. A fixed ``alpha = 0.01`` loses 1 % of
the repeats at every task size, also where the test has power near 1 against distinct
classes. A :class:`Level` gives the level as a function of the images per class of the
new task: :class:`FixedLevel` (one value: the previous behaviour) or :class:`LevelBySize`
(1 % up to 40 images a class, 0.01 % from 100, log-linear between). They are objects
behind a registry (:data:`LEVELS`), reached by name from
:class:`~avalanche_sdr.detection.TwoSampleSettings` (``alpha="by_size"``).

Why these numbers, fixed before any run: docs/results/detection/level/alpha_rule_fixed_in_advance.md;
evidence: docs/results/detection/level_by_size.md.
"""
from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Any, Callable, Dict, Union

from avalanche_sdr._checks import check_int


def _check_level(value, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 < float(value) < 1.0:
        raise ValueError(f"{name} must be a level in (0, 1), e.g. 0.01, got {value!r}")
    return float(value)


class Level(abc.ABC):
    """A level of the repeat test as a function of the task's size (module doc)."""

    name: str = ""
    """The registry name (:data:`LEVELS`)."""

    @abc.abstractmethod
    def at(self, per_class: int) -> float:
        """The level, in (0, 1), for a task whose smallest class has ``per_class`` images."""

    @abc.abstractmethod
    def to_dict(self) -> Dict[str, Any]:
        """JSON-safe description, with the registry name under ``"level"``."""

    @abc.abstractmethod
    def describe(self) -> str:
        """The level in words, to follow "p >=" in a legend (e.g. ``"0.01"``)."""


@dataclass(frozen=True)
class FixedLevel(Level):
    """The same level at every task size (the previous behaviour).

    :param alpha: the level, in (0, 1); 0.01 by default.
    """

    alpha: float = 0.01
    name = "fixed"

    def __post_init__(self) -> None:
        object.__setattr__(self, "alpha", _check_level(self.alpha, "alpha"))

    def at(self, per_class: int) -> float:
        """``alpha`` whatever the size."""
        check_int(per_class, "per_class")
        return self.alpha

    def to_dict(self) -> Dict[str, Any]:
        """``{"level": "fixed", "alpha": ...}``."""
        return {"level": self.name, "alpha": self.alpha}

    def describe(self) -> str:
        """``alpha``, e.g. ``"0.01"``."""
        return f"{self.alpha:g}"


@dataclass(frozen=True)
class LevelBySize(Level):
    """A level that falls with the images per class ``n`` of the new task:

    ``high`` for ``n <= small``, ``low`` for ``n >= large``, and log-linear between
    (``high * (low / high) ** ((n - small) / (large - small))``). The defaults (0.01,
    1e-4, 40, 100) and their reasons were fixed before any run (module doc).

    :param high: the level of small tasks, in (0, 1).
    :param low: the level of large tasks, in (0, ``high``].
    :param small: images per class up to which the level is ``high`` (>= 1).
    :param large: images per class from which the level is ``low`` (> ``small``).
    """

    high: float = 0.01
    low: float = 1e-4
    small: int = 40
    large: int = 100
    name = "by_size"

    def __post_init__(self) -> None:
        object.__setattr__(self, "high", _check_level(self.high, "high"))
        object.__setattr__(self, "low", _check_level(self.low, "low"))
        if self.low > self.high:
            raise ValueError(f"low ({self.low}) must not exceed high ({self.high}): the level falls with size")
        check_int(self.small, "small")
        check_int(self.large, "large", minimum=self.small + 1)

    def at(self, per_class: int) -> float:
        """The level for a task whose smallest class has ``per_class`` images (class doc)."""
        check_int(per_class, "per_class")
        if per_class <= self.small:
            return self.high
        if per_class >= self.large:
            return self.low
        return self.high * (self.low / self.high) ** ((per_class - self.small) / (self.large - self.small))

    def to_dict(self) -> Dict[str, Any]:
        """``{"level": "by_size", "high", "low", "small", "large"}``."""
        return {"level": self.name, "high": self.high, "low": self.low, "small": self.small, "large": self.large}

    def describe(self) -> str:
        """E.g. ``"0.01 up to 40 images a class, falling to 0.0001 from 100"`` (the
        defaults; the images of the task's smallest class)."""
        return f"{self.high:g} up to {self.small} images a class, falling to {self.low:g} from {self.large}"


LEVELS: Dict[str, Callable[[], Level]] = {FixedLevel.name: FixedLevel, LevelBySize.name: LevelBySize}
"""Levels by name, each built with its defaults: ``"fixed"`` (0.01 at every size) and
``"by_size"`` (:class:`LevelBySize`)."""


def make_level(level: Union[float, str, Level]) -> Level:
    """A :class:`Level` from a number (a :class:`FixedLevel`), a name of :data:`LEVELS`
    or a level object (returned as is).

    :raises ValueError: a number outside (0, 1) or an unknown name (the message lists them).
    :raises TypeError: anything else.
    """
    if isinstance(level, Level):
        return level
    if isinstance(level, str):
        if level not in LEVELS:
            raise ValueError(f"unknown level {level!r}; the levels are {list(LEVELS)} (or a number in (0, 1), "
                             "or a Level object)")
        return LEVELS[level]()
    if isinstance(level, (int, float)) and not isinstance(level, bool):
        return FixedLevel(level)
    raise TypeError(f"a level is a number in (0, 1), a name of {list(LEVELS)} or a Level object, "
                    f"got {type(level).__name__}")


__all__ = ["FixedLevel", "LEVELS", "Level", "LevelBySize", "make_level"]
