"""SDR on the 50-task mixed Fashion-MNIST stream (``MixedFashionMNIST(n_splits=10)``).

5 groups of 2 Fashion-MNIST classes x 10 splits = 50 tasks of 1x28x28 images (1080 /
120 / 200 train/validation/test per task, EMNIST's sizes of paper Table 3), the first
3 dissimilar warm-start tasks. Reads the Debian package ``dataset-fashion-mnist``
(default ``/usr/share/datasets/fashion-mnist``) or a torchvision root
(``--download`` fetches it). Not a paper stream: an offline one of the same shape.

E0, reported with the results: ``--cifar-resnet-weights FILE`` (a frozen CIFAR-10
ResNet, He et al.'s published ``resnet20-*.th`` ..., an offline analogue of the
paper's ImageNet backbone; grey images repeated to 3 channels),
``--resnet18-weights FILE`` (torchvision ResNet18 from a local state_dict), or by default a small CNN pretrained on the 3
warm-start tasks' training data. ``--compare`` also runs Avalanche's online EWC and
Replay (``benchmarks.methods``) on the same stream and E0 and prints their accuracy and
memory beside SDR's. ``--max-tasks N`` keeps the first N tasks only: a smoke run, not
the full stream. (``examples/fashion_mnist.py`` shows the same stream with Avalanche's
loggers and the EFT-for-E-and-G generator.)

Run from the repository root (``--compare`` imports ``benchmarks``). Arguments and
output paths are checked before anything is loaded (exit code 2). Missing data: the
message says which files and how to get them (README: Data); exit code 1.

    python examples/fashion_mnist_50.py --compare --output results/fmnist50/results.json
"""
import argparse

from avalanche_sdr import cli

if __name__ == "__main__":
    cli.install_warning_filters()  # before anything imports Avalanche

import _common  # noqa: E402  (after the filters)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-root", default="/usr/share/datasets/fashion-mnist", metavar="DIR",
                        help="folder with the four Fashion-MNIST idx files (Debian package dataset-fashion-mnist, "
                        "the default) or a torchvision root (DIR/FashionMNIST/raw)")
    _common.add_common_arguments(parser, cifar_resnet=True)
    args = parser.parse_args(argv)
    _common.check_arguments(parser, args)
    return args


def main(args) -> dict:
    from avalanche_sdr.benchmarks import MixedFashionMNIST

    return _common.run_stream_example(
        args, lambda: MixedFashionMNIST(args.data_root, n_splits=10, seed=args.seed, download=args.download),
        stream="MixedFashionMNIST(n_splits=10)", in_channels=1, image_size=28, latent_dim=16, vae_width=32,
    )


if __name__ == "__main__":
    _common.run_example(main, parse_args)
