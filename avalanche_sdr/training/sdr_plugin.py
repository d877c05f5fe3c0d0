"""The SDR behaviour as an Avalanche plugin: detect, then grow or reuse, then fit G.

Hook order inside one training experience (Avalanche 0.6.0, see AVALANCHE-NOTES):

1. ``before_train_dataset_adaptation`` — before the model or optimizer is touched:
   read the experience's training data, run detection against the repository
   (skipped for the warm-start tasks), and create a new entry or map the task to
   the reused one. The decision is recorded here, so it is fixed before any
   training on the task.
2. Avalanche's model adaptation adds the task's head; the strategy's optimizer then
   covers the head (reuse) or the head and the new adapter set (new).
3. ``before_training_epoch`` — the learning-rate schedule of new entries.
4. ``after_training_exp`` — for a new entry, fit its generator G on the task's
   training inputs (when the repository keeps generators); then freeze everything
   and print one line.

With ``verbose=True`` a task's training epochs and its generator's epochs also show
tqdm progress bars on stderr while they run (only where stderr is a terminal; they
are removed when done, so logs hold the per-task lines only).

A detector may keep per-entry state of its own (the two-sample rule's reference
features, Expert Gate's autoencoders): if it has a ``remember(model, entry, task, x,
y, num_classes, features=None)`` method, the plugin calls it right after creating an
entry (warm-start tasks included), or at the end of the entry's training when the
detector's ``remember_after_training`` is true (references in the entry's own feature
space).

Evaluation is checked too: ``before_eval_exp`` checks that the labels of a trained
task fit its head (0..c-1), so a malformed test set fails with a named error instead
of an index error inside the loss, and ``before_eval_forward`` refuses mini-batches
with NaN or Inf inputs, whose arbitrary predictions would otherwise count in the
accuracy.
"""
from __future__ import annotations

import sys
import time
from typing import List, Optional, Sequence

import torch
from avalanche.core import SupervisedPlugin

from avalanche_sdr.detection.decision import DetectionRecord
from avalanche_sdr.detection.detector import SimilarTaskDetector
from avalanche_sdr.training.data import InvalidTaskDataError, check_task_data, read_task_data
from avalanche_sdr.training.generator_fitting import fit_generator


