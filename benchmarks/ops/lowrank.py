"""Benchmark of the low-rank compressors' compress step, side by side with the
TF-native composition of the same computation and one bare matmul, plus the
bytes each sends per step.

    .venv/bin/python -m benchmarks.ops.lowrank

The compress step is what a worker computes before its collective: PowerSGD
P = M Q, P orthonormalised, Q = M^T P (its two rounds); ACP-SGD Q
orthonormalised, P = M Q. Error feedback is off here (its update,
E = M - P Q^T, is a pass of its own, measured for the fused op by
benchmarks.ops.lowrank_residual). Writes benchmarks/results/lowrank_bench.{json,md}.
"""
import numpy as np
import tensorflow as tf
from absl import app, flags

import tfcomp
from benchmarks.harness import record, timing
from tfcomp.compressors.base import TensorContext
from tfcomp.compressors.lowrank import orthonormalize
from tfcomp.state.variables import CompressionState

FLAGS = flags.FLAGS
flags.DEFINE_list("sizes", ["256", "1024", "2048", "4096"], "Square matrix sizes.")
flags.DEFINE_list("ranks", ["1", "4", "16", "32"], "Ranks.")
flags.DEFINE_integer("runs", 9, "Timed runs per figure; the median is reported (at least 7).")
flags.DEFINE_integer("threads", 1, "Intra-op threads.")
flags.DEFINE_string("out_dir", "benchmarks/results", "Where the JSON and markdown go.")
flags.DEFINE_string("name", "lowrank_bench", "Base name of the result files.")


def compress_step(compressor, m):
    """A tf.function running the compressor up to the payload of its last round (one worker)."""
    state = CompressionState(name="bench")
    variables = state.tensor_state("m", compressor.state_specs(m.shape, m.dtype))
    ctx = TensorContext("m", 1, tf.constant(0, tf.int64))

    @tf.function
    def step(m):
        rnd = compressor.compress(m, variables, ctx)
        if isinstance(compressor, tfcomp.PowerSGD):
            rnd = rnd.finish([rnd.payloads[0].tensor])  # the P round; returns the Q round
        return rnd.payloads[0].tensor

    return step


def natives(rank):
    @tf.function
    def powersgd(m, q):
        p = orthonormalize(tf.matmul(m, q))
        return tf.matmul(m, p, transpose_a=True)

    @tf.function
    def acpsgd(m, q):
        return tf.matmul(m, orthonormalize(q))

    @tf.function
    def matmul(m, q):
        return tf.matmul(m, q)

    return powersgd, acpsgd, matmul


def main(argv):
    del argv
    if FLAGS.runs < 7:
        raise app.UsageError("--runs must be at least 7")
    timing.pin_threads(FLAGS.threads)
    rng = np.random.default_rng(0)
    rows = []
    for size in map(int, FLAGS.sizes):
        m = tf.constant(rng.standard_normal((size, size), dtype=np.float32))
        for rank in map(int, FLAGS.ranks):
            q = tf.constant(rng.standard_normal((size, rank), dtype=np.float32))
            power = tfcomp.PowerSGD(rank, use_error_feedback=False)
            acp = tfcomp.ACPSGD(rank, use_error_feedback=False)
            ours_power, ours_acp = compress_step(power, m), compress_step(acp, m)
            native_power, native_acp, matmul = natives(rank)
            row = {"size": size, "rank": rank,
                   "powersgd_ms": timing.median_ms(lambda: ours_power(m), FLAGS.runs),
                   "powersgd_native_ms": timing.median_ms(lambda: native_power(m, q), FLAGS.runs),
                   "acpsgd_ms": timing.median_ms(lambda: ours_acp(m), FLAGS.runs),
                   "acpsgd_native_ms": timing.median_ms(lambda: native_acp(m, q), FLAGS.runs),
                   "matmul_ms": timing.median_ms(lambda: matmul(m, q), FLAGS.runs),
                   "dense_bytes": size * size * 4,
                   "powersgd_bytes": power.payload_bytes(m.shape, m.dtype),
                   "acpsgd_bytes": acp.payload_bytes(m.shape, m.dtype)}
            rows.append(row)
            print(f"{size:5d}^2 rank {rank:2d}: PowerSGD {row['powersgd_ms']:8.3f} ms (native "
                  f"{row['powersgd_native_ms']:8.3f})  ACP-SGD {row['acpsgd_ms']:8.3f} (native "
                  f"{row['acpsgd_native_ms']:8.3f})  matmul {row['matmul_ms']:8.3f}", flush=True)
    meta = {"command": record.command_line("benchmarks.ops.lowrank"), "machine": record.machine(),
            "threads": FLAGS.threads, "runs": FLAGS.runs}
    paths = record.write_results(FLAGS.out_dir, FLAGS.name, {**meta, "rows": rows}, markdown(rows, meta))
    print("wrote", *paths)


def markdown(rows, meta):
    m = meta["machine"]
    lines = [f"# Low-rank compress step (float32, {meta['threads']} intra-op thread(s), median of "
             f"{meta['runs']} runs)", "",
             f"Command: `{meta['command']}`",
             f"Machine: {m['cpu']}, {m['cpus']} cores; TensorFlow {m['tensorflow']}; {m['date']}.", "",
             "PowerSGD = tfcomp.PowerSGD up to its Q payload (P = MQ, orthonormalise, Q = M^T P); native = "
             "the same three TF ops bare. ACP-SGD = tfcomp.ACPSGD up to its payload (orthonormalise Q, P = MQ); "
             "native = the two ops bare. matmul = one M @ Q. Error feedback off (see the fused-op benchmark). "
             "Bytes: what one worker sends per step (ACP-SGD: the mean of its P and Q steps).", "",
             "| n = m | rank | PowerSGD ms | native | ratio | ACP-SGD ms | native | ACP / matmul | ACP / PowerSGD "
             "| matmul ms | dense B | PowerSGD B | ACP-SGD B |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r['size']} | {r['rank']} | {r['powersgd_ms']:.3f} | {r['powersgd_native_ms']:.3f} | "
            f"{r['powersgd_ms'] / r['powersgd_native_ms']:.2f} | {r['acpsgd_ms']:.3f} | {r['acpsgd_native_ms']:.3f} | "
            f"{r['acpsgd_ms'] / r['matmul_ms']:.2f} | {r['acpsgd_ms'] / r['powersgd_ms']:.2f} | "
            f"{r['matmul_ms']:.3f} | {r['dense_bytes']:,} | {r['powersgd_bytes']:,} | {r['acpsgd_bytes']:,.0f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    app.run(main)
