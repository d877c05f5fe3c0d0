"""SDR on the mixed Fashion-MNIST stream, with Avalanche's loggers and SDR's metrics.

Fashion-MNIST (Debian package ``dataset-fashion-mnist``, or a torchvision root) in 5
groups of 2 classes x ``--n-splits`` splits: 10 tasks (2 splits, 5400/600/1000
images per task) or 50 tasks (10 splits, 1080/120/200). The first 3 tasks are
dissimilar warm-start tasks.

E0 is, by default, a small CNN pretrained on the 3 warm-start tasks' training data
(option (b) of docs/method.rst, "E0 without ImageNet weights"); with
``--cifar-resnet-weights FILE`` it is instead a frozen CIFAR-10-pretrained ResNet-20/32/44/56 (option (a), the
analogue of the paper's ImageNet backbone; grey images are repeated to 3 channels
inside the backbone). ``--generator eft`` gives every entry EFT adapters on one base
VAE pretrained on the warm-start tasks (EFT for E and G). The run logs accuracy,
forgetting, timing, repository memory and Correct/Miss/Incorrect through
``sdr_evaluation_plugin`` (progress bars on stdout, text log and CSV in
``--log-dir``) and writes the results JSON that ``python -m avalanche_sdr.plots``
reads. The other options (``--compare``, ``--max-tasks``, ...), their checks and exit
codes are those of the paper-stream examples (``examples/_common.py``).

    python examples/fashion_mnist.py --n-splits 2 --seed 0 --log-dir results/fmnist10 \\
        --output results/fmnist10/results.json
"""
import _common

parse_args, main = _common.fashion_example(__doc__)

if __name__ == "__main__":
    _common.run_example(main, parse_args)
