"""SDR on the mixed Fashion-MNIST stream with Avalanche's loggers, beside Avalanche's EWC and Replay.

The script reads top to bottom: the benchmark (``MixedFashionMNIST``), E0 (the frozen
backbone every entry adapts) and, with ``--generator eft``, a base VAE, the
``SDRStrategy`` (``--method paper`` or ``recommended``, on the training budget
``--preset``), Avalanche's own ``EWC`` and ``Replay`` on copies of the same E0
(``--compare``), and the loop that trains and evaluates them. ``_common.py`` holds the
plumbing only (command line, ``--checkpoint-dir``, printed tables, results JSON).

Fashion-MNIST (Debian package ``dataset-fashion-mnist``, or a torchvision root) in 5
groups of 2 classes x ``--n-splits`` splits: 10 tasks (2 splits, 5400/600/1000 images
per task) or 50 tasks (10 splits, 1080/120/200). The first 3 tasks are dissimilar
warm-start tasks. E0 is, by default, a small CNN pretrained on their training data
(option (b) of docs/method.rst, "E0 without ImageNet weights"); with
``--cifar-resnet-weights FILE`` a frozen CIFAR-10-pretrained ResNet-20/32/44/56 (option
(a); grey images are repeated to 3 channels inside it). ``--generator eft`` gives every
entry EFT adapters on one base VAE pretrained on the warm-start tasks (EFT for E and
G). The run logs accuracy, forgetting, timing, repository memory and
Correct/Miss/Incorrect through ``sdr_evaluation_plugin`` (progress bars on a terminal,
text log and CSV in ``--log-dir``) and writes the results JSON that ``python -m
avalanche_sdr.plots`` reads.

A results row without the harness: the harness's ``fashion10`` (``--n-splits 2``) and
``fashion50`` (``--n-splits 10``) streams are these with ``--task-sizes capped`` (at
most 600 / 60 / 300 and 300 / 30 / 200 images per task) and this default E0 (20 epochs);
its ``--preset cpu`` is this ``--preset cpu``, and here as there every method starts
from the RNG state after E0. Its rows, each reproduced here by the same seed and
``--threads``:

- ``sdr`` (the harness's ``--method paper``; docs/results/table2_fashion10_cpu.md):
  ``--method paper``;
- ``sdr_two_sample_nogen [accumulate]`` (the harness's ``--method recommended``; the
  "SDR two-sample, no generators [accumulate]" rows of docs/results/learning_reuse.md,
  fashion50's):
  ``--detector two_sample --reuse accumulate``. The library's ``--method recommended``
  differs from that row twice: classes matched in any order, and the ``lda_weighted``
  task-free router, whose state counts in memory;
- ``ewc`` and ``replay`` at the preset's values: ``--compare`` (the ``[tuned]`` rows'
  values come from the harness's tuning on the validation stream, not offered here);
- ``sdr_eft_g``: ``--generator eft``, but for the base VAE's epochs (10 here, 40 there).

    python examples/fashion_mnist.py --n-splits 2 --task-sizes capped --detector two_sample \\
        --reuse accumulate --compare --seed 0 --output results/fmnist10/seed0.json
    python examples/fashion_mnist.py --n-splits 2 --seed 0 --log-dir results/fmnist10 \\
        --output results/fmnist10/results.json
"""
import _common  # first: the command line's warning filters, before Avalanche is imported

CAPPED_SIZES = {2: (600, 60, 300), 10: (300, 30, 200)}
"""--n-splits -> (train, validation, test) images per task of ``--task-sizes capped``: the
harness's ``fashion10`` and ``fashion50`` caps (``benchmarks/methods.py``)."""


def parse_args(argv=None):
    parser = _common.argument_parser(
        __doc__, data_root="/usr/share/datasets/fashion-mnist",
        capped=f"--n-splits 2: {_common.sizes(CAPPED_SIZES[2])}; 10: {_common.sizes(CAPPED_SIZES[10])}",
        data_help="folder with the four Fashion-MNIST idx files (Debian package dataset-fashion-mnist, the "
        "default) or a torchvision root (DIR/FashionMNIST/raw)")
    parser.add_argument("--n-splits", type=int, default=2, choices=(2, 10),
                        help="splits per group of 2 classes: 2 gives 10 tasks (default), 10 gives 50 tasks")
    parser.add_argument("--generator", default=None, choices=("independent", "eft"),
                        help="independent: a VAE per entry (EFT for E; the paper method's); eft: EFT adapters on a "
                        "base VAE pretrained on the warm-start tasks (EFT for E and G); only for rules that read "
                        "generators")
    return _common.parse(parser, argv)


