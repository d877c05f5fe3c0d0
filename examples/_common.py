"""What the examples that read a data set share: emnist_100, cifar10_10, cifar100_40,
fashion_mnist_50 and fashion_mnist (the quickstart stands alone).

Importing this module installs the command-line warning filters
(:func:`avalanche_sdr.cli.install_warning_filters`): it is imported only by those
scripts, first thing, before anything imports Avalanche. Not a public module: the
examples import it from their own folder (Python puts a script's folder first on its
import path), so they run from any working directory.

Every example is built by :func:`stream_example` (:func:`cifar_example`,
:func:`fashion_example` for the two families) and shares:

- the command-line options (:func:`add_common_arguments`), checked by the types of
  :mod:`avalanche_sdr.cli` while parsing, before anything is loaded or trained
  (usage errors exit with code 2); missing data and the library's other errors print
  one message and exit with code 1 (``--debug``: with the traceback);
- the choice of E0 (:func:`make_backbone`): ``--cifar-resnet-weights FILE`` (a frozen
  CIFAR-10 ResNet-20/32/44/56, option (a) of docs/method.rst, "E0 without ImageNet
  weights"; not offered on CIFAR streams, whose classes that backbone has seen),
  ``--resnet18-weights FILE`` (torchvision ResNet18 from a local state_dict, frozen),
  or by default a small CNN pretrained on the warm-start tasks' training data
  (option (b));
- ``--max-tasks N`` (keep the first N tasks: a smoke run, not the full stream, and
  its numbers are not the paper's), one SDR run (:func:`run_sdr`), the ``--compare``
  baselines (Avalanche's online EWC and Replay from :mod:`avalanche_sdr.baselines`,
  :func:`run_baselines`) and the results JSON (``--output``, format in
  :mod:`avalanche_sdr.training.stream_runner`, plus ``wall_seconds``,
  ``evaluation_seconds`` and ``baselines``); ``--reuse {head,accumulate}``
  (``SDRSettings.reuse``, in the config's ``settings``);
- ``--checkpoint-dir DIR`` (:func:`run_stream_example`): a run stopped by Ctrl-C or a
  kill resumes when the same command runs again. ``DIR`` holds E0 (and the base VAE)
  with the RNG states after them (``pretrained.pt``,
  :func:`avalanche_sdr.training.checkpoint.save_pretrained`), the SDR checkpoint of
  the finished tasks (``manifest.json``, ``state-*.pt``: ``SDRStrategy(checkpoint_dir=DIR)``,
  as ``examples/quickstart.py``) and each finished ``--compare`` baseline's results
  (``baseline-<name>.json``). The resumed run loads them instead of training them
  again and writes the same results JSON as an uninterrupted run (same seed and
  threads; ``wall_seconds`` excepted: the seconds of the process that ran that part).
  A baseline interrupted mid-way starts again from its first task. A directory written
  with other options is refused (exit code 1, the differing options named).
"""
import argparse
import dataclasses
import importlib
import os
import sys
import time
import types
from typing import Any, Callable, Dict, Optional, Tuple, Union

from avalanche_sdr import cli

cli.install_warning_filters()  # imported first by the example scripts, before Avalanche

GREY28 = dict(in_channels=1, image_size=28, latent_dim=16, vae_width=32)
"""1x28x28 streams (EMNIST, Fashion-MNIST): image shape and the VAEs' latent size and width."""
RGB32 = dict(in_channels=3, image_size=32, latent_dim=32, vae_width=32)
"""3x32x32 streams (CIFAR-10, CIFAR-100): image shape and the VAEs' latent size and width."""
FASHION_ROOT = "/usr/share/datasets/fashion-mnist"
"""Where the Debian package ``dataset-fashion-mnist`` puts Fashion-MNIST."""
PRETRAINED_FILE = "pretrained.pt"
"""File in ``--checkpoint-dir`` holding E0, the base VAE and the RNG states after them."""
BASELINE_FILE = "baseline-{}.json"
"""File in ``--checkpoint-dir`` holding a finished ``--compare`` baseline's results
(``{"run_info", "result"}``); ``{}`` is the baseline's name (``ewc``, ``replay``)."""
RESUME_ADVICE = ("Run the command with the options of the run that wrote it, or pass another --checkpoint-dir "
                 "(an empty or new folder starts from the beginning).")
