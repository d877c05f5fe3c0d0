"""One definition per setting: SDRSettings, how SDRStrategy routes keywords, from_benchmark,
and the metric values the plugin hands to Avalanche's loggers."""
import dataclasses
import inspect
import io
import json

import pytest
import torch
from avalanche.evaluation.metrics import accuracy_metrics
from avalanche.logging import BaseLogger
from avalanche.training.plugins import EvaluationPlugin

from avalanche_sdr._batching import eval_batch_size
from avalanche_sdr import CPU_LARGE_TASK_SETTINGS, PAPER_SETTINGS, SDRSettings, SDRStrategy, build_sdr_model
from avalanche_sdr.detection import TwoSampleDetector, TwoSampleSettings
from avalanche_sdr.evaluation import DecisionLogger
from avalanche_sdr.models import small_cnn_backbone
from avalanche_sdr.training.checkpoint import strategy_fingerprint
from avalanche_sdr.training.sdr_plugin import REPORTED_VALUES
from avalanche_sdr.training.learning_reuse import MOVED_SETTINGS
from avalanche_sdr.training.strategy import SETTING_KEYWORDS, benchmark_input_shape

pytestmark = pytest.mark.usefixtures("one_thread")

QUICK = CPU_LARGE_TASK_SETTINGS.replace(new_task_epochs=1, lr_milestones=(), reuse_epochs=1, vae_epochs=2)


def _model(generator=None):
    torch.manual_seed(0)
    kwargs = dict(latent_dim=4, vae_width=8) if generator else {}
    return build_sdr_model(small_cnn_backbone(in_channels=1, widths=(8, 16)), in_channels=1, image_size=8,
                           generator=generator, **kwargs)


def _quiet():
    return EvaluationPlugin(accuracy_metrics(experience=True), loggers=[])


# ------------------------------------------------------------------ SDRSettings
def test_defaults_are_the_papers_and_the_cpu_preset_changes_only_what_is_long():
    assert SDRSettings() == PAPER_SETTINGS
    changed = {k for k in SDRSettings.field_names() if CPU_LARGE_TASK_SETTINGS[k] != PAPER_SETTINGS[k]}
    assert changed == {"new_task_epochs", "lr_milestones", "train_mb_size", "vae_epochs", "vae_lr", "vae_mb_size",
                       "vae_patience"}
    assert CPU_LARGE_TASK_SETTINGS.reuse_epochs == 2 and CPU_LARGE_TASK_SETTINGS.reuse_lr == 0.001  # the paper's head-only budget


def test_settings_are_frozen_checked_and_serialise_in_field_order():
    with pytest.raises(dataclasses.FrozenInstanceError):
        CPU_LARGE_TASK_SETTINGS.reuse_epochs = 3
    for bad, match in [(dict(lr_decay=0.0), "lr_decay"), (dict(new_task_lr=-1.0), "new_task_lr"),
                       (dict(train_mb_size=0), "train_mb_size"), (dict(lr_milestones=(5, 2)), "increasing"),
                       (dict(lr_milestones=7), "sequence"), (dict(reuse_epochs=1.5), "reuse_epochs")]:
        with pytest.raises(ValueError, match=match):
            SDRSettings(**bad)
    with pytest.raises(TypeError, match="unknown SDR setting.*'reuse_epoch'"):
        CPU_LARGE_TASK_SETTINGS.replace(reuse_epoch=3)
    assert SDRSettings(lr_milestones=[50]).lr_milestones == (50,)
    as_json = json.loads(json.dumps(CPU_LARGE_TASK_SETTINGS.to_dict()))
    assert list(as_json) == list(SDRSettings.field_names())
    assert SDRSettings(**as_json) == CPU_LARGE_TASK_SETTINGS  # a results config rebuilds its settings
    assert dict(CPU_LARGE_TASK_SETTINGS, reuse_epochs=5) == dict(CPU_LARGE_TASK_SETTINGS.replace(reuse_epochs=5).to_dict())


