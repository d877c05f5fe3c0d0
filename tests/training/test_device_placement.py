"""Device placement of the whole SDR pipeline, checked on a CPU-only machine.

A tensor left on the CPU while the model sits on a GPU fails only on a GPU. To catch it
here, the test simulates a second device: :class:`SimulatedAccelerator`, a
``TorchFunctionMode`` that sees every torch call, tags every tensor it sees created
``host`` (the CPU) or ``accelerator`` and applies CUDA's rules to the tags:

- the accelerator is the device ``cpu:0`` (the strategy's ``device``); the arithmetic
  runs on the CPU, but ``tensor.device`` answers ``cpu:0`` for an accelerator tensor and
  ``cpu`` for a host one, so ``device=x.device`` and ``.to(model_device)`` work as on a GPU;
- a factory call (``torch.zeros``, ``torch.tensor``, ``torch.randperm``, ...) without
  ``device=`` makes a host tensor, as it does on a GPU machine; ``.to(d)`` / ``.cpu()``
  move; every other op's result lives where its inputs do;
- an op mixing a host and an accelerator tensor (a host 0-dim scalar excepted, as CUDA
  allows), indexing a host tensor with accelerator indices, ``.numpy()`` of an
  accelerator tensor, or a random draw with a generator of the other device
  (``torch.Generator(device=...)`` made while the emulation runs answers the device it was
  asked for) is a violation: it is recorded and raised (:class:`DevicePlacementError`;
  recorded too because library code may catch errors).

On top of that, :class:`HookCheck`, a plugin of the strategy, asserts at **every**
Avalanche hook that every parameter and buffer of the repository (detection and router
states are buffers), the optimizer's state and the mini-batch are on the accelerator.

Why not ``torch.set_default_device("meta")`` (the issue's first idea): under it, plain
Avalanche (``Naive`` on a linear model) fails before its first mini-batch, in torch's own
``DataLoader`` (its base seed is ``torch.empty((), dtype=torch.int64).random_().item()``,
a meta tensor); and a meta default also fails correct code, ``torch.tensor(perm).to(device)``
(a copy out of a meta tensor), which the emulation above accepts as a GPU does.

What it cannot see: code that runs only where ``device.type == "cuda"`` (the
checkpoint's CUDA RNG states, pinned memory, TF32), copies and item assignments between
the two devices (allowed, as CUDA's ``copy_`` allows them), and tensors made outside torch's
Python API. ``benchmarks/table2/gpu_check.py`` checks the first on a real GPU.

The pipeline (tiny 8x8 prototype stream, 8 tasks, 3 warm-start): ``method="paper"`` (the
agreement rule with an independent VAE per entry, head-only reuse); ``method="recommended"``
(two-sample test with class matching, no generators, the learning reuse ``"accumulate"``,
the router ``"lda_weighted"``, and class-incremental evaluation through it); the calibrated
rule on EFT generators with forward transfer, and Expert Gate with the learning reuse and
the routers ``"gaussian"``, ``"lda"`` and ``"expert_gate"`` (five tasks trained, all eight
evaluated, so untrained tasks are answered too); for each, the memory count, a checkpoint
saved after every task, loaded into a fresh repository (``load_repository``) and restored
into a fresh strategy (``restore_checkpoint``), and task-free ``predict`` with every router.
The last tests inject misplaced tensors into library code and assert the check fails.
"""
from __future__ import annotations

import traceback
from typing import Any, List, Optional

import pytest
import torch
from avalanche.core import SupervisedPlugin
from avalanche.evaluation.metrics import accuracy_metrics
from avalanche.training.plugins import EvaluationPlugin
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_leaves

from avalanche_sdr import SDRStrategy, build_sdr_model
from avalanche_sdr.benchmarks import ImageArrayDataset, class_incremental_stream, mixed_similarity_benchmark
from avalanche_sdr.evaluation import repository_memory_bytes
from avalanche_sdr.models import ConvVAE, SDRModel, TaskHeads, small_cnn_backbone
from avalanche_sdr.training import CPU_SETTINGS, load_repository

pytestmark = pytest.mark.usefixtures("one_thread")

HOST, ACCELERATOR = "host", "accelerator"
ACCELERATOR_DEVICE = torch.device("cpu", 0)
"""The simulated accelerator: the strategy's ``device``."""
_TAG = "_sdr_simulated_device"
_MOVES = {"to", "cpu", "cuda"}
_UNCHECKED = {"to", "cpu", "cuda", "copy_", "set_", "__setitem__", "__get__", "__set__", "__deepcopy__",
              "__reduce_ex__", "_has_compatible_shallow_copy_type", "__repr__", "__format__", "__str__"}
