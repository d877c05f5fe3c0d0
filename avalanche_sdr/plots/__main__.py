"""Command line: write every figure of an SDR run as PNG files.

Example::

    python -m avalanche_sdr.plots results/quickstart.json --out results/figures --task 3

A missing results file or an unusable ``--out`` is refused before anything is read
(exit code 2); a results file in the wrong format prints one message (exit code 1;
``--debug`` shows the traceback).
"""

from __future__ import annotations

import argparse
from typing import List, Optional

from avalanche_sdr import cli

if __name__ == "__main__":
    cli.install_warning_filters()


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``python -m avalanche_sdr.plots``."""
    parser = argparse.ArgumentParser(
        prog="python -m avalanche_sdr.plots",
        description="Plot S(j,t) and p(P_t=P_j) heatmaps, a per-task detection panel "
        "(paper Fig. 3), repository memory and per-task accuracy from a results JSON.",
    )
    parser.add_argument("results", type=cli.existing_file,
                        help="results JSON written by an SDR run (e.g. examples/quickstart.py --output)")
    parser.add_argument("--out", type=cli.output_dir, required=True, metavar="DIR",
                        help="output folder for the PNG files (created if missing)")
    parser.add_argument(
        "--task",
        default=None,
        help="task for the detection panel: its id, e.g. 3 or 'task 3' (0-based, as in the printed results "
        "table; default: the first reused task)",
    )
    parser.add_argument("--dpi", type=cli.positive_int, default=150, help="PNG resolution (default 150)")
    cli.add_debug_argument(parser)
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    """Run the command line; returns the exit status (0 on success).

    :raises ResultsFormatError: a results file in the wrong format (the command
        line reports it through :func:`avalanche_sdr.cli.run_cli`).
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    # matplotlib after the arguments are checked: --help and usage errors are immediate.
    from avalanche_sdr.plots.figures import make_all_plots

    paths = make_all_plots(args.results, args.out, task=args.task, dpi=args.dpi)
    for path in paths:
        print(path)
    return 0


if __name__ == "__main__":
    cli.run_cli(main)
