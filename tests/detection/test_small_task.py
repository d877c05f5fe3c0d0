"""The small-task rule: pooled-covariance test, Monte-Carlo false-reuse bound, detector."""
import json
import math

import pytest
import torch
from scipy import stats

from avalanche_sdr.detection import DetectionRecord, TwoSampleDetector, make_detector
from avalanche_sdr.detection.small_task import (
    DEFAULT_SMALL_TASK,
    SmallTaskDetector,
    SmallTaskSettings,
    pooled_covariance,
    pooled_hotelling_pvalue,
)
from avalanche_sdr.models import TaskData, build_sdr_model, small_cnn_backbone


def _images(prototypes, per_class, generator, noise=0.15):
    """[c * per_class, 1, 28, 28] images: each class's prototype plus Gaussian noise, in [0, 1]."""
    xs, ys = [], []
    for j, proto in enumerate(prototypes):
        x = proto + noise * torch.randn(per_class, 1, 28, 28, generator=generator)
        xs.append(x.clamp(0.0, 1.0))
        ys.append(torch.full((per_class,), j, dtype=torch.int64))
    return torch.cat(xs), torch.cat(ys)


def _repository(detector, n_entries=3, per_class=10, seed=0):
    """A repository of ``n_entries`` 2-class entries on distinct pixel prototypes, each
    remembered by ``detector``; returns (model, prototypes per entry, generator)."""
    torch.manual_seed(seed)
    model = build_sdr_model(small_cnn_backbone(in_channels=1, widths=(8, 16, 32)), in_channels=1, image_size=28,
                            generator=None).eval()
    g = torch.Generator().manual_seed(seed)
    prototypes = [[torch.rand(1, 1, 28, 28, generator=g) for _ in range(2)] for _ in range(n_entries)]
    for task, protos in enumerate(prototypes):
        x, y = _images(protos, per_class, g)
        entry = model.create_entry(task)
        model.heads.add(task, 2)
        detector.remember(model, entry, TaskData(task, x, y))
    return model, prototypes, g


def test_reuses_a_true_repeat_at_ten_per_class_and_refuses_a_different_task():
    detector = SmallTaskDetector()
    model, prototypes, g = _repository(detector)
    x, y = _images(prototypes[1], 10, g)
    plain = TwoSampleDetector().detect(model, TaskData(10, x, y))
    assert plain.decision == "new" and plain.power is not None and plain.power < 0.9  # lacks power
    record = detector.detect(model, TaskData(10, x, y))
    assert record.decision == "reuse" and record.reused_entry == 1
    assert record.rule == "small_task"
    assert record.decoy_rank_pvalue is not None and record.decoy_rank_pvalue <= DEFAULT_SMALL_TASK.beta
    other = [torch.rand(1, 1, 28, 28, generator=g) for _ in range(2)]
    x, y = _images(other, 10, g)
    assert detector.detect(model, TaskData(11, x, y)).decision == "new"


def test_a_large_task_is_decided_by_the_two_sample_rule_alone():
    detector = SmallTaskDetector()
    model, prototypes, g = _repository(detector, per_class=100)
    x, y = _images(prototypes[2], 100, g)
    plain = TwoSampleDetector().detect(model, TaskData(10, x, y))
    record = detector.detect(model, TaskData(10, x, y))
    assert plain.decision == record.decision == "reuse"
    assert record.decoy_rank_pvalue is None and record.p_value == plain.p_value


def test_pooled_hotelling_holds_its_level_under_the_null():
    g = torch.Generator().manual_seed(3)
    d, level, draws = 8, 0.05, 600
    mix = torch.randn(d, d, generator=g)  # a shared, non-spherical covariance
    rejected = 0
    for _ in range(draws):
        classes = [torch.randn(10, d, generator=g) @ mix + 5 * torch.randn(d, generator=g) for _ in range(5)]
        x = torch.randn(10, d, generator=g) @ mix
        ref = torch.randn(10, d, generator=g) @ mix
        cov = pooled_covariance(classes + [x, ref])
        rejected += pooled_hotelling_pvalue(x, ref, cov) < level
    assert stats.binom.sf(rejected - 1, draws, level) > 0.001  # not above the level
    assert rejected > 0.4 * level * draws  # nor degenerate


