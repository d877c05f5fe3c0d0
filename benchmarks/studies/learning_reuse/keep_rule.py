"""The learning reuse's keep rule, fixed before any run: its held-out sizes and error rates.

Issue #45 asks for a learning reuse that cannot fall below head-only *by design*: an
update is kept only where held-out evidence shows it is no worse than the head-only
outcome, on the repeat's own held-out images (against the head that head-only would
have trained) **and** on every earlier task the entry serves; otherwise the entry is
restored and the repeat gets the head-only result. The rule's sizes, margin and level
are written here before any run of it (docs/results/learning_reuse/keep_rule/
rule_fixed_in_advance.md states the rule in words); this module computes, exactly, what
they imply: how many held-out images each comparison has and how often a comparison
passes an update that truly lowers a task's accuracy.

The rule (its constants are :mod:`avalanche_sdr.training.keep_rule`'s, the one definition):

1. **Held-out sets.** Every task an entry serves (its creating task and each repeat)
   keeps :func:`~avalanche_sdr.training.keep_rule.heldout_per_class` images of each class k of its training data,
   ``min(HELDOUT_CAP, n_k // HELDOUT_FRACTION_DENOMINATOR)``, drawn by a generator seeded
   by the task; an update never trains on them.
2. **Per-set accuracy check.** On each set s the candidate (the updated entry) and the
   reference (for the repeat: a head trained head-only on the frozen entry with the
   repeat's training share; for an earlier task: the entry before the update) are scored
   image by image: L_s images the reference gets right and the candidate wrong, G_s the
   reverse. The check passes where ``L_s - G_s <= ACCURACY_MARGIN`` (0: no set may lose
   an image net).
3. **Pooled evidence.** Over the pooled held-out images of all sets, the per-image change
   of the true class's log-probability (candidate minus reference) must be positive for
   more images than chance allows: the exact one-sided sign test, p <= ``SIGN_LEVEL``
   (ties dropped). Under "the update does not raise the median log-probability" a keep
   has probability <= ``SIGN_LEVEL``, exactly (binomial); no keep is possible on fewer
   than :func:`sign_test_min_images` non-tied images.
4. **Keep** where 2 holds on every set and 3 holds; else restore the entry exactly and
   give the repeat the head-only result (a head trained on the frozen entry with all its
   training images, as ``reuse="head"`` trains it).

The error rate of check 2 (what :func:`pass_probability` computes): a set of n images on
which the update truly loses ``p_loss`` and gains ``p_gain`` per image (so its true
accuracy change is ``p_gain - p_loss``) passes with probability P(L - G <= margin),
L ~ Binomial(n, p_loss), G | L ~ Binomial(n - L, p_gain / (1 - p_loss)). Exact: scipy's
binomial distributions, summed over L.

Why hand-written: the sum over L of two binomials is four lines on top of scipy; no
library offers the trinomial difference's distribution.

Usage (seconds)::

    python -m benchmarks.studies.learning_reuse.keep_rule --out OUT

writes ``OUT/keep_rule.md`` (the error-rate table of the rule's sizes).
"""
from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import List, Optional, Sequence

from avalanche_sdr.training.keep_rule import (ACCURACY_MARGIN, HELDOUT_CAP, HELDOUT_FRACTION_DENOMINATOR, SIGN_LEVEL,
                                              heldout_per_class)

TASK_SIZES = (10, 25, 50, 100, 300)
"""Training images per class in the table (the generated designs' range is 10-300)."""

CLASS_COUNTS = (2, 5)
"""Classes per task in the table (the generated designs' range is 2-5)."""

TRUE_LOSSES = (0.01, 0.02, 0.05)
"""True accuracy losses of a set in the table (fractions: 1, 2, 5 points)."""


