"""The ``"kernel_lda"`` router (``avalanche_sdr/routers/kernel_lda.py``): the closed-form
learner ``klda`` over a repository's (entry, class) units.

One SDR run over MixedDigits with original class ids (two-sample rule, no generators,
2 epochs a task) fitted with the router; the router must answer exactly as the ``klda``
baseline (:mod:`avalanche_sdr.closed_form`) with the same map on the same E0 where every
class has one unit, and its state must be what it reads. Fast (seconds).
"""
import pytest
import torch
from avalanche.evaluation.metrics import accuracy_metrics
from avalanche.training.plugins import EvaluationPlugin

from avalanche_sdr import SDRStrategy, build_sdr_model
from avalanche_sdr.benchmarks import MixedDigits
from avalanche_sdr.closed_form import ClosedFormClassifier
from avalanche_sdr.dataset_tensors import experience_tensors
from avalanche_sdr.evaluation.memory import TensorByteCounter
from avalanche_sdr.models import small_cnn_backbone
from avalanche_sdr.models.closed_form_heads import FOURIER, LDA, RandomFeatures
from avalanche_sdr.routers import KernelLDARouter, make_router
from avalanche_sdr.routers import kernel_lda
from avalanche_sdr.training import SDRSettings

ROUTER = KernelLDARouter(dim=64, gamma_scale=0.5, shrinkage=0.01)


@pytest.fixture(scope="module")
def run(one_thread):
    benchmark = MixedDigits(seed=0, original_class_ids=True)
    torch.manual_seed(0)
    model = build_sdr_model(small_cnn_backbone(in_channels=1, widths=(8, 16, 16)), in_channels=1, image_size=8,
                            generator=None)
    strategy = SDRStrategy(model=model, settings=SDRSettings(new_task_epochs=2, reuse_epochs=1, train_mb_size=32),
                           detector="two_sample", routers=(ROUTER,),
                           evaluator=EvaluationPlugin(accuracy_metrics(experience=True), loggers=[]))
    for experience in benchmark.train_stream:
        strategy.train(experience, eval_streams=[])
    return benchmark, model


def test_it_answers_as_the_klda_learner_over_the_units_on_the_same_e0(run):
    """The router is the ``klda`` learner whose classes are the units: the same map (seed,
    width drawn from the first task's features), statistics and solve."""
    benchmark, model = run
    units = ROUTER._solved(model)["units"]  # [(entry, class id)]
    assert {c for _, c in units} == set(range(benchmark.n_classes_total)) and len(set(units)) == len(units)
    e0 = _E0(model)
    features = RandomFeatures(FOURIER, e0.feature_dim, 64, kernel_lda.MAP_SEED, gamma_scale=0.5)
    klda = ClosedFormClassifier(e0, len(units), LDA, features, shrinkage=0.01)
    for task, experience in enumerate(benchmark.train_stream):  # the same data in the same order
        x, y, _ = experience_tensors(experience)
        unit = torch.tensor([units.index((model.entry_of(task), int(c))) for c in y.tolist()])
        klda.fit(klda.encode(x), unit)
    x, y = map(torch.cat, zip(*[experience_tensors(e)[:2] for e in benchmark.test_stream]))
    routed = model.predict(x, "kernel_lda")
    class_of = torch.tensor([c for _, c in units])
    assert torch.equal(routed.class_ids, class_of[klda(x).argmax(1)])
    assert float((routed.class_ids == y).double().mean()) > 0.5  # 10 classes: chance 0.1 (an untrained E0)
    # each answer is reported through a trained task of its entry that has its class
    for task, entry, class_id in zip(routed.tasks.tolist(), routed.entries.tolist(), routed.class_ids.tolist()):
        assert model.entry_of(task) == entry and class_id in model.heads.class_ids(task)


class _E0(torch.nn.Module):
    """The repository's E0 as a backbone for the baseline (``model.batched_features(x, None)``)."""

    def __init__(self, model):
        super().__init__()
        self.model = model
        self.feature_dim = int(model.batched_features(torch.zeros(1, 1, 8, 8), None).shape[1])

    def forward(self, x):
        return self.model.batched_features(x, None)


def test_its_state_is_the_map_the_scatter_and_the_units_sums(run):
    benchmark, model = run
    counter = TensorByteCounter()
    for state in ROUTER.state_modules(model):
        counter.add_module(state)
    d, units = model.batched_features(torch.zeros(1, 1, 8, 8), None).shape[1], len(ROUTER._solved(model)["units"])
    # weight, offset, scatter (float32), gamma (float64); per unit: sums, counts (float32), class id (int64)
    assert counter.total == 4 * (d * 64 + 64 + 64 * 64) + 8 + units * (4 * 64 + 4 + 8)
    counts = sum(float(model.routing_state(f"kernel_lda_e{e}")["counts"].sum()) for e in model.entries)
    assert counts == sum(len(e.dataset) for e in benchmark.train_stream)


def test_settings_are_checked_and_named():
    assert make_router("kernel_lda").options() == {"dim": kernel_lda.DIM, "gamma_scale": kernel_lda.GAMMA_SCALE,
                                                   "shrinkage": kernel_lda.SHRINKAGE}
    assert make_router("kernel_lda", dim=8) == KernelLDARouter(dim=8)
    for options, message in (({"dim": 0}, "dim must be a positive int"),
                             ({"gamma_scale": 0.0}, "gamma_scale must be a positive number"),
                             ({"shrinkage": 2.0}, "shrinkage must be a number in \\[0, 1\\]")):
        with pytest.raises(ValueError, match=message):
            KernelLDARouter(**options)
