"""``SDRStrategy``: SDR on Avalanche's supervised template."""
from __future__ import annotations

import os
from typing import List, Optional, Sequence, Union

import torch
from avalanche.training.plugins.evaluation import default_evaluator
from avalanche.training.templates import SupervisedTemplate

from avalanche_sdr.detection.calibrated import DEFAULT_THRESHOLDS, CalibrationThresholds
from avalanche_sdr.detection.decision import DetectionRecord
from avalanche_sdr.detection.detector import DECISION_RULES, SimilarTaskDetector
from avalanche_sdr.detection.expert_gate import ExpertGateDetector
from avalanche_sdr.detection.two_sample import DEFAULT_TWO_SAMPLE, TwoSampleDetector, TwoSampleSettings
from avalanche_sdr.models.repository import SDRModel
from avalanche_sdr.training.checkpoint import SDRCheckpointPlugin
from avalanche_sdr.training.sdr_plugin import SDRPlugin


DETECTORS = ("agreement", "calibrated", "two_sample", "expert_gate")
"""Decision rule names :class:`SDRStrategy` (``decision=``) and the examples accept."""


def make_detector(decision: str, *, thresholds: Optional[CalibrationThresholds] = None,
                  two_sample: Optional[TwoSampleSettings] = None, prior: str = "uniform",
                  elbo_samples: int = 1, max_samples: Optional[int] = None, match_class_count: bool = False):
    """The detector of a decision rule name in :data:`DETECTORS`.

    ``"agreement"`` / ``"calibrated"``: a :class:`SimilarTaskDetector` (generators and
    the complexity measure); ``"two_sample"``: a :class:`TwoSampleDetector`;
    ``"expert_gate"``: an :class:`ExpertGateDetector`.
    """
    if decision == "two_sample":
        return TwoSampleDetector(DEFAULT_TWO_SAMPLE if two_sample is None else two_sample)
    if decision == "expert_gate":
        return ExpertGateDetector()
    if decision not in DECISION_RULES:
        raise ValueError(f"unknown decision rule {decision!r}; available: {list(DETECTORS)}")
    return SimilarTaskDetector(
        rule=decision, prior=prior, elbo_samples=elbo_samples, max_samples=max_samples,
        thresholds=DEFAULT_THRESHOLDS if thresholds is None else thresholds,
        match_class_count=match_class_count,
    )


