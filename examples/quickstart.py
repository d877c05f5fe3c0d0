"""SDR end to end on scikit-learn's bundled digits, offline, in about a minute on 2 CPU cores.

The stream (``MixedDigits``) has 10 tasks: 5 groups of 2 digits x 2 disjoint splits,
permuted by ``--seed`` with 3 dissimilar warm-start tasks first. Without ImageNet
weights, the backbone E0 (a small CNN) is pretrained on the warm-start tasks'
training data only (DESIGN.md option (b)); it is then frozen and every unique task
gets EFT adapters (a=8, b=16) and a conv VAE. The 7 later tasks are each detected as
new or similar before any training on them.

Prints one line per task (decision, chosen earlier task, test accuracy) and a
summary; ``--output FILE`` writes the results JSON (format in
``avalanche_sdr.training.stream_runner``), which ``python -m avalanche_sdr.plots``
turns into figures. The same ``--seed`` gives the same JSON on the same machine.

``--checkpoint-dir DIR`` saves a checkpoint after every task; the same command run
again after an interruption (even SIGKILL) resumes from it — E0 and the repository
are loaded, not retrained — and writes the same JSON as an uninterrupted run.

    python examples/quickstart.py --seed 0 --output results/quickstart.json
    python examples/quickstart.py --seed 0 --checkpoint-dir runs/qs0 --output results/quickstart.json
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
    parser.add_argument("--seed", type=int, default=0, help="stream permutation and training seed")
    parser.add_argument("--output", default=None, help="write the results JSON here")
    parser.add_argument(
        "--decision", default="agreement", choices=("agreement", "calibrated", "two_sample", "expert_gate"),
        help="detection rule: agreement (the paper's: argmax p == argmin S), calibrated "
        "(likelihood gap, consistency lift and S against permuted labels), two_sample (a level-0.01 "
        "repeat test on E0 features) or expert_gate (autoencoder relatedness); docs: Beyond the paper",
    )
    parser.add_argument(
        "--no-generators", action="store_true",
        help="no VAEs in the repository (only with --decision two_sample or expert_gate)",
    )
    parser.add_argument(
        "--forward-transfer", action="store_true",
        help="start a new entry's adapters from the entry with the lowest S (default: from E0)",
    )
    parser.add_argument("--pretrain-epochs", type=int, default=20, help="epochs of E0 pretraining on warm-start data")
    parser.add_argument("--quiet", action="store_true", help="only print the per-task lines and the summary")
    parser.add_argument(
        "--checkpoint-dir", default=None,
        help="save a checkpoint here after every task; resume from it when it holds one",
    )
    args = parser.parse_args(argv)
    if args.no_generators and args.decision in ("agreement", "calibrated"):
        parser.error(f"--decision {args.decision} scores tasks with the generators; drop --no-generators")
    return args


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def main(args) -> dict:
    start = time.perf_counter()
    from avalanche.training.plugins import EvaluationPlugin
    from avalanche.evaluation.metrics import accuracy_metrics

    from avalanche_sdr import CPU_SETTINGS, SDRStrategy, build_sdr_model
    from avalanche_sdr.benchmarks import MixedDigits
    from avalanche_sdr.models import small_cnn_backbone
    from avalanche_sdr.training import has_checkpoint, pretrain_backbone
    from avalanche_sdr.training.stream_runner import run_sdr_stream

    seed_everything(args.seed)
    benchmark = MixedDigits(seed=args.seed)
    warm_start = [benchmark.train_stream[i] for i in range(3)]

    backbone = small_cnn_backbone(in_channels=1, widths=(32, 64, 128))
    if args.checkpoint_dir is not None and has_checkpoint(args.checkpoint_dir):
        # The checkpoint holds the pretrained E0 and the RNG states to continue from.
        print(f"resuming from the checkpoint in {args.checkpoint_dir}", flush=True)
    else:
        pretrain_backbone(
            backbone, warm_start, epochs=args.pretrain_epochs, lr=2e-3, batch_size=32, verbose=not args.quiet
        )
    model = build_sdr_model(backbone, in_channels=1, image_size=8, a=8, b=16,
                            generator=None if args.no_generators else "independent", latent_dim=8, vae_width=16)

    # Digits tasks hold ~120 training images: the CPU preset's 2 head-only epochs are 8
    # Adam steps, too few for a fresh head, and 20 VAE epochs are cheap to double.
    settings = dict(CPU_SETTINGS, reuse_epochs=10, reuse_lr=0.01, vae_epochs=40)
    strategy = SDRStrategy(
        model=model,
        **settings,
        decision=args.decision,
        forward_transfer=args.forward_transfer,
        elbo_samples=8,
        evaluator=EvaluationPlugin(accuracy_metrics(experience=True), loggers=[]),
        verbose=not args.quiet,
        checkpoint_dir=args.checkpoint_dir,
    )
    config = {
        "stream": "MixedDigits",
        "backbone": "small_cnn(32,64,128) pretrained on the 3 warm-start tasks' training data",
        "generator": "none" if args.no_generators else "independent ConvVAE per entry (latent 8, width 16)",
        "eft": {"a": 8, "b": 16, "gamma": 1.0},
        "decision": args.decision,
        "forward_transfer": args.forward_transfer,
        "elbo_samples": 8,
        "pretrain_epochs": args.pretrain_epochs,
        "settings": settings,
    }
    results = run_sdr_stream(strategy, benchmark, config=config, seed=args.seed)
    print(f"wall time {time.perf_counter() - start:.1f}s after imports")
    if args.output:
        os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
        with open(args.output, "w") as f:
            json.dump(results, f, indent=1)
        print(f"wrote {args.output}")
    return results


if __name__ == "__main__":
    main(parse_args(sys.argv[1:]))
