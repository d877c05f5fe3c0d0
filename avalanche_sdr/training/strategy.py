"""``SDRStrategy``: SDR on Avalanche's supervised template."""
from __future__ import annotations

import os
import inspect
import sys
from typing import Any, Dict, Iterable, List, NamedTuple, Optional, Sequence, Tuple, Union

import torch
from avalanche.training import plugins as avalanche_plugins
from avalanche.training.templates import SupervisedTemplate

from avalanche_sdr._batching import eval_batch_size
from avalanche_sdr.detection.base import Detector
from avalanche_sdr.detection.decision import DetectionRecord
from avalanche_sdr.detection.registry import make_detector
from avalanche_sdr.detection.two_sample import pretraining_record
from avalanche_sdr.evaluation.class_incremental import ClassIncrementalEvalPlugin, check_eval_router
from avalanche_sdr.models.repository import SDRModel, build_sdr_model
from avalanche_sdr.routers.routing import check_routers
from avalanche_sdr.training.checkpoint import SDRCheckpointPlugin
from avalanche_sdr.training.frozen_features import FrozenFeaturesPlugin
from avalanche_sdr.training.methods import DEFAULT_METHOD, MethodPreset, resolve_method
from avalanche_sdr.training.learning_reuse import MOVED_SETTINGS
from avalanche_sdr.training.presets import PAPER_SETTINGS, SDRSettings, resolve_settings
from avalanche_sdr.training.reuse_registry import ReuseSpec, make_reuse
from avalanche_sdr.training.sdr_plugin import SDRFreezePlugin, SDRPlugin

MODEL_OPTIONS = tuple(
    name for name in inspect.signature(build_sdr_model).parameters if name not in ("backbone", "in_channels", "image_size")
)
"""Keywords of :func:`~avalanche_sdr.models.build_sdr_model` that
:meth:`SDRStrategy.from_benchmark` passes on to it."""

class _Routed:
    """Shown as the default of a keyword that :class:`SDRStrategy` passes on elsewhere."""

    def __init__(self, where: str):
        self.where = where

    def __repr__(self) -> str:
        return f"<{self.where}>"


_SDR_SCHEDULE = ("new_task_lr", "lr_milestones", "lr_decay", "reuse_lr", "new_task_epochs", "reuse_epochs")
_NEEDS_NCM = "it updates a model's eval_classifier (NCMClassifier or FeCAMClassifier); SDR's heads are per-task layers"
_PROJECTS_GRADIENTS = (
    "it projects the gradient so that earlier tasks' losses do not grow, but in SDR those losses depend on no "
    "trainable parameter (earlier entries and heads are frozen): its backward on memory samples fails"
)
_NEEDS_GENERATIVE_REPLAY = ("it trains or samples a generator strategy for generative replay; SDR fits its own "
                            "generators, one per entry, and never replays")