class SDRStrategy(SupervisedTemplate):
    """Similar-task Detection and Repurposing (Wang et al., 2022) for task-aware CL.

    For every training experience (one task, task labels given, labels local
    0..c-1) the strategy first decides — on the task's training data, before any
    training — whether an earlier unique entry of the repository is similar:

    - the first ``n_warm_start`` tasks are trained as new without detection;
    - afterwards the detector scores every entry j with p(P_t = P_j) (VAE ELBO
      consistency, eq. 5) and S(j, t) (complexity measure, eqs. 7–8) and applies
      the ``decision`` rule (paper: reuse when argmax p == argmin S);
    - *reuse*: the task is mapped to that entry and only its new head trains
      (``reuse_epochs`` at ``reuse_lr``);
    - *new*: a new EFT adapter set and head train (``new_task_epochs`` at
      ``new_task_lr`` with step decay), then a new generator G.

    Evaluation is task-aware: task t is predicted by f_t(E_{m(t)}(x)).

    The decision of every experience is in :attr:`detection_records`
    (:class:`~avalanche_sdr.detection.DetectionRecord`, ``to_dict()`` for JSON).
    Default values are the paper's (``PAPER_SETTINGS``); ``CPU_SETTINGS`` is a
    short preset for CPU runs.

    :param model: the repository, an :class:`~avalanche_sdr.models.SDRModel`.
    :param new_task_epochs: epochs to train a new entry's adapters and head (paper 100).
    :param new_task_lr: initial Adam learning rate for a new entry (paper 0.01).
    :param lr_milestones: 0-based epochs of a new entry at which the learning rate
        is multiplied by ``lr_decay`` (paper: (50,)).
    :param lr_decay: learning-rate factor at each milestone (paper 0.1).
    :param reuse_epochs: epochs of head-only training on a reused entry (paper 2).
    :param reuse_lr: Adam learning rate of head-only training (paper 0.001).
    :param train_mb_size: training mini-batch size (paper 128).
    :param eval_mb_size: evaluation mini-batch size.
    :param vae_epochs: maximum epochs of a new generator (paper 2000, early stopped).
    :param vae_lr: generator learning rate (paper 1e-4).
    :param vae_mb_size: generator mini-batch size (paper 64).
    :param vae_patience: generator early-stopping patience in epochs.
    :param n_warm_start: number of first tasks trained as new without detection
        (paper 3).
    :param decision: decision rule name: ``"agreement"`` (the paper's rule, default),
        ``"calibrated"`` (:func:`~avalanche_sdr.detection.calibrated_decision`),
        ``"two_sample"`` (:class:`~avalanche_sdr.detection.TwoSampleDetector`: a
        level-``alpha`` repeat test on E0 features; needs no generators) or
        ``"expert_gate"`` (:class:`~avalanche_sdr.detection.ExpertGateDetector`,
        Aljundi et al.'s autoencoder relatedness on E0 features, a baseline).
    :param two_sample: :class:`~avalanche_sdr.detection.TwoSampleSettings` of the
        ``"two_sample"`` rule (``None``: :data:`~avalanche_sdr.detection.DEFAULT_TWO_SAMPLE`).
    :param match_class_count: ``"agreement"`` / ``"calibrated"`` only: compare a new
        task only with entries whose creating task has its class count (off: the
        paper's method; the two-sample and Expert Gate rules take it from their settings).
    :param detector: an already built detector (any object with
        ``detect(model, task, x, y, num_classes) -> DetectionRecord`` and optionally
        ``remember(...)``); overrides ``decision`` and the detector settings. A
        detector is assumed to read the generators unless it has
        ``needs_generators = False``.
    :param thresholds: :class:`~avalanche_sdr.detection.CalibrationThresholds` of the
        ``"calibrated"`` rule (``None``: the defaults, set on Fashion-MNIST).
    :param prior: mixing weights π_j of eq. 5, ``"uniform"`` or ``"tasks"``.
    :param elbo_samples: Monte-Carlo samples per ELBO in detection.
    :param max_detection_samples: cap on the training samples used for detection
        (``None``: all, as in the paper).
    :param forward_transfer: start a new entry's adapters from the entry with the
        lowest S(j, t) (rules without S: the highest p-value or relatedness) instead of
        from the identity (off: the paper's method).
    :param device: torch device.
    :param plugins: further Avalanche plugins.
    :param evaluator: Avalanche ``EvaluationPlugin`` (or factory).
    :param eval_every: Avalanche periodic evaluation setting.
    :param verbose: print one line per experience with the decision and scores, and show
        progress bars of its training and generator epochs on a terminal (stderr).
    :param checkpoint_dir: directory to save a checkpoint to after every finished
        training experience (:class:`~avalanche_sdr.training.checkpoint.SDRCheckpointPlugin`,
        run after every other plugin); :meth:`restore_checkpoint` resumes from it.
        ``None`` (default): no checkpoints.
    """

    def __init__(
        self,
        *,
        model: SDRModel,
        new_task_epochs: int = 100,
        new_task_lr: float = 0.01,
        lr_milestones: Sequence[int] = (50,),
        lr_decay: float = 0.1,
        reuse_epochs: int = 2,
        reuse_lr: float = 0.001,
        train_mb_size: int = 128,
        eval_mb_size: int = 256,
        vae_epochs: int = 2000,
        vae_lr: float = 1e-4,
        vae_mb_size: int = 64,
        vae_patience: int = 20,
        n_warm_start: int = 3,
        decision: str = "agreement",
        thresholds: Optional[CalibrationThresholds] = None,
        two_sample: Optional[TwoSampleSettings] = None,
        match_class_count: bool = False,
        detector=None,
        prior: str = "uniform",
        elbo_samples: int = 1,
        max_detection_samples: Optional[int] = None,
        forward_transfer: bool = False,
        device: Union[str, torch.device] = "cpu",
        plugins: Optional[List] = None,
        evaluator=default_evaluator,
        eval_every: int = -1,
        verbose: bool = True,
        checkpoint_dir: Optional[Union[str, os.PathLike]] = None,
    ):
        if not isinstance(model, SDRModel):
            raise TypeError(f"SDRStrategy needs an SDRModel repository, got {type(model).__name__}")
        if detector is None:
            detector = make_detector(
                decision, thresholds=thresholds, two_sample=two_sample, prior=prior, elbo_samples=elbo_samples,
                max_samples=max_detection_samples, match_class_count=match_class_count,
            )
        if getattr(detector, "needs_generators", True) and not model.has_generators:
            raise ValueError(
                f"decision rule {getattr(detector, 'rule', type(detector).__name__)!r} scores entries with "
                "their generators, but the model was built with generator=None; build it with "
                "generator='independent' or use decision='two_sample'"
            )
        self.sdr = SDRPlugin(
            detector=detector,
            n_warm_start=n_warm_start,
            new_task_epochs=new_task_epochs,
            new_task_lr=new_task_lr,
            lr_milestones=lr_milestones,
            lr_decay=lr_decay,
            reuse_epochs=reuse_epochs,
            reuse_lr=reuse_lr,
            vae_epochs=vae_epochs,
            vae_lr=vae_lr,
            vae_mb_size=vae_mb_size,
            vae_patience=vae_patience,
            forward_transfer=forward_transfer,
            verbose=verbose,
        )
        # Replaced per experience by make_optimizer; Avalanche needs one to start.
        initial_optimizer = torch.optim.Adam(model.parameters(), lr=new_task_lr)
        super().__init__(
            model=model,
            optimizer=initial_optimizer,
            criterion=torch.nn.CrossEntropyLoss(),
            train_mb_size=train_mb_size,
            train_epochs=new_task_epochs,
            eval_mb_size=eval_mb_size,
            device=device,
            plugins=[self.sdr] + list(plugins or []),
            evaluator=evaluator,
            eval_every=eval_every,
        )
        self.checkpoint: Optional[SDRCheckpointPlugin] = None
        if checkpoint_dir is not None:
            # Appended after Avalanche's evaluator, periodic eval and clock: a checkpoint
            # is taken once everything else has finished the experience.
            self.checkpoint = SDRCheckpointPlugin(checkpoint_dir)
            self.plugins.append(self.checkpoint)

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

    def check_model_and_optimizer(self, **kwargs):
        """Adapt the model (adds the task head), then build the optimizer."""
        self.model = self.model_adaptation()
        self.make_optimizer(**kwargs)

    def make_optimizer(self, **kwargs):
        """A fresh Adam over exactly what this experience trains.

        Head only for a reused entry; head and the new adapter set for a new one.
        Everything else has ``requires_grad=False`` and no optimizer state.
        """
        task = self.sdr.current.task
        params = self.model.trainable_for(task, train_encoder_entry=self.sdr.training_new_entry)
        self.optimizer = torch.optim.Adam(params, lr=self.sdr.learning_rate(0))


__all__ = ["DETECTORS", "SDRStrategy", "make_detector"]
