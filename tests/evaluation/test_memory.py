"""Tests for avalanche_sdr/evaluation/memory.py on tensors of known size."""

from types import SimpleNamespace

import pytest
import torch
from avalanche.models import PNN
from avalanche.training import EWC, GenerativeReplay, LwF, PNNStrategy, Replay
from avalanche.training.plugins import EvaluationPlugin, GenerativeReplayPlugin, ReplayPlugin
from avalanche.training.storage_policy import ReservoirSamplingBuffer
from avalanche.training.supervised.expert_gate import ExpertGateStrategy
from torch import nn

from avalanche_sdr.evaluation import (
    BYTES_PER_MB,
    RepositoryMemory,
    TensorByteCounter,
    register_plugin_memory,
    repository_memory_bytes,
)

FLOAT32 = 4


def strategy_with(model, plugins=(), **extra):
    return SimpleNamespace(model=model, plugins=list(plugins), **extra)


def linear_bytes(n_in, n_out, itemsize=FLOAT32):
    return (n_in * n_out + n_out) * itemsize


def test_linear_model_is_220_bytes():
    assert repository_memory_bytes(strategy_with(nn.Linear(10, 5))) == 220


def test_buffers_and_dtypes_counted():
    bn = nn.BatchNorm1d(4)  # weight, bias, running mean/var: 4 x float32; num_batches_tracked int64
    assert repository_memory_bytes(strategy_with(bn)) == 4 * 4 * FLOAT32 + 8
    half = nn.Linear(10, 5).half()
    assert repository_memory_bytes(strategy_with(half)) == 110


def test_tied_and_shared_storage_counted_once():
    model = nn.Sequential(nn.Linear(4, 4, bias=False), nn.Linear(4, 4, bias=False))
    model[1].weight = model[0].weight  # same Parameter object
    assert repository_memory_bytes(strategy_with(model)) == 64
    model[1].weight = nn.Parameter(model[0].weight.data.t())  # other object, same storage
    assert repository_memory_bytes(strategy_with(model)) == 64


def test_counter_direct_api():
    counter = TensorByteCounter()
    t = torch.zeros(3, 2, dtype=torch.float64)
    assert counter.add_tensor(t) == 48
    assert counter.add_tensor(t[1:]) == 0  # a view of a counted storage
    assert counter.add_object({"a": [t, torch.zeros(2, dtype=torch.int8)], "n": 3}) == 2
    assert counter.total == 50


def test_memory_extra_modules_hook_and_shared_modules():
    model = nn.Linear(10, 5)
    extra = nn.Linear(2, 2)
    strategy = strategy_with(model, memory_extra_modules=lambda: [extra, model])
    assert repository_memory_bytes(strategy) == 220 + linear_bytes(2, 2)


def test_replay_buffer_counts_exemplars_not_full_dataset(tiny_dataset):
    full = tiny_dataset(100)
    policy = ReservoirSamplingBuffer(max_size=6)
    policy.buffer = full.subset(list(range(6)))
    plugin = ReplayPlugin(mem_size=6, storage_policy=policy)
    per_sample = 16 * FLOAT32 + 8 + 8  # x [1,4,4] float32, y int64, t int
    strategy = strategy_with(nn.Linear(10, 5), [plugin])
    assert repository_memory_bytes(strategy) == 220 + 6 * per_sample
    # The same buffer on the strategy itself (ER-ACE style) is not counted twice.
    strategy.storage_policy = policy
    assert repository_memory_bytes(strategy) == 220 + 6 * per_sample


def test_unknown_plugin_generic_scan_warns_once():
    class CachePlugin:
        def __init__(self):
            self.cache = {"feat": torch.zeros(10)}  # 40 bytes
            self.scale = 0.5

    class NoStatePlugin:
        def __init__(self):
            self.rate = 0.1

    strategy = strategy_with(nn.Linear(10, 5), [CachePlugin(), NoStatePlugin()])
    with pytest.warns(UserWarning, match="CachePlugin has no registered memory function"):
        assert repository_memory_bytes(strategy) == 260
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert repository_memory_bytes(strategy) == 260  # warned only once per type


def test_registered_function_replaces_generic_scan():
    class StatePlugin:
        def __init__(self):
            self.kept = torch.zeros(4)
            self.scratch = torch.zeros(100)

    register_plugin_memory(StatePlugin, lambda p, s, counter: counter.add_tensor(p.kept))
    assert repository_memory_bytes(strategy_with(nn.Linear(10, 5), [StatePlugin()])) == 236
    with pytest.raises(TypeError, match="class"):
        register_plugin_memory("StatePlugin", print)


def test_missing_model_is_a_clear_error():
    with pytest.raises(TypeError, match="nn.Module `model`"):
        repository_memory_bytes(SimpleNamespace(model=None))


@pytest.fixture
def two_task_stream(tiny_benchmark):
    """Two experiences (task labels 0, 1) of 8 samples x [10] float32 each."""
    return tiny_benchmark([1, 2], [3, 4], (10,)).train_stream


