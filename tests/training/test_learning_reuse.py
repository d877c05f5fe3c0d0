"""The learning reuse (``reuse="accumulate"``, :class:`LearningReuse`) end to end on the prototype
stream of conftest.py (8 tasks: 4 groups x 2 splits, 3 warm-start tasks).

Decisions come from ground truth (or are wrong on purpose), so what is under test is
what a reuse trains: the repeat answers through its entry's head, the entry's adapters
move, every task of the entry answers through the update, the guard refuses an
entry whose head cannot classify the repeat, a task label trained again continues its
entry, and a checkpointed run resumes bit-identically.
"""
import copy
import importlib.util
from pathlib import Path

import pytest
import torch
from avalanche.evaluation.metrics import accuracy_metrics
from avalanche.training.plugins import EvaluationPlugin

from avalanche_sdr import CPU_LARGE_TASK_SETTINGS, LearningReuse, SDRSettings, SDRStrategy, build_sdr_model
from avalanche_sdr.evaluation import repository_memory_bytes
from avalanche_sdr.evaluation.memory import entry_bytes
from avalanche_sdr.models import small_cnn_backbone
from avalanche_sdr.training import learning_reuse
from avalanche_sdr.training.learning_reuse import GUARD_HELDOUT_PER_CLASS, class_counts, heldout
from avalanche_sdr.training.sdr_plugin import KNOWN_TASK_RULE

SHORT = dict(CPU_LARGE_TASK_SETTINGS, new_task_epochs=3, lr_milestones=(2,), reuse_epochs=2, reuse_lr=0.01)


def _strategy(stream, truth, reuse="accumulate", **kwargs):
    """An SDRStrategy of the SHORT settings; decisions by ``truth`` (the ``ground_truth``
    fixture's class) unless ``detector=`` is given; keywords of :class:`LearningReuse`
    (``lr``, ``guard``, ``balance``, ...) build the learning reuse with them."""
    torch.manual_seed(0)
    model = build_sdr_model(small_cnn_backbone(in_channels=1, widths=(16, 32)), in_channels=1, image_size=8,
                            generator=None)
    detector = kwargs.pop("detector", None) or truth(stream.stream_groups)
    settings = {name: kwargs.pop(name) for name in SDRSettings.field_names() if name in kwargs}
    options = {name: kwargs.pop(name) for name in LearningReuse.OPTIONS if name in kwargs}
    if options:
        reuse = LearningReuse(**options)
    return SDRStrategy(model=model, settings=SDRSettings(**{**SHORT, **settings}), reuse=reuse, detector=detector,
                       evaluator=EvaluationPlugin(accuracy_metrics(experience=True), loggers=[]), **kwargs)


def _entry_state(model, entry):
    """Copies of the entry's adapter and BatchNorm tensors, by position."""
    tensors = [t for m in model.encoder.entry_modules(entry) for t in list(m.parameters()) + list(m.buffers())]
    return {i: t.detach().clone() for i, t in enumerate(tensors)}


def _train(strategy, stream, upto=None):
    for experience in list(stream.train_stream)[:upto]:
        strategy.train(experience)
    return strategy


def test_repeat_answers_through_its_entry_and_updates_it(prototype_stream, ground_truth):
    strategy = _strategy(prototype_stream, ground_truth)
    model = strategy.model
    experiences = list(prototype_stream.train_stream)
    before = None
    for i, experience in enumerate(experiences):
        task = int(experience.task_labels[0])
        group = prototype_stream.stream_groups[task]
        earlier = [t for t in range(task) if prototype_stream.stream_groups[t] == group]
        if earlier and before is None:
            entry = model.entry_of(earlier[0])
            before = (task, entry, _entry_state(model, entry), copy.deepcopy(model.heads[str(earlier[0])]))
        strategy.train(experience)
    records = strategy.detection_records
    repeats = [(r, u) for r, u in zip(records, strategy.sdr.reuse_records) if r.decision == "reuse"]
    assert repeats and all(u.entry_updated for _, u in repeats)
    assert all(u.gate_accuracy is not None and u.gate_accuracy >= u.gate_threshold for _, u in repeats)
    # One head per entry: the repeats have none of their own.
    assert len(model.heads) == model.num_entries
    assert sorted(model.heads.links) == sorted(r.task for r, _ in repeats)
    task, entry, adapters, old_head = before
    moved = [name for name, value in _entry_state(model, entry).items() if not torch.equal(value, adapters[name])]
    assert moved, "the reused entry's adapters did not change"
    creator = model.entry_creator[entry]
    assert not torch.equal(model.heads[str(creator)].weight, old_head.weight)
    x = experiences[task].dataset[0][0].unsqueeze(0)
    model.eval()
    assert torch.equal(model(x, task), model(x, creator))  # the same entry and head answer both


