"""The methods of the Table 2 harness: one builder per row, all on the same stream.

Every builder has the signature ``build(backbone, benchmark, stream, preset, *,
evaluator, device, **options) -> strategy`` and returns an Avalanche strategy ready for
``strategy.train(experience)`` / ``strategy.eval(stream)``. ``backbone`` is the
pretrained E0, the same weights for every method of a seed; builders copy it, so one E0
can serve several builders. The baselines' models and strategies are the library's
(:mod:`avalanche_sdr.baselines`); this module maps the harness's :class:`Preset` onto
their keyword arguments, and defines the streams (:data:`STREAMS`), the budgets
(:data:`PRESETS`) and the rows (:data:`METHODS`, in the paper's order); the variants'
options (``--protocol``, ``--sweep``, ``--reuse``, ``--equal-memory``) are
:mod:`benchmarks.table2.variants`'. Names and labels come from :mod:`benchmarks.table2.catalogue`.

What each row is (the paper's Table 2 names, the rows beyond the paper, the task-free
rows, why Avalanche's ``ExpertGateStrategy`` is not a row) and each variant:
docs/reproducing.rst, "The harness's rows and variants".
"""
from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

from avalanche_sdr import baselines
from avalanche_sdr.detection.base import Detector
from avalanche_sdr.training.presets import SDRSettings
from avalanche_sdr.vocabulary import ROUTER_KERNEL_LDA, ROUTERS

from benchmarks.table2 import catalogue
from benchmarks.table2.variants import UPDATE_FLAGS, UPDATE_PREFIX, Row

TASK_FREE_ROW_ROUTERS = tuple(r for r in ROUTERS if r != ROUTER_KERNEL_LDA)
"""The routers the row ``sdr_task_free`` fits after every task: every task-free router but
``"kernel_lda"``, whose 2048 x 2048 state would enter the row's memory and the
``--equal-memory`` sizing; its view of a finished run is fitted afterwards
(``python -m benchmarks.studies.closed_form.offline``, the same fit)."""

# --------------------------------------------------------------------- settings


@dataclass(frozen=True)
class StreamSpec:
    """How to build one stream and the models sized for it.

    :param name: harness name (``digits``, ``fashion10``, ``cifar10``, ...).
    :param label: human-readable stream name for tables.
    :param factory: ``factory(seed) -> MixedSimilarityBenchmark``.
    :param in_channels: image channels.
    :param image_size: image side in pixels.
    :param latent_dim: SDR VAE latent size.
    :param vae_width: SDR VAE base width.
    :param capped_sizes: (train, valid, test) images per task used by the CPU
        presets (``Preset.capped``); ``None``: the stream's default sizes always.
    :param backbone: E0 family: ``"small_cnn"`` (pretrained by the harness on the
        warm-start tasks, option (b) of docs/method.rst, "E0 without ImageNet weights") or
        ``"cifar_resnet20"`` (the frozen CIFAR-10 ResNet-20 given by
        ``--backbone-weights``, option (a)).
    :param needs_data_root: the stream reads ``--data-root`` (no default location).
    :param fixed_sizes: (train, valid, test) images per task in every preset
        (streams defined by their task size); overrides ``capped_sizes``.
    """

    name: str
    label: str
    factory: Callable[..., Any]
    in_channels: int
    image_size: int
    latent_dim: int
    vae_width: int
    capped_sizes: Optional[Tuple[int, int, int]] = None
    backbone: str = "small_cnn"
    needs_data_root: bool = False
    fixed_sizes: Optional[Tuple[int, int, int]] = None

    def build(self, seed: int, capped: bool, data_root: Optional[str] = None,
              sizes: Optional[Tuple[int, int, int]] = None, original_class_ids: bool = False,
              shuffle_repeat_labels: bool = False):
        """The stream for ``seed``: capped task sizes if ``capped`` and the stream has caps;
        ``sizes`` = (train, valid, test) images per task overrides both.
        ``original_class_ids``: labels are the dataset's class ids instead of 0..c-1 in
        every task (same images and tasks; the task-free rows, :attr:`Method.task_free`).
        ``shuffle_repeat_labels``: every task after the first of its group carries its
        local labels in a seeded other order (same images and tasks;
        ``benchmarks/studies/shuffled_labels.py``)."""
        sizes = sizes or self.fixed_sizes or (self.capped_sizes if capped else None)
        ids = {"original_class_ids": True} if original_class_ids else {}
        if shuffle_repeat_labels:
            ids["shuffle_repeat_labels"] = True
        if self.needs_data_root:
            if not data_root:
                raise ValueError(f"stream {self.name!r} needs --data-root (see its StreamSpec)")
            return self.factory(seed, sizes, data_root, **ids)
        if data_root:
            return self.factory(seed, sizes, data_root, **ids)
        return self.factory(seed, sizes, **ids)


