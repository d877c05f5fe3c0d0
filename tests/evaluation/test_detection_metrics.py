"""Tests for avalanche_sdr/evaluation/detection_metrics.py.

The strategy is a lightweight stand-in (SimpleNamespace) with the attributes
the metric reads; experiences are real Avalanche ``CLExperience`` objects in an
``EagerCLStream`` whose ``group`` is an ``ExperienceAttribute`` hidden in
train mode, so the tests exercise Avalanche's attribute masking.
"""

from types import SimpleNamespace

import pytest
from avalanche.benchmarks.scenarios.generic_scenario import (
    CLExperience,
    EagerCLStream,
    ExperienceAttribute,
    MaskedAttributeError,
)
from avalanche.training.plugins import EvaluationPlugin

from avalanche_sdr.evaluation import DetectionMetrics, experience_ground_truth

# Stream: 3 warm-start tasks (groups 0, 1, 2), then
# T3 g0 reuse e0 -> correct, T4 g1 new -> miss (creates e3),
# T5 g3 new -> correct (e4), T6 g2 reuse e3 (created by T4, g1) -> incorrect.
GROUPS = [0, 1, 2, 0, 1, 3, 2]
DECISIONS = [
    ("warm_start", 0, None),
    ("warm_start", 1, None),
    ("warm_start", 2, None),
    ("reuse", 0, 0),
    ("new", 3, None),
    ("new", 4, None),
    ("reuse", 3, 3),
]
EXPECTED = [None, None, None, "correct", "miss", "correct", "incorrect"]


def make_stream(groups):
    experiences = []
    for k in groups:
        exp = CLExperience(current_experience=0, origin_stream=None)
        exp.group = ExperienceAttribute(k)  # hidden in train and eval mode
        exp.split = ExperienceAttribute(0)
        experiences.append(exp)
    return EagerCLStream("train", experiences)


def make_record(task, decision, entry, reused, n_entries):
    candidates = list(range(n_entries))
    return SimpleNamespace(
        task=task,
        decision=decision,
        entry=entry,
        reused_entry=reused,
        candidate_entries=candidates if decision != "warm_start" else [],
        candidate_tasks=[],
    )


class FakeStrategy(SimpleNamespace):
    """What DetectionMetrics reads from an SDRStrategy."""

    def __init__(self):
        super().__init__(
            detection_records=[],
            model=SimpleNamespace(entry_creator={}),
            experience=None,
            is_eval=False,
            clock=SimpleNamespace(train_exp_counter=0),
        )

    def finish_experience(self, experience, task, decision, entry, reused):
        """Mimic SDR after training ``experience`` (in train mode, group hidden)."""
        self.experience = experience.train()
        record = make_record(task, decision, entry, reused, len(self.model.entry_creator))
        if decision != "reuse":
            self.model.entry_creator[entry] = task
        self.detection_records.append(record)


def run_stream(metric, call):
    stream = make_stream(GROUPS)
    strategy = FakeStrategy()
    emitted = []
    for task, (exp, (decision, entry, reused)) in enumerate(zip(stream, DECISIONS)):
        strategy.clock.train_exp_counter = task
        strategy.finish_experience(exp, task, decision, entry, reused)
        emitted.append(call(strategy))
    return strategy, emitted


def test_group_hidden_in_train_mode_readable_via_logging():
    exp = make_stream([4])[0]
    with pytest.raises(MaskedAttributeError):
        exp.train().group
    assert experience_ground_truth(exp.train(), "group") == 4
    assert experience_ground_truth(exp.eval(), "split") == 0


def test_metric_scores_stream_directly():
    metric = DetectionMetrics()
    strategy, emitted = run_stream(metric, metric.after_training_exp)
    assert list(metric.outcomes.values()) == EXPECTED
    assert metric.result() == {"correct": 0.5, "miss": 0.25, "incorrect": 0.25, "n_scored": 4}
    # Nothing is emitted during warm start; four values per experience after.
    assert emitted[:3] == [[], [], []]
    last = {mv.name: mv.value for mv in emitted[-1]}
    assert last == {
        "Detection_Correct/train_phase/train_stream": 0.5,
        "Detection_Miss/train_phase/train_stream": 0.25,
        "Detection_Incorrect/train_phase/train_stream": 0.25,
        "Detection_Scored/train_phase/train_stream": 4,
    }
    assert emitted[3][0].x_plot == 3
    # Running rates after the first scored task.
    assert {mv.name.split("/")[0]: mv.value for mv in emitted[3]}["Detection_Correct"] == 1.0
    assert metric.after_training(strategy) == []  # the same values were just emitted


