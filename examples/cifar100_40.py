"""SDR on the paper's 40-task CIFAR-100 stream, beside Avalanche's EWC and Replay (paper Tables 2-4).

The script reads top to bottom: the benchmark (``MixedCIFAR100``), E0 (the frozen backbone
every entry adapts), the ``SDRStrategy`` (``--method paper`` or ``recommended``, on the
training budget ``--preset``), Avalanche's own ``EWC`` and ``Replay`` on copies of the
same E0 (``--compare``), and the loop that trains and evaluates them. ``_common.py``
holds the plumbing only (command line, ``--checkpoint-dir``, printed tables, results JSON).

20 CIFAR-100 superclasses of 5 fine classes (Table 4) x 2 splits = 40 tasks of 3x32x32
images (1125 / 125 / 250 train/validation/test per task), the first 3 dissimilar
warm-start tasks. Reads ``DATA_ROOT/cifar-100-python`` (torchvision layout;
``--download`` fetches it). E0: ``--resnet18-weights FILE`` (e.g. the paper's ImageNet
weights) or, by default, a small CNN pretrained on the warm-start tasks; no CIFAR-10
ResNet either (CIFAR-10's and CIFAR-100's images and several classes overlap).

The harness has no CIFAR-100 stream, so no results page either: ``--preset paper`` on a
GPU is the paper's configuration.

    python examples/cifar100_40.py --data-root data --download --preset paper \\
        --device cuda --compare --output results/cifar100/results.json
"""
import _common  # first: the command line's warning filters, before Avalanche is imported

def parse_args(argv=None):
    parser = _common.argument_parser(
        __doc__, data_root="data", capped=None, cifar_resnet=False,
        data_help="folder holding cifar-100-python/ (torchvision layout; default: data)")
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
    from avalanche_sdr.benchmarks import MixedCIFAR100
    from avalanche_sdr.evaluation import BYTES_PER_MB, repository_memory_bytes, sdr_evaluation_plugin
    from avalanche_sdr.training.stream_runner import final_test_accuracies, preserved_rng, run_sdr_stream

    # Threads, seed_everything(--seed), --checkpoint-dir, the printed tables, --output.
    with _common.Run(args, {"stream": "MixedCIFAR100"}) as run:
        # 1. The benchmark: 40 tasks; a task of a group seen before repeats its classes
        #    on other images. The first 3 are dissimilar warm-start tasks.
        benchmark = run.benchmark(MixedCIFAR100(args.data_root, seed=args.seed, download=args.download))
        warm_start = benchmark.train_stream[:benchmark.n_warm_start]

        # 2. E0, frozen from here on: the given weights, or a small CNN pretrained on the
        #    warm-start tasks' training data only (docs/method.rst, "E0 without ImageNet weights").
        backbone = _common.given_backbone(args, in_channels=3)
        pretrain = backbone is None
        if pretrain:
            backbone = small_cnn_backbone(in_channels=3, widths=(32, 64, 128))
        if not run.resumed({"backbone": backbone}):  # --checkpoint-dir of an interrupted run: E0 loaded
            if pretrain:
                # every warm-start image, as the committed results (the library holds half out by default)
                pretrain_backbone(backbone, warm_start, epochs=args.pretrain_epochs, lr=2e-3, batch_size=32,
                                  device=args.device, holdout=None)
            run.pretrained({"backbone": backbone})

        # 3. SDR: before training on a task, test whether it repeats an earlier one; reuse
        #    that entry, or grow a new one (EFT adapters on E0, a=8, b=16). SDR adapts and
        #    freezes its own copy of E0, so the baselines below start from the same weights.
        strategy = SDRStrategy.from_benchmark(
            backbone, benchmark,
            method=args.method,  # "paper" (agreement rule, a VAE per entry, head-only reuse) or "recommended"
            settings=args.preset,  # the training budget by name: "cpu", "cpu_large_task" or "paper"
            detector=_common.detector(args, elbo_samples=8),  # --detector, else the method's (8 ELBO samples)
            **_common.settings_keywords(args),  # --reuse, --new-task-epochs, --vae-epochs when given
            latent_dim=32, vae_width=32,  # each entry's ConvVAE for 3x32x32 images (methods with generators)
            evaluator=run.closing(sdr_evaluation_plugin(log_dir=args.log_dir, interactive=False)),
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
