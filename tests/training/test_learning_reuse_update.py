"""The learning reuse's update options (issue #36.1, #38.5): a class-balanced update, the
early stop on a held-out share of the repeat, the rollback on the entry's held-out images,
the refusal of options that cannot act, and the seeded draws.

Prototype stream of conftest.py; decisions from the ``ground_truth`` fixture.
"""
import pytest
import torch

from avalanche_sdr import CPU_LARGE_TASK_SETTINGS, LearningReuse, NoLossReuse, SDRSettings
from avalanche_sdr.training import learning_reuse

from test_bad_input import _experience  # tests/training is on sys.path (pytest prepend mode)
from test_learning_reuse import _entry_state, _strategy, _train

PLAIN = dict(balance=False, early_stop=False, rollback=False)


def _repeat_of_warm_start(stream):
    """The first task after the warm start that repeats a warm-start task's group, and that task."""
    groups = stream.stream_groups
    repeat = next(t for t in range(3, len(groups)) if groups[t] in groups[:3])
    return repeat, groups.index(groups[repeat])


def _imbalanced(stream, task, majority=0, keep_minority=3):
    """Task ``task``'s training experience with all of class ``majority`` and ``keep_minority``
    images of the other class."""
    x = torch.stack([stream.train_stream[task].dataset[i][0] for i in range(len(stream.train_stream[task].dataset))])
    y = torch.tensor([int(stream.train_stream[task].dataset[i][1]) for i in range(len(x))])
    minority = torch.nonzero(y != majority).flatten()[:keep_minority]
    keep = torch.sort(torch.cat([torch.nonzero(y == majority).flatten(), minority])).values
    return _experience(x[keep], y[keep], task=task)


def _class0_share(model, stream, creator):
    """Mean softmax probability of class 0 of the creator's head on its own (balanced)
    training images: the head's class balance on the entry's earlier data."""
    dataset = stream.train_stream[creator].dataset
    x = torch.stack([dataset[i][0] for i in range(len(dataset))])
    model.eval()
    with torch.no_grad():
        return float(torch.softmax(model(x, creator), dim=1)[:, 0].mean())


def test_balanced_update_keeps_the_heads_class_balance(prototype_stream, ground_truth):
    repeat, creator = _repeat_of_warm_start(prototype_stream)
    shifts = {}
    for balance in (False, True):
        options = dict(PLAIN, balance=balance)
        strategy = _strategy(prototype_stream, ground_truth, lr=0.01, reuse_epochs=5, **options)
        _train(strategy, prototype_stream, upto=3)
        before = _class0_share(strategy.model, prototype_stream, creator)
        strategy.train(_imbalanced(prototype_stream, repeat))
        assert strategy.sdr.reuse_records[-1].entry_updated
        shifts[balance] = _class0_share(strategy.model, prototype_stream, creator) - before
    # the 30:3 repeat pulls the plain update's head towards class 0; the balanced one far less
    assert shifts[False] > 0.01
    assert abs(shifts[True]) < 0.5 * shifts[False]


def test_balanced_update_keeps_the_entrys_batchnorm_statistics(prototype_stream, ground_truth):
    repeat, creator = _repeat_of_warm_start(prototype_stream)
    moved = {}
    for balance in (False, True):
        strategy = _strategy(prototype_stream, ground_truth, **dict(PLAIN, balance=balance))
        _train(strategy, prototype_stream, upto=3)
        entry = strategy.model.entry_of(creator)
        stats = [(bn.running_mean.clone(), bn.running_var.clone())
                 for bn in learning_reuse.entry_batchnorms(strategy.model, entry)]
        strategy.train(_imbalanced(prototype_stream, repeat))
        after = learning_reuse.entry_batchnorms(strategy.model, entry)
        assert stats and len(after) == len(stats)
        moved[balance] = any(not torch.equal(m, bn.running_mean) or not torch.equal(v, bn.running_var)
                             for (m, v), bn in zip(stats, after))
    assert moved == {False: True, True: False}


