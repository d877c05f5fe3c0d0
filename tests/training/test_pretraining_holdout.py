"""Pretraining E0 without a held-out share of the warm-start images, and the two-sample
references of those tasks' entries taken from exactly that share."""
import pytest
import torch

from avalanche_sdr.detection import ReferenceHoldout, TwoSampleDetector
from avalanche_sdr.models import TaskData, build_sdr_model, small_cnn_backbone
from avalanche_sdr.training import hold_out_references, pretrain_backbone, pretraining
from avalanche_sdr.training.data import read_task_data


def _warm(stream):
    return [stream.train_stream[i] for i in range(stream.n_warm_start)]


def test_pretraining_trains_on_the_kept_rows_only(prototype_stream, monkeypatch):
    warm = _warm(prototype_stream)
    holdout = hold_out_references(warm, 0.4, seed=3)
    x_all = torch.cat([read_task_data(e)[0] for e in warm])
    x_kept, y_kept, t_kept = pretraining._warm_start_tensors(warm, holdout)
    held = []
    for i, exp in enumerate(warm):
        x, y = read_task_data(exp)
        task = int(exp.task_labels[0])
        rows, kept = holdout.held_out(task, len(y)), holdout.kept(task, len(y))
        # disjoint, and together every image of the task
        assert set(rows.tolist()).isdisjoint(kept.tolist())
        assert sorted(rows.tolist() + kept.tolist()) == list(range(len(y)))
        for j in torch.unique(y).tolist():  # round(share * n_j) of every class
            assert int((y[rows] == j).sum()) == round(0.4 * int((y == j).sum()))
        assert torch.equal(x_kept[t_kept == i], x[kept]) and torch.equal(y_kept[t_kept == i], y[kept])
        held.append(x[rows])
    # no held-out image reaches the pretraining tensors
    flat = x_kept.flatten(1)
    for image in torch.cat(held).flatten(1):
        assert not (flat == image).all(1).any()
    assert len(x_kept) + sum(len(h) for h in held) == len(x_all)

    seen = []
    real = pretraining._run_epochs
    monkeypatch.setattr(pretraining, "_run_epochs", lambda n, **kw: (seen.append(n), real(n, **kw)))
    torch.manual_seed(0)
    pretrain_backbone(small_cnn_backbone(in_channels=1, widths=(8, 16)), warm, epochs=1, batch_size=16,
                      verbose=False, holdout=holdout)
    assert seen == [len(x_kept)]


def test_the_warm_start_entry_stores_its_held_out_images(prototype_stream):
    warm = _warm(prototype_stream)
    holdout = hold_out_references(warm, 0.5, seed=0)
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = build_sdr_model(small_cnn_backbone(in_channels=1, widths=(8, 16)), in_channels=1, image_size=8,
                                generator=None)
    det = TwoSampleDetector(reference_holdout=holdout)
    x, y = read_task_data(warm[0])
    task = int(warm[0].task_labels[0])
    entry = model.create_entry(task)
    det.remember(model, entry, TaskData(task, x, y))
    stored = model.detection_state(entry)["features"]
    rows = holdout.held_out(task, len(y))
    assert torch.allclose(stored.double(), det.project(model, x[rows]).float().double())
    assert len(stored) == len(rows) < len(y)
    # a task outside the holdout stores its training images as before
    x1, y1 = read_task_data(prototype_stream.train_stream[prototype_stream.n_warm_start])
    other = model.create_entry(99)
    det.remember(model, other, TaskData(99, x1, y1))
    assert len(model.detection_state(other)["features"]) == len(y1)
    assert det.config()["reference_holdout"] == holdout.to_dict()
    # the same task label with other images is refused
    with pytest.raises(ValueError, match="draw the holdout from the same experiences"):
        det.remember(model, entry, TaskData(task, x[:-1], y[:-1]))


