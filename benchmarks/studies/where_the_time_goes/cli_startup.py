"""Time every command-line entry point's --help and one argument error.

Each entry point (the examples, ``python -m benchmarks.*`` with a parser, ``python -m
avalanche_sdr.plots``) must answer ``--help`` and refuse bad arguments (exit code 2)
before it imports torch, Avalanche, matplotlib, scipy or scikit-learn: targets
:data:`TARGET_SECONDS` of wall time and :data:`TARGET_MB` of peak memory (max RSS) per
command. This script runs each command as a user does, from the repository root, in a
child process, ``--repeats`` times, and prints a table of the median wall seconds and
the largest max RSS (MB, from ``os.wait4`` on that child alone), the targets, the
machine's load average before and after, and the OpenMP / MKL thread settings the
children inherit (the commands import no torch, so they set no torch thread count).

    python -m benchmarks.studies.where_the_time_goes.cli_startup [--repeats 3] [--only quickstart table2]

:data:`ENTRY_POINTS` is also what ``tests/examples/test_cli_startup.py`` checks:
each command leaves none of :data:`HEAVY_MODULES` in ``sys.modules`` (not a timing).
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

from avalanche_sdr import cli

REPO_ROOT = Path(__file__).resolve().parents[3]

TARGET_SECONDS = 1.5
"""Most wall seconds a command may take to print its --help or a usage error."""
TARGET_MB = 150.0
"""Most peak memory (max RSS, MB) a command may use for its --help or a usage error."""

HEAVY_MODULES = ("torch", "avalanche", "matplotlib", "scipy", "sklearn")
"""Top-level packages no command may import before its arguments are checked."""

_MISSING = "/nonexistent/cli_startup"  # a path that does not exist, for the errors below


@dataclass(frozen=True)
class EntryPoint:
    """A command line and the arguments of one of its usage errors (exit code 2).

    :param name: short name (``--only``).
    :param target: ``examples/<name>.py`` (a script, relative to the repository root)
        or a module name (run with ``python -m``).
    :param bad_arguments: arguments argparse refuses.
    """

    name: str
    target: str
    bad_arguments: Tuple[str, ...]

    @property
    def is_script(self) -> bool:
        return self.target.endswith(".py")

    def argv(self, arguments: Sequence[str]) -> List[str]:
        """``python`` and its arguments running the command with ``arguments``."""
        head = [str(REPO_ROOT / self.target)] if self.is_script else ["-m", self.target]
        return [sys.executable, *head, *arguments]


ENTRY_POINTS: Tuple[EntryPoint, ...] = (
    *(EntryPoint(name, f"examples/{name}.py", ("--seed", "-1"))
      for name in ("quickstart", "fashion_mnist", "fashion_mnist_50", "emnist_100", "cifar10_10", "cifar100_40")),
    EntryPoint("table2", "benchmarks.table2", ("--seeds", "-1")),
    EntryPoint("detection_sim", "benchmarks.studies.detection.sim", ("--stream", "digits", "--seeds", "-1")),
    EntryPoint("detection_table", "benchmarks.studies.detection.table", (_MISSING,)),
    EntryPoint("task_free", "benchmarks.studies.task_free.table", ("--runs", _MISSING, "--out", "task_free.md")),
    EntryPoint("calibrate_thresholds", "benchmarks.studies.calibrated.thresholds", ("--top", "x", "results.json")),
    EntryPoint("calibrated_table", "benchmarks.studies.calibrated.table", ()),
    EntryPoint("detection_errors", "benchmarks.studies.calibrated.errors", ()),
    EntryPoint("detection_speed", "benchmarks.studies.where_the_time_goes.detection_speed", ("--sizes", "x")),
    EntryPoint("cli_startup", "benchmarks.studies.where_the_time_goes.cli_startup", ("--repeats", "0")),
    EntryPoint("reuse_errors", "benchmarks.studies.learning_reuse.errors", ("--rates", "2", "--out", "x")),
    EntryPoint("shuffled_labels", "benchmarks.studies.shuffled_labels", ("--seeds", "-1")),
    EntryPoint("router_ablation", "benchmarks.studies.task_free.router_ablation",
               ("--stream", "digits", "--per-class", "5", "--out", "x.md")),
    EntryPoint("gpu_check", "benchmarks.table2.gpu_check", ("--tasks", "0")),
    EntryPoint("plots", "avalanche_sdr.plots", (_MISSING + ".json", "--out", "figures")),
)
"""Every command line of the repository with a parser. ``benchmarks.table2.methods``,
``benchmarks.table2.tuning`` and the modules of ``benchmarks.table2`` have none
(``benchmarks.table2`` runs them)."""


def command_env() -> Dict[str, str]:
    """The environment of the children: this checkout first on ``PYTHONPATH`` (so that
    ``python -m benchmarks.*`` works from anywhere), no ``SDR_DEBUG``."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    env.pop(cli.DEBUG_ENV, None)
    return env