"""Calls that may take tensors of both devices (copies, moves, assignments, printing)."""
_DEVICE_GET, _DATA_SET, _GRAD_GET = torch.Tensor.device.__get__, torch.Tensor.data.__set__, torch.Tensor.grad.__get__
"""Property accessors, compared with ``==`` (each access makes a new method-wrapper)."""

SETTINGS = CPU_SETTINGS.replace(new_task_epochs=2, lr_milestones=(1,), reuse_epochs=2, vae_epochs=2,
                                           vae_patience=1, train_mb_size=32, vae_mb_size=32)


class DevicePlacementError(RuntimeError):
    """A call that would fail on a GPU: it mixes tensors of the host and the accelerator."""


def _tag(t: torch.Tensor) -> str:
    return getattr(t, _TAG, HOST)


def _device_tag(device: Any) -> Optional[str]:
    """The tag of a ``device=`` / ``.to()`` argument; ``None`` when it is not a device."""
    if isinstance(device, str):
        try:
            device = torch.device(device)
        except RuntimeError:
            return None
    if isinstance(device, torch.device):
        return ACCELERATOR if device == ACCELERATOR_DEVICE else HOST
    return None


def _where() -> str:
    """The innermost frame outside torch and this file: where the call was made."""
    for frame in reversed(traceback.extract_stack()[:-3]):
        if "/torch/" not in frame.filename and not frame.filename.endswith("test_device_placement.py"):
            return f"{frame.filename}:{frame.lineno} ({frame.name})"
    return "?"


class SimulatedGenerator(torch.Generator):
    """``torch.Generator`` while the emulation runs: a CPU generator that answers
    ``device`` with the device it was asked for (``cpu:0``: an accelerator generator)."""

    def __new__(cls, device: Any = "cpu"):
        generator = super().__new__(cls, device="cpu")
        generator.simulated_device = torch.device(device)
        return generator

    @property
    def device(self) -> torch.device:
        return self.simulated_device


class SimulatedAccelerator(TorchFunctionMode):
    """The emulation of the module docstring; ``violations`` lists what a GPU would refuse."""

    def __init__(self):
        super().__init__()
        self.violations: List[str] = []
        self.accelerator_calls = 0
        """Calls that took an accelerator tensor: shows the emulation saw the pipeline."""
        self._generator = torch.Generator

    def __enter__(self):
        torch.Generator = SimulatedGenerator  # generators made while it runs know their device
        return super().__enter__()

    def __exit__(self, *exc):
        torch.Generator = self._generator
        return super().__exit__(*exc)

    def _violation(self, text: str) -> None:
        message = f"{text} at {_where()}"
        self.violations.append(message)
        raise DevicePlacementError(message)

    def _check(self, name: str, args, tensors: List[torch.Tensor]) -> None:
        if name == "numpy" and _tag(args[0]) == ACCELERATOR:
            self._violation("numpy() of an accelerator tensor")
        if name == "__getitem__":
            if _tag(args[0]) == HOST and any(_tag(t) == ACCELERATOR for t in tensors[1:]):
                self._violation("a host tensor indexed with accelerator indices")
            return
        if name in _UNCHECKED:
            return
        real = [t for t in tensors if t.numel() > 0]
        accelerator = [t for t in real if _tag(t) == ACCELERATOR]
        self.accelerator_calls += bool(accelerator)
        host = [t for t in real if _tag(t) == HOST and t.dim() > 0]
        if accelerator and host:
            shapes = ", ".join(f"{_tag(t)} {tuple(t.shape)}" for t in real)
            self._violation(f"{name}() mixes host and accelerator tensors ({shapes})")

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func == _DEVICE_GET:
            return ACCELERATOR_DEVICE if _tag(args[0]) == ACCELERATOR else torch.device("cpu")
        if func == _DATA_SET:  # Module._apply: param.data = moved
            func(*args, **kwargs)
            setattr(args[0], _TAG, _tag(args[1]))
            return None
        name = getattr(func, "__name__", "")
        tensors = [a for a in tree_leaves((args, kwargs)) if isinstance(a, torch.Tensor)]
        self._check(name, args, tensors)
        out = func(*args, **kwargs)
        if func == _GRAD_GET:
            target = _tag(args[0])
        elif name == "cpu":
            target = HOST
        elif name == "cuda":
            target = ACCELERATOR
        elif name == "to":
            target = _tag(args[0])
            for a in list(args[1:]) + [kwargs.get("device"), kwargs.get("other")]:
                if isinstance(a, torch.Tensor):
                    target = _tag(a)
                elif _device_tag(a) is not None:
                    target = _device_tag(a)
        elif kwargs.get("device") is not None:
            target = _device_tag(kwargs["device"]) or HOST
        elif not tensors:  # a factory without device=: the host, as on a GPU machine
            target = HOST
        else:
            target = ACCELERATOR if any(_tag(t) == ACCELERATOR for t in tensors) else HOST
        generator = kwargs.get("generator")
        if isinstance(generator, self._generator):
            drawn = _device_tag(getattr(generator, "simulated_device", "cpu"))
            if drawn != target:
                self._violation(f"{name}() makes {target} tensors with a {drawn} generator")
        inputs = {id(t) for t in tensors}
        leaves = [out] if isinstance(out, torch.Tensor) else [o for o in tree_leaves(out)
                                                             if isinstance(o, torch.Tensor)]
        if name in _MOVES and isinstance(out, torch.Tensor) and id(out) in inputs and _tag(out) != target:
            out = out.view_as(out)  # .cpu() of a real CPU tensor returns itself: give the move its own tensor
            leaves = [out]
        for leaf in leaves:
            if id(leaf) not in inputs or name in _MOVES:  # in-place results keep their device
                setattr(leaf, _TAG, target)
        return out


