"""SDR on the paper's 100-task EMNIST stream (MixedEMNIST; paper Tables 2-4).

10 groups of EMNIST classes (Table 4) x 10 splits = 100 tasks of 1x28x28 images, the
first 3 dissimilar warm-start tasks. Reads the torchvision layout,
``DATA_ROOT/EMNIST/raw/emnist-<split>-{train,test}-{images-idx3,labels-idx1}-ubyte``
(``--download`` fetches the official archive, which holds both splits). ``--split
balanced`` is the paper's; ``--split bymerge`` (same 47 classes, unbalanced) scales
each group's per-task sizes down to what its rarest class allows (reported in the
JSON): a stream that is not the paper's.

E0, reported with the results: ``--cifar-resnet-weights FILE`` (a frozen CIFAR-10
ResNet, He et al.'s published ``resnet20-*.th`` ..., an offline analogue of the
paper's ImageNet backbone; grey images repeated to 3 channels), ``--resnet18-weights
FILE`` (torchvision ResNet18 from a local state_dict), or by default a small CNN
pretrained on the 3 warm-start tasks' training data. ``--compare`` also runs
Avalanche's online EWC and Replay on the same stream and E0 and prints their accuracy
and memory beside SDR's; ``--max-tasks N`` keeps the first N tasks only (a smoke run,
not the paper's stream). Arguments and output paths are checked before anything is
loaded (exit code 2); missing data: the message says which files and how to get them
(README: Data), exit code 1.

    python examples/emnist_100.py --data-root data --split balanced --download \\
        --preset paper --device cuda --compare --output results/emnist100/results.json
    python examples/emnist_100.py --data-root data --split bymerge \\
        --cifar-resnet-weights weights/resnet20-12fca82f.th
"""
import _common


def _split_argument(parser):
    parser.add_argument("--split", default="balanced", choices=("balanced", "bymerge"),
                        help="balanced: the paper's split (default); bymerge: the same 47 classes, unbalanced, "
                        "per-task sizes scaled to the rarest class")


parse_args, main = _common.stream_example(
    __doc__, stream=lambda args: f"MixedEMNIST(split={args.split!r})", images=_common.GREY28,
    build=lambda args, b: b.MixedEMNIST(args.data_root, split=args.split, seed=args.seed, download=args.download),
    data_help="folder holding EMNIST/raw/emnist-<split>-*-ubyte (torchvision layout; default: data)",
    add_arguments=_split_argument, record_task_sizes=True,
)

if __name__ == "__main__":
    _common.run_example(main, parse_args)
