"""The SDR behaviour as an Avalanche plugin: detect, then grow or reuse, then fit G.

The plugin decides in ``before_train_dataset_adaptation``, the first hook Avalanche
0.6.0 calls before model adaptation and ``make_optimizer``, so a new entry or a reuse
is fixed before any training sees the task. After training it fits a new entry's
generator G and the task-free routers, ends the entry's training and reports the
decision to the strategy's loggers (:data:`REPORTED_VALUES`). The user's plugins run
after it (``EWCPlugin`` and the like see what the experience trained) and
:class:`SDRFreezePlugin` freezes everything last. At evaluation, labels that do not
fit a task's head and NaN/Inf inputs are refused with a named error. Why a plugin:
Avalanche's methods live in a few overridden hooks, and
:class:`~avalanche_sdr.training.SDRStrategy` stays a thin template.

The hook order step by step, detector state (``remember``) and progress bars:
docs/method.rst, section "The SDR plugin's hooks, reporting and checks".
"""
from __future__ import annotations

import dataclasses
import sys
import time
from typing import Dict, List, Optional, Sequence, Tuple

import torch
from avalanche.core import SupervisedPlugin
from avalanche.evaluation.metric_results import MetricValue
from avalanche.logging import InteractiveLogger

from avalanche_sdr._checks import check_int
from avalanche_sdr.dataset_tensors import distinct_labels
from avalanche_sdr.detection.base import Detector
from avalanche_sdr.detection.decision import DetectionRecord
from avalanche_sdr.evaluation.decision_logger import DECISION_METRIC
from avalanche_sdr.models.task_data import TaskData
from avalanche_sdr.routers.base import Router
from avalanche_sdr.routers.routing import check_routers
from avalanche_sdr.training.reuse import Reuse, ReuseRecord
from avalanche_sdr.training.data import InvalidTaskDataError, check_task_data, local_labels, read_task_data
from avalanche_sdr.training.generator_fitting import fit_generator
from avalanche_sdr.training.presets import SDRSettings

KNOWN_TASK_RULE = "known_task"
"""``DetectionRecord.rule`` of an experience whose task label was trained before: no
detection, the task continues its own entry (decision ``"reuse"``)."""

REPORTED_VALUES = {
    DECISION_METRIC: "str: the decision in one line (scores, chosen entry, seconds, generator fit)",
    "SDR_Reused": "1.0 when the task reuses an entry, 0.0 when it gets a new one (warm start too)",
    "SDR_Entry": "the entry the task is mapped to",
    "SDR_Entries": "unique entries in the repository after the task",
    "SDR_Detection_Seconds": "wall-clock seconds of detection (0.0 for a warm-start task)",
    "SDR_Generator_Heldout_ELBO": "held-out ELBO of the new entry's generator, nats per image "
                                  "(only for a new entry of a repository with generators)",
}
"""Metric values the plugin publishes after each training experience, with their meaning.
Full names follow Avalanche's: ``<name>/train_phase/train_stream/Task<ttt>``."""


