"""The SDR knowledge repository as an Avalanche dynamic model.

:class:`SDRModel` holds everything SDR keeps to predict every task seen so far and
to continue the stream (paper Fig. 2): the frozen backbone E0 with one EFT adapter
set E_m per *unique* entry m, one VAE generator G_m per entry (or none), each
entry's detector state, one classification head f_t per *task* t (or, with the
learning reuse, a link to the head of the entry's creating task), the map task t ->
entry m(t), and the class ids of tasks trained on global class ids. Task t is
predicted by ``f_t(E_{m(t)}(x))``; entries are numbered in creation order, tasks are
Avalanche task labels.

Why a dynamic model: Avalanche grows models in ``adaptation(experience)``, so the
repository adds its heads there and its memory is what the model holds. A task not
trained yet is answered by E0 features through a fresh head
(:meth:`SDRModel.forward_single_task`).

Each part with the method that sets it: docs/method.rst, section "The repository's
contents".
"""
from __future__ import annotations

import copy
import hashlib
import warnings
from typing import Any, Dict, List, Mapping, Optional, Tuple

import torch
from torch import Tensor, nn

from avalanche.models import MultiTaskModule

from avalanche_sdr._batching import eval_batch_size
from avalanche_sdr._checks import check_images
from avalanche_sdr.vocabulary import DEFAULT_ROUTER, ROUTERS
from avalanche_sdr.models.eft import EFTEncoder
from avalanche_sdr.models.vae import EFTVAEBank, IndependentVAEBank


def stored_images(images: Tensor) -> Tensor:
    """Images as the repository stores them: uint8 ``round(x * 255)`` when every value
    lies in [0, 1] (4x smaller), else float32 (uint8 input is kept as it is).

    :param images: [n, C, H, W] float or uint8 images.
    """
    if images.is_floating_point() and images.numel() and float(images.min()) >= 0.0 and float(images.max()) <= 1.0:
        return (images * 255.0).round().to(torch.uint8)
    return images if images.dtype == torch.uint8 else images.float()


def float_images(images: Tensor) -> Tensor:
    """Stored images (:func:`stored_images`) back as float32: uint8 ones divided by 255."""
    return images.float() / 255.0 if images.dtype == torch.uint8 else images.float()


class TensorSet(nn.Module):
    """A named set of buffers (no parameters): one entry's detection state, or a router's.

    Buffers are part of the ``state_dict`` (so checkpoints keep them) and of every
    memory count, and move with ``.to(device)``.
    """

    def __init__(self, tensors: Mapping[str, Tensor]):
        super().__init__()
        for name, tensor in tensors.items():
            self.register_buffer(name, tensor.detach().clone())

    def as_dict(self) -> Dict[str, Tensor]:
        """The buffers by name."""
        return dict(self.named_buffers())

    def shapes(self) -> Dict[str, List[Any]]:
        """``{name: [shape list, dtype name]}`` (JSON-safe), what a layout records."""
        return {name: [list(t.shape), str(t.dtype).replace("torch.", "")] for name, t in self.named_buffers()}

    @staticmethod
    def zeros(shapes: Mapping[str, Any]) -> Dict[str, Tensor]:
        """Zero tensors of the shapes and dtypes :meth:`shapes` recorded (values to load next)."""
        return {name: torch.zeros(shape, dtype=getattr(torch, dtype)) for name, (shape, dtype) in shapes.items()}


UNTRAINED_HEAD_SEED = 0x5D2
"""Base seed of the untrained heads that answer untrained tasks (task t: this + t)."""


