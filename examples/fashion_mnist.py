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

    python examples/fashion_mnist.py --n-splits 2 --seed 0 --log-dir results/fmnist10 \\
        --output results/fmnist10/results.json
"""
import argparse
import json
import os
import random
import sys
import time

import numpy as np
import torch


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-root", default="/usr/share/datasets/fashion-mnist",
                        help="Fashion-MNIST idx files (Debian layout) or a torchvision root")
    parser.add_argument("--download", action="store_true", help="download with torchvision when missing")
    parser.add_argument("--n-splits", type=int, default=2, choices=(2, 10), help="2: 10 tasks, 10: 50 tasks")
    parser.add_argument("--seed", type=int, default=0, help="stream permutation and training seed")
    parser.add_argument("--preset", default="cpu", choices=("cpu", "paper"), help="training settings")
    parser.add_argument("--cifar-resnet-weights", default=None,
                        help="E0 = this CIFAR-10 ResNet checkpoint (resnet20-*.th ...) instead of a small CNN")
    parser.add_argument("--pretrain-epochs", type=int, default=5, help="E0 pretraining epochs (small CNN only)")
    parser.add_argument("--generator", default="independent", choices=("independent", "eft"),
                        help="a VAE per entry (EFT for E) or EFT adapters on a base VAE (EFT for E and G)")
    parser.add_argument("--decision", default="agreement",
                        choices=("agreement", "calibrated", "two_sample", "expert_gate"),
                        help="detection rule (agreement: the paper's; two_sample: the level-0.01 repeat test)")
    parser.add_argument("--log-dir", default=None, help="text log and CSV logs here")
    parser.add_argument("--output", default=None, help="write the results JSON here")
    parser.add_argument("--device", default="cpu")
    return parser.parse_args(argv)


def main(args) -> dict:
    from avalanche_sdr import CPU_SETTINGS, PAPER_SETTINGS, SDRStrategy, build_sdr_model
    from avalanche_sdr.benchmarks import MixedFashionMNIST
    from avalanche_sdr.evaluation import sdr_evaluation_plugin
    from avalanche_sdr.models import ConvVAE, cifar_resnet_backbone, small_cnn_backbone
    from avalanche_sdr.training import pretrain_backbone, pretrain_vae
    from avalanche_sdr.training.stream_runner import run_sdr_stream

    start = time.perf_counter()
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    benchmark = MixedFashionMNIST(args.data_root, n_splits=args.n_splits, seed=args.seed, download=args.download)
    warm_start = [benchmark.train_stream[i] for i in range(benchmark.n_warm_start)]

    if args.cifar_resnet_weights:
        name = os.path.basename(args.cifar_resnet_weights)
        depth = int(name.split("-")[0].replace("resnet", ""))
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
    }
    try:
        results = run_sdr_stream(strategy, benchmark, config=config, seed=args.seed)
    finally:
        evaluator.close()
    print(f"wall time {time.perf_counter() - start:.1f}s")
    if args.output:
        os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
        with open(args.output, "w") as f:
            json.dump(results, f, indent=1)
        print(f"wrote {args.output}")
    return results


if __name__ == "__main__":
    main(parse_args(sys.argv[1:]))
