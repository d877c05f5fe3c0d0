"""The group curve and backward transfer of :func:`~avalanche_sdr.training.stream_runner.run_sdr_stream`
on the prototype stream of conftest.py (8 tasks: 4 groups x 2 splits, 3 warm-start tasks),
decisions from ground truth.

``bwt`` must equal Avalanche's ``StreamBWT`` (``bwt_metrics(stream=True)``) read after the
final evaluation; the paper's reuse (a reused entry frozen, a head per task) changes no
earlier task, so its BWT and forgetting are exactly 0; the learning reuse trains the
entries of repeats, so its are not. The group evaluations leave training as it was, and a
checkpointed run resumed mid-stream reports the curve of an uninterrupted one.
"""
import types

import pytest
import torch
from avalanche.evaluation.metrics import accuracy_metrics, bwt_metrics, forgetting_metrics
from avalanche.training.plugins import EvaluationPlugin

from avalanche_sdr import CPU_LARGE_TASK_SETTINGS, LearningReuse, SDRSettings, SDRStrategy, build_sdr_model
from avalanche_sdr.models import small_cnn_backbone
from avalanche_sdr.training.checkpoint import read_manifest
from avalanche_sdr.training.stream_runner import final_test_accuracies, run_sdr_stream, transfer_summary

# One short epoch per new entry: the tasks are far from learnt after it (about 50 %
# accuracy), so that what a repeat trains shows in its group's earlier tasks.
SHORT = dict(CPU_LARGE_TASK_SETTINGS, new_task_epochs=1, new_task_lr=1e-3, lr_milestones=(), reuse_epochs=3, reuse_lr=0.01)
UPDATE_LR = 0.01  # the learning reuse's update rate


def _strategy(stream, reuse, ground_truth, **kwargs):
    torch.manual_seed(0)
    model = build_sdr_model(small_cnn_backbone(in_channels=1, widths=(16, 32)), in_channels=1, image_size=8,
                            generator=None)
    evaluator = EvaluationPlugin(accuracy_metrics(experience=True), *bwt_metrics(experience=False, stream=True),
                                 *forgetting_metrics(experience=False, stream=True), loggers=[])
    reuse = LearningReuse(lr=UPDATE_LR) if reuse == "accumulate" else reuse
    return SDRStrategy(model=model, settings=SDRSettings(**SHORT), reuse=reuse,
                       detector=ground_truth(stream.stream_groups), evaluator=evaluator, **kwargs)


@pytest.fixture(scope="module")
def runs(prototype_stream, ground_truth):
    """``{reuse: (strategy, results, timings)}`` of an uninterrupted run per reuse mode."""
    out = {}
    for reuse in ("head", "accumulate"):
        strategy, timings = _strategy(prototype_stream, reuse, ground_truth), {}
        out[reuse] = strategy, run_sdr_stream(strategy, prototype_stream, seed=0, timings=timings), timings
    return out


def test_group_curve_entries(runs, prototype_stream):
    groups = prototype_stream.stream_groups
    _, results, timings = runs["accumulate"]
    curve = results["group_curve"]
    assert len(curve) == len(groups) == 8
    for i, entry in enumerate(curve):
        same = [j for j in range(i + 1) if groups[j] == groups[i]]
        assert entry["task"] == results["tasks"][i]["task"] and entry["group"] == groups[i]
        assert entry["evaluated"] == same and entry["times_seen"] == len(same)
        assert entry["initial_accuracy"] == entry["accuracies"][-1]
        assert entry["group_accuracy_after"] == pytest.approx(sum(entry["accuracies"]) / len(same))
    # The last task's group evaluation is made on the final model: its values are final.
    final = [t["test_accuracy"] for t in results["tasks"]]
    assert [final[j] for j in curve[-1]["evaluated"]] == curve[-1]["accuracies"]
    assert max(e["times_seen"] for e in curve) == 2 and timings["evaluation_seconds"] > 0


