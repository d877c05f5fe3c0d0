"""Top-level reproduction harnesses (not part of the installed package).

- :mod:`benchmarks.table2`: the paper's Table 2 against Avalanche's strategies (the
  command line; its engine, tuning runs and report: :mod:`benchmarks.table2`).
- :mod:`benchmarks.table2.methods`: the methods (rows) it compares; :mod:`benchmarks.table2.catalogue`
  their names, for the parsers; :mod:`benchmarks.table2.tuning` the baselines' tuning grids.
- :mod:`benchmarks.studies.where_the_time_goes.detection_speed`: timing of the complexity measure
  (``python -m benchmarks.studies.where_the_time_goes.detection_speed``).
"""

__all__: list = []
