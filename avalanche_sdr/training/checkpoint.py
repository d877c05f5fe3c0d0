"""Checkpoints of an SDR run: save after every experience, resume, load for inference.

After every finished training experience a checkpoint directory gets a tensor file
``state-<k>.pt`` (read back with ``torch.load(..., weights_only=True)``) and a
``manifest.json`` with everything else, each written atomically (:func:`atomic_write`)
and the manifest last, so a process killed at any moment leaves the previous
complete checkpoint readable. Resuming restores the repository, the decision
records, Avalanche's clock and the RNG states, so on CPU the rest of the run is
bit-identical; another configuration is refused with :class:`CheckpointMismatchError`.
:func:`save_pretrained` / :func:`load_pretrained` keep E0 pretrained before the stream.

Why not Avalanche's own checkpointing: it pickles the whole strategy with dill, which
fails here, loads by full unpickling and writes in place.

Files, manifest format, write order and the dill failure: docs/method.rst, section
"Checkpoints: files, atomic writes, manifest and resume".
"""
from __future__ import annotations

import json
import os
import random
import re
from pathlib import Path
from typing import Any, BinaryIO, Callable, Dict, List, Optional, Union

import numpy as np
import torch
from avalanche.core import SupervisedPlugin

from avalanche_sdr.evaluation.memory import repository_memory_bytes
from avalanche_sdr.models.repository import SDRModel
from avalanche_sdr.models.vae import EFTVAEBank, IndependentVAEBank
from avalanche_sdr.routers.routing import make_router
from avalanche_sdr.training.learning_reuse import MOVED_SETTINGS
from avalanche_sdr.training.reuse_registry import REUSE_TYPES
from avalanche_sdr.vocabulary import REUSE_ACCUMULATE, REUSE_NO_LOSS

PathLike = Union[str, os.PathLike]

CHECKPOINT_FORMAT = "avalanche-sdr-checkpoint"
"""Value of the manifest's ``"format"`` field."""
CHECKPOINT_VERSION = 1
"""Manifest format version this module writes and reads."""
MANIFEST_NAME = "manifest.json"
"""File name of the manifest inside a checkpoint directory."""

_STATE_FILE = re.compile(r"state-\d{6}\.pt")
_TEMP_MARK = ".tmp-"
_CLOCK_FIELDS = (
    "train_iterations",
    "train_exp_counter",
    "train_exp_epochs",
    "train_exp_iterations",
    "train_epoch_iterations",
    "total_iterations",
)


class CheckpointError(RuntimeError):
    """A checkpoint directory cannot be used: unreadable, corrupt, or in the way."""


class CheckpointMismatchError(ValueError):
    """A checkpoint was made with another configuration than the model or strategy.

    :param directory: the checkpoint directory (or file).
    :param differences: ``(field, value in the checkpoint, value here)`` triples.
    :param advice: the message's last sentence, what to do (default: build the model
        and strategy as in the run that wrote it, or use another directory); a command
        names its own options here.

    Attributes: ``directory`` (str) and ``differences`` (list of triples).
    """

    def __init__(self, directory: PathLike, differences: List[tuple], advice: Optional[str] = None):
        self.directory = str(directory)
        self.differences = list(differences)
        listed = "; ".join(f"{name}: checkpoint {saved!r}, here {here!r}" for name, saved, here in self.differences)
        advice = advice or "Build the model and strategy as in the run that wrote it, or use another directory."
        super().__init__(
            f"the checkpoint in {self.directory!r} was made with another configuration ({listed}). {advice}"
        )


