"""The closed-form learners (``avalanche_sdr/closed_form.py``): ``slda`` (Avalanche's
StreamingLDA), ``ranpac`` and ``klda`` on a frozen E0, one head over the original class ids.

The solves are checked against scikit-learn's estimators on the same features (ridge
regression, shrinkage-free LDA, the RBF sampler's map); the rest on the digits stream
with a tiny E0. Fast (seconds on one thread).
"""
import numpy as np
import pytest
import torch
from avalanche.evaluation.metrics import accuracy_metrics
from avalanche.training.plugins import EvaluationPlugin

from avalanche_sdr import baselines, closed_form
from avalanche_sdr.benchmarks import MixedDigits
from avalanche_sdr.evaluation import repository_memory_bytes
from avalanche_sdr.evaluation.memory import TensorByteCounter
from avalanche_sdr.evaluation.task_aware import TaskAwareAccuracy
from avalanche_sdr.training.stream_runner import final_test_accuracies


@pytest.fixture(scope="module")
def original():
    return MixedDigits(seed=0, original_class_ids=True)


class _Identity(torch.nn.Module):
    """A stand-in E0 that returns its input features (for solves on hand-made features)."""

    def __init__(self, dim):
        super().__init__()
        self.feature_dim = dim

    def forward(self, x):
        return x


def _blobs(n_per_class=40, classes=4, dim=6, seed=0):
    g = np.random.default_rng(seed)
    centres = g.normal(0, 3, (classes, dim))
    x = np.concatenate([centres[c] + g.normal(0, 1, (n_per_class, dim)) for c in range(classes)])
    y = np.repeat(np.arange(classes), n_per_class)
    return torch.tensor(x, dtype=torch.float32), torch.tensor(y)


def test_the_ridge_head_is_ridge_regression_on_one_hot_targets():
    from sklearn.linear_model import Ridge

    x, y = _blobs()
    model = closed_form.ClosedFormClassifier(_Identity(6), 4, closed_form.RIDGE, ridge=0.3)
    model.fit(x, y)
    weights, offsets, seen = model._solve()
    lam = 0.3 * float((x.double() ** 2).sum()) / 6  # ridge x trace(G) / M
    reference = Ridge(alpha=lam, fit_intercept=False).fit(x.double().numpy(), np.eye(4)[y.numpy()])
    np.testing.assert_allclose(weights.numpy(), reference.coef_.T, rtol=1e-4, atol=1e-6)
    assert bool(seen.all()) and float(offsets.abs().max()) == 0.0


def test_the_lda_head_without_shrinkage_decides_as_scikit_learn_lda():
    from sklearn.discriminant_analysis import LinearDiscriminantAnalysis

    x, y = _blobs(seed=1)
    model = closed_form.ClosedFormClassifier(_Identity(6), 4, closed_form.LDA, shrinkage=0.0)
    model.fit(x, y)
    reference = LinearDiscriminantAnalysis(solver="lsqr", priors=np.full(4, 0.25)).fit(x.numpy(), y.numpy())
    probe = _blobs(n_per_class=50, seed=2)[0] * 1.5  # off the training points, some near the boundaries
    ours, theirs = model(probe), reference.decision_function(probe.numpy())
    assert (ours.argmax(1).numpy() == theirs.argmax(1)).all()
    # balanced classes: the same discriminants up to one positive factor ((N - C) / N)
    ratio = (ours[:, 1:] - ours[:, :1]).numpy() / (theirs[:, 1:] - theirs[:, :1])
    np.testing.assert_allclose(ratio, ratio.flat[0], rtol=1e-3)


def test_statistics_add_up_so_two_fits_equal_one():
    x, y = _blobs(seed=3)
    for head, setting in ((closed_form.RIDGE, {"ridge": 1e-2}), (closed_form.LDA, {"shrinkage": 0.1})):
        once = closed_form.ClosedFormClassifier(_Identity(6), 4, head, **setting)
        twice = closed_form.ClosedFormClassifier(_Identity(6), 4, head, **setting)
        once.fit(x, y)
        order = torch.randperm(len(y), generator=torch.Generator().manual_seed(0))
        twice.fit(x[order[:70]], y[order[:70]])
        twice.fit(x[order[70:]], y[order[70:]])
        torch.testing.assert_close(once(x), twice(x), rtol=1e-4, atol=1e-4)


