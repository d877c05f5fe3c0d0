"""Method and budget presets by name, detectors and routers as objects, and no option
that silently does nothing (avalanche_sdr.training.methods, SDRStrategy's keywords)."""
import warnings

import pytest
import torch
from avalanche.evaluation.metrics import accuracy_metrics
from avalanche.training.plugins import EvaluationPlugin

import avalanche_sdr
from avalanche_sdr import HeadReuse, LearningReuse, SDRStrategy, build_sdr_model, seed_everything
from avalanche_sdr.benchmarks import MixedDigits
from avalanche_sdr.detection import (LevelByPairedPower, SimilarTaskDetector, SmallTaskDetector, SmallTaskSettings,
                                     TwoSampleDetector, TwoSampleSettings)
from avalanche_sdr.models import small_cnn_backbone
from avalanche_sdr.routers import LDAWeightedRouter
from avalanche_sdr.training import (BUDGETS, CPU_LARGE_TASK_SETTINGS, CPU_SETTINGS, METHODS, PAPER_SETTINGS,
                                    SDRSettings)

pytestmark = pytest.mark.usefixtures("one_thread")

FAST = SDRSettings(new_task_epochs=1, reuse_epochs=1, train_mb_size=32, vae_epochs=1)


@pytest.fixture(scope="module")
def digits():
    return MixedDigits(seed=0)


def _backbone():
    torch.manual_seed(0)
    return small_cnn_backbone(in_channels=1, widths=(8, 16, 16))


def _quiet():
    return EvaluationPlugin(accuracy_metrics(experience=True), loggers=[])


def _count(model) -> int:
    return sum(p.numel() for p in model.parameters()) + sum(b.numel() for b in model.buffers())


# ---------------------------------------------------------------------- registries

def test_the_presets_are_registries_of_objects_exported_from_the_package():
    assert list(METHODS) == ["paper", "recommended"] and avalanche_sdr.METHODS is METHODS
    assert BUDGETS == {"paper": PAPER_SETTINGS, "cpu": CPU_SETTINGS, "cpu_large_task": CPU_LARGE_TASK_SETTINGS}
    assert avalanche_sdr.BUDGETS is BUDGETS
    recommended = METHODS["recommended"].defaults()
    assert isinstance(recommended["detector"], SmallTaskDetector)
    assert recommended["detector"].settings.two_sample.match_classes
    assert recommended["detector"].settings.two_sample.alpha == LevelByPairedPower()
    assert recommended["reuse"] == "accumulate" and recommended["routers"] == ("lda_weighted",)
    assert recommended["forward_transfer"] is True and METHODS["paper"].defaults()["forward_transfer"] is False
    assert METHODS["recommended"].defaults()["detector"] is not recommended["detector"]  # fresh per strategy


def test_paper_is_the_default_method(digits):
    strategy = SDRStrategy.from_benchmark(_backbone(), digits, settings=FAST, evaluator=_quiet())
    assert strategy.method == "paper" and strategy.sdr.detector.rule == "agreement"
    assert strategy.sdr.reuse == HeadReuse() and strategy.sdr.routers == ()
    assert strategy.model.has_generators and strategy.sdr.forward_transfer is False


def test_recommended_expands_to_its_configuration_and_keywords_win(digits):
    strategy = SDRStrategy.from_benchmark(_backbone(), digits, method="recommended", settings="cpu",
                                          evaluator=_quiet())
    assert strategy.method == "recommended" and not strategy.model.has_generators
    assert strategy.sdr.detector.settings == SmallTaskSettings(
        two_sample=TwoSampleSettings(match_classes=True, alpha="by_paired_power"), familywise=True)
    assert strategy.sdr.settings == CPU_SETTINGS and strategy.sdr.reuse == LearningReuse()
    assert strategy.sdr.routers == (LDAWeightedRouter(),) and strategy.sdr.forward_transfer is True
    kept = SDRStrategy.from_benchmark(_backbone(), digits, method="recommended", reuse="head", routers=(),
                                      forward_transfer=False, evaluator=_quiet())
    assert kept.sdr.reuse.name == "head" and kept.sdr.routers == () and kept.sdr.settings.new_task_epochs == 100
    assert kept.sdr.forward_transfer is False
    paper_ft = SDRStrategy.from_benchmark(_backbone(), digits, forward_transfer=True, evaluator=_quiet())
    assert paper_ft.method == "paper" and paper_ft.sdr.forward_transfer is True
    agreement = SDRStrategy.from_benchmark(_backbone(), digits, method="recommended", detector="agreement",
                                           evaluator=_quiet())
    assert agreement.sdr.detector.rule == "agreement" and agreement.model.has_generators  # the generator follows


def test_unknown_method_or_budget_names_are_refused():
    model = build_sdr_model(_backbone(), in_channels=1, image_size=8, generator=None)
    with pytest.raises(ValueError, match=r"unknown method 'best'; the methods are \['paper', 'recommended'\]"):
        SDRStrategy(model=model, method="best")
    with pytest.raises(ValueError, match=r"unknown budget 'gpu'; the budgets are \['paper', 'cpu', 'cpu_large_task'\]"):
        SDRStrategy(model=model, detector="two_sample", settings="gpu")


# ---------------------------------------------------------------------- nothing silently ignored

