"""Best-of-rounds CPU milliseconds of a call, shared by the evidence scripts beside it."""
import time


def best_cpu_ms(f, n, rounds):
    """Run ``f`` ``n`` times per round for ``rounds`` rounds; return (the lowest mean CPU ms
    per call over the rounds, the last result)."""
    best = float("inf")
    for _ in range(rounds):
        start = time.process_time()
        for _ in range(n):
            result = f()
        best = min(best, (time.process_time() - start) / n)
    return best * 1e3, result
