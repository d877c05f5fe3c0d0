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
  :mod:`avalanche_sdr.training.stream_runner`, plus ``wall_seconds`` and
  ``baselines``).
"""
import argparse
import dataclasses
import importlib
import os
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
    cli.add_decision_arguments(parser)
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


def make_backbone(args, warm_start, in_channels: int):
    """E0 and a sentence saying which one it is (reported with the results).

    ``--cifar-resnet-weights``: frozen CIFAR-10 ResNet (option (a) of docs/method.rst,
    "E0 without ImageNet weights"); ``--resnet18-weights``: torchvision ResNet18 from a local
    state_dict; otherwise a small CNN pretrained on the warm-start tasks' training data
    (option (b)).
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
    pretrain_backbone(backbone, warm_start, epochs=args.pretrain_epochs, lr=2e-3, batch_size=64,
                      device=args.device)
    return backbone, f"small_cnn(32,64,128) pretrained {args.pretrain_epochs} epochs on the warm-start tasks"


def make_generator(args, warm_start, *, in_channels: int, image_size: int, latent_dim: int,
                   vae_width: int) -> Tuple[Optional[str], Any, str]:
    """The repository's generators: ``(generator, base_vae, note)`` for
    ``build_sdr_model``, ``note`` reported with the results.

    ``--no-generators``: none; ``--generator eft`` (``examples/fashion_mnist.py``): EFT
    adapters on one base ConvVAE pretrained on the warm-start tasks' training inputs (10
    epochs, Adam lr 2e-3); otherwise an independent ConvVAE per entry.
    """
    if args.no_generators:
        return None, None, "none"
    if getattr(args, "generator", "independent") == "eft":
        from avalanche_sdr.models import ConvVAE
        from avalanche_sdr.training import pretrain_vae

        base_vae = pretrain_vae(ConvVAE(in_channels, image_size, latent_dim=latent_dim, width=vae_width),
                                warm_start, epochs=10, lr=2e-3, device=args.device)
        return "eft", base_vae, (f"EFT adapters on one base ConvVAE (latent {latent_dim}, width {vae_width}) "
                                 "pretrained 10 epochs on the warm-start tasks")
    return "independent", None, f"independent ConvVAE per entry (latent {latent_dim}, width {vae_width})"


def sdr_settings(args):
    """The preset's :class:`~avalanche_sdr.training.SDRSettings` with the command line's overrides."""
    from avalanche_sdr import CPU_SETTINGS, PAPER_SETTINGS

    settings = CPU_SETTINGS if args.preset == "cpu" else PAPER_SETTINGS
    overrides = {"new_task_epochs": args.new_task_epochs, "vae_epochs": args.vae_epochs}
    return settings.replace(**{k: v for k, v in overrides.items() if v is not None})


def run_sdr(args, benchmark, backbone, config: Dict[str, Any], *, generator: Optional[str], base_vae=None,
            in_channels: int, image_size: int, latent_dim: int, vae_width: int,
            interactive: bool = False) -> Dict[str, Any]:
    """Train SDR (EFT for E, ``--decision`` rule) on the whole stream; the results dict of
    :func:`~avalanche_sdr.training.stream_runner.run_sdr_stream` plus ``wall_seconds``.

    :param generator: ``build_sdr_model``'s ``generator`` (:func:`make_generator`).
    :param interactive: Avalanche's progress-bar logger on stdout as well.
    """
    import copy

    from avalanche_sdr import SDRStrategy, build_sdr_model
    from avalanche_sdr.evaluation import sdr_evaluation_plugin
    from avalanche_sdr.training.stream_runner import run_sdr_stream

    settings = sdr_settings(args)
    model = build_sdr_model(copy.deepcopy(backbone), in_channels=in_channels, image_size=image_size, a=8, b=16,
                            generator=generator, base_vae=base_vae, latent_dim=latent_dim, vae_width=vae_width)
    evaluator = sdr_evaluation_plugin(log_dir=args.log_dir, interactive=interactive)
    strategy = SDRStrategy(model=model, settings=settings, decision=args.decision, elbo_samples=8,
                           evaluator=evaluator, device=args.device)
    config = dict(config, eft={"a": 8, "b": 16, "gamma": 1.0}, decision=args.decision, elbo_samples=8,
                  preset=args.preset, settings=settings.to_dict(), max_tasks=args.max_tasks)
    print("\n" + cli.output_legend(args.decision, benchmark.n_warm_start, generators=generator is not None)
          + "\n", flush=True)
    start = time.perf_counter()
    try:
        results = run_sdr_stream(strategy, benchmark, config=config, seed=args.seed, log=print)
    finally:
        evaluator.close()
    results["wall_seconds"] = time.perf_counter() - start
    print()
    print(cli.results_table(results))
    print()
    return results


