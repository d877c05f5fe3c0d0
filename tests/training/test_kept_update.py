"""The kept learning-reuse update (avalanche_sdr/training/kept_update.py) on the prototype
stream of conftest.py: held-out sets are kept and never trained on, an update that helps is
kept (the repeat then answers through its entry's head), and a harmful one is refused with
the entry restored exactly and the repeat's head-only head left as it was."""
import pytest
import torch
from avalanche.evaluation.metrics import accuracy_metrics
from avalanche.training.plugins import EvaluationPlugin

from avalanche_sdr import CPU_LARGE_TASK_SETTINGS, SDRSettings, SDRStrategy, build_sdr_model
from avalanche_sdr.models import small_cnn_backbone
from avalanche_sdr.training import kept_update
from avalanche_sdr.training.keep_rule import heldout_per_class

from test_learning_reuse import check_resume  # tests/training is on sys.path (pytest prepend mode)

SHORT = dict(CPU_LARGE_TASK_SETTINGS, new_task_epochs=3, lr_milestones=(2,), reuse_epochs=2, reuse_lr=0.01)


def _task_data(stream, task):
    dataset = stream.train_stream[task].dataset
    x = torch.stack([dataset[i][0] for i in range(len(dataset))])
    y = torch.tensor([int(dataset[i][1]) for i in range(len(dataset))])
    classes = sorted(set(y.tolist()))
    local = torch.tensor([classes.index(v) for v in y.tolist()])
    return x, local, len(classes)


def _trained_up_to_repeat(stream, truth):
    """Head-only SDR (the paper's reuse) trained up to and including the first repeat of a
    warm-start task, with every task's held-out set kept as the kept update keeps them."""
    torch.manual_seed(0)
    model = build_sdr_model(small_cnn_backbone(in_channels=1, widths=(16, 32)), in_channels=1, image_size=8,
                            generator=None)
    strategy = SDRStrategy(model=model, settings=SDRSettings(**SHORT), detector=truth(stream.stream_groups),
                           evaluator=EvaluationPlugin(accuracy_metrics(experience=True), loggers=[]))
    groups = stream.stream_groups
    repeat = next(t for t in range(3, len(groups)) if groups[t] in groups[:3])
    trains = {}
    for task in range(repeat + 1):
        strategy.train(stream.train_stream[task])
        x, y, c = _task_data(stream, task)
        entry = model.entry_of(task)
        new = model.entry_creator[entry] == task
        trains[task] = kept_update.remember_task(model, entry, task, x, y, c, replay_per_class=5 if new else 0)
    return strategy, repeat, groups.index(groups[repeat]), trains


def _entry_tensors(model, entry, owner):
    modules = list(model.encoder.entry_modules(entry)) + [model.heads.module(owner)]
    return [t.detach().clone() for m in modules for t in list(m.parameters()) + list(m.buffers())]


def test_held_out_sets_are_kept_and_never_in_the_training_share(prototype_stream, ground_truth):
    strategy, repeat, creator, trains = _trained_up_to_repeat(prototype_stream, ground_truth)
    model = strategy.model
    x, y, c = _task_data(prototype_stream, repeat)
    hx, hy = kept_update.heldout_set(model, model.entry_of(repeat), repeat)
    per_class = [int((y == k).sum()) for k in range(c)]
    assert torch.bincount(hy, minlength=c).tolist() == [heldout_per_class(n) for n in per_class]
    assert len(trains[repeat]) == len(y) - len(hy)
    held = sorted(set(range(len(y))) - set(trains[repeat].tolist()))
    assert torch.equal(hx, x[held]) and torch.equal(hy, y[held])
    state = model.exemplars(model.entry_of(creator))
    assert kept_update.REPLAY_LABELS in state and len(state[kept_update.REPLAY_LABELS]) == 5 * c


def test_a_useful_update_is_kept_and_links_the_repeat(prototype_stream, ground_truth):
    strategy, repeat, creator, trains = _trained_up_to_repeat(prototype_stream, ground_truth)
    model = strategy.model
    x, y, c = _task_data(prototype_stream, repeat)
    entry = model.entry_of(repeat)
    assert model.heads.owner(repeat) == repeat  # head-only: a head of its own
    result = kept_update.kept_update(model, task=repeat, entry=entry, permutation=list(range(c)), x=x, y=y,
                                     train_indices=trains[repeat], epochs=3, lr=0.01, batch_size=32)
    decision = result
    assert decision is not None and [s.task for s in decision.sets] == [repeat, creator]
    # on this stream the update helps clearly (every held-out log-probability rises)
    assert decision.keep and decision.p_value <= 0.05 and all(s.losses <= s.gains for s in decision.sets)
    assert model.heads.owner(repeat) == creator and str(repeat) not in model.heads
    hx, hy = kept_update.heldout_set(model, entry, repeat)
    linked = kept_update.score_task(model, repeat, hx, hy)
    candidate = kept_update.score_through(model, entry, creator, list(range(c)), hx, hy)
    assert torch.equal(linked[0], candidate[0]) and torch.allclose(linked[1], candidate[1])  # answers as scored
    assert not any(p.requires_grad for p in model.parameters())