REFUSED_PLUGINS: Dict[type, str] = {
    avalanche_plugins.LRSchedulerPlugin: (
        "SDR builds a fresh Adam per experience over what the experience trains (a new head and adapter set, "
        "or the head alone on reuse), so a scheduler bound to your optimizer would never change the learning "
        "rate SDR trains with; set SDR's own schedule instead, as SDRSettings fields or SDRStrategy keywords: "
        + ", ".join(_SDR_SCHEDULE) + " (a learning reuse's update: its lr and epochs options, "
        "reuse=LearningReuse(lr=..., epochs=...))"
    ),
    avalanche_plugins.GDumbPlugin: (
        "it retrains a copy of the initial model from its buffer at every experience, which would discard the "
        "repository's entries and heads"
    ),
    avalanche_plugins.FromScratchTrainingPlugin: (
        "it resets the model's parameters before every experience, which would erase the entries and heads "
        "trained so far"
    ),
    avalanche_plugins.CWRStarPlugin: (
        "it overwrites and consolidates the weights of one linear layer of the model and freezes the rest, "
        "which would change an earlier task's head and freeze the adapters SDR trains"
    ),
    avalanche_plugins.GEMPlugin: _PROJECTS_GRADIENTS,
    avalanche_plugins.AGEMPlugin: _PROJECTS_GRADIENTS,
    avalanche_plugins.RWalkPlugin: (
        "it keeps per-parameter state created before model adaptation and fails on parameters a growing model "
        "adds (SDR adds a head, and for a new task adapters, every experience)"
    ),
    avalanche_plugins.BiCPlugin: (
        "it corrects the bias of a single-head class-incremental classifier; SDR has a head per task"
    ),
    avalanche_plugins.CoPEPlugin: "it learns class prototypes of a single-head class-incremental model's last layer",
    avalanche_plugins.GSS_greedyPlugin: (
        "it selects replay samples for a single-head (class-incremental) model and calls the model without "
        "task labels; SDR's repository has a head per task"
    ),
    avalanche_plugins.RARPlugin: (
        "it extracts features by tracing the model with torch.fx, which fails on SDR's model (it routes every "
        "mini-batch by task label)"
    ),
    avalanche_plugins.LFLPlugin: (
        "it needs an Avalanche BaseModel with get_features(); SDR's features depend on the task's entry"
    ),
    avalanche_plugins.FeatureDistillationPlugin: (
        "it needs a model that stores its last features in model.features; SDR's features depend on the task's entry"
    ),
    avalanche_plugins.CurrentDataNCMUpdate: _NEEDS_NCM,
    avalanche_plugins.MemoryNCMUpdate: _NEEDS_NCM,
    avalanche_plugins.NCMOracle: _NEEDS_NCM,
    avalanche_plugins.CurrentDataFeCAMUpdate: _NEEDS_NCM,
    avalanche_plugins.MemoryFeCAMUpdate: _NEEDS_NCM,
    avalanche_plugins.FeCAMOracle: _NEEDS_NCM,
    avalanche_plugins.GenerativeReplayPlugin: _NEEDS_GENERATIVE_REPLAY,
    avalanche_plugins.TrainGeneratorAfterExpPlugin: _NEEDS_GENERATIVE_REPLAY,
}
"""Avalanche 0.6.0 plugins that :class:`SDRStrategy` refuses, with the reason given in
its error (the table of docs/plugins.rst). Subclasses are refused too."""


def check_plugins(plugins: Iterable, appended: bool = False) -> None:
    """Refuse the plugins :class:`SDRStrategy` cannot honour (:data:`REFUSED_PLUGINS`).

    :param plugins: the ``plugins`` passed to :class:`SDRStrategy`, or its
        ``strategy.plugins`` at the start of ``train()`` (``appended``: the message says a
        plugin appended after construction is refused there too).
    :raises ValueError: a plugin that is an instance of a refused type, with the reason.
    """
    for plugin in plugins:
        for kind, reason in REFUSED_PLUGINS.items():
            if isinstance(plugin, kind):
                where = " (appended to strategy.plugins after construction; checked again by train())" if appended else ""
                raise ValueError(f"SDRStrategy cannot use {type(plugin).__name__}{where}: {reason} "
                                 "(see docs/plugins.rst)")


def default_evaluator():
    """The evaluator of an :class:`SDRStrategy` built without ``evaluator=``: quiet.

    Avalanche's own default prints a progress bar per epoch and every metric after
    every experience (hundreds of lines on a ten-task stream). SDR's default keeps
    Avalanche's accuracy and loss metrics (per experience and per stream, returned by
    ``strategy.eval``) and prints one line per task, its decision
    (:class:`~avalanche_sdr.evaluation.DecisionLogger`), on **stderr**, so that a
    script's own prints on stdout stay what they are from run to run (the line holds
    the task's wall-clock seconds). Pass ``evaluator=`` for anything else, e.g.
    :func:`~avalanche_sdr.evaluation.sdr_evaluation_plugin` (progress bars, text and
    CSV logs, SDR's detection and memory metrics) or
    ``EvaluationPlugin(accuracy_metrics(experience=True), loggers=[])`` (silent).
    """
    import sys

    from avalanche.evaluation.metrics import accuracy_metrics, loss_metrics
    from avalanche.training.plugins import EvaluationPlugin

    from avalanche_sdr.evaluation.decision_logger import DecisionLogger

    return EvaluationPlugin(accuracy_metrics(experience=True, stream=True), loss_metrics(experience=True, stream=True),
                            loggers=[DecisionLogger(file=sys.stderr)])


SETTING_KEYWORDS = SDRSettings.field_names()
"""The :class:`~avalanche_sdr.training.SDRSettings` fields (the training budget) that
:class:`SDRStrategy` also takes as keywords, each replacing that value of ``settings``."""


