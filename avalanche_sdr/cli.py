"""What the command-line entry points share: argument checks, errors, threads, output.

Every entry point (``examples/*.py``, the Table 2 harness's commands and ``python -m
avalanche_sdr.plots``) uses this module, so that every command refuses bad arguments
and unusable output paths while parsing, before any data is read (argparse's usage
error, exit code 2); answers ``--help`` before importing torch, Avalanche or
matplotlib; reports the library's own errors as one ``error: <message>`` line, exit
code 1, without a traceback unless ``--debug`` or ``SDR_DEBUG=1`` (:func:`run_cli`);
runs with one torch thread on a CPU unless told otherwise; seeds the global RNGs once
and writes its results JSON atomically. It also holds the legend and the final
per-task table the examples print.

Why one module: the commands then behave alike, and a user learns their errors once.
Importing this module imports neither torch nor Avalanche.

Each behaviour with the function that gives it: docs/method.rst, section "The
command-line entry points' shared behaviour".
"""
from __future__ import annotations

import argparse
import os
import re
import sys
import traceback
import warnings
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

from avalanche_sdr.seeding import MAX_SEED  # noqa: F401 -- re-exported: the largest seed --seed accepts

DEBUG_ENV = "SDR_DEBUG"
"""Environment variable: ``1`` (or any value but ``""`` and ``0``) shows tracebacks."""



# ---------------------------------------------------------------------- warnings
def install_warning_filters() -> None:
    """Hide the known third-party warnings that a user of the commands cannot act on.

    Called by the entry points only, before they import Avalanche (the first warning
    is emitted at import time); never on ``import avalanche_sdr``, so a program that
    uses the library sees every warning.
    """
    # qpsolvers, imported by Avalanche, warns at import time when no QP solver is
    # installed. Only Avalanche's GEM-family strategies solve QPs; no command here
    # uses them, so installing a solver would change nothing.
    warnings.filterwarnings("ignore", message=r"no QP solver found on your system", category=UserWarning)
    # Avalanche's EvaluationPlugin warns when built with ``loggers=[]``. The commands
    # do that on purpose: they print their own lines and read the metrics directly.
    warnings.filterwarnings("ignore", message=r"No loggers specified, metrics will not be logged",
                            category=UserWarning)


# ---------------------------------------------------------------------- argument types
def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None


def non_negative_int(text: str) -> int:
    """argparse ``type=``: an integer >= 0."""
    value = _int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative; give an integer >= 0")
    return value


def positive_int(text: str) -> int:
    """argparse ``type=``: an integer >= 1."""
    value = _int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not positive; give an integer >= 1")
    return value


def seed(text: str) -> int:
    """argparse ``type=``: a seed, an integer in 0 .. 2**32 - 1 (what numpy accepts)."""
    value = _int(text)
    if not 0 <= value <= MAX_SEED:
        raise argparse.ArgumentTypeError(f"{value} is not a seed; give an integer from 0 to {MAX_SEED}")
    return value


def _nearest_existing(path: str) -> str:
    current = path
    while not os.path.exists(current):
        parent = os.path.dirname(current)
        if parent == current:
            break
        current = parent
    return current


def _check_creatable(path: str) -> None:
    """``path`` does not exist: its nearest existing ancestor must be a writable folder."""
    ancestor = _nearest_existing(os.path.dirname(path))
    if not os.path.isdir(ancestor):
        raise argparse.ArgumentTypeError(
            f"cannot create {path!r}: {ancestor!r} is a file, not a folder")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise argparse.ArgumentTypeError(
            f"cannot create {path!r}: the folder {ancestor!r} is not writable")


def output_file(text: str) -> str:
    """argparse ``type=``: a file the command can write at the end of its run.

    Not an existing folder; an existing file must be writable; otherwise its missing
    parent folders must be creatable (the nearest existing one a writable folder).
    Returns ``text`` unchanged.
    """
    if not text:
        raise argparse.ArgumentTypeError("empty path")
    path = os.path.abspath(os.path.expanduser(text))
    if os.path.isdir(path):
        raise argparse.ArgumentTypeError(f"{text!r} is a folder; give a file name (e.g. {text.rstrip('/')}/results.json)")
    if os.path.exists(path):
        if not os.access(path, os.W_OK):
            raise argparse.ArgumentTypeError(f"{text!r} exists and is not writable")
        return text
    _check_creatable(path)
    return text


