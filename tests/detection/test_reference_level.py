"""The level of the per-class repeat test when the reference is a warm-start task's images.

A synthetic E0 that was pretrained on some rows of a task maps those rows elsewhere
than fresh images of the same class (here: a mean shift of the features of the rows it
trained on). A reference of the task's training images then rejects true repeats far
more often than the level; a reference of the rows :class:`ReferenceHoldout` kept out of
pretraining does not. Seeded; the counts must fall inside 99.9 % binomial bands.
"""
import pytest
import torch
from scipy import stats

from avalanche_sdr.detection import ReferenceHoldout, hotelling_pvalue

LEVEL = 0.05  # a level with enough rejections to measure in a fast test
D, PER_CLASS, FRESH, SHIFT = 8, 60, 30, 1.0


def _rejections(replicates: int):
    """Per-class rejections at LEVEL of fresh draws against (a) the task's training
    images and (b) its held-out images, over ``replicates`` seeded tasks of 2 classes."""
    y = torch.arange(2).repeat_interleave(PER_CLASS)
    direction = torch.nn.functional.normalize(torch.ones(D, dtype=torch.float64), dim=0)
    old = new = 0
    for r in range(replicates):
        g = torch.Generator().manual_seed(r)
        means = 3 * torch.randn(2, D, generator=g, dtype=torch.float64)
        features = means[y] + torch.randn(len(y), D, generator=g, dtype=torch.float64)
        holdout = ReferenceHoldout.draw({0: y}, 0.25, seed=r)
        trained = holdout.kept(0, len(y))
        features[trained] += SHIFT * direction  # what pretraining did to the rows it saw
        held = torch.zeros(len(y), dtype=torch.bool)
        held[holdout.held_out(0, len(y))] = True
        for j in range(2):
            fresh = means[j] + torch.randn(FRESH, D, generator=g, dtype=torch.float64)
            old += hotelling_pvalue(fresh, features[y == j]) < LEVEL
            new += hotelling_pvalue(fresh, features[(y == j) & held]) < LEVEL
    return old, new


def test_held_out_references_keep_the_level_where_training_images_do_not():
    replicates = 400
    tests = 2 * replicates
    old, new = _rejections(replicates)
    lo, hi = stats.binom.interval(0.999, tests, LEVEL)
    assert lo <= new <= hi, f"held-out reference: {new}/{tests} rejections, band [{lo}, {hi}]"
    assert old > 4 * hi, f"training-image reference: {old}/{tests} rejections (the level is not held)"


def test_held_out_rows_are_the_only_unshifted_rows():
    # The construction of the test above: held-out and trained rows partition the task.
    y = torch.arange(2).repeat_interleave(PER_CLASS)
    holdout = ReferenceHoldout.draw({0: y}, 0.25, seed=5)
    held, kept = holdout.held_out(0, len(y)), holdout.kept(0, len(y))
    assert len(held) == 2 * 15 and len(kept) == 2 * 45
    assert not set(held.tolist()) & set(kept.tolist())
    with pytest.raises(ValueError, match="draw the holdout from the same experiences"):
        holdout.kept(0, len(y) + 1)
    with pytest.raises(KeyError, match="held-out tasks: \\[0\\]"):
        holdout.held_out(1, len(y))
