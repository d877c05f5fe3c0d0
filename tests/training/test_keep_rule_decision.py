"""The learning reuse's keep rule (avalanche_sdr/training/keep_rule.py): held-out draws and
the decision, checked against hand-counted cases."""
from __future__ import annotations

import pytest
import torch

from avalanche_sdr.training import keep_rule
from avalanche_sdr.training.keep_rule import SetComparison, compare_set, decide, split_heldout


def test_split_heldout_is_stratified_seeded_and_disjoint():
    y = torch.tensor([0] * 50 + [1] * 12 + [2] * 4 + [3] * 200)
    train, held = split_heldout(y, 4, task=7)
    assert torch.equal(torch.sort(torch.cat([train, held])).values, torch.arange(len(y)))
    assert not torch.isin(train, held).any()
    counts = torch.bincount(y[held], minlength=4).tolist()
    assert counts == [10, 2, 0, 20]  # min(20, n_k // 5)
    again = split_heldout(y, 4, task=7)
    assert torch.equal(again[1], held)
    other = split_heldout(y, 4, task=8)
    assert not torch.equal(other[1], held)  # another task draws other images


@pytest.mark.parametrize("y,message", [(torch.tensor([0.0, 1.0]), "int64"), (torch.tensor([[0, 1]]), "1-D"),
                                       (torch.tensor([0, 3]), "0..1")])
def test_split_heldout_refuses_bad_labels(y, message):
    with pytest.raises(ValueError, match=message):
        split_heldout(y, 2, task=0)


def test_compare_set_counts_losses_and_gains():
    ref = torch.tensor([True, True, False, False, True])
    cand = torch.tensor([True, False, True, True, True])
    s = compare_set(3, ref, cand)
    assert (s.task, s.images, s.losses, s.gains, s.passes) == (3, 5, 1, 2, True)
    assert not compare_set(3, cand, ref).passes  # the reverse loses one image net
    with pytest.raises(ValueError, match="one length"):
        compare_set(0, ref, cand[:3])
    with pytest.raises(ValueError, match="bool"):
        compare_set(0, ref.float(), cand)


def test_decide_keeps_only_with_pooled_evidence_and_no_set_losing():
    sets = [SetComparison(task=5, images=6, losses=0, gains=1), SetComparison(task=1, images=4, losses=1, gains=1)]
    rising = torch.tensor([0.1, 0.2, 0.05, 0.3, 0.0, 0.1, 0.2, 0.4, 0.1, 0.2])  # 9 of 9 non-tied rise
    kept = decide(sets, rising)
    assert (kept.positive, kept.nonzero) == (9, 9)
    assert kept.p_value == pytest.approx(0.5 ** 9)
    assert kept.keep
    # the same evidence, but one set loses an image net: restored
    losing = [sets[0], SetComparison(task=1, images=4, losses=2, gains=1)]
    assert not decide(losing, rising).keep
    # 7 rises of 10: p = P(Bin(10, 1/2) >= 7) = 176/1024 > 0.05: restored
    mixed = torch.tensor([0.1] * 7 + [-0.1] * 3)
    decision = decide(sets, mixed)
    assert decision.p_value == pytest.approx(176 / 1024)
    assert not decision.keep
    # nothing changed: no evidence, restored
    unchanged = decide(sets, torch.zeros(10))
    assert (unchanged.nonzero, unchanged.p_value, unchanged.keep) == (0, 1.0, False)
    assert decide(sets, rising).to_dict()["sets"][0] == {"task": 5, "images": 6, "losses": 0, "gains": 1}


def test_decide_needs_as_many_rises_as_the_level_allows():
    one_set = [SetComparison(task=0, images=keep_rule.HELDOUT_CAP, losses=0, gains=0)]
    floor = 5  # 0.5 ** 5 <= 0.05 < 0.5 ** 4
    few = torch.zeros(keep_rule.HELDOUT_CAP)
    few[:floor - 1] = 1.0
    assert not decide(one_set, few).keep
    few[floor - 1] = 1.0
    assert decide(one_set, few).keep


@pytest.mark.parametrize("sets,changes,message", [
    ([], torch.zeros(0), "at least one"),
    ([SetComparison(task=0, images=3, losses=0, gains=0)], torch.zeros(4), "hold 3"),
    ([SetComparison(task=0, images=2, losses=0, gains=0)], torch.tensor([0.1, float("nan")]), "NaN"),
])
def test_decide_refuses_bad_input(sets, changes, message):
    with pytest.raises(ValueError, match=message):
        decide(sets, changes)