# ------------------------------------------------------------------ keyword routing
def test_strategy_routes_settings_detector_options_and_avalanche_keywords():
    strategy = SDRStrategy(model=_model(), settings=CPU_LARGE_TASK_SETTINGS, reuse_epochs=7,
                           detector=TwoSampleDetector(TwoSampleSettings(alpha=0.05)), eval_every=-1, evaluator=_quiet())
    assert strategy.sdr.settings == CPU_LARGE_TASK_SETTINGS.replace(reuse_epochs=7)
    assert isinstance(strategy.sdr.detector, TwoSampleDetector)
    assert strategy.sdr.detector.settings.alpha == 0.05
    assert strategy.train_mb_size == CPU_LARGE_TASK_SETTINGS.train_mb_size
    assert strategy.eval_mb_size == eval_batch_size("cpu", CPU_LARGE_TASK_SETTINGS.eval_mb_size)  # None: chosen for the CPU
    # Settings given as keywords alone start from the paper's values.
    plain = SDRStrategy(model=_model(), new_task_epochs=3, detector="two_sample", evaluator=_quiet())
    assert plain.sdr.settings == PAPER_SETTINGS.replace(new_task_epochs=3)


def test_strategy_refuses_what_it_sets_itself_and_misspelt_keywords():
    with pytest.raises(TypeError, match="train_epochs"):
        SDRStrategy(model=_model(), detector="two_sample", train_epochs=3)
    with pytest.raises(TypeError, match="verbose"):
        SDRStrategy(model=_model(), detector="two_sample", verbose=False)
    with pytest.raises(TypeError, match="reuse_epoch"):  # Avalanche's misspelling guard still works
        SDRStrategy(model=_model(), detector="two_sample", reuse_epoch=3)
    with pytest.raises(TypeError, match="elbo_samples"):  # a detector's option: set on the detector
        SDRStrategy(model=_model(), detector=TwoSampleDetector(), elbo_samples=4)
    with pytest.raises(TypeError, match=r"\['reuse_guard'\] are options of the learning reuse object: "
                                        r"write reuse=LearningReuse\(guard=False\)"):
        SDRStrategy(model=_model(), detector="two_sample", reuse="accumulate", reuse_guard=False)
    with pytest.raises(TypeError, match=r"write reuse=LearningReuse\(epochs=3, lr=0.01\)"):
        SDRStrategy(model=_model(), detector="two_sample", update_epochs=3, update_lr=0.01)
    with pytest.raises(TypeError, match="SDRSettings"):
        SDRStrategy(model=_model(), settings=dict(CPU_LARGE_TASK_SETTINGS), detector="two_sample")


def test_signature_lists_every_routed_keyword_once_and_at_most_25():
    parameters = inspect.signature(SDRStrategy.__init__).parameters
    keywords = [name for name, p in parameters.items() if p.kind == p.KEYWORD_ONLY]
    assert set(SETTING_KEYWORDS) <= set(keywords) and not set(MOVED_SETTINGS) & set(keywords)
    assert set(SETTING_KEYWORDS) == set(SDRSettings.field_names()) and "reuse" in keywords
    assert len(keywords) == len(set(keywords)) <= 25


def test_fingerprint_reads_the_settings_object():
    strategy = SDRStrategy(model=_model(), settings=QUICK, detector="two_sample", n_warm_start=2, evaluator=_quiet())
    fingerprint = strategy_fingerprint(strategy)
    assert {k: fingerprint[k] for k in SDRSettings.field_names()} == json.loads(json.dumps(QUICK.to_dict()))
    assert fingerprint["n_warm_start"] == 2 and fingerprint["detector"]["rule"] == "two_sample"


# ------------------------------------------------------------------ from_benchmark
def test_from_benchmark_reads_the_image_shape(prototype_stream):
    assert benchmark_input_shape(prototype_stream) == (1, 8, 8)
    strategy = SDRStrategy.from_benchmark(small_cnn_backbone(in_channels=1, widths=(8, 16)), prototype_stream,
                                          settings=QUICK, detector="two_sample", generator=None, a=4, b=8,
                                          evaluator=_quiet())
    model = strategy.model
    assert model.input_shape == (1, 8, 8) and not model.has_generators
    assert model.encoder.a == 4 and model.encoder.b == 8
    assert strategy.sdr.settings == QUICK


