"""docs/results/where_the_time_goes.md: what a run's seconds are spent on, and the costs
of the commands themselves.

- :mod:`~benchmarks.studies.where_the_time_goes.cost`: one run's time split by phase.
- :mod:`~benchmarks.studies.where_the_time_goes.router_fit`: the task-free routers' fitting
  time against the number of entries (``synthetic_repository``, used by the probes below).
- :mod:`~benchmarks.studies.where_the_time_goes.detection_speed`: the complexity measure's time.
- :mod:`~benchmarks.studies.where_the_time_goes.cli_startup`: every command's ``--help``
  time and memory; ``time_test_command.sh``: the test command's wall time.
- Probes of single questions, each printing what it measured: ``batch_models``,
  ``batch_equal_64``, ``batch_time`` (forward time and bit-identity against the batch
  size), ``page_faults``, ``entry_forward_ops``, ``model_channels_last``,
  ``pointwise_channels_last``, ``train_step_cpu`` (where an entry's forward and training
  step spend their time), ``router_fit_split``, ``router_fit_identity`` (the LDA router's
  fit), ``per_task_cpu``, ``cpu_runs`` (CPU seconds of harness runs), ``compare_runs``
  (two run files field by field); ``cpu_timing``, their best-of-rounds CPU clock.
"""

__all__: list = []