def _size_overrides(sizes: Optional[Tuple[int, int, int]]) -> Dict[str, Any]:
    if sizes is None:
        return {}
    train, valid, test = sizes
    return dict(train_per_task=train, valid_per_task=valid, test_per_task=test)


def _digits(seed: int, sizes=None, **options):
    from avalanche_sdr.benchmarks import MixedDigits

    return MixedDigits(seed=seed, **options, **_size_overrides(sizes))


def _fashion(n_splits: int) -> Callable[..., Any]:
    def factory(seed: int, sizes=None, data_root: Optional[str] = None, **options):
        from avalanche_sdr.benchmarks import MixedFashionMNIST

        root = {} if data_root is None else {"root": data_root}
        return MixedFashionMNIST(n_splits=n_splits, seed=seed, **options, **root, **_size_overrides(sizes))

    return factory


def _emnist_bymerge(seed: int, sizes, data_root: str, **options):
    from avalanche_sdr.benchmarks import MixedEMNIST

    # bymerge: per-task sizes scale to the rarest class (reported as task_sizes);
    # capped sizes are upper bounds on top of that scaling.
    return MixedEMNIST(data_root, split="bymerge", seed=seed, **options, **_size_overrides(sizes))


def _cifar10(seed: int, sizes, data_root: str, **options):
    from avalanche_sdr.benchmarks import MixedCIFAR10

    # The paper's CIFAR-10 stream (5 groups of 2 classes, paper Table 4, x 2 splits) from
    # data_root/cifar-10-batches-py, read by avalanche_sdr.benchmarks.sources (no MD5
    # check: the JPEG-re-encoded copy of docs/data.rst is read as the official archive).
    return MixedCIFAR10(data_root, seed=seed, **options, **_size_overrides(sizes))


def _stream(name: str, factory: Callable[[int], Any], *sizes: int, **options) -> StreamSpec:
    """The :class:`StreamSpec` of ``name`` with its label, E0 family and data-root need
    read from :data:`benchmarks.table2.catalogue.STREAMS` (defined there once, for the parsers)."""
    entry = catalogue.STREAMS[name]
    return StreamSpec(name, entry.label, factory, *sizes, backbone=entry.backbone,
                      needs_data_root=entry.needs_data_root, **options)


STREAMS: Dict[str, StreamSpec] = {
    "digits": _stream("digits", _digits, 1, 8, 8, 16),
    # CPU caps: 600 train / 60 validation / 300 test images per task (defaults 5400 / 600 / 1000).
    "fashion10": _stream("fashion10", _fashion(2), 1, 28, 16, 32, capped_sizes=(600, 60, 300)),
    # CPU caps: 300 / 30 / 200 (defaults 1080 / 120 / 200).
    "fashion50": _stream("fashion50", _fashion(10), 1, 28, 16, 32, capped_sizes=(300, 30, 200)),
    # Real EMNIST (a bymerge root in the torchvision layout, docs/data.rst), E0 = CIFAR-10
    # ResNet-20. CPU caps: 200 / 20 / 100 (defaults 2400 / 400 per class scaled to bymerge).
    "emnist100": _stream("emnist100", _emnist_bymerge, 1, 28, 16, 32, capped_sizes=(200, 20, 100)),
    # 100 tasks (5 groups x 20 splits), 300 / 30 / 100 images per task in every preset
    # (Fashion-MNIST's 1,000 test images per class cut into 20 splits give 50 per class).
    "fashion100": _stream("fashion100", _fashion(20), 1, 28, 16, 32, fixed_sizes=(300, 30, 100)),
    # Small tasks: 50 tasks of 40 training images (20 per class), 10 validation, 100 test.
    "fashion50_small": _stream("fashion50_small", _fashion(10), 1, 28, 16, 32, fixed_sizes=(40, 10, 100)),
    # CIFAR-10, 10 tasks (5 groups x 2 splits), 3x32x32, from a cifar-10-batches-py root (the
    # JPEG-re-encoded copy: README, Data); VAE latent 32, width 32 as examples/cifar10_10.py
    # (examples/_common.py RGB32). E0 = small_cnn pretrained on the 3 warm-start tasks (the
    # CIFAR-10 ResNet weights have seen these classes). CPU caps: 1000 / 100 / 500 (defaults
    # 4500 / 500 / 1000, paper Table 3, kept by the paper preset): one SDR run in a few
    # minutes on 1 thread (sdr_two_sample_nogen, seed 0: 148 s, E0 pretraining 1-2 min more,
    # on a loaded 2-core machine); 500 training images a class, the two-sample test's
    # max_per_class, so detection sees as many images as at full size; 250 test a class.
    "cifar10": _stream("cifar10", _cifar10, 3, 32, 32, 32, capped_sizes=(1000, 100, 500)),
}


