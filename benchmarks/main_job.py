"""tfcomp's main job: real 2-worker MultiWorkerMirroredStrategy training on
localhost (scikit-learn's digits), uncompressed and with each compressor, side
by side: time per step, bytes each worker sends per step, test accuracy.

    make demo                         # or: python -m benchmarks.main_job
    make demo DEMO_FLAGS=--slow_link  # also over an emulated 1 Gbit/s link (root)
"""
import json
import pathlib
import tempfile

from absl import app, flags

from tfcomp.testing.local_cluster import run_workers
from tfcomp.testing.slow_link import emulated_link

FLAGS = flags.FLAGS
flags.DEFINE_integer("workers", 2, "Worker processes.")
flags.DEFINE_list("compressors", ["none", "FP16", "SignSGD", "EFSignSGD"], "'none' is tf.distribute's own strategy.")
flags.DEFINE_integer("epochs", 8, "Training epochs per run.")
flags.DEFINE_bool("slow_link", False, "Repeat the comparison over an emulated link (needs root).")
flags.DEFINE_string("link_rate", "1gbit", "tc rate of the emulated link.")
flags.DEFINE_string("out", None, "Also write the results as JSON here.")


def run_all(prefix, work_dir):
    rows = []
    for name in FLAGS.compressors:
        codes, logs, results = run_workers(
            "benchmarks.main_job_worker", FLAGS.workers, [f"--compression={name}", f"--epochs={FLAGS.epochs}"],
            pathlib.Path(work_dir) / name, timeout=240, prefix=prefix)
        if codes != [0] * FLAGS.workers:
            raise RuntimeError(f"{name}: workers exited {codes}\n" + "\n".join(log[-2000:] for log in logs))
        rows.append({"compression": name, **results[0]})
    return rows


def table(title, rows):
    base = rows[0]
    lines = [title, f"{'compression':<14}{'ms/step':>9}{'speed-up':>10}{'bytes/step/worker':>19}"
             f"{'vs dense':>10}{'accuracy':>10}"]
    for r in rows:
        lines.append(f"{r['compression']:<14}{r['step_ms']:>9.2f}{base['step_ms'] / r['step_ms']:>9.2f}x"
                     f"{r['bytes_per_step']:>19,}{r['dense_bytes'] / r['bytes_per_step']:>9.1f}x"
                     f"{100 * r['accuracy']:>9.1f}%")
    return "\n".join(lines)


def main(argv):
    del argv
    results = {}
    with tempfile.TemporaryDirectory(prefix="tfcomp-main-job-") as work_dir:
        results["loopback"] = run_all((), f"{work_dir}/loopback")
        print(table(f"\n{FLAGS.workers} workers on localhost (unshaped loopback), digits MLP:",
                    results["loopback"]), flush=True)
        if FLAGS.slow_link:
            with emulated_link(FLAGS.link_rate) as prefix:
                results[FLAGS.link_rate] = run_all(prefix, f"{work_dir}/{FLAGS.link_rate}")
            print(table(f"\n{FLAGS.workers} workers over an emulated {FLAGS.link_rate}/s link:",
                        results[FLAGS.link_rate]))
    if FLAGS.out:
        pathlib.Path(FLAGS.out).write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    app.run(main)
