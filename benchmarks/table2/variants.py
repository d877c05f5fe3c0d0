"""The rows of the Table 2 harness beside the methods' own: the variants a call adds
(``--protocol``, ``--sweep``, ``--reuse``, ``--equal-memory``), as :class:`Row` objects of a
method, a variant name and the options its builder gets. Plain Python (no torch): the
methods are named through :mod:`benchmarks.table2.catalogue`; their builders
(:mod:`benchmarks.table2.methods`) read the options. What each variant is: docs/reproducing.rst,
"The harness's rows and variants".
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

from avalanche_sdr.vocabulary import REUSE_ACCUMULATE, REUSE_HEAD
from benchmarks.table2 import catalogue

Options = Tuple[Tuple[str, Any], ...]

PROTOCOLS: Dict[str, Dict[str, Options]] = {
    "ours": {},
    "paper": {"ewc": (("shared_head", True),), "replay": (("shared_head", True),)},
}
"""Builder options of each protocol (``--protocol``), by method. ``ours``: the rows as
:mod:`benchmarks.table2.methods` defines them (EWC and ER on one head per task). ``paper``: EWC and ER on ONE shared head
over local labels (``SingleHeadNet``), as the paper's Table 2 memory and accuracies suggest
(docs/reproducing.rst, "The paper's protocol", says what is stated and what inferred); a
row whose network a protocol changes is the variant named after the protocol (``paper``).
Finetune and DGR are one-head rows under both; New-Head is by definition the multi-head
network (the paper's §5.2 (d)), Single Model and PNN one model / column per task, and the
SDR rows the method itself: unchanged."""

SWEEP_PER_CLASS: Tuple[int, ...] = (2, 5, 20, 50)
"""``--sweep``: ER's ``replay_per_class`` variants (``pc2`` ...) beside the preset's (10)."""

SWEEP_EFT: Tuple[Tuple[int, int], ...] = ((4, 8), (16, 32))
"""``--sweep``: the SDR rows' EFT ``(a, b)`` variants (``a4b8`` ...) beside the paper's (8, 16)."""

MEMORY_KNOBS = frozenset({"replay_per_class", "replay_mem_size", "a", "b"})
"""Options that move a row along its method's accuracy-memory curve: runs of a method whose
other options are the same are one curve in ``plots/accuracy_memory.png``."""


@dataclass(frozen=True)
class Row:
    """A table row: a method, its variant name (``""``: the method as the preset defines it)
    and the options its builder gets."""

    method: str
    variant: str = ""
    options: Options = ()


def variant_name(*parts: str) -> str:
    """The non-empty ``parts`` joined by ``_`` (``variant_name("pc5", "paper") == "pc5_paper"``)."""
    return "_".join(p for p in parts if p)


def protocol_rows(method: str, protocols: Sequence[str] = ("ours",)) -> List[Row]:
    """The rows of ``method`` under each protocol of ``protocols`` (one row where no
    protocol changes the method)."""
    rows: List[Row] = []
    for protocol in protocols:
        options = PROTOCOLS[protocol].get(method, ())
        row = Row(method, protocol if options else "", options)
        if row not in rows:
            rows.append(row)
    return rows


def sweep_rows(base: Row) -> List[Row]:
    """``--sweep``'s variants of a row along its memory knob: ER's buffer per class
    (:data:`SWEEP_PER_CLASS`), the SDR rows' EFT sizes (:data:`SWEEP_EFT`); none for the
    other methods."""
    if base.method == "replay":
        return [Row(base.method, variant_name(f"pc{k}", base.variant), base.options + (("replay_per_class", k),))
                for k in SWEEP_PER_CLASS]
    if catalogue.METHODS[base.method].is_sdr:
        return [Row(base.method, variant_name(f"a{a}b{b}", base.variant), base.options + (("a", a), ("b", b)))
                for a, b in SWEEP_EFT]
    return []


REUSE_DEFAULT = REUSE_HEAD
"""The reuse of the SDR rows as the presets define them (``SDRStrategy(reuse=...)``): a row of
another reuse (``--reuse``) is a variant named after it."""


def reuse_rows(base: Row, reuses: Sequence[str] = (REUSE_DEFAULT,)) -> List[Row]:
    """``base`` under each reuse of ``reuses`` (``--reuse``, values of
    :data:`~avalanche_sdr.vocabulary.REUSE_MODES`), for an SDR row: ``"head"`` is
    ``base`` itself, another value ``v`` the variant ``<base variant>_v`` (``accumulate``,
    ``a4b8_accumulate``) whose builder gets ``reuse=v``. Other methods, and the library's
    method presets (:attr:`~benchmarks.table2.catalogue.MethodEntry.takes_reuse`): ``[base]``."""
    if not catalogue.METHODS[base.method].takes_reuse:
        return [base]
    rows: List[Row] = []
    for reuse in reuses:
        row = base if reuse == REUSE_DEFAULT else \
            Row(base.method, variant_name(base.variant, reuse), base.options + (("reuse", reuse),))
        if row not in rows:
            rows.append(row)
    return rows


UPDATE_PREFIX = "update_"
"""A row option named ``update_<keyword>`` gives the learning reuse's
``LearningReuse(<keyword>=value)`` (the flags of :data:`UPDATE_FLAGS` and ``--update-option``)."""


UPDATE_FLAGS: Dict[str, Dict[str, Any]] = {
    "update_balance": {"when_shifted": "when_shifted", "always": "always", "off": False},
    "update_rollback": {"on": True, "off": False},
    "update_early_stop": {"on": True, "off": False},
    "update_epochs": {str(k): k for k in (1, 2, 3, 5, 10)},
    "update_top_layers": {str(k): k for k in (1, 2, 3, 6)},
    "update_replay_every": {str(k): k for k in (1, 2, 4, 8, 16)},
}
"""The learning reuse's update options a harness call can set (``--update-balance``,
``--update-rollback``, ``--update-early-stop``, ``--update-epochs``, ``--update-top-layers``,
``--update-replay-every``): each flag's words and the
``LearningReuse`` value each gives (:data:`UPDATE_KEYWORDS`; the balance rule names
repeat ``learning_reuse.BALANCE_RULES``, which imports torch; a test keeps them equal).
A flag left out (or ``default``) leaves the option at the library's default."""