# ---------------------------------------------------------------------- atomic files
def _fsync_directory(directory: Path) -> None:
    """Make a rename inside ``directory`` durable (no-op where directories cannot be opened)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write(path: PathLike, write: Callable[[BinaryIO], None]) -> None:
    """Write a file so that readers see either its old content or the complete new one.

    ``write(f)`` fills a temporary file ``.<name>.tmp-<pid>`` beside ``path``, which
    is then flushed, fsync'ed and renamed over ``path`` (``os.replace``, atomic on
    POSIX and Windows); the directory is fsync'ed so the rename survives a crash.
    If ``write`` raises, the temporary file is removed and ``path`` is untouched.

    :param path: target file; its directory must exist.
    :param write: callable that writes the whole content to a binary file object.
    """
    path = Path(path)
    temp = path.with_name(f".{path.name}{_TEMP_MARK}{os.getpid()}")
    try:
        with open(temp, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temp, path)
    except BaseException:
        try:
            temp.unlink()
        except FileNotFoundError:
            pass
        raise
    _fsync_directory(path.parent)


def atomic_write_json(path: PathLike, value: Any, *, allow_nan: bool = False) -> None:
    """:func:`atomic_write` of ``value`` as JSON: the package's one JSON file writer.

    The bytes are those of ``json.dump(value, f, indent=1)``: one space of indent per
    level, non-ASCII characters escaped (so the file is ASCII, hence UTF-8), no
    trailing newline. Checkpoint manifests use strict JSON (``allow_nan=False``:
    ``ValueError`` on NaN or infinity); the scripts' results files pass
    ``allow_nan=True`` and get ``NaN`` / ``Infinity`` as ``json.dump`` writes them.

    :param path: target file; its directory must exist.
    :param value: JSON-serialisable value (dicts, lists, str, int, float, bool, None).
    :param allow_nan: write NaN and infinities instead of raising ``ValueError``.
    """
    text = json.dumps(value, indent=1, allow_nan=allow_nan)
    atomic_write(path, lambda f: f.write(text.encode("utf-8")))


# ---------------------------------------------------------------------- fingerprints
def _json_value(value: Any) -> Any:
    """``value`` as it reads back from JSON (tuples become lists), for comparisons."""
    return json.loads(json.dumps(value))


def repository_fingerprint(model: SDRModel) -> Dict[str, Any]:
    """The configuration of a repository that a checkpoint must match (JSON-safe).

    Backbone class (and its ``body`` class when it has one), ``feature_dim``, input
    shape, the output channels of every adapted convolution, EFT ``a``/``b``/
    ``gamma``, ``task_batchnorm``, generator kind and configuration, ``head_hidden``.
    Weight values are not part of it (they are what a checkpoint stores).
    """
    encoder = model.encoder
    backbone = encoder.backbone
    body = getattr(backbone, "body", None)
    bank = model.generators
    if isinstance(bank, IndependentVAEBank):
        generator, generator_config = "independent", dict(bank.config)
    elif isinstance(bank, EFTVAEBank):
        base = bank.base
        generator = "eft"
        generator_config = dict(
            in_channels=base.in_channels, image_size=base.image_size, latent_dim=base.latent_dim,
            width=base.width, a=bank.a, b=bank.b, gamma=bank.gamma,
        )
    elif bank is None:
        generator, generator_config = None, {}
    else:
        generator, generator_config = type(bank).__qualname__, {}
    return _json_value(
        dict(
            backbone=type(backbone).__qualname__,
            backbone_body=None if body is None else type(body).__qualname__,
            feature_dim=encoder.feature_dim,
            input_shape=list(model.input_shape),
            conv_channels=encoder.out_channels,
            a=encoder.a,
            b=encoder.b,
            gamma=encoder.gamma,
            task_batchnorm=encoder.task_batchnorm,
            generator=generator,
            generator_config=generator_config,
            head_hidden=model.head_hidden,
        )
    )


def strategy_fingerprint(strategy) -> Dict[str, Any]:
    """The training settings of an :class:`~avalanche_sdr.training.SDRStrategy` (JSON-safe).

    Everything that changes what the remaining experiences would compute: every
    field of its :class:`~avalanche_sdr.training.SDRSettings` (epochs, learning
    rates, mini-batch sizes, generator fitting), the ``reuse`` (its ``config()``, its name
    and options), ``n_warm_start``,
    ``forward_transfer``, the task-free ``routers`` (each router's ``config()``, its name
    and options; only when there are any, so older checkpoints still match) and the
    detector's configuration (its ``config()``: rule and every setting that changes
    decisions). The method preset's name is not part of it (a checkpoint records it
    beside, as ``"method"``): the expanded values are what must match.
    """
    sdr = strategy.sdr
    detector = sdr.detector
    return _json_value(
        dict(
            sdr.settings.to_dict(),
            reuse=sdr.reuse.config(),
            n_warm_start=sdr.n_warm_start,
            forward_transfer=sdr.forward_transfer,
            **({"routers": [router.config() for router in sdr.routers]} if sdr.routers else {}),
            detector=detector.config(),
        )
    )


MOVED_ROUTER_SETTINGS = ("router_exemplars", "router_evidence")
"""Settings a checkpoint of the previous layout holds in its strategy fingerprint, which
moved onto the LDA routers (``exemplars``, ``evidence``)."""


def upgrade_strategy_fingerprint(saved: Dict[str, Any]) -> Dict[str, Any]:
    """A strategy fingerprint of the previous layout (router options among the settings,
    routers as names, the detector's ``match_class_count``) in the current one (routers as
    their ``config()``, ``class_count_filter``), so that such a checkpoint loads; a
    current fingerprint is returned unchanged.

    :param saved: the manifest's ``fingerprint["strategy"]``.
    """
    detector = saved.get("detector")
    if isinstance(detector, dict) and "match_class_count" in detector:  # renamed class_count_filter
        detector = dict(detector)
        detector["class_count_filter"] = detector.pop("match_class_count")
        saved = dict(saved, detector=detector)
    if isinstance(saved.get("reuse"), str):  # the reuse and its options among the settings
        saved = _reuse_as_config(saved)
    saved = _reuse_defaults_filled(saved)
    if not any(name in saved for name in MOVED_ROUTER_SETTINGS):
        return saved
    saved = dict(saved)
    moved = {name[len("router_"):]: saved.pop(name, None) for name in MOVED_ROUTER_SETTINGS}
    routers = []
    for router in saved.get("routers", []):
        if isinstance(router, str):
            reads = make_router(router).options()
            router = make_router(router, **{k: v for k, v in moved.items() if k in reads}).config()
        routers.append(router)
    if routers:
        saved["routers"] = _json_value(routers)
    return saved


def _reuse_as_config(saved: Dict[str, Any]) -> Dict[str, Any]:
    """A fingerprint whose reuse is a name among the settings, with its options as settings
    fields (:data:`~avalanche_sdr.training.learning_reuse.MOVED_SETTINGS`), as one whose
    ``reuse`` is the reuse object's ``config()``."""
    saved = dict(saved)
    name = saved.pop("reuse")
    moved = {option: saved.pop(field) for field, option in MOVED_SETTINGS.items() if field in saved}
    options = {}  # the head-only reuse has none
    if name == REUSE_ACCUMULATE:  # absent: the option's default (update_epochs: reuse_epochs, as None means)
        options = moved
        if not any(k in moved for k in ("balance", "early_stop", "rollback")):  # before the update options:
            options = dict(moved, balance=False, early_stop=False, rollback=False)  # the plain update
    elif name == REUSE_NO_LOSS:  # its replay count was guard_exemplars
        options = {k: moved[m] for k, m in (("lr", "lr"), ("replay_exemplars", "guard_exemplars")) if m in moved}
    saved["reuse"] = REUSE_TYPES[name](**options).config()
    return saved


