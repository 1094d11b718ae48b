"""Every compressor's whole codec against a streaming read of the gradient and against
its memory-traffic floor (benchmarks/codec_bench/floors.py), as a user's step pays
for it: tfcomp.analysis.measure.codec_seconds, encode with error feedback, then decode
and aggregation of K workers' payloads, inside one compiled call.

    python -m benchmarks.codec_bench            # 2^20, 2^24, 2^26 elements; K 2, 8; float32, float16
    python -m benchmarks.codec_bench --sizes=24 --workers=2 --dtypes=float32

Writes benchmarks/results/codec_bench.{json,md,png}. In every cell the streaming read
(a reduction over its bits, timed inside its own compiled call the same way) is measured just
before and just after the codec, so a ratio holds on a shared machine; figures are
medians of --runs calls, and the read's spread is shown. TensorFlow's BFC allocator is on
(TF_CPU_ALLOCATOR_USE_BFC=true, as in the end-to-end workers) unless the environment says otherwise.
"""
import os

# As every benchmark worker runs (tests/cluster/launcher.py): TensorFlow's BFC allocator reuses
# large CPU buffers instead of faulting in fresh pages for every tensor. Set before TensorFlow starts.
os.environ.setdefault("TF_CPU_ALLOCATOR_USE_BFC", "true")

import numpy as np  # pylint: disable=wrong-import-position
import tensorflow as tf  # pylint: disable=wrong-import-position
from absl import app, flags  # pylint: disable=wrong-import-position

from benchmarks.codec_bench.cells import markdown, measure, plot, shape_of, summarize  # pylint: disable=wrong-import-position
from benchmarks.harness import record  # pylint: disable=wrong-import-position

FLAGS = flags.FLAGS
flags.DEFINE_list("compressors", ["FP16", "SignSGD", "EFSignSGD", "TopK", "RandomK", "DGC", "DRAGONN", "PowerSGD",
                                  "ACPSGD", "TopK:ratio=0.01", "DGC:ratio=0.01", "DRAGONN:ratio=0.01"],
                  "Compressor specs: a bare name is the library's default settings (the sparsifiers' "
                  "ratio 0.1, PowerSGD's rank 4, ACPSGD's rank 8), the others aggressive settings.")
flags.DEFINE_list("sizes", ["20", "24", "26"], "log2 of the gradient's element count (a square matrix where "
                  "the exponent is even, else twice as many rows as columns).")
flags.DEFINE_list("workers", ["2", "8"], "Numbers of workers K whose payloads decode aggregates.")
flags.DEFINE_list("dtypes", ["float32", "float16"], "Gradient element types.")
flags.DEFINE_integer("runs", 7, "Timed calls per figure (the median is reported).")
flags.DEFINE_float("target", 8.0, "The ceiling drawn on the plot, in streaming reads.")
flags.DEFINE_string("out_dir", "benchmarks/results", "Where the JSON, markdown and PNG go.")
flags.DEFINE_string("name", "codec_bench", "Base name of the result files.")


def load_average():
    return " / ".join(f"{x:.2f}" for x in os.getloadavg())


def commit():
    import subprocess  # pylint: disable=import-outside-toplevel
    try:
        return subprocess.check_output(["git", "rev-parse", "--short", "HEAD"], text=True).strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main(argv):
    del argv
    if FLAGS.runs < 3:
        raise app.UsageError("--runs must be at least 3")
    load_before = load_average()
    rows = []
    for dtype in map(tf.as_dtype, FLAGS.dtypes):
        for log2 in map(int, FLAGS.sizes):
            shape = shape_of(log2)
            gradient = tf.constant(np.random.default_rng(0).standard_normal(shape).astype(dtype.as_numpy_dtype))
            for k in map(int, FLAGS.workers):
                for spec in FLAGS.compressors:
                    row = measure(spec, shape, dtype, k, FLAGS.runs, gradient)
                    rows.append(row)
                    print(f"{spec:20s} 2^{log2} K={k} {dtype.name:8s} " + (
                        "sent dense" if row["sent_dense"] else
                        f"encode {row['encode_ms']:8.2f} decode {row['decode_ms']:8.2f} read {row['read_ms']:6.2f} ms"
                        f"  {row['codec_over_read']:6.2f}x a read, floor {row['floor_reads']:.2f}"), flush=True)
    meta = {"command": record.command_line("benchmarks.codec_bench"), "commit": commit(),
            "bfc_allocator": os.environ["TF_CPU_ALLOCATOR_USE_BFC"],
            "machine": record.machine(), "runs": FLAGS.runs, "load_before": load_before,
            "load_after": load_average()}
    paths = record.write_results(FLAGS.out_dir, FLAGS.name, {**meta, "rows": rows}, markdown(rows, meta))
    png = os.path.join(FLAGS.out_dir, f"{FLAGS.name}.png")
    plot(rows, png, FLAGS.target)
    print(summarize(rows))
    print("wrote", *paths, png)


if __name__ == "__main__":
    app.run(main)