def test_balanced_weights_count_every_class_equally():
    labels = torch.tensor([4] * 17 + [7] * 3)
    w = learning_reuse.balanced_weights(labels, 8)
    assert w.shape == (8,) and w.dtype == torch.float32
    assert torch.allclose(w[4] * 17, w[7] * 3) and torch.allclose(w[4] * 17 + w[7] * 3, torch.tensor(20.0))
    assert w[0] == 1.0


def test_rollback_restores_the_exact_state(prototype_stream, ground_truth, monkeypatch):
    """A rule that always fails (forced here) undoes the update bit for bit; the repeat
    still answers through the entry's head."""
    repeat, creator = _repeat_of_warm_start(prototype_stream)
    strategy = _strategy(prototype_stream, ground_truth, lr=0.01)
    _train(strategy, prototype_stream, upto=repeat)
    model = strategy.model
    entry = model.entry_of(creator)
    before = _entry_state(model, entry)
    head = {k: v.clone() for k, v in model.heads[str(creator)].state_dict().items()}
    monkeypatch.setattr(learning_reuse, "rollback_check", lambda before, after: True)
    strategy.train(prototype_stream.train_stream[repeat])
    record, reuse = strategy.detection_records[-1], strategy.sdr.reuse_records[-1]
    assert reuse.entry_updated and reuse.update_rolled_back and len(reuse.heldout_accuracy) == 2
    after = _entry_state(model, entry)
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert all(torch.equal(head[k], v) for k, v in model.heads[str(creator)].state_dict().items())
    assert model.heads.owner(repeat) == creator
    assert "rolled back" in strategy.sdr.describe(record, reuse)


def test_rollback_rule():
    assert learning_reuse.rollback_check(20, 19)
    assert not learning_reuse.rollback_check(20, 20) and not learning_reuse.rollback_check(19, 20)
    assert not learning_reuse.rollback_check(None, 3) and not learning_reuse.rollback_check(3, None)


def test_early_stop_stops_and_keeps_the_best_epoch(prototype_stream, ground_truth, monkeypatch):
    repeat, _ = _repeat_of_warm_start(prototype_stream)
    strategy = _strategy(prototype_stream, ground_truth, reuse_epochs=8, early_stop=True)
    _train(strategy, prototype_stream, upto=repeat)
    losses = iter([1.0, 0.5, 0.6, 0.4])  # epoch 2 is the best, epoch 3 not better: stop
    monkeypatch.setattr(learning_reuse, "balanced_loss", lambda *args, **kwargs: next(losses))
    strategy.train(prototype_stream.train_stream[repeat])
    assert len(strategy.sdr.epoch_accuracies[-1]) == 3
    assert strategy.sdr.reuse_records[-1].update_epochs == 2


def test_early_stop_restores_the_best_epochs_state(prototype_stream, ground_truth, monkeypatch):
    """The state kept is the one after the best epoch: the same as a run of that many epochs
    without the early stop's snapshot (the held-out share left out in both)."""
    repeat, creator = _repeat_of_warm_start(prototype_stream)
    states = {}
    for epochs, losses in ((6, [1.0, 0.5, 0.6]), (2, [1.0, 0.5])):
        strategy = _strategy(prototype_stream, ground_truth, reuse_epochs=epochs, rollback=False,
                             early_stop=True)
        _train(strategy, prototype_stream, upto=repeat)
        scores = iter(losses)
        monkeypatch.setattr(learning_reuse, "balanced_loss", lambda *args, **kwargs: next(scores))
        strategy.train(prototype_stream.train_stream[repeat])
        states[epochs] = _entry_state(strategy.model, strategy.model.entry_of(creator))
        monkeypatch.undo()
    assert all(torch.equal(states[6][k], states[2][k]) for k in states[2])