_BEFORE_THE_MOVE = {"before_eval", "before_eval_dataset_adaptation", "after_eval_dataset_adaptation"}
"""Evaluation hooks that run before Avalanche moves the model to the strategy's device (in
``model_adaptation``; training moves it first thing in ``train``): a freshly restored
repository is still on the host there, as on a GPU."""


class HookCheck(SupervisedPlugin):
    """At every Avalanche hook: the repository's parameters and buffers, the optimizer's
    state (0-dim step counters excepted) and the mini-batch are on the accelerator (the
    model from the point Avalanche moves it on, see :data:`_BEFORE_THE_MOVE`)."""

    def __init__(self, mode: SimulatedAccelerator):
        super().__init__()
        self.mode = mode
        self.calls = 0

    def check(self, hook: str, strategy) -> None:
        self.calls += 1
        model = strategy.model
        named = [] if hook in _BEFORE_THE_MOVE else [(f"parameter {n}", t) for n, t in model.named_parameters()]
        named += [] if hook in _BEFORE_THE_MOVE else [(f"buffer {n}", t) for n, t in model.named_buffers()]
        if getattr(strategy, "optimizer", None) is not None:
            for i, state in enumerate(strategy.optimizer.state.values()):
                named += [(f"optimizer state {i}.{k}", v) for k, v in state.items()
                          if isinstance(v, torch.Tensor) and v.dim() > 0]
        for attribute in ("mb_x", "mb_y", "mb_output"):
            value = getattr(strategy, attribute, None) if hook.endswith(("_iteration", "_forward",
                                                                         "_backward", "_update")) else None
            if isinstance(value, torch.Tensor):
                named.append((f"strategy.{attribute}", value))
        for what, tensor in named:
            if tensor.numel() and _tag(tensor) != ACCELERATOR:
                self.mode.violations.append(f"{hook}: {what} is on the host")
                raise DevicePlacementError(f"{hook}: {what} {tuple(tensor.shape)} is on the host")


def _hook(name):
    return lambda self, strategy, **kwargs: self.check(name, strategy)


for _name in [n for n in dir(SupervisedPlugin) if n.startswith(("before_", "after_"))]:
    setattr(HookCheck, _name, _hook(_name))


def _prototypes(n_per_class: int, seed: int) -> ImageArrayDataset:
    """8 classes of 8x8 images: class c is a fixed random binary prototype plus fresh noise
    (as tests/training/conftest.py's ``prototype_stream``)."""
    prototypes = torch.rand(8, 1, 8, 8, generator=torch.Generator().manual_seed(123)) > 0.5
    g = torch.Generator().manual_seed(seed)
    images = [((p.float() * 0.8 + 0.1) + 0.1 * torch.randn(n_per_class, 1, 8, 8, generator=g)).clamp(0, 1)
              for p in prototypes]
    labels = torch.arange(8).repeat_interleave(n_per_class)
    return ImageArrayDataset((torch.cat(images) * 255).to(torch.uint8), labels)


