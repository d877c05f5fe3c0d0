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
from avalanche_sdr.detection.decision import DetectionRecord
from avalanche_sdr.detection.detector import SimilarTaskDetector
from avalanche_sdr.evaluation.decision_logger import DECISION_METRIC
from avalanche_sdr.routers.base import Router
from avalanche_sdr.routers.routing import check_routers
from avalanche_sdr.training import learning_reuse
from avalanche_sdr.training.data import InvalidTaskDataError, check_task_data, local_labels, read_task_data
from avalanche_sdr.training.generator_fitting import fit_generator
from avalanche_sdr.training.presets import SDRSettings
from avalanche_sdr.vocabulary import REUSE_ACCUMULATE

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

    :param detector: the detector to score new tasks with: a
        :class:`SimilarTaskDetector` or any object with its ``detect`` method (and
        optionally ``remember``).
    :param settings: the training settings (:class:`~avalanche_sdr.training.SDRSettings`).
    :param n_warm_start: number of first tasks trained as new without detection (>= 1).
    :param forward_transfer: initialise a new entry's adapters from the nearest entry
        instead of the identity.
    :param routers: task-free routers (names in
        :data:`~avalanche_sdr.routers.ROUTER_TYPES` or router objects) fitted after
        every task's training, so that ``model.predict(x, router)`` needs no task label;
        kept as router objects in :attr:`routers`.
    """

    def __init__(self, *, detector: SimilarTaskDetector, settings: SDRSettings, n_warm_start: int,
                 forward_transfer: bool, routers: Sequence = ()):
        super().__init__()
        if not isinstance(settings, SDRSettings):
            raise TypeError(f"settings must be an SDRSettings, got {type(settings).__name__}")
        check_int(n_warm_start, "n_warm_start", hint=" (detection needs entries to compare to)")
        self.detector = detector
        self.settings = settings
        self.n_warm_start = n_warm_start
        self.forward_transfer = bool(forward_transfer)
        self.routers: Tuple[Router, ...] = check_routers(routers)
        self.router_seconds: Dict[str, float] = {router.name: 0.0 for router in self.routers}
        """Wall seconds spent fitting each router, summed over the experiences trained."""
        # Routers sharing a state ("lda", "lda_weighted") fit it once, under the name whose fit
        # does all of it: a router reading another's state (vocabulary.SHARED_ROUTER_STATE)
        # fits that state and what it adds ("lda_weighted": the mark of its evidence).
        self._fit_as: Dict[str, Router] = {}
        for router in self.routers:
            if router.state_name not in self._fit_as or router.name != router.state_name:
                self._fit_as[router.state_name] = router
        self.records: List[DetectionRecord] = []
        self.epoch_accuracies: List[List[float]] = []
        """Per experience, the training accuracy of each epoch (fraction of the epoch's
        training mini-batch predictions that were right, measured during the epoch):
        the epochs-to-accuracy curve used to compare forward transfer with the default."""
        self._epoch_counts = [0, 0]
        self._task_inputs: Optional[torch.Tensor] = None
        self._task_labels: Optional[torch.Tensor] = None
        self._task_classes = 0
        self._train_start = 0.0
        self._bar = None
        self._replay: Optional[learning_reuse.ExemplarReplay] = None
        self._update: Optional[_UpdateState] = None

    # ------------------------------------------------------------------ state
    @property
    def current(self) -> DetectionRecord:
        """Record of the experience being trained (or the last one)."""
        if not self.records:
            raise RuntimeError("no experience has been started yet")
        return self.records[-1]

    @property
    def training_new_entry(self) -> bool:
        """Whether the current experience trains a new adapter set."""
        return self.current.decision != "reuse"

    @property
    def trains_entry(self) -> bool:
        """Whether the current experience trains an entry's adapters and BatchNorm copies:
        a new entry, or the learning reuse's update of a reused one."""
        return self.training_new_entry or self.current.entry_updated

    @property
    def entry_moved(self) -> bool:
        """Whether the current experience's update changed its entry: it ran, kept at least
        one epoch (early stop) and was not rolled back. Valid after training."""
        record = self.current
        return record.entry_updated and not record.update_rolled_back and record.update_epochs != 0

    @property
    def accumulate(self) -> bool:
        """Whether repeats update their entry (``settings.reuse == "accumulate"``)."""
        return self.settings.reuse == REUSE_ACCUMULATE

    def learning_rate(self, epoch: int) -> float:
        """Learning rate of epoch ``epoch`` (0-based) of the current experience."""
        settings = self.settings
        if self.current.entry_updated:
            return settings.update_lr
        if not self.training_new_entry:
            return settings.reuse_lr
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
        self._replay = None
        self._update = None
        x, y = read_task_data(experience)
        num_classes = check_task_data(x, y, task=task, input_shape=model.input_shape, class_ids=True)
        # Global class ids (e.g. {4, 7}) -> local labels 0..c-1: what detection, the
        # records and the detectors' states use; the model keeps the class ids.
        y, class_ids = local_labels(y)
        # E0's features of x are read by the detector and by every router's fit: one pass
        model.keep_e0_features(x)
        self._train_start = time.perf_counter()
        if task in model.task_to_entry:
            record = self._known_task(model, task, num_classes)
        elif len(model.task_to_entry) < self.n_warm_start:
            entry = model.create_entry(task)
            self._store_exemplars(model, entry, task, x, y, num_classes)
            self._remember(model, entry, task, x, y, num_classes)
            record = DetectionRecord(
                task=task, decision="warm_start", entry=entry, reused_entry=None,
                candidate_entries=[], candidate_tasks=[], consistency=[], complexity=[],
                vote_consistency=None, vote_complexity=None, rule="warm_start",
                detection_seconds=0.0,
            )
        else:
            record = self.detector.detect(model, task, x, y, num_classes)
            if record.decision == "reuse" and self.accumulate:
                record = self._guarded_update(model, record, x, y, num_classes)
            if record.decision == "new":
                init_from = self._nearest_entry(record) if self.forward_transfer else None
                record.entry = model.create_entry(task, init_from=init_from)
                start = time.perf_counter()
                self._store_exemplars(model, record.entry, task, x, y, num_classes)
                self._remember(model, record.entry, task, x, y, num_classes)
                record.detection_seconds += time.perf_counter() - start
            else:
                model.assign_task(task, record.reused_entry)
                for router in self.routers:  # held-out evidence (lda_weighted: its weights), before training
                    tick = time.perf_counter()
                    router.before_repeat(model, task, record.reused_entry, x, torch.as_tensor(class_ids)[y])
                    self.router_seconds[router.name] += time.perf_counter() - tick
        model.set_class_ids(task, class_ids)
        if record.entry_updated:
            if not model.is_trained(task):
                model.link_head(task, model.entry_creator[record.entry], record.class_permutation or None)
            self._replay = learning_reuse.ExemplarReplay(model, record.entry, task, self.settings.train_mb_size)
        model.to(strategy.device)
        if record.entry_updated:
            self._update = self._begin_update(model, record, x, y, num_classes, torch.as_tensor(class_ids))
        self.records.append(record)
        self.epoch_accuracies.append([])
        self._task_inputs, self._task_labels, self._task_classes = x, y, num_classes
        if self.training_new_entry:
            strategy.train_epochs = self.settings.new_task_epochs
        else:
            strategy.train_epochs = (self.settings.epochs_per_update if record.entry_updated
                                     else self.settings.reuse_epochs)

    def _known_task(self, model, task: int, num_classes: int) -> DetectionRecord:
        """The record of a task label trained before (Avalanche's ``train`` called again on
        it): it continues its entry, updated with the learning reuse when every task of
        the entry answers through the entry's head, else through its own head only."""
        entry = model.entry_of(task)
        if model.is_trained(task) and model.head_num_classes(task) != num_classes:
            raise ValueError(
                f"task label {task} was trained with {model.head_num_classes(task)} classes and now has "
                f"{num_classes}; a task label trained again must keep its classes (give a new task a new label)"
            )
        creator = model.entry_creator[entry]
        updated = (self.accumulate and model.head_owner(task) == creator and model.entry_updatable(entry))
        return DetectionRecord(
            task=task, decision="reuse", entry=entry, reused_entry=entry, candidate_entries=[entry],
            candidate_tasks=[creator], rule=KNOWN_TASK_RULE, entry_updated=updated,
        )

    def _guarded_update(self, model, record: DetectionRecord, x, y, num_classes: int) -> DetectionRecord:
        """The learning reuse's decision for a detected repeat (module doc of
        :mod:`~avalanche_sdr.training.learning_reuse`): update the entry, reuse it head-only
        (its heads cannot all follow an update), or, refused by the guard's gate, a new entry."""
        entry = record.reused_entry
        creator = model.entry_creator[entry]
        if model.head_num_classes(creator) != num_classes or not model.entry_updatable(entry):
            return record
        if self.settings.reuse_guard:
            start = time.perf_counter()
            result = learning_reuse.gate(model, entry, x, y, num_classes,
                                         record.class_permutation or range(num_classes))
            seconds = record.detection_seconds + time.perf_counter() - start
            if not result.passed:
                return dataclasses.replace(record, decision="new", entry=-1, reused_entry=None,
                                           class_permutation=[], gate_accuracy=result.accuracy,
                                           gate_threshold=result.threshold, detection_seconds=seconds)
            return dataclasses.replace(record, entry_updated=True, gate_accuracy=result.accuracy,
                                       gate_threshold=result.threshold, detection_seconds=seconds)
        return dataclasses.replace(record, entry_updated=True)

    def _store_exemplars(self, model, entry: int, task: int, x, y, num_classes: int) -> None:
        """Keep the learning reuse's guard images of a new entry (``guard_exemplars`` per class),
        with ``update_rollback`` its held-out images
        (:data:`~avalanche_sdr.training.learning_reuse.GUARD_HELDOUT_PER_CLASS` per class), and
        where the balance rule reads them, its task's class counts ([c] int64)."""
        settings = self.settings
        if self.accumulate and settings.stores_guard_images:
            images, labels = learning_reuse.select_exemplars(x, y, num_classes, settings.guard_exemplars, task)
            model.set_exemplars(entry, images, labels)
            if settings.update_option("update_rollback"):
                images, labels = learning_reuse.select_heldout(
                    x, y, num_classes, learning_reuse.GUARD_HELDOUT_PER_CLASS, settings.guard_exemplars, task)
                learning_reuse.store_heldout(model, entry, images, labels)
            rule = settings.balance_rule()
            if rule is not None and rule.needs_counts:
                learning_reuse.store_class_counts(model, entry, torch.bincount(y.cpu(), minlength=num_classes))

    def _begin_update(self, model, record: DetectionRecord, x, y, num_classes: int, class_ids) -> "_UpdateState":
        """What the update of ``record.entry`` needs besides the replay (module doc of
        :mod:`~avalanche_sdr.training.learning_reuse`): the training share and the early
        stop on the rest, the class weights and BatchNorm copies of a balanced update where
        the balance rule asks for one (recorded: ``update_balanced``, ``balance_p_value``),
        the state and held-out score to roll back to.

        :param x: [n, C, H, W] the repeat's images; ``y``: [n] int64 local labels;
            ``class_ids``: [c] int64, the class id of each local label (the dataset's labels).
        """
        settings = self.settings
        entry, task = record.entry, record.task
        owner = model.entry_creator[entry]
        state = _UpdateState()
        train = torch.arange(len(y))
        if settings.update_option("update_early_stop"):
            train, held = learning_reuse.split_repeat(y, num_classes, learning_reuse.REPEAT_HOLDOUT_SHARE, task)
            if len(held):
                state.train_indices = train
                state.early_stop = learning_reuse.EarlyStop(model, entry, owner, x[held],
                                                            model.head_labels(task, y[held]))
        rule = settings.balance_rule()
        if rule is not None:
            counts = torch.bincount(model.head_labels(task, y[train]).cpu(), minlength=model.head_num_classes(owner))
            decision = rule.decide(counts, learning_reuse.class_counts(model, entry) if rule.needs_counts else None)
            record.update_balanced, record.balance_p_value = decision.balanced, decision.p_value
            if decision.balanced:
                state.weights = learning_reuse.balanced_weights(class_ids[y[train]], int(class_ids.max()) + 1)
                state.batchnorms = learning_reuse.entry_batchnorms(model, entry)
        if settings.update_option("update_rollback"):
            state.snapshot = learning_reuse.EntrySnapshot(model, entry, owner)
            state.heldout_before = learning_reuse.heldout_correct(model, entry, owner)
        return state

    def _end_update(self, model, record: DetectionRecord) -> None:
        """After the update's last epoch: keep the early stop's best epoch, then roll the
        update back if it lowered the entry's held-out accuracy (records both)."""
        state = self._update
        if state is None:
            return
        if state.early_stop is not None:
            state.early_stop.finish()
            record.update_epochs = state.early_stop.best_epochs
        if state.snapshot is not None and state.heldout_before is not None:
            owner = model.entry_creator[record.entry]
            after = learning_reuse.heldout_correct(model, record.entry, owner)
            n = len(learning_reuse.heldout(model, record.entry)[1])
            record.heldout_accuracy = [state.heldout_before / n, after / n]
            if learning_reuse.rollback_check(state.heldout_before, after):
                state.snapshot.restore()
                record.update_rolled_back = True

    @staticmethod
    def _nearest_entry(record: DetectionRecord) -> Optional[int]:
        """The entry forward transfer starts from: the complexity vote (lowest S), or for
        rules without S the candidate with the highest score of their own (``p_value``)."""
        if record.vote_complexity is not None:
            return record.vote_complexity
        if record.p_value:
            best = max(range(len(record.p_value)), key=lambda i: (record.p_value[i], -i))
            return record.candidate_entries[best]
        return None

    def _remember(self, model, entry: int, task: int, x, y, num_classes: int, after_training: bool = False) -> None:
        """Let the detector store what it keeps for a new entry (e.g. reference features),
        at creation or, for a detector with ``remember_after_training``, after training."""
        remember = getattr(self.detector, "remember", None)
        if remember is None or bool(getattr(self.detector, "remember_after_training", False)) != after_training:
            return
        cached = getattr(self.detector, "cached_features", None)
        features = cached(task) if cached is not None else None
        remember(model, entry, task, x, y, num_classes, features=features)

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
        if self._update is not None and self._update.train_indices is not None:  # the early stop's share left out
            strategy.adapted_dataset = strategy.adapted_dataset.subset(self._update.train_indices.tolist())

    def before_training_iteration(self, strategy, **kwargs):
        if self._update is not None:
            for bn in self._update.batchnorms:  # a balanced update normalises with the stored statistics
                bn.eval()

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
        if self._update is not None and self._update.weights is not None:
            # SDR's plugin runs first: the loss is the criterion's plain mean; weigh its classes equally
            strategy.loss = torch.nn.functional.cross_entropy(
                strategy.mb_output, strategy.mb_y, weight=self._update.weights.to(strategy.mb_output.device))
        if self._replay is not None and len(self._replay):
            replayed = self._replay.loss(strategy.model, torch.nn.functional.cross_entropy, strategy.device)
            strategy.loss = strategy.loss + replayed

    def after_training_epoch(self, strategy, **kwargs):
        right, seen = self._epoch_counts
        self.epoch_accuracies[-1].append(right / seen if seen else float("nan"))
        early_stop = None if self._update is None else self._update.early_stop
        if early_stop is not None and early_stop.after_epoch(strategy.model):
            if strategy.clock.train_exp_epochs + 1 < strategy.train_epochs:
                strategy.stop_training()

    def after_training_exp(self, strategy, **kwargs):
        record = self.current
        model = strategy.model
        settings = self.settings
        fit_note = ""
        heldout_elbo = None
        self._close_progress()
        if self.training_new_entry and model.has_generators:
            self._bar = self._progress(strategy, settings.vae_epochs, f"task {record.task} (VAE G_{record.entry})")
            try:
                report = fit_generator(
                    model.generators, record.entry, self._task_inputs.to(strategy.device),
                    epochs=settings.vae_epochs, lr=settings.vae_lr, batch_size=settings.vae_mb_size,
                    patience=settings.vae_patience,
                    on_epoch=None if self._bar is None else (lambda epoch: self._bar.update(1)),
                )
            finally:
                self._close_progress()
            heldout_elbo = report.best_holdout_elbo
            fit_note = f" | G_{record.entry}: {report.epochs_run} epochs, held-out ELBO {heldout_elbo:.1f} nats"
        if record.entry_updated:
            self._end_update(model, record)
        labels = self._task_labels
        if record.entry_updated:  # the entry's features moved: refit what was fitted on them
            labels = model.head_labels(record.task, labels)
        if self.training_new_entry or self.entry_moved:
            self._remember(model, record.entry, record.task, self._task_inputs, labels,
                           self._task_classes, after_training=True)
        fit_seconds: Dict[str, float] = {}  # one fit per state (__init__: _fit_as)
        for owner, router in self._fit_as.items():
            tick = time.perf_counter()
            router.fit(model, record.task, self._task_inputs, self._task_labels, self._task_classes,
                       new_entry=self.training_new_entry,
                       entry_updated=self.entry_moved)
            fit_seconds[owner] = time.perf_counter() - tick
        for router in self.routers:
            self.router_seconds[router.name] += fit_seconds[router.state_name]
        self._replay = None
        self._update = None
        # The entry's BatchNorm statistics are final from here on; the parameters stay
        # trainable for the user's plugins (EWC's importances...) until SDRFreezePlugin.
        model.end_entry_training()
        model.keep_e0_features(None)
        self._task_inputs = self._task_labels = None
        line = self.describe(record) + f" | {time.perf_counter() - self._train_start:.1f}s" + fit_note
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
            if not model.is_trained(task):
                continue  # untrained: E0 and an untrained head answer it (SDRModel.forward_single_task)
            ids = model.class_ids(int(task))
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

    @staticmethod
    def describe(record: DetectionRecord) -> str:
        """One human-readable line for a record."""
        head = f"[SDR] task {record.task}: "
        if record.decision == "warm_start":
            return head + f"warm start -> new entry {record.entry}"
        if record.consistency:
            scores = " ".join(
                f"T{t}:p={p:.2f},S={s:.3f}"
                for t, p, s in zip(record.candidate_tasks, record.consistency, record.complexity)
            )
        else:  # the two-sample rule (p-values) or Expert Gate (relatedness)
            name = "rel" if record.rule == "expert_gate" else "p"
            scores = " ".join(f"T{t}:{name}={v:.3g}" for t, v in zip(record.candidate_tasks, record.p_value))
            if record.power is not None:
                scores += f" power={record.power:.2f}"
        if record.decision == "reuse":
            verdict = f"reuse entry {record.reused_entry} (task {record.candidate_tasks[record.candidate_entries.index(record.reused_entry)]})"
            if record.class_permutation:
                verdict += f", classes matched as {record.class_permutation}"
            if record.update_rolled_back:
                verdict += ", entry update rolled back"
            elif record.update_epochs == 0:
                verdict += ", entry update of 0 epochs"
            elif record.entry_updated:
                verdict += ", entry updated" + (" (class-balanced)" if record.update_balanced else "")
        else:
            verdict = f"new entry {record.entry}"
        if record.gate_accuracy is not None:
            verdict += (f" (gate: head accuracy {record.gate_accuracy:.2f} "
                        f"{'>=' if record.gate_accuracy >= record.gate_threshold else '<'} {record.gate_threshold:.2f})")
        return head + verdict + f" [{scores}]"


class _UpdateState:
    """What one learning-reuse update carries between hooks (:meth:`SDRPlugin._begin_update`):
    ``train_indices`` ([n'] int64, the repeat's images it trains on; ``None``: all),
    ``early_stop``, ``weights`` ([width] float32 class weights; ``None``: plain mean),
    ``batchnorms`` (the entry's BatchNorm copies kept in eval mode), ``snapshot`` and
    ``heldout_before`` (the rollback's state and score before the update)."""

    def __init__(self):
        self.train_indices: Optional[torch.Tensor] = None
        self.early_stop: Optional[learning_reuse.EarlyStop] = None
        self.weights: Optional[torch.Tensor] = None
        self.batchnorms: List[torch.nn.Module] = []
        self.snapshot: Optional[learning_reuse.EntrySnapshot] = None
        self.heldout_before: Optional[int] = None


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