"""What to do when ``--checkpoint-dir`` was written with other options."""


def add_common_arguments(parser: argparse.ArgumentParser, *, cifar_resnet: bool) -> None:
    """Options every example takes. ``cifar_resnet``: offer ``--cifar-resnet-weights``
    (not for CIFAR streams: that backbone has seen their classes)."""
    parser.add_argument("--download", action="store_true",
                        help="download the data set with torchvision into --data-root when files are missing "
                        "(needs internet; see the README's Data section for the offline layout)")
    parser.add_argument("--seed", type=cli.seed, default=0,
                        help="seed of the stream's task order and of training (default 0)")
    parser.add_argument("--preset", default="cpu", choices=("cpu", "paper"),
                        help="training settings: cpu (CPU_SETTINGS: shortened training, same method; default) "
                        "or paper (PAPER_SETTINGS, supplementary A.1: 100 epochs per new task, VAEs up to "
                        "2000 epochs; meant for a GPU)")
    parser.add_argument("--device", default="cpu",
                        help="torch device to train on: cpu (default), cuda, cuda:1, ... (checked before the run)")
    cli.add_threads_argument(parser)
    backbone = parser.add_mutually_exclusive_group()
    if cifar_resnet:
        backbone.add_argument("--cifar-resnet-weights", type=cli.cifar_resnet_weights, default=None, metavar="FILE",
                              help="E0 = this frozen CIFAR-10 ResNet-20/32/44/56 checkpoint (resnet20-*.th ..., "
                              "from He et al.'s CIFAR ResNets; README: Data)")
    backbone.add_argument("--resnet18-weights", type=cli.existing_file, default=None, metavar="FILE",
                          help="E0 = torchvision ResNet18 with this local state_dict (e.g. ImageNet weights), frozen")
    parser.add_argument("--pretrain-epochs", type=cli.non_negative_int, default=5, metavar="N",
                        help="epochs of E0 pretraining on the warm-start tasks (the default E0, a small CNN; "
                        "default 5)")
    parser.add_argument("--new-task-epochs", type=cli.positive_int, default=None, metavar="N",
                        help="override the preset's epochs of a new SDR entry and of each --compare baseline")
    parser.add_argument("--vae-epochs", type=cli.positive_int, default=None, metavar="N",
                        help="override the preset's (maximum) VAE epochs of a new entry")
    parser.add_argument("--max-tasks", type=cli.positive_int, default=None, metavar="N",
                        help="keep only the first N tasks (smoke runs; NOT the paper's stream or results)")
    parser.add_argument("--compare", action="store_true",
                        help="also run Avalanche's online EWC and Replay on the same stream and E0")
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
    cli.add_decision_arguments(parser)
    cli.add_reuse_argument(parser)
    cli.add_debug_argument(parser)


def check_arguments(parser: argparse.ArgumentParser, args) -> None:
    """Checks across options, as argparse errors (exit code 2) before anything runs:
    ``--no-generators`` with a rule that needs generators, a ``--device`` that is not
    there."""
    cli.check_decision_arguments(parser, args)
    cli.check_device(parser, args.device)


def truncate(benchmark, max_tasks: Optional[int]):
    """``benchmark`` itself, or a view of its first ``max_tasks`` tasks (train, valid, test)."""
    if max_tasks is None or max_tasks >= len(benchmark.train_stream):
        return benchmark
    return types.SimpleNamespace(
        train_stream=benchmark.train_stream[:max_tasks],
        valid_stream=benchmark.valid_stream[:max_tasks],
        test_stream=benchmark.test_stream[:max_tasks],
        n_warm_start=min(benchmark.n_warm_start, max_tasks),
        stream_groups=list(benchmark.stream_groups)[:max_tasks],
    )


