"""Avalanche 0.6.0's plugins with SDRStrategy: every row of docs/plugins.rst.

The stream is Avalanche-native (``nc_benchmark(..., task_labels=True)`` over
scikit-learn's 8x8 digits, task-aware datasets as LwF needs them), three experiences
of two classes each; the repository has no generators and the first three tasks are
warm starts, so every experience trains a new entry and nothing is detected.
"""
import copy
import warnings

import pytest
import torch

from avalanche.benchmarks import nc_benchmark
from avalanche.core import BasePlugin
from avalanche.evaluation.metrics import accuracy_metrics
from avalanche.training import plugins as P
from avalanche.training.plugins import EvaluationPlugin
from avalanche.training.templates import SupervisedTemplate

from avalanche_sdr import SDRStrategy, build_sdr_model
from avalanche_sdr.models import small_cnn_backbone
from avalanche_sdr.models.heads import UntrainedTaskWarning
from avalanche_sdr.training import SDRSettings
from avalanche_sdr.training.strategy import REFUSED_PLUGINS

SETTINGS = SDRSettings(new_task_epochs=2, reuse_epochs=1, train_mb_size=32, eval_mb_size=128, lr_milestones=(1,))
N_TRAINED = 3

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


@pytest.fixture(scope="module")
def stream(digits_split):
    train, test = digits_split  # tests/training/conftest.py
    return nc_benchmark(train, test, n_experiences=5, task_labels=True, class_ids_from_zero_in_each_exp=True,
                        fixed_class_order=list(range(10)), seed=0)


def _model():
    torch.manual_seed(0)
    return build_sdr_model(small_cnn_backbone(in_channels=1, widths=(8, 16, 16)), in_channels=1, image_size=8,
                           generator=None)


def _strategy(model, plugins=(), **kwargs):
    kwargs.setdefault("evaluator", EvaluationPlugin(loggers=[]))
    return SDRStrategy(model=model, settings=SETTINGS, detector="two_sample", n_warm_start=N_TRAINED,
                       plugins=list(plugins), **kwargs)


def _train(strategy, stream, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UntrainedTaskWarning)
        for experience in stream.train_stream[:N_TRAINED]:
            strategy.train(experience, **kwargs)


def _outputs(model, x):
    """Every trained task's logits and every entry's BatchNorm statistics, for comparison."""
    model.eval()
    with torch.no_grad():
        logits = {t: v.clone() for t, v in model(x, None).items()}
    stats = {k: v.clone() for k, v in model.state_dict().items() if "running_" in k}
    model.train()
    return logits, stats


@pytest.fixture(scope="module")
def probe(stream):
    return torch.stack([stream.test_stream[0].dataset[i][0] for i in range(40)])


# ------------------------------------------------------------------ model(x, None)
def test_model_without_task_labels_returns_every_trained_task(stream, probe):
    model = _model()
    assert model(probe, None) == {}
    _train(_strategy(model), stream)
    model.eval()
    with torch.no_grad():
        everything = model(probe, None)
        assert list(everything) == list(range(N_TRAINED))  # as MultiTaskModule.forward_all_tasks
        for task, logits in everything.items():
            assert torch.equal(logits, model(probe, task))


def test_reading_other_entries_while_one_trains_leaves_their_batchnorm_alone(stream, probe):
    model = _model()
    _train(_strategy(model), stream)
    before = _outputs(model, probe)
    model.trainable_for(2, train_encoder_entry=True)  # entry 2 trains, entries 0 and 1 are read
    model.train()
    model(probe, None)
    model(probe, torch.tensor([0, 1] * 20))
    after = _outputs(model, probe)
    moved = [k for k in before[1] if not torch.equal(before[1][k], after[1][k])]
    assert moved and all(".2." in k for k in moved)  # only entry 2's BatchNorm copies
    for task in (0, 1):
        assert torch.equal(before[0][task], after[0][task])


# ------------------------------------------------------------------ works (regularisers)
def _old_tasks_unchanged(strategy, stream, probe, plugin):
    """Train with ``plugin``; check it ran and earlier tasks' outputs never changed."""
    model = strategy.model
    snapshots = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UntrainedTaskWarning)
        for experience in stream.train_stream[:N_TRAINED]:
            strategy.train(experience)
            snapshots.append(_outputs(model, probe))
    for later in range(1, N_TRAINED):
        for task in range(later):
            assert torch.equal(snapshots[later][0][task], snapshots[task][0][task])
    assert all(not p.requires_grad for p in model.parameters())  # frozen after the experience
    return snapshots


