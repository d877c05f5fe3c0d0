"""docs/results/task_free.md: task-free prediction.

- :mod:`benchmarks.studies.task_free.table`: the task-free table from harness runs.
- :mod:`benchmarks.studies.task_free.router_ablation`: the routers compared on one repository.
"""

__all__: list = []