class SDRPlugin(SupervisedPlugin):
    """Similar-task detection and repurposing for an :class:`SDRModel` (see module doc).

    The plugin is built by :class:`~avalanche_sdr.training.SDRStrategy`, which
    documents the options; it needs the strategy's optimizer set-up and is not meant
    to be added to another strategy.

    :param detector: the detector to score new tasks with
        (:class:`~avalanche_sdr.detection.base.Detector`).
    :param settings: the training budget (:class:`~avalanche_sdr.training.SDRSettings`).
    :param reuse: what a detected repeat trains, a :class:`~avalanche_sdr.training.reuse.Reuse`
        (the plugin calls its hooks; :mod:`~avalanche_sdr.training.reuse`).
    :param n_warm_start: number of first tasks trained as new without detection (>= 1).
    :param forward_transfer: initialise a new entry's adapters from the nearest entry
        instead of the identity.
    :param routers: task-free routers (names in
        :data:`~avalanche_sdr.routers.ROUTER_TYPES` or router objects) fitted after
        every task's training, so that ``model.predict(x, router)`` needs no task label;
        kept as router objects in :attr:`routers`.
    """

    def __init__(self, *, detector: Detector, settings: SDRSettings, reuse: Reuse, n_warm_start: int,
                 forward_transfer: bool, routers: Sequence = ()):
        super().__init__()
        if not isinstance(detector, Detector):
            raise TypeError(f"detector must be a Detector (avalanche_sdr.detection.Detector), got "
                            f"{type(detector).__name__}")
        if not isinstance(settings, SDRSettings):
            raise TypeError(f"settings must be an SDRSettings, got {type(settings).__name__}")
        if not isinstance(reuse, Reuse):
            raise TypeError(f"reuse must be a Reuse (avalanche_sdr.training.reuse.Reuse), got {type(reuse).__name__}")
        check_int(n_warm_start, "n_warm_start", hint=" (detection needs entries to compare to)")
        self.detector = detector
        self.settings = settings
        self.reuse = reuse
        self.n_warm_start = n_warm_start
        self.forward_transfer = bool(forward_transfer)
        self.routers: Tuple[Router, ...] = check_routers(routers)
        self.router_seconds: Dict[str, float] = {router.name: 0.0 for router in self.routers}
        """Wall seconds spent fitting each router, summed over the experiences trained."""
        # Routers sharing a state ("lda", "lda_weighted": one state_name) fit it once, under the
        # name whose fit does all of it: a router reading another's state fits that state and
        # what it adds ("lda_weighted": the mark of its evidence).
        self._fit_as: Dict[str, Router] = {}
        for router in self.routers:
            if router.state_name not in self._fit_as or router.name != router.state_name:
                self._fit_as[router.state_name] = router
        self.records: List[DetectionRecord] = []
        """The detection record of each experience started (evidence and decision)."""
        self.reuse_records: List[ReuseRecord] = []
        """Beside each detection record, what the reuse did with the entry
        (:class:`~avalanche_sdr.training.reuse.ReuseRecord`)."""
        self.epoch_accuracies: List[List[float]] = []
        """Per experience, the training accuracy of each epoch (fraction of the epoch's
        training mini-batch predictions that were right, measured during the epoch):
        the epochs-to-accuracy curve used to compare forward transfer with the default."""
        self._epoch_counts = [0, 0]
        self._data: Optional[TaskData] = None  # the experience's training data, until its end
        self._train_start = 0.0
        self._bar = None

    # ------------------------------------------------------------------ state
    @property
    def current(self) -> DetectionRecord:
        """Record of the experience being trained (or the last one)."""
        if not self.records:
            raise RuntimeError("no experience has been started yet")
        return self.records[-1]

    @property
    def current_reuse(self) -> ReuseRecord:
        """What the reuse did in the experience being trained (or the last one)."""
        if not self.reuse_records:
            raise RuntimeError("no experience has been started yet")
        return self.reuse_records[-1]

    def record_dicts(self) -> List[Dict]:
        """Each experience's records as one JSON-safe dict: the detection record's keys,
        then the reuse record's (what results files and checkpoints hold)."""
        return [dict(d.to_dict(), **r.to_dict()) for d, r in zip(self.records, self.reuse_records)]

    def restore_records(self, dicts: Sequence[Dict]) -> None:
        """Set the records from dicts of :meth:`record_dicts` (a checkpoint's)."""
        detection_keys = {f.name for f in dataclasses.fields(DetectionRecord)}
        self.records = [DetectionRecord.from_dict({k: v for k, v in d.items() if k not in ReuseRecord.field_names()})
                        for d in dicts]
        self.reuse_records = [ReuseRecord.from_dict({k: v for k, v in d.items() if k not in detection_keys})
                              for d in dicts]

    @property
    def training_new_entry(self) -> bool:
        """Whether the current experience trains a new adapter set."""
        return self.current.decision != "reuse"

    @property
    def trains_entry(self) -> bool:
        """Whether the current experience trains an entry's adapters and BatchNorm copies:
        a new entry, or the learning reuse's update of a reused one."""
        return self.training_new_entry or self.current_reuse.entry_updated

    @property
    def entry_moved(self) -> bool:
        """Whether the current experience's update changed its entry: it ran, kept at least
        one epoch (early stop) and was not rolled back. Valid after training."""
        reuse = self.current_reuse
        return reuse.entry_updated and not reuse.update_rolled_back and reuse.update_epochs != 0

    def learning_rate(self, epoch: int) -> float:
        """Learning rate of epoch ``epoch`` (0-based) of the current experience."""
        settings = self.settings
        if not self.training_new_entry:
            return self.reuse.train_lr(self.current_reuse, settings)
        passed = sum(1 for m in settings.lr_milestones if epoch >= m)
        return settings.new_task_lr * settings.lr_decay**passed

    # ------------------------------------------------------------------ hooks
    def before_train_dataset_adaptation(self, strategy, **kwargs):
        experience = strategy.experience
        if len(experience.task_labels) != 1:
            raise ValueError(
                f"SDR trains one task per experience; experience {experience.current_experience} "
                f"holds task labels {list(experience.task_labels)}"
            )
        task = int(experience.task_labels[0])
        model = strategy.model
        self._close_progress()  # a bar left open by an experience that failed
        self.reuse.start()
        x, y = read_task_data(experience)
        num_classes = check_task_data(x, y, task=task, input_shape=model.input_shape, class_ids=True)
        # Global class ids (e.g. {4, 7}) -> local labels 0..c-1: what detection, the
        # records and the detectors' states use; the model keeps the class ids.
        y, class_ids = local_labels(y)
        # E0's features of x are read by the detector and by every router's fit: one pass
        data = TaskData(task, x, y, torch.as_tensor(class_ids, dtype=torch.long))
        self._train_start = time.perf_counter()
        reuse = ReuseRecord()
        if task in model.task_to_entry:
            record, reuse = self._known_task(model, task, num_classes)
        elif len(model.task_to_entry) < self.n_warm_start:
            entry = model.create_entry(task)
            self.reuse.new_entry(model, entry, data, self.settings)
            self._remember(model, entry, data)
            record = DetectionRecord(
                task=task, decision="warm_start", entry=entry, reused_entry=None,
                candidate_entries=[], candidate_tasks=[], consistency=[], complexity=[],
                vote_consistency=None, vote_complexity=None, rule="warm_start",
                detection_seconds=0.0,
            )
        else:
            record = self.detector.detect(model, data)
            if record.decision == "reuse":
                record, reuse = self.reuse.decide(model, record, data)
            if record.decision == "new":
                init_from = self.detector.nearest_entry(record) if self.forward_transfer else None
                record.entry = model.create_entry(task, init_from=init_from)
                start = time.perf_counter()
                self.reuse.new_entry(model, record.entry, data, self.settings)
                self._remember(model, record.entry, data)
                record.detection_seconds += time.perf_counter() - start
            else:
                model.assign_task(task, record.reused_entry)
                self.reuse.repeat(model, record, data)
                for router in self.routers:  # held-out evidence (lda_weighted: its weights), before training
                    tick = time.perf_counter()
                    router.before_repeat(model, data, record.reused_entry)
                    self.router_seconds[router.name] += time.perf_counter() - tick
        reuse.check_decision(record.decision)
        model.heads.set_class_ids(task, class_ids)
        model.to(strategy.device)
        if record.decision == "reuse":
            self.reuse.begin(model, record, reuse, data, self.settings)
        self.records.append(record)
        self.reuse_records.append(reuse)
        self.epoch_accuracies.append([])
        self._data = data
        if self.training_new_entry:
            strategy.train_epochs = self.settings.new_task_epochs
        else:
            strategy.train_epochs = self.reuse.train_epochs(reuse, self.settings)

    def _known_task(self, model, task: int, num_classes: int) -> Tuple[DetectionRecord, ReuseRecord]:
        """The records of a task label trained before (Avalanche's ``train`` called again on
        it): it continues its entry, updated with the learning reuse when every task of
        the entry answers through the entry's head, else through its own head only."""
        entry = model.entry_of(task)
        if model.heads.is_trained(task) and model.heads.num_classes(task) != num_classes:
            raise ValueError(
                f"task label {task} was trained with {model.heads.num_classes(task)} classes and now has "
                f"{num_classes}; a task label trained again must keep its classes (give a new task a new label)"
            )
        creator = model.entry_creator[entry]
        record = DetectionRecord(task=task, decision="reuse", entry=entry, reused_entry=entry,
                                 candidate_entries=[entry], candidate_tasks=[creator], rule=KNOWN_TASK_RULE)
        return record, self.reuse.known_task(model, task, entry)

    def _remember(self, model, entry: int, data: TaskData, after_training: bool = False) -> None:
        """Let the detector store what it keeps for a new entry (e.g. reference features),
        at creation or, for a detector with ``remember_after_training``, after training."""
        if bool(self.detector.remember_after_training) == after_training:
            self.detector.remember(model, entry, data)

    @staticmethod
    def _progress(strategy, total: int, desc: str):
        """A tqdm bar on stderr when the strategy's evaluator shows progress bars (has an
        Avalanche ``InteractiveLogger``), else ``None``; disabled off a terminal."""
        loggers = getattr(getattr(strategy, "evaluator", None), "loggers", ())
        if not any(isinstance(logger, InteractiveLogger) for logger in loggers):
            return None
        from tqdm import tqdm

        return tqdm(total=total, desc=desc, unit="epoch", file=sys.stderr, leave=False, disable=None,
                    dynamic_ncols=True)

    def _publish(self, strategy, record: DetectionRecord, line: str, heldout_elbo: Optional[float]) -> None:
        """Hand the experience's :data:`REPORTED_VALUES` to the strategy's loggers."""
        evaluator = getattr(strategy, "evaluator", None)
        if evaluator is None or not getattr(evaluator, "active", True):
            return
        x_plot = strategy.clock.train_iterations
        values = {
            DECISION_METRIC: line,
            "SDR_Reused": 1.0 if record.decision == "reuse" else 0.0,
            "SDR_Entry": record.entry if record.decision != "reuse" else record.reused_entry,
            "SDR_Entries": strategy.model.num_entries,
            "SDR_Detection_Seconds": float(record.detection_seconds),
        }
        if heldout_elbo is not None:
            values["SDR_Generator_Heldout_ELBO"] = float(heldout_elbo)
        for name, value in values.items():
            full_name = f"{name}/train_phase/train_stream/Task{record.task:03d}"
            evaluator.publish_metric_value(MetricValue(self, full_name, value, x_plot))

    def _close_progress(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def after_train_dataset_adaptation(self, strategy, **kwargs):
        indices = self.reuse.training_indices()
        if indices is not None:  # e.g. an early stop's share left out
            strategy.adapted_dataset = strategy.adapted_dataset.subset(indices.tolist())

    def before_training_iteration(self, strategy, **kwargs):
        self.reuse.before_iteration()

    def before_training_epoch(self, strategy, **kwargs):
        lr = self.learning_rate(strategy.clock.train_exp_epochs)
        for group in strategy.optimizer.param_groups:
            group["lr"] = lr
        self._epoch_counts = [0, 0]

    def after_training_iteration(self, strategy, **kwargs):
        with torch.no_grad():
            correct = (strategy.mb_output.argmax(dim=1) == strategy.mb_y).sum()
        self._epoch_counts[0] += int(correct)
        self._epoch_counts[1] += int(strategy.mb_y.shape[0])

    def before_backward(self, strategy, **kwargs):
        if not self.training_new_entry:
            self.reuse.loss(strategy)

    def after_training_epoch(self, strategy, **kwargs):
        right, seen = self._epoch_counts
        self.epoch_accuracies[-1].append(right / seen if seen else float("nan"))
        if not self.training_new_entry and self.reuse.epoch_done(strategy.model):
            if strategy.clock.train_exp_epochs + 1 < strategy.train_epochs:
                strategy.stop_training()

    def after_training_exp(self, strategy, **kwargs):
        record, reuse, data = self.current, self.current_reuse, self._data
        model = strategy.model
        settings = self.settings
        fit_note = ""
        heldout_elbo = None
        self._close_progress()
        if self.training_new_entry and model.has_generators:
            self._bar = self._progress(strategy, settings.vae_epochs, f"task {record.task} (VAE G_{record.entry})")
            try:
                report = fit_generator(
                    model.generators, record.entry, data.x.to(strategy.device),
                    epochs=settings.vae_epochs, lr=settings.vae_lr, batch_size=settings.vae_mb_size,
                    patience=settings.vae_patience,
                    on_epoch=None if self._bar is None else (lambda epoch: self._bar.update(1)),
                )
            finally:
                self._close_progress()
            heldout_elbo = report.best_holdout_elbo
            fit_note = f" | G_{record.entry}: {report.epochs_run} epochs, held-out ELBO {heldout_elbo:.1f} nats"
        if not self.training_new_entry:
            self.reuse.end(model, record, reuse, data, settings)
        if self.training_new_entry or self.entry_moved:
            # the entry's features moved: what the detector keeps after training is taken again,
            # with an update's labels in the entry's head order
            kept = data.with_labels(model.heads.labels(record.task, data.y)) if reuse.entry_updated else data
            self._remember(model, record.entry, kept, after_training=True)
        fit_seconds: Dict[str, float] = {}  # one fit per state (__init__: _fit_as)
        for owner, router in self._fit_as.items():
            tick = time.perf_counter()
            router.fit(model, data, new_entry=self.training_new_entry, entry_updated=self.entry_moved)
            fit_seconds[owner] = time.perf_counter() - tick
        for router in self.routers:
            self.router_seconds[router.name] += fit_seconds[router.state_name]
        # The entry's BatchNorm statistics are final from here on; the parameters stay
        # trainable for the user's plugins (EWC's importances...) until SDRFreezePlugin.
        model.end_entry_training()
        self._data = None
        line = self.describe(record, reuse) + f" | {time.perf_counter() - self._train_start:.1f}s" + fit_note
        self._publish(strategy, record, line, heldout_elbo)

    def before_eval_exp(self, strategy, **kwargs):
        if getattr(strategy, "eval_router", None) is not None:
            return  # task labels ignored: the class-incremental plugin checks the labels
        experience = strategy.experience
        model = strategy.model
        labels = distinct_labels(experience) if len(experience.dataset) else None
        if labels is None:
            return
        for task in experience.task_labels:
            if not model.heads.is_trained(task):
                continue  # untrained: E0 and an untrained head answer it (SDRModel.forward_single_task)
            ids = model.heads.class_ids(int(task))
            c = len(ids)
            outside = sorted(int(v) for v in labels if int(v) not in set(ids))
            if outside and ids == list(range(c)):
                raise InvalidTaskDataError(
                    f"task {int(task)}: evaluation labels {outside} lie outside 0..{c - 1}, "
                    f"the {c} classes its head was trained on"
                )
            if outside:
                raise InvalidTaskDataError(
                    f"task {int(task)}: evaluation labels {outside} are not among the class ids {ids} "
                    "its head was trained on"
                )

    def before_eval_forward(self, strategy, **kwargs):
        x = strategy.mb_x
        bad = (~torch.isfinite(x.flatten(1))).any(dim=1)
        if bool(bad.any()):
            tasks = sorted({int(t) for t in strategy.mb_task_id[bad].tolist()})
            raise InvalidTaskDataError(
                f"task {', '.join(map(str, tasks))}: {int(bad.sum())} evaluation inputs of a "
                f"mini-batch of {x.shape[0]} contain NaN or Inf values"
            )

    def describe(self, record: DetectionRecord, reuse: Optional[ReuseRecord] = None) -> str:
        """One human-readable line for a record: the decision, what the reuse did (from
        ``reuse``; ``None``: nothing) and the detector's scores
        (:meth:`Detector.scores <avalanche_sdr.detection.base.Detector.scores>`)."""
        reuse = ReuseRecord() if reuse is None else reuse
        head = f"[SDR] task {record.task}: "
        if record.decision == "warm_start":
            return head + f"warm start -> new entry {record.entry}"
        if record.decision == "reuse":
            verdict = f"reuse entry {record.reused_entry} (task {record.candidate_tasks[record.candidate_entries.index(record.reused_entry)]})"
            if record.class_permutation:
                verdict += f", classes matched as {record.class_permutation}"
            verdict += reuse.describe()
        else:
            verdict = f"new entry {record.entry}"
        return head + verdict + reuse.describe_gate() + f" [{self.detector.scores(record)}]"


class SDRFreezePlugin(SupervisedPlugin):
    """Freezes the whole repository after a training experience
    (:meth:`~avalanche_sdr.models.repository.SDRModel.freeze_all`).

    :class:`~avalanche_sdr.training.SDRStrategy` places it after every other plugin
    (the user's, Avalanche's evaluator, clock and periodic evaluation), only its
    checkpoint plugin comes later: plugins that need the gradients of what the
    experience trained once training is over get them first, and nothing is trainable
    between experiences (the next experience's optimizer unfreezes what it trains).
    """

    def after_training_exp(self, strategy, **kwargs):
        strategy.model.freeze_all()


__all__ = ["REPORTED_VALUES", "SDRFreezePlugin", "SDRPlugin"]