@dataclass(frozen=True)
class Preset:
    """Training budget of every method.

    :param name: preset name.
    :param pretrain_epochs: epochs of E0 pretraining on the warm-start tasks.
    :param sdr: the SDR rows' :class:`~avalanche_sdr.training.SDRSettings`.
    :param elbo_samples: Monte-Carlo samples per ELBO in SDR detection.
    :param baselines: every baseline row's budget and EWC / ER settings.
    :param base_vae_epochs: epochs of the shared base VAE's pretraining (``sdr_eft_g``).
    :param capped: use the streams' ``capped_sizes`` (CPU presets) instead of their
        default per-task sizes.
    """

    name: str
    pretrain_epochs: int
    sdr: SDRSettings
    elbo_samples: int
    baselines: baselines.BaselineSettings
    base_vae_epochs: int = 20
    capped: bool = True


def _presets() -> Dict[str, Preset]:
    from avalanche_sdr.training.presets import CPU_LARGE_TASK_SETTINGS, CPU_SETTINGS, PAPER_SETTINGS

    return {
        # Everything (8 methods, 1 seed, digits) in a few minutes on 2 CPU cores.
        "smoke": Preset(
            "smoke", pretrain_epochs=5,
            sdr=CPU_LARGE_TASK_SETTINGS.replace(new_task_epochs=3, lr_milestones=(2,), reuse_epochs=5,
                                                reuse_lr=0.01, vae_epochs=10, vae_patience=3),
            elbo_samples=4, baselines=baselines.BaselineSettings(epochs=3), base_vae_epochs=10,
        ),
        # CPU_SETTINGS: the library's budget "cpu" (head-only reuse 10 epochs at lr 0.01).
        "cpu": Preset(
            "cpu", pretrain_epochs=20,
            sdr=CPU_SETTINGS,
            elbo_samples=8, baselines=baselines.BASELINE_SETTINGS["cpu"], base_vae_epochs=40,
        ),
        # The paper's epochs (supplementary §A.1); meant for a GPU.
        "paper": Preset(
            "paper", pretrain_epochs=20, sdr=PAPER_SETTINGS,
            elbo_samples=8, baselines=baselines.BASELINE_SETTINGS["paper"], base_vae_epochs=100,
            capped=False,
        ),
    }


PRESETS: Dict[str, Preset] = _presets()


# --------------------------------------------------------------------- models
# The baselines' models and strategies live in the library, :mod:`avalanche_sdr.baselines`.


def _baselines(preset: Preset, options: Dict[str, Any]) -> baselines.BaselineSettings:
    """``preset.baselines`` with a run's options (fields of
    :class:`~avalanche_sdr.baselines.BaselineSettings`, e.g. a tuned ``ewc_lambda``) applied.

    :raises TypeError: an option that is not such a field.
    """
    names = {f.name for f in dataclasses.fields(baselines.BaselineSettings)}
    unknown = sorted(set(options) - names)
    if unknown:
        raise TypeError(f"unknown baseline option(s) {unknown}; the options are {sorted(names)}")
    return dataclasses.replace(preset.baselines, **options)



# --------------------------------------------------------------------- oracle


