"""The level of the repeat test as a function of task size (avalanche_sdr.detection.level)
and its use by the two-sample and small-task rules."""
import json
import math
from dataclasses import replace

import pytest

from avalanche_sdr.detection import (DEFAULT_TWO_SAMPLE, LEVELS, FixedLevel, Level, LevelByPairedPower, LevelBySize,
                                     SmallTaskDetector, SmallTaskSettings, TwoSampleDetector, TwoSampleSettings,
                                     make_level)
from avalanche_sdr.models import TaskData
from test_two_sample import TEMPLATES, _add, make_model, sample  # tests/detection is on sys.path (pytest prepend mode)


def test_level_by_size_is_one_percent_small_a_hundredth_of_that_large_and_log_linear_between():
    level = LevelBySize()
    assert [level.at(n) for n in (1, 10, 39, 40)] == [0.01] * 4
    assert [level.at(n) for n in (100, 101, 500, 10 ** 6)] == [1e-4] * 4
    assert math.isclose(level.at(70), 1e-3, rel_tol=1e-12)  # halfway in log between 1e-2 and 1e-4
    assert math.isclose(level.at(63), 0.01 * 0.01 ** (23 / 60), rel_tol=1e-12)
    values = [level.at(n) for n in range(1, 150)]
    assert all(a >= b for a, b in zip(values, values[1:]))  # never rises with size


def test_fixed_level_is_the_same_at_every_size():
    assert [FixedLevel().at(n) for n in (2, 40, 100, 5000)] == [0.01] * 4
    assert FixedLevel(0.05).at(7) == 0.05


@pytest.mark.parametrize("bad", [dict(high=0.0), dict(low=1.0), dict(high=1e-3, low=1e-2), dict(small=0),
                                 dict(small=50, large=50), dict(large=10.5), dict(high=True)])
def test_level_by_size_refuses_settings_that_cannot_act(bad):
    with pytest.raises(ValueError):
        LevelBySize(**bad)


def test_levels_refuse_a_size_that_is_not_a_positive_int():
    for level in (FixedLevel(), LevelBySize()):
        with pytest.raises(ValueError, match="per_class must be a positive int"):
            level.at(0)
        with pytest.raises(ValueError, match="per_class must be a positive int"):
            level.at(2.5)


def test_make_level_takes_a_number_a_name_or_an_object():
    assert make_level(0.02) == FixedLevel(0.02)
    assert make_level("by_size") == LevelBySize() and make_level("fixed") == FixedLevel()
    custom = LevelBySize(low=1e-3)
    assert make_level(custom) is custom
    assert set(LEVELS) == {"fixed", "by_size", "by_paired_power"}
    assert all(isinstance(LEVELS[k](), Level) for k in LEVELS)
    with pytest.raises(ValueError, match=r"unknown level 'tiny'; the levels are \['fixed', 'by_size', 'by_paired_power'\]"):
        make_level("tiny")
    with pytest.raises(ValueError, match=r"must be a level in \(0, 1\)"):
        make_level(1.5)
    with pytest.raises(TypeError, match="a level is a number"):
        make_level([0.01])


def test_the_legend_of_a_detector_says_its_level_in_words():
    assert FixedLevel(0.05).describe() == "0.05"
    assert LevelBySize().describe() == "0.01 up to 40 images a class, falling to 0.0001 from 100"
    assert LevelBySize(low=1e-3, large=80).describe() == "0.01 up to 40 images a class, falling to 0.001 from 80"
    for detector in (TwoSampleDetector(TwoSampleSettings(alpha="by_size")),
                     SmallTaskDetector(SmallTaskSettings(two_sample=TwoSampleSettings(alpha="by_size")))):
        lines = detector.legend()
        assert all(line.startswith("    ") and len(line) <= 94 for line in lines)
        assert "p >= 0.01 up to 40 images a class, falling to 0.0001 from 100" in " ".join(
            " ".join(lines).split())
    assert "p >= 0.02\n" in "\n".join(TwoSampleDetector(TwoSampleSettings(alpha=0.02)).legend())


