"""Long runs: the main job's model trained for thousands of steps with each
compressor by real workers on localhost, watching for what a short run hides:
retracing after the first steps, resident memory that grows, and TensorFlow
functions or graph ops that pile up.

    python -m benchmarks.long_run                      # 10 compressors x 2,000 steps
    python -m benchmarks.long_run --engine=horovod --compressors=DGC,PowerSGD

Writes <output>/long_run.md (.json, .png; long_run_horovod.* for Horovod) and
exits 1 if any compressor broke a promise: a train-step trace, a new TF
function, concrete function or op after warm-up, threads that grew by more
than 10%, or RSS that moved more than --rss_tolerance_percent between the
first post-warm-up window and the last.
"""
import pathlib
import sys
import tempfile
import threading
import time

from absl import app, flags

from benchmarks.harness import record
from benchmarks.long_run import link_schedule, report
from tests.cluster import netns_cluster
from tests.cluster.horovod_cluster import horovodrun
from tests.cluster.local_cluster import run_workers
from tfcomp.compressors.registry import COMPRESSORS

FLAGS = flags.FLAGS
ALL_COMPRESSORS = list(COMPRESSORS)
flags.DEFINE_list("compressors", ALL_COMPRESSORS, "tfcomp compressor names ('none': tf.distribute's own "
                  "strategy, or hvd.DistributedOptimizer; 'auto': tfcomp.Auto() with its default candidates).")
flags.DEFINE_float("minutes", None, "Train each compressor this long instead (--steps is then the most; the "
                   "workers agree when to stop every 1,000 steps). tfcomp's engines only.", lower_bound=0)
flags.DEFINE_integer("auto_replan_every", None, "With auto: tfcomp.Auto's replan_every.", lower_bound=2)
flags.DEFINE_list("link_schedule", None, "Run the workers on an emulated cluster (a network namespace each, "
                  "root only) whose links cycle through these periods, RATE:MINUTES each (a tc rate or "
                  "'unshaped'), round and round: a soak that gives Auto's re-planning something to re-plan for. "
                  "Default: localhost, unshaped. tf.distribute only.")
flags.DEFINE_integer("steps", 2000, "Training steps per compressor.", lower_bound=2)
flags.DEFINE_integer("warmup", 200, "Steps of warm-up: traces, functions and ops are counted from here on.",
                     lower_bound=1)
flags.DEFINE_integer("window", 200, "Steps in each RSS window: the median of the samples in steps "
                     "(warmup, warmup+window] against the median in (steps-window, steps].", lower_bound=1)
flags.DEFINE_integer("sample_every", 10, "Steps between samples in each worker.", lower_bound=1)
flags.DEFINE_integer("progress_every", 100, "Steps between progress lines.", lower_bound=1)
flags.DEFINE_integer("workers", 2, "Worker processes (Horovod ranks).", lower_bound=2)
flags.DEFINE_enum("engine", "tf.distribute", ["tf.distribute", "horovod"],
                  "tf.distribute: tfcomp's MultiWorkerMirroredStrategy workers (TF_CONFIG); horovod: "
                  "horovodrun ranks with tfcomp.horovod.DistributedOptimizer.")
flags.DEFINE_float("bandwidth_gbps", 1.0, "The link tensor selection plans for: at 1 Gbit/s the sparsifiers "
                   "compress the model's large kernels (see tests/test_main_job.py).")
flags.DEFINE_float("collective_timeout_s", None, "tf.distribute collective timeout (default: the strategy's, "
                   "none); TensorFlow holds a sleeping thread per collective launch for this long.")
flags.DEFINE_float("rss_tolerance_percent", 5.0, "Largest RSS change allowed between the two windows.")
flags.DEFINE_integer("timeout_s", 3600, "Seconds one compressor's run may take before its workers are killed.")
flags.DEFINE_string("output", "benchmarks/results", "Directory for the .md, .json and .png.")
flags.DEFINE_string("logs", None, "Keep the workers' logs under DIR/<compressor>/ (default: a temporary "
                    "directory, removed at the end).")
flags.DEFINE_bool("retrace_every_step", False, "Make the workers rebuild Keras' train function after every "
                  "step (a check of the checks: the run must then fail).")


class ProgressTail(threading.Thread):
    """Prints the workers' progress lines from a log file as they are written."""

    MARK = "long_run: "

    def __init__(self, path):
        super().__init__(daemon=True)
        self.path, self.done = pathlib.Path(path), threading.Event()

    def run(self):
        while not self.path.exists() and not self.done.is_set():
            time.sleep(0.5)
        if not self.path.exists():
            return
        with open(self.path) as log:
            pending = ""
            while True:
                chunk = log.read()
                pending += chunk
                *lines, pending = pending.split("\n")
                for line in lines:
                    if self.MARK in line:
                        print("  " + line[line.index(self.MARK) + len(self.MARK):], flush=True)
                if not chunk:
                    if self.done.is_set():
                        return
                    time.sleep(1.0)