def test_early_stop_leaves_its_share_out_of_the_update(prototype_stream, ground_truth):
    repeat, _ = _repeat_of_warm_start(prototype_stream)
    seen = {}
    for early in (False, True):
        strategy = _strategy(prototype_stream, ground_truth, early_stop=early, reuse_epochs=1)
        _train(strategy, prototype_stream, upto=repeat)
        counts = []
        strategy.sdr.after_training_iteration = lambda s, **kw: counts.append(int(s.mb_y.shape[0]))
        strategy.train(prototype_stream.train_stream[repeat])
        seen[early] = sum(counts)
    y = torch.tensor([int(v) for v in prototype_stream.train_stream[repeat].dataset.targets])
    train, held = learning_reuse.split_repeat(y, 2, learning_reuse.REPEAT_HOLDOUT_SHARE, repeat)
    assert seen == {False: len(y), True: len(train)} and len(held) > 0


def test_split_and_heldout_draws_are_seeded_and_disjoint():
    y = torch.tensor([0] * 30 + [1] * 7)
    train, held = learning_reuse.split_repeat(y, 2, 0.2, task=5)
    again = learning_reuse.split_repeat(y, 2, 0.2, task=5)
    assert torch.equal(train, again[0]) and torch.equal(held, again[1])
    assert sorted(torch.cat([train, held]).tolist()) == list(range(37))
    assert [(y[held] == k).sum().item() for k in (0, 1)] == [6, 1]
    x = torch.arange(37, dtype=torch.float32).view(37, 1, 1, 1)
    stored = learning_reuse.select_exemplars(x, y, 2, 5, task=5)[0].flatten()
    kept = learning_reuse.select_heldout(x, y, 2, 10, 5, task=5)[0].flatten()
    assert len(kept) == 10 + 2 and not set(stored.tolist()) & set(kept.tolist())
    assert torch.equal(kept, learning_reuse.select_heldout(x, y, 2, 10, 5, task=5)[0].flatten())


def test_heldout_images_are_stored_checkpointed_and_counted(prototype_stream, ground_truth, tmp_path):
    strategy = _strategy(prototype_stream, ground_truth, checkpoint_dir=tmp_path)
    _train(strategy, prototype_stream, upto=4)
    x, y = learning_reuse.heldout(strategy.model, 0)
    assert len(y) == 2 * learning_reuse.GUARD_HELDOUT_PER_CLASS and x.dtype == torch.float32
    resumed = _strategy(prototype_stream, ground_truth, checkpoint_dir=tmp_path)
    assert resumed.restore_checkpoint() == 4
    x2, y2 = learning_reuse.heldout(resumed.model, 0)
    assert torch.equal(x, x2) and torch.equal(y, y2)
    plain = _train(_strategy(prototype_stream, ground_truth, **PLAIN), prototype_stream, upto=4)
    assert len(learning_reuse.heldout(plain.model, 0)[1]) == 0


def test_update_options_default_and_refusals():
    accumulate = LearningReuse()
    assert (accumulate.balance_rule() is not None, accumulate.stops_early, accumulate.rolls_back) == (True, False, True)
    assert LearningReuse(early_stop=True).stops_early
    assert not LearningReuse(guard=False).rolls_back
    assert not LearningReuse(guard_exemplars=0).rolls_back
    for name in ("balance", "early_stop", "rollback"):
        with pytest.raises(ValueError, match="None .* or a bool"):
            LearningReuse(**{name: 1})
    with pytest.raises(ValueError, match="rollback=True needs guard=True"):
        LearningReuse(guard=False, rollback=True)
    with pytest.raises(ValueError, match="rollback=True needs"):
        LearningReuse(guard_exemplars=0, rollback=True)
    for name, bad in (("lr", 0.0), ("guard", 1), ("guard_exemplars", -1)):
        with pytest.raises(ValueError, match=name):
            LearningReuse(**{name: bad})
    with pytest.raises(TypeError, match="unexpected keyword"):
        SDRSettings(update_balance="always")  # the options are the reuse's, not settings


