"""SDR on the 50-task mixed Fashion-MNIST stream (MixedFashionMNIST with n_splits=10).

5 groups of 2 Fashion-MNIST classes x 10 splits = 50 tasks of 1x28x28 images (1080 /
120 / 200 train/validation/test per task, EMNIST's sizes of paper Table 3), the first
3 dissimilar warm-start tasks. Reads the Debian package ``dataset-fashion-mnist``
(default ``/usr/share/datasets/fashion-mnist``) or a torchvision root
(``--download`` fetches it). Not a paper stream: an offline one of the same shape.

E0: ``--cifar-resnet-weights FILE`` (a frozen CIFAR-10 ResNet, the offline analogue
of the paper's ImageNet backbone; grey images repeated to 3 channels),
``--resnet18-weights FILE`` or a small CNN pretrained on the warm-start tasks.
``--compare`` adds Avalanche's online EWC and Replay; ``--max-tasks N`` makes a smoke
run. Options, checks and exit codes: ``examples/_common.py``. The same stream with
Avalanche's progress bars and the EFT-for-E-and-G generator:
``examples/fashion_mnist.py --n-splits 10 --generator eft``.

    python examples/fashion_mnist_50.py --compare --output results/fmnist50/results.json
"""
import _common

parse_args, main = _common.fashion_example(__doc__, n_splits=10)

if __name__ == "__main__":
    _common.run_example(main, parse_args)
