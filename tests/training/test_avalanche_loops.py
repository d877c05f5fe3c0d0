"""SDRStrategy in Avalanche's standard loops, on Avalanche-native task-incremental benchmarks.

The benchmarks are built as a new user would: ``nc_benchmark(..., task_labels=True)``
over scikit-learn's digits (8x8 images), once with local class ids
(``class_ids_from_zero_in_each_exp=True``) and once with global ones (the default of
Avalanche's ``SplitMNIST(return_task_id=True)`` and friends). Covered:

- the canonical loop (train an experience, evaluate the whole test stream) with
  Avalanche's accuracy and forgetting metrics: tasks not trained yet are answered by
  E0 and an untrained head (defined accuracies, a warning, nothing stored, the global
  RNG untouched, reproducible);
- periodic evaluation (``eval_every=1`` with ``eval_streams``);
- ``strategy.train(list_of_experiences)``;
- global class ids: predictions are the original ids, accuracy equals the local-id
  run's, the mapping survives checkpoints and counts in memory, evaluation labels
  outside a task's class ids are refused.
"""
import math
import warnings

import pytest
import torch

from avalanche.benchmarks import nc_benchmark
from avalanche.evaluation.metrics import accuracy_metrics, forgetting_metrics
from avalanche.training.plugins import EvaluationPlugin

from avalanche_sdr import SDRStrategy, build_sdr_model
from avalanche_sdr.evaluation import repository_memory_bytes
from avalanche_sdr.models import small_cnn_backbone
from avalanche_sdr.models.heads import UntrainedTaskWarning
from avalanche_sdr.training import InvalidTaskDataError, SDRSettings, load_repository, read_manifest
from avalanche_sdr.training.data import check_task_data, local_labels

N_EXPERIENCES = 5
SETTINGS = SDRSettings(new_task_epochs=1, reuse_epochs=1, train_mb_size=32, eval_mb_size=256)


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


@pytest.fixture(scope="module")
def digits(digits_split):
    return digits_split


def _benchmark(digits, local: bool):
    train, test = digits
    return nc_benchmark(train, test, n_experiences=N_EXPERIENCES, task_labels=True,
                        class_ids_from_zero_in_each_exp=local, fixed_class_order=list(range(10)), seed=0)


def _model():
    torch.manual_seed(0)
    return build_sdr_model(small_cnn_backbone(in_channels=1, widths=(8, 16, 16)), in_channels=1, image_size=8,
                           generator=None)


def _evaluator():
    return EvaluationPlugin(accuracy_metrics(experience=True, stream=True),
                            forgetting_metrics(experience=True, stream=True), loggers=[])


def _strategy(model, **kwargs):
    return SDRStrategy(model=model, settings=SETTINGS, detector="two_sample", n_warm_start=1,
                       evaluator=_evaluator(), **kwargs)


def _acc(metrics, exp):
    return metrics[f"Top1_Acc_Exp/eval_phase/test_stream/Task{exp:03d}/Exp{exp:03d}"]