def test_false_reuse_level_held_on_tasks_drawn_like_the_decoys():
    """Tasks made of fresh images of classes known to differ from the entry: the share
    with a Monte-Carlo p-value <= beta stays within beta (binomial bound)."""
    beta, n_decoys, d = 0.1, 19, 6
    detector = SmallTaskDetector(SmallTaskSettings(beta=beta, n_decoys=n_decoys, dim=d))
    g = torch.Generator().manual_seed(5)
    means = {(e, j): 1.2 * torch.randn(d, generator=g) for e in range(4) for j in range(2)}

    def draw(key, n):
        return torch.randn(n, d, generator=g, dtype=torch.float64) + means[key]

    reused, tasks = 0, 300
    for task in range(tasks):
        refs = {e: [draw((e, j), 10) for j in range(2)] for e in range(4)}
        cov = pooled_covariance([c for e in refs for c in refs[e]])
        picks = [(1 + int(torch.randint(3, (1,), generator=g)), int(torch.randint(2, (1,), generator=g)))
                 for _ in range(2)]
        samples = [draw(key, 5) for key in picks]
        p_task, _ = detector._combined(samples, refs[0], cov)
        q = detector.decoy_rank_pvalue(p_task, 0, [5, 5], task, refs, cov)
        reused += q <= beta
    assert stats.binom.sf(reused - 1, tasks, beta) > 0.001, f"{reused} of {tasks} reused at beta {beta}"
    assert reused > 0  # the null tasks are close enough to be reused now and then: the bound is tested


def test_bad_settings_and_inputs_are_refused():
    with pytest.raises(ValueError, match="beta"):
        SmallTaskSettings(beta=0.0)
    with pytest.raises(ValueError, match="n_decoys >= 99"):
        SmallTaskSettings(n_decoys=50)
    with pytest.raises(TypeError, match="TwoSampleSettings"):
        SmallTaskSettings(two_sample={"alpha": 0.01})
    with pytest.raises(ValueError, match="dim"):
        SmallTaskSettings(dim=0)
    with pytest.raises(TypeError, match="SmallTaskSettings"):
        SmallTaskDetector(settings=DEFAULT_SMALL_TASK.two_sample)
    with pytest.raises(ValueError, match="degrees of freedom"):
        pooled_covariance([torch.randn(1, 4), torch.randn(1, 4)])
    with pytest.raises(ValueError, match="NaN"):
        pooled_covariance([torch.full((3, 4), math.nan)])
    cov = pooled_covariance([torch.randn(20, 4)])
    with pytest.raises(ValueError, match=r"\[n, 4\]"):
        pooled_hotelling_pvalue(torch.randn(5, 3), torch.randn(5, 4), cov)
    detector = SmallTaskDetector()
    model, _, g = _repository(detector, n_entries=2)
    with pytest.raises(ValueError, match=r"\[n, C, H, W\]"):
        TaskData(5, torch.rand(20, 28, 28), torch.zeros(20, dtype=torch.int64))
    stranger = build_sdr_model(small_cnn_backbone(in_channels=1, widths=(8, 16, 32)), in_channels=1,
                               image_size=28, generator=None).eval()
    plain = TwoSampleDetector()
    protos = [[torch.rand(1, 1, 28, 28, generator=g) for _ in range(2)] for _ in range(2)]
    for task in range(2):
        x, y = _images(protos[task], 10, g)
        stranger.create_entry(task)
        stranger.heads.add(task, 2)
        plain.remember(stranger, task, TaskData(task, x, y))
    x, y = _images(protos[0], 10, g)  # a repeat: not rejected, too small for the power check
    record = plain.detect(stranger, TaskData(9, x, y))
    assert record.decision == "new" and record.power is not None  # not rejected, no power: the fallback acts
    with pytest.raises(RuntimeError, match="projected-input references"):
        detector.detect(stranger, TaskData(9, x, y))


