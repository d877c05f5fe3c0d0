"""docs/results/calibrated.md: the calibrated decision rule.

- :mod:`benchmarks.studies.calibrated.errors`: the detection errors of harness runs.
- :mod:`benchmarks.studies.calibrated.thresholds`: the rule's thresholds chosen offline.
- :mod:`benchmarks.studies.calibrated.table`: the calibrated rows' table.
"""

__all__: list = []