def test_an_old_checkpoint_fingerprint_maps_its_reuse_settings_to_the_reuse_object():
    """A fingerprint of the former layout (the reuse and its options among the settings) reads
    as the reuse object's config: before the update options, the plain update; before
    update_epochs, reuse_epochs (None)."""
    from avalanche_sdr.training.checkpoint import upgrade_strategy_fingerprint

    budget = CPU_LARGE_TASK_SETTINGS.to_dict()
    old = dict(budget, reuse="accumulate", update_lr=0.001, reuse_guard=True, guard_exemplars=5)
    assert upgrade_strategy_fingerprint(old) == dict(budget, reuse=dict(
        LearningReuse(balance=False, early_stop=False, rollback=False).config()))
    newer = dict(old, update_balance=None, update_early_stop=None, update_rollback=None, update_epochs=3)
    assert upgrade_strategy_fingerprint(newer) == dict(budget, reuse=LearningReuse(epochs=3).config())
    head = dict(budget, reuse="head", update_lr=0.001, reuse_guard=True, guard_exemplars=5)
    assert upgrade_strategy_fingerprint(head) == dict(budget, reuse={"name": "head"})
    no_loss = dict(budget, reuse="no_loss", update_lr=0.002, reuse_guard=True, guard_exemplars=4)
    expected = NoLossReuse(lr=0.002, replay_exemplars=4).config()
    assert upgrade_strategy_fingerprint(no_loss) == dict(budget, reuse=expected)


# ---------------------------------------------------------------- which updates are balanced
def _update_state(strategy, stream, repeat, experience=None):
    """Train up to ``repeat``, then the repeat (``experience``, default the stream's); the
    entry's state after it and the repeat's records (detection, reuse)."""
    _train(strategy, stream, upto=repeat)
    strategy.train(experience if experience is not None else stream.train_stream[repeat])
    record = strategy.detection_records[-1]
    return _entry_state(strategy.model, record.entry), (record, strategy.sdr.reuse_records[-1])


def test_a_repeat_in_its_entrys_balance_gets_the_plain_update(prototype_stream, ground_truth):
    """Default rule ("when_shifted"): a balanced repeat of an entry created on balanced data
    trains exactly as balance=False does (BatchNorm in training mode, plain mean)."""
    repeat, creator = _repeat_of_warm_start(prototype_stream)
    states, records = {}, {}
    for balance in (None, False, "always"):
        strategy = _strategy(prototype_stream, ground_truth, rollback=False, balance=balance)
        states[balance], records[balance] = _update_state(strategy, prototype_stream, repeat)
    counts = learning_reuse.class_counts(strategy.model, strategy.model.entry_of(creator))
    assert counts is None  # "always" reads no counts, keeps none
    reuse = records[None][1]
    assert reuse.entry_updated and not reuse.update_balanced and reuse.balance_p_value >= learning_reuse.BALANCE_LEVEL
    assert all(torch.equal(states[None][k], states[False][k]) for k in states[False])
    assert any(not torch.equal(states[None][k], states["always"][k]) for k in states[False])
    assert records["always"][1].update_balanced and records["always"][1].balance_p_value is None
    assert not records[False][1].update_balanced and records[False][1].balance_p_value is None
    assert "class-balanced" not in strategy.sdr.describe(*records[None])


def test_a_repeat_in_another_balance_gets_the_balanced_update(prototype_stream, ground_truth):
    """Default rule: a 30:3 repeat of a balanced entry is balanced, exactly as "always" does."""
    repeat, _ = _repeat_of_warm_start(prototype_stream)
    states, records = {}, {}
    for balance in (None, "always"):
        strategy = _strategy(prototype_stream, ground_truth, rollback=False, balance=balance)
        states[balance], records[balance] = _update_state(strategy, prototype_stream, repeat,
                                                          _imbalanced(prototype_stream, repeat))
    assert records[None][1].update_balanced and records[None][1].balance_p_value < learning_reuse.BALANCE_LEVEL
    assert all(torch.equal(states[None][k], states["always"][k]) for k in states[None])
    assert "update_balanced" in strategy.sdr.record_dicts()[-1]
    assert "entry updated (class-balanced)" in strategy.sdr.describe(*records[None])