def output_dir(text: str) -> str:
    """argparse ``type=``: a folder the command writes into (created if missing).

    An existing path must be a writable folder; otherwise it must be creatable.
    Returns ``text`` unchanged.
    """
    if not text:
        raise argparse.ArgumentTypeError("empty path")
    path = os.path.abspath(os.path.expanduser(text))
    if os.path.exists(path):
        if not os.path.isdir(path):
            raise argparse.ArgumentTypeError(f"{text!r} exists and is not a folder")
        if not os.access(path, os.W_OK | os.X_OK):
            raise argparse.ArgumentTypeError(f"the folder {text!r} is not writable")
        return text
    _check_creatable(path)
    return text


def existing_file(text: str) -> str:
    """argparse ``type=``: a file that exists (an input). Returns ``text`` unchanged."""
    path = os.path.expanduser(text)
    if not os.path.isfile(path):
        what = "is a folder, not a file" if os.path.isdir(path) else "does not exist"
        raise argparse.ArgumentTypeError(f"{text!r} {what}")
    return text


def cifar_resnet_weights(text: str) -> str:
    """argparse ``type=``: an existing CIFAR ResNet checkpoint named like the published
    ones, ``resnet<depth>-<hash>.th`` (the depth is read from the name, see
    :func:`cifar_resnet_depth`). Returns ``text`` unchanged."""
    existing_file(text)
    try:
        cifar_resnet_depth(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return text


def cifar_resnet_depth(path: str) -> int:
    """The depth in a CIFAR ResNet checkpoint's file name: ``resnet20-12fca82f.th`` -> 20.

    :raises ValueError: a name not of the form ``resnet<depth>-...``.
    """
    name = os.path.basename(str(path))
    head = name.split("-")[0]
    if not (head.startswith("resnet") and head[6:].isdigit() and "-" in name):
        raise ValueError(f"{name!r} is not named like a CIFAR ResNet checkpoint (resnet<depth>-<hash>.th, "
                         "e.g. resnet20-12fca82f.th): the depth is read from the name")
    return int(head[6:])


def existing_dir(text: str) -> str:
    """argparse ``type=``: a folder that exists (an input). Returns ``text`` unchanged."""
    if not os.path.isdir(os.path.expanduser(text)):
        raise argparse.ArgumentTypeError(f"{text!r} is not an existing folder")
    return text


def existing_path(text: str) -> str:
    """argparse ``type=``: a file or folder that exists. Returns ``text`` unchanged."""
    if not os.path.exists(os.path.expanduser(text)):
        raise argparse.ArgumentTypeError(f"{text!r} does not exist")
    return text


# ---------------------------------------------------------------------- help text
_ROLE = re.compile(r":[a-z]+(?::[a-z]+)?:`(?P<text>[^`<]*?)\s*(?:<[^`>]*>)?`")
_LITERAL = re.compile(r"``(?P<text>.+?)``")
_INTERPRETED = re.compile(r"`(?P<text>[^`]+?)`")


def plain_text(text: str) -> str:
    """``text`` (reStructuredText, as in a docstring) without its inline markup, for a
    terminal; line breaks and spacing are kept.

    Inline literals and interpreted text lose their backquotes; a role keeps its text
    (the last dotted part after ``~``, the title before a ``<target>``); a closing
    ``::`` becomes ``:``. For example::

        SDR on ``MixedEMNIST`` (:func:`~avalanche_sdr.cli.seed`, :ref:`data <data>`)::
        SDR on MixedEMNIST (seed, data):
    """
    def role(match: "re.Match[str]") -> str:
        target = match.group("text")
        return target[1:].rsplit(".", 1)[-1] if target.startswith("~") else target

    text = _ROLE.sub(role, text)
    text = _LITERAL.sub(lambda m: m.group("text"), text)
    text = _INTERPRETED.sub(lambda m: m.group("text"), text)
    return re.sub(r"::$", ":", text, flags=re.MULTILINE)


def description(doc: Optional[str]) -> str:
    """An entry point's ``--help`` description from its module docstring ``doc``: the
    first paragraph (the summary, up to the first blank line) on one line, as
    :func:`plain_text`. ``""`` when there is no docstring (``python -OO``)."""
    if not doc:
        return ""
    paragraph = []
    for line in doc.strip().splitlines():
        if not line.strip():
            break
        paragraph.append(line.strip())
    return plain_text(" ".join(paragraph))


# ---------------------------------------------------------------------- common options
def add_debug_argument(parser: argparse.ArgumentParser) -> None:
    """``--debug``: show the full traceback of an error (read by :func:`run_cli`)."""
    parser.add_argument(
        "--debug", action="store_true",
        help=f"on an error, show the full Python traceback (also: environment variable {DEBUG_ENV}=1)",
    )


def add_threads_argument(parser: argparse.ArgumentParser, default: Optional[int] = None) -> None:
    """``--threads N``: torch's CPU threads (see :func:`set_threads`)."""
    if default is None:
        when = "default: 1 with --device cpu, torch's default on a GPU"
    else:
        when = f"default {default}"
    parser.add_argument(
        "--threads", type=non_negative_int, default=default, metavar="N",
        help=f"torch CPU threads; 0: torch's default (one per core, or OMP_NUM_THREADS) ({when}). "
        "The models here are small: on a CPU, one thread is usually as fast as several, "
        "and much faster when other programs keep the cores busy",
    )


def set_threads(threads: Optional[int], device: str = "cpu") -> int:
    """Apply ``--threads`` (``None``: 1 on ``device="cpu"``, torch's default otherwise;
    0: torch's default) and return the thread count torch now uses (record it with
    the results: the thread count changes floating-point rounding)."""
    import torch

    if threads is None:
        threads = 1 if str(device) == "cpu" else 0
    if threads:
        torch.set_num_threads(int(threads))
    return torch.get_num_threads()


def seed_everything(seed: int) -> None:
    """Seed the global RNGs once at a command's start (and the harness before each
    method) so that a run is repeatable: :func:`avalanche_sdr.seeding.seed_everything`,
    which says what it covers."""
    from avalanche_sdr.seeding import seed_everything as seed_globals

    seed_globals(seed)


def write_json(path: "str | os.PathLike", data: Any) -> None:
    """Write a command's results ``data`` to ``path`` as JSON, atomically, creating
    missing folders.

    The bytes are those of ``json.dump(data, f, indent=1)`` (NaN and infinities
    allowed, written as ``NaN`` / ``Infinity``); the file appears complete or not at
    all (:func:`avalanche_sdr.training.checkpoint.atomic_write_json`, the package's one
    JSON writer).
    """
    from avalanche_sdr.training.checkpoint import atomic_write_json

    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    atomic_write_json(path, data, allow_nan=True)


def check_device(parser: argparse.ArgumentParser, device: str, option: str = "--device") -> None:
    """argparse error (exit code 2) when ``device`` is not a torch device or not present.

    ``"cpu"`` is always there: accepted without importing torch, so that a command's
    argument checks stay quick (torch is imported for any other device).
    """
    if device == "cpu":
        return
    import torch

    try:
        parsed = torch.device(device)
    except (RuntimeError, ValueError) as err:
        parser.error(f"argument {option}: {device!r} is not a torch device ({err})")
    if parsed.type == "cuda" and not torch.cuda.is_available():
        parser.error(f"argument {option}: {device!r} asked for, but torch sees no CUDA GPU "
                     "(torch.cuda.is_available() is False); use --device cpu")
    if parsed.type == "mps" and not torch.backends.mps.is_available():
        parser.error(f"argument {option}: {device!r} asked for, but the MPS backend is not available")


# ---------------------------------------------------------------------- errors
def library_errors() -> Tuple[type, ...]:
    """The library's own error classes that :func:`run_cli` reports without a traceback:
    missing or damaged data, unusable checkpoints, bad task data, bad results and
    weights files. Anything else is a bug and keeps its traceback."""
    from avalanche_sdr.benchmarks.sources import CorruptDatasetError, DatasetNotFoundError
    from avalanche_sdr.models.backbones import WeightsFileError
    from avalanche_sdr.plots.results import ResultsFormatError
    from avalanche_sdr.training.checkpoint import CheckpointError, CheckpointMismatchError
    from avalanche_sdr.training.data import InvalidTaskDataError

    return (DatasetNotFoundError, CorruptDatasetError, CheckpointError, CheckpointMismatchError,
            InvalidTaskDataError, ResultsFormatError, WeightsFileError)


def debug_requested(argv: Optional[Sequence[str]] = None) -> bool:
    """``--debug`` among ``argv`` or ``SDR_DEBUG`` set (to anything but ``""`` / ``0``)."""
    argv = sys.argv[1:] if argv is None else argv
    return "--debug" in argv or os.environ.get(DEBUG_ENV, "") not in ("", "0")


def run_cli(main: Callable, parse_args: Optional[Callable] = None, argv: Optional[Sequence[str]] = None) -> int:
    """Run a command: filters, parsing, ``main``, errors; exits the process.

    ``main(parse_args(argv))`` when ``parse_args`` is given, else ``main(argv)`` (an
    entry point that parses its own arguments). Argument errors are argparse's (exit
    code 2). The library's errors (:func:`library_errors`) print ``error: <message>``
    on stderr and exit with code 1; Ctrl-C prints ``interrupted`` and exits with 130.
    With ``--debug`` or ``SDR_DEBUG=1`` the traceback is printed as well. A ``main``
    returning an int exits with it; otherwise the exit code is 0.
    """
    install_warning_filters()
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = debug_requested(argv)
    try:
        result = main(parse_args(argv)) if parse_args is not None else main(argv)
    except SystemExit:
        # ``--help``, argparse's usage errors and ``sys.exit`` in ``main``: as they are.
        # Caught first so that ``library_errors()`` (which imports torch and Avalanche
        # to name the error classes) is not evaluated for them.
        raise
    except KeyboardInterrupt:
        if debug:
            traceback.print_exc()
        print("interrupted", file=sys.stderr)
        sys.exit(130)
    except library_errors() as error:
        if debug:
            traceback.print_exc()
        print(f"error: {error}", file=sys.stderr)
        if not debug:
            print(f"(run again with --debug or {DEBUG_ENV}=1 to see where it happened)", file=sys.stderr)
        sys.exit(1)
    sys.exit(result if isinstance(result, int) and not isinstance(result, bool) else 0)


# ---------------------------------------------------------------------- output text
def output_legend(detector="agreement", n_warm_start: int = 3, generators: bool = True,
                  reuse: str = "head") -> str:
    """How to read the lines an SDR run prints, for ``detector``.

    Explains the ``[SDR] task ...`` line printed when a task's training ends
    (:meth:`~avalanche_sdr.training.SDRPlugin.describe`) and the columns of
    :func:`results_table`. The detector's scores are explained by the detector itself
    (:meth:`Detector.legend <avalanche_sdr.detection.base.Detector.legend>`).

    :param detector: the run's detector (a :class:`~avalanche_sdr.detection.base.Detector`,
        e.g. ``strategy.sdr.detector``) or a rule name of
        :data:`~avalanche_sdr.detection.DETECTOR_TYPES` (its default options).
    :param reuse: the name of the run's reuse (``strategy.sdr.reuse.name``, e.g. ``"head"`` or ``"accumulate"``):
        what the legend says a reused entry trains.
    """
    from avalanche_sdr.detection.registry import make_detector

    detector = make_detector(detector)
    lines = [
        "How to read the lines below",
        "  Each task is a small classification problem; some repeat an earlier task's classes",
        "  (same group). Before training on a task, SDR compares it with every repository",
        "  entry (one per unique task kept so far) and decides to reuse one or add a new one.",
        "  [SDR] task t: ...   one line when task t's training ends: its decision and scores",
        f"    warm start        one of the first {n_warm_start} tasks: a new entry, no detection",
        "    new entry e       entry e (new EFT adapters"
        + (" and a VAE generator" if generators else "") + ") was trained for task t",
    ]
    if reuse == "accumulate":
        lines += [
            "    reuse entry e     task t reuses entry e (made by the task in brackets) and answers",
            "                      through that entry's head (classes matched as [..]: t's class k",
            "                      is the head's class [..][k]); entry updated: t's images trained",
            "                      the entry's adapters and head further (the learning reuse)",
            "    gate: ..          the entry's head classified t's training images this well before",
            "                      the update (>= the threshold: reuse; below: t got a new entry)",
        ]
    else:
        lines += [
            "    reuse entry e     task t reuses entry e (made by the task in brackets): only a new",
            "                      classifier head is trained",
        ]
    lines += detector.legend()
    lines += [
        "    | 1.2s            seconds spent on the task (detection and training)",
    ]
    if generators:
        lines += [
            "    | G_e: ...        entry e's generator (a VAE): epochs trained (early stopping) and its",
            "                      ELBO on held-out images, in nats per image (higher is better)",
        ]
    lines += [
        "  The final table compares each decision with the ground truth, which SDR never sees:",
        "    group k, split r  task t holds the classes of group k, drawn from image split r",
        "    scored task       a task after the warm start, whose decision is judged:",
        "      Correct         a new group got a new entry, or a repeat reused its group's entry",
        "      Miss            a repeat got a new entry (memory spent, accuracy kept)",
        "      Incorrect       a task reused another group's entry",
        "    reused task       the task that made the reused entry",
        "    test acc          the task's test accuracy after the whole stream "
        + ("(a reuse: its entry's head)" if reuse == "accumulate" else "(its own head)"),
    ]
    return "\n".join(lines)


def _cell(value: Any) -> str:
    return "-" if value is None else str(value)


def results_table(results: Dict[str, Any]) -> str:
    """A results dict (:func:`~avalanche_sdr.training.stream_runner.run_sdr_stream`) as
    a per-task table followed by a summary, for people."""
    header = f"{'task':>4}  {'group':>5}  {'split':>5}  {'decision':<10}  {'entry':>5}  {'reused task':>11}  " \
             f"{'outcome':<9}  {'test acc':>8}"
    rows = [header, "-" * len(header)]
    for t in results["tasks"]:
        decision = t["decision"].replace("_", " ")
        rows.append(
            f"{t['task']:>4}  {t['group']:>5}  {t['split']:>5}  {decision:<10}  {_cell(t['entry']):>5}  "
            f"{_cell(t['chosen_task']):>11}  {_cell(t['outcome']):<9}  {100 * t['test_accuracy']:>7.1f}%"
        )
    d = results["detection"]
    n = d["n_scored"]
    counts = {k: round(d[k] * n) for k in ("correct", "miss", "incorrect")}
    n_tasks = len(results["tasks"])
    rows += [
        "",
        f"detection  {counts['correct']} correct, {counts['miss']} miss, {counts['incorrect']} incorrect "
        f"of {n} scored tasks (Correct {d['correct']:.1%})",
        f"accuracy   {results['average_accuracy']:.1%} mean final test accuracy over the {n_tasks} tasks",
        f"memory     {results['memory_mb']:.2f} MB for {results['unique_tasks']} unique entries "
        f"({results['memory_mb_all_new']:.2f} MB if every task had got a new entry)",
    ]
    return "\n".join(rows)


__all__ = [
    "DEBUG_ENV",
    "MAX_SEED",
    "add_debug_argument",
    "add_threads_argument",
    "check_device",
    "cifar_resnet_depth",
    "cifar_resnet_weights",
    "debug_requested",
    "description",
    "existing_dir",
    "existing_file",
    "existing_path",
    "install_warning_filters",
    "library_errors",
    "non_negative_int",
    "output_dir",
    "output_file",
    "output_legend",
    "plain_text",
    "positive_int",
    "results_table",
    "run_cli",
    "seed",
    "seed_everything",
    "set_threads",
    "write_json",
]
