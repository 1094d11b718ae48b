"""The cost of tfcomp.callbacks.Timeline on the main job's model: the main job's
2-worker digits MLP under model.fit, with the Timeline recording every other
step from the second epoch on (--block), so that steps with and without
recording run side by side in the same processes and under the same load.
Reports the median step time of each kind and their ratio.

    python -m benchmarks.timeline_overhead [--repeats 3] [--compressors none,EFSignSGD,DRAGONN]
"""
import os
import pathlib
import statistics
import sys
import tempfile
import time

from absl import app, flags

from tests.cluster.local_cluster import run_workers

FLAGS = flags.FLAGS
flags.DEFINE_list("compressors", ["none", "EFSignSGD", "DRAGONN"], "As the main job's --compressors.")
flags.DEFINE_integer("repeats", 3, "Runs per compressor.")
flags.DEFINE_integer("epochs", 8, "Training epochs per run (the main job's default).")
flags.DEFINE_string("out", "benchmarks/results/timeline_overhead.md", "Markdown results.")
flags.DEFINE_integer("block", 1, "Steps per block (the worker's --block): 1 alternates every step.")


def run(name, timeline_dir):
    """Per worker: (median recorded step ms, median plain step ms, recorded steps, plain steps,
    median ms of the host read at the end of a recorded step)."""
    args = [f"--compression={name}", f"--epochs={FLAGS.epochs}", "--bandwidth_gbps=4.0",
            f"--timeline_dir={timeline_dir}", f"--block={FLAGS.block}"]
    with tempfile.TemporaryDirectory(prefix="tfcomp-timeline-bench-") as work_dir:
        codes, logs, results = run_workers("benchmarks.timeline_overhead.worker", 2, args, work_dir, timeout=300)
    if codes != [0, 0]:
        raise RuntimeError(f"{name}: workers exited {codes}\n" + "\n".join(log[-2000:] for log in logs))
    return [(statistics.median(r["recorded_ms"]), statistics.median(r["plain_ms"]), len(r["recorded_ms"]),
             len(r["plain_ms"]), statistics.median(r["read_ms"])) for r in results]


def _steps(block):
    return "step" if block == 1 else f"block of {block} steps"


def main(argv):
    del argv
    runs = {name: [] for name in FLAGS.compressors}
    load_before = os.getloadavg()
    start = time.time()
    with tempfile.TemporaryDirectory(prefix="tfcomp-timelines-") as timelines:
        for repeat in range(FLAGS.repeats):
            for name in FLAGS.compressors:
                per_worker = run(name, pathlib.Path(timelines) / f"{name}-{repeat}")
                runs[name].append(per_worker)
                print(name, " ".join(f"worker{w}: {on:.2f} vs {off:.2f} ms ({on / off - 1:+.1%}, read {read:.3f} ms)"
                                     for w, (on, off, _, _, read) in enumerate(per_worker)), flush=True)
    elapsed = time.time() - start
    n_on, n_off = runs[FLAGS.compressors[0]][0][0][2:4]
    lines = [
        "# Timeline overhead on the main job's model",
        "",
        f"`{' '.join(['python', '-m', 'benchmarks.timeline_overhead', *sys.argv[1:]])}` on "
        f"{os.cpu_count()} CPUs shared with other work (load average {load_before[0]:.1f} before, "
        f"{os.getloadavg()[0]:.1f} after; {elapsed:.0f} s).",
        "",
        "The main job's 2-worker digits MLP (64-512-512-10, SGD with momentum, global batch 64) under "
        f"`model.fit` on localhost, {FLAGS.epochs} epochs per run. From the second epoch on, "
        f"`tfcomp.callbacks.Timeline` records every other {_steps(FLAGS.block)} (its instrumented "
        "train function, and its read of the marks at batch end); the steps between run Keras' own "
        "train function. Step time: host wall time from batch begin to batch end. "
        f"Per worker and run: the median of the recorded steps ({n_on}, less the one that traced the "
        f"instrumented function) against the median of the other steps ({n_off}); the table gives the "
        f"median over {FLAGS.repeats} runs x 2 workers of each, and of the per-worker ratios.",
        "",
        "The read column is the host time of the callback's read at the end of a recorded step "
        "(part of the recorded step's time).",
        "",
        "| compression | without: ms/step | with: ms/step | overhead (median ratio) | read ms | per worker and run |",
        "|---|---|---|---|---|---|",
    ]
    for name in FLAGS.compressors:
        rows = [row for per_worker in runs[name] for row in per_worker]
        ratios = [on / off - 1 for on, off, *_ in rows]
        lines.append(f"| {name} | {statistics.median(r[1] for r in rows):.2f} | "
                     f"{statistics.median(r[0] for r in rows):.2f} | {statistics.median(ratios):+.1%} | "
                     f"{statistics.median(r[4] for r in rows):.3f} | {', '.join(f'{r:+.1%}' for r in ratios)} |")
    text = "\n".join(lines) + "\n"
    print("\n" + text)
    pathlib.Path(FLAGS.out).write_text(text)


if __name__ == "__main__":
    app.run(main)
