"""The cost of the exchange's non-finite check (check_finite: one read of each
gradient and one 4-byte allreduce per step) on the main job's model and
compressor settings: 2 workers on localhost, tfcomp's MultiWorkerMirroredStrategy,
a custom loop whose steps alternate between an exchange with the check and one
without (same strategy, same compressor state), so that both see the same
machine load. Reports the median step time of each and their ratio.

    python -m benchmarks.finite_check_overhead [--repeats 2] [--steps 400] [--compressors NoCompression,EFSignSGD]
"""
import os
import statistics
import tempfile
import time

from absl import app, flags

from benchmarks.harness import record
from tests.cluster.local_cluster import run_workers

FLAGS = flags.FLAGS
flags.DEFINE_list("compressors", ["NoCompression", "EFSignSGD", "DRAGONN", "PowerSGD", "ACPSGD"],
                  "tfcomp compressor names (the main job's settings for each).")
flags.DEFINE_integer("repeats", 2, "Runs per compressor.")
flags.DEFINE_integer("steps", 400, "Steps of each kind per run, after one step that traces each.")
flags.DEFINE_string("out_dir", "benchmarks/results", "Where finite_check_overhead.{md,json} go.")


def run(name):
    """Per worker: {"with": [ms], "without": [ms]}."""
    args = [f"--compression={name}", f"--steps={FLAGS.steps}", "--bandwidth_gbps=4.0"]
    with tempfile.TemporaryDirectory(prefix="tfcomp-finite-bench-") as work_dir:
        codes, logs, results = run_workers("benchmarks.finite_check_overhead.worker", 2, args, work_dir,
                                           timeout=600)
    if codes != [0, 0]:
        raise RuntimeError(f"{name}: workers exited {codes}\n" + "\n".join(log[-2000:] for log in logs))
    return [r["step_ms"] for r in results]


def main(argv):
    del argv
    runs = {name: [] for name in FLAGS.compressors}
    load_before = os.getloadavg()
    start = time.time()
    for repeat in range(FLAGS.repeats):
        for name in FLAGS.compressors:
            runs[name].extend(run(name))
            last = runs[name][-2:]
            print(f"[{repeat + 1}/{FLAGS.repeats}] {name}: " + ", ".join(
                f"worker{w} {statistics.median(r['with']):.2f} vs {statistics.median(r['without']):.2f} ms"
                for w, r in enumerate(last)), flush=True)
    elapsed = time.time() - start
    lines = [
        "# Cost of the non-finite check on the main job's model",
        "",
        f"`{record.command_line('benchmarks.finite_check_overhead')}` on "
        f"{os.cpu_count()} CPUs shared with other work (load average {load_before[0]:.1f} before, "
        f"{os.getloadavg()[0]:.1f} after; {elapsed:.0f} s).",
        "",
        "The main job's 2-worker digits MLP (64-512-512-10, SGD with momentum, global batch 64) and "
        "compressor settings, in a custom loop under tfcomp's MultiWorkerMirroredStrategy on localhost. "
        "Two step functions share the strategy, the model and the compressor state; one runs the exchange "
        "with `check_finite=True` (the default: one read of each gradient and one 4-byte allreduce), the "
        f"other without. They alternate (with, without, without, with, ...), {FLAGS.steps} steps each per "
        "run. Step time: host wall time of the step call. Per worker and run, the median of each kind; "
        f"the table gives the median over {FLAGS.repeats} runs x 2 workers, and of the per-worker ratios.",
        "",
        "| compression | without: ms/step | with: ms/step | cost (median ratio) | per worker and run |",
        "|---|---|---|---|---|",
    ]
    summary = {}
    for name in FLAGS.compressors:
        on = [statistics.median(r["with"]) for r in runs[name]]
        off = [statistics.median(r["without"]) for r in runs[name]]
        ratios = [a / b - 1 for a, b in zip(on, off)]
        summary[name] = {"with_ms": statistics.median(on), "without_ms": statistics.median(off),
                         "cost": statistics.median(ratios)}
        lines.append(f"| {name} | {statistics.median(off):.2f} | {statistics.median(on):.2f} | "
                     f"{statistics.median(ratios):+.1%} | {', '.join(f'{r:+.1%}' for r in ratios)} |")
    text = "\n".join(lines) + "\n"
    print("\n" + text)
    record.write_results(FLAGS.out_dir, "finite_check_overhead",
                          {"machine": record.machine(), "summary": summary, "runs": runs}, text)


if __name__ == "__main__":
    app.run(main)
