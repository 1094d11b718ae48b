"""tfcomp's main job: real 2-worker MultiWorkerMirroredStrategy (or Horovod) training,
uncompressed and with each compressor, side by side: time per step, bytes each
worker sends per step, test accuracy; first on localhost's unshaped loopback, then
(as root) on an emulated cluster whose links are shaped to --link_rate. The
default model is the extreme-classification head of models/registry.py (small:
8 MiB of gradient per step, little compute), where the link decides whether
compression pays; the last line says where it does, by time to accuracy,
counting only compressors at their defaults.

    make demo                         # or: python -m benchmarks.main_job
    make demo DEMO_FLAGS=--noslow_link     # loopback only (no root needed)
    make demo DEMO_FLAGS=--engine=horovod  # the same as horovodrun -np 2 jobs
    make demo DEMO_FLAGS="--model=digits_mlp"  # the small MLP the main job first ran
"""
import json
import os
import pathlib
import signal
import sys
import tempfile

from absl import app, flags

from benchmarks.harness import prediction
from benchmarks.main_job.report import table, targets, verdict
from models import registry
from tests.cluster.launcher import BFC_ALLOCATOR, BFC_ALLOCATOR_HELP, Launcher
from tests.cluster.netns_cluster import BURST_BYTES, emulated_cluster, rate_gbps

FLAGS = flags.FLAGS
flags.DEFINE_string("model", "xml", "A model of models/registry.py (python -m models.registry lists them).")
flags.DEFINE_string("size", "small", "The model's size setting (small, full; some models have more).")
flags.DEFINE_integer("workers", 2, "Worker processes.", lower_bound=2)
flags.DEFINE_enum("engine", "tf.distribute", ["tf.distribute", "horovod"],
                  "tf.distribute: MultiWorkerMirroredStrategy ('none' is tf.distribute's own); horovod: "
                  "Horovod ranks over Gloo ('none' is hvd.DistributedOptimizer).")
flags.DEFINE_list("compressors", ["none", "FP16", "EFSignSGD", "DGC", "DRAGONN", "ACPSGD"],
                  "'none' is the engine's own dense allreduce; any tfcomp compressor name (SignSGD, TopK, "
                  "RandomK, PowerSGD, ...), optionally with knobs ('DGC:ratio=0.001'), can be added, and 'auto' "
                  "(tfcomp.Auto(); it settles by about step 136, so give it --epochs and --steps_per_epoch to "
                  "match: its profiling and trials count in the timed epochs).")
flags.DEFINE_float("loopback_gbps", 4.0, "What unshaped loopback carries between two Python processes "
                   "(measured 3.5-4.3 Gbit/s); tensor selection plans for it.")
flags.DEFINE_integer("epochs", 4, "Training epochs per run (at least 2: the first, which traces, is not timed).",
                     lower_bound=2)
flags.DEFINE_integer("steps_per_epoch", 50, "Steps per epoch (at most one pass over the training set).",
                     lower_bound=1)
flags.DEFINE_float("lr", None, "Learning rate (default: the model's, models/registry.py).")
flags.DEFINE_bool("slow_link", True, "Repeat the comparison on an emulated cluster (a network namespace per "
                  "worker, links shaped both ways to --link_rate with tc tbf; needs root).")
flags.DEFINE_string("link_rate", "1gbit", "tc rate of each worker's emulated link.")
flags.DEFINE_bool("bfc_allocator", True, BFC_ALLOCATOR_HELP)
flags.DEFINE_bool("predict", True, "Record a tfcomp.analysis profile on each link's workers (the dense run's "
                  "Timeline trace, the engine's link probe, each compressor's encode and decode times) and print "
                  "the predicted step time beside the measured one.")
flags.DEFINE_float("target_fraction", 0.99, "Time to accuracy is counted to this fraction of dense's final test "
                   "accuracy on the same link; a compressor pays where it gets there sooner than dense.",
                   lower_bound=0.0, upper_bound=1.0)
flags.DEFINE_integer("eval_every", 10, "Steps between the workers' test-accuracy evaluations (their time is not "
                     "counted).", lower_bound=1)
flags.DEFINE_string("out", None, "Also write the results as JSON here.")
flags.DEFINE_string("timeline", None, "Each run's workers write a timeline (trace JSON, CSV, PNG) under "
                    "DIR/<compression>/ (DIR/<link>/<compression>/ for the emulated link).")

ENGINE_WORDS = {"tf.distribute": "MultiWorkerMirroredStrategy workers", "horovod": "Horovod ranks (Gloo)"}