def test_the_scatter_is_the_within_class_scatter_and_stays_positive_in_float32():
    from avalanche_sdr.models.closed_form_heads import accumulate

    g = torch.Generator().manual_seed(0)
    # features far from the origin against their spread (random Fourier features of a wide
    # kernel are nearly constant): G - sum n mu mu^T loses the within-class part to float32
    h = 10 + torch.randn(300, 40, generator=g, dtype=torch.float64) * 1e-2
    y = torch.randint(0, 5, (300,), generator=g)
    scatter, sums, counts = torch.zeros(40, 40), torch.zeros(5, 40), torch.zeros(5)
    for part in torch.arange(300).split(37):  # batches of 37, every class spread over them
        accumulate(scatter, sums, counts, h[part], y[part])
    means = torch.stack([h[y == c].mean(0) for c in range(5)])
    exact = (h - means[y]).T @ (h - means[y])
    torch.testing.assert_close(scatter.double(), exact, rtol=1e-3, atol=1e-3 * float(exact.diagonal().mean()))
    torch.testing.assert_close(sums.double(), torch.stack([h[y == c].sum(0) for c in range(5)]), rtol=1e-6, atol=0)
    assert counts.tolist() == torch.bincount(y, minlength=5).float().tolist()
    smallest = float(exact.diagonal().mean()) * 1e-3
    assert float(torch.linalg.eigvalsh(scatter.double()).min()) > -smallest
    # the difference of float32 moments, for contrast: far from positive semi-definite
    gram = (h.float().T @ h.float()).double()
    naive = gram - (sums.double() / counts.double()[:, None]).T @ sums.double()
    assert float(torch.linalg.eigvalsh(naive).min()) < -smallest


def test_loaded_statistics_are_solved_again():
    x, y = _blobs(seed=6)
    trained = closed_form.ClosedFormClassifier(_Identity(6), 4, closed_form.LDA, shrinkage=0.1)
    trained.fit(x, y)
    fresh = closed_form.ClosedFormClassifier(_Identity(6), 4, closed_form.LDA, shrinkage=0.1)
    before = fresh(x)  # solved (nothing seen: every class scores lowest) and kept
    fresh.load_state_dict(trained.state_dict())
    assert not torch.equal(fresh(x), before) and torch.equal(fresh(x), trained(x))


def test_a_class_never_trained_scores_lowest():
    x, y = _blobs(seed=4)
    for head, setting in ((closed_form.RIDGE, {"ridge": 1e-2}), (closed_form.LDA, {"shrinkage": 0.1})):
        model = closed_form.ClosedFormClassifier(_Identity(6), 6, head, **setting)  # classes 4, 5 never seen
        model.fit(x, y)
        scores = model(x)
        assert (scores[:, 4:] == torch.finfo(torch.float32).min).all()
        assert set(scores.argmax(1).tolist()) <= {0, 1, 2, 3}


def test_fourier_features_are_scikit_learns_rbf_sampler_at_the_scaled_gamma():
    from sklearn.kernel_approximation import RBFSampler

    x, _ = _blobs(seed=5)
    features = closed_form.RandomFeatures(closed_form.FOURIER, 6, 64, seed=7, gamma_scale=2.0)
    assert not features.calibrated
    with pytest.raises(RuntimeError, match="calibrate"):
        features(x)
    features.calibrate(x)
    gamma = 2.0 / (6 * float(x.double().var(unbiased=False)))
    assert features.gamma == pytest.approx(gamma)
    reference = RBFSampler(gamma=gamma, n_components=64, random_state=7).fit(x.double().numpy())
    np.testing.assert_allclose(features(x).numpy(), reference.transform(x.double().numpy()), atol=1e-5)
    weight = features.weight.clone()
    features.calibrate(x * 10)  # drawn once: later features change nothing
    assert torch.equal(features.weight, weight)


def test_relu_projection_is_seeded_and_non_negative():
    a = closed_form.RandomFeatures(closed_form.RELU, 5, 32, seed=3)
    b = closed_form.RandomFeatures(closed_form.RELU, 5, 32, seed=3)
    c = closed_form.RandomFeatures(closed_form.RELU, 5, 32, seed=4)
    assert torch.equal(a.weight, b.weight) and not torch.equal(a.weight, c.weight)
    z = torch.randn(10, 5)
    assert (a(z) >= 0).all() and torch.equal(a(z), torch.relu(z @ a.weight))


def _evaluator(*metrics):
    return EvaluationPlugin(accuracy_metrics(experience=True), *metrics, loggers=[])


