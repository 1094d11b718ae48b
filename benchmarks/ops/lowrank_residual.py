"""Benchmark of the fused low-rank residual op (the error-feedback update of
PowerSGD / ACP-SGD, E = M - P Q^T in one pass over M) against the TF-native
composition `m - tf.matmul(p, q, transpose_b=True)` and against one streaming
read of m (`reduce_max`, the memory limit). The compress step itself is
benchmarks/ops/lowrank.py's.

    .venv/bin/python -m benchmarks.ops.lowrank_residual

Writes benchmarks/results/lowrank_residual_bench.{json,md}. The three
implementations are timed in turns within each run, so that load from other
processes hits them alike; each figure is the median over the runs.
"""
import os
import statistics
import time

import numpy as np
import tensorflow as tf
from absl import app, flags

from benchmarks.harness import record, timing
from tfcomp import ops

FLAGS = flags.FLAGS
flags.DEFINE_list("sizes", ["256", "1024", "2048", "4096"], "Sides of the square matrix m.")
flags.DEFINE_list("ranks", ["1", "4", "16", "32"], "Ranks r of p [n, r] and q [k, r].")
flags.DEFINE_integer("runs", 9, "Timed runs per figure; the median is reported (at least 9).")
flags.DEFINE_integer("threads", 1, "Intra-op threads.")
flags.DEFINE_enum("dtype", "float32", ["float16", "bfloat16", "float32", "float64"], "Element type.")
flags.DEFINE_string("out_dir", "benchmarks/results", "Where the JSON and markdown go.")
flags.DEFINE_string("name", "lowrank_residual_bench", "Base name of the result files.")


def native_residual(m, p, q):
    return m - tf.matmul(p, q, transpose_b=True)


def stream_read(m):
    return tf.reduce_max(m)


f_fused = tf.function(ops.lowrank_residual)
f_native = tf.function(native_residual)
f_stream = tf.function(stream_read)


def interleaved_median_ms(fns, runs, min_seconds=0.02):
    """{name: median ms of fn()} over `runs` runs; every run times each fn in turn.

    A run repeats a fn enough times to last about min_seconds (as timing.median_ms does).
    """
    repeats = {}
    for name, fn in fns.items():
        fn()  # warm-up: tracing, first allocation
        start = time.perf_counter()
        fn()
        repeats[name] = max(1, int(min_seconds / max(time.perf_counter() - start, 1e-7)))
    samples = {name: [] for name in fns}
    for _ in range(runs):
        for name, fn in fns.items():
            start = time.perf_counter()
            for _ in range(repeats[name]):
                fn()
            samples[name].append((time.perf_counter() - start) / repeats[name] * 1e3)
    return {name: statistics.median(times) for name, times in samples.items()}


def markdown_table(rows, meta):
    lines = [
        f"# Low-rank residual m - p q^T ({meta['dtype']}, {meta['threads']} intra-op thread(s), "
        f"median of {meta['runs']} runs)",
        "",
        f"Command: `{meta['command']}`",
        f"Machine: {meta['machine']['cpu']}, {meta['machine']['cpus']} cores; "
        f"TensorFlow {meta['machine']['tensorflow']}; {meta['machine']['date']}; "
        f"load average {meta['load_before']} before, {meta['load_after']} after (other jobs shared "
        "the machine; the three columns were timed in turns, so their ratios hold better than "
        "their absolute values).",
        "`fused` is tfcomp's TfcompLowRankResidual (one pass over m); `TF-native` is "
        "`m - tf.matmul(p, q, transpose_b=True)`; `stream` is one read of m (`reduce_max`), "
        "the memory limit. m is n x n, p and q are n x r. Each figure is one tf.function call, "
        "its fixed cost included (about 0.3 ms here: the whole of `stream` at 256^2).",
        "",
        "| m | r | fused ms | TF-native ms | stream ms | fused / stream | TF-native / fused |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['n']}^2 | {r['rank']} | {r['fused_ms']:.4g} | {r['tf_native_ms']:.4g} | "
            f"{r['stream_ms']:.4g} | {r['fused_ms'] / r['stream_ms']:.2f} | "
            f"{r['tf_native_ms'] / r['fused_ms']:.2f} |")
    return "\n".join(lines) + "\n"


def load_average():
    return " / ".join(f"{x:.2f}" for x in os.getloadavg())


def main(argv):
    del argv
    if FLAGS.runs < 9:
        raise app.UsageError("--runs must be at least 9")
    timing.pin_threads(FLAGS.threads)
    dtype = tf.as_dtype(FLAGS.dtype)
    rng = np.random.default_rng(0)
    load_before = load_average()
    rows = []
    for n in map(int, FLAGS.sizes):
        m = tf.constant(rng.standard_normal((n, n), dtype=np.float32), dtype=dtype)
        for rank in map(int, FLAGS.ranks):
            p = tf.constant(rng.standard_normal((n, rank), dtype=np.float32), dtype=dtype)
            q = tf.constant(rng.standard_normal((n, rank), dtype=np.float32), dtype=dtype)
            fused, native = f_fused(m, p, q), f_native(m, p, q)
            diff = float(tf.reduce_max(tf.abs(tf.cast(fused, tf.float64) - tf.cast(native, tf.float64))))
            times = interleaved_median_ms({"fused": lambda: f_fused(m, p, q),
                                           "tf_native": lambda: f_native(m, p, q),
                                           "stream": lambda: f_stream(m)}, FLAGS.runs)
            row = {"n": n, "rank": rank, "max_abs_diff_vs_native": diff,
                   **{f"{name}_ms": ms for name, ms in times.items()}}
            rows.append(row)
            print(f"{n:5d}^2 r={rank:<3d} fused {row['fused_ms']:9.4f} ms  "
                  f"tf-native {row['tf_native_ms']:9.4f} ms  stream {row['stream_ms']:9.4f} ms  "
                  f"native/fused {row['tf_native_ms'] / row['fused_ms']:5.2f}", flush=True)
    meta = {"command": record.command_line("benchmarks.ops.lowrank_residual"),
            "machine": record.machine(), "dtype": FLAGS.dtype, "threads": FLAGS.threads,
            "runs": FLAGS.runs, "load_before": load_before, "load_after": load_average()}
    paths = record.write_results(FLAGS.out_dir, FLAGS.name, {**meta, "rows": rows},
                                  markdown_table(rows, meta))
    print("wrote", *paths)


if __name__ == "__main__":
    app.run(main)