def _canonical_loop(benchmark, checkpoint_dir=None):
    """for exp in train_stream: train(exp); eval(test_stream) — with a record of what happens."""
    model = _model()
    strategy = _strategy(model, checkpoint_dir=checkpoint_dir)
    evals, untrained_warnings, first = [], [], {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for position, experience in enumerate(benchmark.train_stream):
            strategy.train(experience)
            if position == 0:
                first["state_keys"] = set(model.state_dict())
                first["memory"] = repository_memory_bytes(strategy)
            evals.append(strategy.eval(benchmark.test_stream))
            if position == 0:
                first["state_keys_after_eval"] = set(model.state_dict())
                first["memory_after_eval"] = repository_memory_bytes(strategy)
                first["heads_after_eval"] = sorted(model.heads)
                first["again"] = strategy.eval(benchmark.test_stream)
    untrained_warnings = [str(w.message) for w in caught if issubclass(w.category, UntrainedTaskWarning)]
    return dict(strategy=strategy, evals=evals, warnings=untrained_warnings, first=first)


@pytest.fixture(scope="module")
def local_run(digits):
    return _canonical_loop(_benchmark(digits, local=True))


@pytest.fixture(scope="module")
def global_run(digits, tmp_path_factory):
    directory = tmp_path_factory.mktemp("global_ids")
    run = _canonical_loop(_benchmark(digits, local=False), checkpoint_dir=directory)
    run["directory"] = directory
    return run


# ------------------------------------------------------------------ the canonical loop
@pytest.mark.parametrize("run_name", ["local_run", "global_run"])
def test_canonical_loop_with_forgetting_metrics(run_name, request):
    run = request.getfixturevalue(run_name)
    evals = run["evals"]
    assert len(evals) == N_EXPERIENCES
    # After the first experience every task of the test stream has a defined accuracy:
    # task 0 trained, tasks 1.. answered by E0 and an untrained head.
    for exp in range(N_EXPERIENCES):
        value = _acc(evals[0], exp)
        assert isinstance(value, float) and 0.0 <= value <= 1.0
    assert _acc(evals[0], 0) > 0.8
    # Forgetting of every experience trained before the last, and of the stream.
    final = evals[-1]
    for exp in range(N_EXPERIENCES - 1):
        forgetting = final[f"ExperienceForgetting/eval_phase/test_stream/Task{exp:03d}/Exp{exp:03d}"]
        assert math.isfinite(forgetting)
        assert forgetting <= 1e-9  # a trained task's entry and head are frozen: nothing is forgotten
    assert math.isfinite(final["StreamForgetting/eval_phase/test_stream"])
    for exp in range(N_EXPERIENCES):
        assert _acc(final, exp) > 0.8  # pairs of digits, one epoch
    assert final["Top1_Acc_Stream/eval_phase/test_stream/Task004"] > 0.8


def test_untrained_tasks_are_answered_without_changing_the_repository(local_run):
    first, strategy = local_run["first"], local_run["strategy"]
    # One warning per untrained task, naming it.
    assert len(local_run["warnings"]) == N_EXPERIENCES - 1
    for task in range(1, N_EXPERIENCES):
        assert sum(f"task {task} has not been trained" in m for m in local_run["warnings"]) == 1
    assert "E0 features" in local_run["warnings"][0] and "untrained head" in local_run["warnings"][0]
    # Nothing stored: state_dict, heads and memory as before the evaluation.
    assert first["state_keys_after_eval"] == first["state_keys"]
    assert first["heads_after_eval"] == ["0"]
    assert first["memory_after_eval"] == first["memory"]
    # Reproducible: the same answer when evaluated again.
    for exp in range(N_EXPERIENCES):
        assert _acc(first["again"], exp) == _acc(local_run["evals"][0], exp)
    # Once trained, a task is predicted by its own head and entry.
    model = strategy.model
    assert sorted(int(k) for k in model.heads) == list(range(N_EXPERIENCES))
    assert all(model.heads.is_trained(t) for t in range(N_EXPERIENCES))


def test_an_untrained_task_outside_an_avalanche_evaluation_is_named():
    model = _model()
    with pytest.raises(KeyError, match="task 3 has not been trained"):
        model(torch.rand(2, 1, 8, 8), 3)


@pytest.mark.parametrize("local", [True, False])
def test_the_untrained_answer_is_reproducible_and_leaves_the_global_rng_alone(digits, local):
    experience = _benchmark(digits, local=local).test_stream[2]  # task 2: classes {0, 1} or {4, 5}
    x = torch.rand(9, 1, 8, 8, generator=torch.Generator().manual_seed(1))
    answers = []
    for _ in range(2):
        model = _model().eval()
        model.adaptation(experience)  # what Avalanche does before evaluating the experience
        keys = set(model.state_dict())
        rng = torch.get_rng_state()
        with pytest.warns(UntrainedTaskWarning, match="task 2 has not been trained"):
            with torch.no_grad():
                answers.append(model(x, 2))
        assert torch.equal(torch.get_rng_state(), rng)
        assert set(model.state_dict()) == keys and len(model.heads) == 0
        with warnings.catch_warnings():
            warnings.simplefilter("error", UntrainedTaskWarning)  # once per task
            with torch.no_grad():
                assert torch.equal(model(x, 2), answers[-1])
    assert torch.equal(answers[0], answers[1])
    assert answers[0].shape == ((9, 2) if local else (9, 6))
    assert set(answers[0].argmax(dim=1).tolist()) <= ({0, 1} if local else {4, 5})


def test_periodic_evaluation(digits):
    benchmark = _benchmark(digits, local=True)
    strategy = _strategy(_model(), eval_every=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UntrainedTaskWarning)
        for experience in benchmark.train_stream[:3]:
            strategy.train(experience, eval_streams=[benchmark.test_stream])
    metrics = strategy.evaluator.get_last_metrics()
    for exp in range(N_EXPERIENCES):
        assert 0.0 <= _acc(metrics, exp) <= 1.0
    for exp in range(3):
        assert _acc(metrics, exp) > 0.8
    assert math.isfinite(metrics["StreamForgetting/eval_phase/test_stream"])
    assert [r.task for r in strategy.detection_records] == [0, 1, 2]


def test_training_on_a_list_of_experiences(digits, local_run):
    benchmark = _benchmark(digits, local=True)
    strategy = _strategy(_model())
    strategy.train(list(benchmark.train_stream))  # each experience in turn, as Avalanche documents
    assert [r.task for r in strategy.detection_records] == list(range(N_EXPERIENCES))
    assert sorted(int(k) for k in strategy.model.heads) == list(range(N_EXPERIENCES))
    metrics = strategy.eval(benchmark.test_stream)
    # The same decisions as one experience at a time (the accuracies differ a little:
    # the loop's evaluations draw from the global RNG between experiences).
    assert [r.decision for r in strategy.detection_records] == [
        r.decision for r in local_run["strategy"].detection_records]
    for exp in range(N_EXPERIENCES):
        assert _acc(metrics, exp) > 0.75


# ------------------------------------------------------------------ global class ids
def test_global_class_ids_predict_the_original_ids(digits, global_run, local_run):
    model = global_run["strategy"].model.eval()
    benchmark = _benchmark(digits, local=False)
    assert model.heads.class_ids(0) == [0, 1]  # already 0..c-1: nothing stored
    assert not model.heads.has_class_ids(0)
    for task in range(N_EXPERIENCES):
        assert model.heads.class_ids(task) == [2 * task, 2 * task + 1]
        assert model.heads.num_classes(task) == 2
        experience = benchmark.test_stream[task]
        x = torch.stack([experience.dataset[i][0] for i in range(len(experience.dataset))])
        y = torch.tensor([experience.dataset[i][1] for i in range(len(experience.dataset))])
        with torch.no_grad():
            predicted = model(x, task).argmax(dim=1)
        assert set(predicted.tolist()) <= {2 * task, 2 * task + 1}
        assert (predicted == y).float().mean() > 0.8
    # Same accuracy as with local ids on the same data (up to training randomness).
    for exp in range(N_EXPERIENCES):
        assert _acc(global_run["evals"][-1], exp) == pytest.approx(_acc(local_run["evals"][-1], exp), abs=0.02)
    # A mini-batch mixing tasks: each row's argmax is one of its task's class ids.
    x = torch.rand(6, 1, 8, 8)
    tasks = torch.tensor([1, 3, 1, 4, 3, 4])
    with torch.no_grad():
        out = model(x, tasks)
        assert out.shape == (6, 10)
        for i, t in enumerate(tasks.tolist()):
            assert torch.equal(out[i].argmax(), model(x[i : i + 1], t)[0].argmax())
            assert int(out[i].argmax()) in model.heads.class_ids(t)


def test_global_class_ids_train_with_finite_gradients():
    model = _model()
    model.create_entry(0)
    model.heads.set_class_ids(0, [4, 7])
    model.heads.add(0, 2)
    params = model.trainable_for(0, train_encoder_entry=True)
    logits = model(torch.rand(5, 1, 8, 8), 0)
    assert logits.shape == (5, 8)
    loss = torch.nn.functional.cross_entropy(logits, torch.tensor([4, 7, 7, 4, 4]))
    loss.backward()
    assert math.isfinite(loss.item()) and loss.item() < 10
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in params)