def test_from_benchmark_refuses_inputs_that_are_not_image_tensors():
    class Stream(list):
        pass

    class Experience:
        dataset = [([1.0, 2.0], 0, 0)]

    class Benchmark:
        train_stream = Stream([Experience()])

    with pytest.raises(ValueError, match="C x H x W tensors"):
        SDRStrategy.from_benchmark(small_cnn_backbone(in_channels=1, widths=(8,)), Benchmark())


# ------------------------------------------------------------------ reporting through loggers
class _Collect(BaseLogger):
    def __init__(self):
        super().__init__()
        self.values = {}

    def log_single_metric(self, name, value, x_plot):
        self.values[name] = value


def test_every_experience_reports_its_decision_to_the_loggers(prototype_stream):
    collect, out = _Collect(), io.StringIO()
    strategy = SDRStrategy(model=_model(), settings=QUICK, detector="two_sample", n_warm_start=2,
                           evaluator=EvaluationPlugin(accuracy_metrics(experience=True),
                                                      loggers=[collect, DecisionLogger(out)]))
    experiences = list(prototype_stream.train_stream)[:4]
    for experience in experiences:
        strategy.train(experience, eval_streams=[])
    for record in strategy.detection_records:
        names = {name.split("/")[0] for name in collect.values if name.endswith(f"/Task{record.task:03d}")}
        assert names == set(REPORTED_VALUES) - {"SDR_Generator_Heldout_ELBO"}  # no generators here
        reused = collect.values[f"SDR_Reused/train_phase/train_stream/Task{record.task:03d}"]
        assert reused == (1.0 if record.decision == "reuse" else 0.0)
    lines = out.getvalue().splitlines()
    assert len(lines) == len(experiences)
    assert all(line.startswith(f"[SDR] task {r.task}:") for line, r in zip(lines, strategy.detection_records))


def test_a_generator_fit_reports_its_heldout_elbo(prototype_stream):
    collect = _Collect()
    strategy = SDRStrategy(model=_model(generator="independent"), settings=QUICK, n_warm_start=1,
                           evaluator=EvaluationPlugin(accuracy_metrics(experience=True), loggers=[collect]))
    strategy.train(prototype_stream.train_stream[0], eval_streams=[])
    elbo = collect.values["SDR_Generator_Heldout_ELBO/train_phase/train_stream/Task000"]
    assert isinstance(elbo, float) and elbo < 0


# ------------------------------------------------------------------ the docs' table
def test_method_page_table_shows_the_presets_values():
    """docs/method.rst's settings table is written by hand for readability: every row
    must name settings that exist and show the presets' values. (The table may leave a
    setting out, e.g. ``eval_mb_size``: adding a setting needs only its field.)"""
    import ast
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "method.rst").read_text(encoding="utf-8")
    rows = text.split("``PAPER_SETTINGS``       ``CPU_LARGE_TASK_SETTINGS``\n", 1)[1].split("\n", 1)[1].split("\n=")[0]
    shown = set()
    for row in rows.splitlines():
        names = re.findall(r"``(\w+)``", row.split("  ")[0])
        paper, cpu = re.split(r"\s{2,}", row.strip())[1:3]
        number = r"^[\d.e\-()+, ]*[\d)]"
        values = [ast.literal_eval(re.match(number, column).group(0)) for column in (paper, cpu)]
        if len(names) == 1:
            values = [(v,) for v in values]
        for i, name in enumerate(names):
            assert (values[0][i], values[1][i]) == (PAPER_SETTINGS[name], CPU_LARGE_TASK_SETTINGS[name]), name
            shown.add(name)
    assert len(shown) >= 10 and shown <= set(SDRSettings.field_names())


def test_the_budget_holds_no_reuse_option():
    """What a repeat trains is the reuse object's (its options on it), not a setting."""
    for name in ("reuse",) + tuple(MOVED_SETTINGS):
        with pytest.raises(TypeError, match="unknown SDR setting"):
            CPU_LARGE_TASK_SETTINGS.replace(**{name: None})