def oracle_choice(task: int, task_groups: Sequence[int], entry_creator: Dict[int, int]) -> Optional[int]:
    """The entry an oracle reuses for ``task``, or ``None`` (new).

    :param task: task label (its position in the stream).
    :param task_groups: ground-truth group of every task label (``stream_groups``).
    :param entry_creator: repository map entry -> creating task.
    :return: the entry created by the first earlier task of the same group, if any.
    """
    group = task_groups[task]
    for entry in sorted(entry_creator, key=lambda e: entry_creator[e]):
        creator = entry_creator[entry]
        if creator != task and task_groups[creator] == group:
            return entry
    return None


class OracleDetector(Detector):
    """A :class:`~avalanche_sdr.detection.base.Detector` deciding from ground truth handed
    over by the harness (never from the experience); reads no generators.

    :param task_groups: ground-truth group of every task label (``stream_groups``).
    """

    rule = "oracle"
    needs_generators = False

    def __init__(self, task_groups: Sequence[int]):
        self.task_groups = [int(g) for g in task_groups]

    def detect(self, model, data):
        """Same contract as ``Detector.detect``; scores are left empty."""
        from avalanche_sdr.detection.decision import DetectionRecord

        reused = oracle_choice(data.task, self.task_groups, dict(model.entry_creator))
        return DetectionRecord.decided(model, task=data.task, entries=model.entries, reused=reused, rule=self.rule)


# --------------------------------------------------------------------- builders


SDR_OPTIONS = {"a": 8, "b": 16, "reuse": "head", **dict.fromkeys(UPDATE_FLAGS)}
"""Options of the SDR rows (a run's ``options``) and their defaults: the EFT group sizes
of the adapters (the paper's a=8, b=16), SDR's memory knob; ``reuse``, what a detected
repeat trains (``SDRStrategy(reuse=...)``, :data:`~avalanche_sdr.vocabulary.REUSE_MODES`: the
paper's ``"head"`` or the learning reuse ``"accumulate"``; ``--reuse``, :func:`reuse_rows`);
the learning reuse's update options (the names of :data:`benchmarks.table2.variants.UPDATE_FLAGS`,
each a :class:`~avalanche_sdr.training.learning_reuse.LearningReuse` keyword,
:data:`benchmarks.table2.variants.UPDATE_KEYWORDS`; ``None``: the library's default; ``--update-balance``
..., :func:`benchmarks.table2.variants.update_rows`). Beside them, ``update_<keyword>`` gives any
other ``LearningReuse`` keyword (``--update-option``, :func:`benchmarks.table2.variants.option_rows`),
checked by the library when the row is built."""


def _sdr_strategy(backbone, stream: StreamSpec, preset: Preset, evaluator, device, options: Dict[str, Any],
                  base_vae=None, detector: Any = "agreement", forward_transfer: bool = False,
                  generators: bool = True, two_sample=None, routers: Sequence[str] = ()):
    """An SDR row the harness configures: the preset's settings with the row's options
    (:data:`SDR_OPTIONS`), a repository sized for ``stream``, and ``detector``: a rule name
    of :data:`~avalanche_sdr.detection.DETECTOR_TYPES`, built with the options it reads of the
    preset's ELBO samples and ``two_sample`` (the test's settings), or a detector object."""
    from avalanche_sdr import LearningReuse, SDRStrategy, build_sdr_model
    from avalanche_sdr.training import make_reuse

    unknown = sorted(k for k in set(options) - set(SDR_OPTIONS) if not k.startswith(UPDATE_PREFIX))
    if unknown:
        raise TypeError(f"unknown SDR option(s) {unknown}; the options are {sorted(SDR_OPTIONS)} and "
                        f"{UPDATE_PREFIX}<keyword> for any LearningReuse keyword {list(LearningReuse.OPTIONS)}")
    eft = dict(SDR_OPTIONS, **options)
    updates = {name[len(UPDATE_PREFIX):]: value for name, value in eft.items()
               if name.startswith(UPDATE_PREFIX) and value is not None}
    if updates and eft["reuse"] != "accumulate":
        raise ValueError(f"update options {sorted(updates)} act only on the learning reuse (reuse='accumulate'), "
                         f"not {eft['reuse']!r}")
    reuse = make_reuse(dict(updates, name="accumulate")) if updates else eft["reuse"]
    generator = ("independent" if base_vae is None else "eft") if generators else None
    model = build_sdr_model(
        copy.deepcopy(backbone), in_channels=stream.in_channels, image_size=stream.image_size,
        a=eft["a"], b=eft["b"], generator=generator, base_vae=base_vae,
        latent_dim=stream.latent_dim, vae_width=stream.vae_width,
    )
    if isinstance(detector, str):  # the rule with the options it reads: the preset's ELBO samples, the test's settings
        from avalanche_sdr.detection import make_detector
        from avalanche_sdr.detection.registry import detector_options

        given = {"elbo_samples": preset.elbo_samples, "settings": two_sample}
        detector = make_detector(detector, **{k: v for k, v in given.items()
                                              if k in detector_options(detector) and v is not None})
    return SDRStrategy(model=model, settings=preset.sdr, reuse=reuse, forward_transfer=forward_transfer, evaluator=evaluator,
                       device=device, routers=routers, detector=detector)