def _with_routed_keywords(init):
    """``init``'s signature with the keywords it routes by name (:data:`SETTING_KEYWORDS`)
    listed as keyword-only parameters.

    Avalanche's templates refuse keywords that no ``__init__`` of the class hierarchy
    names (a guard against misspellings); listing the routed names here keeps that
    guard working, and shows them in ``help(SDRStrategy)``, without defining them a
    second time.
    """
    signature = inspect.signature(init)
    params = list(signature.parameters.values())
    keyword = inspect.Parameter.KEYWORD_ONLY
    routed = [inspect.Parameter(name, keyword, default=_Routed("settings")) for name in SETTING_KEYWORDS]
    init.__signature__ = signature.replace(parameters=params[:-1] + routed + params[-1:])
    return init


def _refuse_reuse_options(kwargs: Dict[str, Any]) -> None:
    """A learning-reuse option given as a keyword under its former settings name: say where
    it goes now (before Avalanche's check of misspelled keywords, which would not)."""
    given = sorted(set(kwargs) & set(MOVED_SETTINGS))
    if given:
        example = ", ".join(f"{MOVED_SETTINGS[name]}={kwargs[name]!r}" for name in given)
        raise TypeError(f"{given} are options of the learning reuse object: write reuse=LearningReuse({example}) "
                        "(from avalanche_sdr import LearningReuse)")


def benchmark_input_shape(benchmark) -> Tuple[int, int, int]:
    """The (C, H, W) shape of one input of ``benchmark``'s first training experience.

    :param benchmark: an Avalanche benchmark (``train_stream`` of experiences whose
        datasets yield ``(x, y, task)`` with ``x`` a C x H x W tensor).
    :raises ValueError: an empty first experience, or inputs that are not C x H x W
        tensors (e.g. PIL images without a ``ToTensor`` transform).
    """
    experience = next(iter(benchmark.train_stream))
    dataset = experience.dataset
    if len(dataset) == 0:
        raise ValueError("the benchmark's first training experience is empty; cannot read the input shape")
    x = dataset[0][0]
    if not isinstance(x, torch.Tensor) or x.dim() != 3:
        raise ValueError(
            f"the benchmark's inputs must be C x H x W tensors, got {type(x).__name__}"
            f"{' of shape ' + str(tuple(x.shape)) if isinstance(x, torch.Tensor) else ''}; "
            "add a ToTensor transform"
        )
    return tuple(int(d) for d in x.shape)


def _check_generators(detector: Detector, has_generators: bool, remedy: str) -> None:
    """Refuse a detector that scores entries with their generators on a repository
    without them; ``remedy``: how to give the repository generators."""
    if detector.needs_generators and not has_generators:
        raise ValueError(f"the {detector.rule!r} detector scores entries with their generators, but "
                         f"{remedy} or use detector='two_sample'")


class _Repository:
    """The repository :meth:`SDRStrategy.from_benchmark` asks for, built by
    :class:`SDRStrategy` only once every other argument passed its checks
    (:meth:`build`, with the generator the detector reads).

    :param backbone: the user's E0 (:func:`~avalanche_sdr.models.build_sdr_model`
        copies it).
    :param in_channels: C of the benchmark's images.
    :param image_size: H == W of the benchmark's images.
    :param options: keywords of ``build_sdr_model`` (:data:`MODEL_OPTIONS`).
    """

    def __init__(self, backbone: torch.nn.Module, in_channels: int, image_size: int, options: Dict[str, Any]):
        self.backbone, self.in_channels, self.image_size, self.options = backbone, in_channels, image_size, options

    def build(self, detector: Detector) -> SDRModel:
        """``build_sdr_model`` with the generator following ``detector`` unless given.

        :raises ValueError: an explicit generator the detector never reads, or none for
            a detector that reads them.
        """
        options = dict(self.options)
        if "generator" not in options:
            options["generator"] = "independent" if detector.needs_generators else None
        elif options["generator"] is not None and not detector.needs_generators:
            raise ValueError(
                f"generator={options['generator']!r} trains a generator per entry that the "
                f"{detector.rule!r} detector never reads; remove generator= (it follows the detector) or "
                "write generator=None")
        _check_generators(detector, options["generator"] is not None,
                          "from_benchmark was given generator=None; remove generator= (it follows the detector)")
        return build_sdr_model(self.backbone, in_channels=self.in_channels, image_size=self.image_size, **options)


class _Plan(NamedTuple):
    """:meth:`SDRStrategy._resolve`'s checked arguments and what it built from them."""

    preset: MethodPreset
    sdr: SDRPlugin  # holds the settings, detector, reuse and routers
    eval_router: Optional[str]
    user_plugins: List[Any]
    eval_mb_size: int
    checkpoint: Optional[SDRCheckpointPlugin]
    template_kwargs: Dict[str, Any]  # passed on to Avalanche's template


