"""SDR on the paper's 40-task CIFAR-100 stream (MixedCIFAR100; paper Tables 2-4).

20 CIFAR-100 superclasses of 5 fine classes (Table 4) x 2 splits = 40 tasks of
3x32x32 images (1125 / 125 / 250 train/validation/test per task), the first 3
dissimilar warm-start tasks. Reads ``DATA_ROOT/cifar-100-python`` (torchvision
layout; ``--download`` fetches it).

As ``examples/cifar10_10.py`` otherwise: the same options (``examples/_common.py``),
the same E0 choices, and no CIFAR-10 ResNet either (CIFAR-10's and CIFAR-100's
images and several classes overlap).

    python examples/cifar100_40.py --data-root data --download --preset paper \\
        --device cuda --compare --output results/cifar100/results.json
"""
import _common

parse_args, main = _common.cifar_example(__doc__, 100)

if __name__ == "__main__":
    _common.run_example(main, parse_args)
