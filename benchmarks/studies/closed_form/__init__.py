"""The study behind docs/results/closed_form.md (issue #47): SDR against the closed-form
learners on a frozen E0 (:mod:`avalanche_sdr.closed_form`), and that family as SDR's
task-free router (:mod:`avalanche_sdr.routers.kernel_lda`).

- :mod:`benchmarks.studies.closed_form.router`: the ``"kernel_lda"`` router's settings and its
  comparison with the recommended ``"lda_weighted"``, on validation splits only.
- :mod:`benchmarks.studies.closed_form.table`: the page's tables from harness run folders.

This package imports none of its modules.
"""

__all__: list = []
