"""The calibrated decision rule and its evidence functions."""
import math

import pytest

from avalanche_sdr.detection import (
    DECISION_RULES,
    CalibrationThresholds,
    calibrated_decision,
    label_ratio,
    likelihood_gap,
)

NAN = float("nan")


def test_likelihood_gap_in_units_of_the_reference_spread():
    gaps = likelihood_gap([-100.0, -150.0, -90.0, -80.0], [-100.0, -100.0, -100.0, NAN], [10.0, 10.0, 10.0, 5.0])
    assert gaps[:3] == [0.0, 5.0, -1.0] and math.isnan(gaps[3])
    assert likelihood_gap([-5.0, 1.0], [0.0, 0.0], [0.0, 0.0]) == [math.inf, 0.0]
    with pytest.raises(ValueError, match="one value per candidate"):
        likelihood_gap([1.0], [1.0, 2.0], [1.0])


def test_label_ratio():
    r = label_ratio([1.0, 4.0, 2.0], [4.0, 4.0, 0.0])
    assert r[:2] == [0.25, 1.0] and math.isnan(r[2])


def _evidence(**overrides):
    # Candidate 1 is the clear match: highest p, lowest S by far, ELBO at its reference.
    ev = dict(
        consistency=[0.1, 0.8, 0.1],
        complexity=[50.0, 2.0, 40.0],
        mean_elbo=[-300.0, -101.0, -280.0],
        reference_elbo=[-100.0, -100.0, -100.0],
        reference_elbo_std=[10.0, 10.0, 10.0],
        permuted_complexity=[60.0, 60.0, 60.0],
    )
    ev.update(overrides)
    return ev


LOOSE = CalibrationThresholds(max_elbo_gap=1.0, min_consistency_lift=1.5, min_complexity_margin=2.0,
                              max_label_ratio=0.5)


def test_reuses_the_clear_match():
    assert calibrated_decision(**_evidence(), thresholds=LOOSE) == 1


@pytest.mark.parametrize(
    "override, failing",
    [
        (dict(mean_elbo=[-300.0, -130.0, -280.0]), "likelihood gap 3.0 > 1.0"),
        (dict(consistency=[0.3, 0.4, 0.3]), "lift 1.2 < 1.5"),
        (dict(complexity=[3.0, 2.0, 40.0]), "margin 1.5 < 2"),
        (dict(complexity=[50.0, 2.0, 1.0]), "S votes for a candidate whose generator finds the task unlikely"),
        (dict(permuted_complexity=[60.0, 3.0, 60.0]), "label ratio 0.67 > 0.5"),
    ],
)
def test_each_failed_test_means_new(override, failing):
    assert calibrated_decision(**_evidence(**override), thresholds=LOOSE) is None, failing


def test_votes_that_agree_up_to_equivalence_reuse_the_consistency_vote():
    # p votes for 1, S for 2; the task is in-distribution for both generators (gap 0.1
    # and 0.3): e.g. two entries of one group after an earlier miss -> reuse p's vote.
    ev = _evidence(complexity=[50.0, 2.0, 1.0], mean_elbo=[-300.0, -101.0, -103.0])
    assert calibrated_decision(**ev, thresholds=LOOSE) == 1
    # The same disagreement with S's entry out of distribution (gap 3): new.
    ev = _evidence(complexity=[50.0, 2.0, 1.0], mean_elbo=[-300.0, -101.0, -130.0])
    assert calibrated_decision(**ev, thresholds=LOOSE) is None


def test_unknown_reference_falls_back_to_the_agreement_rule():
    ev = _evidence(reference_elbo=[NAN, NAN, NAN])
    assert calibrated_decision(**ev, thresholds=LOOSE) == 1
    ev = _evidence(reference_elbo=[NAN, NAN, NAN], complexity=[1.0, 2.0, 40.0])
    assert calibrated_decision(**ev, thresholds=LOOSE) is None


def test_no_candidates_and_bad_input():
    empty = dict(consistency=[], complexity=[], mean_elbo=[], reference_elbo=[], reference_elbo_std=[],
                 permuted_complexity=[])
    assert calibrated_decision(**empty) is None
    with pytest.raises(ValueError):
        calibrated_decision(**_evidence(complexity=[1.0, 2.0]))
    with pytest.raises(ValueError, match="must be a number"):
        CalibrationThresholds(max_elbo_gap=NAN)
    assert "calibrated" in DECISION_RULES and "agreement" in DECISION_RULES