def test_memory_has_no_repeat_heads_but_stored_images(prototype_stream, ground_truth):
    head = _train(_strategy(prototype_stream, ground_truth, reuse="head"), prototype_stream)
    learn = _train(_strategy(prototype_stream, ground_truth), prototype_stream)
    model = learn.model
    images, labels = learning_reuse.stored(model, 0)
    assert images.shape == (2 * LearningReuse().guard_exemplars, 1, 8, 8) and labels.tolist() == [0] * 5 + [1] * 5
    assert model.exemplars(0)["images"].dtype == torch.uint8
    assert model.exemplars(0)["heldout_images"].dtype == torch.uint8
    stored = sum(model.exemplars(e)["images"].numel() + 8 * len(learning_reuse.stored(model, e)[1])
                 + model.exemplars(e)["heldout_images"].numel() + 8 * len(heldout(model, e)[1])
                 + 8 * len(class_counts(model, e))  # the balance rule's class counts, int64
                 for e in model.entries)
    head_bytes = sum(p.numel() * 4 for p in head.model.heads["0"].parameters())
    n_repeats = len(model.heads.links)
    assert repository_memory_bytes(learn) == repository_memory_bytes(head) + stored - n_repeats * head_bytes
    assert entry_bytes(model, 0) > entry_bytes(head.model, 0)


def test_guard_refuses_a_wrong_reuse_and_grows_an_entry(prototype_stream, ground_truth):
    groups = prototype_stream.stream_groups
    # the first task after the warm start reuses an entry of another group
    task = 3
    wrong_entry = next(e for e in range(3) if groups[e] != groups[task])
    guarded = _train(_strategy(prototype_stream, ground_truth,
                               detector=ground_truth(groups, wrong={task: wrong_entry})), prototype_stream, upto=4)
    record, reuse = guarded.detection_records[task], guarded.sdr.reuse_records[task]
    assert record.decision == "new" and reuse.gate_accuracy < reuse.gate_threshold and not reuse.entry_updated
    assert guarded.model.entry_of(task) == 3
    unguarded = _train(_strategy(prototype_stream, ground_truth, guard=False,
                                 detector=ground_truth(groups, wrong={task: wrong_entry})), prototype_stream, upto=4)
    record, reuse = unguarded.detection_records[task], unguarded.sdr.reuse_records[task]
    assert record.decision == "reuse" and reuse.entry_updated and reuse.gate_accuracy is None
    assert learning_reuse.stored(unguarded.model, 0)[0].shape[0] == 0  # no guard, no stored images


def test_permuted_repeat_answers_in_its_own_class_order(prototype_stream, ground_truth):
    groups = prototype_stream.stream_groups
    repeat = next(t for t in range(3, len(groups)) if groups[t] in groups[:t])
    strategy = _strategy(prototype_stream, ground_truth,
                         detector=ground_truth(groups, permutation={repeat: [1, 0]}),
                         guard=False)
    _train(strategy, prototype_stream, upto=repeat + 1)
    model = strategy.model.eval()
    owner = model.heads.owner(repeat)
    assert owner != repeat and model.heads.permutation(repeat) == [1, 0]
    x = prototype_stream.train_stream[repeat].dataset[0][0].unsqueeze(0)
    assert torch.equal(model(x, repeat), model(x, owner)[:, [1, 0]])
    assert strategy.detection_records[repeat].class_permutation == [1, 0]


@pytest.mark.parametrize("reuse", ["head", "accumulate"])
def test_a_task_label_trained_again_continues_its_entry(prototype_stream, reuse, ground_truth):
    strategy = _strategy(prototype_stream, ground_truth, reuse=reuse)
    first = prototype_stream.train_stream[0]
    strategy.train(first)
    adapters = _entry_state(strategy.model, 0)
    strategy.train(first)
    record = strategy.detection_records[-1]
    assert record.rule == KNOWN_TASK_RULE and record.decision == "reuse" and record.entry == 0
    assert strategy.sdr.reuse_records[-1].entry_updated == (reuse == "accumulate")
    moved = any(not torch.equal(v, adapters[k]) for k, v in _entry_state(strategy.model, 0).items())
    assert moved == (reuse == "accumulate")
    assert strategy.model.num_entries == 1 and len(strategy.model.heads) == 1
    # the warm start counts tasks, not experiences: the next task is still a warm start
    strategy.train(prototype_stream.train_stream[1])
    assert strategy.detection_records[-1].decision == "warm_start"


