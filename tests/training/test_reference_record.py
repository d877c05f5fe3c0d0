"""References that hold the level by default: pretrain_backbone holds out a share of the
warm-start images and records it on the backbone; the strategy hands the record to the
detector (``use_pretraining``), which takes those tasks' references from the held-out
images; without a record, one ReferenceWarning says what the test then assumes."""
import copy
import warnings

import pytest
import torch
from avalanche.training.plugins import EvaluationPlugin

from avalanche_sdr import SDRStrategy
from avalanche_sdr.detection import (DEFAULT_HOLDOUT_SHARE, PRETRAINING_RECORD, PretrainingRecord, ReferenceWarning,
                                     SmallTaskDetector, TwoSampleDetector, TwoSampleSettings, pretraining_record)
from avalanche_sdr.models import small_cnn_backbone
from avalanche_sdr.training import CPU_SETTINGS, hold_out_references, pretrain_backbone
from avalanche_sdr.training.data import read_task_data

pytestmark = pytest.mark.usefixtures("one_thread")

FAST = CPU_SETTINGS.replace(new_task_epochs=1, lr_milestones=(), reuse_epochs=1)


def _warm(stream):
    return [stream.train_stream[i] for i in range(stream.n_warm_start)]


def _pretrained(stream, **keywords):
    torch.manual_seed(0)
    backbone = small_cnn_backbone(in_channels=1, widths=(8, 16))
    pretrain_backbone(backbone, _warm(stream), epochs=1, batch_size=16, verbose=False, **keywords)
    return backbone


def _strategy(backbone, stream, **keywords):
    """A strategy on a copy of ``backbone`` (the record travels with copies)."""
    return SDRStrategy.from_benchmark(copy.deepcopy(backbone), stream, settings=FAST,
                                      evaluator=EvaluationPlugin(loggers=[]), **keywords)


def _reference_warnings(caught):
    return [w for w in caught if issubclass(w.category, ReferenceWarning)]


def test_pretraining_holds_out_half_by_default_and_records_it_on_the_backbone(prototype_stream):
    warm = _warm(prototype_stream)
    backbone = _pretrained(prototype_stream)
    record = pretraining_record(backbone)
    assert record is getattr(backbone, PRETRAINING_RECORD) and isinstance(record, PretrainingRecord)
    assert record.tasks == (0, 1, 2) and record.holdout.share == DEFAULT_HOLDOUT_SHARE == 0.5
    expected = hold_out_references(warm, 0.5)  # the default draw: seed 0
    assert all(torch.equal(record.holdout.rows[t], expected.rows[t]) for t in expected.rows)
    assert record.to_dict() == {"tasks": [0, 1, 2], "holdout": expected.to_dict()}
    assert pretraining_record(copy.deepcopy(backbone)).tasks == (0, 1, 2)  # copies carry it


def test_an_explicit_holdout_a_share_and_no_holdout_are_recorded(prototype_stream):
    warm = _warm(prototype_stream)
    holdout = hold_out_references(warm, 0.25, seed=4)
    assert pretraining_record(_pretrained(prototype_stream, holdout=holdout)).holdout is holdout
    assert pretraining_record(_pretrained(prototype_stream, holdout=0.25)).holdout.share == 0.25
    none = pretraining_record(_pretrained(prototype_stream, holdout=None))
    assert none.tasks == (0, 1, 2) and none.holdout is None
    with pytest.raises(TypeError, match="holdout must be a share in"):
        _pretrained(prototype_stream, holdout="half")


def test_a_backbone_pretrained_twice_records_no_unseen_image_unless_both_agree(prototype_stream):
    warm = _warm(prototype_stream)
    backbone = _pretrained(prototype_stream)
    pretrain_backbone(backbone, warm, epochs=1, batch_size=16, verbose=False)  # the same draw again
    assert pretraining_record(backbone).holdout is not None
    pretrain_backbone(backbone, warm[:2], epochs=1, batch_size=16, verbose=False, holdout=0.25)
    twice = pretraining_record(backbone)  # another draw of tasks 0, 1: an image of one held out by neither
    assert twice.tasks == (0, 1, 2) and twice.holdout is None
    untouched = small_cnn_backbone(in_channels=1, widths=(8, 16))
    pretrain_backbone(untouched, warm, epochs=0, verbose=False)  # nothing trained: nothing recorded
    assert pretraining_record(untouched) is None