def make_backbone(args, warm_start, in_channels: int, *, pretrain: bool = True):
    """E0 and a sentence saying which one it is (reported with the results).

    ``--cifar-resnet-weights``: frozen CIFAR-10 ResNet (option (a) of docs/method.rst,
    "E0 without ImageNet weights"); ``--resnet18-weights``: torchvision ResNet18 from a local
    state_dict; otherwise a small CNN pretrained on the warm-start tasks' training data
    (option (b)).

    :param pretrain: ``False``: the small CNN is built (frozen, eval mode) but not
        pretrained; its weights are then loaded from ``--checkpoint-dir``.
    """
    from avalanche_sdr.models import cifar_resnet_backbone, resnet18_backbone, small_cnn_backbone
    from avalanche_sdr.training import pretrain_backbone

    cifar_weights = getattr(args, "cifar_resnet_weights", None)
    if cifar_weights:
        name = os.path.basename(cifar_weights)
        depth = cli.cifar_resnet_depth(cifar_weights)
        backbone = cifar_resnet_backbone(depth, weights_path=cifar_weights, in_channels=in_channels)
        return backbone, f"CIFAR-10 ResNet-{depth} ({name}), frozen"
    if args.resnet18_weights:
        backbone = resnet18_backbone(weights=args.resnet18_weights, in_channels=in_channels)
        return backbone, f"torchvision ResNet18 ({os.path.basename(args.resnet18_weights)}), frozen"
    backbone = small_cnn_backbone(in_channels=in_channels, widths=(32, 64, 128))
    if pretrain:
        pretrain_backbone(backbone, warm_start, epochs=args.pretrain_epochs, lr=2e-3, batch_size=64,
                          device=args.device)
    else:
        backbone.requires_grad_(False).to(args.device).eval()
    return backbone, f"small_cnn(32,64,128) pretrained {args.pretrain_epochs} epochs on the warm-start tasks"


def make_generator(args, warm_start, *, in_channels: int, image_size: int, latent_dim: int,
                   vae_width: int, pretrain: bool = True) -> Tuple[Optional[str], Any, str]:
    """The repository's generators: ``(generator, base_vae, note)`` for
    ``build_sdr_model``, ``note`` reported with the results.

    ``--no-generators``: none; ``--generator eft`` (``examples/fashion_mnist.py``): EFT
    adapters on one base ConvVAE pretrained on the warm-start tasks' training inputs (10
    epochs, Adam lr 2e-3; ``pretrain=False``: built, frozen, not pretrained: its weights
    are then loaded from ``--checkpoint-dir``); otherwise an independent ConvVAE per entry.
    """
    if args.no_generators:
        return None, None, "none"
    if getattr(args, "generator", "independent") == "eft":
        from avalanche_sdr.models import ConvVAE
        from avalanche_sdr.training import pretrain_vae

        base_vae = ConvVAE(in_channels, image_size, latent_dim=latent_dim, width=vae_width)
        if pretrain:
            pretrain_vae(base_vae, warm_start, epochs=10, lr=2e-3, device=args.device)
        else:
            base_vae.requires_grad_(False).to(args.device).eval()
        return "eft", base_vae, (f"EFT adapters on one base ConvVAE (latent {latent_dim}, width {vae_width}) "
                                 "pretrained 10 epochs on the warm-start tasks")
    return "independent", None, f"independent ConvVAE per entry (latent {latent_dim}, width {vae_width})"


def sdr_settings(args):
    """The preset's :class:`~avalanche_sdr.training.SDRSettings` with the command line's overrides."""
    from avalanche_sdr import CPU_SETTINGS, PAPER_SETTINGS

    settings = CPU_SETTINGS if args.preset == "cpu" else PAPER_SETTINGS
    overrides = {"new_task_epochs": args.new_task_epochs, "vae_epochs": args.vae_epochs, "reuse": args.reuse}
    return settings.replace(**{k: v for k, v in overrides.items() if v is not None})


def sdr_config(args, config: Dict[str, Any]) -> Dict[str, Any]:
    """``config`` (stream, E0, generator, device, threads) with SDR's settings added (``--reuse``
    is their ``reuse``): the results' ``"config"``, and with the seed what a
    ``--checkpoint-dir`` must match."""
    return dict(config, eft={"a": 8, "b": 16, "gamma": 1.0}, decision=args.decision, elbo_samples=8,
                preset=args.preset, settings=sdr_settings(args).to_dict(), max_tasks=args.max_tasks)


def _mismatch_with_advice(run: Callable[[], Any]) -> Any:
    """``run()``, its :class:`CheckpointMismatchError` re-raised with :data:`RESUME_ADVICE`."""
    from avalanche_sdr.training.checkpoint import CheckpointMismatchError

    try:
        return run()
    except CheckpointMismatchError as err:
        raise CheckpointMismatchError(err.directory, err.differences, advice=RESUME_ADVICE) from None


