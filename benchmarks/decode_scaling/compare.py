"""Measured decode of interleaved runs of two builds, side by side: every round of
every run directory (decode_scaling.json) pooled per build, medians [min-max] and
their ratio.

    python -m benchmarks.decode_scaling.compare before=DIR1,DIR3 after=DIR2,DIR4
"""
import json
import pathlib
import statistics
import sys


def pooled(dirs):
    """{(model and compressor, K): [ms, ...]} over every round of every run in dirs."""
    out = {}
    for d in dirs:
        data = json.loads((pathlib.Path(d) / "decode_scaling.json").read_text())
        for key, rounds in data["rounds"].items():
            for k in data["workers"]:
                out.setdefault((key, k), []).extend(1e3 * r["measured"][str(k)] for r in rounds)
    return out


def table(before, after):
    lines = ["| model, compressor | K | before ms | after ms | before / after |", "|---|---|---|---|---|"]
    for key in sorted(set(before) & set(after)):
        b, a = before[key], after[key]
        lines.append(f"| {key[0]} | {key[1]} | {statistics.median(b):.2f} [{min(b):.2f}-{max(b):.2f}] | "
                     f"{statistics.median(a):.2f} [{min(a):.2f}-{max(a):.2f}] | "
                     f"{statistics.median(b) / statistics.median(a):.2f}x |")
    return "\n".join(lines)


def main(argv):
    builds = dict(arg.split("=", 1) for arg in argv[1:])
    if set(builds) != {"before", "after"}:
        sys.exit(__doc__)
    print(table(pooled(builds["before"].split(",")), pooled(builds["after"].split(","))))


if __name__ == "__main__":
    main(sys.argv)