class SDRPlugin(SupervisedPlugin):
    """Similar-task detection and repurposing for an :class:`SDRModel` (see module doc).

    :param detector: the detector to score new tasks with: a
        :class:`SimilarTaskDetector` or any object with its ``detect`` method (and
        optionally ``remember``).
    :param n_warm_start: number of first tasks trained as new without detection.
    :param new_task_epochs: epochs for a new entry's adapters and head.
    :param new_task_lr: initial learning rate for a new entry.
    :param lr_milestones: epochs (0-based, of a new entry) at which the learning
        rate is multiplied by ``lr_decay``.
    :param lr_decay: factor of each milestone.
    :param reuse_epochs: epochs of head-only training on a reused entry.
    :param reuse_lr: learning rate of head-only training.
    :param vae_epochs: maximum epochs of a new entry's generator.
    :param vae_lr: generator learning rate.
    :param vae_mb_size: generator mini-batch size.
    :param vae_patience: early-stopping patience of the generator (epochs).
    :param forward_transfer: initialise a new entry's adapters from the entry with
        the lowest S(j, t) (for rules without S: the candidate with the highest
        p-value or relatedness) instead of the identity (paper's future work; off by
        default).
    :param verbose: print one line per experience, and show progress bars of the
        training and generator epochs on a terminal.
    """

    def __init__(
        self,
        *,
        detector: SimilarTaskDetector,
        n_warm_start: int,
        new_task_epochs: int,
        new_task_lr: float,
        lr_milestones: Sequence[int],
        lr_decay: float,
        reuse_epochs: int,
        reuse_lr: float,
        vae_epochs: int,
        vae_lr: float,
        vae_mb_size: int,
        vae_patience: int,
        forward_transfer: bool = False,
        verbose: bool = True,
    ):
        super().__init__()
        if n_warm_start < 1:
            raise ValueError(f"n_warm_start must be >= 1 (detection needs entries to compare to), got {n_warm_start}")
        self.detector = detector
        self.n_warm_start = int(n_warm_start)
        self.new_task_epochs = int(new_task_epochs)
        self.new_task_lr = float(new_task_lr)
        self.lr_milestones = tuple(int(m) for m in lr_milestones)
        self.lr_decay = float(lr_decay)
        self.reuse_epochs = int(reuse_epochs)
        self.reuse_lr = float(reuse_lr)
        self.vae_epochs = int(vae_epochs)
        self.vae_lr = float(vae_lr)
        self.vae_mb_size = int(vae_mb_size)
        self.vae_patience = int(vae_patience)
        self.forward_transfer = bool(forward_transfer)
        self.verbose = verbose
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

    def learning_rate(self, epoch: int) -> float:
        """Learning rate of epoch ``epoch`` (0-based) of the current experience."""
        if not self.training_new_entry:
            return self.reuse_lr
        passed = sum(1 for m in self.lr_milestones if epoch >= m)
        return self.new_task_lr * self.lr_decay**passed

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
        if task in model.task_to_entry:
            raise ValueError(
                f"task label {task} was already trained; every experience of an SDR stream "
                "must carry a new task label (repeats are detected, not announced)"
            )
        self._close_progress()  # a bar left open by an experience that failed
        x, y = read_task_data(experience)
        num_classes = check_task_data(x, y, task=task, input_shape=model.input_shape)
        self._train_start = time.perf_counter()
        if len(self.records) < self.n_warm_start:
            entry = model.create_entry(task)
            self._remember(model, entry, task, x, y, num_classes)
            record = DetectionRecord(
                task=task, decision="warm_start", entry=entry, reused_entry=None,
                candidate_entries=[], candidate_tasks=[], consistency=[], complexity=[],
                vote_consistency=None, vote_complexity=None, rule="warm_start",
                detection_seconds=0.0,
            )
        else:
            record = self.detector.detect(model, task, x, y, num_classes)
            if record.decision == "new":
                init_from = self._nearest_entry(record) if self.forward_transfer else None
                record.entry = model.create_entry(task, init_from=init_from)
                start = time.perf_counter()
                self._remember(model, record.entry, task, x, y, num_classes)
                record.detection_seconds += time.perf_counter() - start
            else:
                model.assign_task(task, record.reused_entry)
        model.to(strategy.device)
        self.records.append(record)
        self.epoch_accuracies.append([])
        self._task_inputs, self._task_labels, self._task_classes = x, y, num_classes
        strategy.train_epochs = self.new_task_epochs if self.training_new_entry else self.reuse_epochs

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

    def _progress(self, total: int, desc: str):
        """A tqdm bar on stderr (``None`` when not verbose); disabled off a terminal."""
        if not self.verbose:
            return None
        from tqdm import tqdm

        return tqdm(total=total, desc=desc, unit="epoch", file=sys.stderr, leave=False, disable=None,
                    dynamic_ncols=True)

    def _close_progress(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def before_training_epoch(self, strategy, **kwargs):
        if self._bar is None:
            what = "new entry" if self.training_new_entry else "head only"
            self._bar = self._progress(strategy.train_epochs, f"task {self.current.task} ({what})")
        lr = self.learning_rate(strategy.clock.train_exp_epochs)
        for group in strategy.optimizer.param_groups:
            group["lr"] = lr
        self._epoch_counts = [0, 0]

    def after_training_iteration(self, strategy, **kwargs):
        with torch.no_grad():
            correct = (strategy.mb_output.argmax(dim=1) == strategy.mb_y).sum()
        self._epoch_counts[0] += int(correct)
        self._epoch_counts[1] += int(strategy.mb_y.shape[0])

    def after_training_epoch(self, strategy, **kwargs):
        right, seen = self._epoch_counts
        self.epoch_accuracies[-1].append(right / seen if seen else float("nan"))
        if self._bar is not None:
            self._bar.update(1)

    def after_training_exp(self, strategy, **kwargs):
        record = self.current
        model = strategy.model
        fit_note = ""
        self._close_progress()
        if self.training_new_entry and model.has_generators:
            self._bar = self._progress(self.vae_epochs, f"task {record.task} (VAE G_{record.entry})")
            try:
                report = fit_generator(
                    model.generators, record.entry, self._task_inputs.to(strategy.device),
                    epochs=self.vae_epochs, lr=self.vae_lr, batch_size=self.vae_mb_size,
                    patience=self.vae_patience,
                    on_epoch=None if self._bar is None else (lambda epoch: self._bar.update(1)),
                )
            finally:
                self._close_progress()
            fit_note = (
                f" | G_{record.entry}: {report.epochs_run} epochs, "
                f"held-out ELBO {report.best_holdout_elbo:.1f} nats"
            )
        if self.training_new_entry:
            self._remember(model, record.entry, record.task, self._task_inputs, self._task_labels,
                           self._task_classes, after_training=True)
        model.freeze_all()
        self._task_inputs = self._task_labels = None
        if self.verbose:
            print(self.describe(record) + f" | {time.perf_counter() - self._train_start:.1f}s" + fit_note, flush=True)

    def before_eval_exp(self, strategy, **kwargs):
        experience = strategy.experience
        model = strategy.model
        targets = getattr(experience.dataset, "targets", None)
        if targets is None or len(experience.dataset) == 0:
            return
        labels = getattr(targets, "uniques", None)
        labels = set(targets) if labels is None else labels
        for task in experience.task_labels:
            if str(int(task)) not in model.heads:
                continue  # an untrained task: the model's forward names it
            c = model.head_num_classes(int(task))
            outside = sorted(int(v) for v in labels if not 0 <= int(v) < c)
            if outside:
                raise InvalidTaskDataError(
                    f"task {int(task)}: evaluation labels {outside} lie outside 0..{c - 1}, "
                    f"the {c} classes its head was trained on"
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
        else:
            verdict = f"new entry {record.entry}"
        return head + verdict + f" [{scores}]"


__all__ = ["SDRPlugin"]