def test_a_task_label_trained_again_must_keep_its_class_count(prototype_stream, ground_truth):
    from test_bad_input import _experience  # tests/training is on sys.path (pytest prepend mode)

    strategy = _strategy(prototype_stream, ground_truth)
    strategy.train(prototype_stream.train_stream[0])
    images = torch.rand(30, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match="must keep its classes"):
        strategy.train(_experience(images, torch.arange(3).repeat_interleave(10), task=0))


def check_resume(make, stream, checkpoint_dir, upto=5):
    """A run built by ``make(**kwargs)`` checkpointed after ``upto`` tasks and resumed ends bit-identical
    to the same run straight through (layout, every tensor, the records but their timings)."""
    reference = _train(make(), stream)
    _train(make(checkpoint_dir=checkpoint_dir), stream, upto=upto)
    resumed = make(checkpoint_dir=checkpoint_dir)
    done = resumed.restore_checkpoint()
    assert done == upto
    for experience in list(stream.train_stream)[done:]:
        resumed.train(experience)
    assert resumed.model.layout() == reference.model.layout()
    expected = reference.model.state_dict()
    for name, value in resumed.model.state_dict().items():
        assert torch.equal(value, expected[name]), name
    assert [r | {"detection_seconds": 0} for r in resumed.sdr.record_dicts()] == \
        [r | {"detection_seconds": 0} for r in reference.sdr.record_dicts()]


def test_checkpointed_accumulate_run_resumes_bit_identically(prototype_stream, tmp_path, ground_truth):
    check_resume(lambda **kwargs: _strategy(prototype_stream, ground_truth, **kwargs), prototype_stream, tmp_path)


def test_shuffled_repeats_update_their_entry_through_the_matched_classes(prototype_stream, ground_truth):
    """With the two-sample rule's class matching, a stream whose repeats list their classes
    in another order is decided and learned as the same stream unshuffled."""
    # this folder's conftest by its path: "import conftest" finds whichever conftest
    # module another test folder loaded first
    spec = importlib.util.spec_from_file_location("training_conftest", Path(__file__).with_name("conftest.py"))
    training_conftest = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(training_conftest)
    GROUPS, _prototype_dataset = training_conftest.GROUPS, training_conftest._prototype_dataset

    from avalanche_sdr.benchmarks import mixed_similarity_benchmark
    from avalanche_sdr.detection import TwoSampleDetector, TwoSampleSettings

    shuffled = mixed_similarity_benchmark(_prototype_dataset(60, seed=1), _prototype_dataset(20, seed=2), GROUPS,
                                          n_splits=2, seed=0, shuffle_repeat_labels=True)
    runs = {}
    for name, stream in (("plain", prototype_stream), ("shuffled", shuffled)):
        detector = TwoSampleDetector(TwoSampleSettings(alpha=0.001, match_classes=True))
        strategy = _train(_strategy(stream, ground_truth, detector=detector), stream)
        runs[name] = strategy, [strategy.eval([e])["Top1_Acc_Exp/eval_phase/test_stream/Task%03d/Exp%03d"
                                              % (e.task_label, e.current_experience)] for e in stream.test_stream]
    plain, shuffled_run = runs["plain"][0], runs["shuffled"][0]
    assert [r.decision for r in shuffled_run.detection_records] == [r.decision for r in plain.detection_records]
    updated = [r for r, u in zip(shuffled_run.detection_records, shuffled_run.sdr.reuse_records) if u.entry_updated]
    assert updated and all(r.class_permutation == [1, 0] for r in updated)
    assert abs(sum(runs["shuffled"][1]) - sum(runs["plain"][1])) / len(runs["plain"][1]) < 0.05


def test_gaussian_router_is_refitted_for_every_task_of_an_updated_entry(prototype_stream, ground_truth):
    """After an update the entry's features moved: the router's whitening and the class
    means of every task of the entry are fitted again in the new feature space."""
    from avalanche_sdr.routers.base import task_key as _task_key

    strategy = _strategy(prototype_stream, ground_truth, routers=("gaussian",))
    model = strategy.model
    groups = prototype_stream.stream_groups
    experiences = list(prototype_stream.train_stream)
    repeat = next(t for t in range(3, len(groups)) if groups[t] in groups[:t])
    creator = groups.index(groups[repeat])
    _train(strategy, prototype_stream, upto=repeat)
    means_before = model.routing_state(_task_key("gaussian", creator))["means"].clone()
    strategy.train(experiences[repeat])
    assert strategy.sdr.reuse_records[repeat].entry_updated
    means_after = model.routing_state(_task_key("gaussian", creator))["means"]
    assert not torch.equal(means_before, means_after)
    assert torch.allclose(means_after, model.routing_state(_task_key("gaussian", repeat))["means"])
    x = torch.stack([experiences[repeat].dataset[i][0] for i in range(8)])
    prediction = model.predict(x, "gaussian")
    assert prediction.class_ids.shape == (8,)
