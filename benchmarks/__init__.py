"""Top-level reproduction harnesses (not part of the installed package).

- :mod:`benchmarks.table2`: the paper's Table 2 against Avalanche's strategies.
- :mod:`benchmarks.methods`: the methods (rows) it compares.
- :mod:`benchmarks.detection_speed`: timing of the complexity measure
  (``python -m benchmarks.detection_speed``).
"""