def run_baselines(args, benchmark, backbone) -> Dict[str, Dict[str, Any]]:
    """Avalanche's online EWC and Replay (:mod:`avalanche_sdr.baselines`, budget
    ``BASELINE_SETTINGS[--preset]``, ``--new-task-epochs`` epochs when given) on the
    same stream and E0: accuracy (mean over tasks of the final test accuracy,
    task-aware) and memory (MB) measured as for SDR."""
    import warnings

    from avalanche.evaluation.metrics import accuracy_metrics
    from avalanche.training.plugins import EvaluationPlugin

    from avalanche_sdr import baselines
    from avalanche_sdr.evaluation import BYTES_PER_MB, repository_memory_bytes
    from avalanche_sdr.training.stream_runner import final_test_accuracies

    s = baselines.BASELINE_SETTINGS[args.preset]
    if args.new_task_epochs is not None:
        s = dataclasses.replace(s, epochs=args.new_task_epochs)
    builders = {
        "ewc": ("Online EWC", lambda **kw: baselines.ewc_strategy(
            backbone, **s.training(), ewc_lambda=s.ewc_lambda, decay_factor=s.ewc_decay, **kw)),
        "replay": ("ER", lambda **kw: baselines.replay_strategy(
            backbone, mem_size=baselines.replay_mem_size(benchmark.train_stream, s.replay_per_class),
            **s.training(), **kw)),
    }
    out = {}
    for name, (label, build) in builders.items():
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
            "settings": {"epochs": s.epochs, "lr": s.lr, "train_mb_size": s.train_mb_size,
                         "ewc_lambda": s.ewc_lambda, "ewc_decay": s.ewc_decay,
                         "replay_per_class": s.replay_per_class},
        }
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


def run_stream_example(args, build_stream: Callable[[], Any], *, stream: str, in_channels: int,
                       image_size: int, latent_dim: int, vae_width: int, record_task_sizes: bool = False,
                       interactive: bool = False) -> Dict[str, Any]:
    """The body every example shares; returns (and writes) the results.

    Seeds everything, builds the stream (``build_stream()``), keeps ``--max-tasks``
    tasks, makes E0 (and a base VAE with ``--generator eft``) from the warm-start tasks,
    runs SDR (and with ``--compare`` the baselines), prints the comparison and the wall
    time, writes ``--output``.

    :param stream: the stream's name in the results' config.
    :param record_task_sizes: also put the full stream's ``task_sizes`` in the config
        (streams whose sizes are scaled to the data, e.g. EMNIST bymerge).
    :param interactive: Avalanche's progress-bar logger during the SDR run.
    """
    start = time.perf_counter()
    threads = cli.set_threads(args.threads, args.device)
    cli.seed_everything(args.seed)
    full = build_stream()
    benchmark = truncate(full, args.max_tasks)
    warm_start = [benchmark.train_stream[i] for i in range(benchmark.n_warm_start)]
    backbone, backbone_note = make_backbone(args, warm_start, in_channels=in_channels)
    sizes = dict(in_channels=in_channels, image_size=image_size, latent_dim=latent_dim, vae_width=vae_width)
    generator, base_vae, generator_note = make_generator(args, warm_start, **sizes)
    config = {"stream": stream, "backbone": backbone_note, "generator": generator_note,
              "device": args.device, "torch_threads": threads}
    if record_task_sizes:
        config["task_sizes"] = getattr(full, "task_sizes", None)
    results = run_sdr(args, benchmark, backbone, config, generator=generator, base_vae=base_vae,
                      interactive=interactive, **sizes)
    results["baselines"] = run_baselines(args, benchmark, backbone) if args.compare else None
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
        parser = argparse.ArgumentParser(description=doc.splitlines()[0])
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