def build_sdr(backbone, benchmark, stream, preset, *, evaluator, device, **options):
    """SDR (EFT for E): agreement rule, independent VAEs."""
    return _sdr_strategy(backbone, stream, preset, evaluator, device, options)


def build_sdr_eft_g(backbone, benchmark, stream, preset, *, evaluator, device, **options):
    """SDR (EFT for E and G): agreement rule, EFT adapters on a base VAE pretrained
    on the warm-start tasks' training inputs."""
    from avalanche_sdr.models import ConvVAE
    from avalanche_sdr.training import pretrain_vae

    warm_start = [benchmark.train_stream[i] for i in range(benchmark.n_warm_start)]
    base_vae = pretrain_vae(
        ConvVAE(stream.in_channels, stream.image_size, latent_dim=stream.latent_dim, width=stream.vae_width),
        warm_start, epochs=preset.base_vae_epochs, lr=2e-3, batch_size=32, device=device, verbose=False,
    )
    return _sdr_strategy(backbone, stream, preset, evaluator, device, options, base_vae=base_vae)


def build_sdr_calibrated(backbone, benchmark, stream, preset, *, evaluator, device, **options):
    """SDR (EFT for E), calibrated decision rule (default thresholds, set on Fashion-MNIST)."""
    return _sdr_strategy(backbone, stream, preset, evaluator, device, options, detector="calibrated")


def build_sdr_calibrated_ft(backbone, benchmark, stream, preset, *, evaluator, device, **options):
    """SDR (EFT for E), calibrated decision rule + forward transfer for new entries."""
    return _sdr_strategy(backbone, stream, preset, evaluator, device, options, detector="calibrated",
                         forward_transfer=True)


def build_sdr_two_sample(backbone, benchmark, stream, preset, *, evaluator, device, **options):
    """SDR (EFT for E), two-sample repeat test; VAEs fitted and counted (paper's repository)."""
    return _sdr_strategy(backbone, stream, preset, evaluator, device, options, detector="two_sample")


def build_sdr_two_sample_nogen(backbone, benchmark, stream, preset, *, evaluator, device, **options):
    """SDR (EFT for E), two-sample repeat test, repository without generators."""
    return _sdr_strategy(backbone, stream, preset, evaluator, device, options, detector="two_sample", generators=False)


def build_sdr_task_free(backbone, benchmark, stream, preset, *, evaluator, device, **options):
    """``sdr_two_sample_nogen`` fitted with the task-free routers of
    :data:`TASK_FREE_ROW_ROUTERS` after each task; run on original class ids."""
    return _sdr_strategy(backbone, stream, preset, evaluator, device, options, detector="two_sample", generators=False,
                         routers=TASK_FREE_ROW_ROUTERS)


def build_sdr_two_sample_entry(backbone, benchmark, stream, preset, *, evaluator, device, **options):
    """The two-sample test in each candidate's own encoder space (no generators)."""
    from avalanche_sdr.detection import TwoSampleSettings

    return _sdr_strategy(backbone, stream, preset, evaluator, device, options, detector="two_sample", generators=False,
                         two_sample=TwoSampleSettings(feature_space="entry"))


def build_sdr_expert_gate(backbone, benchmark, stream, preset, *, evaluator, device, **options):
    """SDR (EFT for E) deciding with Expert Gate's relatedness on E0 features (no VAEs)."""
    return _sdr_strategy(backbone, stream, preset, evaluator, device, options, detector="expert_gate", generators=False)


