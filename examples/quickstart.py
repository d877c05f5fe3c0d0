"""SDR end to end on scikit-learn's bundled digits: offline, CPU, one command.

The stream (``MixedDigits``) has 10 tasks: 5 groups of 2 digits x 2 disjoint splits,
permuted by ``--seed`` with 3 dissimilar warm-start tasks first. Without ImageNet
weights, the backbone E0 (a small CNN) is pretrained on the warm-start tasks'
training data only (option (b) of docs/method.rst, "E0 without ImageNet
weights"); it is then frozen and every unique task gets EFT adapters (a=8, b=16) and
a conv VAE. The 7 later tasks are each detected as new or similar before any training
on them. That is the paper's SDR, ``--method paper`` (default); ``--method recommended``
runs the recommended one (the two-sample repeat test with classes matched in any order,
no generators, the learning reuse, the ``lda_weighted`` task-free router), and
``--preset`` names the training budget (default ``cpu``, ``CPU_SETTINGS``).

Prints a legend, one line per task (decision, scores, seconds) and a final table
(each task's decision against the ground truth, its test accuracy; detection,
accuracy and memory in short); ``--output FILE`` writes the results JSON (format in
``avalanche_sdr.training.stream_runner``), which ``python -m avalanche_sdr.plots``
turns into figures. The same ``--seed`` and ``--threads`` give the same JSON on the
same machine.

``--checkpoint-dir DIR`` saves a checkpoint after every task; the same command run
again after an interruption (even SIGKILL) resumes from it — E0 and the repository
are loaded, not retrained — and writes the same JSON as an uninterrupted run.

Arguments and output paths are checked before anything is trained (exit code 2);
errors of the library (e.g. an unusable checkpoint) print one message (exit code 1;
``--debug`` shows the traceback).

    python examples/quickstart.py --seed 0 --output results/quickstart.json
    python examples/quickstart.py --seed 0 --method recommended
    python examples/quickstart.py --seed 0 --checkpoint-dir runs/qs0 --output results/quickstart.json
"""
import argparse
import time

import _common  # first: the command line's warning filters, before Avalanche is imported
from avalanche_sdr import cli


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=cli.description(__doc__))
    parser.add_argument("--seed", type=cli.seed, default=0,
                        help="seed of the stream's task order and of training (default 0)")
    parser.add_argument("--output", type=cli.output_file, default=None, metavar="FILE",
                        help="write the results JSON here (checked before training starts)")
    _common.add_method_arguments(parser, preset_help="Digits tasks hold ~120 training images: with cpu a reused "
                                 "entry's head trains 10 epochs at lr 0.01")
    parser.add_argument(
        "--forward-transfer", action=argparse.BooleanOptionalAction, default=None,
        help="start a new entry's adapters from the nearest entry (--no-forward-transfer: from the identity; "
             "default: the method's, off for paper, on for recommended)",
    )
    parser.add_argument("--pretrain-epochs", type=cli.non_negative_int, default=20, metavar="N",
                        help="epochs of E0 pretraining on the warm-start tasks' training data (default 20)")
    parser.add_argument("--quiet", action="store_true",
                        help="print only the final table (no legend, no pretraining or per-task lines)")
    parser.add_argument(
        "--checkpoint-dir", type=cli.output_dir, default=None, metavar="DIR",
        help="save a checkpoint here after every task; resume from it when it holds one",
    )
    cli.add_threads_argument(parser, default=1)
    cli.add_debug_argument(parser)
    args = parser.parse_args(argv)
    _common.check_method_options(parser, args)
    return args


def main(args) -> dict:
    start = time.perf_counter()
    from avalanche.training.plugins import EvaluationPlugin
    from avalanche.evaluation.metrics import accuracy_metrics

    from avalanche_sdr import SDRStrategy
    from avalanche_sdr.benchmarks import MixedDigits
    from avalanche_sdr.evaluation import DecisionLogger
    from avalanche_sdr.models import small_cnn_backbone
    from avalanche_sdr.training import has_checkpoint, pretrain_backbone
    from avalanche_sdr.training.stream_runner import run_sdr_stream

    threads = cli.set_threads(args.threads)
    cli.seed_everything(args.seed)
    benchmark = MixedDigits(seed=args.seed)
    warm_start = [benchmark.train_stream[i] for i in range(3)]

    backbone = small_cnn_backbone(in_channels=1, widths=(32, 64, 128))
    if args.checkpoint_dir is not None and has_checkpoint(args.checkpoint_dir):
        # The checkpoint holds the pretrained E0 and the RNG states to continue from.
        print(f"resuming from the checkpoint in {args.checkpoint_dir}", flush=True)
    else:
        pretrain_backbone(  # every warm-start image, as the committed results (the library holds half out by default)
            backbone, warm_start, epochs=args.pretrain_epochs, lr=2e-3, batch_size=32, verbose=not args.quiet,
            holdout=None,
        )
    strategy = SDRStrategy.from_benchmark(
        backbone, benchmark,
        method=args.method,  # "paper" (agreement rule, a VAE per entry, head-only reuse) or "recommended"
        settings=args.preset,  # "cpu": CPU_SETTINGS
        detector=_common.detector(args, elbo_samples=8),  # --detector, else the method's (8 ELBO samples)
        **_common.settings_keywords(args),  # --reuse, --new-task-epochs when given
        latent_dim=8, vae_width=16,  # each entry's ConvVAE for 1x8x8 images (methods with generators)
        forward_transfer=args.forward_transfer,
        evaluator=EvaluationPlugin(accuracy_metrics(experience=True),
                                   loggers=[] if args.quiet else [DecisionLogger()]),
        checkpoint_dir=args.checkpoint_dir,
    )
    config = {
        "stream": "MixedDigits",
        "backbone": "small_cnn(32,64,128) pretrained on the 3 warm-start tasks' training data",
        "method": args.method,
        "preset": args.preset,
        "forward_transfer": strategy.sdr.forward_transfer,
        "pretrain_epochs": args.pretrain_epochs,
        "torch_threads": threads,
        **_common.method_values(strategy),
    }
    if not args.quiet:
        print("\n" + _common.legend(strategy, benchmark.n_warm_start) + "\n", flush=True)
    results = run_sdr_stream(strategy, benchmark, config=config, seed=args.seed, log=print)
    print()
    print(cli.results_table(results))
    print(f"wall time  {time.perf_counter() - start:.1f}s after imports, {threads} torch thread(s)")
    if args.output:
        cli.write_json(args.output, results)
        print(f"wrote {args.output}")
    return results


if __name__ == "__main__":
    cli.run_cli(main, parse_args)