def _reuse_defaults_filled(saved: Dict[str, Any]) -> Dict[str, Any]:
    """A fingerprint whose reuse ``config()`` predates an option of a registered reuse, with
    that option at its default (what the run used): the reuse built again from the saved
    options. Unchanged where the reuse is not registered or a saved option is unknown."""
    config = saved.get("reuse")
    if not isinstance(config, dict) or config.get("name") not in REUSE_TYPES:
        return saved
    kind = REUSE_TYPES[config["name"]]
    options = {k: v for k, v in config.items() if k != "name"}
    if set(options) == set(kind.OPTIONS) or not set(options) <= set(kind.OPTIONS):
        return saved
    return dict(saved, reuse=kind(**options).config())


SPEED_ONLY_FIELDS = ("strategy.eval_mb_size", "strategy.detector.batch_size",
                     "strategy.detector.detection_batch_size", "strategy.detector.feature_batch_size")
"""Fingerprint fields that change only the speed of evaluation-mode passes, never a result
(e.g. 256 in a checkpoint taken before ``None``, chosen for the device, became the
default): a checkpoint that differs only there loads."""


def checkpoint_routers(manifest: Dict[str, Any]) -> list:
    """The router objects a checkpoint's strategy fitted (from its fingerprint; either layout)."""
    configs = upgrade_strategy_fingerprint(manifest["fingerprint"]["strategy"]).get("routers", [])
    return [make_router(c["name"], **{k: v for k, v in c.items() if k != "name"}) for c in configs]