def build_optimal(backbone, benchmark, stream, preset, *, evaluator, device, **options):
    """Optimal (EFT for E): SDR with ground-truth decisions from ``benchmark.stream_groups``."""
    return _sdr_strategy(backbone, stream, preset, evaluator, device, options,
                         detector=OracleDetector(benchmark.stream_groups))


def _method_preset_builder(name: str) -> Callable[..., Any]:
    """The builder of the row that is the library's method preset ``name`` exactly
    (:attr:`benchmarks.table2.catalogue.MethodEntry.method_preset`):
    ``SDRStrategy.from_benchmark`` on a copy of E0 with ``method=name`` and the preset's
    budget (``Preset.sdr``), so that the detector, reuse and routers are the library's
    defaults, the same objects a user of ``method=name`` gets; the harness gives only what
    sizes the repository for the stream (the VAE's latent size and width, read by a
    preset that fits generators) and, with ``--sweep``, the EFT sizes ``a`` and ``b``."""

    def build(backbone, benchmark, stream, preset, *, evaluator, device, **options):
        from avalanche_sdr import SDRStrategy

        unknown = sorted(set(options) - {"a", "b"})
        if unknown:
            raise TypeError(f"the method preset {name!r} takes the library's own defaults: unknown option(s) "
                            f"{unknown} (a row of a method preset takes only the EFT sizes a and b)")
        return SDRStrategy.from_benchmark(copy.deepcopy(backbone), benchmark, method=name, settings=preset.sdr,
                                          latent_dim=stream.latent_dim, vae_width=stream.vae_width,
                                          evaluator=evaluator, device=device, **options)

    build.__name__ = build.__qualname__ = f"build_sdr_{name}"
    build.__doc__ = f"SDR, ``SDRStrategy.from_benchmark(..., method={name!r})`` with the library's defaults."
    return build


build_sdr_paper = _method_preset_builder("paper")
build_sdr_recommended = _method_preset_builder("recommended")


def build_single_model(backbone, benchmark, stream, preset, *, evaluator, device, **options):
    """Single Model per task: Naive on a fresh copy of E0 + head per task."""
    s = _baselines(preset, options)
    return baselines.single_model_strategy(backbone, **s.training(), evaluator=evaluator, device=device)


def build_new_head(backbone, benchmark, stream, preset, *, evaluator, device, **options):
    """New-Head: Naive, shared backbone trained on all tasks, one head per task."""
    s = _baselines(preset, options)
    return baselines.new_head_strategy(backbone, **s.training(), evaluator=evaluator, device=device)


def build_finetune(backbone, benchmark, stream, preset, *, evaluator, device, **options):
    """Finetune: Naive, shared backbone and one shared head over the max classes."""
    s = _baselines(preset, options)
    return baselines.finetune_strategy(backbone, num_classes=baselines.max_classes(benchmark.train_stream),
                                       **s.training(), evaluator=evaluator, device=device)


def _head(benchmark, options: Dict[str, Any]) -> Dict[str, Any]:
    """Pop the ``shared_head`` option (the paper's protocol, :data:`PROTOCOLS`) from a run's
    options; return the network keywords of ``ewc_strategy`` / ``replay_strategy``."""
    if not options.pop("shared_head", False):
        return {}
    return dict(shared_head=True, num_classes=baselines.max_classes(benchmark.train_stream))


def build_ewc(backbone, benchmark, stream, preset, *, evaluator, device, **options):
    """Online EWC on the multi-head network (option ``shared_head=True``: on the one-head
    network over local labels, the paper's protocol)."""
    head = _head(benchmark, options)
    s = _baselines(preset, options)
    return baselines.ewc_strategy(backbone, **s.training(), ewc_lambda=s.ewc_lambda, decay_factor=s.ewc_decay,
                                  evaluator=evaluator, device=device, **head)


def build_replay(backbone, benchmark, stream, preset, *, evaluator, device, **options):
    """ER: Avalanche Replay (experience-balanced buffer) on the multi-head network (option
    ``shared_head=True``: on the one-head network, the paper's protocol); buffer
    ``replay_mem_size`` images if that option is set, else ``replay_per_class`` per class."""
    head = _head(benchmark, options)
    s = _baselines(preset, options)
    mem_size = s.replay_mem_size
    if mem_size is None:
        mem_size = baselines.replay_mem_size(benchmark.train_stream, s.replay_per_class)
    return baselines.replay_strategy(backbone, mem_size=mem_size, **s.training(), evaluator=evaluator,
                                     device=device, **head)


