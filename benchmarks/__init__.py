"""Top-level reproduction harnesses (not part of the installed package).

- :mod:`benchmarks.table2`: the paper's Table 2 against Avalanche's strategies (the
  command line; its engine, tuning runs and report: :mod:`benchmarks.harness`).
- :mod:`benchmarks.methods`: the methods (rows) it compares; :mod:`benchmarks.catalogue`
  their names, for the parsers; :mod:`benchmarks.tuning` the baselines' tuning grids.
- :mod:`benchmarks.detection_speed`: timing of the complexity measure
  (``python -m benchmarks.detection_speed``).
"""

__all__: list = []
