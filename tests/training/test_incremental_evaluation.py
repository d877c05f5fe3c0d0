"""Incremental evaluation: ``task_state_digest`` (:mod:`avalanche_sdr.models.digests`) and
the runner's :class:`EvaluationCache`.

On MixedDigits with 3 splits (15 tasks, 5 groups of 3, repeats reused by ground truth),
a run of :func:`run_sdr_stream` must report exactly what evaluating every group task
again after every experience reports, with the head-only reuse (one new evaluation per
task) and the learning reuse (every task of an updated entry evaluated again).
"""
import pytest
import torch

from avalanche.evaluation.metrics import accuracy_metrics
from avalanche.training.plugins import EvaluationPlugin

from avalanche_sdr import LearningReuse, SDRStrategy, build_sdr_model
from avalanche_sdr.benchmarks import MixedDigits
from avalanche_sdr.models import small_cnn_backbone
from avalanche_sdr.models.digests import backbone_state_digest, task_state_digest
from avalanche_sdr.training import SDRSettings
from avalanche_sdr.training.stream_runner import (EvaluationCache, evaluate_group, final_test_accuracies,
                                                  run_sdr_stream, transfer_summary)

pytestmark = pytest.mark.usefixtures("one_thread")

SETTINGS = SDRSettings(new_task_epochs=1, new_task_lr=1e-3, lr_milestones=(), reuse_epochs=2, reuse_lr=0.01,
                       train_mb_size=32, eval_mb_size=256)
UPDATE_LR = 0.01  # the learning reuse's update rate


@pytest.fixture(scope="module")
def stream():
    return MixedDigits(seed=0, n_splits=3)


def _test_batch(experience):
    dataset = experience.dataset
    return torch.stack([dataset[k][0] for k in range(len(dataset))]), int(experience.task_labels[0])


def _strategy(stream, reuse, ground_truth):
    """The strategy, with ``strategy.eval`` recording the test-stream positions of each
    call (``evaluated_positions``) and ``strategy.train`` recording, after each
    experience, every trained task's test logits (``logits_after``: the oracle of what
    changed, computed from outputs, not from the repository's digests)."""
    torch.manual_seed(0)
    model = build_sdr_model(small_cnn_backbone(in_channels=1, widths=(8, 16)), in_channels=1, image_size=8,
                            generator=None)
    reuse = LearningReuse(lr=UPDATE_LR) if reuse == "accumulate" else reuse
    strategy = SDRStrategy(model=model, settings=SETTINGS, reuse=reuse, detector=ground_truth(stream.stream_groups),
                           evaluator=EvaluationPlugin(accuracy_metrics(experience=True), loggers=[]))
    strategy.evaluated_positions, strategy.logits_after = [], []
    evaluate, train = strategy.eval, strategy.train
    batches = [_test_batch(e) for e in stream.test_stream]

    def counting_eval(experiences, **kwargs):
        experiences = list(experiences)
        strategy.evaluated_positions.append([e.current_experience for e in experiences])
        return evaluate(experiences, **kwargs)

    def recording_train(experience, **kwargs):
        out = train(experience, **kwargs)
        was_training = model.training
        model.eval()
        with torch.no_grad():
            strategy.logits_after.append([model(x, task) for x, task in batches[:experience.current_experience + 1]])
        model.train(was_training)
        return out

    strategy.eval, strategy.train = counting_eval, recording_train
    return strategy


def _changed(strategy, groups):
    """Per position p, the group positions j <= p whose test logits differ from those
    after their previous group evaluation (or that have none): what must be evaluated."""
    last, out = {}, []
    for p, logits in enumerate(strategy.logits_after):
        group = [j for j in range(p + 1) if groups[j] == groups[p]]
        due = [j for j in group if not (j in last and torch.equal(last[j], logits[j]))]
        last.update((j, logits[j]) for j in group)
        out.append(due)
    return out


def _reference(stream, reuse, ground_truth):
    """Every group task evaluated again after every experience (the runner without a
    cache), then every test experience: (strategy, group curve, final accuracies)."""
    strategy = _strategy(stream, reuse, ground_truth)
    groups, curve = [], []
    for position, experience in enumerate(stream.train_stream):
        strategy.train(experience, eval_streams=[])
        groups.append(int(experience.group))
        curve.append(evaluate_group(strategy, stream.test_stream, groups, position, int(experience.task_labels[0])))
    return strategy, curve, final_test_accuracies(strategy, stream.test_stream)


@pytest.fixture(scope="module")
def runs(stream, ground_truth):
    """``{reuse: (strategy, results, timings, reference)}``; the learning reuse's run
    with ``full_final_evaluation=False``."""
    out = {}
    for reuse, full_final in (("head", True), ("accumulate", False)):
        strategy, timings = _strategy(stream, reuse, ground_truth), {}
        results = run_sdr_stream(strategy, stream, seed=0, timings=timings, full_final_evaluation=full_final)
        out[reuse] = strategy, results, timings, _reference(stream, reuse, ground_truth)
    return out


@pytest.mark.parametrize("reuse", ["head", "accumulate"])
def test_results_equal_a_full_evaluation(runs, reuse):
    strategy, results, _, (reference, curve, final) = runs[reuse]
    # Ground truth reuses every repeat (10); the learning reuse's guard may make some new.
    assert [t["decision"] for t in results["tasks"]].count("reuse") >= (10 if reuse == "head" else 1)
    assert results["group_curve"] == curve
    assert [t["test_accuracy"] for t in results["tasks"]] == final
    assert results["average_accuracy"] == sum(final) / len(final)
    summary = transfer_summary(curve, final)
    assert (results["bwt"], results["forgetting"]) == (summary["bwt"], summary["forgetting"])
    # The same training: the group evaluations (fewer or not) leave it as it was.
    expected = reference.model.state_dict()
    for name, value in strategy.model.state_dict().items():
        assert torch.equal(value, expected[name]), name


