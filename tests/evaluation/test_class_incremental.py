"""SDRStrategy(eval_router=...): Avalanche's own metrics and loggers on a class-incremental
test stream (avalanche_sdr.evaluation.class_incremental).

One canonical loop per router over MixedDigits with original class ids (two-sample rule,
no generators, 2 epochs per task): ``for exp in train_stream: train(exp);
eval(class_incremental_stream(benchmark))``. Covered: Avalanche's accuracy counts the
same correct samples as ``model.predict`` and TaskFreeMetrics; its class accuracy,
confusion matrix and loggers work on the scores; task labels are ignored; training and a
strategy without the option are unchanged; the refusals (local labels, a repository
without the router, a router the strategy does not fit) and the rule before any task has
finished.
"""
import io
import warnings

import pytest
import torch
from avalanche.evaluation.metrics import (
    accuracy_metrics,
    class_accuracy_metrics,
    confusion_matrix_metrics,
    loss_metrics,
)
from avalanche.logging import CSVLogger, InteractiveLogger, TextLogger
from avalanche.training.plugins import EvaluationPlugin

from avalanche_sdr import SDRStrategy, build_sdr_model
from avalanche_sdr.benchmarks import MixedDigits, class_incremental_stream
from avalanche_sdr.evaluation import ClassIncrementalEvalPlugin, NoRoutableTaskWarning, TaskFreeMetrics, routed_scores
from avalanche_sdr.models import ROUTERS, small_cnn_backbone
from avalanche_sdr.training import SDRSettings

STREAM_ACC = "Top1_Acc_Stream/eval_phase/test_stream/Task000"

# eval_mb_size above every test experience's size (36 images): one mini-batch per
# experience, so that model.predict on the whole experience sees the same batch.
SETTINGS = SDRSettings(new_task_epochs=2, reuse_epochs=1, train_mb_size=32, eval_mb_size=256)

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def _model():
    torch.manual_seed(0)
    return build_sdr_model(small_cnn_backbone(in_channels=1, widths=(8, 16, 16)), in_channels=1, image_size=8,
                           generator=None)


def _strategy(model=None, metrics=(), loggers=(), **kwargs):
    evaluator = EvaluationPlugin(accuracy_metrics(experience=True, stream=True), *metrics, loggers=list(loggers))
    kwargs.setdefault("routers", ROUTERS)
    return SDRStrategy(model=_model() if model is None else model, settings=SETTINGS, detector="two_sample",
                       evaluator=evaluator, **kwargs)


def _tensors(experience):
    dataset = experience.dataset
    x = torch.stack([dataset[k][0] for k in range(len(dataset))])
    y = torch.tensor([int(dataset[k][1]) for k in range(len(dataset))])
    return x, y


def _exp_acc(metrics, i, task=0, stream="test"):
    return metrics[f"Top1_Acc_Exp/eval_phase/{stream}_stream/Task{task:03d}/Exp{i:03d}"]


@pytest.fixture(scope="module", params=ROUTERS)
def run(request, tmp_path_factory):
    router = request.param
    benchmark = MixedDigits(seed=0, original_class_ids=True)
    stream = class_incremental_stream(benchmark)
    text = io.StringIO()
    csv_dir = tmp_path_factory.mktemp(f"csv_{router}")
    metrics = [TaskFreeMetrics(routers=(router,)), class_accuracy_metrics(stream=True),
               confusion_matrix_metrics(stream=True, save_image=False), loss_metrics(stream=True)]
    loggers = [TextLogger(text), CSVLogger(str(csv_dir)), InteractiveLogger()]
    strategy = _strategy(metrics=metrics, loggers=loggers, eval_router=router)
    evals = []
    for experience in benchmark.train_stream:
        strategy.train(experience)
        evals.append(strategy.eval(stream))
    aware = strategy.eval(benchmark.test_stream)  # the task-aware stream: its task labels are not read
    loggers[1].close()  # the CSV files
    return dict(router=router, benchmark=benchmark, stream=stream, strategy=strategy, evals=evals, aware=aware,
                text=text, csv_dir=csv_dir)


# ---------------------------------------------------------------------- the canonical loop

def test_avalanche_accuracy_counts_what_predict_counts(run):
    model, stream, final = run["strategy"].model, run["stream"], run["evals"][-1]
    correct = total = 0
    per_exp = []
    for i, experience in enumerate(stream):
        x, y = _tensors(experience)
        right = int((model.predict(x, run["router"]).class_ids == y).sum())
        accuracy = _exp_acc(final, i)
        assert round(accuracy * len(y)) == right and abs(accuracy * len(y) - right) < 1e-6
        correct, total = correct + right, total + len(y)
        per_exp.append(accuracy)
    stream_accuracy = final[STREAM_ACC]
    assert round(stream_accuracy * total) == correct and abs(stream_accuracy * total - correct) < 1e-6
    # TaskFreeMetrics routes the same mini-batches again: the same counts, averaged per experience.
    assert final[f"TaskFree_Acc_{run['router']}/eval_phase/test_stream"] == pytest.approx(sum(per_exp) / len(per_exp))
    assert "TaskFree_Acc_oracle/eval_phase/test_stream" not in final  # no task-aware output to score
    assert stream_accuracy > 0.3  # 10 classes: chance 0.1


