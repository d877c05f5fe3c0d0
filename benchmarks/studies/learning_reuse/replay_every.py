"""The guard's replay on one update mini-batch in k: what it saves and what it costs.

Issue #45, item 3 ("the guard's replay is 44 % of an update step: one replay per epoch
instead of every step"). ``LearningReuse(replay_every=k)`` adds the replay's loss to one
update mini-batch in k instead of every one. The candidates (:data:`CANDIDATES`), the
validation streams and seeds and the rule are those of the top-layers study
(:mod:`benchmarks.studies.learning_reuse.top_layers`: ``VALIDATION``, ``choose``), fixed
before any run; docs/results/learning_reuse/replay_every.md states them in words and gives
the outcome.

``run``: one stream and seed, the rows asked for, in one process, through the Table 2
harness's engine with CPU seconds per run; ``table``: every run under the folders given, as
a Markdown table, and the rule's choice where the validation runs are all there.

    python -m benchmarks.studies.learning_reuse.replay_every run --stream fashion10 --seed 10 --out OUT --threads 1
    python -m benchmarks.studies.learning_reuse.replay_every table OUT...
"""
from __future__ import annotations

import argparse
from typing import Dict, Optional, Sequence

from avalanche_sdr import cli
from benchmarks.studies.learning_reuse import top_layers

CANDIDATES: Dict[str, Dict[str, str]] = {
    "replay4": {"update_replay_every": "4"},
    "replay16": {"update_replay_every": "16"},
}
"""The candidate updates (harness update flags and their words), beside ``head`` and
``accumulate`` (the learning reuse's defaults: the replay joins every mini-batch). With the
CPU preset's mini-batch of 32, ``replay16`` replays about once an epoch on a task of 500
images."""


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    return top_layers.parse_args(argv, doc=__doc__, candidates=CANDIDATES)


def main(args: argparse.Namespace) -> None:
    top_layers.main(args, CANDIDATES)


if __name__ == "__main__":
    cli.run_cli(main, parse_args)