def _train(stream, strategy_cls, model, **kwargs):
    torch.manual_seed(0)
    strategy = strategy_cls(
        model=model,
        optimizer=torch.optim.SGD(model.parameters(), lr=0.01),
        criterion=nn.CrossEntropyLoss(),
        train_mb_size=4,
        train_epochs=1,
        evaluator=EvaluationPlugin(loggers=[]),
        **kwargs,
    )
    for experience in stream:
        strategy.train(experience, eval_streams=[])
    return strategy


@pytest.mark.filterwarnings("ignore:No loggers")
def test_real_ewc_separate_keeps_all_experiences(two_task_stream):
    strategy = _train(two_task_stream, EWC, nn.Linear(10, 5), ewc_lambda=1.0)
    # model + (importances + anchors) for each of the 2 experiences
    assert repository_memory_bytes(strategy) == 220 + 2 * (220 + 220)


@pytest.mark.filterwarnings("ignore:No loggers")
def test_real_ewc_online_keeps_last_experience(two_task_stream):
    strategy = _train(two_task_stream, EWC, nn.Linear(10, 5), ewc_lambda=1.0, mode="online", decay_factor=0.9)
    assert repository_memory_bytes(strategy) == 220 + (220 + 220)


@pytest.mark.filterwarnings("ignore:No loggers")
def test_real_replay_counts_balanced_buffer(two_task_stream):
    strategy = _train(two_task_stream, Replay, nn.Linear(10, 5), mem_size=6)
    per_sample = 10 * FLOAT32 + 8 + 8  # x [10] float32, y int64, t int
    assert repository_memory_bytes(strategy) == 220 + 6 * per_sample


@pytest.mark.filterwarnings("ignore:No loggers")
def test_real_lwf_counts_previous_model(two_task_stream):
    strategy = _train(two_task_stream, LwF, nn.Linear(10, 5), alpha=1.0, temperature=2.0)
    assert repository_memory_bytes(strategy) == 220 + 220


@pytest.mark.filterwarnings("ignore:No loggers")
def test_generative_replay_counts_generator_once():
    solver = nn.Linear(784, 10)
    strategy = GenerativeReplay(
        model=solver,
        optimizer=torch.optim.SGD(solver.parameters(), lr=0.01),
        evaluator=EvaluationPlugin(loggers=[]),
    )
    generator = strategy.generator_strategy.model
    expected = linear_bytes(784, 10) + sum(
        t.numel() * t.element_size() for t in [*generator.parameters(), *generator.buffers()]
    )
    assert repository_memory_bytes(strategy) == expected
    # A stale copy made at the start of an experience is not kept state.
    plugin = next(p for p in strategy.plugins if isinstance(p, GenerativeReplayPlugin))
    plugin.old_generator = nn.Linear(50, 50)
    assert repository_memory_bytes(strategy) == expected


@pytest.mark.filterwarnings("ignore:No loggers")
def test_pnn_strategy_counts_model_only():
    model = PNN(num_layers=1, in_features=10, hidden_features_per_column=3)
    strategy = PNNStrategy(
        model=model,
        optimizer=torch.optim.SGD(model.parameters(), lr=0.01),
        evaluator=EvaluationPlugin(loggers=[]),
    )
    tensors = [*model.parameters(), *model.buffers()]  # buffers: int8 active-unit masks
    expected = sum(t.numel() * t.element_size() for t in tensors)
    assert repository_memory_bytes(strategy) == expected


def test_expert_gate_ignores_discarded_lwf_copy():
    from avalanche.training.plugins import LwFPlugin

    lwf = LwFPlugin()
    lwf.lwf.prev_model = nn.Linear(10, 5)
    plain = strategy_with(nn.Linear(3, 3), [lwf])
    assert repository_memory_bytes(plain) == linear_bytes(3, 3) + 220
    gate = ExpertGateStrategy.__new__(ExpertGateStrategy)  # no AlexNet needed for this rule
    gate.model, gate.plugins = nn.Linear(3, 3), [lwf]
    assert repository_memory_bytes(gate) == linear_bytes(3, 3)


def test_repository_memory_metric_value_and_name():
    from avalanche.benchmarks.scenarios.generic_scenario import CLExperience, EagerCLStream

    experience = EagerCLStream("train", [CLExperience(0, None)])[0].train()
    strategy = strategy_with(
        nn.Linear(1024, 256),
        experience=experience,
        is_eval=False,
        clock=SimpleNamespace(train_exp_counter=2),
    )
    metric = RepositoryMemory()
    assert metric.result() is None
    (value,) = metric.after_training_exp(strategy)
    assert value.name == "Repository_Memory_MB/train_phase/train_stream"
    assert value.value == pytest.approx(linear_bytes(1024, 256) / BYTES_PER_MB)
    assert value.x_plot == 2
    assert metric.result() == value.value
