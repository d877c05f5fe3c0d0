"""The SDR knowledge repository as an Avalanche dynamic model.

:class:`SDRModel` holds everything SDR keeps to predict every task seen so far and
to continue the stream (paper Fig. 2): the frozen backbone E0 with one EFT adapter
set E_m per *unique* entry m, one VAE generator G_m per entry (or none), each
entry's detector state, the task heads (:class:`~avalanche_sdr.models.heads.TaskHeads`:
one classification head f_t per *task* t or, with the learning reuse, a link to the
head of the entry's creating task, and the class ids of tasks trained on global class
ids) and the map task t -> entry m(t). Task t is predicted by ``f_t(E_{m(t)}(x))``;
entries are numbered in creation order, tasks are Avalanche task labels.

Each piece of state has one owner, and changes only through its owner's methods: the
entries and the task map here, the heads in ``model.heads``, the stored tensors
(detection states, router states, the learning reuse's stored images) in
:class:`~avalanche_sdr.models.stored.TensorStore` s written through the methods here
(which check the entry), their formats in :mod:`avalanche_sdr.models.stored`.

Why a dynamic model: Avalanche grows models in ``adaptation(experience)``, so the
repository adds its heads there and its memory is what the model holds. A task not
trained yet is answered by E0 features through a fresh head
(:meth:`SDRModel.forward_single_task`).

Each part with the method that sets it: docs/method.rst, section "The repository's
contents".
"""
from __future__ import annotations

import copy
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import torch
from torch import Tensor, nn

from avalanche.models import MultiTaskModule

from avalanche_sdr._batching import eval_batch_size
from avalanche_sdr._checks import check_images
from avalanche_sdr.models.eft import EFTEncoder
from avalanche_sdr.models.heads import TaskHeads
from avalanche_sdr.models.stored import TensorStore
from avalanche_sdr.models.vae import EFTVAEBank, IndependentVAEBank
from avalanche_sdr.vocabulary import DEFAULT_ROUTER, ROUTERS

_FORMER_KEYS = (("heads.", "heads.own."), ("head_class_ids.", "heads.ids."), ("head_permutations.", "heads.perms."))
"""``state_dict`` key prefixes of the repository before its heads had a module of their
own -> the current ones (:meth:`SDRModel._load_from_state_dict` reads both)."""