def test_head_only_evaluates_each_task_once_per_phase(runs, stream):
    strategy, _, timings, (reference, _, _) = runs["head"]
    n = len(stream.train_stream)
    calls = strategy.evaluated_positions
    # One group evaluation per experience, of that experience alone; then the full final one.
    assert calls == [[p] for p in range(n)] + [list(range(n))] == _changed(strategy, stream.stream_groups) + [
        list(range(n))]
    assert timings["evaluated_experiences"] == n and timings["final_evaluated_experiences"] == n
    assert sum(map(len, calls)) <= 2 * n
    # Without the cache: every group task after every experience, then the final evaluation.
    assert sum(map(len, reference.evaluated_positions)) == 5 * (1 + 2 + 3) + n


def test_learning_reuse_evaluates_exactly_the_tasks_that_changed(runs, stream):
    strategy, results, timings, _ = runs["accumulate"]
    groups = stream.stream_groups
    group_calls = strategy.evaluated_positions[:len(groups)]
    changed = _changed(strategy, groups)
    assert group_calls == changed
    assert timings["evaluated_experiences"] == sum(map(len, changed))
    # A repeat that updated its entry changed every task of it: all evaluated again.
    assert max(map(len, changed)) > 1
    assert sum(map(len, changed)) <= sum(len(entry["evaluated"]) for entry in results["group_curve"])
    # Nothing changed after the last group evaluation: the final evaluation evaluated nothing.
    assert timings["final_evaluated_experiences"] == 0 and len(strategy.evaluated_positions) == len(groups)


def test_cache_evaluates_again_what_changed_outside_training(runs, stream):
    """A change the training code does not report (written into the tensors directly)
    is seen: the digest hashes the values, not a counter."""
    strategy, results, _, _ = runs["head"]
    model, test = strategy.model, stream.test_stream
    final = [t["test_accuracy"] for t in results["tasks"]]
    cache = EvaluationCache(strategy, test)
    n = len(test)
    assert cache.accuracies(range(n)) == final and cache.evaluated == n
    assert cache.accuracies(range(n)) == final and cache.evaluated == n
    head = model.heads.module(int(test[0].task_labels[0]))
    weight = head.weight.detach().clone()
    conv = model.encoder.convs[0].conv.weight
    e0 = conv.detach().clone()
    try:
        with torch.no_grad():
            head.weight.copy_(-weight)  # every prediction of task 0 changes
        changed = cache.accuracies(range(n))
        assert cache.evaluated == n + 1
        assert changed[0] == final_test_accuracies(strategy, [test[0]])[0] != final[0]
        assert changed[1:] == final[1:]
        with torch.no_grad():
            head.weight.copy_(weight)
            conv.mul_(0.5)  # E0, read by every task
        cache.accuracies(range(n))
        assert cache.evaluated == 2 * n + 1
    finally:
        with torch.no_grad():
            head.weight.copy_(weight)
            conv.copy_(e0)
    assert cache.accuracies(range(n)) == final and cache.evaluated == 3 * n + 1


def _repository():
    """Entries 0 and 1; task 0 creates entry 0, task 1 entry 1, task 2 reuses entry 0
    with a head of its own, task 3 answers through task 0's head in another class order."""
    torch.manual_seed(0)
    model = build_sdr_model(small_cnn_backbone(in_channels=1, widths=(8, 16)), in_channels=1, image_size=8,
                            generator=None)
    for task in (0, 1):
        model.create_entry(task)
        model.heads.add(task, 2)
    model.assign_task(2, 0)
    model.heads.add(2, 2)
    model.assign_task(3, 0)
    model.link_head(3, 0, [1, 0])
    return model


def test_task_state_digest_follows_the_tasks_own_state():
    model = _repository()
    tasks = (0, 1, 2, 3)
    before = {t: task_state_digest(model, t) for t in tasks}
    backbone = backbone_state_digest(model)
    assert len(set(before.values())) == 4 and all(len(d) == 32 for d in before.values())
    assert task_state_digest(model, 0) == before[0]  # a digest of values: the same twice

    def digests():
        return {t: task_state_digest(model, t) for t in tasks}

    with torch.no_grad():
        model.encoder.entry_parameters(1)[0].add_(0.1)  # entry 1's first adapter
    after = digests()
    assert after[1] != before[1] and all(after[t] == before[t] for t in (0, 2, 3))
    assert backbone_state_digest(model) == backbone  # an entry is not E0

    with torch.no_grad():
        model.heads["0"].bias.add_(0.1)  # task 0's head, which task 3 answers through
    again = digests()
    assert again[0] != after[0] and again[3] != after[3] and (again[1], again[2]) == (after[1], after[2])

    norm = model.encoder.entry_modules(0)[-1]  # a BatchNorm copy of entry 0: its buffers count
    with torch.no_grad():
        norm.running_mean.add_(1.0)
    third = digests()
    assert all(third[t] != again[t] for t in (0, 2, 3)) and third[1] == again[1]

    with torch.no_grad():
        model.encoder.convs[0].conv.weight.mul_(2.0)  # E0
    assert backbone_state_digest(model) != backbone and digests() == third

    with pytest.raises(KeyError, match="task 7 has not been trained"):
        task_state_digest(model, 7)


def test_bad_input_is_refused_before_any_work(stream):
    with pytest.raises(TypeError, match="full_final_evaluation must be True or False"):
        run_sdr_stream(None, stream, full_final_evaluation="no")
    with pytest.raises(TypeError, match="needs an SDRModel"):
        EvaluationCache(type("Baseline", (), {"model": torch.nn.Linear(2, 2)})(), stream.test_stream)
