"""docs/results/learning_reuse.md: the learning reuse.

- :mod:`benchmarks.studies.learning_reuse.balance`: class-balanced updates of a reused entry.
- :mod:`benchmarks.studies.learning_reuse.errors`: the learning reuse under injected
  detection errors.
"""

__all__: list = []