def test_two_sample_with_the_default_generator_trains_no_vae(digits):
    seed_everything(0)
    followed = SDRStrategy.from_benchmark(_backbone(), digits, detector="two_sample", settings=FAST, evaluator=_quiet())
    seed_everything(0)
    explicit = SDRStrategy.from_benchmark(_backbone(), digits, detector="two_sample", generator=None, settings=FAST,
                                          evaluator=_quiet())
    seed_everything(0)  # the earlier trap: a repository built with a VAE per entry, which the rule never reads
    trap = SDRStrategy(model=build_sdr_model(_backbone(), in_channels=1, image_size=8), detector="two_sample",
                       settings=FAST, evaluator=_quiet())
    for experience in list(digits.train_stream)[:4]:
        for strategy in (followed, explicit, trap):
            strategy.train(experience, eval_streams=[])
    assert followed.model.generators is None
    assert _count(followed.model) == _count(explicit.model) < _count(trap.model)


def test_an_explicit_generator_that_the_rule_never_reads_is_refused_naming_generator(digits):
    with pytest.raises(ValueError, match=r"generator='independent' trains a generator per entry that the "
                                         r"'small_task' detector never reads"):
        SDRStrategy.from_benchmark(_backbone(), digits, method="recommended", generator="independent")


def test_a_detectors_options_live_on_the_detector():
    """The detector is one keyword: its options are set when building it (by name, with
    the registry's check; or as an object), never as strategy keywords."""
    from avalanche_sdr.detection import make_detector

    model = build_sdr_model(_backbone(), in_channels=1, image_size=8, generator=None)
    for flat in (dict(decision="two_sample"), dict(elbo_samples=8), dict(two_sample=TwoSampleSettings()),
                 dict(thresholds=None), dict(match_class_count=True), dict(router_exemplars=5)):
        with pytest.raises(TypeError, match="unexpected keyword argument"):
            SDRStrategy(model=model, **flat)
    with pytest.raises(ValueError, match=r"\['elbo_samples'\] have no effect with the 'two_sample' rule"):
        make_detector("two_sample", elbo_samples=8)
    with pytest.raises(ValueError, match="have no effect with detector=<a TwoSampleDetector object>"):
        make_detector(TwoSampleDetector(), settings=TwoSampleSettings())
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)  # nothing of the library warns
        model = build_sdr_model(_backbone(), in_channels=1, image_size=8)
        strategy = SDRStrategy(model=model, detector=make_detector("agreement", elbo_samples=8, max_samples=50),
                               settings="cpu", evaluator=_quiet())
    assert (strategy.sdr.detector.elbo_samples, strategy.sdr.detector.max_samples) == (8, 50)
    assert strategy.sdr.settings == CPU_SETTINGS


def _run(benchmark, n_experiences, **keywords):
    seed_everything(0)
    strategy = SDRStrategy.from_benchmark(_backbone(), benchmark, evaluator=_quiet(), **keywords)
    for experience in list(benchmark.train_stream)[:n_experiences]:
        strategy.train(experience, eval_streams=[])
    metrics = strategy.eval(list(benchmark.test_stream)[:n_experiences])
    accuracies = {k: v for k, v in metrics.items() if k.startswith("Top1_Acc_Exp")}
    decisions = [(r.decision, r.entry, r.class_permutation, u.entry_updated)
                 for r, u in zip(strategy.detection_records, strategy.sdr.reuse_records)]
    return decisions, accuracies, _count(strategy.model), strategy


@pytest.mark.slow
def test_the_recommended_method_gives_the_explicit_assemblys_results(digits):
    explicit = _run(digits, 6, generator=None, detector=SmallTaskDetector(SmallTaskSettings(
                    two_sample=TwoSampleSettings(match_classes=True, alpha=LevelByPairedPower()), familywise=True)),
                    settings=CPU_SETTINGS, reuse=LearningReuse(), forward_transfer=True,
                    routers=("lda_weighted",))
    preset = _run(digits, 6, method="recommended", settings=CPU_SETTINGS)
    assert len(preset[1]) == 6
    assert preset[0] == explicit[0] and any(d[0] == "reuse" for d in preset[0])
    assert preset[1] == explicit[1]  # same seed and threads: equal to the last digit
    assert preset[2] == explicit[2]
    assert preset[3].predict(torch.stack([digits.test_stream[0].dataset[i][0] for i in range(4)])).class_ids.shape == (4,)


def test_class_count_filter_is_the_one_name_of_the_candidates_filter():
    from avalanche_sdr.detection import ExpertGateSettings

    for build in (TwoSampleSettings, SimilarTaskDetector, ExpertGateSettings):
        with pytest.raises(TypeError, match="match_class_count"):
            build(match_class_count=False)
    assert not TwoSampleSettings(class_count_filter=False).class_count_filter
    assert "match_class_count" not in TwoSampleSettings().to_dict()
    assert SimilarTaskDetector(class_count_filter=True).config()["class_count_filter"]


def test_a_detector_object_refuses_thresholds_its_rule_does_not_read():
    from avalanche_sdr.detection import DEFAULT_THRESHOLDS

    with pytest.raises(ValueError, match="thresholds have no effect with the 'agreement' rule"):
        SimilarTaskDetector(rule="agreement", thresholds=DEFAULT_THRESHOLDS)
    assert SimilarTaskDetector(rule="calibrated", thresholds=DEFAULT_THRESHOLDS).thresholds == DEFAULT_THRESHOLDS
    assert SimilarTaskDetector(rule="agreement").config()["thresholds"] == DEFAULT_THRESHOLDS.to_dict()