def test_the_readme_flow_gives_warm_start_entries_held_out_references_without_a_warning(prototype_stream):
    backbone = _pretrained(prototype_stream)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        strategy = _strategy(backbone, prototype_stream, method="recommended")
    assert not _reference_warnings(caught)
    holdout = pretraining_record(backbone).holdout
    assert strategy.sdr.detector.two_sample.reference_holdout.to_dict() == holdout.to_dict()
    assert strategy.sdr.detector.config()["reference_holdout"] == holdout.to_dict()
    for exp in _warm(prototype_stream):
        strategy.train(exp)
    for exp in _warm(prototype_stream):
        task = int(exp.task_labels[0])
        _, y = read_task_data(exp)
        state = strategy.model.detection_state(strategy.model.entry_of(task))
        assert torch.equal(torch.bincount(state["labels"]), torch.bincount(y[holdout.held_out(task, len(y))]))


def test_an_e0_without_a_record_gets_one_warning_naming_the_consequence_and_the_fix(prototype_stream):
    backbone = small_cnn_backbone(in_channels=1, widths=(8, 16))  # e.g. weights loaded from elsewhere
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        strategy = _strategy(backbone, prototype_stream, detector="two_sample")
        for exp in _warm(prototype_stream):
            strategy.train(exp)
    [warning] = _reference_warnings(caught)
    text = str(warning.message)
    assert "assumes E0 was trained on none of this stream's images" in text
    assert "declared new far more often than the test's level" in text and "pretrain_backbone" in text
    assert warning.filename == __file__  # the user's line
    assert strategy.sdr.detector.reference_holdout is None


def test_an_e0_trained_on_every_image_gets_a_warning_and_the_paper_rule_none(prototype_stream):
    backbone = _pretrained(prototype_stream, holdout=None)
    with pytest.warns(ReferenceWarning, match=r"pretrained on every image of the warm-start tasks \[0, 1, 2\]"):
        _strategy(backbone, prototype_stream, detector=SmallTaskDetector())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _strategy(backbone, prototype_stream)  # the paper's rule reads no reference
    assert not _reference_warnings(caught)


def test_an_explicit_reference_holdout_must_agree_with_the_record(prototype_stream):
    warm = _warm(prototype_stream)
    backbone = _pretrained(prototype_stream)
    other = hold_out_references(warm, 0.5, seed=9)
    with pytest.raises(ValueError, match="reference_holdout differs from the holdout E0 was pretrained without"):
        _strategy(backbone, prototype_stream, detector=TwoSampleDetector(reference_holdout=other))
    same = TwoSampleDetector(reference_holdout=pretraining_record(backbone).holdout)
    assert _strategy(backbone, prototype_stream, detector=same).sdr.detector is same
    everything = _pretrained(prototype_stream, holdout=None)
    with pytest.raises(ValueError, match=r"E0 was pretrained on every image of tasks \[0, 1, 2\]"):
        _strategy(everything, prototype_stream, detector=TwoSampleDetector(reference_holdout=other))


def test_a_detector_serves_one_e0(prototype_stream):
    detector = TwoSampleDetector()
    _strategy(_pretrained(prototype_stream), prototype_stream, detector=detector)
    _strategy(_pretrained(prototype_stream), prototype_stream, detector=detector)  # the same record: fine
    with pytest.raises(ValueError, match="build one detector per strategy"):
        _strategy(_pretrained(prototype_stream, holdout=0.25), prototype_stream, detector=detector)


def test_each_entrys_own_feature_space_ignores_the_record(prototype_stream):
    detector = TwoSampleDetector(TwoSampleSettings(feature_space="entry"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _strategy(small_cnn_backbone(in_channels=1, widths=(8, 16)), prototype_stream, detector=detector)
    assert not _reference_warnings(caught) and detector.reference_holdout is None


def test_a_record_saved_as_tensors_loads_back_with_torch_weights_only(prototype_stream, tmp_path):
    """PretrainingRecord.to_tensors / from_tensors: what a user saving E0 beside its state_dict
    needs (the state_dict does not carry the record)."""
    record = pretraining_record(_pretrained(prototype_stream))
    path = tmp_path / "record.pt"
    torch.save(record.to_tensors(), path)
    again = PretrainingRecord.from_tensors(torch.load(path, weights_only=True))
    assert again.tasks == record.tasks and again.holdout.to_dict() == record.holdout.to_dict()
    assert all(torch.equal(again.holdout.rows[t], record.holdout.rows[t]) for t in record.tasks)
    assert dict(again.holdout.sizes) == dict(record.holdout.sizes)
    bare = PretrainingRecord((0, 1), None)
    bare_again = PretrainingRecord.from_tensors(bare.to_tensors())
    assert bare_again.tasks == (0, 1) and bare_again.holdout is None
    with pytest.raises(ValueError, match="no 'tasks'"):
        PretrainingRecord.from_tensors({})
    partial = record.to_tensors()
    del partial["rows"]
    with pytest.raises(ValueError, match="holdout needs"):
        PretrainingRecord.from_tensors(partial)