def test_a_holdout_of_other_experiences_is_refused_before_training(prototype_stream, monkeypatch):
    warm = _warm(prototype_stream)
    holdout = hold_out_references(warm[:2], 0.5)
    monkeypatch.setattr(pretraining, "_run_epochs", lambda *a, **k: pytest.fail("trained"))
    with pytest.raises(ValueError, match="draw it from the same experiences"):
        pretrain_backbone(small_cnn_backbone(in_channels=1, widths=(8, 16)), warm, epochs=1, verbose=False,
                          holdout=holdout)
    with pytest.raises(TypeError, match="ReferenceHoldout"):
        pretrain_backbone(small_cnn_backbone(in_channels=1, widths=(8, 16)), warm, epochs=1, verbose=False,
                          holdout={0: [1, 2]})


@pytest.mark.parametrize("share", [0, 0.0, 1, 1.0, -0.2, 1.5, True, "0.5", float("nan")])
def test_a_share_outside_the_open_unit_interval_is_refused(prototype_stream, share, monkeypatch):
    monkeypatch.setattr(pretraining, "read_task_data", lambda *a: pytest.fail("read the data"))
    with pytest.raises(ValueError, match=r"share must lie in \(0, 1\)"):
        hold_out_references(_warm(prototype_stream), share)
    with pytest.raises(ValueError, match=r"share must lie in \(0, 1\)"):
        ReferenceHoldout.draw({0: torch.zeros(10, dtype=torch.long)}, share)


def test_too_few_images_to_hold_out_are_refused():
    y = torch.tensor([0] * 20 + [1] * 3)
    with pytest.raises(ValueError, match="task 7, class 1: 3 images cannot give 2 or more held-out"):
        ReferenceHoldout.draw({7: y}, 0.2)  # round(0.6) = 1 held-out image of class 1
    with pytest.raises(ValueError, match="keep one for pretraining"):
        ReferenceHoldout.draw({7: torch.zeros(2, dtype=torch.long)}, 0.9)  # all held out
    with pytest.raises(ValueError, match="at least one"):
        ReferenceHoldout.draw({}, 0.5)
    with pytest.raises(ValueError, match="at least one"):
        hold_out_references([], 0.5)


def test_holdout_is_seeded_and_leaves_the_global_rng_alone():
    y = torch.arange(4).repeat_interleave(25)
    state = torch.get_rng_state()
    a, b, c = (ReferenceHoldout.draw({3: y}, 0.2, seed=s) for s in (0, 0, 1))
    assert torch.equal(state, torch.get_rng_state())
    assert torch.equal(a.rows[3], b.rows[3]) and not torch.equal(a.rows[3], c.rows[3])
    assert a.to_dict() == {"share": 0.2, "seed": 0, "held_out": {"3": 20}}  # 4 classes x 5


def test_a_strategy_stores_the_warm_start_references_from_the_held_out_images(prototype_stream):
    from avalanche.training.plugins import EvaluationPlugin

    from avalanche_sdr import CPU_LARGE_TASK_SETTINGS, SDRStrategy

    warm = _warm(prototype_stream)
    holdout = hold_out_references(warm, 0.5, seed=1)
    torch.manual_seed(0)
    backbone = small_cnn_backbone(in_channels=1, widths=(8, 16))
    pretrain_backbone(backbone, warm, epochs=1, batch_size=16, verbose=False, holdout=holdout)
    model = build_sdr_model(backbone, in_channels=1, image_size=8, generator=None)
    settings = CPU_LARGE_TASK_SETTINGS.replace(new_task_epochs=1, lr_milestones=(), reuse_epochs=1)
    strategy = SDRStrategy(model=model, settings=settings, evaluator=EvaluationPlugin(loggers=[]),
                           detector=TwoSampleDetector(reference_holdout=holdout))
    for exp in warm:
        strategy.train(exp)
    for exp in warm:
        task = int(exp.task_labels[0])
        x, y = read_task_data(exp)
        state = model.detection_state(model.entry_of(task))
        rows = holdout.held_out(task, len(y))
        assert torch.equal(torch.bincount(state["labels"]), torch.bincount(y[rows]))
        assert len(state["labels"]) < len(y)
