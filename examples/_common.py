"""The plumbing the paper-stream examples share; the method itself is in each example.

``emnist_100.py``, ``fashion_mnist.py``, ``fashion_mnist_50.py``, ``cifar10_10.py`` and
``cifar100_40.py`` each show, top to bottom, the benchmark, E0, the ``SDRStrategy``,
Avalanche's ``EWC`` and ``Replay`` and the train/eval loop. Shared here: the command
line (checked before anything is loaded: usage errors exit with code 2), threads and
seeds, the ``--checkpoint-dir`` files, the printed legend and tables and the results
JSON (:class:`Run`), and the command line's options as keywords. Imported first by the
examples (from their own folder), it installs the command-line warning filters before
anything imports Avalanche.

``--checkpoint-dir DIR``: a run stopped by Ctrl-C or a kill resumes when the same
command runs again, from E0 and the RNG states after it (``pretrained.pt``), SDR's
checkpoint (``manifest.json``, ``state-*.pt``) and each finished baseline's results
(``baseline-<name>.json``), and writes the same results JSON (``wall_seconds``
excepted). A directory written with other options is refused, the options named.
"""
import argparse
import contextlib
import json
import os
import sys
import time
import types
import warnings
from typing import Any, Dict, Optional, Sequence, Tuple

from avalanche_sdr import cli

cli.install_warning_filters()  # imported first by the example scripts, before Avalanche

METHOD_NAMES = ("paper", "recommended")
"""``--method`` names: the library's method registry (``avalanche_sdr.training.METHODS``),
named here so that ``--help`` and a usage error need no torch (``tests/examples`` checks
them against the registry)."""
BUDGETS = ("cpu", "cpu_large_task", "paper")
"""``--preset`` names: the library's budget registry (``settings="cpu"``, ...)."""
BASELINE_BUDGET = {"cpu": "cpu", "cpu_large_task": "cpu", "paper": "paper"}
"""``--preset`` -> the ``avalanche_sdr.baselines.BASELINE_SETTINGS`` of the ``--compare``
baselines (both CPU budgets train them alike: 10 epochs, mini-batch 32)."""
PRETRAINED_FILE = "pretrained.pt"
BASELINE_FILE = "baseline-{}.json"
RESUME_ADVICE = ("Run the command with the options of the run that wrote it, or pass another --checkpoint-dir "
                 "(an empty or new folder starts from the beginning).")