def main(args) -> dict:
    import dataclasses
    import time

    import torch
    from avalanche.evaluation.metrics import accuracy_metrics
    from avalanche.training import EWC, Replay
    from avalanche.training.plugins import EvaluationPlugin

    from avalanche_sdr import SDRStrategy, pretrain_backbone, small_cnn_backbone
    from avalanche_sdr.baselines import make_multi_head_net, replay_mem_size
    from avalanche_sdr.benchmarks import MixedFashionMNIST
    from avalanche_sdr.evaluation import BYTES_PER_MB, repository_memory_bytes, sdr_evaluation_plugin
    from avalanche_sdr.models import ConvVAE
    from avalanche_sdr.training import pretrain_vae
    from avalanche_sdr.training.stream_runner import final_test_accuracies, preserved_rng, run_sdr_stream

    # Threads, seed_everything(--seed), --checkpoint-dir, the printed tables, --output.
    with _common.Run(args, {"stream": f"MixedFashionMNIST(n_splits={args.n_splits})"}) as run:
        # 1. The benchmark: 5 x --n-splits tasks of 2 classes; a task of a group seen before
        #    repeats its classes on other images. The first 3 are dissimilar warm-start tasks.
        benchmark = run.benchmark(MixedFashionMNIST(args.data_root, n_splits=args.n_splits, seed=args.seed,
                                                    download=args.download,
                                                    **_common.task_sizes(args, CAPPED_SIZES[args.n_splits])))
        warm_start = benchmark.train_stream[:benchmark.n_warm_start]

        # 2. E0, frozen from here on: the given weights, or a small CNN pretrained on the
        #    warm-start tasks' training data only (docs/method.rst, "E0 without ImageNet weights").
        #    --generator eft: a base ConvVAE pretrained on their images, shared by every entry.
        backbone = _common.given_backbone(args, in_channels=1)
        pretrain = backbone is None
        if pretrain:
            backbone = small_cnn_backbone(in_channels=1, widths=(32, 64, 128))
        pretrained = {"backbone": backbone}
        if args.generator == "eft":
            pretrained["base_vae"] = ConvVAE(1, 28, latent_dim=16, width=32)
        if not run.resumed(pretrained):  # --checkpoint-dir of an interrupted run: E0 (and the VAE) loaded
            if pretrain:
                # every warm-start image, as the committed results (the library holds half out by default)
                pretrain_backbone(backbone, warm_start, epochs=args.pretrain_epochs, lr=2e-3, batch_size=32,
                                  device=args.device, holdout=None)
            if "base_vae" in pretrained:
                pretrain_vae(pretrained["base_vae"], warm_start, epochs=10, lr=2e-3, device=args.device)
            run.pretrained(pretrained)
        # --generator: the generators' kind instead of the rule's (eft: adapters on that base VAE)
        generator = {"generator": args.generator, "base_vae": pretrained.get("base_vae")} if args.generator else {}

        # 3. SDR: before training on a task, test whether it repeats an earlier one; reuse
        #    that entry, or grow a new one (EFT adapters on E0, a=8, b=16). SDR adapts and
        #    freezes its own copy of E0, so the baselines below start from the same weights.
        strategy = SDRStrategy.from_benchmark(
            backbone, benchmark,
            method=args.method,  # "paper" (agreement rule, a VAE per entry, head-only reuse) or "recommended"
            settings=args.preset,  # the training budget by name: "cpu", "cpu_large_task" or "paper"
            detector=_common.detector(args, elbo_samples=8),  # --detector, else the method's (8 ELBO samples)
            **_common.settings_keywords(args),  # --reuse, --new-task-epochs, --vae-epochs when given
            latent_dim=16, vae_width=32,  # each entry's ConvVAE for 1x28x28 images (methods with generators)
            **generator,
            # Avalanche's progress bars on a terminal, plain lines when piped.
            evaluator=run.closing(sdr_evaluation_plugin(log_dir=args.log_dir, interactive="auto")),
            device=args.device, checkpoint_dir=args.checkpoint_dir)
        run.legend(strategy, benchmark)
        with preserved_rng():  # every method starts from the RNG state after E0, as in the harness
            start, timings = time.perf_counter(), {}
            # Train on every task in order (detection first), evaluate the task's group
            # after it and every task at the end: decisions, accuracies, memory.
            results = run_sdr_stream(strategy, benchmark, config=run.sdr_config(strategy), seed=args.seed,
                                     log=print, timings=timings)
            results.update(wall_seconds=time.perf_counter() - start,
                           evaluation_seconds=timings["evaluation_seconds"])

        # 4. Avalanche's own online EWC and Replay (--compare), each on a trainable copy of
        #    the same E0 with a head per task, trained with Adam; memory counted as for SDR.
        budget = _common.baseline_budget(args)
        settings = dataclasses.asdict(budget)
        baselines = {}
        compared = {"ewc": "Online EWC", "replay": "ER"} if args.compare else {}
        for name, label in compared.items():
            baselines[name] = run.finished_baseline(name, settings)  # kept in --checkpoint-dir, or None
            if baselines[name] is not None:
                continue
            with preserved_rng(), _common.replay_warning_hidden():
                start = time.perf_counter()
                net = make_multi_head_net(backbone)  # a trainable copy of E0 + Avalanche's MultiHeadClassifier
                training = dict(model=net, optimizer=torch.optim.Adam(net.parameters(), lr=budget.lr),
                                criterion=torch.nn.CrossEntropyLoss(), train_mb_size=budget.train_mb_size,
                                train_epochs=budget.epochs, eval_mb_size=budget.eval_batch_size(args.device), device=args.device,
                                evaluator=EvaluationPlugin(accuracy_metrics(experience=True), loggers=[]))
                if name == "ewc":
                    baseline = EWC(**training, ewc_lambda=budget.ewc_lambda, mode="online",
                                   decay_factor=budget.ewc_decay)
                else:  # an experience-balanced buffer: 10 images per (task, class) of the stream at the end
                    baseline = Replay(**training, mem_size=replay_mem_size(benchmark.train_stream,
                                                                           budget.replay_per_class))
                for experience in benchmark.train_stream:
                    baseline.train(experience, eval_streams=[])
                accuracies = final_test_accuracies(baseline, benchmark.test_stream)
            baselines[name] = {"label": label, "average_accuracy": sum(accuracies) / len(accuracies),
                               "task_accuracies": accuracies, "settings": settings,
                               "memory_mb": repository_memory_bytes(baseline) / BYTES_PER_MB,
                               "wall_seconds": time.perf_counter() - start}
            run.baseline_done(name, baselines[name])
        return run.finish(results, baselines)


if __name__ == "__main__":
    _common.run_example(main, parse_args)
