"""E0 is the user's: building SDR never changes the module passed.

``SDRStrategy.from_benchmark`` and ``build_sdr_model`` build the repository around their
own deep copy of the backbone; every argument is checked before anything is built, so a
refused call leaves E0 (and a repository given to ``SDRStrategy``) bit-identical, and the
corrected call works on the same objects. Bit-identical: the ``state_dict`` (every
tensor ``torch.equal``, same keys, same dtypes), every parameter's ``requires_grad``,
the training mode, and each submodule's class under its name.
"""
from __future__ import annotations

import pytest
import torch
from avalanche.evaluation.metrics import accuracy_metrics
from avalanche.training.plugins import EvaluationPlugin, LRSchedulerPlugin

from avalanche_sdr import SDRStrategy, build_sdr_model
from avalanche_sdr.baselines import make_multi_head_net
from avalanche_sdr.models import ConvVAE, small_cnn_backbone
from avalanche_sdr.training import SDRSettings

pytestmark = pytest.mark.usefixtures("one_thread")

FAST = SDRSettings(new_task_epochs=1, lr_milestones=(), reuse_epochs=1, train_mb_size=32, eval_mb_size=256,
                   vae_epochs=1, vae_mb_size=32)


def _scheduler_plugin():
    """A plugin SDR refuses (it would change the learning rate of an optimizer SDR replaces)."""
    optimizer = torch.optim.Adam([torch.nn.Parameter(torch.zeros(1))])
    return LRSchedulerPlugin(torch.optim.lr_scheduler.StepLR(optimizer, 1))


def _quiet():
    return EvaluationPlugin(accuracy_metrics(experience=True), loggers=[])


def _e0():
    """A small CNN for 1x8x8 images, frozen as pretraining leaves it (eval mode, no gradients)."""
    torch.manual_seed(0)
    return small_cnn_backbone(in_channels=1, widths=(8, 16)).requires_grad_(False).eval()


def snapshot(module: torch.nn.Module):
    """Everything of ``module`` a library could change: its tensors (cloned), each
    parameter's ``requires_grad``, each submodule's class and training mode."""
    return ({k: v.detach().clone() for k, v in module.state_dict().items()},
            {name: p.requires_grad for name, p in module.named_parameters()},
            {name: (type(m), m.training) for name, m in module.named_modules()})


def assert_unchanged(module: torch.nn.Module, before) -> None:
    state, grads, modules = snapshot(module)
    assert modules == before[2], "a submodule of E0 was replaced, or its mode changed"
    assert grads == before[1], "E0's requires_grad flags changed"
    assert state.keys() == before[0].keys()
    for key, value in state.items():
        assert value.dtype == before[0][key].dtype and torch.equal(value, before[0][key]), f"E0's {key} changed"