class SDRModel(MultiTaskModule):
    """Knowledge repository: frozen E0, unique adapter sets and VAEs, a head per task.

    The model does not decide anything itself: the strategy calls
    :meth:`create_entry` or :meth:`assign_task` before Avalanche's model adaptation,
    and :meth:`adaptation` then adds the head of the experience's task.

    :param encoder: the EFT-wrapped frozen backbone (E0 plus adapter sets).
    :param generators: a generator bank (``IndependentVAEBank`` or ``EFTVAEBank``)
        with ``add_entry(key)`` and ``elbo(x, key)``; ``None``: no generators (the
        repository then needs ``input_shape``).
    :param head_hidden: width of a hidden layer in each head; ``None`` (default)
        makes each head a single linear layer on the encoder features.
    :param input_shape: (C, H, W) of the images; required without generators,
        otherwise read from the generator bank.
    """

    def __init__(self, encoder: EFTEncoder, generators: Optional[nn.Module], head_hidden: Optional[int] = None,
                 input_shape: Optional[Tuple[int, int, int]] = None):
        super().__init__()
        if generators is None and input_shape is None:
            raise ValueError("an SDRModel without generators needs input_shape=(C, H, W)")
        self.encoder = encoder
        self.generators = generators
        self._input_shape = None if input_shape is None else tuple(int(v) for v in input_shape)
        self.head_hidden = head_hidden
        self.heads = TaskHeads(encoder.feature_dim, head_hidden)
        """The task heads, their links, permutations and class ids (:class:`~avalanche_sdr.models.heads.TaskHeads`)."""
        self.detection_states = TensorStore()
        """Per entry (key ``str(entry)``): the tensors its detector keeps (:meth:`set_detection_state`)."""
        self.routing_states = TensorStore()
        """Task-free routers' tensors (:mod:`avalanche_sdr.routers`), by key
        ``<router>_e<entry>`` or ``<router>_t<task>``: counted in memory, checkpointed."""
        self._routers: Dict[str, Any] = {}  # name -> router object (keep_routers), for predict
        self.entry_exemplars = TensorStore()
        """Per entry (key ``str(entry)``): the learning reuse's stored tensors
        (:meth:`set_exemplars`); counted in the entry's memory, checkpointed."""
        self.task_to_entry: Dict[int, int] = {}
        self.entry_creator: Dict[int, int] = {}
        self._entry_in_training: Optional[int] = None

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        """Reads a ``state_dict`` of either key layout (:data:`_FORMER_KEYS`)."""
        for key in [k for k in state_dict if k.startswith(prefix)]:
            rest = key[len(prefix):]
            for old, new in _FORMER_KEYS:
                if rest.startswith(old) and not rest.startswith(("heads.own.", "heads.ids.", "heads.perms.")):
                    state_dict[prefix + new + rest[len(old):]] = state_dict.pop(key)
                    break
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def _device(self):
        return next(self.encoder.parameters()).device

    def _check_entry(self, entry: int) -> None:
        if entry not in self.entry_creator:
            raise KeyError(f"entry {entry} does not exist; the repository holds entries {self.entries}")

    # ------------------------------------------------------------------ entries
    @property
    def entries(self) -> List[int]:
        """Unique entry ids, in creation order."""
        return sorted(self.entry_creator)

    @property
    def num_entries(self) -> int:
        """C, the number of unique entries (adapter set + generator pairs)."""
        return len(self.entry_creator)

    def create_entry(self, task: int, init_from: Optional[int] = None) -> int:
        """Add a new unique entry (adapter set and generator) created by ``task``.

        :param task: task label that creates the entry; it is also mapped to it.
        :param init_from: entry whose adapter values initialise the new adapters
            (forward transfer); ``None`` starts from the identity (E_m == E0).
        :return: the new entry id.
        """
        entry = self.num_entries
        self.encoder.add_entry(entry, init_from=init_from)
        if self.generators is not None:
            self.generators.add_entry(entry)
        self.entry_creator[entry] = int(task)
        self.task_to_entry[int(task)] = entry
        return entry

    def assign_task(self, task: int, entry: int) -> None:
        """Map ``task`` to an existing entry (reuse of E_entry and G_entry)."""
        self._check_entry(entry)
        self.task_to_entry[int(task)] = int(entry)

    def entry_of(self, task: int) -> int:
        """The entry task ``task`` is predicted with."""
        try:
            return self.task_to_entry[int(task)]
        except KeyError:
            raise KeyError(
                f"task {task} has not been trained: the repository knows tasks "
                f"{sorted(self.task_to_entry)}"
            ) from None

    def link_head(self, task: int, owner: int, permutation=None) -> None:
        """Let ``task`` answer through ``owner``'s head instead of a head of its own
        (the learning reuse: one head per entry), :meth:`TaskHeads.link
        <avalanche_sdr.models.heads.TaskHeads.link>` once both are checked to map to one entry.

        :param task: a task mapped to ``owner``'s entry, without a head of its own.
        :param owner: a task with a head of its own (the entry's creating task).
        :param permutation: local class k of ``task`` is output ``permutation[k]`` of
            the owner's head; ``None``: the identity.
        :raises ValueError: the two are mapped to different entries, or the errors of
            ``TaskHeads.link``.
        """
        if self.entry_of(task) != self.entry_of(owner):
            raise ValueError(f"task {task} (entry {self.entry_of(task)}) cannot answer through the head of "
                             f"task {owner} (entry {self.entry_of(owner)})")
        self.heads.link(task, owner, permutation)

    @property
    def trained_tasks(self) -> List[int]:
        """Tasks with a head (own or linked), in training order."""
        return [t for t in self.task_to_entry if self.heads.is_trained(t)]

    @property
    def has_generators(self) -> bool:
        """Whether the repository keeps a generator per entry."""
        return self.generators is not None

    # ------------------------------------------------------------------ stored tensors
    def set_detection_state(self, entry: int, tensors: Mapping[str, Tensor]) -> None:
        """Store (or replace) the tensors a detector keeps for ``entry``.

        :param entry: an existing entry.
        :param tensors: name -> tensor (names without dots); copied, no gradients.
        """
        self._check_entry(entry)
        self.detection_states.put(str(int(entry)), tensors, self._device())

    def detection_state(self, entry: int) -> Dict[str, Tensor]:
        """The tensors stored for ``entry`` by :meth:`set_detection_state` (empty if none)."""
        return self.detection_states.read(str(int(entry)))

    def set_routing_state(self, key: str, tensors: Mapping[str, Tensor]) -> None:
        """Store (or replace) a router's tensors under ``key`` (see :attr:`routing_states`)."""
        self.routing_states.put(key, tensors, self._device())

    def routing_state(self, key: str) -> Dict[str, Tensor]:
        """The tensors stored by :meth:`set_routing_state` under ``key`` (empty if none)."""
        return self.routing_states.read(key)

    def set_exemplars(self, entry: int, tensors: Mapping[str, Tensor], replace: bool = True) -> None:
        """Store tensors of ``entry`` for the learning reuse: its stored images (``images``
        [n, C, H, W], uint8 or float32, as :func:`~avalanche_sdr.models.stored.stored_images`
        keeps them; ``labels`` [n] int64 in the entry's head space) and what it keeps
        beside them (held-out images, class counts).

        :param entry: an existing entry.
        :param tensors: name -> tensor; copied to the model's device, no gradients.
        :param replace: ``True``: these tensors are the entry's set; ``False``: add them
            to (or replace them in) the entry's existing set.
        :raises KeyError: an entry that does not exist, or ``replace=False`` for an
            entry with no set yet.
        """
        self._check_entry(entry)
        key = str(int(entry))
        if replace:
            self.entry_exemplars.put(key, tensors, self._device())
        elif key not in self.entry_exemplars:
            raise KeyError(f"entry {entry} has no stored images to keep {sorted(tensors)} beside")
        else:
            self.entry_exemplars.add(key, tensors)

    def exemplars(self, entry: int) -> Dict[str, Tensor]:
        """The tensors stored for ``entry`` by :meth:`set_exemplars` (empty if none)."""
        return self.entry_exemplars.read(str(int(entry)))

    # ------------------------------------------------------------------ routers
    def keep_routers(self, routers) -> None:
        """Remember the task-free router objects fitted into this repository (by their
        ``name``), so that :meth:`predict` can be given their names. The strategy calls
        it with its routers, and :func:`~avalanche_sdr.training.load_repository` with the
        routers its checkpoint names. Plain attributes: the routers' state is in
        :attr:`routing_states`.

        :param routers: router objects (:class:`~avalanche_sdr.routers.Router`).
        """
        self._routers.update({router.name: router for router in routers})

    @property
    def router_names(self) -> List[str]:
        """The names of the routers kept by :meth:`keep_routers`, in the order kept."""
        return list(self._routers)

    def predict(self, x: Tensor, router=None):
        """Task-free prediction: class ids of ``x`` without task labels.

        :param x: [N, C, H, W] float images in [0, 1] (on the model's device).
        :param router: ``None`` (default): SDR's recommended router, ``"lda_weighted"``;
            the name of a router the repository was fitted with
            (``SDRStrategy(routers=...)``: ``"lda_weighted"``, ``"lda"``, ``"gaussian"``,
            ``"expert_gate"``), or a router object
            (:class:`~avalanche_sdr.routers.Router`) fitted into it.
        :return: a :class:`~avalanche_sdr.routers.TaskFreePrediction`
            (``class_ids``, ``tasks``, ``entries``: int64 [N]).
        :raises TypeError: ``x`` is not a float tensor of the model's dtype (uint8 or
            0-255 pixels: ``x.float() / 255``; float64: ``x.float()``).
        :raises ValueError: an unknown router name; ``x`` not [N, C, H, W] of the
            repository's (C, H, W) (:attr:`input_shape`), on another device, not finite, or
            with values far outside [0, 1] (:func:`~avalanche_sdr._checks.check_images`:
            the message says what to do).
        :raises RuntimeError: the repository was not fitted with the router (the message
            says how to fit it).
        """
        reference = next(self.encoder.parameters())
        check_images(x, shape=self.input_shape, dtype=reference.dtype, device=reference.device)
        if router is None:
            router = DEFAULT_ROUTER
        if isinstance(router, str):
            if router not in ROUTERS:
                raise ValueError(f"unknown router {router!r}; available: {list(ROUTERS)}")
            if router not in self._routers:
                raise RuntimeError(
                    f"the repository has no {router!r} router (it was fitted with {self.router_names or 'none'}): "
                    f"build the strategy with routers=({router!r},) and train it from the first task")
            router = self._routers[router]
        return router.route(self, x)


    @property
    def input_shape(self) -> Tuple[int, int, int]:
        """(C, H, W) of the images the repository takes: what its generators model."""
        if self._input_shape is not None:
            return self._input_shape
        bank = self.generators
        if isinstance(bank, IndependentVAEBank):
            c, size = bank.config["in_channels"], bank.config["image_size"]
        else:
            c, size = bank.base.in_channels, bank.base.image_size
        return int(c), int(size), int(size)


    # ------------------------------------------------------------------ layout
    def layout(self) -> Dict[str, Any]:
        """The repository's structure, without tensor values (JSON-safe).

        ``{"entries": [[entry, creator task], ...] (creation order),
        "task_to_entry": [[task, entry], ...] (training order),
        "heads": [[task, classes], ...] (creation order),
        "max_class_label": int,
        "detection_states": [[entry, {name: [shape, dtype]}], ...],
        "class_ids": [[task, [class ids]], ...],
        "routing_states": [[key, {name: [shape, dtype]}], ...]}`` — what
        :meth:`restore_layout` needs to rebuild an empty repository so that a saved
        ``state_dict`` loads into it. ``"class_ids"`` lists the tasks trained on global
        class ids (:meth:`TaskHeads.set_class_ids
        <avalanche_sdr.models.heads.TaskHeads.set_class_ids>`) and is left out when there
        are none; ``"routing_states"`` likewise (a repository fitted with task-free routers);
        ``"head_links": [[task, owner task, [permutation]], ...]`` (training order) and
        ``"exemplars": [[entry, {name: [shape, dtype]}], ...]`` appear with the
        learning reuse (:meth:`link_head`, :meth:`set_exemplars`).
        """
        heads = self.heads
        layout = {
            "entries": [[int(e), int(self.entry_creator[e])] for e in self.entries],
            "task_to_entry": [[int(t), int(e)] for t, e in self.task_to_entry.items()],
            "heads": [[int(key), heads.num_classes(int(key))] for key in heads.own],
            "max_class_label": int(self.max_class_label),
            "detection_states": [[int(key), shapes] for key, shapes in self.detection_states.layout()],
        }
        if len(self.routing_states):
            layout["routing_states"] = self.routing_states.layout()
        if heads.links:
            layout["head_links"] = [[int(t), int(o), heads.permutation(t)] for t, o in heads.links.items()]
        if len(self.entry_exemplars):
            layout["exemplars"] = [[int(key), shapes] for key, shapes in self.entry_exemplars.layout()]
        if len(heads.ids):
            layout["class_ids"] = [[int(key), heads.class_ids(int(key))] for key in heads.ids]
        return layout

    def restore_layout(self, layout: Mapping[str, Any]) -> None:
        """Rebuild the entries, task map and heads of :meth:`layout` in this empty repository.

        New entries and heads get fresh values (load the saved ``state_dict`` next);
        everything ends frozen, as after a finished experience.

        :param layout: a dict from :meth:`layout` (also after a JSON round trip).
        :raises RuntimeError: if the repository already holds entries or heads.
        :raises ValueError: if the layout's entries are not numbered 0, 1, 2, ...
        """
        heads = self.heads
        if self.entry_creator or len(heads) or len(heads.ids) or heads.links:
            raise RuntimeError(
                f"restore_layout needs an empty repository; this one holds entries {self.entries} "
                f"and heads for tasks {[int(k) for k in heads.own]}"
            )
        for entry, task in layout["entries"]:
            if int(entry) != self.num_entries:
                raise ValueError(f"layout entries must be numbered 0, 1, 2, ... in order; got entry {entry}")
            self.encoder.add_entry(int(entry))
            if self.generators is not None:
                self.generators.add_entry(int(entry))
            self.entry_creator[int(entry)] = int(task)
        device = self._device()
        self.detection_states.restore(layout.get("detection_states", []), device)
        self.routing_states.restore(layout.get("routing_states", []), device)
        for task, entry in layout["task_to_entry"]:
            self.assign_task(int(task), int(entry))
        for task, ids in layout.get("class_ids", []):
            heads.set_class_ids(int(task), ids)
        for task, num_classes in layout["heads"]:
            heads.add(int(task), int(num_classes))
        for task, owner, permutation in layout.get("head_links", []):
            self.link_head(int(task), int(owner), permutation)
        self.entry_exemplars.restore(layout.get("exemplars", []), device)  # images, labels, held-out
        # Avalanche's MultiTaskModule bookkeeping, as adaptation() left it.
        self.known_train_tasks_labels = set(self.task_to_entry)
        self.max_class_label = int(layout["max_class_label"])
        self.freeze_all()

    def adaptation(self, experience) -> None:
        """Avalanche hook: add the head of the experience's task when training.

        Training: the experience's task must already be mapped to an entry (the
        strategy does this before model adaptation); its head gets one output per
        class of the experience (labels 0..c-1, or c global class ids, see
        :meth:`TaskHeads.set_class_ids <avalanche_sdr.models.heads.TaskHeads.set_class_ids>`).

        Evaluation: for a task without a head, the experience's classes are noted:
        they size the untrained head that answers it (:meth:`forward_single_task`).
        Nothing is added to the repository.
        """
        super().adaptation(experience)
        classes = sorted({int(c) for c in experience.classes_in_this_experience})
        heads = self.heads
        if not self.training:
            for task in experience.task_labels:
                if not heads.is_trained(task):
                    heads.announce(task, classes)
            return
        for task in experience.task_labels:
            if int(task) not in self.task_to_entry:
                raise RuntimeError(
                    f"task {task} reached SDRModel.adaptation without an entry: SDRModel is "
                    "trained through SDRStrategy, which maps each task before adaptation"
                )
            heads.set_class_ids(task, classes)
            width = len(heads.class_ids(task)) if heads.has_class_ids(task) else int(max(classes)) + 1
            if int(task) in heads.links:
                if width != heads.num_classes(task):
                    raise ValueError(f"task {task} has {width} classes but answers through task "
                                     f"{heads.owner(task)}'s head of {heads.num_classes(task)}")
            else:
                heads.add(task, width)
            heads.forget_untrained(task)

    # ------------------------------------------------------------------ forward
    def features(self, x: Tensor, entry: Optional[int]) -> Tensor:
        """E_entry(x): [N, C, H, W] in [0, 1] -> [N, feature_dim]; ``None`` uses E0.

        Only the entry being trained (:meth:`trainable_for`) runs the encoder in training
        mode: any other entry, read while one trains (a replayed sample of an earlier
        task, or every task's output for ``model(x, None)``), is read in eval mode, so
        its BatchNorm statistics never move.
        """
        self.encoder.set_active(entry)
        if self.encoder.training and entry != self._entry_in_training:
            self.encoder.eval()
            try:
                return self.encoder(x)
            finally:
                self.encoder.train()
        return self.encoder(x)

    @torch.no_grad()
    def batched_features(self, x: Tensor, entry: Optional[int], batch_size: Optional[int] = None) -> Tensor:
        """E_entry(x) of many images, in eval mode and mini-batches, on the CPU.

        :param x: [n, C, H, W] images in [0, 1] (any device).
        :param entry: an entry, or ``None`` for E0.
        :param batch_size: images per forward pass; ``None``: chosen for the model's device
            (:func:`~avalanche_sdr._batching.eval_batch_size`).
        :return: [n, feature_dim] float32 on the CPU. The training mode and the active
            entry are restored afterwards.
        """
        device = next(self.parameters()).device
        batch_size = eval_batch_size(device, batch_size)
        was_training = self.training
        self.eval()
        try:
            return torch.cat([self.features(x[i : i + batch_size].to(device), entry).cpu()
                              for i in range(0, x.shape[0], batch_size)])
        finally:
            self.encoder.set_active(None)
            self.train(was_training)

    def forward_single_task(self, x: Tensor, task_label: int) -> Tensor:
        """f_t(E_{m(t)}(x)): [N, C, H, W] -> logits [N, c_t].

        With global class ids (:meth:`TaskHeads.set_class_ids
        <avalanche_sdr.models.heads.TaskHeads.set_class_ids>`) the c local logits are placed
        at the task's class-id columns of an [N, max id + 1] tensor whose other
        columns hold the lowest finite value of the dtype: the argmax is the original
        class id, and a softmax or cross-entropy over the row equals the one over
        the c local logits.

        A task that has not been trained (no head) is answered by **E0 features
        (no adapters) through a fresh, untrained head** with one output per class the
        evaluated experience announced in model adaptation (Avalanche does this
        before every evaluation experience). That head is initialised from a seed
        derived from the task label (:data:`~avalanche_sdr.models.heads.UNTRAINED_HEAD_SEED`
        + t) without
        touching the global RNG, so the answer is reproducible; it is not stored in
        the repository (no memory, not in the ``state_dict`` or checkpoints). The
        first such answer per task issues an
        :class:`~avalanche_sdr.models.heads.UntrainedTaskWarning`.

        :raises KeyError: an untrained task no evaluation experience announced.
        """
        if not self.heads.is_trained(task_label):
            if int(task_label) in self.task_to_entry:
                raise KeyError(f"task {task_label} has no head yet")
            if not self.heads.announced(task_label):
                raise KeyError(
                    f"task {task_label} has not been trained: the repository knows tasks {sorted(self.task_to_entry)}; "
                    "an untrained task is answered (by E0 and an untrained head) only when evaluated through an "
                    "Avalanche strategy, whose model adaptation announces the task's classes")
            return self.heads.untrained_logits(task_label, self.features(x, None))
        return self.heads.logits(task_label, self.features(x, self.entry_of(task_label)))

    def forward_all_tasks(self, x: Tensor) -> Dict[int, Tensor]:
        """Every trained task's output, as Avalanche's ``MultiTaskModule.forward_all_tasks``.

        :param x: [N, C, H, W] images in [0, 1].
        :return: ``{task: logits}`` for every task with a head (trained, or being
            trained), in training order; ``logits`` as :meth:`forward_single_task`
            returns them ([N, c_t], or [N, max class id + 1] for a task trained on
            global class ids). Empty before the first task.
        """
        return {task: self.forward_single_task(x, task) for task in self.trained_tasks}

    def forward(self, x: Tensor, task_labels) -> Tensor:
        """Task-aware forward on a mini-batch that may mix tasks.

        :param x: [N, C, H, W] images in [0, 1].
        :param task_labels: int, or [N] int tensor of task labels; ``None``: every
            trained task's output (:meth:`forward_all_tasks`), as Avalanche's
            multi-task modules answer it (what ``LwFPlugin`` distils).
        :return: [N, max classes] logits (columns: local labels, or class ids for a
            task trained on global class ids); columns beyond a task's own classes
            hold the lowest finite value of the dtype, so they never win an argmax and
            add nothing to a softmax. For ``task_labels=None``: a dict task -> logits.
        """
        if task_labels is None:
            return self.forward_all_tasks(x)
        if isinstance(task_labels, int):
            return self.forward_single_task(x, task_labels)
        tasks = torch.unique(task_labels)
        if len(tasks) == 1:
            return self.forward_single_task(x, int(tasks[0]))
        parts = []
        for t in tasks:
            mask = task_labels == t
            parts.append((mask, self.forward_single_task(x[mask], int(t))))
        width = max(logits.shape[1] for _, logits in parts)
        out = torch.full((x.shape[0], width), torch.finfo(x.dtype).min, device=x.device, dtype=x.dtype)
        for mask, logits in parts:
            out[mask, : logits.shape[1]] = logits
        return out


    # ------------------------------------------------------------------ training state
    def train(self, mode: bool = True) -> "SDRModel":
        """Set training mode without ever updating a stored entry by accident.

        Heads follow ``mode``. The encoder is in training mode only while an entry is
        being trained (:meth:`trainable_for` with ``train_encoder_entry=True``), so a
        reused entry's BatchNorm statistics never move while a new head trains on it.
        Generators stay in eval mode: they are trained by their own fitting routine.
        """
        super().train(mode)
        if mode and self._entry_in_training is None:
            self.encoder.eval()
        if self.generators is not None:
            self.generators.eval()
        return self

    def end_entry_training(self) -> None:
        """End the training of the entry :meth:`trainable_for` unfroze: from now on the
        encoder stays in eval mode, so the entry's BatchNorm statistics are final.

        The parameters keep ``requires_grad`` until :meth:`freeze_all`, so that what runs
        after training (e.g. Avalanche's ``EWCPlugin`` and ``MASPlugin``, which compute
        importances from gradients) still gets gradients of what the experience trained.
        """
        self._entry_in_training = None
        self.train(self.training)

    def freeze_all(self) -> None:
        """Set ``requires_grad=False`` on every parameter (and drop stale grads)."""
        for p in self.parameters():
            p.requires_grad_(False)
            p.grad = None
        self._entry_in_training = None

    def trainable_for(self, task: int, train_encoder_entry: bool,
                      entry_parameters: Optional[Sequence[nn.Parameter]] = None) -> List[nn.Parameter]:
        """Unfreeze exactly what training ``task`` updates and return those parameters.

        :param task: the task being trained (the head it answers through is always
            trained: its own, or its owner's for a linked task).
        :param train_encoder_entry: also train the adapter set and BatchNorm copies of
            the task's entry (a new entry, or the learning reuse's update); ``False``
            for head-only reuse.
        :param entry_parameters: with ``train_encoder_entry``, train only these of the
            entry's parameters (an update of the entry's top,
            :meth:`~avalanche_sdr.training.reuse.Reuse.update_parameters`); ``None``: all.
        :raises ValueError: ``entry_parameters`` without ``train_encoder_entry``, or holding
            a parameter that is not the task's entry's.
        """
        if entry_parameters is not None and not train_encoder_entry:
            raise ValueError("entry_parameters names entry parameters to train: pass train_encoder_entry=True")
        entry = self.entry_of(task) if train_encoder_entry else None
        chosen: List[nn.Parameter] = []
        if entry is not None:
            chosen = list(self.encoder.entry_parameters(entry))
            if entry_parameters is not None:
                known = {id(p) for p in chosen}
                chosen = list(entry_parameters)
                if any(id(p) not in known for p in chosen):
                    raise ValueError(f"entry_parameters must be parameters of task {task}'s entry {entry} "
                                     "(model.encoder.entry_parameters)")
        self.freeze_all()
        params: List[nn.Parameter] = list(self.heads.module(task).parameters()) + chosen
        self._entry_in_training = entry
        for p in params:
            p.requires_grad_(True)
        self.train(self.training)
        return params