def test_global_class_ids_survive_checkpoints_and_count_in_memory(digits, global_run, local_run):
    strategy = global_run["strategy"]
    manifest = read_manifest(global_run["directory"])
    assert manifest["repository"]["class_ids"] == [[t, [2 * t, 2 * t + 1]] for t in range(1, N_EXPERIENCES)]
    restored = load_repository(global_run["directory"], _model())
    x = torch.rand(7, 1, 8, 8)
    for task in range(N_EXPERIENCES):
        assert restored.heads.class_ids(task) == strategy.model.heads.class_ids(task)
        with torch.no_grad():
            assert torch.equal(restored(x, task), strategy.model.eval()(x, task))
    # 4 tasks keep 2 int64 class ids each; everything else is the same as with local ids.
    extra = repository_memory_bytes(strategy) - repository_memory_bytes(local_run["strategy"])
    assert extra == (N_EXPERIENCES - 1) * 2 * 8
    # Resuming a run from the checkpoint restores the mapping too.
    resumed = _strategy(_model(), checkpoint_dir=global_run["directory"])
    assert resumed.restore_checkpoint() == N_EXPERIENCES
    assert [resumed.model.heads.class_ids(t) for t in range(N_EXPERIENCES)] == [[2 * t, 2 * t + 1] for t in range(5)]


