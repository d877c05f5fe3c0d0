"""Best-of-rounds CPU milliseconds of a call, shared by the probes beside it
(:mod:`~benchmarks.studies.where_the_time_goes.model_channels_last`,
:mod:`~benchmarks.studies.where_the_time_goes.pointwise_channels_last`,
:mod:`~benchmarks.studies.where_the_time_goes.train_step_cpu`)."""
import time
from typing import Any, Callable, Tuple


def best_cpu_ms(f: Callable[[], Any], n: int, rounds: int) -> Tuple[float, Any]:
    """Run ``f`` ``n`` times per round for ``rounds`` rounds; return (the lowest mean CPU ms
    per call over the rounds, the last result). CPU time of this process
    (``time.process_time``), so the figure does not count the time another process holds
    the core.

    :raises ValueError: ``n`` or ``rounds`` below 1.
    """
    if n < 1 or rounds < 1:
        raise ValueError(f"n and rounds must be at least 1, got n={n}, rounds={rounds}")
    best = float("inf")
    for _ in range(rounds):
        start = time.process_time()
        for _ in range(n):
            result = f()
        best = min(best, (time.process_time() - start) / n)
    return best * 1e3, result


__all__ = ["best_cpu_ms"]