def _recording_penalties(plugin):
    """Wrap ``plugin.before_backward`` to record, per experience, what it adds to the loss."""
    penalties = []
    original = plugin.before_backward

    def before_backward(strategy, **kwargs):
        loss = float(strategy.loss.detach())
        original(strategy, **kwargs)
        penalties.append((strategy.clock.train_exp_counter, float(strategy.loss.detach()) - loss))

    plugin.before_backward = before_backward
    return penalties


def test_ewc_computes_importances_of_what_the_experience_trained(stream, probe):
    ewc = P.EWCPlugin(ewc_lambda=100.0)
    penalties = _recording_penalties(ewc)
    strategy = _strategy(_model(), [ewc])
    _old_tasks_unchanged(strategy, stream, probe, ewc)
    for exp in range(N_TRAINED):
        importances = {k: v.data for k, v in ewc.importances[exp].items()}
        trained = [k for k in importances if k.startswith(f"heads.{exp}.") or f"adapters.{exp}." in k]
        assert trained and all(importances[k].abs().sum() > 0 for k in trained)
        untouched = [k for k in importances if k.startswith("encoder.backbone") and ".adapters." not in k
                     and ".copies." not in k]
        assert untouched and all(importances[k].abs().sum() == 0 for k in untouched)
    # The penalty runs on every mini-batch; earlier experiences' parameters are frozen,
    # so it is zero: SDR already isolates what EWC protects.
    assert {exp for exp, _ in penalties} == set(range(N_TRAINED))
    assert all(value == 0.0 for _, value in penalties)


@pytest.mark.parametrize("make", [
    pytest.param(lambda: P.SynapticIntelligencePlugin(si_lambda=1.0), id="SynapticIntelligence"),
    pytest.param(lambda: P.MASPlugin(lambda_reg=1.0), id="MAS"),
])
def test_importance_regularisers_train_and_keep_earlier_tasks(stream, probe, make):
    plugin = make()
    strategy = _strategy(_model(), [plugin])
    _old_tasks_unchanged(strategy, stream, probe, plugin)
    trained = dict(strategy.model.heads[str(N_TRAINED - 1)].named_parameters())
    if isinstance(plugin, P.MASPlugin):
        # Importances of the last head, computed from its gradients after training.
        assert all(plugin.importance[f"heads.own.2.{k}"].data.abs().sum() > 0 for k in trained)
    else:
        # SI saved the trained head's final values. (Its importances are zero on a CPU
        # with any strategy: Avalanche 0.6.0 snapshots parameters with
        # detach().cpu().flatten(), a view of the parameter there.)
        for k, value in trained.items():
            assert torch.equal(plugin.ewc_data[0][f"heads.own.2.{k}"].data, value.detach().flatten())


def test_lwf_distils_every_earlier_head(stream, probe):
    lwf = P.LwFPlugin(alpha=1.0, temperature=2.0)
    calls = []
    distil = lwf.lwf._distillation_loss

    def recorded(out, prev_out, active_units):
        value = distil(out, prev_out, active_units)
        calls.append((strategy.clock.train_exp_counter, float(value)))
        return value

    lwf.lwf._distillation_loss = recorded
    strategy = _strategy(_model(), [lwf])
    _old_tasks_unchanged(strategy, stream, probe, lwf)
    # Experience 1 distils task 0's head, experience 2 those of tasks 0 and 1, every mini-batch.
    per_exp = {exp: [v for e, v in calls if e == exp] for exp in range(N_TRAINED)}

    def steps(exp):
        return -(-len(stream.train_stream[exp].dataset) // SETTINGS.train_mb_size) * SETTINGS.new_task_epochs

    assert len(per_exp[0]) == 0 and len(per_exp[1]) == steps(1) and len(per_exp[2]) == 2 * steps(2)
    # SDR never changes an earlier task's outputs: the distillation loss is zero.
    assert max(abs(v) for v in per_exp[1] + per_exp[2]) < 1e-6


# ------------------------------------------------------------------ works (replay, stopping, evaluation)
@pytest.mark.parametrize("make", [
    pytest.param(lambda: P.ReplayPlugin(mem_size=60), id="Replay"),
    pytest.param(lambda: P.MIRPlugin(batch_size_mem=8, mem_size=60, subsample=20), id="MIR"),
])
def test_replay_trains_and_keeps_earlier_tasks(stream, probe, make):
    plugin = make()
    strategy = _strategy(_model(), [plugin], evaluator=EvaluationPlugin(accuracy_metrics(experience=True),
                                                                        loggers=[]))
    snapshots = _old_tasks_unchanged(strategy, stream, probe, plugin)
    # Replayed samples of earlier tasks go through their frozen entries: no BatchNorm statistic moves.
    for later in range(1, N_TRAINED):
        for key, value in snapshots[later - 1][1].items():
            if ".copies." in key and int(key.split(".copies.")[1].split(".")[0]) < later:
                assert torch.equal(snapshots[later][1][key], value)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UntrainedTaskWarning)
        metrics = strategy.eval(stream.test_stream[:N_TRAINED])
    for exp in range(N_TRAINED):
        assert metrics[f"Top1_Acc_Exp/eval_phase/test_stream/Task{exp:03d}/Exp{exp:03d}"] > 0.75