def build_pnn(backbone, benchmark, stream, preset, *, evaluator, device, **options):
    """PNN: Avalanche ``PNNStrategy`` on a frozen E0 + MLP columns."""
    s = _baselines(preset, options)
    return baselines.pnn_strategy(backbone, **s.training(), evaluator=evaluator, device=device)


def build_generative_replay(backbone, benchmark, stream, preset, *, evaluator, device, **options):
    """DGR: Avalanche ``GenerativeReplay`` on the one-head network, an ``MlpVAE`` generator."""
    s = _baselines(preset, options)
    return baselines.generative_replay_strategy(
        backbone, num_classes=baselines.max_classes(benchmark.train_stream),
        image_shape=(stream.in_channels, stream.image_size, stream.image_size),
        **s.training(), latent_dim=s.dgr_latent_dim, evaluator=evaluator, device=device,
    )


def build_hat(backbone, benchmark, stream, preset, *, evaluator, device, **options):
    """HAT: hard attention to the task on a gated copy of E0, one head per task."""
    s = _baselines(preset, options)
    return baselines.hat_strategy(backbone, **s.training(), s_max=s.hat_s_max, c=s.hat_c,
                                  embedding_lr=s.hat_embedding_lr, evaluator=evaluator,
                                  device=device)


def _class_incremental_builder(name: str, doc: str) -> Callable[..., Any]:
    """The builder of the class-incremental baseline ``name`` of
    :func:`avalanche_sdr.baselines.class_incremental_strategy` (one head over the original
    class ids of the benchmark, which the harness builds with ``original_class_ids=True``)."""

    def build(backbone, benchmark, stream, preset, *, evaluator, device, **options):
        return baselines.class_incremental_strategy(name, backbone, benchmark.train_stream,
                                                    _baselines(preset, options), evaluator=evaluator, device=device)

    build.__name__ = build.__qualname__ = f"build_ci_{name}"
    build.__doc__ = doc
    return build


build_ci_replay = _class_incremental_builder(
    "replay", "ER, class-incremental: Avalanche Replay on one head over the class ids; buffer "
    "``replay_mem_size`` images if that option is set, else ``replay_per_class`` per (task, class) pair.")
build_ci_ewc = _class_incremental_builder("ewc", "Online EWC, class-incremental: one head over the class ids.")
build_joint = _class_incremental_builder(
    "joint", "Joint training (Avalanche JointTraining) on one head over the class ids: train once on the whole "
    "stream.")


def _closed_form_builder(name: str, doc: str) -> Callable[..., Any]:
    """The builder of the closed-form learner ``name`` of
    :func:`avalanche_sdr.closed_form.closed_form_strategy` (one head over the original class
    ids of the benchmark, which the harness builds with ``original_class_ids=True``; its
    random map drawn with the stream's seed)."""

    def build(backbone, benchmark, stream, preset, *, evaluator, device, **options):
        from avalanche_sdr.closed_form import closed_form_strategy

        return closed_form_strategy(name, backbone, benchmark.train_stream, _baselines(preset, options),
                                    seed=benchmark.seed, evaluator=evaluator, device=device)

    build.__name__ = build.__qualname__ = f"build_{name}"
    build.__doc__ = doc
    return build


build_slda = _closed_form_builder(
    "slda", "SLDA: Avalanche StreamingLDA on the frozen E0's features, over the class ids (option slda_shrinkage).")
build_ranpac = _closed_form_builder(
    "ranpac", "RanPAC: a frozen relu random projection of E0's features and ridge-regression prototypes over the "
    "class ids (options ranpac_dim, ranpac_ridge).")
build_klda = _closed_form_builder(
    "klda", "KLDA: random Fourier features of E0's features and one shared-covariance LDA over the class ids "
    "(options klda_dim, klda_gamma, klda_shrinkage).")


