"""A new detector is one class: defined here, in this test file alone, it runs a stream
through ``SDRStrategy.from_benchmark(..., detector=...)`` with its records, its legend,
its one-line reports and a checkpoint resumed bit for bit, with no change to the library.

The detector compares the class means of E0's features (the task's, and those each entry
keeps of its creating task) and reuses the nearest entry when it is near enough: a toy
rule on the prototype stream of conftest.py, where each group's images scatter around
its own prototypes.
"""
from typing import Dict, List

import pytest
import torch
from avalanche.evaluation.metrics import accuracy_metrics
from avalanche.training.plugins import EvaluationPlugin

from avalanche_sdr import SDRStrategy
from avalanche_sdr.cli import output_legend
from avalanche_sdr.detection import DetectionRecord, Detector
from avalanche_sdr.models import TaskData, small_cnn_backbone
from avalanche_sdr.training import CheckpointMismatchError

pytestmark = pytest.mark.usefixtures("one_thread")

SHORT = dict(new_task_epochs=2, lr_milestones=(1,), reuse_epochs=2, reuse_lr=0.01, train_mb_size=32)


class NearestMeanDetector(Detector):
    """Reuse the entry whose creating task's class means in E0's features lie nearest the
    new task's (mean over classes of the distance between matching means, relative to the
    entry's own spread), when that distance is at most ``max_distance``."""

    rule = "nearest_mean"
    needs_generators = False
    score_name = "d"

    def __init__(self, max_distance: float):
        self.max_distance = float(max_distance)

    def config(self) -> Dict[str, object]:
        return {"rule": self.rule, "max_distance": self.max_distance}

    @staticmethod
    def _means(features: torch.Tensor, y: torch.Tensor, num_classes: int) -> torch.Tensor:
        return torch.stack([features[y == k].mean(0) for k in range(num_classes)])

    def remember(self, model, entry: int, data: TaskData) -> None:
        features = data.e0_features(model)
        means = self._means(features, data.y, data.num_classes)
        spread = (features - means[data.y]).norm(dim=1).mean().reshape(1)
        model.set_detection_state(entry, {"means": means, "spread": spread})

    def detect(self, model, data: TaskData) -> DetectionRecord:
        means = self._means(data.e0_features(model), data.y, data.num_classes)
        entries: List[int] = [e for e in model.entries
                              if model.detection_state(e)["means"].shape[0] == data.num_classes]
        distances = []
        for e in entries:
            state = model.detection_state(e)
            distances.append(float((means - state["means"].cpu()).norm(dim=1).mean() / state["spread"].cpu()))
        best = min(range(len(entries)), key=lambda i: distances[i], default=None)
        reused = entries[best] if best is not None and distances[best] <= self.max_distance else None
        return DetectionRecord.decided(model, task=data.task, entries=entries, reused=reused, rule=self.rule,
                                       p_value=distances)

    def legend(self) -> List[str]:
        return ["    Tj:d=..           distance of t's class means to those of the entry made by task j",
                f"                      (E0's features, in j's spreads); rule: reuse the nearest if d <= "
                f"{self.max_distance:g}"]

    def nearest_entry(self, record: DetectionRecord):
        if not record.p_value:
            return None
        return record.candidate_entries[min(range(len(record.p_value)), key=lambda i: record.p_value[i])]


def _strategy(stream, detector, checkpoint_dir=None):
    torch.manual_seed(0)
    return SDRStrategy.from_benchmark(
        small_cnn_backbone(in_channels=1, widths=(16, 32)), stream, detector=detector, settings="cpu", **SHORT,
        checkpoint_dir=checkpoint_dir, evaluator=EvaluationPlugin(accuracy_metrics(experience=True), loggers=[]))


def _train(strategy, experiences):
    for experience in experiences:
        strategy.train(experience, eval_streams=[])


def test_a_detector_defined_here_runs_a_stream_with_records_legend_and_checkpoints(prototype_stream, tmp_path):
    experiences = list(prototype_stream.train_stream)
    reference = _strategy(prototype_stream, NearestMeanDetector(max_distance=0.5))
    assert reference.model.generators is None  # from_benchmark follows needs_generators
    _train(reference, experiences)
    records = reference.detection_records
    groups = prototype_stream.stream_groups
    assert [r.rule for r in records] == ["warm_start"] * 3 + ["nearest_mean"] * (len(records) - 3)
    for record in records[3:]:  # every repeat reuses its group's entry, every new group gets one
        earlier = [t for t in range(record.task) if groups[t] == groups[record.task]]
        assert record.decision == ("reuse" if earlier else "new")
        if earlier:
            assert reference.model.entry_creator[record.reused_entry] == earlier[0]
    line = reference.sdr.describe(records[-1], reference.sdr.reuse_records[-1])
    assert line.startswith(f"[SDR] task {records[-1].task}: ") and "T0:d=" in line
    legend = output_legend(reference.sdr.detector, 3, generators=False)
    assert "Tj:d=.." in legend and "reuse the nearest if d <= 0.5" in legend and "G_e" not in legend

    # a run interrupted after 5 tasks resumes from its checkpoint, bit for bit
    first = _strategy(prototype_stream, NearestMeanDetector(max_distance=0.5), checkpoint_dir=tmp_path)
    _train(first, experiences[:5])
    resumed = _strategy(prototype_stream, NearestMeanDetector(max_distance=0.5), checkpoint_dir=tmp_path)
    assert resumed.restore_checkpoint() == 5
    _train(resumed, experiences[5:])
    assert [r | {"detection_seconds": 0} for r in resumed.sdr.record_dicts()] == \
        [r | {"detection_seconds": 0} for r in reference.sdr.record_dicts()]
    expected = reference.model.state_dict()
    assert all(torch.equal(value, expected[name]) for name, value in resumed.model.state_dict().items())
    # the detector's configuration is part of the checkpoint's: another one is refused, named
    other = _strategy(prototype_stream, NearestMeanDetector(max_distance=0.7), checkpoint_dir=tmp_path)
    with pytest.raises(CheckpointMismatchError, match="strategy.detector.max_distance"):
        other.restore_checkpoint()


def test_an_object_that_is_not_a_detector_is_refused_before_anything_is_built(prototype_stream):
    class Lookalike:
        rule = "lookalike"
        needs_generators = False

        def detect(self, model, data):
            raise AssertionError("never called")

    with pytest.raises(TypeError, match="subclasses Detector"):
        _strategy(prototype_stream, Lookalike())