def _stream(original_class_ids: bool = False):
    """8 tasks (4 groups of 2 classes x 2 splits) of 8x8 prototype images, 3 warm-start tasks."""
    return mixed_similarity_benchmark(_prototypes(60, seed=1), _prototypes(20, seed=2), [[0, 1], [2, 3], [4, 5],
                                      [6, 7]], n_splits=2, seed=0, original_class_ids=original_class_ids)


def _model(generator: Optional[str]) -> SDRModel:
    torch.manual_seed(0)
    base_vae = ConvVAE(1, 8, latent_dim=4, width=8) if generator == "eft" else None
    return build_sdr_model(small_cnn_backbone(in_channels=1, widths=(8, 16)), in_channels=1, image_size=8,
                           latent_dim=4, vae_width=8, generator=generator, base_vae=base_vae)


PAPER = dict(generator="independent", router=None, options=dict(method="paper"))
RECOMMENDED = dict(generator=None, router="lda_weighted", options=dict(method="recommended"))
CALIBRATED = dict(generator="eft", router=None, options=dict(detector="calibrated", forward_transfer=True))
EXPERT_GATE = dict(generator=None, router="gaussian", options=dict(
    detector="expert_gate", reuse="accumulate", routers=("gaussian", "lda", "expert_gate")))


def _strategy(mode, configuration, checkpoint_dir) -> SDRStrategy:
    router = configuration["router"]
    return SDRStrategy(model=_model(configuration["generator"]), settings=SETTINGS, device=ACCELERATOR_DEVICE,
                       checkpoint_dir=checkpoint_dir, plugins=[HookCheck(mode)],
                       evaluator=EvaluationPlugin(accuracy_metrics(experience=True), loggers=[]),
                       **({} if router is None else dict(eval_router=router)), **configuration["options"])


def _run(tmp_path, configuration, tasks: int = 8):
    """Train ``tasks`` tasks, evaluate all 8 (untrained ones too), count memory, save, load
    and restore under the emulation; return ``(mode, strategy)``. A configuration with a
    ``router`` trains on the dataset's class ids and evaluates task-free through it."""
    router = configuration["router"]
    benchmark = _stream(original_class_ids=router is not None)
    test = benchmark.test_stream if router is None else class_incremental_stream(benchmark)
    mode = SimulatedAccelerator()
    with mode:
        strategy = _strategy(mode, configuration, tmp_path / "ckpt")
        for experience in benchmark.train_stream[:tasks]:
            strategy.train(experience, eval_streams=[])
        strategy.eval(test)
        assert repository_memory_bytes(strategy) > 0
        x = torch.cat([benchmark.test_stream[i].dataset[j][0].unsqueeze(0) for i in range(8) for j in range(4)])
        x = x.to(ACCELERATOR_DEVICE)
        for name in strategy.model.router_names:
            prediction = strategy.model.predict(x, name)
            assert all(_tag(t) == ACCELERATOR for t in (prediction.class_ids, prediction.tasks)), name
        loaded = load_repository(tmp_path / "ckpt", _model(configuration["generator"])).to(ACCELERATOR_DEVICE)
        task = int(benchmark.train_stream[0].task_labels[0])
        torch.testing.assert_close(loaded(x, task), strategy.model.eval()(x, task))
        for name in loaded.router_names:
            loaded.predict(x, name)
        restored = _strategy(mode, configuration, tmp_path / "ckpt")
        assert restored.restore_checkpoint() == tasks
        restored.eval(test)
    return mode, strategy


def test_the_emulation_follows_cuda_rules():
    with SimulatedAccelerator() as mode:
        host = torch.ones(3)
        accelerator = host.to(ACCELERATOR_DEVICE)
        assert accelerator.device == ACCELERATOR_DEVICE and host.device == torch.device("cpu")
        assert _tag(torch.zeros(3, device=accelerator.device)) == ACCELERATOR
        assert _tag(accelerator.cpu()) == HOST and _tag(accelerator) == ACCELERATOR
        assert _tag(accelerator * torch.tensor(2.0)) == ACCELERATOR  # a host scalar is allowed
        assert _tag(accelerator[torch.tensor([0, 2])]) == ACCELERATOR  # host indices are allowed
        linear = torch.nn.Linear(3, 2).to(ACCELERATOR_DEVICE)
        assert all(_tag(p) == ACCELERATOR for p in linear.parameters())
        linear(accelerator).sum().backward()
        assert all(_tag(p.grad) == ACCELERATOR for p in linear.parameters())
        with pytest.raises(DevicePlacementError, match="mixes host and accelerator"):
            accelerator + host
        with pytest.raises(DevicePlacementError, match="mixes host and accelerator"):
            torch.nn.Linear(3, 2)(accelerator)  # a module left on the host
        with pytest.raises(DevicePlacementError, match="numpy"):
            accelerator.numpy()
        on_host, on_accelerator = torch.Generator(), torch.Generator(device=ACCELERATOR_DEVICE)
        assert on_accelerator.device == ACCELERATOR_DEVICE and on_host.device == torch.device("cpu")
        assert _tag(torch.randn(2, generator=on_accelerator, device=on_accelerator.device)) == ACCELERATOR
        assert _tag(torch.randperm(4, generator=on_host)) == HOST
        with pytest.raises(DevicePlacementError, match="with a host generator"):
            torch.randn(2, generator=on_host, device=ACCELERATOR_DEVICE)
    assert len(mode.violations) == 4
    assert torch.Generator is not SimulatedGenerator  # put back


