"""tfcomp's main job: real 2-worker MultiWorkerMirroredStrategy (or Horovod) training on
localhost (scikit-learn's digits), uncompressed and with each compressor, side
by side: time per step, bytes each worker sends per step, test accuracy.

    make demo                         # or: python -m benchmarks.main_job
    make demo DEMO_FLAGS=--slow_link  # also over an emulated 1 Gbit/s link (root)
    make demo DEMO_FLAGS=--engine=horovod  # the same as a horovodrun -np 2 job
"""
import json
import pathlib
import tempfile

from absl import app, flags

from tfcomp.testing.horovod_cluster import horovodrun
from tfcomp.testing.local_cluster import run_workers
from tfcomp.testing.netns_cluster import rate_gbps
from tfcomp.testing.slow_link import emulated_link

FLAGS = flags.FLAGS
flags.DEFINE_integer("workers", 2, "Worker processes.")
flags.DEFINE_enum("engine", "tf.distribute", ["tf.distribute", "horovod"],
                  "tf.distribute: MultiWorkerMirroredStrategy ('none' is tf.distribute's own); horovod: "
                  "horovodrun ranks ('none' is hvd.DistributedOptimizer).")
flags.DEFINE_list("compressors", ["none", "FP16", "EFSignSGD", "DGC", "DRAGONN", "ACPSGD"],
                  "'none' is tf.distribute's own strategy; any tfcomp compressor name (SignSGD, TopK, "
                  "RandomK, PowerSGD, ...) can be added.")
flags.DEFINE_float("loopback_gbps", 4.0, "What unshaped loopback carries between two Python processes "
                   "(measured 3.5-4.3 Gbit/s); tensor selection plans for it.")
flags.DEFINE_integer("epochs", 8, "Training epochs per run (at least 2: the first, which traces, is not timed).",
                     lower_bound=2)
flags.DEFINE_bool("slow_link", False, "Repeat the comparison over an emulated link (needs root).")
flags.DEFINE_string("link_rate", "1gbit", "tc rate of the emulated link.")
flags.DEFINE_string("out", None, "Also write the results as JSON here.")
flags.DEFINE_string("timeline", None, "Each run's workers write a timeline (trace JSON, CSV, PNG) under "
                    "DIR/<compression>/ (DIR/<link>/<compression>/ for --slow_link).")


ENGINE_WORDS = {"tf.distribute": "MultiWorkerMirroredStrategy workers", "horovod": "Horovod ranks (Gloo)"}


def run_all(prefix, work_dir, gbps, timeline_dir=None):
    rows = []
    for name in FLAGS.compressors:
        args = [f"--compression={name}", f"--epochs={FLAGS.epochs}", f"--bandwidth_gbps={gbps}"]
        if timeline_dir:
            args.append(f"--timeline={pathlib.Path(timeline_dir).resolve() / name}")
        if FLAGS.engine == "horovod":
            code, log, results = horovodrun("benchmarks.main_job_worker", FLAGS.workers,
                                            [*args, "--engine=horovod"], pathlib.Path(work_dir) / name,
                                            timeout=240, prefix=prefix)
            if code != 0 or None in results:
                raise RuntimeError(f"{name}: horovodrun exited {code}\n{log[-4000:]}")
        else:
            codes, logs, results = run_workers("benchmarks.main_job_worker", FLAGS.workers, args,
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
                     f"{r['bytes_per_step']:>19,.0f}{r['dense_bytes'] / r['bytes_per_step']:>9.1f}x"
                     f"{100 * r['accuracy']:>9.1f}%")
    return "\n".join(lines)


def _gbps(rate):
    try:
        return rate_gbps(rate)
    except ValueError as err:
        raise app.UsageError(f"--link_rate: {err}") from err


def main(argv):
    del argv
    results = {}
    with tempfile.TemporaryDirectory(prefix="tfcomp-main-job-") as work_dir:
        results["loopback"] = run_all((), f"{work_dir}/loopback", FLAGS.loopback_gbps, FLAGS.timeline)
        print(table(f"\n{FLAGS.workers} {ENGINE_WORDS[FLAGS.engine]} on localhost (unshaped loopback), digits MLP:",
                    results["loopback"]), flush=True)
        if FLAGS.slow_link:
            with emulated_link(FLAGS.link_rate) as prefix:
                results[FLAGS.link_rate] = run_all(
                    prefix, f"{work_dir}/{FLAGS.link_rate}", _gbps(FLAGS.link_rate),
                    FLAGS.timeline and f"{FLAGS.timeline}/{FLAGS.link_rate}")
            print(table(f"\n{FLAGS.workers} {ENGINE_WORDS[FLAGS.engine]} over an emulated {FLAGS.link_rate}/s link:",
                        results[FLAGS.link_rate]))
    if FLAGS.out:
        pathlib.Path(FLAGS.out).write_text(json.dumps(results, indent=2) + "\n")
    if FLAGS.timeline:
        print(f"\nTimelines (per worker: .trace.json for ui.perfetto.dev, .csv, .png) under {FLAGS.timeline}/")


if __name__ == "__main__":
    app.run(main)
