"""Before and after: codec_bench result files side by side, per cell the whole codec in
streaming reads of the gradient (each run's own read), and their ratio. Several files on
a side (comma-separated, e.g. interleaved rounds) give per cell the median over them.

    python -m benchmarks.codec_bench.compare BEFORE.json[,...] AFTER.json[,...] OUT.md
"""
import json
import statistics
import sys


def cells(paths):
    """(the first file's metadata, {cell: row}), a cell's figures the medians over the files."""
    runs = [json.loads(open(path, encoding="utf-8").read()) for path in paths.split(",")]
    by_cell = {}
    for data in runs:
        for r in data["rows"]:
            by_cell.setdefault((r["compressor"], r["elements"], r["workers"], r["dtype"]), []).append(r)
    merged = {}
    for key, rows in by_cell.items():
        row = dict(rows[0])
        for field in ("encode_ms", "decode_ms", "read_ms", "codec_over_read"):
            if row[field] is not None:
                row[field] = statistics.median(r[field] for r in rows)
        row["rounds"] = len(rows)
        merged[key] = row
    meta = dict(runs[0])
    meta["rounds"] = len(runs)
    return meta, merged


def table(before_path, after_path):
    before_meta, before = cells(before_path)
    after_meta, after = cells(after_path)
    lines = [f"# Whole codecs before and after ({after_meta['machine']['date']})", "",
             f"Before: commit {before_meta['commit']}, `{before_meta['command']}` "
             f"({before_meta['machine']['date']}); after: commit {after_meta['commit']}, "
             f"`{after_meta['command']}` ({after_meta['machine']['date']}); medians over "
             f"{before_meta['rounds']} and {after_meta['rounds']} runs. Both measured with the after "
             "commit's benchmarks/codec_bench and tfcomp/analysis/measure/codecs.py. A figure is the whole codec "
             "(encode + decode, ms) and, in brackets, in streaming reads of the gradient taken in the same run; "
             "`after / before` compares the latter.", "",
             "| compressor | elements | K | dtype | before ms [reads] | after ms [reads] | after / before |",
             "|---|---|---|---|---|---|---|"]
    ratios = []
    for key, a in after.items():
        b = before.get(key)
        if b is None or a["sent_dense"] or b["sent_dense"]:
            continue
        ratio = a["codec_over_read"] / b["codec_over_read"]
        ratios.append((key, ratio))
        spec, elements, k, dtype = key
        lines.append(f"| {spec} | 2^{elements.bit_length() - 1} | {k} | {dtype} | "
                     f"{b['encode_ms'] + b['decode_ms']:.3g} [{b['codec_over_read']:.1f}] | "
                     f"{a['encode_ms'] + a['decode_ms']:.3g} [{a['codec_over_read']:.1f}] | {ratio:.2f} |")
    slower = [(key, r) for key, r in ratios if r > 1.0]
    lines += ["", f"{len(ratios)} cells; median after / before {statistics.median(r for _, r in ratios):.2f}; "
              f"{len(slower)} slower after: " + (", ".join(f"{k[0]} 2^{k[1].bit_length() - 1} K={k[2]} {k[3]} "
                                                         f"({r:.2f}x)" for k, r in sorted(slower, key=lambda x: -x[1]))
                                                  or "none") + "."]
    return "\n".join(lines) + "\n"


def main(argv):
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    before, after, out = argv
    with open(out, "w", encoding="utf-8") as f:
        f.write(table(before, after))
    print(open(out, encoding="utf-8").read().splitlines()[-1])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