def test_early_stopping_restores_the_best_epoch(stream):
    settings = SETTINGS.replace(new_task_epochs=8, lr_milestones=())
    evaluator = EvaluationPlugin(accuracy_metrics(stream=True), loggers=[])
    stopper = P.EarlyStoppingPlugin(patience=1, val_stream_name="test_stream", metric_name="Top1_Acc_Stream")
    strategy = SDRStrategy(model=_model(), settings=settings, detector="two_sample", n_warm_start=N_TRAINED,
                           plugins=[stopper], evaluator=evaluator, eval_every=1)
    epochs = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for experience in stream.train_stream[:2]:
            # Validated on the task's own test data: the accuracy saturates within a few epochs.
            strategy.train(experience, eval_streams=[[stream.test_stream[experience.current_experience]]])
            epochs.append(len(strategy.sdr.epoch_accuracies[-1]))
            state = strategy.model.state_dict()
            assert all(torch.equal(state[k], v) for k, v in stopper.best_state.items())
    assert all(1 <= e < settings.new_task_epochs for e in epochs)
    assert all(not p.requires_grad for p in strategy.model.parameters())


# ------------------------------------------------------------------ refused
def _instances(model):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    return {
        P.LRSchedulerPlugin: lambda: P.LRSchedulerPlugin(torch.optim.lr_scheduler.StepLR(optimizer, 1, 0.5)),
        P.GDumbPlugin: lambda: P.GDumbPlugin(mem_size=10),
        P.FromScratchTrainingPlugin: lambda: P.FromScratchTrainingPlugin(),
        P.CWRStarPlugin: lambda: P.CWRStarPlugin(model),
        P.GEMPlugin: lambda: P.GEMPlugin(patterns_per_experience=5, memory_strength=0.5),
        P.AGEMPlugin: lambda: P.AGEMPlugin(patterns_per_experience=5, sample_size=5),
        P.RWalkPlugin: lambda: P.RWalkPlugin(),
        P.BiCPlugin: lambda: P.BiCPlugin(mem_size=10),
        P.CoPEPlugin: lambda: P.CoPEPlugin(mem_size=10, n_classes=2, p_size=4),
        P.GSS_greedyPlugin: lambda: P.GSS_greedyPlugin(mem_size=10, mem_strength=2, input_size=[1, 8, 8]),
        P.RARPlugin: lambda: P.RARPlugin(batch_size_mem=4, mem_size=10),
        P.LFLPlugin: lambda: P.LFLPlugin(lambda_e=1.0),
        P.FeatureDistillationPlugin: lambda: P.FeatureDistillationPlugin(),
        P.CurrentDataNCMUpdate: lambda: P.CurrentDataNCMUpdate(),
        P.MemoryNCMUpdate: lambda: P.MemoryNCMUpdate(mem_size=10),
        P.NCMOracle: lambda: P.NCMOracle(),
        P.CurrentDataFeCAMUpdate: lambda: P.CurrentDataFeCAMUpdate(),
        P.MemoryFeCAMUpdate: lambda: P.MemoryFeCAMUpdate(mem_size=10),
        P.FeCAMOracle: lambda: P.FeCAMOracle(),
        P.GenerativeReplayPlugin: lambda: P.GenerativeReplayPlugin(),
        P.TrainGeneratorAfterExpPlugin: lambda: P.TrainGeneratorAfterExpPlugin(),
    }


@pytest.mark.parametrize("kind", list(REFUSED_PLUGINS), ids=lambda kind: kind.__name__)
def test_refused_plugins_fail_at_construction_with_the_reason(kind):
    model = _model()
    plugin = _instances(model)[kind]()
    with pytest.raises(ValueError, match=rf"SDRStrategy cannot use {kind.__name__}: .*docs/plugins.rst"):
        _strategy(model, [plugin])
    subclass = type("Mine", (kind,), {})
    mine = copy.copy(plugin)
    mine.__class__ = subclass
    with pytest.raises(ValueError, match="SDRStrategy cannot use Mine"):
        _strategy(model, [mine])