def test_registry_round_trip_and_config_recorded():
    detector = make_detector("small_task", settings=SmallTaskSettings(beta=0.05, n_decoys=19))
    assert isinstance(detector, SmallTaskDetector) and detector.settings.beta == 0.05
    with pytest.raises(ValueError, match="no effect"):
        make_detector("small_task", elbo_samples=4)
    config = json.loads(json.dumps(detector.config()))
    assert config["rule"] == "small_task" and config["beta"] == 0.05 and config["n_decoys"] == 19
    assert config["two_sample"]["alpha"] == DEFAULT_SMALL_TASK.two_sample.alpha and config["dim"] == 32
    record = DetectionRecord(task=4, decision="new", entry=-1, candidate_entries=[0], candidate_tasks=[0],
                             p_value=[0.3], power=0.2, rule="small_task", decoy_rank_pvalue=0.07)
    again = DetectionRecord.from_dict(json.loads(json.dumps(record.to_dict())))
    assert again == record and again.decoy_rank_pvalue == 0.07
    old = {k: v for k, v in record.to_dict().items() if k != "decoy_rank_pvalue"}  # a checkpoint from before
    assert DetectionRecord.from_dict(old).decoy_rank_pvalue is None


def test_below_min_per_class_the_two_sample_decision_stands():
    detector = SmallTaskDetector()
    model, prototypes, g = _repository(detector)
    x, y = _images(prototypes[1], 5, g)
    plain = TwoSampleDetector().detect(model, TaskData(10, x, y))
    record = detector.detect(model, TaskData(10, x, y))
    assert plain.decision == record.decision == "new" and record.decoy_rank_pvalue is None
    with pytest.raises(ValueError, match="min_per_class"):
        SmallTaskSettings(min_per_class=1)


def test_every_registered_rule_is_a_named_detector():
    """One list of rule names: the registry builds exactly the names the strategy, the CLI and
    the examples accept (``vocabulary.DETECTORS``)."""
    from avalanche_sdr.detection.registry import DETECTOR_TYPES
    from avalanche_sdr.vocabulary import DETECTORS

    assert tuple(DETECTOR_TYPES) == DETECTORS


def _stage_one_reuses(detector, entry, permutation=()):
    """Make ``detector``'s two-sample stage reuse ``entry`` (power 1.0), whatever the task."""
    def detect(model, data):
        return DetectionRecord.decided(model, task=data.task, entries=list(model.entries), reused=entry,
                                       rule="two_sample", p_value=[0.5] * len(model.entries), power=1.0,
                                       class_permutation=list(permutation))
    detector.two_sample.detect = detect


def test_small_tasks_reuse_by_the_two_sample_rule_only_when_the_fallback_confirms_it():
    detector = SmallTaskDetector()
    assert detector.settings.confirm_below == 40
    model, prototypes, g = _repository(detector)
    x, y = _images(prototypes[1], 20, g)  # a repeat of entry 1, 20 images a class
    _stage_one_reuses(detector, 1)
    record = detector.detect(model, TaskData(10, x, y))
    assert record.decision == "reuse" and record.reused_entry == 1
    assert record.decoy_rank_pvalue is not None and record.decoy_rank_pvalue <= DEFAULT_SMALL_TASK.beta
    _stage_one_reuses(detector, 0)  # a wrong reuse by stage 1: the fallback points at entry 1, not 0
    record = detector.detect(model, TaskData(10, x, y))
    assert record.decision == "new" and record.decoy_rank_pvalue is not None
    _stage_one_reuses(detector, 1, permutation=[1, 0])  # right entry, classes matched the other way
    assert detector.detect(model, TaskData(10, x, y)).decision == "new"


def test_no_confirmation_at_or_above_confirm_below_or_when_switched_off():
    for settings, per_class in ((SmallTaskSettings(), 40), (SmallTaskSettings(confirm_below=None), 20)):
        detector = SmallTaskDetector(settings)
        model, prototypes, g = _repository(detector)
        x, y = _images(prototypes[1], per_class, g)
        _stage_one_reuses(detector, 0)
        record = detector.detect(model, TaskData(10, x, y))
        assert record.decision == "reuse" and record.reused_entry == 0 and record.decoy_rank_pvalue is None
    with pytest.raises(ValueError, match="confirm_below must be an int >= 11"):
        SmallTaskSettings(confirm_below=10)
    assert SmallTaskSettings(confirm_below=None).to_dict()["confirm_below"] is None


