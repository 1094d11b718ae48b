"""One cell of the codec benchmark (benchmarks/codec_bench/__main__.py) and its report:
the whole codec against a streaming read of the same gradient and its memory floor."""
import statistics

import numpy as np
import tensorflow as tf

from benchmarks.codec_bench import floors
from tfcomp.analysis.measure import codecs
from tfcomp.compressors.registry import parse_compressor


def shape_of(log2):
    rows = 2 ** ((log2 + 1) // 2)
    return rows, 2 ** log2 // rows


def read_seconds(x, runs):
    """Seconds of one streaming read of x, timestamps inside the compiled call: the maximum
    of its bits as integers of its width (TensorFlow's CPU float16 reductions are not
    vectorised, and would read a float16 gradient several times slower than memory allows)."""
    bits = {2: tf.int16, 4: tf.int32, 8: tf.int64}[x.dtype.size]

    @tf.function
    def timed(g):
        start = tf.timestamp()
        with tf.control_dependencies([start]):
            total = tf.reduce_max(tf.bitcast(tf.identity(g), bits))
        with tf.control_dependencies([total]):
            return tf.timestamp() - start

    with codecs.control_dependencies_kept():
        timed(x)
        return [float(timed(x)) for _ in range(runs)]


def measure(spec, shape, dtype, workers, runs, gradient):
    compressor = parse_compressor(spec)
    before = read_seconds(gradient, runs)
    encode, decode = codecs.codec_seconds(compressor, shape, dtype, workers, runs)
    reads = before + read_seconds(gradient, runs)
    read = statistics.median(reads)
    floor = floors.floor_in_reads(compressor, shape, dtype, workers)
    dense = encode == decode == 0.0
    return {"compressor": spec, "elements": int(np.prod(shape)), "shape": list(shape), "workers": workers,
            "dtype": dtype.name, "encode_ms": encode * 1e3, "decode_ms": decode * 1e3, "read_ms": read * 1e3,
            "read_spread_ms": [min(reads) * 1e3, max(reads) * 1e3], "sent_dense": dense,
            "codec_over_read": None if dense else (encode + decode) / read,
            "floor_reads": floor, "codec_over_floor": None if dense else (encode + decode) / read / floor}


def markdown(rows, meta):
    lines = [f"# Whole codecs against a streaming read and their memory floors ({meta['machine']['date']})", "",
             f"Command: `{meta['command']}` at commit {meta['commit']}", "",
             f"Machine: {meta['machine']['cpu']}, {meta['machine']['cpus']} cores, TensorFlow "
             f"{meta['machine']['tensorflow']}, TF_CPU_ALLOCATOR_USE_BFC={meta['bfc_allocator']}; load average {meta['load_before']} before, {meta['load_after']} after.",
             "Encode is compress() with error feedback (no worker momentum) up to its payloads; decode is "
             "everything after, aggregating K workers' payloads (what stands in for the collectives is left "
             "out). `read` is one streaming read of the gradient (the maximum of its bits as integers), timed the same way just before and after "
             "the codec (median, [min, max]). `floor` is the codec's memory-traffic floor in streaming reads "
             "(benchmarks/codec_bench/floors.py; docs/compressors.md).", "",
             "| compressor | elements | K | dtype | encode ms | decode ms | read ms [min, max] | codec / read "
             "| floor (reads) | codec / floor |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if r["sent_dense"]:
            lines.append(f"| {r['compressor']} | 2^{int(np.log2(r['elements']))} | {r['workers']} | {r['dtype']} "
                         "| sent dense | | | | | |")
            continue
        lo, hi = r["read_spread_ms"]
        lines.append(f"| {r['compressor']} | 2^{int(np.log2(r['elements']))} | {r['workers']} | {r['dtype']} | "
                     f"{r['encode_ms']:.3g} | {r['decode_ms']:.3g} | {r['read_ms']:.3g} [{lo:.3g}, {hi:.3g}] | "
                     f"{r['codec_over_read']:.2f} | {r['floor_reads']:.2f} | {r['codec_over_floor']:.2f} |")
    summary = summarize(rows)
    if summary:
        lines += ["", "At 2^24 float32 elements (a 4096x4096 gradient), K = 2: " + summary]
    return "\n".join(lines) + "\n"


def summarize(rows):
    cells = [r for r in rows if r["elements"] == 2**24 and r["workers"] == 2 and r["dtype"] == "float32"
             and not r["sent_dense"]]
    if not cells:
        return ""
    worst = max(cells, key=lambda r: r["codec_over_read"])
    median = statistics.median(r["codec_over_read"] for r in cells)
    return (f"the slowest codec is {worst['compressor']} at {worst['codec_over_read']:.1f}x a streaming read; "
            f"the median over the {len(cells)} compressors is {median:.1f}x.")


def plot(rows, path, target):
    import matplotlib  # pylint: disable=import-outside-toplevel
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
    dtypes = [d for d in ("float32", "float16") if any(r["dtype"] == d for r in rows)] or [rows[0]["dtype"]]
    chosen = [r for r in rows if r["dtype"] == dtypes[0] and not r["sent_dense"]]
    workers = sorted({r["workers"] for r in chosen})
    sizes = sorted({r["elements"] for r in chosen})
    specs = list(dict.fromkeys(r["compressor"] for r in chosen))
    fig, axes = plt.subplots(len(workers), 1, figsize=(max(8, 0.8 * len(specs)), 3.6 * len(workers)), squeeze=False)
    width = 0.8 / max(1, len(sizes))
    for ax, k in zip(axes[:, 0], workers):
        for j, size in enumerate(sizes):
            by_spec = {r["compressor"]: r for r in chosen if r["workers"] == k and r["elements"] == size}
            xs = [i + j * width for i, s in enumerate(specs) if s in by_spec]
            ax.bar(xs, [by_spec[s]["codec_over_read"] for s in specs if s in by_spec], width,
                   label=f"2^{int(np.log2(size))} elements")
            ax.scatter(xs, [by_spec[s]["floor_reads"] for s in specs if s in by_spec], marker="_", s=200,
                       color="black", zorder=3, label="memory floor" if j == 0 else None)
        ax.axhline(target, color="red", lw=0.8, ls="--", label=f"{target:g}x target")
        ax.set_yscale("log")
        ax.set_ylabel("whole codec / streaming read")
        ax.set_title(f"{dtypes[0]}, K = {k}", fontsize=9)
        ax.set_xticks([i + 0.4 - width / 2 for i in range(len(specs))], specs, rotation=30, ha="right", fontsize=8)
        ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