def measure(argv: Sequence[str]) -> Tuple[int, float, float]:
    """Run ``argv`` from the repository root: ``(exit code, wall seconds, max RSS MB)``.

    The output goes to a temporary file (never a pipe that could fill up); the peak
    memory is that of this child alone (``os.wait4``; ``ru_maxrss`` is in KiB on Linux).
    """
    with tempfile.TemporaryFile() as sink:
        start = time.perf_counter()
        proc = subprocess.Popen(list(argv), cwd=REPO_ROOT, env=command_env(), stdout=sink, stderr=sink)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, wall, usage.ru_maxrss / 1024


def _threads_note() -> str:
    names = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
    settings = ", ".join(f"{name}={os.environ.get(name, 'unset')}" for name in names)
    return f"thread settings inherited by the commands: {settings} (the commands import no torch)"


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.studies.where_the_time_goes.cli_startup", description=cli.description(__doc__))
    parser.add_argument("--repeats", type=cli.positive_int, default=3, metavar="N",
                        help="runs of each command (default 3): the median wall time and the largest max RSS")
    parser.add_argument("--only", nargs="+", choices=[e.name for e in ENTRY_POINTS], default=None, metavar="NAME",
                        help="measure these entry points only (default: all of them)")
    return parser.parse_args(argv)


def main(args: argparse.Namespace) -> int:
    """Print the table; return 1 if a command exited with an unexpected code, else 0.
    Going over a target is reported in the table, not as a failure (timings depend on
    the machine and its load)."""
    entries = [e for e in ENTRY_POINTS if args.only is None or e.name in args.only]
    load_before = os.getloadavg()
    print(f"targets: --help and a usage error each under {TARGET_SECONDS} s and {TARGET_MB:.0f} MB (max RSS)")
    print(f"{os.cpu_count()} CPU cores; load average {load_before[0]:.2f} {load_before[1]:.2f} "
          f"{load_before[2]:.2f} (1, 5, 15 min) before; {_threads_note()}")
    print(f"python {sys.version.split()[0]}, {args.repeats} run(s) per command: median wall, largest max RSS\n")
    header = f"{'command':<22} {'case':<6} {'exit':>4} {'wall (s)':>9} {'max RSS (MB)':>13}  within targets"
    print(header)
    print("-" * len(header))
    unexpected = []
    for entry in entries:
        for case, arguments, expected in (("--help", ("--help",), 0), ("error", entry.bad_arguments, 2)):
            runs = [measure(entry.argv(arguments)) for _ in range(args.repeats)]
            codes = {code for code, _, _ in runs}
            wall = statistics.median(w for _, w, _ in runs)
            rss = max(r for _, _, r in runs)
            ok = "yes" if wall <= TARGET_SECONDS and rss <= TARGET_MB else "NO"
            code = codes.pop() if len(codes) == 1 else "?"
            if code != expected:
                unexpected.append(f"{entry.name} {case}: exit {code}, expected {expected}")
            print(f"{entry.name:<22} {case:<6} {code:>4} {wall:>9.2f} {rss:>13.0f}  {ok}", flush=True)
    load_after = os.getloadavg()
    print(f"\nload average {load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f} (1, 5, 15 min) after")
    for line in unexpected:
        print(f"unexpected exit code: {line}", file=sys.stderr)
    return 1 if unexpected else 0


if __name__ == "__main__":
    cli.run_cli(main, parse_args)