def run_all(launcher, work_dir, gbps, timeline_dir=None, burst_bytes=0.0):
    work_dir = pathlib.Path(work_dir)
    rows = []
    for name in FLAGS.compressors:
        args = [f"--model={FLAGS.model}", f"--size={FLAGS.size}", f"--compression={name}",
                f"--epochs={FLAGS.epochs}", f"--steps_per_epoch={FLAGS.steps_per_epoch}", f"--bandwidth_gbps={gbps}",
                f"--eval_every={FLAGS.eval_every}"]
        if FLAGS.lr is not None:
            args.append(f"--lr={FLAGS.lr}")
        timeline = pathlib.Path(timeline_dir).resolve() / name if timeline_dir else None
        if timeline is None and FLAGS.predict and name == prediction.DENSE:
            timeline = work_dir / "timeline-none"  # a few steps, for the profile
            args.append("--timeline_steps=5")
        if timeline:
            args.append(f"--timeline={timeline}")
        ok, result, log = launcher.run("benchmarks.harness.train_worker", args, work_dir / name.replace(":", "_"))
        if not ok:
            raise RuntimeError(f"{name}: {log}")
        rows.append({"compression": name, **result})
    if FLAGS.predict:
        worker = "rank0" if FLAGS.engine == "horovod" else "worker0"
        dense_timeline = pathlib.Path(timeline_dir).resolve() / "none" if timeline_dir else work_dir / "timeline-none"
        profile = prediction.record_profile(launcher, dense_timeline / f"{worker}.trace.json", FLAGS.compressors,
                                            work_dir / "profile.json", work_dir / "profile", FLAGS.model,
                                            sgd_momentum=registry.MODELS[FLAGS.model].sgd_momentum)
        for row in rows:
            row["predicted_ms"] = prediction.predicted_step_ms(profile, FLAGS.engine, FLAGS.workers, row["compression"],
                                                               burst_bytes)
    return rows


def _gbps(rate):
    try:
        return rate_gbps(rate)
    except ValueError as err:
        raise app.UsageError(f"--link_rate: {err}") from err


def main(argv):
    del argv
    spec = registry.MODELS.get(FLAGS.model)
    if spec is None or FLAGS.size not in spec.sizes:
        raise app.UsageError(f"--model/--size: no model {FLAGS.model!r} of size {FLAGS.size!r}; models/registry.py "
                             "has " + ", ".join(f"{n} ({', '.join(s.sizes)})" for n, s in registry.MODELS.items()))
    if FLAGS.compressors[:1] != ["none"]:
        raise app.UsageError("--compressors: the first must be 'none', the dense run the others are compared with")
    link_gbps = _gbps(FLAGS.link_rate)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # removes the cluster as Ctrl-C does
    if FLAGS.slow_link and os.geteuid() != 0:
        raise app.UsageError("the emulated link needs root (network namespaces, tc); run as root, or pass "
                             "--noslow_link for the loopback comparison alone")
    model = f"{FLAGS.model} ({FLAGS.size}: {spec.sizes[FLAGS.size].describe})"
    results = {}
    with tempfile.TemporaryDirectory(prefix="tfcomp-main-job-") as work_dir:
        env = BFC_ALLOCATOR if FLAGS.bfc_allocator else None
        results["loopback"] = run_all(Launcher(FLAGS.engine, FLAGS.workers, timeout_s=400, env=env),
                                      f"{work_dir}/loopback", FLAGS.loopback_gbps, FLAGS.timeline)
        stack = results["loopback"][0]["stack"]
        print(table(f"\n{FLAGS.workers} {ENGINE_WORDS[FLAGS.engine]} on localhost (unshaped loopback), {model}, "
                    f"{stack}:", results["loopback"], targets(results, FLAGS.target_fraction)["loopback"]),
              flush=True)
        if FLAGS.slow_link:
            with emulated_cluster(FLAGS.workers, FLAGS.link_rate) as cluster:
                results[FLAGS.link_rate] = run_all(
                    Launcher(FLAGS.engine, FLAGS.workers, cluster=cluster, timeout_s=400, env=env),
                    f"{work_dir}/{FLAGS.link_rate}", link_gbps,
                    FLAGS.timeline and f"{FLAGS.timeline}/{FLAGS.link_rate}", burst_bytes=BURST_BYTES)
            print(table(f"\n{FLAGS.workers} {ENGINE_WORDS[FLAGS.engine]} on an emulated cluster, each link "
                        f"{FLAGS.link_rate}/s both ways, {model}:", results[FLAGS.link_rate],
                        targets(results, FLAGS.target_fraction)[FLAGS.link_rate]))
    print("\n" + verdict(f"{FLAGS.model} ({FLAGS.size})", results, FLAGS.target_fraction))
    if FLAGS.out:
        pathlib.Path(FLAGS.out).write_text(json.dumps(results, indent=2) + "\n")
    if FLAGS.timeline:
        print(f"\nTimelines (per worker: .trace.json for ui.perfetto.dev, .csv, .png) under {FLAGS.timeline}/")


if __name__ == "__main__":
    app.run(main)