def test_paper_method_stays_on_the_device(tmp_path):
    mode, strategy = _run(tmp_path, PAPER)
    assert mode.violations == [] and mode.accelerator_calls > 1000
    assert next(p for p in strategy.plugins if isinstance(p, HookCheck)).calls > 100
    decisions = [r.decision for r in strategy.detection_records]
    assert decisions[:3] == ["warm_start"] * 3 and len(decisions) == 8
    assert strategy.model.has_generators


def test_recommended_configuration_stays_on_the_device(tmp_path):
    mode, strategy = _run(tmp_path, RECOMMENDED)
    assert mode.violations == [] and mode.accelerator_calls > 1000
    assert next(p for p in strategy.plugins if isinstance(p, HookCheck)).calls > 100
    records = strategy.detection_records
    assert any(r.decision == "reuse" for r in records), "no repeat was detected: learning reuse not exercised"
    assert any(r.entry_updated for r in strategy.sdr.reuse_records), "no entry was updated: learning reuse not exercised"


@pytest.mark.filterwarnings("ignore:task .* has not been trained")  # on purpose: the untrained tasks' answer
@pytest.mark.parametrize("configuration", [CALIBRATED, EXPERT_GATE], ids=["calibrated_eft_g", "expert_gate"])
def test_other_detectors_generators_and_routers_stay_on_the_device(tmp_path, configuration):
    """The calibrated rule on EFT generators with forward transfer; Expert Gate with the
    learning reuse and every other router. Five tasks trained, all eight evaluated: the
    untrained ones are answered by E0 and an untrained head."""
    mode, strategy = _run(tmp_path, configuration, tasks=5)
    assert mode.violations == [] and mode.accelerator_calls > 1000
    assert len(strategy.detection_records) == 5


def _head_logits_plus_host_bias(original):
    def head_logits(self, task, features):
        logits = original(self, task, features)
        return logits + torch.zeros(logits.shape[1])  # no device=: on the host

    return head_logits


def _elbo_plus_host_offset(original):
    def elbo(self, x, *args, **kwargs):
        return original(self, x, *args, **kwargs) + torch.zeros(x.shape[0])  # no device=: on the host

    return elbo


@pytest.mark.parametrize("owner, name, inject", [
    (TaskHeads, "logits", _head_logits_plus_host_bias),  # every training and evaluation forward
    (ConvVAE, "elbo", _elbo_plus_host_offset),  # generator fitting and the agreement rule's detection
], ids=["head_logits", "vae_elbo"])
def test_a_tensor_created_without_device_in_library_code_is_caught(tmp_path, monkeypatch, owner, name, inject):
    """A tensor made with ``torch.zeros(n)`` (no ``device=``) and added to a result computed
    on the model's device: fine on a CPU, a failure on a GPU; the emulation fails it."""
    monkeypatch.setattr(owner, name, inject(getattr(owner, name)))
    with pytest.raises(DevicePlacementError, match="add.*mixes host and accelerator"):
        _run(tmp_path, PAPER, tasks=1)


def test_state_stored_on_the_host_is_caught_at_the_next_hook(tmp_path, monkeypatch):
    """A router state kept on the CPU (``set_routing_state`` without its move to the
    model's device) is found by the hook check before anything computes with it."""
    from avalanche_sdr.models.stored import TensorSet

    def on_host(self, key, tensors):
        self.routing_states[key] = TensorSet({k: v.cpu() for k, v in tensors.items()})

    monkeypatch.setattr(SDRModel, "set_routing_state", on_host)
    with pytest.raises(DevicePlacementError, match=r"buffer routing_states\..* is on the host"):
        _run(tmp_path, RECOMMENDED, tasks=1)