def _differences(saved: Dict[str, Any], here: Dict[str, Any], prefix: str) -> List[tuple]:
    """``(field, saved value, value here)`` of every differing field; dicts on both sides
    are compared field by field (``prefix.config.backbone``), so a message names the
    innermost fields that differ."""
    missing = "<absent>"
    differences: List[tuple] = []
    for key in sorted(set(saved) | set(here)):
        old, new = saved.get(key, missing), here.get(key, missing)
        if isinstance(old, dict) and isinstance(new, dict):
            differences += _differences(old, new, f"{prefix}.{key}")
        elif old != new:
            differences.append((f"{prefix}.{key}", old, new))
    return differences


# ---------------------------------------------------------------------- reading
def has_checkpoint(directory: PathLike) -> bool:
    """Whether ``directory`` holds a checkpoint manifest."""
    return (Path(directory) / MANIFEST_NAME).is_file()


def read_manifest(directory: PathLike) -> Dict[str, Any]:
    """The manifest of the checkpoint in ``directory``.

    :raises CheckpointError: no manifest, unreadable or not JSON, another format or
        version, or a tensor file it names that does not exist.
    """
    directory = Path(directory)
    path = directory / MANIFEST_NAME
    if not path.is_file():
        raise CheckpointError(f"no checkpoint in {str(directory)!r}: {MANIFEST_NAME} not found")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise CheckpointError(f"checkpoint manifest {str(path)!r} is unreadable: {err}") from err
    if not isinstance(manifest, dict) or manifest.get("format") != CHECKPOINT_FORMAT:
        raise CheckpointError(f"{str(path)!r} is not an avalanche-sdr checkpoint manifest")
    if manifest.get("version") != CHECKPOINT_VERSION:
        raise CheckpointError(
            f"{str(path)!r} has checkpoint format version {manifest.get('version')!r}; "
            f"this avalanche-sdr reads version {CHECKPOINT_VERSION}"
        )
    tensors = directory / str(manifest.get("tensors"))
    if not tensors.is_file():
        raise CheckpointError(f"checkpoint {str(path)!r} names the tensor file {str(tensors)!r}, which is missing")
    return manifest


def _load_tensors(directory: Path, manifest: Dict[str, Any]) -> Dict[str, Any]:
    path = directory / manifest["tensors"]
    try:
        tensors = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # truncated zip, unpickling error, ...
        raise CheckpointError(f"checkpoint tensor file {str(path)!r} is unreadable: {err}") from err
    if not isinstance(tensors, dict) or "model" not in tensors or "rng_torch" not in tensors:
        raise CheckpointError(f"{str(path)!r} lacks the 'model' state_dict or the 'rng_torch' state")
    return tensors


def _restore_model(directory: Path, manifest: Dict[str, Any], model: SDRModel) -> Dict[str, Any]:
    """Check the fingerprint, rebuild the layout of the empty ``model``, load its tensors.

    :return: the checkpoint's tensor dict (for the RNG states).
    """
    differences = _differences(manifest["fingerprint"]["repository"], repository_fingerprint(model), "repository")
    if differences:
        raise CheckpointMismatchError(directory, differences)
    if model.num_entries or len(model.heads):
        raise CheckpointError(
            f"a checkpoint is loaded into a freshly built, empty SDRModel; this one already holds "
            f"{model.num_entries} entries and {len(model.heads)} heads"
        )
    tensors = _load_tensors(directory, manifest)
    model.restore_layout(manifest["repository"])
    try:
        model.load_state_dict(tensors["model"], strict=True)
    except RuntimeError as err:
        raise CheckpointMismatchError(directory, [("repository.state_dict", "saved tensors", str(err))]) from err
    model.freeze_all()
    model.encoder.set_active(None)
    return tensors


