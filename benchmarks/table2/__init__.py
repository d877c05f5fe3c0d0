"""The Table 2 harness's engine, behind the command line ``python -m benchmarks.table2``.

- :mod:`benchmarks.harness.specs`: what a run is and what its files are called (no torch).
- :mod:`benchmarks.harness.engine`: E0 and one run, executed and measured.
- :mod:`benchmarks.harness.executors`: runs in a process pool, on Ray or inline; run files.
- :mod:`benchmarks.harness.rows`: ``--equal-memory``'s ER rows, sized after the first
  phase (the call's other rows: :mod:`benchmarks.variants`).
- :mod:`benchmarks.harness.tuning_runs`: ``--tune``'s runs and choices
  (the grids and the search: :mod:`benchmarks.tuning`).
- :mod:`benchmarks.harness.report`: ``table2.md``, ``runs.csv``, ``runs.json``, figures.

This package imports none of its modules: the command line answers ``--help`` before
torch is imported. What is measured and written: docs/reproducing.rst.
"""

__all__: list = []