# ---------------------------------------------------------------------- refused from_benchmark calls
# Each: keywords a user might get wrong, the error, and the same call corrected.
REFUSED = {
    "unknown settings name": (dict(settings="cpuu"), ValueError, "unknown budget", dict(settings=FAST)),
    "unknown method": (dict(method="papper"), ValueError, "papper", dict(method="paper")),
    "negative epochs": (dict(new_task_epochs=-1), ValueError, "new_task_epochs", dict(new_task_epochs=1)),
    "lr 0": (dict(new_task_lr=0), ValueError, "new_task_lr", dict(new_task_lr=0.01)),
    "unknown keyword": (dict(new_task_epoch=1), TypeError, "new_task_epoch", dict(new_task_epochs=1)),
    "optimizer=": (dict(optimizer="adam"), TypeError, "optimizer", {}),
    "a detector's option as a keyword": (dict(detector="two_sample", elbo_samples=8), TypeError,
                                         "elbo_samples", dict(detector="two_sample")),
    "a learning-reuse option as a keyword": (dict(reuse="accumulate", reuse_guard=False), TypeError,
                                             "options of the learning reuse", dict(reuse="accumulate")),
    "an unknown reuse": (dict(reuse="both"), ValueError, "unknown reuse 'both'", dict(reuse="head")),
    "a reuse that is not one": (dict(reuse=3), TypeError, "reuse must be a name", dict(reuse="no_loss")),
    "a reuse configuration with an option it does not take": (
        dict(reuse={"name": "accumulate", "top_layer": 2}), ValueError, r"does not take \['top_layer'\]",
        dict(reuse={"name": "accumulate", "top_layers": 2})),
    "a reuse configuration with a refused value": (dict(reuse={"name": "no_loss", "epochs": 0}), ValueError,
                                                   "epochs", dict(reuse={"name": "no_loss", "epochs": 1})),
    "n_warm_start 0": (dict(n_warm_start=0), ValueError, "n_warm_start", dict(n_warm_start=1)),
    "forward_transfer not a bool": (dict(forward_transfer="no"), ValueError, "forward_transfer must be a bool",
                                    dict(forward_transfer=False)),
    "a refused plugin": (dict(plugins=[_scheduler_plugin()]), ValueError, "LRSchedulerPlugin", dict(plugins=[])),
    "an unknown router": (dict(routers=("knn",)), ValueError, "unknown router", dict(routers=("lda",))),
    "eval_router not fitted": (dict(eval_router="gaussian"), ValueError, "eval_router",
                               dict(eval_router="gaussian", routers=("gaussian",))),
    "an unknown device": (dict(device="tpu9"), ValueError, "device", dict(device="cpu")),
    "a generator nothing reads": (dict(detector="two_sample", generator="independent"), ValueError,
                                  "never reads", dict(detector="two_sample", generator=None)),
    "no generator for a rule that reads them": (dict(detector="agreement", generator=None), ValueError,
                                                "generators", dict(detector="agreement")),
    "an EFT group size that splits no layer": (dict(a=3), ValueError, "does not divide", dict(a=4)),
    "an unknown generator": (dict(generator="gan"), ValueError, "generator must be", dict(generator="independent")),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_a_refused_from_benchmark_call_leaves_e0_bit_identical_and_the_corrected_call_works(case, prototype_stream):
    wrong, error, match, right = REFUSED[case]
    backbone = _e0()
    before = snapshot(backbone)
    base = dict(settings=FAST, evaluator=_quiet())
    with pytest.raises(error, match=match):
        SDRStrategy.from_benchmark(backbone, prototype_stream, **dict(base, **wrong))
    assert_unchanged(backbone, before)
    strategy = SDRStrategy.from_benchmark(backbone, prototype_stream, **dict(base, **right))
    assert strategy.model.encoder.backbone is not backbone
    assert_unchanged(backbone, before)


def test_a_refused_sdr_strategy_call_leaves_its_repository_as_it_was(prototype_stream):
    model = build_sdr_model(_e0(), in_channels=1, image_size=8, generator=None)
    before = snapshot(model)
    for wrong in (dict(settings="cpuu"), dict(method="papper"), dict(reuse_epochs=-1), dict(reuse_lr=0.0),
                  dict(tpyo=1), dict(criterion=torch.nn.MSELoss()), dict(detector="two_sample", prior=0.5),
                  dict(routers=("lda",), plugins=[_scheduler_plugin()]), dict(routers=("lda",), device="tpu9"),
                  dict(detector="agreement")):  # the last: a rule that reads generators, a repository without
        with pytest.raises((TypeError, ValueError)):
            SDRStrategy(model=model, method="recommended", settings=FAST, evaluator=_quiet(), **wrong)
        assert_unchanged(model, before)
        assert model.router_names == [], f"{wrong}: the refused call kept its routers in the repository"
    strategy = SDRStrategy(model=model, method="recommended", settings=FAST, evaluator=_quiet())
    assert strategy.model is model and model.router_names == ["lda_weighted"]


def test_build_sdr_model_copies_e0_and_the_base_vae():
    backbone, vae = _e0(), ConvVAE(1, 8, latent_dim=4, width=8).requires_grad_(False)
    kept = snapshot(backbone), snapshot(vae)
    model = build_sdr_model(backbone, in_channels=1, image_size=8, generator="eft", base_vae=vae)
    assert model.encoder.backbone is not backbone and model.generators.base is not vae
    assert_unchanged(backbone, kept[0])
    assert_unchanged(vae, kept[1])
    again = build_sdr_model(backbone, in_channels=1, image_size=8, generator="eft", base_vae=vae)  # the same E0 twice
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, again.state_dict()[name])


def test_e0_is_unchanged_after_from_benchmark_and_a_whole_stream(prototype_stream):
    backbone = _e0()
    before = snapshot(backbone)
    baseline_net = make_multi_head_net(backbone)  # what a baseline built first starts from
    strategy = SDRStrategy.from_benchmark(backbone, prototype_stream, method="recommended", settings=FAST,
                                          evaluator=_quiet())
    for experience in prototype_stream.train_stream:
        strategy.train(experience)
    assert strategy.model.num_entries >= 1 and len(strategy.detection_records) == len(prototype_stream.train_stream)
    assert_unchanged(backbone, before)
    after = make_multi_head_net(backbone)  # a baseline built after SDR starts from the same E0
    for (name, a), (_, b) in zip(baseline_net.backbone.state_dict().items(), after.backbone.state_dict().items()):
        assert torch.equal(a, b), name
    assert [type(m) for m in baseline_net.backbone.modules()] == [type(m) for m in after.backbone.modules()]


def test_a_baseline_refuses_sdrs_wrapped_encoder(prototype_stream):
    strategy = SDRStrategy.from_benchmark(_e0(), prototype_stream, method="recommended", settings=FAST,
                                          evaluator=_quiet())
    with pytest.raises(ValueError, match="plain E0"):
        make_multi_head_net(strategy.model.encoder.backbone)
