"""docs/results/detection.md: detection without training and the detection table.

- :mod:`benchmarks.studies.detection.sim`: replay a stream's detection decisions without
  training (``simulate``, also used by the small-task, shuffled-label and level studies).
- :mod:`benchmarks.studies.detection.table`: the detection table from harness runs.
- :mod:`benchmarks.studies.detection.level_calibration`: the two-sample test's level on
  validation streams.
"""

__all__: list = []
