"""The Table 2 harness's engine, behind the command line ``python -m benchmarks.table2``.

- :mod:`benchmarks.table2.specs`: what a run is and what its files are called (no torch).
- :mod:`benchmarks.table2.engine`: E0 and one run, executed and measured.
- :mod:`benchmarks.table2.executors`: runs in a process pool, on Ray or inline; run files.
- :mod:`benchmarks.table2.equal_memory`: ``--equal-memory``'s ER rows, sized after the first
  phase (the call's other rows: :mod:`benchmarks.table2.variants`).
- :mod:`benchmarks.table2.tuning_runs`: ``--tune``'s runs and choices
  (the grids and the search: :mod:`benchmarks.table2.tuning`).
- :mod:`benchmarks.table2.report`: ``table2.md``, ``runs.csv``, ``runs.json``, figures.

This package imports none of its modules: the command line answers ``--help`` before
torch is imported. What is measured and written: docs/reproducing.rst.
"""

__all__: list = []
