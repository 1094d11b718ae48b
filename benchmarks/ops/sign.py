"""Benchmark of tfcomp's sign ops (pack, unpack, majority vote) against the TF-native
composition of the same computation and against one streaming read of the input (the
memory limit).

    .venv/bin/python -m benchmarks.ops.sign            # or: make bench (python -m benchmarks.ops)

Writes benchmarks/results/ops_bench.{json,md}.
"""
import numpy as np
import tensorflow as tf
from absl import app, flags

from benchmarks.harness import record, timing
from tfcomp import ops

FLAGS = flags.FLAGS
flags.DEFINE_integer("min_log2", 10, "Smallest size, as a power of two of elements.")
flags.DEFINE_integer("max_log2", 26, "Largest size, as a power of two of elements.")
flags.DEFINE_integer("step_log2", 2, "Step between sizes, in powers of two.")
flags.DEFINE_integer("runs", 9, "Timed runs per figure; the median is reported (at least 7).")
flags.DEFINE_integer("threads", 1, "Intra-op threads.")
flags.DEFINE_integer("workers", 4, "K, the rows that sign_majority votes over.")
flags.DEFINE_enum("dtype", "float32", ["float16", "bfloat16", "float32", "float64"], "Element type.")
flags.DEFINE_string("out_dir", "benchmarks/results", "Where the JSON and markdown go.")
flags.DEFINE_string("name", "ops_bench", "Base name of the result files.")

SHIFTS = np.arange(32, dtype=np.uint32)  # a constant of the traced graphs


def native_pack(x):
    """sign_pack from TF ops: compare, pad to whole words, shift and sum the bits."""
    flat = tf.reshape(x, [-1])
    n = tf.size(flat)
    bits = tf.cast(flat >= 0, tf.uint32)
    bits = tf.pad(bits, [[0, (32 - n % 32) % 32]])
    words = tf.reduce_sum(tf.bitwise.left_shift(tf.reshape(bits, [-1, 32]), SHIFTS), axis=1)
    return words, tf.reduce_mean(tf.abs(flat))


def native_bits(words, n):
    bits = tf.bitwise.bitwise_and(tf.bitwise.right_shift(words[..., None], SHIFTS), 1)
    return tf.reshape(bits, tf.concat([tf.shape(words)[:-1], [-1]], 0))[..., :n]


def native_unpack(words, scale, n):
    return tf.where(native_bits(words, n) > 0, scale, -scale)


def native_majority(words, n):
    k = tf.shape(words)[0]
    positives = tf.reduce_sum(tf.cast(native_bits(words, n), tf.int32), axis=0)
    return tf.cast(tf.sign(2 * positives - k), tf.float32)


def stream_read(x):
    return tf.reduce_max(x)


def cases(x, n, words, scale, stacked):
    """(op, {implementation: zero-argument callable}) for one size."""
    return [
        ("sign_pack", {"tfcomp": lambda: f_pack(x), "tf_native": lambda: f_native_pack(x)}),
        ("sign_unpack", {"tfcomp": lambda: f_unpack(words, scale, n),
                         "tf_native": lambda: f_native_unpack(words, scale, n)}),
        ("sign_majority", {"tfcomp": lambda: f_majority(stacked, n),
                           "tf_native": lambda: f_native_majority(stacked, n)}),
    ]


f_pack = tf.function(ops.sign_pack)
f_unpack = tf.function(ops.sign_unpack)
f_majority = tf.function(ops.sign_majority)
f_native_pack = tf.function(native_pack)
f_native_unpack = tf.function(native_unpack)
f_native_majority = tf.function(native_majority)
f_stream = tf.function(stream_read)


def markdown_table(rows, meta):
    lines = [
        f"# Sign-packing ops ({meta['dtype']}, {meta['threads']} intra-op thread(s), "
        f"median of {meta['runs']} runs)",
        "",
        f"Command: `{meta['command']}`",
        f"Machine: {meta['machine']['cpu']}, {meta['machine']['cpus']} cores; "
        f"TensorFlow {meta['machine']['tensorflow']}; {meta['machine']['date']}.",
        f"sign_majority votes over K = {meta['workers']} rows. `stream` is one read of the "
        "n-element input (`reduce_max`), the memory limit.",
        "",
        "| op | n | tfcomp ms | TF-native ms | stream ms | tfcomp / stream | TF-native / tfcomp |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['op']} | 2^{r['log2']} | {r['tfcomp_ms']:.4g} | {r['tf_native_ms']:.4g} | "
            f"{r['stream_ms']:.4g} | {r['tfcomp_ms'] / r['stream_ms']:.2f} | "
            f"{r['tf_native_ms'] / r['tfcomp_ms']:.1f} |")
    return "\n".join(lines) + "\n"


def main(argv):
    del argv
    if FLAGS.runs < 7:
        raise app.UsageError("--runs must be at least 7")
    timing.pin_threads(FLAGS.threads)
    dtype = tf.as_dtype(FLAGS.dtype)
    rng = np.random.default_rng(0)
    rows = []
    for log2 in range(FLAGS.min_log2, FLAGS.max_log2 + 1, FLAGS.step_log2):
        n = 1 << log2
        x = tf.constant(rng.standard_normal(n, dtype=np.float32), dtype=dtype)
        words, scale = ops.sign_pack(x)
        stacked = tf.stack([words] * FLAGS.workers)
        n_t = tf.constant(n, tf.int64)
        stream_ms = timing.median_ms(lambda: f_stream(x), FLAGS.runs)
        for op, impls in cases(x, n_t, words, scale, stacked):
            row = {"op": op, "n": n, "log2": log2, "stream_ms": stream_ms}
            for impl, fn in impls.items():
                row[f"{impl}_ms"] = timing.median_ms(fn, FLAGS.runs)
            rows.append(row)
            print(f"{op:14s} 2^{log2:<3d} tfcomp {row['tfcomp_ms']:9.4f} ms  "
                  f"tf-native {row['tf_native_ms']:9.4f} ms  stream {stream_ms:9.4f} ms", flush=True)
    meta = {"command": record.command_line("benchmarks.ops.sign"), "machine": record.machine(), "dtype": FLAGS.dtype,
            "threads": FLAGS.threads, "runs": FLAGS.runs, "workers": FLAGS.workers}
    paths = record.write_results(FLAGS.out_dir, FLAGS.name, {**meta, "rows": rows},
                                  markdown_table(rows, meta))
    print("wrote", *paths)


if __name__ == "__main__":
    app.run(main)