def test_two_sample_settings_take_the_level_by_name_and_record_it():
    by_size = TwoSampleSettings(alpha="by_size")
    assert by_size.alpha == LevelBySize() and by_size == TwoSampleSettings(alpha=LevelBySize())
    assert by_size.level(10) == 0.01 and by_size.level(200) == 1e-4
    assert json.loads(json.dumps(by_size.to_dict()))["alpha"] == {"level": "by_size", "high": 0.01, "low": 1e-4,
                                                                  "small": 40, "large": 100}
    # a number stays a number: the previous settings and their records are unchanged
    assert DEFAULT_TWO_SAMPLE.alpha == 0.01 and DEFAULT_TWO_SAMPLE.to_dict()["alpha"] == 0.01
    assert DEFAULT_TWO_SAMPLE.level(10) == DEFAULT_TWO_SAMPLE.level(1000) == 0.01
    with pytest.raises(ValueError, match="unknown level"):
        TwoSampleSettings(alpha="by_task")
    with pytest.raises(ValueError, match=r"alpha must lie in \(0, 1\)"):
        TwoSampleSettings(alpha=0.0)
    with pytest.raises(ValueError, match=r"alpha must lie in \(0, 1\)"):
        TwoSampleSettings(alpha=None)


def _repo(det):
    model = make_model()
    for task, name in enumerate("AB"):
        _add(model, det, task, TEMPLATES[name])
    return model


def _p_between_the_levels(monkeypatch):
    """Every candidate's combined p-value that the fixed level would keep becomes 1e-3:
    below 0.01, above 1e-4."""
    real = TwoSampleDetector._combined

    def combined(self, samples, refs, generator):
        p, sigma = real(self, samples, refs, generator)
        return (1e-3 if p >= 0.01 else p), sigma

    monkeypatch.setattr(TwoSampleDetector, "_combined", combined)


@pytest.mark.parametrize("per_class, fixed, by_size", [(120, "new", "reuse"), (30, "new", "new")])
def test_the_level_of_a_task_follows_its_size(monkeypatch, per_class, fixed, by_size):
    _p_between_the_levels(monkeypatch)
    decisions = {}
    for name, settings in (("fixed", DEFAULT_TWO_SAMPLE), ("by_size", replace(DEFAULT_TWO_SAMPLE, alpha="by_size"))):
        det = TwoSampleDetector(settings)
        model = _repo(det)
        x, y = sample(TEMPLATES["A"], per_class, seed=7)
        record = det.detect(model, TaskData(10, x, y))
        decisions[name] = record.decision
        if record.decision == "reuse":
            assert record.entry == 0 and max(record.p_value) == 1e-3 and record.power >= 0.9
    assert decisions == {"fixed": fixed, "by_size": by_size}


def test_the_smallest_class_sets_the_level(monkeypatch):
    _p_between_the_levels(monkeypatch)
    det = TwoSampleDetector(replace(DEFAULT_TWO_SAMPLE, alpha="by_size"))
    model = _repo(det)
    x, y = sample(TEMPLATES["A"], [300, 30], seed=7)  # alpha(30) = 0.01 > 1e-3: new
    assert det.detect(model, TaskData(10, x, y)).decision == "new"


def test_the_small_task_fallback_reads_the_level_at_the_task_size():
    settings = SmallTaskSettings(two_sample=TwoSampleSettings(alpha="by_size"))
    assert settings.two_sample.level(12) == 0.01  # the fallback's tasks: the previous level
    det = SmallTaskDetector(settings)
    model = make_model()
    for task, name in enumerate("AB"):
        entry = model.create_entry(task)
        model.heads.add(task, 2)
        x, y = sample(TEMPLATES[name], 120, seed=100 + task)
        det.remember(model, entry, TaskData(task, x, y))
    x, y = sample(TEMPLATES["A"], 150, seed=7)
    record = det.detect(model, TaskData(10, x, y))
    assert record.decision == "reuse" and record.entry == 0 and record.decoy_rank_pvalue is None
    assert det.config()["two_sample"]["alpha"]["level"] == "by_size"