def test_confirm_accepts_confirms_a_reuse_the_fallback_does_not_reject():
    """Two entries of one group (a miss made a second one): the default confirms only the entry the
    fallback ranks first, so a repeat reused by the two-sample rule through the other one becomes new;
    ``confirm_accepts`` confirms either, and still refuses a wrong entry or a wrong class matching."""
    default = SmallTaskDetector()
    accepts = SmallTaskDetector(SmallTaskSettings(confirm_accepts=True))
    models = {}
    for name, detector in (("default", default), ("accepts", accepts)):
        model, prototypes, g = _repository(detector)
        x, y = _images(prototypes[1], 20, g)  # a second entry of entry 1's group
        duplicate = model.create_entry(3)
        model.heads.add(3, 2)
        detector.remember(model, duplicate, TaskData(3, x, y))
        models[name] = (model, _images(prototypes[1], 20, g))  # the repeat to decide, 20 images a class
    decisions = {}
    for name, detector in (("default", default), ("accepts", accepts)):
        model, (x, y) = models[name]
        for entry in (1, 3):
            _stage_one_reuses(detector, entry)
            decisions[name, entry] = detector.detect(model, TaskData(10, x, y))
    assert {decisions["default", 1].decision, decisions["default", 3].decision} == {"reuse", "new"}
    for entry in (1, 3):
        record = decisions["accepts", entry]
        assert record.decision == "reuse" and record.reused_entry == entry
        assert record.decoy_rank_pvalue is not None and record.decoy_rank_pvalue <= accepts.settings.beta
    model, (x, y) = models["accepts"]
    _stage_one_reuses(accepts, 0)  # a wrong entry: the fallback rejects it
    assert accepts.detect(model, TaskData(10, x, y)).decision == "new"
    _stage_one_reuses(accepts, 1, permutation=[1, 0])  # the right entry, classes matched the other way
    assert accepts.detect(model, TaskData(10, x, y)).decision == "new"


def test_confirm_accepts_is_checked_and_recorded_only_where_set():
    assert "confirm_accepts" not in SmallTaskSettings().to_dict()  # earlier configs and fingerprints unchanged
    assert SmallTaskSettings(confirm_accepts=True).to_dict()["confirm_accepts"] is True
    with pytest.raises(ValueError, match="confirm_accepts must be a bool"):
        SmallTaskSettings(confirm_accepts=1)
    with pytest.raises(ValueError, match="with confirm_below=None nothing is confirmed"):
        SmallTaskSettings(confirm_below=None, confirm_accepts=True)


def test_familywise_divides_beta_over_the_candidates_and_draws_enough_decoys():
    assert SmallTaskSettings().reuse_level(5) == (0.01, 99)  # per candidate (the default)
    familywise = SmallTaskSettings(familywise=True)
    assert familywise.reuse_level(1) == (0.01, 99)
    level, n_decoys = familywise.reuse_level(3)
    assert level == pytest.approx(0.01 / 3) and n_decoys == 299 and 1 / (n_decoys + 1) <= level
    assert SmallTaskSettings(familywise=True, beta=0.05, n_decoys=199).reuse_level(2) == (0.025, 199)  # enough already
    assert "familywise" not in SmallTaskSettings().to_dict()  # earlier configs and fingerprints unchanged
    assert familywise.to_dict()["familywise"] is True
    with pytest.raises(ValueError, match="familywise must be a bool"):
        SmallTaskSettings(familywise=1)


def test_familywise_reuses_only_below_beta_over_the_candidates():
    """Three 2-class candidates: a decoy rank of 0.006 reuses per candidate (<= 0.01) and not
    familywise (> 0.01 / 3), which also draws 299 decoys."""
    seen = {}
    for familywise in (False, True):
        detector = SmallTaskDetector(SmallTaskSettings(familywise=familywise))
        model, prototypes, g = _repository(detector)
        x, y = _images(prototypes[1], 12, g)

        def rank(p_task, entry, sizes, task, refs, covariance, n_decoys=None, _f=familywise):
            seen[_f] = n_decoys
            return 0.006

        detector.decoy_rank_pvalue = rank
        record = detector.detect(model, TaskData(10, x, y))
        assert record.decision == ("new" if familywise else "reuse"), familywise
        assert record.decoy_rank_pvalue == 0.006
    assert seen == {False: 99, True: 299}
    legend = "\n".join(SmallTaskDetector(SmallTaskSettings(familywise=True)).legend())
    assert "rank <= 0.01 / k" in legend and "k: the candidate entries tested" in legend