def test_catch_up_scores_a_resumed_run_as_an_uninterrupted_one():
    # A run resumed after task 4: the metric is new, the first five records restored.
    finished, emitted = run_stream(DetectionMetrics(), lambda strategy: None)
    stream = make_stream(GROUPS)
    resumed = DetectionMetrics()
    resumed.catch_up(finished.detection_records[:5], list(stream)[:5], {0: 0, 1: 1, 2: 2, 3: 4})
    assert list(resumed.outcomes.values()) == EXPECTED[:5]
    strategy = FakeStrategy()
    strategy.detection_records = list(finished.detection_records[:5])
    strategy.model.entry_creator = {0: 0, 1: 1, 2: 2, 3: 4}
    for task in (5, 6):
        strategy.finish_experience(stream[task], task, *DECISIONS[task])
        resumed.update(strategy)
    assert list(resumed.outcomes.values()) == EXPECTED
    # Without catching up, task 6's reuse of an entry made by a task the metric never saw
    # (task 4) is refused.
    fresh = DetectionMetrics()
    with pytest.raises(ValueError, match="observe every training experience"):
        fresh.catch_up(strategy.detection_records[6:], [stream[6]], strategy.model.entry_creator)


def test_metric_stream_level_only():
    metric = DetectionMetrics(emit_after_exp=False)
    strategy, emitted = run_stream(metric, metric.after_training_exp)
    assert emitted == [[]] * len(GROUPS)
    final = {mv.name.split("/")[0]: mv.value for mv in metric.after_training(strategy)}
    assert final == {
        "Detection_Correct": 0.5,
        "Detection_Miss": 0.25,
        "Detection_Incorrect": 0.25,
        "Detection_Scored": 4,
    }


def test_metric_through_evaluation_plugin_collects_all():
    metric = DetectionMetrics(emit_after_training=False)
    evaluator = EvaluationPlugin(metric, loggers=[])

    def call(strategy):
        evaluator.after_training_exp(strategy)
        return None

    run_stream(metric, call)
    series = evaluator.get_all_metrics()["Detection_Miss/train_phase/train_stream"]
    assert series[0] == [3, 4, 5, 6]
    assert series[1] == pytest.approx([0.0, 0.5, 1 / 3, 0.25])


def test_metric_ignores_repeated_calls_and_non_sdr_strategies():
    metric = DetectionMetrics()
    strategy, _ = run_stream(metric, metric.after_training_exp)
    assert metric.update(strategy) is None  # no new record
    assert metric.result()["n_scored"] == 4
    baseline = SimpleNamespace(experience=make_stream([0])[0], is_eval=False)
    fresh = DetectionMetrics()
    assert fresh.after_training_exp(baseline) == []
    metric.reset()
    assert metric.result()["n_scored"] == 0 and metric.outcomes == {}


def test_metric_warns_without_ground_truth():
    strategy = FakeStrategy()
    exp = EagerCLStream("train", [CLExperience(current_experience=0, origin_stream=None)])[0]
    strategy.finish_experience(exp, 0, "new", 0, None)
    metric = DetectionMetrics()
    with pytest.warns(UserWarning, match="no `group` attribute"):
        assert metric.after_training_exp(strategy) == []


def test_metric_attached_mid_stream_fails_clearly():
    stream = make_stream([0, 0])
    strategy = FakeStrategy()
    strategy.finish_experience(stream[0], 0, "warm_start", 0, None)
    strategy.finish_experience(stream[1], 1, "reuse", 0, 0)
    metric = DetectionMetrics()
    metric._n_records_seen = 1  # pretend the first experience happened before
    with pytest.raises(ValueError, match="cannot score task 1"):
        metric.after_training_exp(strategy)