class UntrainedTaskWarning(UserWarning):
    """A task that has not been trained was evaluated: E0 and an untrained head answer it."""


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
        self.heads = nn.ModuleDict()
        self.detection_states = nn.ModuleDict()
        self.routing_states = nn.ModuleDict()
        """Task-free routers' tensors (:mod:`avalanche_sdr.routers`), by key
        ``<router>_e<entry>`` or ``<router>_t<task>``: counted in memory, checkpointed."""
        self._routers: Dict[str, Any] = {}  # name -> router object (keep_routers), for predict
        self.head_class_ids = nn.ModuleDict()
        """Per task trained on global class ids: a :class:`TensorSet` with ``ids``, the
        sorted class ids [c] int64 of its head's c outputs (absent for local labels)."""
        self.head_links: Dict[int, int] = {}
        """Task -> the task whose head it answers through (:meth:`link_head`); tasks with
        a head of their own are absent."""
        self.head_permutations = nn.ModuleDict()
        """Per linked task whose classes are in another order than its head owner's: a
        :class:`TensorSet` with ``perm`` [c] int64 (local class k -> owner output perm[k])."""
        self.entry_exemplars = nn.ModuleDict()
        """Per entry (key ``str(entry)``): a :class:`TensorSet` with ``images`` [n, C, H, W]
        (uint8, value * 255, or float32) and ``labels`` [n] int64 in the entry's head
        space (:meth:`set_exemplars`); counted in the entry's memory, checkpointed."""
        self.task_to_entry: Dict[int, int] = {}
        self.entry_creator: Dict[int, int] = {}
        self._entry_in_training: Optional[int] = None
        # Untrained tasks (see forward_single_task): class ids announced by an
        # evaluation experience, and the untrained heads built for them. Plain
        # attributes: not in the state_dict, the memory or any checkpoint.
        self._untrained_class_ids: Dict[int, List[int]] = {}
        self._untrained_heads: Dict[Tuple[int, Tuple[int, ...]], nn.Module] = {}
        self._warned_untrained: set = set()

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
        if entry not in self.entry_creator:
            raise KeyError(f"entry {entry} does not exist; the repository holds entries {self.entries}")
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

    @property
    def has_generators(self) -> bool:
        """Whether the repository keeps a generator per entry."""
        return self.generators is not None

    def set_detection_state(self, entry: int, tensors: Mapping[str, Tensor]) -> None:
        """Store (or replace) the tensors a detector keeps for ``entry``.

        :param entry: an existing entry.
        :param tensors: name -> tensor (names without dots); copied, no gradients.
        """
        if entry not in self.entry_creator:
            raise KeyError(f"entry {entry} does not exist; the repository holds entries {self.entries}")
        device = next(self.encoder.parameters()).device
        self.detection_states[str(int(entry))] = TensorSet(tensors).to(device)

    def detection_state(self, entry: int) -> Dict[str, Tensor]:
        """The tensors stored for ``entry`` by :meth:`set_detection_state` (empty if none)."""
        state = self.detection_states[str(int(entry))] if str(int(entry)) in self.detection_states else None
        return {} if state is None else state.as_dict()

    def set_routing_state(self, key: str, tensors: Mapping[str, Tensor]) -> None:
        """Store (or replace) a router's tensors under ``key`` (see :attr:`routing_states`)."""
        device = next(self.encoder.parameters()).device
        self.routing_states[key] = TensorSet(tensors).to(device)

    def routing_state(self, key: str) -> Dict[str, Tensor]:
        """The tensors stored by :meth:`set_routing_state` under ``key`` (empty if none)."""
        return self.routing_states[key].as_dict() if key in self.routing_states else {}

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

    def entry_bytes(self, entry: int) -> int:
        """Bytes of one entry: its adapters, BatchNorm copies, generator (if any),
        detection state and stored images (if any).

        Parameters and buffers at their stored dtype (the memory definition of
        docs/method.rst).
        """
        modules = list(self.encoder.entry_modules(entry))
        if self.generators is not None:
            modules += list(self.generators.entry_modules(entry))
        if str(int(entry)) in self.detection_states:
            modules.append(self.detection_states[str(int(entry))])
        if str(int(entry)) in self.entry_exemplars:
            modules.append(self.entry_exemplars[str(int(entry))])
        tensors = {id(t): t for m in modules for t in list(m.parameters()) + list(m.buffers())}
        return sum(t.numel() * t.element_size() for t in tensors.values())

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
        class ids (:meth:`set_class_ids`) and is left out when there are none;
        ``"routing_states"`` likewise (a repository fitted with task-free routers);
        ``"head_links": [[task, owner task, [permutation]], ...]`` (training order) and
        ``"exemplars": [[entry, {name: [shape, dtype]}], ...]`` appear with the
        learning reuse (:meth:`link_head`, :meth:`set_exemplars`).
        """
        layout = {
            "entries": [[int(e), int(self.entry_creator[e])] for e in self.entries],
            "task_to_entry": [[int(t), int(e)] for t, e in self.task_to_entry.items()],
            "heads": [[int(key), self.head_num_classes(int(key))] for key in self.heads],
            "max_class_label": int(self.max_class_label),
            "detection_states": [[int(key), state.shapes()] for key, state in self.detection_states.items()],
        }
        if len(self.routing_states):
            layout["routing_states"] = [[key, state.shapes()] for key, state in self.routing_states.items()]
        if self.head_links:
            layout["head_links"] = [[int(t), int(o), self.head_permutation(t)] for t, o in self.head_links.items()]
        if len(self.entry_exemplars):
            layout["exemplars"] = [[int(key), state.shapes()] for key, state in self.entry_exemplars.items()]
        if len(self.head_class_ids):
            layout["class_ids"] = [[int(key), [int(v) for v in ids.ids.tolist()]]
                                   for key, ids in self.head_class_ids.items()]
        return layout

    def restore_layout(self, layout: Mapping[str, Any]) -> None:
        """Rebuild the entries, task map and heads of :meth:`layout` in this empty repository.

        New entries and heads get fresh values (load the saved ``state_dict`` next);
        everything ends frozen, as after a finished experience.

        :param layout: a dict from :meth:`layout` (also after a JSON round trip).
        :raises RuntimeError: if the repository already holds entries or heads.
        :raises ValueError: if the layout's entries are not numbered 0, 1, 2, ...
        """
        if self.entry_creator or len(self.heads) or len(self.head_class_ids) or self.head_links:
            raise RuntimeError(
                f"restore_layout needs an empty repository; this one holds entries {self.entries} "
                f"and heads for tasks {[int(k) for k in self.heads]}"
            )
        for entry, task in layout["entries"]:
            if int(entry) != self.num_entries:
                raise ValueError(f"layout entries must be numbered 0, 1, 2, ... in order; got entry {entry}")
            self.encoder.add_entry(int(entry))
            if self.generators is not None:
                self.generators.add_entry(int(entry))
            self.entry_creator[int(entry)] = int(task)
        for entry, shapes in layout.get("detection_states", []):
            self.set_detection_state(int(entry), TensorSet.zeros(shapes))
        for key, shapes in layout.get("routing_states", []):
            self.set_routing_state(str(key), TensorSet.zeros(shapes))
        for task, entry in layout["task_to_entry"]:
            self.assign_task(int(task), int(entry))
        for task, ids in layout.get("class_ids", []):
            self.set_class_ids(int(task), ids)
        for task, num_classes in layout["heads"]:
            self.add_head(int(task), int(num_classes))
        for task, owner, permutation in layout.get("head_links", []):
            self.link_head(int(task), int(owner), permutation)
        for entry, shapes in layout.get("exemplars", []):
            self.entry_exemplars[str(int(entry))] = TensorSet(TensorSet.zeros(shapes))  # images, labels, held-out
        # Avalanche's MultiTaskModule bookkeeping, as adaptation() left it.
        self.known_train_tasks_labels = set(self.task_to_entry)
        self.max_class_label = int(layout["max_class_label"])
        self.freeze_all()

    # ------------------------------------------------------------------ heads
    def _make_head(self, num_classes: int) -> nn.Module:
        dim = self.encoder.feature_dim
        if self.head_hidden is None:
            return nn.Linear(dim, num_classes)
        return nn.Sequential(nn.Linear(dim, self.head_hidden), nn.ReLU(), nn.Linear(self.head_hidden, num_classes))

    def add_head(self, task: int, num_classes: int) -> nn.Module:
        """Create the head f_t of ``task`` with ``num_classes`` outputs (idempotent)."""
        key = str(int(task))
        if key in self.heads:
            existing = self.head_num_classes(task)
            if existing != num_classes:
                raise ValueError(f"task {task} already has a head with {existing} classes, got {num_classes}")
            return self.heads[key]
        if num_classes < 1:
            raise ValueError(f"a head needs at least one class, got {num_classes} for task {task}")
        head = self._make_head(num_classes)
        device = next(self.encoder.parameters()).device
        self.heads[key] = head.to(device)
        return self.heads[key]

    def head_num_classes(self, task: int) -> int:
        """Number of outputs of the head of ``task`` (its head owner's, for a linked task)."""
        return self._head_outputs(self.head_module(task))

    def head_owner(self, task: int) -> int:
        """The task whose head ``task`` answers through: itself, or its :meth:`link_head` owner."""
        return self.head_links.get(int(task), int(task))

    def head_module(self, task: int) -> nn.Module:
        """The head ``task`` answers through (its own, or its owner's for a linked task)."""
        return self.heads[str(self.head_owner(task))]

    def head_permutation(self, task: int) -> List[int]:
        """For a linked task, the owner output of each of its local classes (identity: [0..c-1])."""
        key = str(int(task))
        if key in self.head_permutations:
            return [int(v) for v in self.head_permutations[key].perm.tolist()]
        return list(range(self.head_num_classes(task)))

    def head_labels(self, task: int, y: Tensor) -> Tensor:
        """``task``'s local labels ``y`` ([n] int64, 0..c-1) as outputs of the head it
        answers through (:meth:`head_permutation`): [n] int64 on the CPU."""
        return torch.as_tensor(self.head_permutation(task), dtype=torch.long)[y.cpu()]

    def link_head(self, task: int, owner: int, permutation=None) -> None:
        """Let ``task`` answer through ``owner``'s head instead of a head of its own
        (the learning reuse: one head per entry).

        :param task: a task mapped to ``owner``'s entry, without a head of its own.
        :param owner: a task with a head of its own (the entry's creating task).
        :param permutation: local class k of ``task`` is output ``permutation[k]`` of
            the owner's head; ``None``: the identity.
        :raises ValueError: ``task`` already has a head, ``owner`` has none, the two are
            mapped to different entries, or ``permutation`` is not a permutation of the
            owner's outputs.
        """
        task, owner = int(task), int(owner)
        if str(task) in self.heads:
            raise ValueError(f"task {task} has a head of its own; it cannot answer through task {owner}'s")
        if str(owner) not in self.heads:
            raise ValueError(f"task {owner} has no head of its own to answer through")
        if self.entry_of(task) != self.entry_of(owner):
            raise ValueError(f"task {task} (entry {self.entry_of(task)}) cannot answer through the head of "
                             f"task {owner} (entry {self.entry_of(owner)})")
        c = self._head_outputs(self.heads[str(owner)])
        perm = list(range(c)) if permutation is None else [int(v) for v in permutation]
        if sorted(perm) != list(range(c)):
            raise ValueError(f"permutation {perm} of task {task} is not a permutation of task {owner}'s "
                             f"{c} head outputs")
        self.head_links[task] = owner
        if str(task) in self.head_permutations:
            del self.head_permutations[str(task)]
        if perm != list(range(c)):
            device = next(self.encoder.parameters()).device
            self.head_permutations[str(task)] = TensorSet({"perm": torch.tensor(perm, dtype=torch.long)}).to(device)

    def entry_updatable(self, entry: int) -> bool:
        """Whether every task mapped to ``entry`` answers through its creating task's head,
        so that training the entry (the learning reuse) moves no frozen head's features."""
        creator = self.entry_creator[int(entry)]
        return all(self.head_owner(t) == creator for t, e in self.task_to_entry.items()
                   if e == int(entry) and self.is_trained(t))

    # ------------------------------------------------------------------ state digests
    def task_state_digest(self, task: int) -> str:
        """A content digest of what ``task``'s task-aware forward reads besides E0: it
        changes whenever any of it changes, whoever changed it.

        Hashed, each with its name, dtype and shape: the task's entry number and that
        entry's adapters and BatchNorm copies (parameters and buffers, running statistics
        included), the task whose head it answers through (:meth:`head_owner`) and that
        head's parameters, the task's permutation (:meth:`link_head`) and its class ids
        (:meth:`set_class_ids`). Other entries and heads, generators, detection states,
        stored images and router states are not read by the task's forward and do not
        enter it; E0, shared by every task, has :meth:`backbone_state_digest`.

        :param task: a trained task (:meth:`is_trained`).
        :return: 32 hex characters (BLAKE2b of 16 bytes).
        :raises KeyError: ``task`` has no head.
        """
        if not self.is_trained(task):
            raise KeyError(f"task {task} has not been trained: the repository knows tasks {self.trained_tasks}")
        task, entry, owner = int(task), self.entry_of(task), self.head_owner(task)
        named = [(f"entry{entry}.{i}.{name}", t) for i, module in enumerate(self.encoder.entry_modules(entry))
                 for name, t in self._named_tensors(module)]
        named += [(f"head{owner}.{name}", t) for name, t in self._named_tensors(self.head_module(task))]
        for label, store in (("perm", self.head_permutations), ("ids", self.head_class_ids)):
            if str(task) in store:
                named += [(f"{label}.{name}", t) for name, t in self._named_tensors(store[str(task)])]
        return self._digest(named)

    def backbone_state_digest(self) -> str:
        """A content digest of E0: every parameter and buffer of the encoder that belongs
        to no entry (the frozen convolutions and BatchNorm layers, any other backbone
        layer), as :meth:`task_state_digest` hashes them. E0 is frozen, so it stays the
        same unless something outside SDR writes into it.

        :return: 32 hex characters (BLAKE2b of 16 bytes).
        """
        entry_tensors = {id(t) for e in self.encoder.entries for m in self.encoder.entry_modules(e)
                         for _, t in self._named_tensors(m)}
        return self._digest([(name, t) for name, t in self._named_tensors(self.encoder) if id(t) not in entry_tensors])

    @staticmethod
    def _named_tensors(module: nn.Module) -> List[Tuple[str, Tensor]]:
        return [*module.named_parameters(), *module.named_buffers()]

    @staticmethod
    def _digest(named: List[Tuple[str, Tensor]]) -> str:
        """BLAKE2b (16 bytes, hex) of every tensor's name, dtype, shape and bytes, in order."""
        h = hashlib.blake2b(digest_size=16)
        for name, tensor in named:
            t = tensor.detach()
            h.update(f"{name}:{t.dtype}:{tuple(t.shape)};".encode())
            h.update(t.cpu().contiguous().reshape(-1).view(torch.uint8).numpy())
        return h.hexdigest()

    # ------------------------------------------------------------------ stored images
    def set_exemplars(self, entry: int, images: Tensor, labels: Tensor, quantize: bool = True) -> None:
        """Store (or replace) training images of ``entry`` (the learning reuse's guard).

        :param entry: an existing entry.
        :param images: [n, C, H, W] float images; kept as uint8 (``round(x * 255)``)
            when ``quantize`` and every value lies in [0, 1], else as float32.
        :param labels: [n] int64 labels in the entry's head space (local labels of the
            entry's creating task).
        """
        if entry not in self.entry_creator:
            raise KeyError(f"entry {entry} does not exist; the repository holds entries {self.entries}")
        images = images.detach().cpu()
        if images.dim() != 4 or labels.shape != (images.shape[0],):
            raise ValueError(f"images must be [n, C, H, W] with labels [n], got {tuple(images.shape)} and "
                             f"{tuple(labels.shape)}")
        if quantize:
            images = stored_images(images)
        elif images.dtype != torch.uint8:
            images = images.float()
        device = next(self.encoder.parameters()).device
        self.entry_exemplars[str(int(entry))] = TensorSet(
            {"images": images, "labels": labels.detach().cpu().long()}).to(device)

    def exemplars(self, entry: int) -> Tuple[Tensor, Tensor]:
        """The images stored for ``entry``: float32 [n, C, H, W] (uint8 ones divided by
        255) and int64 labels [n]; both empty (n = 0) when none are stored."""
        key = str(int(entry))
        if key not in self.entry_exemplars:
            c, h, w = self.input_shape
            return torch.zeros(0, c, h, w), torch.zeros(0, dtype=torch.long)
        state = self.entry_exemplars[key]
        return float_images(state.images), state.labels

    @staticmethod
    def _head_outputs(head: nn.Module) -> int:
        last = head if isinstance(head, nn.Linear) else head[-1]
        return last.out_features

    def is_trained(self, task: int) -> bool:
        """Whether ``task`` has a head, of its own or linked (trained, or being trained)."""
        return str(int(task)) in self.heads or int(task) in self.head_links

    @property
    def trained_tasks(self) -> List[int]:
        """Tasks with a head (own or linked), in training order."""
        return [t for t in self.task_to_entry if self.is_trained(t)]

    # ------------------------------------------------------------------ class ids
    def set_class_ids(self, task: int, class_ids) -> None:
        """Record the class ids of ``task``'s head outputs (before its head is added).

        Local labels (``class_ids`` == 0..c-1) store nothing: the head's output k is
        class k. Other ids (global class ids, e.g. ``[4, 7]``) are kept as a buffer
        (state_dict, checkpoints, memory): output k of the head is class
        ``class_ids[k]`` and :meth:`forward` returns the logits at those columns.

        :param task: task label.
        :param class_ids: the task's distinct class ids, in increasing order, >= 0.
        :raises ValueError: ids not strictly increasing or negative, or ``task``
            already has other class ids or a head of another width.
        """
        ids = torch.as_tensor(class_ids, dtype=torch.long).detach().flatten().cpu()
        if ids.numel() == 0 or int(ids.min()) < 0 or bool((ids[1:] <= ids[:-1]).any()):
            raise ValueError(
                f"task {task}: class ids must be distinct, increasing and >= 0, got {ids.tolist()}"
            )
        key = str(int(task))
        identity = torch.equal(ids, torch.arange(ids.numel()))
        if self.is_trained(task) or key in self.head_class_ids:
            if ids.tolist() != self.class_ids(task):
                raise ValueError(f"task {task} already has class ids {self.class_ids(task)}, got {ids.tolist()}")
            return
        if identity:
            return
        device = next(self.encoder.parameters()).device
        self.head_class_ids[key] = TensorSet({"ids": ids}).to(device)

    def class_ids(self, task: int) -> List[int]:
        """The class id of each output of ``task``'s head (``[0, ..., c-1]`` for local labels).

        Detection records and detector states use local labels 0..c-1; local label k
        of the task is class ``class_ids(task)[k]``.

        :raises KeyError: ``task`` has neither a head nor recorded class ids.
        """
        key = str(int(task))
        if key in self.head_class_ids:
            return [int(v) for v in self.head_class_ids[key].ids.tolist()]
        if self.is_trained(task):
            return list(range(self.head_num_classes(task)))
        raise KeyError(f"task {task} has not been trained: the repository knows tasks {sorted(self.task_to_entry)}")

    def adaptation(self, experience) -> None:
        """Avalanche hook: add the head of the experience's task when training.

        Training: the experience's task must already be mapped to an entry (the
        strategy does this before model adaptation); its head gets one output per
        class of the experience (labels 0..c-1, or c global class ids, see
        :meth:`set_class_ids`).

        Evaluation: for a task without a head, the experience's classes are noted:
        they size the untrained head that answers it (:meth:`forward_single_task`).
        Nothing is added to the repository.
        """
        super().adaptation(experience)
        classes = sorted({int(c) for c in experience.classes_in_this_experience})
        if not self.training:
            for task in experience.task_labels:
                if not self.is_trained(task):
                    self._untrained_class_ids[int(task)] = classes
            return
        for task in experience.task_labels:
            if int(task) not in self.task_to_entry:
                raise RuntimeError(
                    f"task {task} reached SDRModel.adaptation without an entry: SDRModel is "
                    "trained through SDRStrategy, which maps each task before adaptation"
                )
            self.set_class_ids(task, classes)
            width = len(self.class_ids(task)) if str(int(task)) in self.head_class_ids else int(max(classes)) + 1
            if int(task) in self.head_links:
                if width != self.head_num_classes(task):
                    raise ValueError(f"task {task} has {width} classes but answers through task "
                                     f"{self.head_owner(task)}'s head of {self.head_num_classes(task)}")
            else:
                self.add_head(task, width)
            self._untrained_class_ids.pop(int(task), None)
            for cached in [k for k in self._untrained_heads if k[0] == int(task)]:
                del self._untrained_heads[cached]

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
        kept = self.__dict__.get("_kept_e0")
        if entry is None and kept is not None and x is kept["x"]:
            digest = self.backbone_state_digest()
            if kept["batch_size"] == batch_size and kept["digest"] == digest:
                return kept["features"].clone()
            features = self._feature_passes(x, None, batch_size, device)
            kept.update(batch_size=batch_size, digest=digest, features=features.clone())
            return features
        return self._feature_passes(x, entry, batch_size, device)

    def _feature_passes(self, x: Tensor, entry: Optional[int], batch_size: int, device) -> Tensor:
        """:meth:`batched_features`' passes: [n, feature_dim] float32 on the CPU."""
        was_training = self.training
        self.eval()
        try:
            return torch.cat([self.features(x[i : i + batch_size].to(device), entry).cpu()
                              for i in range(0, x.shape[0], batch_size)])
        finally:
            self.encoder.set_active(None)
            self.train(was_training)

    def keep_e0_features(self, x: Optional[Tensor]) -> None:
        """Keep E0's features of the images ``x`` once computed, until the next call.

        While kept, :meth:`batched_features` ``(x, None, b)`` for this very tensor (``is``)
        computes E0's features once and then returns a copy of them for the same batch
        size b, as long as E0 is unchanged (:meth:`backbone_state_digest`, checked on every
        read): the values are those of a new pass. :class:`~avalanche_sdr.training.SDRPlugin`
        keeps a task's training images from its detection to its routers' fits, which all
        read E0's features of them. ``None`` forgets what was kept.

        :param x: [n, C, H, W] images, or ``None``.
        :raises TypeError: ``x`` is neither a tensor nor ``None``.
        """
        if x is not None and not isinstance(x, Tensor):
            raise TypeError(f"x must be a tensor of images or None, got {type(x).__name__}")
        self.__dict__["_kept_e0"] = None if x is None else {"x": x, "batch_size": None, "digest": None,
                                                            "features": None}

    def forward_single_task(self, x: Tensor, task_label: int) -> Tensor:
        """f_t(E_{m(t)}(x)): [N, C, H, W] -> logits [N, c_t].

        With global class ids (:meth:`set_class_ids`) the c local logits are placed
        at the task's class-id columns of an [N, max id + 1] tensor whose other
        columns hold the lowest finite value of the dtype: the argmax is the original
        class id, and a softmax or cross-entropy over the row equals the one over
        the c local logits.

        A task that has not been trained (no head) is answered by **E0 features
        (no adapters) through a fresh, untrained head** with one output per class the
        evaluated experience announced in model adaptation (Avalanche does this
        before every evaluation experience). That head is initialised from a seed
        derived from the task label (:data:`UNTRAINED_HEAD_SEED` + t) without
        touching the global RNG, so the answer is reproducible; it is not stored in
        the repository (no memory, not in the ``state_dict`` or checkpoints). The
        first such answer per task issues an :class:`UntrainedTaskWarning`.

        :raises KeyError: an untrained task no evaluation experience announced.
        """
        if not self.is_trained(task_label):
            if int(task_label) in self.task_to_entry:
                raise KeyError(f"task {task_label} has no head yet")
            return self._untrained_forward(x, int(task_label))
        return self.head_logits(task_label, self.features(x, self.entry_of(task_label)))

    def head_logits(self, task: int, features: Tensor) -> Tensor:
        """f_t on features already computed by ``task``'s entry: [N, D] -> logits [N, c]
        (at the class-id columns for a task trained on global class ids, as
        :meth:`forward_single_task`). A linked task's logits are its owner head's
        outputs in the task's class order (column k: output ``permutation[k]``)."""
        key = str(int(task))
        logits = self.head_module(task)(features)
        if key in self.head_permutations:
            logits = logits.index_select(1, self.head_permutations[key].perm)
        if key in self.head_class_ids:
            logits = self._at_class_ids(logits, self.head_class_ids[key].ids)
        return logits

    @staticmethod
    def _at_class_ids(logits: Tensor, ids: Tensor) -> Tensor:
        """Local logits [N, c] -> [N, max id + 1] with column ids[k] = logits[:, k]."""
        ids = ids.to(logits.device)
        out = torch.full((logits.shape[0], int(ids.max()) + 1), torch.finfo(logits.dtype).min,
                         device=logits.device, dtype=logits.dtype)
        return out.index_copy(1, ids, logits)

    def _untrained_forward(self, x: Tensor, task: int) -> Tensor:
        """E0 features through the untrained head of ``task`` (see forward_single_task)."""
        if task not in self._untrained_class_ids:
            raise KeyError(
                f"task {task} has not been trained: the repository knows tasks {sorted(self.task_to_entry)}; "
                "an untrained task is answered (by E0 and an untrained head) only when evaluated through an "
                "Avalanche strategy, whose model adaptation announces the task's classes"
            )
        classes = tuple(self._untrained_class_ids[task])
        head = self._untrained_heads.get((task, classes))
        if head is None:
            with torch.random.fork_rng(devices=[]):
                torch.random.default_generator.manual_seed(UNTRAINED_HEAD_SEED + task)
                head = self._make_head(len(classes))
            head.requires_grad_(False)
            self._untrained_heads[(task, classes)] = head
        if task not in self._warned_untrained:
            self._warned_untrained.add(task)
            warnings.warn(
                f"task {task} has not been trained: it is answered by E0 features (no adapters) and an "
                f"untrained head over its {len(classes)} classes {list(classes)} (chance-level predictions)",
                UntrainedTaskWarning, stacklevel=3,
            )
        head = head.to(device=x.device)
        self._untrained_heads[(task, classes)] = head
        logits = head(self.features(x, None))
        if list(classes) != list(range(len(classes))):
            logits = self._at_class_ids(logits, torch.tensor(classes))
        return logits

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

    def trainable_for(self, task: int, train_encoder_entry: bool) -> List[nn.Parameter]:
        """Unfreeze exactly what training ``task`` updates and return those parameters.

        :param task: the task being trained (the head it answers through is always
            trained: its own, or its owner's for a linked task).
        :param train_encoder_entry: also train the adapter set and BatchNorm copies of
            the task's entry (a new entry, or the learning reuse's update); ``False``
            for head-only reuse.
        """
        self.freeze_all()
        params: List[nn.Parameter] = list(self.head_module(task).parameters())
        if train_encoder_entry:
            self._entry_in_training = self.entry_of(task)
            params += list(self.encoder.entry_parameters(self._entry_in_training))
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


__all__ = ["SDRModel", "TensorSet", "UNTRAINED_HEAD_SEED", "UntrainedTaskWarning", "build_sdr_model"]
