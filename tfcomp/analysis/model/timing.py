"""Timing without TensorFlow (the analysis speed benchmark must not import it)."""
import statistics
import time


def median_s(fn, runs):
    """Median wall time of fn() in seconds over runs, after one warm-up call (which may trace)."""
    fn()
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)
