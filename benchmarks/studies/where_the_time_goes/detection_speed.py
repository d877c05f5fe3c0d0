"""Time the complexity measure S(j, t) against a bare float64 Cholesky factorisation.

For each task size n, builds random ReLU features ``[n, d]`` (the shape of one
encoder's globally pooled features) with ``c`` classes, and times, in this process:

* ``S``: :func:`avalanche_sdr.detection.complexity_measure` on those features (row
  normalisation, kernel Gram matrix, jittered Cholesky, triangular solve, S);
* ``cholesky``: ``torch.linalg.cholesky`` of the same ``n x n`` kernel matrix
  ``H + lambda I``, already built, in float64.

Each timing is the median of ``--repeats`` runs after a warm-up, the two interleaved
so that background load affects both alike. Prints the torch thread count, then one
line per n::

    n=2000 S=0.123s cholesky=0.085s ratio=1.45

(times in seconds; the ratio is computed from the unrounded times). The target is a
ratio of at most 2: computing S should cost little more than the factorisation it
cannot avoid.

Usage, from the repository root (the package installed, e.g. ``pip install -e .``)::

    python -m benchmarks.studies.where_the_time_goes.detection_speed [--sizes 1000 2000 4000] [--dim 512]
"""

from __future__ import annotations

import argparse
import statistics
import time

from avalanche_sdr import cli

# torch and avalanche_sdr.detection are imported by the functions that time, after the
# arguments are parsed (--help and usage errors stay immediate).


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=cli.description(__doc__))
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 2000, 4000],
                        help="task sizes n (rows of the features)")
    parser.add_argument("--dim", type=int, default=512, help="feature dimension d")
    parser.add_argument("--classes", type=int, default=10, help="number of classes c")
    parser.add_argument("--repeats", type=int, default=7,
                        help="timed runs per measurement (the median is reported)")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch intra-op threads (default: torch's own choice)")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def _elapsed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def time_pair(n: int, dim: int, classes: int, repeats: int, seed: int) -> tuple[float, float]:
    """Median seconds of S and of a bare Cholesky of the same n x n matrix."""
    import torch

    from avalanche_sdr.detection.complexity import complexity_measure, relu_ntk_gram

    generator = torch.Generator().manual_seed(seed + n)
    features = torch.relu(torch.randn(n, dim, generator=generator))
    labels = torch.randint(0, classes, (n,), generator=generator)
    details = complexity_measure(features, labels, num_classes=classes, return_details=True)
    matrix = relu_ntk_gram(features)
    matrix.diagonal().add_(details.diagonal_shift)

    def run_s() -> None:
        complexity_measure(features, labels, num_classes=classes)

    def run_cholesky() -> None:
        torch.linalg.cholesky(matrix)

    for _ in range(2):  # warm-up: allocator, BLAS/LAPACK thread pools, caches
        run_s()
        run_cholesky()
    s_times, chol_times = [], []
    for _ in range(repeats):
        s_times.append(_elapsed(run_s))
        chol_times.append(_elapsed(run_cholesky))
    return statistics.median(s_times), statistics.median(chol_times)


def main(args: argparse.Namespace) -> None:
    import torch

    if args.threads is not None:
        torch.set_num_threads(args.threads)
    print(f"torch threads: {torch.get_num_threads()}")
    for n in args.sizes:
        t_s, t_chol = time_pair(n, args.dim, args.classes, args.repeats, args.seed)
        print(f"n={n} S={t_s:.3f}s cholesky={t_chol:.3f}s ratio={t_s / t_chol:.2f}", flush=True)


if __name__ == "__main__":
    main(parse_args())