def test_evaluation_labels_outside_the_class_ids_are_refused(digits, global_run):
    train, test = digits
    # Another split of the same data: its task 3 holds classes {4, 5}, the trained task 3 {6, 7}.
    other = nc_benchmark(train, test, n_experiences=N_EXPERIENCES, task_labels=True,
                         class_ids_from_zero_in_each_exp=False, fixed_class_order=[0, 1, 2, 3, 6, 7, 4, 5, 8, 9])
    with pytest.raises(InvalidTaskDataError,
                       match=r"task 3: evaluation labels \[4, 5\] are not among the class ids \[6, 7\]"):
        global_run["strategy"].eval([other.test_stream[3]])


def test_label_checks_and_mapping():
    x = torch.rand(4, 1, 4, 4)
    y = torch.tensor([7, 4, 4, 7])
    with pytest.raises(InvalidTaskDataError, match=r"classes \[0, 1, 2, 3, 5, 6\] are missing"):
        check_task_data(x, y, task=1)
    assert check_task_data(x, y, task=1, class_ids=True) == 2
    local, ids = local_labels(y)
    assert local.tolist() == [1, 0, 0, 1] and ids.tolist() == [4, 7]
    local, ids = local_labels(torch.tensor([1, 0, 2]))
    assert local.tolist() == [1, 0, 2] and ids.tolist() == [0, 1, 2]
    assert check_task_data(x, torch.full((4,), 3), task=1, class_ids=True) == 1  # one class, id 3
    with pytest.raises(InvalidTaskDataError, match="labels must be local class indices >= 0"):
        check_task_data(x, torch.tensor([0, -1, 0, 1]), task=1, class_ids=True)
    with pytest.raises(InvalidTaskDataError, match="holds no samples"):
        check_task_data(x[:0], y[:0], task=1, class_ids=True)
