"""Tables and plots of the CUDA kernel benchmark (benchmarks/cuda/kernels_bench.cu),
from the JSON lines benchmarks/cuda/run_on_gpu.sh wrote on a GPU machine. Needs
no GPU and no TensorFlow.

    python -m benchmarks.cuda.report \
        --results=benchmarks/results/cuda/kernels_h100.jsonl \
        --before=benchmarks/results/cuda/kernels_h100_before.jsonl

Writes <out_dir>/<name>.md and <name>_{sign,select,lowrank}.png. Every time is the
median of the benchmark's CUDA-event timings; "x read" is the time over one
streaming read of the same tensor (the memory floor, measured in the same run),
"GB/s" the fewest bytes the operation must move over its time.
"""
import collections
import json
import pathlib
import re

import matplotlib
from absl import app, flags

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)

FLAGS = flags.FLAGS
flags.DEFINE_string("results", "benchmarks/results/cuda/kernels_h100.jsonl",
                    "JSON lines from benchmarks/cuda/run_on_gpu.sh (the current kernels).")
flags.DEFINE_string("before", "", "JSON lines of an earlier run of the same benchmark "
                    "(e.g. before a kernel change) for a before/after column; empty for none.")
flags.DEFINE_string("out_dir", "benchmarks/results/cuda", "Where the markdown and PNGs go.")
flags.DEFINE_string("name", "kernels_h100", "Base name of the output files.")
flags.DEFINE_list("table_sizes", ["20", "24", "26"], "log2 of the tensor sizes shown in the tables.")

# (tfcomp's kernel, what it is compared with) per table; the comparison's time
# over the kernel's is the "speed-up" column.
COMPARISONS = {
    "sign": [("sign_pack", "sign_pack_composed"), ("sign_unpack", None), ("sign_majority", None)],
    "select": [("hash_select", "cub_select_if"), ("hash_select", "select_composed"),
               ("hash_select", "exact_topk_sort"), ("sampled_threshold", None),
               ("sparse_decode", None)],
    "lowrank": [("lowrank_residual", "cublas_gemm"), ("lowrank_residual", "cublas_gemm_inplace"),
                ("lowrank_compensate", "add_then_cublas_gemm"), ("lowrank_project", "cublas_gemm_project")],
}


def load(path):
    """{(op, dtype, n, param): record}; the first record of a key wins (the
    low-rank part repeats the read floor per rank)."""
    rows = {}
    for line in pathlib.Path(path).read_text().splitlines():
        if not line.startswith("{"):
            continue  # the benchmark's own "device 0: ..." line
        # C's printf writes 0 / 0 as -nan, which JSON has no word for.
        record = json.loads(re.sub(r"(?<=: )-?nan\b", "0", line))
        rows.setdefault((record["op"], record["dtype"], record["n"], record["param"]), record)
    return rows


def read_floor(rows, dtype, n):
    record = rows.get(("read", dtype, n, 0))
    return record["ms"] if record else None


def baseline_param(op, param):
    """The comparison's param: the exact sort has none; the others share the kernel's."""
    return 0 if op == "exact_topk_sort" else param