def load_repository(directory: PathLike, model: SDRModel) -> SDRModel:
    """Load the repository of a checkpoint into ``model`` for inference only.

    No training data is needed: the checkpoint holds E0 (pretrained weights
    included), every adapter set, generator and head, and the task -> entry map.
    ``model(x, t)`` then predicts task ``t``'s images.

    :param directory: a checkpoint directory.
    :param model: a freshly built, empty :class:`SDRModel` of the same configuration
        as the one saved (same backbone builder, ``a``, ``b``, ``gamma``, generator
        settings, ``head_hidden``); its backbone weights may be untrained.
    :return: ``model``, filled, frozen and in eval mode.
    :raises CheckpointError: unreadable checkpoint, or ``model`` not empty.
    :raises CheckpointMismatchError: ``model`` has another configuration (the
        message names each differing field with both values).
    """
    directory = Path(directory)
    manifest = read_manifest(directory)
    _restore_model(directory, manifest, model)
    model.keep_routers(checkpoint_routers(manifest))  # so that model.predict(x, name) finds them
    return model.eval()


# ---------------------------------------------------------------------- RNG states
def _python_rng_state() -> list:
    version, state, gauss = random.getstate()
    return [version, list(state), gauss]


def _numpy_rng_state() -> list:
    name, keys, pos, has_gauss, cached = np.random.get_state()
    return [name, [int(k) for k in keys], int(pos), int(has_gauss), float(cached)]


def _set_rng_states(python: list, numpy: list, torch_state: torch.Tensor, cuda_states: Optional[list]) -> None:
    """Set the global RNGs to states of :func:`_python_rng_state`, :func:`_numpy_rng_state`,
    ``torch.get_rng_state()`` and ``torch.cuda.get_rng_state_all()`` (CUDA: only with as
    many devices as were saved)."""
    version, state, gauss = python
    random.setstate((version, tuple(state), gauss))
    name, keys, pos, has_gauss, cached = numpy
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(torch_state)
    cuda_states = cuda_states or []
    if cuda_states and torch.cuda.is_available() and torch.cuda.device_count() == len(cuda_states):
        torch.cuda.set_rng_state_all(cuda_states)


# ---------------------------------------------------------------------- pretrained modules
def save_pretrained(path: PathLike, modules: Dict[str, torch.nn.Module], run_info: Dict[str, Any]) -> None:
    """Save what a run made before its stream starts, and the RNG states after it.

    For scripts whose run begins with work that a resume must not redo or change, e.g.
    E0 pretrained on the warm-start tasks (and a base VAE): the file lets a resumed run
    continue with the same modules, drawing the same random numbers, as the run that
    wrote it (:func:`load_pretrained`). Written atomically (:func:`atomic_write`) with
    ``torch.save``; read with ``weights_only=True``. Content: ``"modules"`` (name ->
    ``state_dict``), ``"rng_python"``, ``"rng_numpy"`` (the manifest's ``"rng"``
    formats), ``"rng_torch"`` (uint8 tensor), ``"rng_cuda"`` (one state per CUDA device)
    and ``"run_info"`` (``run_info`` as a JSON string).

    :param path: file to write; its directory must exist.
    :param modules: the modules to save, by name.
    :param run_info: JSON-safe description of the run (e.g. its config and seed),
        compared by :func:`load_pretrained`.
    """
    saved = {
        "modules": {name: module.state_dict() for name, module in modules.items()},
        "rng_python": _python_rng_state(),
        "rng_numpy": _numpy_rng_state(),
        "rng_torch": torch.get_rng_state(),
        "rng_cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        "run_info": json.dumps(run_info, sort_keys=True),
    }
    atomic_write(path, lambda f: torch.save(saved, f))