def argument_parser(doc: str, *, data_root: str, data_help: str, capped: Optional[str],
                    cifar_resnet: bool = True) -> argparse.ArgumentParser:
    """The options every paper-stream example takes.

    :param doc: the script's docstring (its first paragraph is the ``--help`` description).
    :param data_root: default of ``--data-root``; ``data_help`` its help text.
    :param capped: the images per task of ``--task-sizes capped`` in words (the
        harness's caps for this stream, :func:`sizes`); ``None``: no such option.
    :param cifar_resnet: offer ``--cifar-resnet-weights`` (not for CIFAR streams: that
        backbone has seen their classes).
    """
    parser = argparse.ArgumentParser(description=cli.description(doc))
    parser.add_argument("--data-root", default=data_root, metavar="DIR", help=data_help)
    parser.add_argument("--download", action="store_true",
                        help="download the data set with torchvision into --data-root when files are missing "
                        "(needs internet; docs/reproducing.rst: Data for the offline layout)")
    parser.add_argument("--seed", type=cli.seed, default=0,
                        help="seed of the stream's task order and of training (default 0)")
    add_method_arguments(parser)
    if capped is not None:
        parser.add_argument("--task-sizes", default="full", choices=("full", "capped"),
                            help=f"images per task: full (the stream's own; default) or capped ({capped}: the "
                            "harness's with --preset cpu, those of the results pages' cpu rows)")
    parser.add_argument("--device", default="cpu",
                        help="torch device to train on: cpu (default), cuda, cuda:1, ... (checked before the run)")
    cli.add_threads_argument(parser)
    backbone = parser.add_mutually_exclusive_group()
    if cifar_resnet:
        backbone.add_argument("--cifar-resnet-weights", type=cli.cifar_resnet_weights, default=None, metavar="FILE",
                              help="E0 = this frozen CIFAR-10 ResNet-20/32/44/56 checkpoint (resnet20-*.th ..., "
                              "He et al.'s CIFAR ResNets; docs/reproducing.rst: Data)")
    backbone.add_argument("--resnet18-weights", type=cli.existing_file, default=None, metavar="FILE",
                          help="E0 = torchvision ResNet18 with this local state_dict (e.g. ImageNet weights), frozen")
    parser.add_argument("--pretrain-epochs", type=cli.non_negative_int, default=20, metavar="N",
                        help="epochs of E0 pretraining on the warm-start tasks (the default E0, a small CNN; "
                        "default 20, the harness's)")
    parser.add_argument("--new-task-epochs", type=cli.positive_int, default=None, metavar="N",
                        help="override the preset's epochs of a new SDR entry and of each --compare baseline")
    parser.add_argument("--vae-epochs", type=cli.positive_int, default=None, metavar="N",
                        help="override the preset's (maximum) VAE epochs of a new entry (methods with generators)")
    parser.add_argument("--max-tasks", type=cli.positive_int, default=None, metavar="N",
                        help="keep only the first N tasks (smoke runs; NOT the paper's stream or results)")
    parser.add_argument("--compare", action="store_true",
                        help="also run Avalanche's online EWC and Replay on the same stream and E0 (budget: "
                        "BASELINE_SETTINGS['paper'] with --preset paper, ['cpu'] otherwise)")
    parser.add_argument("--log-dir", type=cli.output_dir, default=None, metavar="DIR",
                        help="write a text log and CSV logs of the SDR run into this folder")
    parser.add_argument("--output", type=cli.output_file, default=None, metavar="FILE",
                        help="write the results JSON here (checked before the run starts)")
    parser.add_argument("--checkpoint-dir", type=cli.output_dir, default=None, metavar="DIR",
                        help="save E0, SDR after every task and each finished --compare baseline here; the same "
                        "command run again after Ctrl-C or a kill resumes from them (SDR from its last finished "
                        "task; a baseline interrupted mid-way starts again from its first task) and writes the "
                        "same results JSON; a folder written with other options is refused. --log-dir files "
                        "then hold the resumed part only")
    cli.add_debug_argument(parser)
    return parser


def add_method_arguments(parser: argparse.ArgumentParser, preset_help: str = "") -> None:
    """``--method``, ``--preset`` and the options that win over the method: ``--detector``
    and ``--reuse`` (``None``: the method's); every example takes them. Check them with
    :func:`check_method_options`.

    :param preset_help: a sentence on the budget for this example's stream, added to
        ``--preset``'s help.
    """
    from avalanche_sdr.vocabulary import DETECTORS, REUSE_MODES

    parser.add_argument("--method", default="paper", choices=METHOD_NAMES,
                        help="SDR's method (SDRStrategy(method=...)): paper (the paper's SDR: agreement rule, a VAE "
                        "per entry, head-only reuse; default) or recommended (the small-task rule: the two-sample "
                        "repeat test with classes matched in any order at a level falling with task size, a "
                        "fallback for small tasks; no generators, the learning reuse, the lda_weighted task-free "
                        "router); --detector and --reuse win over it")
    parser.add_argument("--preset", default="cpu", choices=BUDGETS,
                        help="training budget by name (SDRStrategy(settings=...)): cpu (CPU_SETTINGS, "
                        "the harness's --preset cpu behind the results pages; default), cpu_large_task "
                        "(CPU_LARGE_TASK_SETTINGS: head-only reuse 2 epochs at lr 0.001, VAEs up to 20 epochs) or "
                        "paper (PAPER_SETTINGS, supplementary A.1: 100 epochs per new task, VAEs up to 2000 epochs; "
                        "meant for a GPU)" + (f". {preset_help}" if preset_help else ""))
    parser.add_argument("--detector", default=None, choices=DETECTORS,
                        help="detector instead of the method's (SDRStrategy(detector=...)): agreement (the "
                        "paper's: argmax p == argmin S), calibrated (likelihood gap, consistency lift and S against "
                        "permuted labels), two_sample (a level-0.01 repeat test on E0 features, classes paired k "
                        "with k), small_task (two_sample with a pooled-covariance fallback for tasks of few images "
                        "a class) or expert_gate (Aljundi et al.'s autoencoder relatedness, a baseline); the "
                        "generators follow the detector: only agreement and calibrated read them")
    parser.add_argument("--reuse", default=None, choices=REUSE_MODES,
                        help="what a task detected as a repeat trains, instead of the method's: head (the paper's; "
                        "a new head on the reused entry, which stays frozen) or accumulate (the repeat keeps "
                        "training the reused entry and its one head, so the earlier tasks of its group can "
                        "improve; docs: Learning reuse) or no_loss (head-only first, then an update of the entry kept "
                        "only where held-out images show no loss)")