def run_sdr(args, benchmark, backbone, config: Dict[str, Any], *, generator: Optional[str], base_vae=None,
            in_channels: int, image_size: int, latent_dim: int, vae_width: int,
            interactive: bool = False) -> Dict[str, Any]:
    """Train SDR (EFT for E, ``--decision`` rule) on the whole stream; the results dict of
    :func:`~avalanche_sdr.training.stream_runner.run_sdr_stream` plus ``wall_seconds``
    (seconds of this process: a resumed run counts only the tasks it trained) and
    ``evaluation_seconds`` (the part of them spent in the group evaluations behind
    ``bwt`` and ``group_curve``).

    With ``--checkpoint-dir`` the strategy saves a checkpoint there after every task
    and first resumes from the one it holds.

    :param config: the run's configuration, :func:`sdr_config`.
    :param generator: ``build_sdr_model``'s ``generator`` (:func:`make_generator`).
    :param interactive: Avalanche's progress bars on stdout as well, when stdout is a
        terminal (``sdr_evaluation_plugin(interactive="auto")``).
    """
    import copy

    from avalanche_sdr import SDRStrategy, build_sdr_model
    from avalanche_sdr.evaluation import sdr_evaluation_plugin
    from avalanche_sdr.training.stream_runner import run_sdr_stream

    settings = sdr_settings(args)
    model = build_sdr_model(copy.deepcopy(backbone), in_channels=in_channels, image_size=image_size, a=8, b=16,
                            generator=generator, base_vae=base_vae, latent_dim=latent_dim, vae_width=vae_width)
    evaluator = sdr_evaluation_plugin(log_dir=args.log_dir, interactive="auto" if interactive else False)
    strategy = SDRStrategy(model=model, settings=settings, decision=args.decision, elbo_samples=8,
                           evaluator=evaluator, device=args.device, checkpoint_dir=args.checkpoint_dir)
    print("\n" + cli.output_legend(args.decision, benchmark.n_warm_start, generators=generator is not None)
          + "\n", flush=True)
    start = time.perf_counter()
    timings: Dict[str, float] = {}
    try:
        results = _mismatch_with_advice(
            lambda: run_sdr_stream(strategy, benchmark, config=config, seed=args.seed, log=print, timings=timings))
    finally:
        evaluator.close()
    results["wall_seconds"] = time.perf_counter() - start
    results["evaluation_seconds"] = timings.get("evaluation_seconds", 0.0)
    print()
    print(cli.results_table(results))
    print()
    return results


