"""Argument checks shared across the package, so that every constructor words the same
mistake the same way.

Written here rather than taken from a library: the checks are two lines each, and the
package's error messages (which tests match) must stay under its own control.
"""

from __future__ import annotations

from typing import Any

__all__ = ["check_int"]


def check_int(value: Any, name: str, *, minimum: int = 1, hint: str = "") -> int:
    """``value`` if it is a plain ``int`` (not a ``bool``) of at least ``minimum``.

    :param value: the argument to check.
    :param name: its name, as the user spells it, for the message.
    :param minimum: the smallest value allowed (default 1: a positive int).
    :param hint: text appended to the requirement in the message, e.g.
        ``" (detection needs entries to compare to)"``.
    :returns: ``value`` unchanged.
    :raises ValueError: ``name must be a positive int`` (``minimum`` 1) or ``name must be
        an int >= minimum``, with the value given.
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        what = "a positive int" if minimum == 1 else f"an int >= {minimum}"
        raise ValueError(f"{name} must be {what}{hint}, got {value!r}")
    return value
