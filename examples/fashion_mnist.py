"""SDR on the mixed Fashion-MNIST stream, with Avalanche's loggers and SDR's metrics.

Fashion-MNIST (Debian package ``dataset-fashion-mnist``, or a torchvision root) in 5
groups of 2 classes x ``--n-splits`` splits: 10 tasks (2 splits, 5400/600/1000
images per task) or 50 tasks (10 splits, 1080/120/200). The first 3 tasks are
dissimilar warm-start tasks.

E0 is, by default, a small CNN pretrained on the 3 warm-start tasks' training data
(DESIGN.md option (b)); with ``--cifar-resnet-weights FILE`` it is instead a frozen
CIFAR-10-pretrained ResNet-20/32/44/56 (option (a), the analogue of the paper's
ImageNet backbone; grey images are repeated to 3 channels inside the backbone). The run logs accuracy, forgetting, timing, repository memory
and Correct/Miss/Incorrect through ``sdr_evaluation_plugin`` (text log and CSV in
``--log-dir``) and writes the results JSON that ``python -m avalanche_sdr.plots``
reads.

Arguments and output paths are checked before anything is loaded (exit code 2);
missing data and the library's other errors print one message (exit code 1;
``--debug`` shows the traceback).

    python examples/fashion_mnist.py --n-splits 2 --seed 0 --log-dir results/fmnist10 \\
        --output results/fmnist10/results.json
"""
import argparse
import json
import os
import random
import time

from avalanche_sdr import cli

if __name__ == "__main__":
    cli.install_warning_filters()  # before anything imports Avalanche

import numpy as np
import torch


def parse_args(argv=None):
    from avalanche_sdr.training.strategy import DETECTORS

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-root", default="/usr/share/datasets/fashion-mnist", metavar="DIR",
                        help="folder with the four Fashion-MNIST idx files (Debian package dataset-fashion-mnist, "
                        "the default) or a torchvision root (DIR/FashionMNIST/raw)")
    parser.add_argument("--download", action="store_true",
                        help="download Fashion-MNIST with torchvision into --data-root when files are missing "
                        "(needs internet)")
    parser.add_argument("--n-splits", type=int, default=2, choices=(2, 10),
                        help="splits per group of 2 classes: 2 gives 10 tasks (default), 10 gives 50 tasks")
    parser.add_argument("--seed", type=cli.seed, default=0,
                        help="seed of the stream's task order and of training (default 0)")
    parser.add_argument("--preset", default="cpu", choices=("cpu", "paper"),
                        help="training settings: cpu (CPU_SETTINGS: shortened training, same method; default) "
                        "or paper (PAPER_SETTINGS, supplementary A.1; meant for a GPU)")
    parser.add_argument("--cifar-resnet-weights", type=cli.cifar_resnet_weights, default=None, metavar="FILE",
                        help="E0 = this frozen CIFAR-10 ResNet checkpoint (resnet20-*.th ...) instead of a small CNN")
    parser.add_argument("--pretrain-epochs", type=cli.non_negative_int, default=5, metavar="N",
                        help="E0 pretraining epochs on the warm-start tasks (small CNN only; default 5)")
    parser.add_argument("--generator", default="independent", choices=("independent", "eft"),
                        help="independent: a VAE per entry (EFT for E; default); eft: EFT adapters on a base "
                        "VAE pretrained on the warm-start tasks (EFT for E and G)")
    parser.add_argument("--decision", default="agreement", choices=DETECTORS,
                        help="detection rule (agreement: the paper's; two_sample: the level-0.01 repeat test)")
    parser.add_argument("--log-dir", type=cli.output_dir, default=None, metavar="DIR",
                        help="write a text log and CSV logs into this folder")
    parser.add_argument("--output", type=cli.output_file, default=None, metavar="FILE",
                        help="write the results JSON here (checked before the run starts)")
    parser.add_argument("--device", default="cpu",
                        help="torch device to train on: cpu (default), cuda, cuda:1, ... (checked before the run)")
    cli.add_threads_argument(parser)
    cli.add_debug_argument(parser)
    args = parser.parse_args(argv)
    cli.check_device(parser, args.device)
    return args


def main(args) -> dict:
    from avalanche_sdr import CPU_SETTINGS, PAPER_SETTINGS, SDRStrategy, build_sdr_model
    from avalanche_sdr.benchmarks import MixedFashionMNIST
    from avalanche_sdr.evaluation import sdr_evaluation_plugin
    from avalanche_sdr.models import ConvVAE, cifar_resnet_backbone, small_cnn_backbone
    from avalanche_sdr.training import pretrain_backbone, pretrain_vae
    from avalanche_sdr.training.stream_runner import run_sdr_stream

    start = time.perf_counter()
    threads = cli.set_threads(args.threads, args.device)
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    benchmark = MixedFashionMNIST(args.data_root, n_splits=args.n_splits, seed=args.seed, download=args.download)
    warm_start = [benchmark.train_stream[i] for i in range(benchmark.n_warm_start)]

    if args.cifar_resnet_weights:
        name = os.path.basename(args.cifar_resnet_weights)
        depth = cli.cifar_resnet_depth(name)
        backbone = cifar_resnet_backbone(depth, weights_path=args.cifar_resnet_weights, in_channels=1)
        backbone_note = f"CIFAR-10 ResNet-{depth} ({name}), frozen"
    else:
        backbone = small_cnn_backbone(in_channels=1, widths=(32, 64, 128))
        pretrain_backbone(backbone, warm_start, epochs=args.pretrain_epochs, lr=2e-3, batch_size=64, device=args.device)
        backbone_note = f"small_cnn(32,64,128) pretrained {args.pretrain_epochs} epochs on the warm-start tasks"

    base_vae = None
    if args.generator == "eft":
        base_vae = pretrain_vae(ConvVAE(1, 28, latent_dim=16, width=32), warm_start, epochs=10, lr=2e-3, device=args.device)
    model = build_sdr_model(
        backbone, in_channels=1, image_size=28, a=8, b=16,
        generator=args.generator, base_vae=base_vae, latent_dim=16, vae_width=32,
    )
    settings = dict(CPU_SETTINGS if args.preset == "cpu" else PAPER_SETTINGS)
    evaluator = sdr_evaluation_plugin(log_dir=args.log_dir, interactive=True)
    strategy = SDRStrategy(
        model=model, **settings, decision=args.decision, elbo_samples=8,
        evaluator=evaluator, device=args.device,
    )
    config = {
        "stream": f"MixedFashionMNIST(n_splits={args.n_splits})",
        "backbone": backbone_note,
        "generator": args.generator,
        "eft": {"a": 8, "b": 16, "gamma": 1.0},
        "decision": args.decision,
        "elbo_samples": 8,
        "preset": args.preset,
        "settings": settings,
        "device": args.device,
        "torch_threads": threads,
    }
    print("\n" + cli.output_legend(args.decision, benchmark.n_warm_start) + "\n", flush=True)
    try:
        results = run_sdr_stream(strategy, benchmark, config=config, seed=args.seed, log_results=False)
    finally:
        evaluator.close()
    print()
    print(cli.results_table(results))
    print(f"wall time  {time.perf_counter() - start:.1f}s, {threads} torch thread(s)")
    if args.output:
        os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
        with open(args.output, "w") as f:
            json.dump(results, f, indent=1)
        print(f"wrote {args.output}")
    return results


if __name__ == "__main__":
    cli.run_cli(main, parse_args)
