"""Timing for tfcomp's benchmarks: medians of repeated calls (each training step's
host time is tests.cluster.step_times.StepTimes, shared with the tests' workers).

Speed is measured here, never asserted in tests. Each figure is the median of
several runs taken side by side in one process, so ratios between them hold on
a shared, noisy machine even when absolute times drift.
"""
import statistics
import time

import tensorflow as tf


def pin_threads(intra_op, inter_op=1):
    """Must run before TensorFlow executes its first op."""
    tf.config.threading.set_intra_op_parallelism_threads(intra_op)
    tf.config.threading.set_inter_op_parallelism_threads(inter_op)


def median_ms(fn, runs, min_seconds=0.02):
    """Median wall time of fn() in ms over `runs` runs, after one warm-up call.

    A run repeats fn enough times to last about min_seconds, so that calls of a
    few microseconds are not lost in the timer's resolution.
    """
    fn()
    start = time.perf_counter()
    fn()
    once = max(time.perf_counter() - start, 1e-7)
    repeat = max(1, int(min_seconds / once))
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        for _ in range(repeat):
            fn()
        samples.append((time.perf_counter() - start) / repeat * 1e3)
    return statistics.median(samples)


def interleaved_median_ms(fns, runs):
    """{name: median ms} of the fns timed in turn, one call each per round, after a
    warm-up call each: drift in the machine's load falls on all of them alike, so
    their ratios are steadier than those of separate median_ms calls."""
    for fn in fns.values():
        fn()
    samples = {name: [] for name in fns}
    for _ in range(runs):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            samples[name].append(time.perf_counter() - start)
    return {name: 1e3 * statistics.median(times) for name, times in samples.items()}