@dataclass(frozen=True)
class Method:
    """One row of the table.

    :param name: command-line name.
    :param label: row label (the paper's name).
    :param build: the builder.
    :param is_sdr: an :class:`SDRStrategy` row (has detection outcomes).
    :param task_free: the run uses the stream with the dataset's original class ids
        (``StreamSpec.build(..., original_class_ids=True)``; same E0 as every row) and
        reports task-free accuracies (``"task_free"`` in its run JSON).
    :param routers: a task-free SDR row's routers, those its builder gives the strategy
        and its run is scored with (:class:`~avalanche_sdr.evaluation.TaskFreeMetrics`).
    """

    name: str
    label: str
    build: Callable[..., Any]
    is_sdr: bool = False
    task_free: bool = False
    routers: Tuple[Any, ...] = ()


def _method(name: str, build: Callable[..., Any], routers: Sequence[Any] = ()) -> Method:
    """The :class:`Method` ``name`` with its label and flags read from
    :data:`benchmarks.table2.catalogue.METHODS` (defined there once, for the parsers)."""
    entry = catalogue.METHODS[name]
    return Method(name, entry.label, build, entry.is_sdr, task_free=entry.task_free, routers=tuple(routers))


def _preset_routers(name: str) -> Tuple[Any, ...]:
    """The routers of the library's method preset ``name`` (``SDRStrategy(method=name)``'s default)."""
    from avalanche_sdr.training import METHODS as PRESET_METHODS

    return tuple(PRESET_METHODS[name].routers)


METHODS: Dict[str, Method] = {
    m.name: m
    for m in (
        _method("optimal", build_optimal),
        _method("single_model", build_single_model),
        _method("finetune", build_finetune),
        _method("new_head", build_new_head),
        _method("replay", build_replay),
        _method("ewc", build_ewc),
        _method("dgr", build_generative_replay),
        _method("pnn", build_pnn),
        _method("hat", build_hat),
        _method("sdr", build_sdr),
        _method("sdr_eft_g", build_sdr_eft_g),
        _method("sdr_calibrated", build_sdr_calibrated),
        _method("sdr_calibrated_ft", build_sdr_calibrated_ft),
        _method("sdr_expert_gate", build_sdr_expert_gate),
        _method("sdr_two_sample", build_sdr_two_sample),
        _method("sdr_two_sample_nogen", build_sdr_two_sample_nogen),
        _method("sdr_two_sample_entry", build_sdr_two_sample_entry),
        _method("sdr_task_free", build_sdr_task_free, routers=TASK_FREE_ROW_ROUTERS),
        _method("ci_replay", build_ci_replay),
        _method("ci_ewc", build_ci_ewc),
        _method("joint", build_joint),
        _method("slda", build_slda),
        _method("ranpac", build_ranpac),
        _method("klda", build_klda),
        _method("sdr_paper", build_sdr_paper),
        _method("sdr_recommended", build_sdr_recommended, routers=_preset_routers("recommended")),
    )
}
"""Rows in the paper's order, then the library's method presets."""


SDR_ROUTER = catalogue.SDR_ROUTER
"""SDR's recommended task-free router (:data:`benchmarks.table2.catalogue.SDR_ROUTER`, defined there
once): an equal-memory row sized to a task-free SDR run meets that run's memory with this
router's state only."""


def size_equal_memory(row: Row, backbone, benchmark, target_bytes: int):
    """Size ER's buffer for ``row`` (an :func:`benchmarks.table2.variants.equal_memory_rows` row) on ``benchmark`` so
    that its memory after the stream meets ``target_bytes``
    (:func:`avalanche_sdr.baselines.size_replay_buffer`, on the network the row's options
    give; a ``ci_replay`` row: one head over the class ids, ``benchmark`` built with
    ``original_class_ids=True``).

    :return: ``(row with the option replay_mem_size, sizing)``, or ``(None, sizing)`` when
        the sizing is ``"infeasible"`` (nothing to run).
    """
    options = dict(row.options)
    if METHODS[row.method].task_free:
        head = dict(shared_head=True, num_classes=baselines.class_incremental_classes(benchmark.train_stream))
    else:
        head = _head(benchmark, options)
    sizing = baselines.size_replay_buffer(backbone, benchmark.train_stream, target_bytes, **head)
    if sizing.mem_size is None:
        return None, sizing
    return Row(row.method, row.variant, row.options + (("replay_mem_size", sizing.mem_size),)), sizing


__all__ = ["METHODS", "PRESETS", "SDR_ROUTER", "STREAMS", "Method", "OracleDetector", "Preset", "StreamSpec",
           "oracle_choice", "size_equal_memory"]