def run_baselines(args, benchmark, backbone, run_info: Optional[Dict[str, Any]] = None
                  ) -> Dict[str, Dict[str, Any]]:
    """Avalanche's online EWC and Replay (:mod:`avalanche_sdr.baselines`, budget
    ``BASELINE_SETTINGS[--preset]``, ``--new-task-epochs`` epochs when given) on the
    same stream and E0: accuracy (mean over tasks of the final test accuracy,
    task-aware) and memory (MB) measured as for SDR.

    With ``--checkpoint-dir``, each baseline's results are written there when it
    finishes (:data:`BASELINE_FILE`, with ``run_info``) and read back instead of
    running it again; one interrupted mid-way runs again from its first task.

    :param run_info: ``{"config", "seed"}`` of the run; a saved baseline of another
        ``run_info`` or other settings is refused (:class:`CheckpointMismatchError`).
    """
    import json
    import warnings

    from avalanche.evaluation.metrics import accuracy_metrics
    from avalanche.training.plugins import EvaluationPlugin

    from avalanche_sdr import baselines
    from avalanche_sdr.evaluation import BYTES_PER_MB, repository_memory_bytes
    from avalanche_sdr.training.checkpoint import CheckpointError, CheckpointMismatchError
    from avalanche_sdr.training.stream_runner import final_test_accuracies

    s = baselines.BASELINE_SETTINGS[args.preset]
    if args.new_task_epochs is not None:
        s = dataclasses.replace(s, epochs=args.new_task_epochs)
    settings = {"epochs": s.epochs, "lr": s.lr, "train_mb_size": s.train_mb_size,
                "ewc_lambda": s.ewc_lambda, "ewc_decay": s.ewc_decay, "replay_per_class": s.replay_per_class}
    builders = {
        "ewc": ("Online EWC", lambda **kw: baselines.ewc_strategy(
            backbone, **s.training(), ewc_lambda=s.ewc_lambda, decay_factor=s.ewc_decay, **kw)),
        "replay": ("ER", lambda **kw: baselines.replay_strategy(
            backbone, mem_size=baselines.replay_mem_size(benchmark.train_stream, s.replay_per_class),
            **s.training(), **kw)),
    }
    out = {}
    for name, (label, build) in builders.items():
        path = None if args.checkpoint_dir is None else os.path.join(args.checkpoint_dir, BASELINE_FILE.format(name))
        if path is not None and os.path.isfile(path):
            try:
                with open(path, encoding="utf-8") as f:
                    saved = json.load(f)
                saved_info, result = saved["run_info"], saved["result"]
            except (OSError, ValueError, TypeError, KeyError) as err:
                raise CheckpointError(f"baseline results {path!r} are unreadable ({err}); delete the file to run "
                                      "that baseline again") from err
            here = json.loads(json.dumps({"run_info": run_info, "settings": settings}))
            differences = [(key, saved_value, here[key]) for key, saved_value
                           in (("run_info", saved_info), ("settings", result.get("settings")))
                           if saved_value != here[key]]
            if differences:
                raise CheckpointMismatchError(path, differences, advice=RESUME_ADVICE)
            print(f"[resume] {label}: finished before, results read from {path}", flush=True)
            out[name] = result
            continue
        cli.seed_everything(args.seed)
        start = time.perf_counter()
        strategy = build(evaluator=EvaluationPlugin(accuracy_metrics(experience=True), loggers=[]),
                         device=args.device)
        with warnings.catch_warnings():
            # Avalanche re-enables Replay's ``update`` DeprecationWarning on every call.
            warnings.showwarning = lambda *args, **kwargs: None
            for experience in benchmark.train_stream:
                strategy.train(experience, eval_streams=[])
        accuracies = final_test_accuracies(strategy, benchmark.test_stream)
        out[name] = {
            "label": label,
            "average_accuracy": sum(accuracies) / len(accuracies),
            "task_accuracies": accuracies,
            "memory_mb": repository_memory_bytes(strategy) / BYTES_PER_MB,
            "wall_seconds": time.perf_counter() - start,
            "settings": dict(settings),
        }
        if path is not None:
            cli.write_json(path, {"run_info": run_info, "result": out[name]})
    return out


def report(results: Dict[str, Any], baselines: Optional[Dict[str, Dict[str, Any]]]) -> None:
    """Print SDR's accuracy and memory, and the baselines' beside them (mean final test
    accuracy over the tasks, memory after the last task, wall time of the method)."""
    rows = [("SDR (EFT for E)", results["average_accuracy"], results["memory_mb"], results["wall_seconds"])]
    for b in (baselines or {}).values():
        rows.append((b["label"], b["average_accuracy"], b["memory_mb"], b["wall_seconds"]))
    print(f"{'method':<18} {'acc (%)':>8} {'mem (MB)':>9} {'wall (s)':>9}")
    for label, acc, mem, wall in rows:
        print(f"{label:<18} {100 * acc:>8.2f} {mem:>9.2f} {wall:>9.1f}")


def _kept_on_interrupt(args, n_tasks: int) -> str:
    """What ``--checkpoint-dir`` holds after an interruption, in one sentence."""
    from avalanche_sdr.training.checkpoint import has_checkpoint, read_manifest

    if args.checkpoint_dir is None:
        return "nothing is kept (--checkpoint-dir DIR makes a run resumable)"
    directory = args.checkpoint_dir
    if not os.path.isfile(os.path.join(directory, PRETRAINED_FILE)):
        return "nothing is kept yet (interrupted before E0 was saved); run the same command again"
    done = read_manifest(directory)["step"] if has_checkpoint(directory) else 0
    kept = [f"{done} of {n_tasks} SDR tasks"]
    if args.compare:
        baselines = sum(os.path.isfile(os.path.join(directory, BASELINE_FILE.format(n))) for n in ("ewc", "replay"))
        kept.append(f"{baselines} of 2 baselines")
    return f"E0, {' and '.join(kept)} are kept in {directory}; run the same command again to resume"