def load_pretrained(path: PathLike, modules: Dict[str, torch.nn.Module], run_info: Dict[str, Any]) -> None:
    """Load a file of :func:`save_pretrained` into ``modules`` and set the global RNG
    states (Python, numpy, torch, CUDA) it holds.

    :param path: the file.
    :param modules: freshly built modules of the same architecture, by the names they
        were saved under; their weights are overwritten (``strict`` loading).
    :param run_info: the description of this run; it must equal the saved one.
    :raises CheckpointError: the file is unreadable or not such a file.
    :raises CheckpointMismatchError: another ``run_info``, other module names, or
        state_dicts that do not fit ``modules``.
    """
    path = Path(path)
    try:
        saved = torch.load(path, map_location="cpu", weights_only=True)
        saved_info = json.loads(saved["run_info"])
        saved_modules, rng = saved["modules"], [saved[k] for k in ("rng_python", "rng_numpy", "rng_torch")]
    except Exception as err:  # truncated zip, unpickling error, missing key, ...
        raise CheckpointError(f"pretrained-state file {str(path)!r} is unreadable: {err}") from err
    differences = _differences(saved_info, _json_value(run_info), "run_info")
    if set(saved_modules) != set(modules):
        differences.append(("modules", sorted(saved_modules), sorted(modules)))
    if differences:
        raise CheckpointMismatchError(path, differences)
    for name, module in modules.items():
        try:
            module.load_state_dict(saved_modules[name], strict=True)
        except RuntimeError as err:
            raise CheckpointMismatchError(path, [(f"modules.{name}", "saved tensors", str(err))]) from err
    _set_rng_states(*rng, saved.get("rng_cuda"))