def parse(parser: argparse.ArgumentParser, argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """``parser``'s arguments, checked across options (:func:`check_method_options`) and
    ``--device`` (argparse errors, exit code 2)."""
    args = parser.parse_args(argv)
    check_method_options(parser, args)
    cli.check_device(parser, args.device)
    return args


def check_method_options(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """argparse errors (exit code 2) for options that contradict the detector
    (``--detector``, else ``--method``'s): ``--generator`` or ``--vae-epochs`` with a
    detector that reads no generators. The detector's class says whether it reads them
    (``needs_generators``), so the registry is imported only when one of these options is
    given."""
    given = [option for option, name in (("--generator", "generator"), ("--vae-epochs", "vae_epochs"))
             if getattr(args, name, None) is not None]
    if not given:
        return
    from avalanche_sdr.detection.registry import make_detector
    from avalanche_sdr.training import METHODS

    detector = make_detector(args.detector or METHODS[args.method].defaults()["detector"])
    if not detector.needs_generators:
        of = "" if args.detector else f" (of --method {args.method})"
        parser.error(f"{given[0]}: the detector {detector.rule}{of} reads no generators; use --detector "
                     f"agreement or calibrated, or drop {given[0]}")


def sizes(capped_sizes: Tuple[int, int, int]) -> str:
    """``(train, valid, test)`` images per task in words, for ``--help``."""
    return "at most {} train / {} validation / {} test images".format(*capped_sizes)


def task_sizes(args, capped_sizes: Optional[Tuple[int, int, int]]) -> Dict[str, int]:
    """The stream builder's per-task size keywords of ``--task-sizes`` (``{}``: full sizes)."""
    if getattr(args, "task_sizes", "full") == "full":
        return {}
    train, valid, test = capped_sizes
    return dict(train_per_task=train, valid_per_task=valid, test_per_task=test)


def backbone_note(args) -> str:
    """Which E0 the command line asks for, in one sentence (reported with the results)."""
    weights = getattr(args, "cifar_resnet_weights", None)
    if weights:
        return f"CIFAR-10 ResNet-{cli.cifar_resnet_depth(weights)} ({os.path.basename(weights)}), frozen"
    if args.resnet18_weights:
        return f"torchvision ResNet18 ({os.path.basename(args.resnet18_weights)}), frozen"
    return f"small_cnn(32,64,128) pretrained {args.pretrain_epochs} epochs on the warm-start tasks"


def given_backbone(args, in_channels: int):
    """E0 from ``--cifar-resnet-weights`` or ``--resnet18-weights`` (frozen, not trained
    here; grey images are repeated to 3 channels inside it), or ``None`` when neither is given."""
    from avalanche_sdr.models import cifar_resnet_backbone, resnet18_backbone

    weights = getattr(args, "cifar_resnet_weights", None)
    if weights:
        return cifar_resnet_backbone(cli.cifar_resnet_depth(weights), weights_path=weights, in_channels=in_channels)
    if args.resnet18_weights:
        return resnet18_backbone(weights=args.resnet18_weights, in_channels=in_channels)
    return None


def detector(args, *, elbo_samples: int):
    """``SDRStrategy``'s ``detector``: ``--detector``'s, else ``None`` (the ``--method``'s),
    except that a detector given by a name whose rule reads ``elbo_samples`` (the paper
    method's ``agreement``) is built here with ``elbo_samples`` Monte-Carlo samples per
    ELBO (the library's default is 1)."""
    from avalanche_sdr.detection.registry import detector_options, make_detector
    from avalanche_sdr.training import METHODS

    chosen = args.detector or METHODS[args.method].defaults()["detector"]
    if isinstance(chosen, str) and "elbo_samples" in detector_options(chosen):
        return make_detector(chosen, elbo_samples=elbo_samples)
    return make_detector(chosen) if args.detector else None


def settings_keywords(args) -> Dict[str, Any]:
    """The ``SDRStrategy`` keywords the command line sets over ``--method`` and ``--preset``
    (only the options given): ``reuse`` (a name) and the ``SDRSettings`` fields
    ``new_task_epochs``, ``vae_epochs``."""
    given = {"reuse": args.reuse, "new_task_epochs": getattr(args, "new_task_epochs", None),
             "vae_epochs": getattr(args, "vae_epochs", None)}
    return {name: value for name, value in given.items() if value is not None}


def baseline_budget(args):
    """The ``--compare`` baselines' :class:`~avalanche_sdr.baselines.BaselineSettings`:
    :data:`BASELINE_BUDGET` of ``--preset``, ``--new-task-epochs`` epochs when given."""
    import dataclasses

    from avalanche_sdr.baselines import BASELINE_SETTINGS

    budget = BASELINE_SETTINGS[BASELINE_BUDGET[args.preset]]
    if args.new_task_epochs is not None:
        budget = dataclasses.replace(budget, epochs=args.new_task_epochs)
    return budget


def method_values(strategy) -> Dict[str, Any]:
    """What an ``SDRStrategy`` runs with, expanded from its method, budget and keywords
    (recorded beside ``"method"`` in the results): ``"detector"`` (its rule's name),
    ``"generator"`` (``"independent"``, ``"eft"`` or ``"none"``), ``"strategy"`` (its
    training settings, detector and routers) and ``"repository"`` (the model's
    configuration), as its checkpoint records them."""
    from avalanche_sdr.training.checkpoint import repository_fingerprint, strategy_fingerprint

    sdr, repository = strategy_fingerprint(strategy), repository_fingerprint(strategy.model)
    return {"detector": sdr["detector"]["rule"], "generator": repository["generator"] or "none",
            "strategy": sdr, "repository": repository}


def legend(strategy, n_warm_start: int) -> str:
    """How to read the lines of a run of ``strategy`` (:func:`avalanche_sdr.cli.output_legend`
    for the detector, generators and reuse it runs with)."""
    return cli.output_legend(strategy.sdr.detector, n_warm_start, generators=strategy.model.has_generators,
                             reuse=strategy.sdr.reuse.name)


RESULT_OPTIONS = ("detector", "reuse", "generator", "n_splits", "new_task_epochs", "vae_epochs", "task_sizes")
"""The command-line options, besides ``--method``, ``--preset``, ``--seed`` and E0's, that
change a run's results (recorded in its config under ``"options"``)."""


def command_config(args, config: Dict[str, Any], threads: int) -> Dict[str, Any]:
    """``config`` (the stream) with E0's note (:func:`backbone_note`), ``--method``,
    ``--preset``, the options of :data:`RESULT_OPTIONS` the example takes, ``--max-tasks``,
    the device and ``threads``: what a run's results and ``--checkpoint-dir`` record."""
    return dict(config, backbone=backbone_note(args), method=args.method, preset=args.preset,
                options={name: getattr(args, name) for name in RESULT_OPTIONS if hasattr(args, name)},
                max_tasks=args.max_tasks, device=args.device, torch_threads=threads)


@contextlib.contextmanager
def replay_warning_hidden():
    """A block in which warnings are not shown: Avalanche's ``Replay`` re-enables its
    ``update`` DeprecationWarning on every call, past the command line's filters."""
    with warnings.catch_warnings():
        warnings.showwarning = lambda *args, **kwargs: None
        yield


class Run:
    """One example's run: threads and seed at the start, what ``--checkpoint-dir`` holds,
    the printed legend and tables, the results JSON at the end. A context manager: on
    Ctrl-C it says what is kept; a checkpoint of other options gets :data:`RESUME_ADVICE`.

    :param args: the parsed command line.
    :param config: the run's description (``"stream"``); E0's note, ``--method``,
        ``--preset`` and the other options that change results are added: the results'
        ``"config"`` and, with the seed, what a ``--checkpoint-dir`` must match. Seeds the
        global RNGs with ``--seed`` (:func:`avalanche_sdr.cli.seed_everything`).
    """

    def __init__(self, args, config: Dict[str, Any]):
        from avalanche_sdr.training.checkpoint import CheckpointError, has_checkpoint

        self.args, self.start = args, time.perf_counter()
        self.threads = cli.set_threads(args.threads, args.device)
        self.config = command_config(args, config, self.threads)
        self.run_info = {"config": self.config, "seed": args.seed}
        self.directory, self.n_tasks, self._close = args.checkpoint_dir, None, []
        if self.directory is not None and has_checkpoint(self.directory) and not self._has(PRETRAINED_FILE):
            raise CheckpointError(
                f"--checkpoint-dir {self.directory!r} holds an SDR checkpoint without {PRETRAINED_FILE}: it was not "
                "written by this command (examples/quickstart.py?); pass another --checkpoint-dir")
        cli.seed_everything(args.seed)

    def __enter__(self) -> "Run":
        return self

    def __exit__(self, kind, error, traceback) -> bool:
        from avalanche_sdr.training.checkpoint import CheckpointMismatchError

        for thing in self._close:
            thing.close()
        if kind is KeyboardInterrupt:
            print(f"interrupted: {self._kept()}", file=sys.stderr, flush=True)
        elif isinstance(error, CheckpointMismatchError) and RESUME_ADVICE not in str(error):
            raise CheckpointMismatchError(error.directory, error.differences, advice=RESUME_ADVICE) from None
        return False

    def closing(self, thing):
        """``thing`` (e.g. SDR's evaluator with its log files), closed when the run ends."""
        self._close.append(thing)
        return thing

    def _has(self, name: str) -> bool:
        return self.directory is not None and os.path.isfile(os.path.join(self.directory, name))

    def _kept(self) -> str:
        """What ``--checkpoint-dir`` holds after an interruption, in one sentence."""
        from avalanche_sdr.training.checkpoint import has_checkpoint, read_manifest

        if self.directory is None:
            return "nothing is kept (--checkpoint-dir DIR makes a run resumable)"
        if not self._has(PRETRAINED_FILE):
            return "nothing is kept yet (interrupted before E0 was saved); run the same command again"
        done = read_manifest(self.directory)["step"] if has_checkpoint(self.directory) else 0
        kept = [f"{done} of {self.n_tasks} SDR tasks"]
        if self.args.compare:
            kept.append(f"{sum(self._has(BASELINE_FILE.format(n)) for n in ('ewc', 'replay'))} of 2 baselines")
        return f"E0, {' and '.join(kept)} are kept in {self.directory}; run the same command again to resume"

    def benchmark(self, benchmark):
        """``benchmark`` cut to its first ``--max-tasks`` tasks; the full stream's
        per-task sizes (``task_sizes``, where the builder reports them) go into the config,
        before E0 is saved with it."""
        if getattr(benchmark, "task_sizes", None) is not None:
            self.config["task_sizes"] = benchmark.task_sizes
        n = self.args.max_tasks
        if n is not None and n < len(benchmark.train_stream):  # a view of the first n tasks
            benchmark = types.SimpleNamespace(
                train_stream=benchmark.train_stream[:n], valid_stream=benchmark.valid_stream[:n],
                test_stream=benchmark.test_stream[:n], n_warm_start=min(benchmark.n_warm_start, n),
                stream_groups=list(benchmark.stream_groups)[:n])
        self.n_tasks = len(benchmark.train_stream)
        return benchmark

    def resumed(self, modules: Dict[str, Any]) -> bool:
        """``True`` when ``--checkpoint-dir`` holds E0 (and the other pretrained ``modules``)
        and the RNG states after them: loaded into ``modules`` (refused if written with
        other options). ``False``: make them, then :meth:`pretrained`."""
        from avalanche_sdr.training.checkpoint import load_pretrained

        if not self._has(PRETRAINED_FILE):
            return False
        path = os.path.join(self.directory, PRETRAINED_FILE)
        load_pretrained(path, modules, self.run_info)
        for module in modules.values():  # as pretraining leaves them: frozen, on the device, eval mode
            module.requires_grad_(False).to(self.args.device).eval()
        print(f"[resume] {' and '.join(('E0', 'the base VAE')[:len(modules)])} loaded from {path}", flush=True)
        return True

    def pretrained(self, modules: Dict[str, Any]) -> None:
        """Save ``modules`` and the RNG states after them in ``--checkpoint-dir`` (if given)."""
        from avalanche_sdr.training.checkpoint import save_pretrained

        if self.directory is not None:
            os.makedirs(self.directory, exist_ok=True)
            save_pretrained(os.path.join(self.directory, PRETRAINED_FILE), modules, self.run_info)

    def legend(self, strategy, benchmark) -> None:
        """Print how to read the run's lines (:func:`legend`)."""
        print("\n" + legend(strategy, benchmark.n_warm_start) + "\n", flush=True)

    def sdr_config(self, strategy) -> Dict[str, Any]:
        """The config of SDR's results and checkpoint: the run's, plus what ``strategy``
        runs with (:func:`method_values`)."""
        return dict(self.config, **method_values(strategy))

    def finished_baseline(self, name: str, settings: Dict[str, Any]) -> Optional[Dict[str, Any]]:
        """The results of baseline ``name`` saved in ``--checkpoint-dir`` by an earlier run
        of this command, or ``None``; saved results of other options are refused."""
        from avalanche_sdr.training.checkpoint import CheckpointError, CheckpointMismatchError

        if not self._has(BASELINE_FILE.format(name)):
            return None
        path = os.path.join(self.directory, BASELINE_FILE.format(name))
        try:
            with open(path, encoding="utf-8") as f:
                saved = json.load(f)
            result = saved["result"]
            saved_here = [(saved["run_info"], self.run_info), (result.get("settings"), settings)]
        except (OSError, ValueError, TypeError, KeyError) as err:
            raise CheckpointError(f"baseline results {path!r} are unreadable ({err}); delete the file to run "
                                  "that baseline again") from err
        differences = [(key, old, new) for key, (old, new) in zip(("run_info", "settings"), saved_here)
                       if old != json.loads(json.dumps(new))]
        if differences:
            raise CheckpointMismatchError(path, differences, advice=RESUME_ADVICE)
        print(f"[resume] {result['label']}: finished before, results read from {path}", flush=True)
        return result

    def baseline_done(self, name: str, result: Dict[str, Any]) -> None:
        """Keep a finished baseline's results in ``--checkpoint-dir`` (if given)."""
        if self.directory is not None:
            cli.write_json(os.path.join(self.directory, BASELINE_FILE.format(name)),
                           {"run_info": self.run_info, "result": result})

    def finish(self, results: Dict[str, Any], baselines: Dict[str, Dict[str, Any]]) -> Dict[str, Any]:
        """Print SDR's table and every method's accuracy, memory and wall time; write ``--output``."""
        results["baselines"] = baselines if self.args.compare else None
        print()
        print(cli.results_table(results))
        print()
        config = results["config"]
        sdr = f"SDR ({config['detector']}, {config['strategy']['reuse']['name']} reuse)"  # the reuse that ran, by name
        print(f"{'method':<32} {'acc (%)':>8} {'mem (MB)':>9} {'wall (s)':>9}")
        for row in [dict(results, label=sdr), *baselines.values()]:
            print(f"{row['label']:<32} {100 * row['average_accuracy']:>8.2f} {row['memory_mb']:>9.2f} "
                  f"{row['wall_seconds']:>9.1f}")
        print(f"total wall time {time.perf_counter() - self.start:.1f}s, {self.threads} torch thread(s)")
        if self.args.output:
            cli.write_json(self.args.output, results)
            print(f"wrote {self.args.output}")
        return results


def run_example(main, parse_args) -> None:
    """``main(parse_args(argv))`` through :func:`avalanche_sdr.cli.run_cli`: argument
    errors exit with code 2 before anything runs; missing data and the library's other
    errors print one message and exit with code 1 (``--debug``: with the traceback)."""
    cli.run_cli(main, parse_args)