def run_one(name, work_dir):
    """One compressor's long run; returns each worker's result."""
    args = [f"--compression={name}", f"--steps={FLAGS.steps}", f"--warmup={FLAGS.warmup}",
            f"--sample_every={FLAGS.sample_every}", f"--progress_every={FLAGS.progress_every}",
            f"--bandwidth_gbps={FLAGS.bandwidth_gbps}", f"--engine={FLAGS.engine}"]
    if FLAGS.collective_timeout_s is not None:
        args.append(f"--collective_timeout_s={FLAGS.collective_timeout_s}")
    if FLAGS.retrace_every_step:
        args.append("--retrace_every_step")
    if FLAGS.minutes is not None:
        args.append(f"--minutes={FLAGS.minutes}")
    if FLAGS.auto_replan_every is not None:
        args.append(f"--auto_replan_every={FLAGS.auto_replan_every}")
    out_dir = pathlib.Path(work_dir) / name
    log = out_dir / ("horovodrun.log" if FLAGS.engine == "horovod" else "worker0.log")
    tail = ProgressTail(log)
    tail.start()
    try:
        if FLAGS.engine == "horovod":
            code, text, results = horovodrun("benchmarks.long_run.worker", FLAGS.workers, args, out_dir,
                                             timeout=FLAGS.timeout_s)
            failed, logs = code != 0, [text]
        elif FLAGS.link_schedule:
            codes, logs, results = _run_on_cycled_links(args, out_dir)
            failed = codes != [0] * FLAGS.workers
        else:
            codes, logs, results = run_workers("benchmarks.long_run.worker", FLAGS.workers, args, out_dir,
                                               timeout=FLAGS.timeout_s)
            failed = codes != [0] * FLAGS.workers
    finally:
        tail.done.set()
        tail.join()
    if failed or None in results:
        raise RuntimeError(f"{name}: the workers failed (logs under {out_dir})\n"
                           + "\n".join(_without_module_list(text)[-3000:] for text in logs))
    return results


def _run_on_cycled_links(args, out_dir):
    """The workers on an emulated cluster whose links follow --link_schedule; the
    link changes are written to out_dir/link_changes.jsonl as they happen."""
    out_dir.mkdir(parents=True, exist_ok=True)
    with netns_cluster.emulated_cluster(FLAGS.workers) as cluster:
        cycler = link_schedule.LinkCycler(cluster, link_schedule.parse(FLAGS.link_schedule),
                                          out_dir / "link_changes.jsonl")
        cycler.start()
        try:
            return run_workers("benchmarks.long_run.worker", FLAGS.workers, args, out_dir, timeout=FLAGS.timeout_s,
                               hosts=cluster.worker_hosts,
                               prefixes=[cluster.prefix(w) for w in range(FLAGS.workers)])
        finally:
            cycler.stop()


def _without_module_list(log):
    """A log less the list of extension modules Python prints after a fatal error."""
    return "\n".join(line for line in log.splitlines() if "Extension modules:" not in line)


def markdown(rows, problems, seconds):
    engine = ("tfcomp's MultiWorkerMirroredStrategy" if FLAGS.engine == "tf.distribute"
              else "Horovod (Gloo) with tfcomp.horovod.DistributedOptimizer")
    machine = record.machine()
    lines = [
        "# Long runs: retracing, resident memory and graph growth",
        "",
        f"`{record.command_line('benchmarks.long_run')}`",
        "",
        f"{FLAGS.workers} workers on localhost, {engine}; the main job's digits MLP (64-512-512-10, SGD with "
        f"momentum, global batch 64, one Keras `fit` epoch of {FLAGS.steps} steps over the repeated data). "
        f"{machine['cpus']} CPUs ({machine['cpu']}) shared with other work, TensorFlow {machine['tensorflow']}, "
        f"{machine['date']}, {seconds / 60:.1f} minutes in all. Sparsifiers' tensor selection plans for a "
        f"{FLAGS.bandwidth_gbps:g} Gbit/s link.",
        "",
        f"Each worker samples every {FLAGS.sample_every} steps; warm-up is the first {FLAGS.warmup} steps.",
        "",
        "- **traces**: calls of the model's `train_step`, which Keras makes only while tracing the train "
        "function (once per trace), also of a train function it rebuilt; the train function's "
        "`experimental_get_tracing_count()` after warm-up is checked as well. *By warm-up*: worker 0's count "
        "at the warm-up step; *after warm-up*: the largest increase over the workers from there to the end.",
        "- **TF functions**: functions registered in the eager context (`context.list_function_names()`), "
        "whichever `tf.function` traced them; worker 0 at warm-up and at the end.",
        f"- **RSS**: VmRSS from `/proc/self/status`; *warm-up* is the median of the samples in steps "
        f"({FLAGS.warmup}, {FLAGS.warmup + FLAGS.window}], *end* the median in "
        f"({FLAGS.steps - FLAGS.window}, {FLAGS.steps}]; the change is end against warm-up, worker 0's and "
        f"the largest in size over the workers (tolerance ±{FLAGS.rss_tolerance_percent:g}%); the *trend* is "
        "worker 0's least-squares slope of RSS over all samples after warm-up.",
        "- **threads**: `Threads` from `/proc/self/status`, worker 0's medians over the same two windows "
        "(a rise of more than 10% fails). Collectives run without a timeout"
        + (f" (here {FLAGS.collective_timeout_s:g} s)" if FLAGS.collective_timeout_s else "")
        + ": TensorFlow 2.15 keeps a sleeping thread per collective launch for a timeout's length.",
        "- **ops**: nodes of all concrete functions of Keras' train function, the bodies of the functions "
        "they call included (strategy.run's replica function, conds, switch cases), worker 0.",
        f"- **ms/step**: worker 0's median host time from batch begin to batch end after warm-up; "
        "**sent/dense**: bytes a worker sends per step against the dense gradient.",
        "",
        report.markdown_table(rows),
        "",
        "![RSS over steps](long_run{}.png)".format("_horovod" if FLAGS.engine == "horovod" else ""),
        "",
        "Shaded: the two windows whose medians are compared (green: after warm-up, red: last).",
        "",
    ]
    if problems:
        lines += ["**Failed:**", ""] + [f"- {name}: {what}" for name, what in problems]
    else:
        lines.append(f"No compressor retraced, added a function, an op or threads after warm-up, or moved RSS by more "
                     f"than {FLAGS.rss_tolerance_percent:g}%.")
    return "\n".join(lines) + "\n"