def test_accuracy_grows_as_tasks_are_trained(run):
    first, final = run["evals"][0], run["evals"][-1]
    assert first[STREAM_ACC] < final[STREAM_ACC]


def test_scores_argmax_is_the_routed_prediction(run):
    model, router = run["strategy"].model, run["router"]
    x, _ = _tensors(run["stream"][4])
    prediction = model.predict(x, router)
    scores = routed_scores(model, x, router, num_classes=12)
    assert scores.shape == (len(x), 12) and scores.dtype == torch.float32
    assert torch.equal(scores.argmax(dim=1), prediction.class_ids)
    lowest = torch.finfo(scores.dtype).min
    for task in torch.unique(prediction.tasks).tolist():
        mask = prediction.tasks == task
        ids = model.heads.class_ids(task)
        others = [c for c in range(12) if c not in ids]
        expected = model(x[mask], task)[:, ids]
        # "lda" chooses the class itself: where the head would answer another class, the
        # chosen class's column is raised to the row's maximum + 1 (routed_scores' rule)
        chosen = [ids.index(int(c)) for c in prediction.class_ids[mask]]
        for row, k in enumerate(chosen):
            if int(expected[row].argmax()) != k:
                expected[row, k] = expected[row].max() + 1.0
        assert torch.allclose(scores[mask][:, ids], expected, atol=1e-5)
        assert bool((scores[mask][:, others] == lowest).all())


def test_class_accuracy_confusion_matrix_and_loggers_work(run):
    final, stream = run["evals"][-1], run["stream"]
    matrix = final["ConfusionMatrix_Stream/eval_phase/test_stream"]
    n = sum(len(e.dataset) for e in stream)
    accuracy = final[STREAM_ACC]
    assert matrix.shape == (10, 10) and int(matrix.sum()) == n  # K = n_classes_total
    assert int(matrix.diagonal().sum()) == round(accuracy * n)
    for c in range(10):
        class_accuracy = final[f"Top1_ClassAcc_Stream/eval_phase/test_stream/Task000/{c}"]
        assert class_accuracy == pytest.approx(float(matrix[c, c]) / float(matrix[c].sum()))
    assert STREAM_ACC in run["text"].getvalue()
    rows = (run["csv_dir"] / "eval_results.csv").read_text().splitlines()
    assert len(rows) == 1 + len(stream) * (len(run["evals"]) + 1)  # and the task-aware stream's evaluation


def test_task_labels_are_ignored(run):
    benchmark, aware, free = run["benchmark"], run["aware"], run["evals"][-1]
    for i in range(len(benchmark.test_stream)):
        assert _exp_acc(aware, i, task=i) == _exp_acc(free, i)


# ---------------------------------------------------------------------- unchanged without the option

@pytest.fixture(scope="module")
def task_aware_run():
    benchmark = MixedDigits(seed=0, original_class_ids=True)
    strategy = _strategy()
    for experience in benchmark.train_stream:  # the same loop as run's, evaluations included
        strategy.train(experience)
        metrics = strategy.eval(benchmark.test_stream)
    return dict(benchmark=benchmark, strategy=strategy, metrics=metrics)


def test_training_is_the_same_with_and_without_the_option(run, task_aware_run):
    with_option, without = run["strategy"], task_aware_run["strategy"]
    def decisions(strategy):  # without the wall-clock seconds
        return [{k: v for k, v in r.to_dict().items() if k != "detection_seconds"} for r in strategy.detection_records]

    assert decisions(with_option) == decisions(without)
    a, b = with_option.model.state_dict(), without.model.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_without_the_option_evaluation_is_task_aware(task_aware_run):
    strategy, benchmark, metrics = task_aware_run["strategy"], task_aware_run["benchmark"], task_aware_run["metrics"]
    assert strategy.eval_router is None and strategy.class_incremental is None
    assert not any(isinstance(p, ClassIncrementalEvalPlugin) for p in strategy.plugins)
    for i, experience in enumerate(benchmark.test_stream):
        x, y = _tensors(experience)
        right = int((strategy.model(x, i).argmax(dim=1) == y).sum())
        assert abs(_exp_acc(metrics, i, task=i) * len(y) - right) < 1e-6


# ---------------------------------------------------------------------- rules and refusals

