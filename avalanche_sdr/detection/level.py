"""The level of the repeat test: fixed, or falling with the task's size (beyond the paper).

The two-sample repeat test (:mod:`~avalanche_sdr.detection.two_sample`) declares a true
repeat new with probability ``alpha``, its level. A fixed ``alpha = 0.01`` loses 1 % of
the repeats at every task size, also where the test has power near 1 against distinct
classes. A :class:`Level` gives the level as a function of the images per class of the
new task: :class:`FixedLevel` (one value: the previous behaviour) or :class:`LevelBySize`
(1 % up to 40 images a class, 0.01 % from 100, log-linear between). :class:`LevelByPairedPower`
is :class:`LevelBySize` raised where the entry's stored reference is too small for the test
to have the power the lower level assumes (an entry created by a small task). They are objects
behind a registry (:data:`LEVELS`), reached by name from
:class:`~avalanche_sdr.detection.TwoSampleSettings` (``alpha="by_size"``).

Why these numbers, fixed before any run: docs/results/detection/level/alpha_rule_fixed_in_advance.md
and docs/results/stream_designs/paired_level/rule_fixed_in_advance.md; evidence:
docs/results/detection/level_by_size.md.
"""
from __future__ import annotations

import abc
import functools
import math
from dataclasses import dataclass
from typing import Any, Callable, Dict, Union

from scipy import optimize, stats

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

    def for_test(self, per_class: int, reference_per_class: int, classes: int, dim: int) -> float:
        """The level of a test of a ``classes``-class task whose smallest class has
        ``per_class`` images against an entry whose smallest stored reference class has
        ``reference_per_class`` vectors, in ``dim`` projected dimensions. Here
        ``at(per_class)``: the reference plays no part (overridden by
        :class:`LevelByPairedPower`)."""
        check_int(reference_per_class, "reference_per_class")
        return self.at(per_class)

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


def hotelling_power(per_class: int, reference_per_class: int, level: float, classes: int, dim: int,
               difference: float) -> float:
    """Power of the two-sample Hotelling test of ``per_class`` new vectors against
    ``reference_per_class`` stored ones, in ``dim`` dimensions at the Bonferroni level
    ``level / classes``, against a class-mean difference ``difference`` (Mahalanobis, in units
    of the within-class spread); 0.0 when the test has too few vectors (``n + m <= dim + 1``).

    From the noncentral F law of Hotelling's two-sample T-squared: ``F(dim, n + m - dim - 1)``
    with noncentrality ``n m / (n + m) * difference^2`` (the power table of
    docs/results/detection/level/alpha_rule_fixed_in_advance.md).
    """
    n, m = check_int(per_class, "per_class"), check_int(reference_per_class, "reference_per_class")
    return _power(n, m, float(level), check_int(classes, "classes"), check_int(dim, "dim"), float(difference))


@functools.lru_cache(maxsize=4096)
def _power(n: int, m: int, level: float, classes: int, dim: int, difference: float) -> float:
    df2 = n + m - dim - 1
    if df2 < 1:
        return 0.0
    critical = stats.f.ppf(1.0 - level / classes, dim, df2)
    return float(stats.ncf.sf(critical, dim, df2, n * m / (n + m) * difference ** 2))


def detectable_difference(per_class: int, reference_per_class: int, level: float, classes: int, dim: int,
                          power: float = 0.9) -> float:
    """The class-mean difference that :func:`hotelling_power` detects with probability ``power``;
    ``inf`` when the test has too few vectors (``n + m <= dim + 1``) or no difference up to
    1e6 reaches it."""
    if hotelling_power(per_class, reference_per_class, level, classes, dim, 1e6) < power:
        return math.inf
    return optimize.brentq(lambda d: hotelling_power(per_class, reference_per_class, level, classes, dim, d) - power,
                           0.0, 1e6)


@dataclass(frozen=True)
class LevelByPairedPower(LevelBySize):
    """:class:`LevelBySize`, raised where the entry's reference is too small for its power (beyond the paper).

    :class:`LevelBySize` lowers the level to ``low`` from ``large`` images a class of the
    new task because the test then has power near 1; its rule required that the level
    fall no faster than the power grows, and its power table assumed a reference of
    ``min(n, 100)`` vectors a class. An entry created by a task of 13 images a class stores
    13, and against it a task of 145 images a class has far less power: ``low`` then lets
    different classes through. This level is, for a task whose smallest class has ``n``
    images against an entry whose smallest reference class has ``m`` vectors, the lowest
    level between :class:`LevelBySize`'s ``at(n)`` and ``high`` at which the test still
    detects, with 90 % power, every difference it detects at the rule's anchor (``small``
    against ``small`` at ``high``; :func:`detectable_difference`, :func:`hotelling_power`);
    ``high`` when none does.
    So it is never below :class:`LevelBySize`'s, equal to it where the reference is large
    enough (a full reference, or the default flow's held-out warm-start references at 100
    images a class), and higher where the reference is small. Computed for the Hotelling
    test in the two-sample rule's projected dimension. The rule's repeat test reads it; its
    power check stays at :class:`LevelBySize`'s level (a higher level would make that check
    easier to pass), so a reuse under this level is also one under :class:`LevelBySize`
    with the same entries. Same parameters as :class:`LevelBySize`.
    """

    name = "by_paired_power"

    def for_test(self, per_class: int, reference_per_class: int, classes: int, dim: int) -> float:
        """The level of a ``classes``-class task of ``per_class`` images a class (its smallest)
        against an entry of ``reference_per_class`` vectors a class, in ``dim`` projected
        dimensions (class doc): the lowest level in [``at(per_class)``, ``high``] whose power
        against the anchor's 90 %-power difference is at least 90 % (bisection on the log
        level, to 1e-9 of it), ``high`` when even ``high`` has less."""
        base = self.at(per_class)
        anchor = detectable_difference(self.small, self.small, self.high, classes, dim)
        if math.isinf(anchor):  # the anchor detects nothing: no pairing has less power than it
            return base

        def enough(level: float) -> bool:
            return hotelling_power(per_class, reference_per_class, level, classes, dim, anchor) >= 0.9

        if enough(base):
            return base
        if not enough(self.high):
            return self.high
        low, high = math.log(base), math.log(self.high)  # the power grows with the level
        for _ in range(40):
            middle = 0.5 * (low + high)
            if enough(math.exp(middle)):
                high = middle
            else:
                low = middle
        return math.exp(high)

    def describe(self) -> str:
        """E.g. ``"0.01 up to 40 images a class, falling to 0.0001 from 100, as far as the entry's reference
        has the power"``."""
        return super().describe() + ", as far as the entry's reference has the power"


LEVELS: Dict[str, Callable[[], Level]] = {FixedLevel.name: FixedLevel, LevelBySize.name: LevelBySize,
                                          LevelByPairedPower.name: LevelByPairedPower}
"""Levels by name, each built with its defaults: ``"fixed"`` (0.01 at every size),
``"by_size"`` (:class:`LevelBySize`) and ``"by_paired_power"`` (:class:`LevelByPairedPower`)."""


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


__all__ = ["FixedLevel", "LEVELS", "Level", "LevelByPairedPower", "LevelBySize", "detectable_difference", "make_level",
           "hotelling_power"]