def main(argv):
    del argv
    if FLAGS.warmup + FLAGS.window > FLAGS.steps:
        raise app.UsageError("--warmup plus --window must not exceed --steps")
    known = ALL_COMPRESSORS + ["none", "auto"]
    unknown = [n for n in FLAGS.compressors if n not in known]
    if unknown:
        raise app.UsageError(f"unknown compressors {unknown}; choose from {known}")
    if FLAGS.link_schedule:
        if FLAGS.engine != "tf.distribute":
            raise app.UsageError("--link_schedule runs tf.distribute workers only")
        try:
            link_schedule.parse(FLAGS.link_schedule)
        except ValueError as error:
            raise app.UsageError(str(error)) from error
    started = time.monotonic()
    runs, rows, problems = [], [], []
    with tempfile.TemporaryDirectory(prefix="tfcomp-long-run-") as temporary:
        work_dir = FLAGS.logs or temporary
        for index, name in enumerate(FLAGS.compressors):
            print(f"[{index + 1}/{len(FLAGS.compressors)}] {name}: {FLAGS.steps} steps, {FLAGS.workers} "
                  f"workers ({FLAGS.engine})", flush=True)
            begun = time.monotonic()
            try:
                results = run_one(name, work_dir)
            except RuntimeError as error:  # the other compressors still run; the command exits 1
                print(error, flush=True)
                problems.append((name, str(error).splitlines()[0]))
                continue
            summaries = [report.worker_summary(r, FLAGS.window) for r in results]
            found = sorted({what for s in summaries
                            for what in report.violations(s, FLAGS.rss_tolerance_percent)})
            problems += [(name, what) for what in found]
            runs.append((name, results))
            rows.append((name, FLAGS.steps, summaries, results[0]["bytes_per_step"] / results[0]["dense_bytes"]))
            print(f"  done in {time.monotonic() - begun:.0f} s: "
                  f"{'; '.join(found) if found else 'no retrace, no growth'}", flush=True)
    suffix = "_horovod" if FLAGS.engine == "horovod" else ""
    out = pathlib.Path(FLAGS.output)
    out.mkdir(parents=True, exist_ok=True)
    if runs:
        report.plot_rss(out / f"long_run{suffix}.png", runs, FLAGS.warmup, FLAGS.window,
                                 f"RSS per worker over {FLAGS.steps} steps ({FLAGS.engine})")
    payload = {"command": record.command_line("benchmarks.long_run"), "machine": record.machine(),
               "flags": {k: FLAGS[k].value for k in ("steps", "warmup", "window", "sample_every", "workers",
                                                     "engine", "bandwidth_gbps", "rss_tolerance_percent")},
               "runs": {name: {"workers": results,
                               "summaries": [report.worker_summary(r, FLAGS.window) for r in results]}
                        for name, results in runs},
               "problems": [{"compression": n, "problem": w} for n, w in problems]}
    _, md_path = record.write_results(out, f"long_run{suffix}", payload,
                                       markdown(rows, problems, time.monotonic() - started))
    print(report.markdown_table(rows))
    print(f"\nWrote {md_path}")
    if problems:
        print("FAILED:\n" + "\n".join(f"  {n}: {w}" for n, w in problems))
        sys.exit(1)


if __name__ == "__main__":
    app.run(main)
