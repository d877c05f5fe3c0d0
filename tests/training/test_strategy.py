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

from avalanche_sdr import CPU_SETTINGS, SDRStrategy, build_sdr_model
from avalanche_sdr.benchmarks import ImageArrayDataset, mixed_similarity_benchmark
from avalanche_sdr.detection import DetectionRecord
from avalanche_sdr.evaluation import repository_memory_bytes
from avalanche_sdr.models import small_cnn_backbone
from avalanche_sdr.training.stream_runner import run_sdr_stream

GROUPS = [[0, 1], [2, 3], [4, 5], [6, 7]]
FAST = dict(
    CPU_SETTINGS,
    new_task_epochs=4,
    lr_milestones=(3,),
    reuse_epochs=4,
    vae_epochs=15,
    vae_lr=5e-3,
    vae_patience=3,
)


def _prototype_dataset(n_per_class: int, seed: int) -> ImageArrayDataset:
    """8 classes; class c = prototype_c (fixed across calls) + fresh noise."""
    prototypes = torch.rand(8, 1, 8, 8, generator=torch.Generator().manual_seed(123)) > 0.5
    g = torch.Generator().manual_seed(seed)
    images, labels = [], []
    for c in range(8):
        base = prototypes[c].float() * 0.8 + 0.1
        noisy = (base + 0.1 * torch.randn(n_per_class, 1, 8, 8, generator=g)).clamp(0, 1)
        images.append((noisy * 255).to(torch.uint8))
        labels += [c] * n_per_class
    return ImageArrayDataset(torch.cat(images), torch.tensor(labels))


@pytest.fixture(scope="module")
def stream():
    return mixed_similarity_benchmark(
        _prototype_dataset(60, seed=1), _prototype_dataset(20, seed=2), GROUPS, n_splits=2, seed=0
    )


@pytest.fixture(scope="module")
def finished_run(stream):
    torch.manual_seed(0)
    model = build_sdr_model(
        small_cnn_backbone(in_channels=1, widths=(16, 32)), in_channels=1, image_size=8,
        latent_dim=4, vae_width=8,
    )
    strategy = SDRStrategy(
        model=model, **FAST,
        evaluator=EvaluationPlugin(accuracy_metrics(experience=True), loggers=[]),
        verbose=False,
    )
    results = run_sdr_stream(strategy, stream, seed=0, log=None)
    return strategy, results


def test_warm_start_tasks_grow_without_detection(finished_run):
    strategy, _ = finished_run
    warm = strategy.detection_records[:3]
    assert [r.decision for r in warm] == ["warm_start"] * 3
    assert [r.entry for r in warm] == [0, 1, 2]
    assert all(r.consistency == [] and r.complexity == [] for r in warm)


def test_repeated_tasks_reuse_the_entry_of_their_group(finished_run, stream):
    strategy, results = finished_run
    model = strategy.model
    creator_group = {e: stream.stream_groups[t] for e, t in model.entry_creator.items()}
    first_seen = {}
    for position, record in enumerate(strategy.detection_records):
        group = stream.stream_groups[position]
        if group in first_seen and first_seen[group] < 3:
            assert record.decision == "reuse", record
            assert creator_group[record.reused_entry] == group
            assert record.vote_consistency == record.vote_complexity == record.reused_entry
            assert len(record.consistency) == len(record.complexity) == len(record.candidate_entries)
            assert sum(record.consistency) == pytest.approx(1.0)
        first_seen.setdefault(group, position)


def test_new_group_grows_the_repository(finished_run, stream):
    strategy, results = finished_run
    new_group = ({0, 1, 2, 3} - set(stream.stream_groups[:3])).pop()
    position = stream.stream_groups.index(new_group)
    record = strategy.detection_records[position]
    assert record.decision == "new"
    assert record.reused_entry is None
    assert record.entry == 3
    assert strategy.model.num_entries == 4
    assert results["detection"] == {"correct": 1.0, "miss": 0.0, "incorrect": 0.0, "n_scored": 5}


def test_every_task_is_predicted_with_its_own_head(finished_run, stream):
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
        entry_mb = strategy.model.entry_bytes(0) / 2**20
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
