"""SDR on the paper's 10-task CIFAR-10 stream (``MixedCIFAR10``; paper Tables 2-4).

5 groups of 2 CIFAR-10 classes (Table 4) x 2 splits = 10 tasks of 3x32x32 images
(4500 / 500 / 1000 train/validation/test per task), the first 3 dissimilar warm-start
tasks. Reads ``DATA_ROOT/cifar-10-batches-py`` (torchvision layout; ``--download``
fetches it).

E0, reported with the results: ``--resnet18-weights FILE`` (torchvision ResNet18 from
a local state_dict, e.g. the paper's ImageNet weights) or by default a small CNN
pretrained on the 3 warm-start tasks' training data. The CIFAR-10 ResNets
(``--cifar-resnet-weights`` of the other examples) are deliberately not offered:
they were trained on these very classes.
``--compare`` also runs Avalanche's online EWC and Replay (``benchmarks.methods``) on
the same stream and E0 and prints their accuracy and memory beside SDR's.
``--max-tasks N`` keeps the first N tasks only: a smoke run, not the paper's stream,
and its numbers are not the paper's.

Run from the repository root (``--compare`` imports ``benchmarks``). Arguments and
output paths are checked before anything is loaded (exit code 2). Missing data: the
message says which files and how to get them (README: Data); exit code 1.

    python examples/cifar10_10.py --data-root data --download --preset paper \\
        --device cuda --compare --output results/cifar10/results.json
"""
import argparse

from avalanche_sdr import cli

if __name__ == "__main__":
    cli.install_warning_filters()  # before anything imports Avalanche

import _common  # noqa: E402  (after the filters)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-root", default="data", metavar="DIR",
                        help="folder holding cifar-10-batches-py/ (torchvision layout; default: data)")
    _common.add_common_arguments(parser, cifar_resnet=False)
    args = parser.parse_args(argv)
    _common.check_arguments(parser, args)
    return args


def main(args) -> dict:
    from avalanche_sdr.benchmarks import MixedCIFAR10

    return _common.run_stream_example(
        args, lambda: MixedCIFAR10(args.data_root, seed=args.seed, download=args.download),
        stream="MixedCIFAR10", in_channels=3, image_size=32, latent_dim=32, vae_width=32,
    )


if __name__ == "__main__":
    _common.run_example(main, parse_args)