def test_eval_router_must_be_a_fitted_router():
    with pytest.raises(ValueError, match=r"routers=\('gaussian',\)"):
        _strategy(routers=(), eval_router="gaussian")
    with pytest.raises(ValueError, match=r"routers=\('expert_gate',\)"):
        _strategy(routers=("gaussian",), eval_router="expert_gate")
    with pytest.raises(ValueError, match="unknown router"):
        _strategy(eval_router="nearest")


def test_before_any_task_has_finished_every_class_scores_zero():
    benchmark = MixedDigits(seed=0, original_class_ids=True)
    stream = class_incremental_stream(benchmark)[:2]
    strategy = _strategy(eval_router="gaussian")
    with pytest.warns(NoRoutableTaskWarning, match="no task to route to"):
        metrics = strategy.eval(stream)
    labels = torch.cat([_tensors(e)[1] for e in stream])
    assert metrics[STREAM_ACC] == pytest.approx(float((labels == 0).float().mean()))
    # Periodic evaluation inside the first task (nothing finished), then inside the second.
    strategy = _strategy(eval_router="gaussian", eval_every=1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for experience in benchmark.train_stream[:2]:
            strategy.train(experience, eval_streams=[stream])
    assert any(issubclass(w.category, NoRoutableTaskWarning) for w in caught)
    assert strategy.eval(stream)[STREAM_ACC] > 0.1


def test_local_labels_are_refused():
    benchmark = MixedDigits(seed=0)  # labels 0..c-1 in every task
    with pytest.raises(ValueError, match="original_class_ids=True"):
        class_incremental_stream(benchmark)
    strategy = _strategy(routers=("gaussian",), eval_router="gaussian")
    strategy.train(benchmark.train_stream[0])
    with pytest.raises(ValueError, match="original_class_ids=True"):  # an experience of another group
        strategy.eval(benchmark.test_stream[1:2])
    strategy.train(benchmark.train_stream[1])
    with pytest.raises(ValueError, match="original_class_ids=True"):  # two trained groups, same class ids
        strategy.eval(benchmark.test_stream[:1])


def test_a_repository_without_the_router_is_refused():
    benchmark = MixedDigits(seed=0, original_class_ids=True)
    trained = _strategy(routers=())
    trained.train(benchmark.train_stream[0])
    strategy = _strategy(model=trained.model, routers=("gaussian",), eval_router="gaussian")
    with pytest.raises(RuntimeError, match=r"routers=\('gaussian',\)"):
        strategy.eval(class_incremental_stream(benchmark)[:1])


# ---------------------------------------------------------------------- Avalanche's own benchmarks

def _digits_nc_benchmark(task_labels: bool, local: bool = False):
    """Avalanche's nc_benchmark over scikit-learn's digits: 5 experiences of 2 classes."""
    from avalanche.benchmarks import nc_benchmark
    from sklearn.datasets import load_digits
    from torch.utils.data import TensorDataset

    data = load_digits()
    x = torch.tensor(data.images, dtype=torch.float32).unsqueeze(1) / 16.0
    y = torch.tensor(data.target, dtype=torch.long)
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(0))
    parts = []
    for idx in (order[:1200], order[1200:]):
        dataset = TensorDataset(x[idx], y[idx])
        dataset.targets = y[idx].tolist()
        parts.append(dataset)
    return nc_benchmark(*parts, n_experiences=5, task_labels=task_labels, class_ids_from_zero_in_each_exp=local,
                        fixed_class_order=list(range(10)), seed=0)


def test_avalanche_class_incremental_benchmark_is_scored_as_predict_counts():
    """Trained on Avalanche's task-incremental benchmark (original class ids), evaluated on
    its class-incremental twin (task label 0): the same counts as model.predict."""
    task_aware, class_incremental = _digits_nc_benchmark(True), _digits_nc_benchmark(False)
    strategy = _strategy(routers=("gaussian",), eval_router="gaussian", n_warm_start=1)
    for experience in task_aware.train_stream:
        strategy.train(experience)
    metrics = strategy.eval(class_incremental.test_stream)
    correct = total = 0
    for experience in class_incremental.test_stream:
        x, y = _tensors(experience)
        correct += int((strategy.model.predict(x, "gaussian").class_ids == y).sum())
        total += len(y)
    assert abs(metrics[STREAM_ACC] * total - correct) < 1e-6
    # class_incremental_stream of the task-aware benchmark is the same stream.
    again = strategy.eval(class_incremental_stream(task_aware))
    assert again[STREAM_ACC] == metrics[STREAM_ACC]


def test_avalanche_local_class_ids_are_refused():
    local = _digits_nc_benchmark(True, local=True)
    with pytest.raises(ValueError, match="class_ids_from_zero_in_each_exp=False"):
        class_incremental_stream(local)
    strategy = _strategy(routers=("gaussian",), eval_router="gaussian", n_warm_start=1)
    strategy.train(local.train_stream[0])
    with pytest.raises(ValueError, match="class_ids_from_zero_in_each_exp=False"):  # the benchmark says so
        strategy.eval(local.test_stream[:1])