UPDATE_KEYWORDS = {name: name[len(UPDATE_PREFIX):] for name in UPDATE_FLAGS}
"""The :class:`~avalanche_sdr.training.learning_reuse.LearningReuse` keyword each update
option sets: its name less :data:`UPDATE_PREFIX` (the harness keeps the flag names its run
files record)."""

UPDATE_VARIANT_WORDS = {"update_balance": "balance", "update_rollback": "rollback", "update_early_stop": "earlystop",
                        "update_epochs": "epochs", "update_top_layers": "top", "update_replay_every": "replay"}
"""How a set update option names its row's variant: ``accumulate_balance_always``,
``accumulate_rollback_off``, ``accumulate_earlystop_on``, ``accumulate_epochs_3``,
``accumulate_top_1``, ``accumulate_replay_4``."""


def update_rows(rows: Sequence[Row], updates: Optional[Dict[str, str]]) -> List[Row]:
    """``rows`` with the update options ``updates`` (option name -> flag word of
    :data:`UPDATE_FLAGS`; ``"default"`` or absent: unchanged) given to every row of the
    learning reuse (options' ``reuse`` ``"accumulate"``), each such row renamed
    ``<variant>_<word>_<flag word>``; other rows unchanged.

    :raises ValueError: an unknown option or flag word (the message lists them).
    """
    chosen = []
    for name, word in (updates or {}).items():
        if name not in UPDATE_FLAGS:
            raise ValueError(f"unknown update option {name!r}; they are {sorted(UPDATE_FLAGS)}")
        if word in (None, "default"):
            continue
        if word not in UPDATE_FLAGS[name]:
            raise ValueError(f"{name}: unknown value {word!r}; choose one of {['default'] + list(UPDATE_FLAGS[name])}")
        chosen.append((name, word))
    return _learning_reuse_rows(rows, [f"{UPDATE_VARIANT_WORDS[n]}_{w}" for n, w in chosen],
                                tuple((n, UPDATE_FLAGS[n][w]) for n, w in chosen))


def _learning_reuse_rows(rows: Sequence[Row], suffix: Sequence[str], options: Options) -> List[Row]:
    """``rows`` with every learning-reuse row (options' ``reuse`` ``"accumulate"``) renamed
    ``<variant>_<suffix...>`` and given ``options`` too; other rows, and all of them where
    ``options`` is empty, unchanged."""
    if not options:
        return list(rows)
    return [Row(row.method, variant_name(row.variant, *suffix), row.options + tuple(options))
            if row_reuse(dict(row.options)) == REUSE_ACCUMULATE else row for row in rows]


def parse_update_option(text: str) -> Tuple[str, Any]:
    """``--update-option``'s ``KEYWORD=VALUE``: the keyword and the value read as JSON
    (``3``, ``0.0005``, ``true``, ``"always"``), else as the text itself (``always``).

    :raises ValueError: no ``=``, or an empty keyword.
    """
    keyword, sep, value = text.partition("=")
    if not sep or not keyword.strip():
        raise ValueError(f"expected KEYWORD=VALUE (a LearningReuse keyword and its value, e.g. lr=0.0005), "
                         f"got {text!r}")
    try:
        return keyword.strip(), json.loads(value)
    except json.JSONDecodeError:
        return keyword.strip(), value