# ---------------------------------------------------------------------- the plugin
class SDRCheckpointPlugin(SupervisedPlugin):
    """Saves an SDR run after every finished training experience; restores it.

    Built by ``SDRStrategy(checkpoint_dir=...)``, which places it *last* among the
    strategy's plugins (after Avalanche's evaluator, periodic evaluation and clock),
    so a checkpoint holds the experience's complete outcome: the generator fitted by
    :class:`~avalanche_sdr.training.SDRPlugin`, its decision record, the final clock
    counters and the RNG states the next experience starts from.

    A directory that already holds a checkpoint is never overwritten by a run that did
    not :meth:`restore` it first (training raises :class:`CheckpointError`).

    :param directory: checkpoint directory (created when missing).

    Attributes: ``directory`` (``Path``); ``progress``, one dict per finished
    experience (``experience``: its index in the stream, ``task``: its task label,
    ``memory_bytes``: repository memory after it, see
    :func:`~avalanche_sdr.evaluation.repository_memory_bytes`; ``group_curve``: the
    stream runner's group-curve entry of the experience,
    :func:`~avalanche_sdr.training.stream_runner.evaluate_group`, which the runner adds
    after the experience's own checkpoint, so it is saved with the next one and the last
    finished experience's is evaluated again on resuming); ``run_info``, a
    JSON-safe dict saved verbatim in every manifest and compared on :meth:`restore`
    (the stream runner records the run's ``config`` and ``seed`` there).
    """

    def __init__(self, directory: PathLike):
        super().__init__()
        self.directory = Path(directory)
        self.progress: List[Dict[str, Any]] = []
        self.run_info: Optional[Dict[str, Any]] = None
        self._attached = False

    # ------------------------------------------------------------------ hooks
    def before_training(self, strategy, **kwargs):
        if not self._attached and has_checkpoint(self.directory):
            raise CheckpointError(
                f"{str(self.directory)!r} already holds a checkpoint of "
                f"{read_manifest(self.directory)['step']} experiences; restore it first "
                "(strategy.restore_checkpoint(), or run_sdr_stream which resumes) or use another directory"
            )
        self._attached = True

    def after_training_exp(self, strategy, **kwargs):
        experience = strategy.experience
        self.progress.append(
            {
                "experience": int(experience.current_experience),
                "task": int(experience.task_labels[0]),
                "memory_bytes": int(repository_memory_bytes(strategy)),
                "train_accuracy_per_epoch": [float(v) for v in strategy.sdr.epoch_accuracies[-1]],
            }
        )
        self.save(strategy)

    # ------------------------------------------------------------------ saving
    def save(self, strategy) -> Path:
        """Write the checkpoint of the experiences finished so far; return the manifest path.

        Tensor file first, manifest last, then stale tensor and temporary files removed.
        """
        self.directory.mkdir(parents=True, exist_ok=True)
        self._attached = True
        step = len(self.progress)
        model: SDRModel = strategy.model
        name = f"state-{step:06d}.pt"
        tensors = {
            "model": model.state_dict(),
            "rng_torch": torch.get_rng_state(),
            "rng_cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        }
        atomic_write(self.directory / name, lambda f: torch.save(tensors, f))
        manifest = {
            "format": CHECKPOINT_FORMAT,
            "version": CHECKPOINT_VERSION,
            "step": step,
            "tensors": name,
            "method": getattr(strategy, "method", None),  # the method preset's name; not compared
            "fingerprint": {
                "repository": repository_fingerprint(model),
                "strategy": strategy_fingerprint(strategy),
            },
            "repository": model.layout(),
            "records": strategy.sdr.record_dicts(),
            "progress": list(self.progress),
            "clock": {field: int(getattr(strategy.clock, field)) for field in _CLOCK_FIELDS},
            "rng": {"python": _python_rng_state(), "numpy": _numpy_rng_state()},
            "run_info": self.run_info,
        }
        path = self.directory / MANIFEST_NAME
        atomic_write_json(path, manifest)
        for entry in self.directory.iterdir():
            stale_state = _STATE_FILE.fullmatch(entry.name) and entry.name != name
            if stale_state or (entry.name.startswith(".") and _TEMP_MARK in entry.name):
                entry.unlink(missing_ok=True)
        return path

    # ------------------------------------------------------------------ restoring
    def restore(self, strategy) -> int:
        """Restore the checkpoint of :attr:`directory` into a fresh strategy, if there is one.

        Rebuilds and loads the repository, the decision records, :attr:`progress`,
        the clock counters and, last, the python, numpy and torch RNG states.

        :param strategy: the :class:`~avalanche_sdr.training.SDRStrategy` this plugin
            belongs to, freshly built (nothing trained yet).
        :return: the number of finished experiences restored (0: no checkpoint; the
            run starts from the beginning).
        :raises CheckpointMismatchError: the checkpoint was made with another model
            or strategy configuration, or another ``run_info``.
        :raises CheckpointError: unreadable checkpoint, or a strategy that already
            trained.
        """
        self._attached = True
        if not has_checkpoint(self.directory):
            return 0
        if self.progress or strategy.sdr.records:
            raise CheckpointError("restore a checkpoint into a freshly built strategy, before any training")
        manifest = read_manifest(self.directory)
        differences = _differences(
            upgrade_strategy_fingerprint(manifest["fingerprint"]["strategy"]), strategy_fingerprint(strategy),
            "strategy"
        )
        if self.run_info is not None and manifest["run_info"] is not None:
            saved, here = manifest["run_info"], _json_value(self.run_info)
            differences += _differences(saved, here, "run_info")
        differences = [d for d in differences if d[0] not in SPEED_ONLY_FIELDS]
        if differences:
            raise CheckpointMismatchError(self.directory, differences)
        tensors = _restore_model(self.directory, manifest, strategy.model)
        strategy.sdr.restore_records(manifest["records"])
        self.progress = [dict(p) for p in manifest["progress"]]
        strategy.sdr.epoch_accuracies = [list(p.get("train_accuracy_per_epoch", [])) for p in self.progress]
        for field, value in manifest["clock"].items():
            setattr(strategy.clock, field, int(value))
        # Last: nothing may draw random numbers between here and the next experience.
        _set_rng_states(manifest["rng"]["python"], manifest["rng"]["numpy"], tensors["rng_torch"],
                        tensors.get("rng_cuda"))
        return int(manifest["step"])


__all__ = [
    "CHECKPOINT_FORMAT",
    "CHECKPOINT_VERSION",
    "MANIFEST_NAME",
    "CheckpointError",
    "CheckpointMismatchError",
    "SDRCheckpointPlugin",
    "SPEED_ONLY_FIELDS",
    "atomic_write",
    "atomic_write_json",
    "has_checkpoint",
    "load_pretrained",
    "load_repository",
    "read_manifest",
    "repository_fingerprint",
    "save_pretrained",
    "strategy_fingerprint",
    "upgrade_strategy_fingerprint",
    "checkpoint_routers",
    "MOVED_ROUTER_SETTINGS",
]
