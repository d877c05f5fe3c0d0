"""Tests for avalanche_sdr/evaluation/evaluator.py: a real Avalanche training loop.

A ``Naive`` strategy plus a stand-in plugin that appends detection records as
SDR does, on a tiny task-aware benchmark whose experiences carry a hidden
``group`` ``ExperienceAttribute``.
"""

import io
from types import SimpleNamespace

import pytest
import torch
from avalanche.benchmarks.scenarios.generic_scenario import (
    ExperienceAttribute,
    MaskedAttributeError,
)
from avalanche.evaluation.metrics import loss_metrics
from avalanche.logging import CSVLogger, TextLogger
from avalanche.training import Naive
from avalanche.training.plugins import SupervisedPlugin
from torch import nn

from avalanche_sdr.evaluation import DecisionLogger, SDREvaluationPlugin, sdr_evaluation_plugin

GROUPS = [0, 1, 0, 2]


@pytest.fixture
def grouped_benchmark(tiny_benchmark):
    """One experience per entry of GROUPS (task label t, samples x [6] float32), whose
    experiences carry the hidden ``group`` attribute GROUPS[t]."""
    bm = tiny_benchmark(range(len(GROUPS)), [100 + t for t in range(len(GROUPS))], (6,))
    for stream in (bm.train_stream, bm.test_stream):
        for exp, k in zip(stream, GROUPS):
            exp.group = ExperienceAttribute(k)
    return bm


class FakeDetectionPlugin(SupervisedPlugin):
    """Appends one record per experience: warm start for 2 tasks, then a fixed policy.

    Task 2 (group 0) reuses entry 0 (correct); task 3 (group 2) is new (correct).
    It must not read the hidden group, and checks that it cannot.
    """

    def __init__(self):
        super().__init__()
        self.decisions = {0: ("warm_start", None), 1: ("warm_start", None), 2: ("reuse", 0), 3: ("new", None)}

    def after_training_exp(self, strategy, **kwargs):
        with pytest.raises(MaskedAttributeError):
            strategy.experience.train().group
        task = strategy.experience.task_label
        decision, reused = self.decisions[task]
        creators = strategy.model.entry_creator
        entry = reused if reused is not None else len(creators)
        record = SimpleNamespace(
            task=task,
            decision=decision,
            entry=entry,
            reused_entry=reused,
            candidate_entries=sorted(creators),
            candidate_tasks=[creators[e] for e in sorted(creators)],
        )
        if reused is None:
            creators[entry] = task
        strategy.detection_records.append(record)


def run(evaluator, bm):
    torch.manual_seed(0)
    model = nn.Linear(6, 2)
    model.entry_creator = {}
    strategy = Naive(
        model=model,
        optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
        criterion=nn.CrossEntropyLoss(),
        train_mb_size=4,
        train_epochs=1,
        eval_mb_size=4,
        plugins=[FakeDetectionPlugin()],
        evaluator=evaluator,
    )
    strategy.detection_records = []
    for experience in bm.train_stream:
        strategy.train(experience, eval_streams=[])
        strategy.eval(bm.test_stream[: experience.current_experience + 1])
    return strategy


def test_plugin_logs_detection_memory_accuracy(tmp_path, grouped_benchmark):
    evaluator = sdr_evaluation_plugin(log_dir=tmp_path, interactive=False)
    assert isinstance(evaluator, SDREvaluationPlugin)
    with evaluator:
        run(evaluator, grouped_benchmark)
    last = evaluator.get_last_metrics()
    assert last["Detection_Correct/train_phase/train_stream"] == 1.0
    assert last["Detection_Scored/train_phase/train_stream"] == 2
    assert last["Repository_Memory_MB/train_phase/train_stream"] == pytest.approx(
        (6 * 2 + 2) * 4 / 2**20
    )
    assert any(name.startswith("Top1_Acc_Stream/eval_phase/test_stream") for name in last)
    assert any(name.startswith("StreamForgetting/eval_phase/test_stream") for name in last)
    assert any(name.startswith("Time_Exp/eval_phase/test_stream") for name in last)
    memory_series = evaluator.get_all_metrics()["Repository_Memory_MB/train_phase/train_stream"]
    assert memory_series[0] == [0, 1, 2, 3]

    text = (tmp_path / "training_log.txt").read_text()
    assert "Detection_Correct/train_phase/train_stream" in text
    assert "Repository_Memory_MB" in text
    assert (tmp_path / "eval_results.csv").read_text().count("\n") > 1
    csv_logger = next(lg for lg in evaluator.loggers if isinstance(lg, CSVLogger))
    assert csv_logger.training_file.closed and csv_logger.eval_file.closed
    evaluator.close()  # idempotent


def test_plugin_options():
    buffer = io.StringIO()
    evaluator = sdr_evaluation_plugin(
        interactive=False, text_log=buffer, extra_metrics=[loss_metrics(stream=True)]
    )
    assert [type(lg) for lg in evaluator.loggers] == [DecisionLogger, TextLogger]
    assert any(str(m).startswith("Loss_Stream") for m in evaluator.metrics)
    evaluator.close()
    assert not buffer.closed  # files the caller opened stay open

    quiet = sdr_evaluation_plugin(interactive=False, decision_lines=False, csv=True)  # no log_dir: no files
    assert quiet.loggers == []
    with pytest.raises(TypeError, match="text_log"):
        sdr_evaluation_plugin(text_log=3)


class _Terminal(io.StringIO):
    """A stdout that says it is a terminal."""

    def isatty(self):
        return True


def test_progress_bars_only_on_a_terminal_and_decision_lines_always(monkeypatch):
    from avalanche_sdr.evaluation.evaluator import ProgressLogger

    monkeypatch.setattr("sys.stdout", io.StringIO())  # piped or redirected
    piped = sdr_evaluation_plugin(interactive="auto")
    assert [type(lg) for lg in piped.loggers] == [DecisionLogger]
    monkeypatch.setattr("sys.stdout", _Terminal())
    terminal = sdr_evaluation_plugin(interactive="auto")
    assert [type(lg) for lg in terminal.loggers] == [ProgressLogger, DecisionLogger]
    assert [type(lg) for lg in sdr_evaluation_plugin(interactive=True).loggers] == [ProgressLogger, DecisionLogger]
    with pytest.raises(ValueError, match="interactive must be True, False or 'auto'"):
        sdr_evaluation_plugin(interactive="yes")


def test_progress_logger_leaves_decision_lines_to_the_decision_logger(capsys):
    from avalanche_sdr.evaluation.evaluator import ProgressLogger

    progress, decisions = ProgressLogger(), DecisionLogger()
    line = "[SDR] task 3: reuse entry 1 (task 1) | 0.4s"
    for logger in (progress, decisions):
        logger.log_single_metric("SDR_Decision/train_phase/train_stream/Task003", line, 3)
        logger.log_single_metric("Top1_Acc_Epoch/train_phase/train_stream/Task003", 0.5, 3)
    assert list(progress.metric_vals) == ["Top1_Acc_Epoch/train_phase/train_stream/Task003"]
    assert capsys.readouterr().out == line + "\n"