def pass_probability(n: int, p_loss: float, p_gain: float, margin: int = ACCURACY_MARGIN) -> float:
    """Probability that a set of ``n`` held-out images passes check 2, P(L - G <= margin).

    :param n: held-out images of the set (int >= 0).
    :param p_loss: per-image probability that the reference is right and the candidate
        wrong (fraction in [0, 1]).
    :param p_gain: per-image probability of the reverse (``p_loss + p_gain <= 1``).
    :param margin: net images the set may lose (int >= 0).
    :returns: the exact probability (float in [0, 1]).
    """
    from scipy.stats import binom

    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise ValueError(f"n must be an int >= 0 (held-out images), got {n!r}")
    if not isinstance(margin, int) or isinstance(margin, bool) or margin < 0:
        raise ValueError(f"margin must be an int >= 0 (images), got {margin!r}")
    if not (0.0 <= p_loss <= 1.0 and 0.0 <= p_gain <= 1.0 and p_loss + p_gain <= 1.0 + 1e-12):
        raise ValueError(f"p_loss and p_gain must be probabilities with p_loss + p_gain <= 1, got {p_loss}, {p_gain}")
    if p_loss >= 1.0:
        return 1.0 if n <= margin else 0.0
    gain_given_no_loss = min(1.0, p_gain / (1.0 - p_loss))
    total = 0.0
    for losses in range(n + 1):
        needed = losses - margin  # G >= L - margin
        tail = 1.0 if needed <= 0 else float(binom.sf(needed - 1, n - losses, gain_given_no_loss))
        total += float(binom.pmf(losses, n, p_loss)) * tail
    return min(1.0, total)


def sign_test_min_images(level: float = SIGN_LEVEL) -> int:
    """Fewest non-tied pooled images on which check 3 can keep an update: the smallest m
    with 0.5 ** m <= ``level`` (all m changes positive).

    :param level: the sign test's level (fraction in (0, 1)).
    """
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must lie in (0, 1), got {level!r}")
    return math.ceil(math.log(level) / math.log(0.5) - 1e-12)


def error_table(task_sizes: Sequence[int] = TASK_SIZES, class_counts: Sequence[int] = CLASS_COUNTS,
                true_losses: Sequence[float] = TRUE_LOSSES) -> List[dict]:
    """Rows of the error-rate table: for each task size and class count, the set's
    held-out images and check 2's pass probability at each true loss, with no gains
    (``p_gain = 0``) and with as many gains as twice the loss would need
    (``p_loss = 2 x loss``, ``p_gain = loss``: more churn, the harder case).

    :returns: ``[{"n_k", "classes", "heldout", "pass": {(loss, churn): probability}}]``.
    """
    rows = []
    for n_k in task_sizes:
        for classes in class_counts:
            n = classes * heldout_per_class(n_k)
            passes = {}
            for loss in true_losses:
                passes[(loss, "no gains")] = pass_probability(n, loss, 0.0)
                passes[(loss, "churn")] = pass_probability(n, 2 * loss, loss)
            rows.append({"n_k": n_k, "classes": classes, "heldout": n, "pass": passes})
    return rows


def render(rows: Sequence[dict]) -> str:
    """The Markdown table of :func:`error_table`'s rows, with the rule's constants."""
    losses = sorted({loss for row in rows for loss, _ in row["pass"]})
    header = ["images / class", "classes", "held-out images of the set"]
    for loss in losses:
        header += [f"P(pass) at -{100 * loss:g} pt, no gains", f"P(pass) at -{100 * loss:g} pt, churn"]
    lines = [f"Rule constants: held-out min({HELDOUT_CAP}, n_k // {HELDOUT_FRACTION_DENOMINATOR}) per class; "
             f"accuracy margin {ACCURACY_MARGIN} images; sign-test level {SIGN_LEVEL:g} "
             f"(no keep on fewer than {sign_test_min_images()} non-tied pooled images).", "",
             "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        cells = [str(row["n_k"]), str(row["classes"]), str(row["heldout"])]
        for loss in losses:
            cells += [f"{row['pass'][(loss, 'no gains')]:.3f}", f"{row['pass'][(loss, 'churn')]:.3f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.studies.learning_reuse.keep_rule",
        description="Write the learning reuse keep rule's error-rate table (exact).")
    parser.add_argument("--out", required=True, help="output folder (keep_rule.md)")
    return parser.parse_args(argv)


def main(argv: Optional[Sequence[str]] = None) -> Path:
    args = parse_args(argv)
    out = Path(args.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise SystemExit(f"cannot create the output folder {out}: {error}; pass a writable --out") from None
    path = out / "keep_rule.md"
    text = render(error_table())
    path.write_text(text, encoding="utf-8")
    print(text, end="")
    print(f"wrote {path}")
    return path


if __name__ == "__main__":
    main()


__all__ = ["CLASS_COUNTS", "TASK_SIZES", "TRUE_LOSSES", "error_table", "main", "pass_probability", "render",
           "sign_test_min_images"]
