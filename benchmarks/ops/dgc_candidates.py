"""What DGC's candidates_per_slot costs in encode time, and how many slots it fills.

    python -m benchmarks.ops.dgc_candidates

DGC's threshold comes from a sample; candidates_per_slot=1 (DGC's paper, and
DRAGONN's threshold) aims to pass as many elements as there are slots, so a
high estimate leaves slots empty, while 2 (tfcomp's default) passes about
twice as many and keeps the largest of them by top_k over the passed ones.
Side by side at each size and ratio, on Gaussian data: DGC.select at
candidates_per_slot 1 and 2, exact top_k of the whole tensor, and one
streaming read (the memory limit). Medians of interleaved runs. Writes
dgc_candidates_bench.{json,md} under --out_dir.
"""
import math

import numpy as np
import tensorflow as tf
from absl import app, flags

from benchmarks.harness import record, timing
from tfcomp.compressors.base import TensorContext
from tfcomp.compressors.sparse import DGC

FLAGS = flags.FLAGS


def define_flags():
    flags.DEFINE_list("sizes_log2", ["16", "18", "20", "22"], "Tensor sizes, as powers of two of elements.")
    flags.DEFINE_list("ratios", ["0.1", "0.01", "0.001"], "Fractions kept.")
    flags.DEFINE_list("candidates", ["1", "2"], "candidates_per_slot values to compare.")
    flags.DEFINE_integer("runs", 9, "Timed runs per figure; the median is reported (at least 7).")
    flags.DEFINE_integer("threads", 1, "Intra-op threads.")
    flags.DEFINE_string("out_dir", "benchmarks/results", "Where the JSON and markdown go.")
    flags.DEFINE_string("name", "dgc_candidates_bench", "Base name of the result files.")


FILL_STEPS = 20


def compressors(ratio, candidates):
    return {f"dgc_c{c:g}": DGC(ratio, candidates_per_slot=c) for c in candidates}


def timed_select(dgc):
    ctx = TensorContext("bench", 1, tf.constant(0, tf.int64))
    return tf.function(lambda x: dgc.select(x, ctx))


def exact_topk(m):
    @tf.function
    def select(x):
        top = tf.math.top_k(tf.abs(x), m, sorted=False).indices
        return tf.gather(x, top), top
    return select


def filled(dgc, x, slots):
    """Mean fraction of the slots sent non-empty over FILL_STEPS steps' threshold samples."""
    counts = [int(tf.math.count_nonzero(dgc.select(x, TensorContext("bench", 1, tf.constant(step, tf.int64)))[1]
                                        >= 0)) for step in range(FILL_STEPS)]
    return sum(counts) / (FILL_STEPS * slots)


@tf.function
def stream_read(x):
    return tf.reduce_max(x)


def measure(rng, candidates):
    rows = []
    for log2 in map(int, FLAGS.sizes_log2):
        n = 1 << log2
        x = tf.constant(rng.standard_normal(n, dtype=np.float32))
        for ratio in map(float, FLAGS.ratios):
            m = max(1, math.ceil(ratio * n))
            dgcs = compressors(ratio, candidates)
            fns = {**{name: timed_select(dgc) for name, dgc in dgcs.items()}, "exact_topk": exact_topk(m),
                   "stream": stream_read}
            medians = timing.interleaved_median_ms({name: (lambda f=f: f(x)) for name, f in fns.items()},
                                                    FLAGS.runs)
            row = {"n": n, "log2": log2, "ratio": ratio, "slots": m,
                   **{f"{name}_ms": ms for name, ms in medians.items()}}
            row.update({f"{name}_filled": filled(dgc, x, m) for name, dgc in dgcs.items()})
            rows.append(row)
            print(f"2^{log2:<3d} ratio {ratio:<6g} " + "  ".join(
                f"{name} {row[name + '_ms']:8.3f} ms" for name in fns), flush=True)
    return rows


def markdown(rows, candidates, meta):
    m = meta["machine"]
    names = [f"dgc_c{c:g}" for c in candidates]
    head = " | ".join(f"c={c:g} ms | c={c:g} filled" for c in candidates)
    lines = [f"# DGC's candidates_per_slot: encode time and slots filled (float32, {meta['threads']} intra-op "
             f"thread(s), median of {meta['runs']} interleaved runs)", "",
             f"Command: `{meta['command']}`",
             f"Machine: {m['cpu']}, {m['cpus']} cores; TensorFlow {m['tensorflow']}; {m['date']}.", "",
             "c = candidates_per_slot of `DGC.select` (sampled threshold, `tf.where` compaction, top_k over the "
             "passed elements when more pass than there are slots); filled = the fraction of slots sent "
             f"non-empty, mean over {FILL_STEPS} steps' samples; exact = `tf.math.top_k` of |x|; stream = one "
             "`reduce_max` over x. Gaussian data.", "",
             f"| n | ratio | {head} | c={candidates[-1]:g} / c={candidates[0]:g} | exact top_k ms | stream ms |",
             "|---|---|" + "---|---|" * len(candidates) + "---|---|---|"]
    for r in rows:
        cells = " | ".join(f"{r[n + '_ms']:.3f} | {r[n + '_filled']:.0%}" for n in names)
        lines.append(f"| 2^{r['log2']} | {r['ratio']:g} | {cells} | "
                     f"{r[names[-1] + '_ms'] / r[names[0] + '_ms']:.2f} | {r['exact_topk_ms']:.3f} | "
                     f"{r['stream_ms']:.3f} |")
    return "\n".join(lines) + "\n"


def main(argv):
    del argv
    if FLAGS.runs < 7:
        raise app.UsageError("--runs must be at least 7")
    candidates = [float(c) for c in FLAGS.candidates]
    if any(c < 1 for c in candidates):
        raise app.UsageError("--candidates must all be >= 1")
    timing.pin_threads(FLAGS.threads)
    rows = measure(np.random.default_rng(0), candidates)
    meta = {"command": record.command_line("benchmarks.ops.dgc_candidates"), "machine": record.machine(),
            "threads": FLAGS.threads, "runs": FLAGS.runs}
    paths = record.write_results(FLAGS.out_dir, FLAGS.name, {**meta, "rows": rows},
                                  markdown(rows, candidates, meta))
    print("wrote", *paths)


if __name__ == "__main__":
    define_flags()
    app.run(main)