def test_a_harmful_update_is_refused_and_the_entry_restored_exactly(prototype_stream, ground_truth):
    strategy, repeat, creator, trains = _trained_up_to_repeat(prototype_stream, ground_truth)
    model = strategy.model
    x, y, c = _task_data(prototype_stream, repeat)
    entry = model.entry_of(repeat)
    before = _entry_tensors(model, entry, creator)
    repeat_head = [t.clone() for t in model.heads.module(repeat).parameters()]
    wrong = list(reversed(range(c)))  # the classes matched the wrong way round: the update unlearns
    result = kept_update.kept_update(model, task=repeat, entry=entry, permutation=wrong, x=x, y=y,
                                     train_indices=trains[repeat], epochs=5, lr=0.05, batch_size=32)
    assert result is not None and not result.keep
    assert all(torch.equal(a, b) for a, b in zip(before, _entry_tensors(model, entry, creator)))
    assert model.heads.owner(repeat) == repeat
    assert all(torch.equal(a, b) for a, b in zip(repeat_head, model.heads.module(repeat).parameters()))
    assert not any(p.requires_grad for p in model.parameters())


def test_no_update_where_the_entry_head_has_another_class_count(prototype_stream, ground_truth):
    strategy, repeat, creator, trains = _trained_up_to_repeat(prototype_stream, ground_truth)
    model = strategy.model
    x, y, c = _task_data(prototype_stream, repeat)
    result = kept_update.kept_update(model, task=repeat, entry=model.entry_of(repeat), permutation=[0], x=x, y=y,
                                     train_indices=trains[repeat], epochs=1, lr=0.01, batch_size=32)
    assert result is None and model.heads.owner(repeat) == repeat


def test_remove_own_refuses_a_head_others_answer_through(prototype_stream, ground_truth):
    strategy, repeat, creator, trains = _trained_up_to_repeat(prototype_stream, ground_truth)
    heads = strategy.model.heads
    with pytest.raises(ValueError, match="no head of its own"):
        heads.remove_own(999)
    heads.remove_own(repeat)
    strategy.model.link_head(repeat, creator)
    with pytest.raises(ValueError, match=f"answer through task {creator}"):
        heads.remove_own(creator)


def _no_loss_strategy(stream, truth, **kwargs):
    torch.manual_seed(0)
    model = build_sdr_model(small_cnn_backbone(in_channels=1, widths=(16, 32)), in_channels=1, image_size=8,
                            generator=None)
    return SDRStrategy(model=model, settings=SDRSettings(**SHORT), reuse="no_loss",
                       detector=truth(stream.stream_groups),
                       evaluator=EvaluationPlugin(accuracy_metrics(experience=True), loggers=[]), **kwargs)


def test_no_loss_reuse_runs_a_stream_and_records_each_keep_decision(prototype_stream, ground_truth):
    strategy = _no_loss_strategy(prototype_stream, ground_truth)
    for experience in prototype_stream.train_stream:
        strategy.train(experience)
    model, groups = strategy.model, prototype_stream.stream_groups
    for task, (record, reuse) in enumerate(zip(strategy.sdr.records, strategy.sdr.reuse_records)):
        images_key, labels_key = kept_update.heldout_keys(task)
        assert labels_key in model.exemplars(model.entry_of(task))  # every task keeps its held-out set
        if record.decision != "reuse":
            assert reuse.keep_p_value is None and model.heads.owner(task) == task
            continue
        assert reuse.entry_updated and reuse.keep_sets and reuse.keep_sets[0][0] == task
        kept = not reuse.update_rolled_back
        owner = model.entry_creator[model.entry_of(task)]
        assert (model.heads.owner(task) == owner) == kept
        assert ("kept" in strategy.sdr.describe(record, reuse)) == kept
    assert any(r.decision == "reuse" for r in strategy.sdr.records)
    assert len(strategy.sdr.record_dicts()) == len(groups)
    assert all("keep_p_value" in d for d in strategy.sdr.record_dicts())


def test_no_loss_reuse_resumes_from_a_checkpoint_bit_identically(prototype_stream, ground_truth, tmp_path):
    check_resume(lambda **kwargs: _no_loss_strategy(prototype_stream, ground_truth, **kwargs), prototype_stream,
                 tmp_path)