def _warm_start_modules(args, backbone, base_vae, run_info: Dict[str, Any]) -> None:
    """``--checkpoint-dir``: load E0 (and the base VAE) and the RNG states after them from
    :data:`PRETRAINED_FILE` when it is there (refused if written with other options),
    else save them there."""
    from avalanche_sdr.training.checkpoint import load_pretrained, save_pretrained

    modules = {"backbone": backbone, **({"base_vae": base_vae} if base_vae is not None else {})}
    path = os.path.join(args.checkpoint_dir, PRETRAINED_FILE)
    if os.path.isfile(path):
        _mismatch_with_advice(lambda: load_pretrained(path, modules, run_info))
        print(f"[resume] E0{' and the base VAE' if base_vae is not None else ''} loaded from {path}", flush=True)
    else:
        os.makedirs(args.checkpoint_dir, exist_ok=True)
        save_pretrained(path, modules, run_info)


def run_stream_example(args, build_stream: Callable[[], Any], *, stream: str, in_channels: int,
                       image_size: int, latent_dim: int, vae_width: int, record_task_sizes: bool = False,
                       interactive: bool = False) -> Dict[str, Any]:
    """The body every example shares; returns (and writes) the results.

    Seeds everything, builds the stream (``build_stream()``), keeps ``--max-tasks``
    tasks, makes E0 (and a base VAE with ``--generator eft``) from the warm-start tasks,
    runs SDR (and with ``--compare`` the baselines), prints the comparison and the wall
    time, writes ``--output``. With ``--checkpoint-dir`` every finished part is saved
    and a rerun resumes from it (module docstring); Ctrl-C says what is kept.

    :param stream: the stream's name in the results' config.
    :param record_task_sizes: also put the full stream's ``task_sizes`` in the config
        (streams whose sizes are scaled to the data, e.g. EMNIST bymerge).
    :param interactive: Avalanche's progress-bar logger during the SDR run, when stdout
        is a terminal.
    """
    from avalanche_sdr.training.checkpoint import CheckpointError, has_checkpoint

    start = time.perf_counter()
    threads = cli.set_threads(args.threads, args.device)
    if args.checkpoint_dir is not None and has_checkpoint(args.checkpoint_dir) \
            and not os.path.isfile(os.path.join(args.checkpoint_dir, PRETRAINED_FILE)):
        raise CheckpointError(
            f"--checkpoint-dir {args.checkpoint_dir!r} holds an SDR checkpoint without {PRETRAINED_FILE}: it was not "
            "written by this command (examples/quickstart.py?); pass another --checkpoint-dir")
    cli.seed_everything(args.seed)
    full = build_stream()
    benchmark = truncate(full, args.max_tasks)
    warm_start = [benchmark.train_stream[i] for i in range(benchmark.n_warm_start)]
    # Resuming: E0 (and the base VAE) and the RNG states after them come from the checkpoint.
    pretrain = args.checkpoint_dir is None or not os.path.isfile(os.path.join(args.checkpoint_dir, PRETRAINED_FILE))
    try:
        backbone, backbone_note = make_backbone(args, warm_start, in_channels=in_channels, pretrain=pretrain)
        sizes = dict(in_channels=in_channels, image_size=image_size, latent_dim=latent_dim, vae_width=vae_width)
        generator, base_vae, generator_note = make_generator(args, warm_start, pretrain=pretrain, **sizes)
        config = {"stream": stream, "backbone": backbone_note, "generator": generator_note,
                  "device": args.device, "torch_threads": threads}
        if record_task_sizes:
            config["task_sizes"] = getattr(full, "task_sizes", None)
        config = sdr_config(args, config)
        run_info = {"config": config, "seed": args.seed}  # what SDR's checkpoint records and compares
        if args.checkpoint_dir is not None:
            _warm_start_modules(args, backbone, base_vae, run_info)
        results = run_sdr(args, benchmark, backbone, config, generator=generator, base_vae=base_vae,
                          interactive=interactive, **sizes)
        results["baselines"] = run_baselines(args, benchmark, backbone, run_info) if args.compare else None
    except KeyboardInterrupt:
        print(f"interrupted: {_kept_on_interrupt(args, len(benchmark.train_stream))}", file=sys.stderr, flush=True)
        raise
    report(results, results["baselines"])
    print(f"total wall time {time.perf_counter() - start:.1f}s, {threads} torch thread(s)")
    if args.output:
        cli.write_json(args.output, results)
        print(f"wrote {args.output}")
    return results


