"""Top-level reproduction harnesses (not part of the installed package), laid out by job.

- :mod:`benchmarks.table2`: the paper's Table 2 against Avalanche's strategies, run as
  ``python -m benchmarks.table2``; the package holds the command
  (:mod:`~benchmarks.table2.command`) and the engine every run goes through: the names the
  parsers offer (:mod:`~benchmarks.table2.catalogue`), the rows and their variants
  (:mod:`~benchmarks.table2.variants`), the streams, budgets and row builders
  (:mod:`~benchmarks.table2.methods`), the baselines' tuning grids
  (:mod:`~benchmarks.table2.tuning`), what a run is (:mod:`~benchmarks.table2.specs`), one
  run executed and measured (:mod:`~benchmarks.table2.engine`), where runs execute
  (:mod:`~benchmarks.table2.executors`), the ``--equal-memory`` and ``--tune`` phases
  (:mod:`~benchmarks.table2.equal_memory`, :mod:`~benchmarks.table2.tuning_runs`) and the
  report (:mod:`~benchmarks.table2.report`). Its device check,
  ``python -m benchmarks.table2.gpu_check``, runs through the same engine.
- :mod:`benchmarks.studies`: the studies behind docs/results/, one module or package per
  results page (``detection``, ``calibrated``, ``small_tasks``, ``shuffled_labels``,
  ``learning_reuse``, ``task_free``, ``where_the_time_goes``), each run as
  ``python -m benchmarks.studies.<page>[.<module>]``. A study may use the engine; the
  engine never imports a study (tests/test_source_tree.py checks the layers).
- :mod:`benchmarks.stream_designs`: random stream designs drawn from a written distribution,
  the validation the recommended method is judged on (docs/results/stream_designs.md),
  ``python -m benchmarks.stream_designs``; a layer of the studies.
"""

__all__: list = []