@pytest.mark.parametrize("name", list(closed_form.CLOSED_FORM_LEARNERS))
def test_each_learner_runs_through_avalanche_and_is_better_given_the_task_label(name, original, tiny_backbone):
    backbone = tiny_backbone()
    before = {k: v.clone() for k, v in backbone.state_dict().items()}
    settings = baselines.BaselineSettings(epochs=1, ranpac_dim=256, klda_dim=256)
    aware = TaskAwareAccuracy()
    strategy = closed_form.closed_form_strategy(name, backbone, original.train_stream, settings, seed=0,
                                                evaluator=_evaluator(aware))
    for experience in original.train_stream:
        strategy.train(experience, eval_streams=[])
    task_free = final_test_accuracies(strategy, original.test_stream)
    assert len(aware.per_experience) == len(task_free)
    # restricting the argmax to the task's classes never turns a right answer wrong
    assert all(a >= f - 1e-12 for a, f in zip(aware.per_experience, task_free))
    assert sum(task_free) / len(task_free) > 0.3  # 10 classes: chance 0.1 (an untrained tiny E0)
    assert aware.result() > 0.8  # 2 classes a task
    # E0 is copied, and neither it nor the copy changes (BatchNorm statistics included: eval mode)
    copy = strategy.model if name == "slda" else strategy.model.backbone
    for e0 in (backbone, copy):
        assert all(torch.equal(before[k], v) for k, v in e0.state_dict().items())


def test_memory_counts_e0_the_map_and_the_statistics(original, tiny_backbone):
    backbone = tiny_backbone()
    counter = TensorByteCounter()
    counter.add_module(backbone)
    e0, d, k = counter.total, backbone.feature_dim, original.n_classes_total
    settings = baselines.BaselineSettings(epochs=1, ranpac_dim=64, klda_dim=32)
    expected = {
        "slda": e0 + 4 * (k * d + k + d * d),  # means, counts, covariance (not its pseudo-inverse)
        "ranpac": e0 + 4 * (d * 64 + 64 * 64 + k * 64 + k),  # W; G, S, counts
        "klda": e0 + 4 * (d * 32 + 32 + 32 * 32 + k * 32 + k),  # W, b; G, S, counts
    }
    for name, size in expected.items():
        strategy = closed_form.closed_form_strategy(name, backbone, original.train_stream, settings,
                                                    evaluator=_evaluator())
        strategy.train(original.train_stream[0], eval_streams=[])
        final_test_accuracies(strategy, original.test_stream[:1])  # the solved head is derived: not counted
        assert repository_memory_bytes(strategy) == size, name


def test_bad_arguments_are_refused_before_anything_is_built(original, tiny_backbone):
    digits_local = MixedDigits(seed=0)
    settings = baselines.BaselineSettings(epochs=1)
    for name in closed_form.CLOSED_FORM_LEARNERS:
        with pytest.raises(ValueError, match="original_class_ids=True"):
            closed_form.closed_form_strategy(name, tiny_backbone(), digits_local.train_stream, settings)
    with pytest.raises(ValueError, match="unknown closed-form learner 'lda'"):
        closed_form.closed_form_strategy("lda", tiny_backbone(), original.train_stream, settings)
    bad = [("slda", {"slda_shrinkage": 0.0}, "shrinkage must be a number in \\(0, 1\\]"),
           ("ranpac", {"ranpac_ridge": 0.0}, "ridge must be a positive number"),
           ("ranpac", {"ranpac_dim": 0}, "out_dim must be a positive int"),
           ("klda", {"klda_gamma": -1.0}, "gamma_scale must be a positive number"),
           ("klda", {"klda_shrinkage": 1.5}, "shrinkage must be a number in \\[0, 1\\]")]
    for name, option, message in bad:
        with pytest.raises(ValueError, match=message):
            closed_form.closed_form_strategy(name, tiny_backbone(), original.train_stream,
                                             baselines.BaselineSettings(epochs=1, **option))
    with pytest.raises(ValueError, match="head='ridge' takes ridge and only that"):
        closed_form.ClosedFormClassifier(_Identity(3), 2, closed_form.RIDGE, shrinkage=0.1)
    with pytest.raises(ValueError, match="kind='relu' has none"):
        closed_form.RandomFeatures(closed_form.RELU, 3, 8, seed=0, gamma_scale=1.0)
    model = closed_form.ClosedFormClassifier(_Identity(3), 2, closed_form.RIDGE, ridge=1.0)
    with pytest.raises(ValueError, match="class ids must lie in 0..1"):
        model.fit(torch.zeros(4, 3), torch.tensor([0, 1, 2, 0]))
    assert float(model.counts.sum()) == 0.0  # refused before any statistic moved