def stream_example(doc: str, *, stream: Union[str, Callable[[Any], str]], build: Callable[[Any, Any], Any],
                   images: Dict[str, int], data_root: str = "data", data_help: str, cifar_resnet: bool = True,
                   add_arguments: Optional[Callable[[argparse.ArgumentParser], None]] = None,
                   record_task_sizes: bool = False, interactive: bool = False):
    """An example's ``(parse_args, main)``.

    :param doc: the script's docstring (its first line is the ``--help`` description).
    :param stream: the stream's name in the results' config, or ``stream(args) -> name``.
    :param build: ``build(args, avalanche_sdr.benchmarks) -> benchmark`` (the stream).
    :param images: :data:`GREY28` or :data:`RGB32` (image shape, VAE sizes).
    :param data_root: default of ``--data-root``; ``data_help`` its help text.
    :param cifar_resnet: offer ``--cifar-resnet-weights``.
    :param add_arguments: adds the example's own options to the parser.
    """
    def parse_args(argv=None):
        parser = argparse.ArgumentParser(description=cli.description(doc))
        parser.add_argument("--data-root", default=data_root, metavar="DIR", help=data_help)
        if add_arguments is not None:
            add_arguments(parser)
        add_common_arguments(parser, cifar_resnet=cifar_resnet)
        args = parser.parse_args(argv)
        check_arguments(parser, args)
        return args

    def main(args) -> dict:
        benchmarks = importlib.import_module("avalanche_sdr.benchmarks")
        return run_stream_example(args, lambda: build(args, benchmarks),
                                  stream=stream(args) if callable(stream) else stream, **images,
                                  record_task_sizes=record_task_sizes, interactive=interactive)

    return parse_args, main


def cifar_example(doc: str, n_classes: int):
    """``(parse_args, main)`` of the CIFAR-``n_classes`` example (10 or 100):
    ``MixedCIFAR10`` / ``MixedCIFAR100`` read from ``--data-root`` (torchvision layout)."""
    folder = {10: "cifar-10-batches-py", 100: "cifar-100-python"}[n_classes]
    name = f"MixedCIFAR{n_classes}"
    return stream_example(
        doc, stream=name, images=RGB32, cifar_resnet=False,
        build=lambda args, b: getattr(b, name)(args.data_root, seed=args.seed, download=args.download),
        data_help=f"folder holding {folder}/ (torchvision layout; default: data)",
    )


def fashion_example(doc: str, n_splits: Optional[int] = None):
    """``(parse_args, main)`` of a ``MixedFashionMNIST`` example: ``n_splits`` fixed, or
    ``None`` for ``--n-splits {2,10}`` and ``--generator {independent,eft}`` options and
    Avalanche's progress bars (``examples/fashion_mnist.py``)."""
    def add_arguments(parser):
        parser.add_argument("--n-splits", type=int, default=2, choices=(2, 10),
                            help="splits per group of 2 classes: 2 gives 10 tasks (default), 10 gives 50 tasks")
        parser.add_argument("--generator", default="independent", choices=("independent", "eft"),
                            help="independent: a VAE per entry (EFT for E; default); eft: EFT adapters on a base "
                            "VAE pretrained on the warm-start tasks (EFT for E and G)")

    def splits(args):
        return n_splits or args.n_splits

    return stream_example(
        doc, stream=lambda args: f"MixedFashionMNIST(n_splits={splits(args)})", images=GREY28,
        build=lambda args, b: b.MixedFashionMNIST(args.data_root, n_splits=splits(args), seed=args.seed,
                                                  download=args.download),
        data_root=FASHION_ROOT, add_arguments=None if n_splits else add_arguments, interactive=not n_splits,
        data_help="folder with the four Fashion-MNIST idx files (Debian package dataset-fashion-mnist, "
        "the default) or a torchvision root (DIR/FashionMNIST/raw)",
    )


def run_example(main: Callable, parse_args: Callable) -> None:
    """``main(parse_args(argv))`` through :func:`avalanche_sdr.cli.run_cli`: argument
    errors exit with code 2 before anything runs; missing data and the library's other
    errors print one message and exit with code 1 (``--debug``: with the traceback)."""
    cli.run_cli(main, parse_args)
