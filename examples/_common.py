"""What the paper-stream examples (emnist_100, cifar10_10, cifar100_40, fashion_mnist_50) share.

Seeding, the common command-line options (checked by the types of
:mod:`avalanche_sdr.cli` while parsing, before anything is loaded or trained), the
choice of E0, ``--max-tasks`` truncation, one SDR run, the ``--compare`` baselines
(Avalanche's online EWC and Replay, built by :mod:`benchmarks.methods`) and writing
the results JSON. Not a public
module: the examples import it from their own folder; ``--compare`` imports
``benchmarks.methods`` from the repository root (added to ``sys.path`` here), so the
examples are meant to be run from a checkout, as ``python examples/<name>.py`` from
the repository root.
"""
import argparse
import dataclasses
import json
import os
import random
import sys
import time
import types
from typing import Any, Callable, Dict, Optional

import numpy as np
import torch

from avalanche_sdr import cli

MB = 2**20


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


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
    add_decision_arguments(parser)
    cli.add_debug_argument(parser)


def add_decision_arguments(parser: argparse.ArgumentParser) -> None:
    """``--decision NAME`` and ``--no-generators``, shared by every example."""
    from avalanche_sdr.training.strategy import DETECTORS

    parser.add_argument(
        "--decision", default="agreement", choices=DETECTORS,
        help="detection rule: agreement (the paper's: argmax p == argmin S), calibrated (likelihood gap "
        "thresholds), two_sample (a level-0.01 repeat test on E0 features; docs/results/detection.md) "
        "or expert_gate (Aljundi et al.'s autoencoder relatedness, a baseline)",
    )
    parser.add_argument(
        "--no-generators", action="store_true",
        help="build the repository without VAEs (only with --decision two_sample or expert_gate, "
        "which do not use them): smaller entries, no VAE training",
    )


def check_arguments(parser: argparse.ArgumentParser, args) -> None:
    """Checks across options, as argparse errors (exit code 2) before anything runs:
    ``--no-generators`` with a rule that needs generators, a ``--device`` that is not
    there."""
    if args.no_generators and args.decision in ("agreement", "calibrated"):
        parser.error(f"--decision {args.decision} scores tasks with the generators; drop --no-generators")
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

    ``--cifar-resnet-weights``: frozen CIFAR-10 ResNet (DESIGN.md option (a));
    ``--resnet18-weights``: torchvision ResNet18 from a local state_dict; otherwise a
    small CNN pretrained on the warm-start tasks' training data (option (b)).
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


def sdr_settings(args) -> Dict[str, Any]:
    """The preset's ``SDRStrategy`` settings with the command line's overrides."""
    from avalanche_sdr import CPU_SETTINGS, PAPER_SETTINGS

    settings = dict(CPU_SETTINGS if args.preset == "cpu" else PAPER_SETTINGS)
    if args.new_task_epochs is not None:
        settings["new_task_epochs"] = args.new_task_epochs
    if args.vae_epochs is not None:
        settings["vae_epochs"] = args.vae_epochs
    return settings


def run_sdr(args, benchmark, backbone, config: Dict[str, Any], *, in_channels: int, image_size: int,
            latent_dim: int, vae_width: int) -> Dict[str, Any]:
    """Train SDR (EFT for E, ``--decision`` rule) on the whole stream; the results dict of
    :func:`~avalanche_sdr.training.stream_runner.run_sdr_stream` plus ``wall_seconds``."""
    import copy

    from avalanche_sdr import SDRStrategy, build_sdr_model
    from avalanche_sdr.evaluation import sdr_evaluation_plugin
    from avalanche_sdr.training.stream_runner import run_sdr_stream

    settings = sdr_settings(args)
    model = build_sdr_model(copy.deepcopy(backbone), in_channels=in_channels, image_size=image_size, a=8, b=16,
                            generator=None if args.no_generators else "independent", latent_dim=latent_dim,
                            vae_width=vae_width)
    evaluator = sdr_evaluation_plugin(log_dir=args.log_dir, interactive=False)
    strategy = SDRStrategy(model=model, **settings, decision=args.decision, elbo_samples=8,
                           evaluator=evaluator, device=args.device)
    config = dict(config, eft={"a": 8, "b": 16, "gamma": 1.0}, decision=args.decision, elbo_samples=8,
                  preset=args.preset, settings=settings, max_tasks=args.max_tasks)
    print("\n" + cli.output_legend(args.decision, benchmark.n_warm_start, generators=not args.no_generators)
          + "\n", flush=True)
    start = time.perf_counter()
    try:
        results = run_sdr_stream(strategy, benchmark, config=config, seed=args.seed, log_results=False)
    finally:
        evaluator.close()
    results["wall_seconds"] = time.perf_counter() - start
    print()
    print(cli.results_table(results))
    print()
    return results