def test_every_avalanche_plugin_has_a_row():
    """Each plugin class Avalanche 0.6.0 exports is refused or tested as working above."""
    working = {P.EvaluationPlugin, P.EWCPlugin, P.SynapticIntelligencePlugin, P.MASPlugin, P.LwFPlugin,
               P.ReplayPlugin, P.MIRPlugin, P.EarlyStoppingPlugin}
    classes = {name: getattr(P, name) for name in dir(P) if isinstance(getattr(P, name), type)}
    exported = {cls for name, cls in classes.items()  # EvaluationPlugin is no BasePlugin
                if (issubclass(cls, BasePlugin) or name.endswith("Plugin")) and cls is not P.SupervisedPlugin}
    assert exported == working | set(REFUSED_PLUGINS)
    assert not working & set(REFUSED_PLUGINS)


def test_the_lr_scheduler_error_names_sdr_settings():
    model = _model()
    plugin = _instances(model)[P.LRSchedulerPlugin]()
    with pytest.raises(ValueError) as error:
        _strategy(model, [plugin])
    for field in ("new_task_lr", "lr_milestones", "lr_decay", "reuse_lr"):
        assert field in str(error.value)


def test_an_lr_scheduler_bound_to_the_strategys_optimizer_and_appended_is_refused_at_train(stream):
    """The realistic path: the scheduler can only be bound to ``strategy.optimizer``, which
    exists after construction, so it is appended afterwards; ``train()`` refuses it before
    any work."""
    model = _model()
    strategy = _strategy(model)
    strategy.plugins.append(P.LRSchedulerPlugin(torch.optim.lr_scheduler.StepLR(strategy.optimizer, 1, 0.1)))
    with pytest.raises(ValueError, match=r"cannot use LRSchedulerPlugin \(appended to strategy.plugins after "
                                         r"construction.*new_task_lr"):
        strategy.train(stream.train_stream[0])
    assert model.num_entries == 0 and not strategy.detection_records


@pytest.mark.parametrize("kind", [P.FromScratchTrainingPlugin, P.GDumbPlugin], ids=lambda kind: kind.__name__)
def test_every_refused_plugin_appended_after_construction_is_refused_at_train(stream, kind):
    strategy = _strategy(_model())
    strategy.plugins.insert(1, kind() if kind is P.FromScratchTrainingPlugin else kind(mem_size=10))
    with pytest.raises(ValueError, match=f"cannot use {kind.__name__} \\(appended"):
        strategy.train(stream.train_stream[0])


def _train_unchecked(strategy, experience):
    """Avalanche's own ``train``, past SDRStrategy's check of the plugins: what a refused
    plugin would do if it were let through."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UntrainedTaskWarning)
        SupervisedTemplate.train(strategy, experience)


def test_an_lr_scheduler_would_be_silently_ignored(stream):
    """Why it is refused: let through, it never touches SDR's learning rate."""
    model = _model()
    strategy = _strategy(model)
    scheduler = torch.optim.lr_scheduler.StepLR(torch.optim.SGD(model.parameters(), lr=0.5), 1, 0.1)
    strategy.plugins.insert(1, P.LRSchedulerPlugin(scheduler))
    rates = []
    strategy.sdr.before_training_epoch = (lambda original: lambda s, **kw: (
        original(s, **kw), rates.append(s.optimizer.param_groups[0]["lr"])))(strategy.sdr.before_training_epoch)
    for experience in stream.train_stream[:N_TRAINED]:
        _train_unchecked(strategy, experience)
    assert rates == [SETTINGS.new_task_lr, SETTINGS.new_task_lr * SETTINGS.lr_decay] * N_TRAINED
    # Meanwhile the scheduler stepped its own optimizer every epoch.
    assert scheduler.optimizer.param_groups[0]["lr"] == pytest.approx(0.5 * 0.1 ** (2 * N_TRAINED))


def test_from_scratch_training_would_erase_trained_entries(stream, probe):
    """Why it is refused: let through, it resets task 0's head and entry."""
    model = _model()
    strategy = _strategy(model)
    strategy.plugins.insert(1, P.FromScratchTrainingPlugin())
    _train_unchecked(strategy, stream.train_stream[0])
    trained = _outputs(model, probe)[0][0]
    _train_unchecked(strategy, stream.train_stream[1])
    assert not torch.equal(_outputs(model, probe)[0][0], trained)


def test_the_freeze_runs_after_the_users_plugins_and_before_the_checkpoint(tmp_path):
    strategy = _strategy(_model(), [P.EWCPlugin(ewc_lambda=1.0)], checkpoint_dir=tmp_path)
    kinds = [type(p).__name__ for p in strategy.plugins]
    assert kinds[:3] == ["SDRPlugin", "FrozenFeaturesPlugin", "EWCPlugin"]
    assert kinds[-2:] == ["SDRFreezePlugin", "SDRCheckpointPlugin"]