@pytest.mark.parametrize("reuse", ["head", "accumulate"])
def test_bwt_equals_avalanches_stream_bwt(runs, reuse):
    strategy, results, _ = runs[reuse]
    last = strategy.evaluator.get_last_metrics()
    avalanche_bwt = last["StreamBWT/eval_phase/test_stream"]
    final = [t["test_accuracy"] for t in results["tasks"]]
    initial = [e["initial_accuracy"] for e in results["group_curve"]]
    # Lopez-Paz & Ranzato: mean over the tasks but the last of final - initial; positive = improvement.
    expected = sum(f - i for f, i in zip(final[:-1], initial[:-1])) / (len(final) - 1)
    assert results["bwt"] == pytest.approx(expected, abs=1e-12)
    assert results["bwt"] == pytest.approx(avalanche_bwt, abs=1e-9)
    # Avalanche's StreamForgetting is the opposite sign of its StreamBWT.
    assert last["StreamForgetting/eval_phase/test_stream"] == pytest.approx(-avalanche_bwt, abs=1e-9)


def test_frozen_reuse_has_no_backward_transfer_and_learning_reuse_has(runs):
    head, accumulate = runs["head"][1], runs["accumulate"][1]
    assert [t["decision"] for t in head["tasks"]].count("reuse") == 4
    assert head["bwt"] == 0.0 and head["forgetting"] == 0.0
    # The repeats train their group's entry: the earlier tasks of the group improve.
    assert accumulate["bwt"] > 0.05 and accumulate["forgetting"] == pytest.approx(0.0, abs=0.05)
    assert sum(t["test_accuracy"] for t in accumulate["tasks"]) > sum(t["test_accuracy"] for t in head["tasks"])


def test_group_evaluation_leaves_training_unchanged(runs, prototype_stream, ground_truth):
    """The same strategy trained without the group evaluations ends with the same model."""
    strategy = _strategy(prototype_stream, "accumulate", ground_truth)
    for experience in prototype_stream.train_stream:
        strategy.train(experience, eval_streams=[])
    accuracies = final_test_accuracies(strategy, prototype_stream.test_stream)
    assert accuracies == [t["test_accuracy"] for t in runs["accumulate"][1]["tasks"]]
    reference = runs["accumulate"][0].model.state_dict()
    for name, value in strategy.model.state_dict().items():
        assert torch.equal(value, reference[name]), name


def test_resumed_run_reports_the_uninterrupted_curve(runs, prototype_stream, tmp_path, ground_truth):
    first = _strategy(prototype_stream, "accumulate", ground_truth, checkpoint_dir=tmp_path)
    part = types.SimpleNamespace(train_stream=prototype_stream.train_stream[:5],
                                 test_stream=prototype_stream.test_stream[:5])
    run_sdr_stream(first, part, seed=0)
    progress = read_manifest(tmp_path)["progress"]
    # Saved with the next experience's checkpoint: the last finished one's is evaluated again.
    assert [("group_curve" in p) for p in progress] == [True] * 4 + [False]
    resumed = _strategy(prototype_stream, "accumulate", ground_truth, checkpoint_dir=tmp_path)
    logged = []
    results = run_sdr_stream(resumed, prototype_stream, seed=0, log=logged.append)
    assert logged and "5 of 8 experiences done" in logged[0]
    reference = runs["accumulate"][1]
    for key in ("group_curve", "bwt", "forgetting", "average_accuracy"):
        assert results[key] == reference[key], key
    assert all("group_curve" in p for p in read_manifest(tmp_path)["progress"][:7])


def test_transfer_summary_formula_and_sign():
    curve = [
        {"evaluated": [0], "accuracies": [0.6], "initial_accuracy": 0.6},
        {"evaluated": [1], "accuracies": [0.9], "initial_accuracy": 0.9},
        {"evaluated": [0, 2], "accuracies": [0.8, 0.7], "initial_accuracy": 0.7},
    ]
    final = [0.7, 0.5, 0.7]
    summary = transfer_summary(curve, final)
    # Tasks 0 and 1 (not the last): final - initial = +0.1 and -0.4.
    assert summary["bwt"] == pytest.approx((0.1 - 0.4) / 2)
    # Best earlier accuracy - final: task 0 max(0.6, 0.8) - 0.7 = 0.1; task 1 0.9 - 0.5 = 0.4.
    assert summary["forgetting"] == pytest.approx((0.1 + 0.4) / 2)
    assert transfer_summary(curve[:1], final[:1]) == {"bwt": None, "forgetting": None}
    assert transfer_summary([curve[0], None, curve[2]], final) == {"bwt": None, "forgetting": None}
