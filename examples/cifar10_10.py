"""SDR on the paper's 10-task CIFAR-10 stream (MixedCIFAR10; paper Tables 2-4).

5 groups of 2 CIFAR-10 classes (Table 4) x 2 splits = 10 tasks of 3x32x32 images
(4500 / 500 / 1000 train/validation/test per task), the first 3 dissimilar warm-start
tasks. Reads ``DATA_ROOT/cifar-10-batches-py`` (torchvision layout; ``--download``
fetches it).

E0: ``--resnet18-weights FILE`` (e.g. the paper's ImageNet weights) or a small CNN
pretrained on the warm-start tasks; no ``--cifar-resnet-weights`` here, those ResNets
were trained on these very classes. ``--compare`` adds Avalanche's online EWC and
Replay; ``--max-tasks N`` makes a smoke run. The options, their checks and exit codes
are those of every paper-stream example (``examples/_common.py``; README: Data for
the files).

    python examples/cifar10_10.py --data-root data --download --preset paper \\
        --device cuda --compare --output results/cifar10/results.json
"""
import _common

parse_args, main = _common.cifar_example(__doc__, 10)

if __name__ == "__main__":
    _common.run_example(main, parse_args)
