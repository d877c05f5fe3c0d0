"""The studies behind docs/results/: one module, or one package of a few modules, per
results page (the layout: :mod:`benchmarks`). A study may use the Table 2 engine
(:mod:`benchmarks.table2`); the engine never imports a study. This package imports none
of its modules.
"""

__all__: list = []