def value_word(value: Any) -> str:
    """How a value names a row's variant: ``0.0005``, ``true``, ``always``, ``none``.

    :raises ValueError: a value whose word would not be a plain file-name part (letters,
        digits, ``.``, ``+``, ``-``).
    """
    word = "none" if value is None else (json.dumps(value) if not isinstance(value, str) else value).lower()
    if not re.fullmatch(r"[a-z0-9.+-]+", word):
        raise ValueError(f"the value {value!r} cannot name a row (letters, digits, '.', '+' and '-' only)")
    return word


def option_rows(rows: Sequence[Row], keywords: Optional[Dict[str, Any]]) -> List[Row]:
    """``rows`` with the learning reuse's options ``keywords`` (``LearningReuse`` keyword ->
    value; ``--update-option``) given to every learning-reuse row, each such row renamed
    ``<variant>_<keyword>_<value word>`` (:func:`value_word`) and given the option
    ``update_<keyword>``; other rows unchanged. Which keywords the reuse takes, and which
    values, its builder checks (the library's constructor), so an option added to
    ``LearningReuse`` needs no change here."""
    keywords = keywords or {}
    return _learning_reuse_rows(rows, [f"{keyword}_{value_word(value)}" for keyword, value in keywords.items()],
                                tuple((UPDATE_PREFIX + k, v) for k, v in keywords.items()))


def row_reuse(options: Dict[str, Any]) -> str:
    """The reuse of a row (its ``options``' ``reuse``, else :data:`REUSE_DEFAULT`)."""
    return (options or {}).get("reuse", REUSE_DEFAULT)


def harness_rows(methods: Sequence[str], protocols: Sequence[str] = ("ours",), sweep: bool = False,
                 reuses: Sequence[str] = (REUSE_DEFAULT,)) -> List[Row]:
    """Every row of a harness call: each method under each protocol, with ``sweep`` its
    memory-knob variants, and each SDR row the harness configures under each reuse of
    ``reuses`` (:func:`reuse_rows`; the other methods' rows, the library's method presets
    included, once, whatever ``reuses``)."""
    rows: List[Row] = []
    for method in methods:
        if catalogue.METHODS[method].takes_reuse:
            family = [row for base in protocol_rows(method, protocols)
                      for row in [base] + (sweep_rows(base) if sweep else [])]
            rows += [r for reuse in reuses for row in family for r in reuse_rows(row, (reuse,))]
            continue
        for base in protocol_rows(method, protocols):
            rows += [base] + (sweep_rows(base) if sweep else [])
    return rows


def equal_memory_rows(reference: str, protocols: Sequence[str] = ("ours",)) -> List[Row]:
    """ER rows to be sized to ``reference``'s memory (variant ``mem_<reference>``, under each
    protocol); their ``replay_mem_size`` comes from :func:`size_equal_memory`. A task-free
    reference (:attr:`Method.task_free`) gets ONE class-incremental ER row (``ci_replay``,
    protocols do not apply)."""
    if catalogue.METHODS[reference].task_free:
        return [Row("ci_replay", f"mem_{reference}")]
    return [Row("replay", variant_name(f"mem_{reference}", base.variant), base.options)
            for base in protocol_rows("replay", protocols)]


def harness_variant_rows(args, tuned: Optional[Dict[str, Dict[str, Any]]] = None) -> List[Row]:
    """The rows of a call's first phase: every ``--methods`` row under each ``--protocol``,
    with ``--sweep`` their memory-knob variants, and every SDR row under each ``--reuse``
    (:func:`harness_rows`); with ``--tuned-only``, none of a method of ``tuned`` (the
    ``--tune`` choices that get a ``[tuned]`` row: that row stands for it); the
    learning-reuse rows with the call's update options (:func:`update_rows`,
    ``args.update_options``; then :func:`option_rows`, ``args.update_keywords``)."""
    rows = harness_rows(args.methods, getattr(args, "protocol", None) or ["ours"], getattr(args, "sweep", False),
                        getattr(args, "reuse", None) or [REUSE_DEFAULT])
    if getattr(args, "tuned_only", False):
        rows = [r for r in rows if r.method not in (tuned or {})]
    return option_rows(update_rows(rows, getattr(args, "update_options", None)), getattr(args, "update_keywords", None))


__all__ = ["MEMORY_KNOBS", "PROTOCOLS", "REUSE_DEFAULT", "SWEEP_EFT", "SWEEP_PER_CLASS", "UPDATE_FLAGS",
           "UPDATE_PREFIX", "UPDATE_VARIANT_WORDS", "Options", "Row", "equal_memory_rows", "harness_rows",
           "harness_variant_rows", "option_rows", "parse_update_option", "protocol_rows", "reuse_rows", "row_reuse",
           "sweep_rows", "update_rows", "value_word", "variant_name"]
