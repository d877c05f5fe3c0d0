"""Generated stream designs: the validation on which SDR's recommended method is judged (issue #45, item 6).

A design is a random stream drawn from a documented distribution, not a replica of a stream the method
was built on. Per seed (:func:`~benchmarks.stream_designs.distribution.draw_design`, no data read):

1. Source: Fashion-MNIST, EMNIST (bymerge, the shared file), scikit-learn's digits and JPEG-re-encoded
   CIFAR-10 in turn (the seed modulo 4).
2. Groups: 3 to 20 distinct class sets of 2 to 5 classes; 30 % of the groups after the first are a strict
   subset or superset of an earlier group.
3. Each group seen 1 to 5 times, at most 40 tasks (lowered where a class's images run short: digits).
4. Order: random, the first 3 tasks (warm start) of distinct groups.
5. Class balance per group: balanced (25 %) or largest / smallest class count uniform in [1.5, 9] (up to
   90/10), flipped at the group's second and fourth occurrence.
6. 10 to 300 training images per class (the task's mean log-uniform), disjoint across tasks; 100 test
   images per class (fewer where the class has fewer).
7. A budget of 8,000 training images a design: late repeats are dropped until it holds (a run then
   takes minutes on one core; the budget was set on validation designs before the report list).
8. Label order permuted at random in every task.

The full distribution, step by step: ``distribution.DISTRIBUTION`` and docs/results/stream_designs.md.
Ground truth: a task repeats group g iff its class set equals g's (label order and balance may differ); a
subset / superset task is a group of its own. Correct / Miss / Incorrect as the library scores them.
Seeds fixed before any run: ``VALIDATION_SEEDS`` (0-29) for every choice, ``REPORT_SEEDS`` (1000-1029)
for the report only (docs/results/stream_designs/designs.md lists them); ``NEXT_REPORT_SEEDS`` (2000-2029)
for the report of a method changed after that one, ``SECOND_VALIDATION_SEEDS`` (30-59) for choices made
after 0-29 were all used, ``THIRD_VALIDATION_SEEDS`` (60-119) and ``THIRD_REPORT_SEEDS`` (3000-3059) for a
choice made after those were used and its report, ``FOURTH_VALIDATION_SEEDS`` (120-219) and
``FOURTH_REPORT_SEEDS`` (4000-4099) for the next, ``FIFTH_VALIDATION_SEEDS`` (220-319) for a choice made after
120-219 were used, reported on 4000-4099 if that range is still unread (each listed beside designs.md before
any run on it).

Modules: :mod:`~benchmarks.stream_designs.distribution` (the draw), :mod:`~benchmarks.stream_designs.builder`
(a design as an Avalanche benchmark), :mod:`~benchmarks.stream_designs.runner` (methods on designs),
:mod:`~benchmarks.stream_designs.report` (the tables); the command line is ``python -m benchmarks.stream_designs``.
"""
__all__: list = []