def test_the_detectable_difference_falls_with_size_and_level_and_needs_enough_vectors():
    from avalanche_sdr.detection.level import detectable_difference

    anchor = detectable_difference(40, 40, 0.01, 2, 16)
    assert anchor == pytest.approx(1.49, abs=0.01)  # the power table of the level's rule
    assert detectable_difference(100, 100, 1e-4, 2, 16) == pytest.approx(1.08, abs=0.01)
    assert detectable_difference(300, 100, 1e-4, 2, 16) == pytest.approx(0.85, abs=0.01)
    assert detectable_difference(145, 13, 1e-4, 2, 16) > detectable_difference(145, 13, 0.01, 2, 16) > anchor
    assert detectable_difference(8, 8, 0.01, 2, 16) == math.inf  # n + m <= dim + 1: no test
    assert 100 < detectable_difference(10, 8, 0.01, 2, 16) < math.inf  # one denominator degree of freedom
    from avalanche_sdr.detection.level import hotelling_power
    assert hotelling_power(8, 8, 0.01, 2, 16, 5.0) == 0.0
    assert hotelling_power(100, 100, 1e-4, 2, 16, 1.08) == pytest.approx(0.9, abs=0.01)
    with pytest.raises(ValueError):
        detectable_difference(0, 10, 0.01, 2, 16)


def test_level_by_paired_power_is_level_by_size_unless_the_reference_lacks_the_power():
    paired, by_size = LevelByPairedPower(), LevelBySize()
    assert paired.for_test(120, 100, 2, 16) == by_size.at(120) == 1e-4  # a full reference
    for c in (2, 5):  # the default flow's held-out warm-start reference (the calibration's streams)
        assert paired.for_test(100, 50, c, 16) == 1e-4
    assert paired.for_test(30, 13, 2, 16) == 0.01  # small tasks: high already
    assert paired.for_test(145, 13, 2, 16) == 0.01  # an entry created by a task of 13 a class: no power
    between = paired.for_test(124, 25, 2, 16)
    assert by_size.at(124) < between < 0.01
    from avalanche_sdr.detection.level import detectable_difference, hotelling_power
    anchor = detectable_difference(40, 40, 0.01, 2, 16)  # the lowest level with 90 % power at the anchor's difference
    assert hotelling_power(124, 25, between, 2, 16, anchor) >= 0.9 > hotelling_power(124, 25, between * 0.99, 2, 16,
                                                                                      anchor)
    for n, m in ((10, 8), (12, 5), (41, 2)):  # too few vectors for the test (n + m <= 17) or nearly: no error
        assert paired.for_test(n, m, 2, 16) == 0.01
    for level in (FixedLevel(), by_size):  # the other levels ignore the reference
        assert level.for_test(145, 13, 2, 16) == level.at(145)
    assert LEVELS["by_paired_power"]() == paired and make_level("by_paired_power") == paired
    assert paired.to_dict() == dict(by_size.to_dict(), level="by_paired_power")
    assert paired.describe().endswith(", as far as the entry's reference has the power")
    with pytest.raises(ValueError, match="low"):
        LevelByPairedPower(low=0.1)
    settings = TwoSampleSettings(alpha="by_paired_power")
    assert settings.level(145) == 1e-4 and settings.level(145, 13, 2) == 0.01
    assert TwoSampleSettings(alpha="by_size").level(145, 13, 2) == 1e-4
    with pytest.raises(ValueError, match="classes="):
        settings.level(145, 13)


@pytest.mark.parametrize("reference_per_class, by_size, by_paired_power", [(120, "reuse", "reuse"),
                                                                           (15, "reuse", "new")])
def test_the_paired_level_rises_where_the_entry_stores_a_small_reference(monkeypatch, reference_per_class,
                                                                         by_size, by_paired_power):
    """A task of 120 images a class whose p-value against its entry is 1e-3: reused at 1e-4 when the entry
    stores 120 vectors a class under either level; against an entry created by a task of 15 a class the
    paired level is 0.01 and the task is new."""
    _p_between_the_levels(monkeypatch)
    decisions = {}
    for name in ("by_size", "by_paired_power"):
        det = TwoSampleDetector(replace(DEFAULT_TWO_SAMPLE, alpha=name))
        model = make_model()
        for task, tmpl in enumerate("AB"):
            _add(model, det, task, TEMPLATES[tmpl], per_class=reference_per_class)
        stored = min(reference_per_class, DEFAULT_TWO_SAMPLE.reference_per_class)  # kept at most 100 a class
        assert det.smallest_reference(model, 0) == stored  # what the level is paired with
        x, y = sample(TEMPLATES["A"], 120, seed=7)
        record = det.detect(model, TaskData(10, x, y))
        decisions[name] = record.decision
        if record.decision == "reuse":
            assert record.entry == 0 and max(record.p_value) == 1e-3
    assert decisions == {"by_size": by_size, "by_paired_power": by_paired_power}