def run_baselines(args, benchmark, backbone) -> Dict[str, Dict[str, Any]]:
    """Avalanche's online EWC and Replay (``benchmarks.methods`` builders, the harness
    preset of the same name) on the same stream and E0: accuracy (mean over tasks of the
    final test accuracy, task-aware) and memory (MB) measured as for SDR."""
    import warnings

    from avalanche.evaluation.metrics import accuracy_metrics
    from avalanche.training.plugins import EvaluationPlugin

    from avalanche_sdr.evaluation import repository_memory_bytes
    from avalanche_sdr.training.stream_runner import final_test_accuracies

    # ``python examples/x.py`` puts examples/, not the repository root, on sys.path.
    repo_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if repo_root not in sys.path:
        sys.path.insert(0, repo_root)
    from benchmarks.methods import METHODS, PRESETS

    preset = PRESETS[args.preset]
    if args.new_task_epochs is not None:
        preset = dataclasses.replace(preset, baseline_epochs=args.new_task_epochs)
    out = {}
    for name in ("ewc", "replay"):
        seed_everything(args.seed)
        start = time.perf_counter()
        evaluator = EvaluationPlugin(accuracy_metrics(experience=True), loggers=[])
        strategy = METHODS[name].build(backbone, benchmark, None, preset, evaluator=evaluator, device=args.device)
        with warnings.catch_warnings():
            # Avalanche re-enables Replay's ``update`` DeprecationWarning on every call.
            warnings.showwarning = lambda *args, **kwargs: None
            for experience in benchmark.train_stream:
                strategy.train(experience, eval_streams=[])
        accuracies = final_test_accuracies(strategy, benchmark.test_stream)
        out[name] = {
            "label": METHODS[name].label,
            "average_accuracy": sum(accuracies) / len(accuracies),
            "task_accuracies": accuracies,
            "memory_mb": repository_memory_bytes(strategy) / MB,
            "wall_seconds": time.perf_counter() - start,
            "settings": {"epochs": preset.baseline_epochs, "lr": preset.baseline_lr,
                         "train_mb_size": preset.train_mb_size, "ewc_lambda": preset.ewc_lambda,
                         "ewc_decay": preset.ewc_decay, "replay_per_class": preset.replay_per_class},
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


def write_json(path: Optional[str], data: Dict[str, Any]) -> None:
    if not path:
        return
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(data, f, indent=1)
    print(f"wrote {path}")


def run_stream_example(args, build_stream: Callable[[], Any], *, stream: str, in_channels: int,
                       image_size: int, latent_dim: int, vae_width: int,
                       record_task_sizes: bool = False) -> Dict[str, Any]:
    """The body every paper-stream example shares; returns (and writes) the results.

    Seeds everything, builds the stream (``build_stream()``), keeps ``--max-tasks``
    tasks, makes E0 from the warm-start tasks, runs SDR (and with ``--compare`` the
    baselines), prints the comparison and the wall time, writes ``--output``.

    :param stream: the stream's name in the results' config.
    :param record_task_sizes: also put the full stream's ``task_sizes`` in the config
        (streams whose sizes are scaled to the data, e.g. EMNIST bymerge).
    """
    start = time.perf_counter()
    threads = cli.set_threads(args.threads, args.device)
    seed_everything(args.seed)
    full = build_stream()
    benchmark = truncate(full, args.max_tasks)
    warm_start = [benchmark.train_stream[i] for i in range(benchmark.n_warm_start)]
    backbone, backbone_note = make_backbone(args, warm_start, in_channels=in_channels)
    config = {"stream": stream, "backbone": backbone_note,
              "generator": "none" if args.no_generators else
              f"independent ConvVAE per entry (latent {latent_dim}, width {vae_width})",
              "device": args.device, "torch_threads": threads}
    if record_task_sizes:
        config["task_sizes"] = getattr(full, "task_sizes", None)
    results = run_sdr(args, benchmark, backbone, config, in_channels=in_channels, image_size=image_size,
                      latent_dim=latent_dim, vae_width=vae_width)
    results["baselines"] = run_baselines(args, benchmark, backbone) if args.compare else None
    report(results, results["baselines"])
    print(f"total wall time {time.perf_counter() - start:.1f}s, {threads} torch thread(s)")
    write_json(args.output, results)
    return results


def run_example(main: Callable, parse_args: Callable) -> None:
    """``main(parse_args(argv))`` through :func:`avalanche_sdr.cli.run_cli`: argument
    errors exit with code 2 before anything runs; missing data and the library's other
    errors print one message and exit with code 1 (``--debug``: with the traceback)."""
    cli.run_cli(main, parse_args)