def test_class_counts_are_kept_checkpointed_and_an_entry_without_them_is_balanced(prototype_stream, ground_truth,
                                                                                   tmp_path):
    strategy = _strategy(prototype_stream, ground_truth, checkpoint_dir=tmp_path)
    _train(strategy, prototype_stream, upto=3)
    y = torch.tensor([int(v) for v in prototype_stream.train_stream[0].dataset.targets])
    counts = learning_reuse.class_counts(strategy.model, 0)
    assert counts.dtype == torch.int64 and counts.tolist() == torch.unique(y, return_counts=True)[1].tolist()
    resumed = _strategy(prototype_stream, ground_truth, checkpoint_dir=tmp_path)
    assert resumed.restore_checkpoint() == 3
    assert torch.equal(learning_reuse.class_counts(resumed.model, 0), counts)
    rule = learning_reuse.ShiftedBalance()
    assert rule.decide(torch.tensor([50, 50]), None) == learning_reuse.BalanceDecision(balanced=True)
    with pytest.raises(KeyError, match="entry 99 does not exist"):
        strategy.model.set_exemplars(99, {"class_counts": counts}, replace=False)
    entry = strategy.model.create_entry(99)  # an entry without stored images
    with pytest.raises(KeyError, match="no stored images"):
        strategy.model.set_exemplars(entry, {"class_counts": counts}, replace=False)


def test_shifted_balance_rule():
    rule = learning_reuse.ShiftedBalance()
    same = rule.decide(torch.tensor([100, 100]), torch.tensor([100, 100]))
    assert not same.balanced and same.p_value == 1.0
    assert not rule.decide(torch.tensor([104, 96]), torch.tensor([100, 100])).balanced  # sampling noise
    assert rule.decide(torch.tensor([30, 170]), torch.tensor([170, 30])).balanced  # flipped
    # an entry created on 85/15 data: even a repeat in its own balance is balanced (its head and
    # statistics hold a class prior the plain update would reinforce), and a balanced repeat too
    assert rule.decide(torch.tensor([170, 30]), torch.tensor([170, 30])).balanced
    assert rule.decide(torch.tensor([100, 100]), torch.tensor([170, 30])).balanced
    assert learning_reuse.AlwaysBalance().decide(torch.tensor([1, 1]), None).balanced
    with pytest.raises(ValueError, match=r"level must lie in \(0, 1\)"):
        learning_reuse.ShiftedBalance(level=1.0)


def test_count_tests_match_scipy_and_refuse_bad_counts():
    from scipy.stats import chi2_contingency, chisquare

    a, b = torch.tensor([30, 12, 5]), torch.tensor([25, 25, 20])
    assert learning_reuse.counts_p_value(a, b) == pytest.approx(chi2_contingency([a.tolist(), b.tolist()],
                                                                                  correction=False)[1], rel=1e-9)
    assert learning_reuse.equal_counts_p_value(a) == pytest.approx(chisquare(a.tolist()).pvalue, rel=1e-9)
    # a class absent from both is left out; one class left: identical proportions
    assert learning_reuse.counts_p_value(torch.tensor([10, 0, 5]), torch.tensor([20, 0, 10])) == pytest.approx(1.0)
    assert learning_reuse.counts_p_value(torch.tensor([10, 0]), torch.tensor([7, 0])) == 1.0
    assert learning_reuse.equal_counts_p_value(torch.tensor([10, 0])) < 0.01  # an absent class is imbalance
    with pytest.raises(ValueError, match="two \\[c\\] vectors of one length"):
        learning_reuse.counts_p_value(torch.tensor([1, 2]), torch.tensor([1, 2, 3]))
    with pytest.raises(ValueError, match="non-negative"):
        learning_reuse.equal_counts_p_value(torch.tensor([3, -1]))


