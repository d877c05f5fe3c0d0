"""Command line: write every figure of an SDR run as PNG files.

Example::

    python -m avalanche_sdr.plots results/quickstart.json --out results/figures --task T3,2
"""

from __future__ import annotations

import argparse
import sys
from typing import List, Optional

from avalanche_sdr.plots.figures import make_all_plots
from avalanche_sdr.plots.results import ResultsFormatError


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``python -m avalanche_sdr.plots``."""
    parser = argparse.ArgumentParser(
        prog="python -m avalanche_sdr.plots",
        description="Plot S(j,t) and p(P_t=P_j) heatmaps, a per-task detection panel "
        "(paper Fig. 3), repository memory and per-task accuracy from a results JSON.",
    )
    parser.add_argument("results", help="results JSON written by an SDR run")
    parser.add_argument("--out", required=True, help="output folder for the PNG files")
    parser.add_argument(
        "--task",
        default=None,
        help="task for the detection panel: its id or a label like T3,2 "
        "(default: the first reused task)",
    )
    parser.add_argument("--dpi", type=int, default=150, help="PNG resolution (default 150)")
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    """Run the command line; returns the exit status (0 on success)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        paths = make_all_plots(args.results, args.out, task=args.task, dpi=args.dpi)
    except (ResultsFormatError, FileNotFoundError) as err:
        parser.error(str(err))
    for path in paths:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