class SDRStrategy(SupervisedTemplate):
    """Similar-task Detection and Repurposing (Wang et al., 2022) for task-aware CL.

    For every training experience (one task, task labels given) the strategy first
    decides — on the task's training data, before any training — whether an earlier
    unique entry of the repository is similar:

    - the first ``n_warm_start`` tasks are trained as new without detection;
    - afterwards the ``detector`` scores every entry and decides (the paper's
      ``"agreement"`` rule: p(P_t = P_j) from the VAEs, eq. 5, and S(j, t), eqs. 7–8,
      reuse when argmax p == argmin S);
    - *reuse*: the task is mapped to that entry and what trains is the ``reuse``'s: the
      paper's, only a new head (``settings.reuse_epochs`` at ``settings.reuse_lr``); with
      ``reuse="accumulate"`` the entry keeps training (its options, ``LearningReuse``);
    - *new*: a new EFT adapter set and head train (``settings.new_task_epochs`` at
      ``settings.new_task_lr`` with step decay), then a new generator G when the
      repository keeps them.

    Evaluation is task-aware: task t is predicted by f_t(E_{m(t)}(x)); :meth:`predict`
    predicts without task labels through a task-free router, and with ``eval_router``
    the evaluation is class-incremental instead (see below).

    The decision of every experience is in :attr:`detection_records`
    (:class:`~avalanche_sdr.detection.DetectionRecord`, ``to_dict()`` for JSON) and
    goes to the evaluator's loggers (:data:`~avalanche_sdr.training.sdr_plugin.REPORTED_VALUES`).
    :meth:`from_benchmark` builds the repository and the strategy in one call.

    Every argument is checked before the repository changes: a refused call leaves
    ``model`` (and everything else passed) as it was, and the corrected call can use it.
    The strategy then owns ``model`` and trains it; E0 inside it is the repository's own
    copy (:func:`~avalanche_sdr.models.build_sdr_model` copies the backbone it is given),
    so the user's E0 never changes.

    :param model: the repository, an :class:`~avalanche_sdr.models.SDRModel`.
    :param method: a method preset, a name of :data:`~avalanche_sdr.training.METHODS`
        or a :class:`~avalanche_sdr.training.MethodPreset`: ``"paper"`` (default: the
        agreement rule, head-only reuse, no router) or ``"recommended"`` (the small-task
        rule: the two-sample test with classes matched in any order at a level falling
        with task size, on references E0 was pretrained without; ``reuse="accumulate"``,
        ``forward_transfer=True``, the router ``"lda_weighted"``). It supplies the defaults of
        ``detector``, ``reuse``, ``forward_transfer`` and ``routers``; a keyword given here wins
        (``method="recommended", reuse="head"``).
    :param settings: the training budget, an
        :class:`~avalanche_sdr.training.SDRSettings` or a budget name of
        :data:`~avalanche_sdr.training.BUDGETS` (``"paper"``, default; ``"cpu"``, the
        CPU budget of every results page; ``"cpu_large_task"``).
    :param reuse: what a detected repeat trains: a name of
        :data:`~avalanche_sdr.training.reuse_registry.REUSE_TYPES` (``"head"``, the paper's;
        ``"accumulate"``, the learning reuse; ``"no_loss"``, the learning reuse under the
        keep rule), built with its default options, or a reuse object with its options
        (e.g. ``LearningReuse(epochs=3)``, ``NoLossReuse(lr=0.002)``): a
        :class:`~avalanche_sdr.training.reuse.Reuse`; the strategy keeps its own copy. Or
        its configuration, the JSON-writable mapping ``Reuse.config()`` returns
        (``{"name": "accumulate", "epochs": 3}``; :func:`~avalanche_sdr.training.reuse_registry.make_reuse`).
        Default: the method's.
    :param detector: how a new task is compared with the repository: a rule name of
        :data:`~avalanche_sdr.detection.DETECTOR_TYPES` (``"agreement"``, the paper's;
        ``"calibrated"``; ``"two_sample"``, a level-``alpha`` repeat test on E0 features
        that needs no generators; ``"small_task"``, the two-sample test with a fallback
        for tasks of few images a class; ``"expert_gate"``, a baseline), built with its
        default options, or a detector object with its options (e.g.
        ``TwoSampleDetector(TwoSampleSettings(match_classes=True))``,
        ``AgreementDetector(elbo_samples=8)``): a
        :class:`~avalanche_sdr.detection.base.Detector`, which says what the strategy
        needs of it (whether it reads generators, ``detect``, ``remember``, its
        configuration, how its records read); a detector of your own is one subclass.
        When the strategy is built, the detector is handed the
        :class:`~avalanche_sdr.detection.PretrainingRecord` of the repository's E0
        (``use_pretraining``: ``pretrain_backbone``'s record, ``None`` without one; the
        two-sample and small-task rules then warn,
        :class:`~avalanche_sdr.detection.ReferenceWarning`). Default: the method's.
    :param n_warm_start: number of first tasks trained as new without detection
        (paper 3).
    :param forward_transfer: start a new entry's adapters from the entry with the
        lowest S(j, t) (rules without S: the highest p-value or relatedness) instead of
        from the identity. ``None`` (default): the method's (``"paper"``: off, as the
        paper; ``"recommended"``: on).
    :param routers: task-free routers to fit after every task: names of
        :data:`~avalanche_sdr.routers.ROUTER_TYPES` or router objects with their options
        (``"lda_weighted"`` / :class:`~avalanche_sdr.routers.LDAWeightedRouter`, SDR's
        recommended router; ``"lda"``; ``"gaussian"``, SDR's first; ``"expert_gate"``,
        a baseline), so that :meth:`predict` answers without task labels and
        :class:`~avalanche_sdr.evaluation.TaskFreeMetrics` can score them. Their state
        counts in the repository's memory. Default: the method's (``"paper"``: none,
        task-aware only, as the paper).
    :param eval_router: ``None`` (default): evaluation is task-aware. A name in
        ``routers``: evaluation ignores the experiences' task labels and predicts with
        ``model.predict(x, eval_router)``; ``mb_output`` is then a float [N, K] tensor
        over the original class ids whose argmax is that prediction (the routed
        head's logits at its class-id columns, the lowest finite value elsewhere), so
        that Avalanche's own metrics (``accuracy_metrics``,
        ``class_accuracy_metrics``, ``confusion_matrix_metrics``) and loggers score
        task-free predictions on a class-incremental test stream
        (:func:`~avalanche_sdr.benchmarks.class_incremental_stream`). Labels must be
        original class ids. Training is unchanged. Rules (no task finished yet, local
        labels, a repository without the router's state, the loss):
        :mod:`avalanche_sdr.evaluation.class_incremental`.
    :param checkpoint_dir: directory to save a checkpoint to after every finished
        training experience (:class:`~avalanche_sdr.training.checkpoint.SDRCheckpointPlugin`,
        run after every other plugin); :meth:`restore_checkpoint` resumes from it.
        ``None`` (default): no checkpoints.
    :param kwargs: by name, each of

        - a setting of :class:`~avalanche_sdr.training.SDRSettings` of
          :data:`SETTING_KEYWORDS` (e.g. ``reuse_epochs=10``): replaces that value of
          ``settings``; a learning-reuse option under its former settings name
          (:data:`~avalanche_sdr.training.learning_reuse.MOVED_SETTINGS`, e.g.
          ``reuse_guard``) is refused with a message naming the reuse object's keyword;
        - any other keyword of Avalanche's ``SupervisedTemplate`` (``device``,
          ``plugins``, ``evaluator`` (default: :func:`default_evaluator`, one line per
          task on stderr), ``eval_every``, ``peval_mode``, ...), passed
          through. ``optimizer``, ``criterion`` and ``train_epochs`` are SDR's own
          and refused. Which of Avalanche's plugins work with SDR: docs/plugins.rst;
          the refused ones are in :data:`REFUSED_PLUGINS`, refused here and again by
          :meth:`train` when appended to ``strategy.plugins`` afterwards.
    :raises TypeError: ``model`` is not an ``SDRModel``; a keyword SDR sets itself; a
        learning-reuse option given as a keyword; a detector that is not a ``Detector``;
        a reuse that is neither a name, a ``Reuse`` nor a configuration mapping.
    :raises ValueError: an unknown method, budget, rule, reuse or router; a detector that reads
        generators on a repository without them; an ``eval_router`` that is not one of
        ``routers``; a plugin SDR
        cannot honour (:data:`REFUSED_PLUGINS`, e.g. ``LRSchedulerPlugin``: set
        ``new_task_lr``, ``lr_milestones``, ``lr_decay`` and ``reuse_lr`` instead); a
        ``forward_transfer`` that is neither a bool nor ``None``; a device torch does not know.
    """

    def __new__(cls, *args, **kwargs):
        _refuse_reuse_options(kwargs)  # before Avalanche's check of misspelled keywords
        return super().__new__(cls)

    @_with_routed_keywords
    def __init__(
        self,
        *,
        model: SDRModel,
        method: Union[str, MethodPreset] = DEFAULT_METHOD,
        settings: Union[str, SDRSettings] = PAPER_SETTINGS,
        detector=None,
        reuse: Optional[ReuseSpec] = None,
        n_warm_start: int = 3,
        forward_transfer: Optional[bool] = None,
        routers: Optional[Sequence] = None,
        eval_router: Optional[str] = None,
        checkpoint_dir: Optional[Union[str, os.PathLike]] = None,
        **kwargs,
    ):
        if not isinstance(model, (SDRModel, _Repository)):
            raise TypeError(f"SDRStrategy needs an SDRModel repository, got {type(model).__name__}")
        # Every argument is checked, and everything SDR builds from them is built, before
        # the repository is built (from_benchmark) or changed: a refused call leaves no trace.
        plan = self._resolve(method=method, settings=settings, detector=detector, reuse=reuse, n_warm_start=n_warm_start,
                             forward_transfer=forward_transfer, routers=routers, eval_router=eval_router,
                             checkpoint_dir=checkpoint_dir, kwargs=kwargs)
        detector = plan.sdr.detector
        if isinstance(model, _Repository):
            model = model.build(detector)
        _check_generators(detector, model.has_generators, "the model was built with generator=None; build it with "
                          "generator='independent'")
        # What E0 was pretrained on (pretrain_backbone's record, on the repository's copy of E0).
        detector.use_pretraining(pretraining_record(model.encoder.backbone))
        self.method = plan.preset.name
        """The name of the method preset the strategy was built from (its defaults; the
        keywords given win): recorded in results and checkpoints beside the expanded values."""
        self.sdr = plan.sdr
        self.frozen_features = FrozenFeaturesPlugin(self.sdr)
        """Trains a head-only experience on features computed once
        (:mod:`~avalanche_sdr.training.frozen_features`); ``enabled = False`` keeps the
        per-epoch path."""
        self.eval_router = plan.eval_router
        self.class_incremental: Optional[ClassIncrementalEvalPlugin] = (
            None if plan.eval_router is None else ClassIncrementalEvalPlugin(plan.eval_router))
        # Replaced per experience by make_optimizer; Avalanche needs one to start.
        initial_optimizer = torch.optim.Adam(model.parameters(), lr=plan.sdr.settings.new_task_lr)
        sdr_plugins = [self.sdr, self.frozen_features] + ([] if self.class_incremental is None
                                                           else [self.class_incremental])
        super().__init__(
            model=model,
            optimizer=initial_optimizer,
            criterion=torch.nn.CrossEntropyLoss(),
            train_mb_size=plan.sdr.settings.train_mb_size,
            train_epochs=plan.sdr.settings.new_task_epochs,
            eval_mb_size=plan.eval_mb_size,
            plugins=sdr_plugins + plan.user_plugins,
            **plan.template_kwargs,
        )
        # After the user's plugins, Avalanche's evaluator, periodic eval and clock: those
        # that need gradients of what the experience trained get them before the freeze.
        self.plugins.append(SDRFreezePlugin())
        self.checkpoint: Optional[SDRCheckpointPlugin] = plan.checkpoint
        if self.checkpoint is not None:
            # Appended after Avalanche's evaluator, periodic eval and clock: a checkpoint
            # is taken once everything else has finished the experience.
            self.plugins.append(self.checkpoint)
        model.keep_routers(plan.sdr.routers)

    @classmethod
    def _resolve(cls, *, method, settings, detector, reuse, n_warm_start: int, forward_transfer: Optional[bool],
                 routers, eval_router: Optional[str], checkpoint_dir, kwargs: Dict[str, Any]) -> "_Plan":
        """Check every argument of :class:`SDRStrategy` but the model, and build what SDR
        builds from them (settings, detector, reuse, routers, plugins): nothing the user passed
        changes, so a refused call leaves no trace. ``kwargs`` (the other keywords) is
        read, not changed."""
        kwargs = dict(kwargs)
        preset = resolve_method(method)
        settings = resolve_settings(settings)
        own = sorted(set(kwargs) & {"optimizer", "criterion", "train_epochs"})
        if own:
            raise TypeError(f"SDRStrategy sets {own} itself (per experience); remove them")
        if "verbose" in kwargs:
            raise TypeError(
                "SDRStrategy has no verbose option: its per-task lines go to the evaluator's loggers "
                "(silence them with evaluator=EvaluationPlugin(..., loggers=[]))"
            )
        defaults = preset.defaults()
        changes = {k: kwargs.pop(k) for k in SETTING_KEYWORDS if k in kwargs}
        settings = settings.replace(**changes)
        detector = make_detector(defaults["detector"] if detector is None else detector)
        reuse = make_reuse(defaults["reuse"] if reuse is None else reuse)
        routers = check_routers(defaults["routers"] if routers is None else routers)
        if forward_transfer is None:
            forward_transfer = defaults["forward_transfer"]
        if not isinstance(forward_transfer, bool):
            raise ValueError(f"forward_transfer must be a bool (or None: the method's), got {forward_transfer!r}")
        sdr = SDRPlugin(detector=detector, settings=settings, reuse=reuse, n_warm_start=n_warm_start,
                        forward_transfer=forward_transfer, routers=routers)
        eval_router = check_eval_router(eval_router, sdr.routers)
        user_plugins = list(kwargs.pop("plugins", None) or [])
        check_plugins(user_plugins)
        eval_batch_size(kwargs.get("device"))  # a device torch knows
        eval_mb_size = eval_batch_size(kwargs.get("device"), settings.eval_mb_size, "eval_mb_size")
        kwargs.setdefault("evaluator", default_evaluator)
        checkpoint = None if checkpoint_dir is None else SDRCheckpointPlugin(checkpoint_dir)
        return _Plan(preset, sdr, eval_router, user_plugins, eval_mb_size, checkpoint, kwargs)

    @classmethod
    def from_benchmark(cls, backbone: torch.nn.Module, benchmark, **kwargs) -> "SDRStrategy":
        """Build the repository around a copy of ``backbone`` for ``benchmark``'s images,
        and the strategy.

        The image shape (C, H, W) is read from the first training experience
        (:func:`benchmark_input_shape`), so nothing the benchmark knows is restated. The
        generator follows the detector: without ``generator=``, a detector that reads
        generators gets a VAE per entry (``"independent"``) and one that reads none
        (``"two_sample"``, ``"expert_gate"``, ``method="recommended"``) gets none.

        ``backbone`` stays yours: the repository is built around its own deep copy
        (:func:`~avalanche_sdr.models.build_sdr_model`), which SDR wraps and freezes, so
        the module passed keeps its weights, ``requires_grad`` flags, classes and
        submodules, during training too, and can start another learner (e.g. the
        baselines' :func:`~avalanche_sdr.baselines.make_multi_head_net`). Every argument
        is checked before the repository is built: a refused call leaves ``backbone``
        and the other arguments as they were, so the corrected call can follow.

        :param backbone: E0 (e.g. :func:`~avalanche_sdr.models.small_cnn_backbone`,
            usually pretrained); copied, not changed.
        :param benchmark: an Avalanche benchmark with a ``train_stream`` of square
            images.
        :param kwargs: by name, keywords of :func:`~avalanche_sdr.models.build_sdr_model`
            (``generator``, ``a``, ``b``, ``latent_dim``, ``vae_width``, ...) and
            everything :class:`SDRStrategy` takes (``method``, ``settings``,
            ``detector``, ``routers``, ...).
        :return: the strategy; its repository is ``strategy.model``.
        :raises TypeError: an unknown keyword; the errors of :class:`SDRStrategy`.
        :raises ValueError: the benchmark's images are not square C x H x W tensors; an
            explicit ``generator`` that the detector does not read (no generator trains
            that nothing reads: remove ``generator=`` or write ``generator=None``), or
            ``generator=None`` with a detector that reads generators; the errors of
            :class:`SDRStrategy` and :func:`~avalanche_sdr.models.build_sdr_model`.
        """
        channels, height, width = benchmark_input_shape(benchmark)
        if height != width:
            raise ValueError(f"SDR's generators model square images; the benchmark's are {height}x{width}")
        model_options = {k: kwargs.pop(k) for k in list(kwargs) if k in MODEL_OPTIONS}
        # SDRStrategy checks every other keyword (Avalanche's check of misspelled names
        # first) and builds the repository from this recipe only once they all pass.
        return cls(model=_Repository(backbone, channels, height, model_options), **kwargs)

    def train(self, experiences, eval_streams=None, **kwargs):
        """Avalanche's ``train``, after refusing the plugins SDR cannot honour that were
        appended to ``strategy.plugins`` after construction (:data:`REFUSED_PLUGINS`)."""
        check_plugins(self.plugins, appended=True)
        return super().train(experiences, eval_streams, **kwargs)

    def predict(self, x: torch.Tensor, router=None):
        """Task-free prediction: ``self.model.predict(x, router)``
        (:meth:`~avalanche_sdr.models.SDRModel.predict`).

        :param x: [N, C, H, W] float images in [0, 1] (on the model's device).
        :param router: ``None`` (default): SDR's recommended ``"lda_weighted"``; or a
            name of, or a router object among, the strategy's ``routers``.
        :return: a :class:`~avalanche_sdr.routers.TaskFreePrediction` (int64 [N]
            ``class_ids``, ``tasks``, ``entries``).
        :raises TypeError: ``x`` is not a float tensor of the model's dtype.
        :raises ValueError: ``x`` is not [N, C, H, W] of the benchmark's (C, H, W), on
            another device, not finite, or far outside [0, 1] (e.g. 0-255 pixels): the
            message says what to do (:meth:`~avalanche_sdr.models.SDRModel.predict`).
        :raises RuntimeError: the strategy was built without that router (the message
            says how to build it).
        """
        return self.model.predict(x, router)

    @property
    def detection_records(self) -> List[DetectionRecord]:
        """One :class:`DetectionRecord` per training experience started so far."""
        return self.sdr.records

    def restore_checkpoint(self) -> int:
        """Resume from the checkpoint in ``checkpoint_dir``, if it holds one.

        Call on a freshly built strategy (and model) of the same configuration as the
        run that wrote the checkpoint, then train the experiences after the returned
        position: the run continues exactly as if it had not been interrupted.

        :return: the number of training experiences already finished (0 when the
            directory holds no checkpoint).
        :raises RuntimeError: the strategy was built without ``checkpoint_dir``.
        :raises CheckpointMismatchError: the checkpoint has another configuration.
        """
        if self.checkpoint is None:
            raise RuntimeError("restore_checkpoint needs SDRStrategy(checkpoint_dir=...)")
        return self.checkpoint.restore(self)

    def forward(self):
        """The task-aware output; during an evaluation with ``eval_router``, the routed
        scores over the original class ids (:meth:`ClassIncrementalEvalPlugin.scores
        <avalanche_sdr.evaluation.class_incremental.ClassIncrementalEvalPlugin.scores>`);
        while a head-only experience trains on features computed once
        (:mod:`~avalanche_sdr.training.frozen_features`), the task's head on ``mb_x``
        (features [B, D] float32): :meth:`TaskHeads.logits
        <avalanche_sdr.models.heads.TaskHeads.logits>`."""
        if self.class_incremental is not None and not self.is_training:
            return self.class_incremental.scores(self)
        if self.frozen_features.uses_features(self):
            return self.model.heads.logits(self.sdr.current.task, self.mb_x)
        return super().forward()

    def make_train_dataloader(self, **kwargs):
        """Avalanche's training loader, over the features of a head-only experience
        computed once when :class:`~avalanche_sdr.training.frozen_features.FrozenFeaturesPlugin`
        finds nothing that needs its images (it swaps ``adapted_dataset`` first)."""
        self.frozen_features.prepare(self)
        super().make_train_dataloader(**kwargs)

    def check_model_and_optimizer(self, **kwargs):
        """Adapt the model (adds the task head), then build the optimizer."""
        self.model = self.model_adaptation()
        self.make_optimizer(**kwargs)

    def make_optimizer(self, **kwargs):
        """A fresh Adam over exactly what this experience trains.

        Head only for a reused entry; head and the new adapter set for a new one; the
        entry's adapters, BatchNorm copies and head for a learning reuse's update (those
        of them the reuse's ``update_parameters`` names).
        Everything else has ``requires_grad=False`` and no optimizer state.
        """
        task = self.sdr.current.task
        update = self.sdr.trains_entry and not self.sdr.training_new_entry
        chosen = self.sdr.reuse.update_parameters(self.model, self.model.entry_of(task)) if update else None
        params = self.model.trainable_for(task, train_encoder_entry=self.sdr.trains_entry, entry_parameters=chosen)
        self.optimizer = torch.optim.Adam(params, lr=self.sdr.learning_rate(0))


__all__ = ["MODEL_OPTIONS", "REFUSED_PLUGINS", "SDRStrategy", "SETTING_KEYWORDS", "benchmark_input_shape",
           "check_plugins", "default_evaluator"]