def test_balance_rule_options_resolve_and_refuse():
    assert isinstance(LearningReuse().balance_rule(), learning_reuse.ShiftedBalance)
    assert isinstance(LearningReuse(balance=True).balance_rule(), learning_reuse.AlwaysBalance)
    assert isinstance(LearningReuse(balance="always").balance_rule(), learning_reuse.AlwaysBalance)
    assert isinstance(LearningReuse(guard=False).balance_rule(), learning_reuse.AlwaysBalance)
    assert isinstance(LearningReuse(guard_exemplars=0).balance_rule(), learning_reuse.AlwaysBalance)
    assert LearningReuse(balance=False).balance_rule() is None
    assert isinstance(LearningReuse(balance="when_shifted").balance_rule(), learning_reuse.ShiftedBalance)
    with pytest.raises(ValueError, match="balance rule name \\['always', 'when_shifted'\\], got 'sometimes'"):
        LearningReuse(balance="sometimes")
    with pytest.raises(ValueError, match="needs guard=True and guard_exemplars > 0; set balance="):
        LearningReuse(guard=False, balance="when_shifted")
    with pytest.raises(ValueError, match="unknown balance rule 'x'"):
        learning_reuse.make_balance_rule("x")


def test_reuse_record_checks_and_round_trips():
    """What the reuse did is its own record, beside the detection record; the two keep the
    results files' keys (the detection record's, then these)."""
    import json

    from avalanche_sdr.detection.decision import DetectionRecord
    from avalanche_sdr.training.reuse import ReuseRecord

    for fields, message in ((dict(update_balanced=True), "update_balanced is only set for an update"),
                            (dict(update_rolled_back=True), "update_rolled_back is only set for an update"),
                            (dict(entry_updated=1), "entry_updated must be a bool"),
                            (dict(entry_updated=True, heldout_accuracy=[0.5]), r"\[before, after\]")):
        with pytest.raises(ValueError, match=message):
            ReuseRecord(**fields)
    with pytest.raises(ValueError, match="entry_updated is only set for a 'reuse', not 'new'"):
        ReuseRecord(entry_updated=True).check_decision("new")
    record = ReuseRecord(entry_updated=True, gate_accuracy=0.875, gate_threshold=0.6, update_balanced=True,
                         balance_p_value=1e-5, heldout_accuracy=[0.9, 0.95], update_epochs=2)
    assert ReuseRecord.from_dict(json.loads(json.dumps(record.to_dict()))) == record
    detection = DetectionRecord(task=3, decision="reuse", entry=0, reused_entry=0)
    assert list(dict(detection.to_dict(), **record.to_dict())) == [
        "task", "decision", "entry", "reused_entry", "candidate_entries",
        "candidate_tasks", "consistency", "complexity", "vote_consistency",
        "vote_complexity", "rule", "detection_seconds",
        "mean_elbo", "reference_elbo", "reference_elbo_std", "permuted_complexity", "p_value",
        "power", "class_count_filter", "class_permutation", "decoy_rank_pvalue", "entry_updated", "gate_accuracy",
        "gate_threshold", "update_epochs", "heldout_accuracy", "update_rolled_back", "update_balanced",
        "balance_p_value", "keep_p_value", "keep_sets",
    ]


def test_update_epochs_sets_the_updates_epochs_only(prototype_stream, ground_truth):
    """An update trains ``epochs`` epochs; a new entry new_task_epochs; the head-only
    fallback of a refused gate (not an update) stays at reuse_epochs."""
    repeat, _ = _repeat_of_warm_start(prototype_stream)
    strategy = _strategy(prototype_stream, ground_truth, reuse_epochs=4, epochs=2)
    assert strategy.sdr.reuse.epochs == 2
    _train(strategy, prototype_stream, upto=repeat)
    strategy.train(prototype_stream.train_stream[repeat])
    reuse = strategy.sdr.reuse_records[-1]
    assert reuse.entry_updated and reuse.update_epochs is None  # set by the early stop only
    assert len(strategy.sdr.epoch_accuracies[-1]) == 2
    assert len(strategy.sdr.epoch_accuracies[0]) == strategy.sdr.settings.new_task_epochs
    default = _strategy(prototype_stream, ground_truth, reuse_epochs=3)
    assert default.sdr.reuse.epochs is None
    assert default.sdr.reuse.train_epochs(learning_reuse.ReuseRecord(entry_updated=True), default.sdr.settings) == 3


def test_update_epochs_refusals():
    for bad in (0, -1, 2.0, True, "3"):
        with pytest.raises(ValueError, match="epochs"):
            LearningReuse(epochs=bad)
