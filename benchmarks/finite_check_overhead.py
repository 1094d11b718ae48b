"""The cost of the exchange's non-finite check (check_finite: one read of each
gradient and one 4-byte allreduce per step) on the main job's model: the main
job's 2-worker digits MLP under model.fit with tfcomp's strategy, runs with
the check and without it interleaved, so that both see the same machine load.
Reports the median step time of each and their ratio.

    python -m benchmarks.finite_check_overhead [--repeats 5] [--compressors NoCompression,EFSignSGD,DRAGONN]
"""
import os
import statistics
import tempfile
import time

from absl import app, flags

from benchmarks import harness
from tfcomp.testing.local_cluster import run_workers

FLAGS = flags.FLAGS
flags.DEFINE_list("compressors", ["NoCompression", "EFSignSGD", "DRAGONN", "PowerSGD"],
                  "tfcomp compressor names, as the main job's --compressors.")
flags.DEFINE_integer("repeats", 5, "Runs per compressor and setting.")
flags.DEFINE_integer("epochs", 6, "Training epochs per run (the first is not timed).")
flags.DEFINE_string("out_dir", "benchmarks/results", "Where finite_check_overhead.{md,json} go.")


def run(name, check):
    """Each worker's median step time in ms."""
    args = [f"--compression={name}", f"--epochs={FLAGS.epochs}", "--bandwidth_gbps=4.0",
            f"--check_finite={check}"]
    with tempfile.TemporaryDirectory(prefix="tfcomp-finite-bench-") as work_dir:
        codes, logs, results = run_workers("benchmarks.main_job_worker", 2, args, work_dir, timeout=300)
    if codes != [0, 0]:
        raise RuntimeError(f"{name}: workers exited {codes}\n" + "\n".join(log[-2000:] for log in logs))
    return [r["step_ms"] for r in results]


def main(argv):
    del argv
    runs = {(name, check): [] for name in FLAGS.compressors for check in (True, False)}
    load_before = os.getloadavg()
    start = time.time()
    for repeat in range(FLAGS.repeats):
        for name in FLAGS.compressors:
            for check in (True, False) if repeat % 2 == 0 else (False, True):
                runs[name, check].extend(run(name, check))
            print(f"[{repeat + 1}/{FLAGS.repeats}] {name}: with {runs[name, True][-2:]} ms, "
                  f"without {runs[name, False][-2:]} ms", flush=True)
    elapsed = time.time() - start
    lines = [
        "# Cost of the non-finite check on the main job's model",
        "",
        f"`{harness.command_line('benchmarks.finite_check_overhead')}` on "
        f"{os.cpu_count()} CPUs shared with other work (load average {load_before[0]:.1f} before, "
        f"{os.getloadavg()[0]:.1f} after; {elapsed:.0f} s).",
        "",
        "The main job's 2-worker digits MLP (64-512-512-10, SGD with momentum, global batch 64) under "
        f"`model.fit` with tfcomp's MultiWorkerMirroredStrategy on localhost, {FLAGS.epochs} epochs per "
        "run, the first untimed. Runs with `check_finite=True` (the default) and `False` alternate. "
        "Step time: each worker's median host time from batch begin to batch end; the table gives the "
        f"median over {FLAGS.repeats} runs x 2 workers of each, and the ratio of the medians.",
        "",
        "| compression | without: ms/step | with: ms/step | cost | per worker and run, with / without |",
        "|---|---|---|---|---|",
    ]
    for name in FLAGS.compressors:
        on, off = runs[name, True], runs[name, False]
        pairs = ", ".join(f"{a:.2f}/{b:.2f}" for a, b in zip(on, off))
        lines.append(f"| {name} | {statistics.median(off):.2f} | {statistics.median(on):.2f} | "
                     f"{statistics.median(on) / statistics.median(off) - 1:+.1%} | {pairs} |")
    text = "\n".join(lines) + "\n"
    print("\n" + text)
    payload = {"machine": harness.machine(), "step_ms": {f"{name}/{'with' if check else 'without'}": times
                                                         for (name, check), times in runs.items()}}
    harness.write_results(FLAGS.out_dir, "finite_check_overhead", payload, text)


if __name__ == "__main__":
    app.run(main)
