"""SDRStrategy end to end on a tiny synthetic mixed stream (a few seconds on CPU).

Eight classes of 8x8 images, each a fixed random prototype plus noise, form four
groups of two classes with two splits each (8 tasks, 3 warm-start tasks). Repeats of
a group are unmistakable, so the paper's rule must reuse them; the stream's seed is
chosen so that the one group first met after the warm start is also detected as new.
"""
import json

import pytest
import torch

from avalanche.evaluation.metrics import accuracy_metrics
from avalanche.training.plugins import EvaluationPlugin

from avalanche_sdr import CPU_LARGE_TASK_SETTINGS, SDRStrategy, build_sdr_model
from avalanche_sdr.detection import DetectionRecord
from avalanche_sdr.evaluation import entry_bytes, repository_memory_bytes
from avalanche_sdr.models import small_cnn_backbone
from avalanche_sdr.training.stream_runner import run_sdr_stream

FAST = CPU_LARGE_TASK_SETTINGS.replace(
    new_task_epochs=4,
    lr_milestones=(3,),
    reuse_epochs=4,
    reuse_lr=0.01,
    vae_epochs=15,
    vae_lr=5e-3,
    vae_patience=3,
)


@pytest.fixture(scope="module")
def finished_run(prototype_stream):
    stream = prototype_stream
    torch.manual_seed(0)
    model = build_sdr_model(
        small_cnn_backbone(in_channels=1, widths=(16, 32)), in_channels=1, image_size=8,
        latent_dim=4, vae_width=8,
    )
    strategy = SDRStrategy(
        model=model, settings=FAST,
        evaluator=EvaluationPlugin(accuracy_metrics(experience=True), loggers=[]),
    )
    results = run_sdr_stream(strategy, stream, seed=0)
    return strategy, results


def test_warm_start_tasks_grow_without_detection(finished_run):
    strategy, _ = finished_run
    warm = strategy.detection_records[:3]
    assert [r.decision for r in warm] == ["warm_start"] * 3
    assert [r.entry for r in warm] == [0, 1, 2]
    assert all(r.consistency == [] and r.complexity == [] for r in warm)


def test_repeated_tasks_reuse_the_entry_of_their_group(finished_run, prototype_stream):
    strategy, results = finished_run
    model = strategy.model
    creator_group = {e: prototype_stream.stream_groups[t] for e, t in model.entry_creator.items()}
    first_seen = {}
    for position, record in enumerate(strategy.detection_records):
        group = prototype_stream.stream_groups[position]
        if group in first_seen and first_seen[group] < 3:
            assert record.decision == "reuse", record
            assert creator_group[record.reused_entry] == group
            assert record.vote_consistency == record.vote_complexity == record.reused_entry
            assert len(record.consistency) == len(record.complexity) == len(record.candidate_entries)
            assert sum(record.consistency) == pytest.approx(1.0)
        first_seen.setdefault(group, position)


def test_new_group_grows_the_repository(finished_run, prototype_stream):
    strategy, results = finished_run
    new_group = ({0, 1, 2, 3} - set(prototype_stream.stream_groups[:3])).pop()
    position = prototype_stream.stream_groups.index(new_group)
    record = strategy.detection_records[position]
    assert record.decision == "new"
    assert record.reused_entry is None
    assert record.entry == 3
    assert strategy.model.num_entries == 4
    assert results["detection"] == {"correct": 1.0, "miss": 0.0, "incorrect": 0.0, "n_scored": 5}


def test_every_task_is_predicted_with_its_own_head(finished_run, prototype_stream):
    strategy, results = finished_run
    model = strategy.model
    assert sorted(int(k) for k in model.heads) == list(range(8))
    assert set(model.task_to_entry) == set(range(8))
    accuracies = [t["test_accuracy"] for t in results["tasks"]]
    assert min(accuracies) > 0.9, accuracies
    assert results["average_accuracy"] == pytest.approx(sum(accuracies) / 8)


def test_memory_grows_with_unique_tasks_only(finished_run):
    strategy, results = finished_run
    assert results["unique_tasks"] == 4
    assert results["memory_mb"] == pytest.approx(repository_memory_bytes(strategy) / 2**20)
    assert results["memory_mb"] < results["memory_mb_all_new"]
    growth = [t["memory_mb"] for t in results["tasks"]]
    reused = [t["decision"] == "reuse" for t in results["tasks"]]
    for i in range(1, 8):
        step = growth[i] - growth[i - 1]
        entry_mb = entry_bytes(strategy.model, 0) / 2**20
        if reused[i]:
            assert step < 0.1 * entry_mb  # a head only
        else:
            assert step > entry_mb


def test_records_and_results_are_json_serialisable(finished_run):
    strategy, results = finished_run
    for record in strategy.detection_records:
        assert DetectionRecord.from_dict(json.loads(json.dumps(record.to_dict()))) == record
    text = json.dumps(results)
    assert json.loads(text)["tasks"][0]["decision"] == "warm_start"


def test_nothing_stays_trainable_after_an_experience(finished_run):
    strategy, _ = finished_run
    assert not any(p.requires_grad for p in strategy.model.parameters())


def test_strategy_rejects_a_plain_model():
    with pytest.raises(TypeError, match="needs an SDRModel"):
        SDRStrategy(model=torch.nn.Linear(2, 2))


def test_training_accuracy_is_recorded_for_every_epoch(finished_run):
    strategy, results = finished_run
    for task in results["tasks"]:
        curve = task["train_accuracy_per_epoch"]
        assert len(curve) == 4  # FAST: 4 epochs for new and reused entries
        assert all(0.0 <= v <= 1.0 for v in curve)
    # The prototype tasks are easy: every task ends its training above chance.
    assert all(task["train_accuracy_per_epoch"][-1] > 0.5 for task in results["tasks"])


@pytest.mark.parametrize("forward_transfer", [False, True])
def test_calibrated_rule_detects_the_prototype_stream(prototype_stream, forward_transfer):
    torch.manual_seed(0)
    model = build_sdr_model(
        small_cnn_backbone(in_channels=1, widths=(16, 32)), in_channels=1, image_size=8,
        latent_dim=4, vae_width=8,
    )
    strategy = SDRStrategy(
        model=model, settings=FAST, detector="calibrated", forward_transfer=forward_transfer,
        evaluator=EvaluationPlugin(accuracy_metrics(experience=True), loggers=[]),
    )
    results = run_sdr_stream(strategy, prototype_stream, seed=0)
    scored = [t for t in results["tasks"] if t["decision"] != "warm_start"]
    assert scored and all(t["outcome"] == "correct" for t in scored)
    assert all(t["detection"]["rule"] == "calibrated" for t in scored)
    # Every entry's generator has a reference likelihood from its hold-out.
    bank = strategy.model.generators
    assert all(bank.reference_elbo(e)[1] > 0 for e in strategy.model.entries)