def build_sdr_model(
    backbone: nn.Module,
    *,
    in_channels: int,
    image_size: int,
    a: int = 8,
    b: int = 16,
    gamma: float = 1.0,
    task_batchnorm: bool = True,
    generator: Optional[str] = "independent",
    base_vae: Optional[nn.Module] = None,
    latent_dim: int = 32,
    vae_width: int = 32,
    head_hidden: Optional[int] = None,
) -> SDRModel:
    """Build an empty repository around a frozen copy of a backbone.

    The repository wraps and freezes its own deep copy (``copy.deepcopy``) of
    ``backbone`` and of ``base_vae``: the modules passed are never changed (their
    weights, ``requires_grad`` flags, modes, classes and submodules stay as they were),
    so the same E0 can build another repository or start a baseline
    (:func:`~avalanche_sdr.baselines.make_multi_head_net`). Every argument is checked
    before anything is copied or built.

    :param backbone: E0, a module with ``feature_dim`` (see
        :mod:`avalanche_sdr.models.backbones`); copied, not changed.
    :param in_channels: image channels C the generators model.
    :param image_size: image height == width the generators model.
    :param a: EFT channels per group of the 3x3 transformation (paper 8).
    :param b: EFT channels per group of the 1x1 transformation (paper 16).
    :param gamma: weight of the 1x1 branch (paper 1).
    :param task_batchnorm: give every entry its own BatchNorm copies.
    :param generator: ``"independent"`` — a full conv VAE per entry (paper: "EFT
        for E"); ``"eft"`` — EFT adapters on a frozen shared ``base_vae`` (paper:
        "EFT for E and G"); ``None`` — no generators (only for detectors that do not
        use them, such as ``detector="two_sample"``): an entry is then its adapters,
        BatchNorm copies, detection state and heads.
    :param base_vae: the shared, usually pretrained, ``ConvVAE`` for ``"eft"``; copied,
        not changed.
    :param latent_dim: latent dimension of new VAEs (``"independent"``).
    :param vae_width: first-layer channels of new VAEs (``"independent"``).
    :param head_hidden: hidden width of the heads (``None``: linear heads).
    :raises ValueError: a backbone whose input normalisation takes another channel
        count than ``in_channels``; unknown ``generator``; ``base_vae`` missing,
        superfluous or of another image shape.
    """
    normalize = getattr(backbone, "normalize", None)
    backbone_channels = getattr(normalize, "in_channels", in_channels)
    if backbone_channels != in_channels:
        raise ValueError(
            f"the backbone takes {backbone_channels}-channel images but in_channels={in_channels}; "
            "build both for the stream's images"
        )
    if generator not in (None, "independent", "eft"):
        raise ValueError(f"generator must be 'independent', 'eft' or None, got {generator!r}")
    if generator != "eft" and base_vae is not None:
        raise ValueError("base_vae is only used with generator='eft'")
    if generator == "eft":
        if base_vae is None:
            raise ValueError("generator='eft' needs base_vae, a (pretrained) ConvVAE to adapt")
        if (base_vae.in_channels, base_vae.image_size) != (in_channels, image_size):
            raise ValueError(
                f"base_vae models {base_vae.in_channels}x{base_vae.image_size}x{base_vae.image_size} "
                f"images, the repository {in_channels}x{image_size}x{image_size}"
            )
    encoder = EFTEncoder(copy.deepcopy(backbone), a=a, b=b, gamma=gamma, task_batchnorm=task_batchnorm)
    if generator is None:
        return SDRModel(encoder, None, head_hidden=head_hidden, input_shape=(in_channels, image_size, image_size))
    if generator == "independent":
        bank = IndependentVAEBank(in_channels, image_size, latent_dim=latent_dim, width=vae_width)
    else:
        bank = EFTVAEBank(copy.deepcopy(base_vae), a=a, b=b, gamma=gamma)
    return SDRModel(encoder, bank, head_hidden=head_hidden)


__all__ = ["SDRModel", "build_sdr_model"]