def table(rows, before, family, sizes):
    head = ["kernel", "dtype", "n", "param", "ms", "GB/s", "x read"]
    head += ["vs", "its ms", "speed-up"]
    if before:
        head += ["ms before", "change"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for op, other in COMPARISONS[family]:
        for key, record in sorted(rows.items(), key=lambda kv: (kv[0][1], kv[0][2], kv[0][3])):
            k_op, dtype, n, param = key
            if k_op != op or n.bit_length() - 1 not in sizes:
                continue
            floor = read_floor(rows, dtype, n)
            cells = [f"`{op}`", dtype, f"2^{n.bit_length() - 1}", f"{param:g}", f"{record['ms']:.4f}",
                     f"{record['gbps']:.0f}", f"{record['ms'] / floor:.2f}" if floor else "-"]
            base = rows.get((other, dtype, n, baseline_param(other, param))) if other else None
            cells += [f"`{other}`", f"{base['ms']:.4f}", f"**{base['ms'] / record['ms']:.2f}x**"] if base \
                else ["-", "-", "-"]
            if before:
                old = before.get(key)
                cells += [f"{old['ms']:.4f}", f"{old['ms'] / record['ms']:.2f}x faster"] if old else ["-", "-"]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


# The one param each plot shows: the ratio 0.01 for selection, rank 4 for low rank.
PLOT_PARAM = {"sign": None, "select": 0.01, "lowrank": 4}


def plot(rows, before, family, path, device):
    """float32 time against size: tfcomp's kernels, what they are compared with,
    the read floor, and the first kernel before the change (dashed)."""
    want = PLOT_PARAM[family]
    kernels = list(dict.fromkeys(op for op, _ in COMPARISONS[family]))
    others = [other for _, other in COMPARISONS[family] if other]
    series = collections.defaultdict(list)
    for label, source, ops in (("", rows, kernels + others + ["read"]), (" (before)", before, kernels[:1])):
        for (op, dtype, n, param), record in source.items():
            if op in ops and dtype == "float32" and record["ms"] > 0 and \
                    (want is None or op in ("read", "exact_topk_sort") or param == want):
                series[op + label].append((n, record["ms"]))
    fig, ax = plt.subplots(figsize=(8, 5))
    colors = plt.get_cmap("tab10").colors
    for i, (label, points) in enumerate(sorted(series.items())):
        points = sorted(dict(points).items())
        style = "--" if label.endswith("(before)") or label == "read" else "-"
        ax.plot([n for n, _ in points], [ms for _, ms in points], style, marker="o", markersize=3,
                color=colors[i % len(colors)],
                label="read (memory floor)" if label == "read" else label)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("elements (float32)")
    ax.set_ylabel("median ms (CUDA events)")
    shown = "" if want is None else (f", ratio {want:g}" if family == "select" else f", rank {want}")
    ax.set_title(f"tfcomp CUDA kernels, {family}{shown}: {device}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv):
    del argv
    rows = load(FLAGS.results)
    if not rows:
        raise SystemExit(f"no measurements in {FLAGS.results}")
    before = load(FLAGS.before) if FLAGS.before else {}
    device = next(iter(rows.values()))["device"]
    sizes = {int(s) for s in FLAGS.table_sizes}
    out = pathlib.Path(FLAGS.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    fill = [r for k, r in rows.items() if k[0] == "hash_select_fill" and k[1] == "float32"]
    parts = [f"# tfcomp CUDA kernels on {device}\n",
             "Made by `python -m benchmarks.cuda.report "
             f"--results={FLAGS.results}" + (f" --before={FLAGS.before}" if FLAGS.before else "") + "` "
             "from the JSON lines of `benchmarks/cuda/run_on_gpu.sh OUTDIR` "
             "(build, standalone tests, `kernels_bench`, compute-sanitizer). "
             "Times are medians of 31 CUDA-event timings after 5 warm-ups; inputs rotate through "
             "a pool three times the L2 size. `x read`: time over one 16-byte-wide streaming read "
             "of the same tensor in the same run (the floor). `speed-up`: the compared "
             "implementation's time over tfcomp's.\n"]
    for family in COMPARISONS:
        plot(rows, before, family, out / f"{FLAGS.name}_{family}.png", device)
        parts += [f"## {family}\n", table(rows, before, family, sizes) + "\n",
                  f"![{family}]({FLAGS.name}_{family}.png)\n"]
    if fill:
        fractions = ", ".join(f"{r['fill']:.3f}" for r in sorted(fill, key=lambda r: (r["param"], r["n"])))
        parts.append("DRAGONN's table fill (slots holding an index when as many elements pass the "
                     f"threshold as there are slots; 1 - 1/e = 0.632 expected), float32: {fractions}\n")
    md = out / f"{FLAGS.name}.md"
    md.write_text("\n".join(parts))
    print(f"wrote {md}")


if __name__ == "__main__":
    app.run(main)
