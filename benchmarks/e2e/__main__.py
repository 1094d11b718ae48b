"""End-to-end benchmark: reference models (models/registry.py) trained by real
worker processes over emulated links, dense and with each compressor, for time
per step, traffic, phase breakdown and time to accuracy.

    python -m benchmarks.e2e --models=xml --compressors=none,DGC:ratio=0.001 \\
        --links=unlimited,1gbit --workers=2 --engines=tf.distribute

Every (engine, workers, link) gets its own emulated cluster (one network
namespace per worker, veth pairs to a bridge, each link shaped both ways with
tc tbf: tests.cluster.netns_cluster; needs root), first probed for the latency
and bandwidth its collectives actually get. Each finished run is appended to
OUTPUT/runs.jsonl at once, so a grid that stopped resumes where it stopped (runs
already there are skipped); OUTPUT/e2e.md and the PNG plots are rewritten from
that file after every run. Namespaces and worker processes are removed on exit,
also after Ctrl-C or a failed worker.
"""
import gzip
import json
import pathlib
import re
import shutil
import signal
import sys
import tempfile
import time

from absl import app, flags

from benchmarks.e2e import report
from benchmarks.harness import compression_specs, prediction
from models import registry
from tfcomp.costs.network import HALF_ALLREDUCE
from tfcomp.analysis.model.link_fit import fit_link
from tests.cluster import netns_cluster
from tests.cluster.launcher import BFC_ALLOCATOR, BFC_ALLOCATOR_HELP, Launcher
from tests.cluster.slow_link import emulated_link

FLAGS = flags.FLAGS
flags.DEFINE_list("models", ["digits_mlp"], "Models of models/registry.py.")
flags.DEFINE_string("size", "small", "The models' size setting (small, full; some models have more).")
flags.DEFINE_list("compressors", ["none", "FP16", "EFSignSGD", "DGC", "PowerSGD"],
                  "'none' (the engine's own dense allreduce) or tfcomp compressors, each optionally with "
                  "knobs: 'DGC:ratio=0.001', 'PowerSGD:rank=2', or 'plan:PATH', the per-tensor tfcomp.Plan that "
                  "`python -m tfcomp.analysis plan --output=PATH` wrote (PATH from the repository root; it may "
                  "name {model}, {workers} and {link}, for a plan per cell of the grid).")
flags.DEFINE_list("engines", ["tf.distribute"], "tf.distribute (MultiWorkerMirroredStrategy workers) and/or "
                  "horovod (Horovod ranks over Gloo).")
flags.DEFINE_list("workers", ["2"], "Worker counts.")
flags.DEFINE_list("links", ["unlimited", "1gbit"], "Each worker's link: 'unlimited' (unshaped veth) or a tc "
                  "rate (2gbit, 1gbit, 500mbit, 100mbit).")
flags.DEFINE_bool("shared_loopback", False, "Instead of a cluster, run all workers on one namespace's "
                  "loopback shaped to the rate: all workers and both directions share one budget, unlike a "
                  "network. Kept for comparison with the main job; recorded as link_mode=shared_loopback.")
flags.DEFINE_bool("pin_cores", True, "Run each worker of a cluster on CPU cores of its own (taskset), as "
                  "workers on separate machines would, when there are at least as many cores as workers; "
                  "otherwise they share them. Unpinned workers on one machine each start thread pools "
                  "sized for all its cores and contend. Recorded per run as worker_cores.")
flags.DEFINE_integer("steps", 300, "Training steps per run.", lower_bound=2)
flags.DEFINE_integer("warmup", 20, "Steps not timed.", lower_bound=1)
flags.DEFINE_integer("eval_every", 50, "Steps between test-accuracy evaluations.", lower_bound=1)
flags.DEFINE_integer("global_batch", None, "Global batch size (default: the model's, models/registry.py).",
                     lower_bound=1)
flags.DEFINE_float("lr", None, "Learning rate of the model's optimizer (SGD with momentum 0.9; Adam for "
                   "bert) (default: the model's, models/registry.py).")
flags.DEFINE_integer("timeline_steps", 10, "Steps after warm-up each worker records with tfcomp's Timeline "
                     "for the phase breakdown (0: none); they are left out of the step times.", lower_bound=0)
flags.DEFINE_bool("probe", True, "Probe each cluster's allreduce and allgather latency and bandwidth first.")
flags.DEFINE_integer("probe_max_bytes", 4 << 20, "Largest probe message per worker.")
flags.DEFINE_float("target_fraction", 0.97, "Time to accuracy is to this fraction of dense training's final "
                   "test accuracy on the same model (the best over the grid's dense runs).")
flags.DEFINE_string("output", "benchmarks/results/e2e", "Directory for runs.jsonl, e2e.md and the plots.")
flags.DEFINE_bool("resume", True, "Skip runs already in OUTPUT/runs.jsonl (false: start the file anew).")
flags.DEFINE_bool("report_only", False, "Only rewrite OUTPUT/e2e.md and the plots from OUTPUT/runs.jsonl.")
flags.DEFINE_bool("repredict", False, "With --report_only: first predict every run again from its saved profile "
                  "with this tfcomp.analysis (the measurements stay as they were recorded).")
flags.DEFINE_bool("bfc_allocator", True, BFC_ALLOCATOR_HELP)
flags.DEFINE_bool("predict", False, "After each model's dense run on a cluster, record a tfcomp.analysis profile "
                  "there (the dense run's Timeline trace, the cluster's probe, every compressor of the grid "
                  "measured on the workers; saved as OUTPUT/profiles/*.json, with every worker's dense trace "
                  "beside it as *.WORKER.trace.json.gz) and record each run's predicted "
                  "step time beside the measured one. Needs --timeline_steps > 0 and 'none' before the "
                  "compressors.")
flags.DEFINE_integer("auto_audit_steps", 0, "Runs of compression 'auto': tfcomp.Auto's audit_steps (after it "
                     "decides, the kept configuration, dense and every single candidate timed side by side, this "
                     "many steps each).", lower_bound=0)
flags.DEFINE_integer("timeout_s", 900, "Per-run limit; workers still running then are killed.", lower_bound=10)

def _rate(link):
    return None if link == "unlimited" else link


def _predicted_ms(out, record):
    return prediction.predicted_step_ms(out / record["profile"], record["engine"], record["workers"],
                                        record.get("runs_with", record["compression"]),
                                        prediction.burst_bytes(record["link"]))


def repredict(runs_path, out):
    """Every run with a profile predicted again (runs.jsonl rewritten)."""
    records = load_runs(runs_path)
    for record in records:
        if record.get("profile") and record.get("status") == "ok":
            try:
                record["predicted_step_ms"] = _predicted_ms(out, record)
            except FileNotFoundError:  # a plan file of a run's work directory, gone since
                record["predicted_step_ms"] = None
    runs_path.write_text("".join(json.dumps(r) + "\n" for r in records))


def run_key(record):
    return tuple(record[k] for k in ("model", "size", "compression", "engine", "workers", "link", "link_mode"))


def load_runs(path):
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def probe(launcher, work_dir):
    ok, result, log = launcher.run("benchmarks.e2e.link_probe_worker", [f"--max_bytes={FLAGS.probe_max_bytes}"],
                                   work_dir / "probe")
    if not ok:
        raise RuntimeError(f"the link probe failed: {log}")
    fitted = {}
    for kind in ("allreduce", "allgather"):
        link, error = fit_link(result[kind], kind, launcher.workers)
        fitted[kind] = {"alpha_us": 1e6 * link.alpha_s, "gbps": 8 * link.bandwidth_bytes_per_s / 1e9,
                        "fit_rms_relative_error": error, "samples": result[kind]}
    fitted[HALF_ALLREDUCE] = {"samples": result[HALF_ALLREDUCE]}  # the profile's float16 allreduce extra
    return fitted


def record_profile(launcher, work_dir, model, measured, path):
    """The profile of a model on this cluster, from its dense run's Timeline trace and the
    cluster's probe: the path it is saved at."""
    if not measured:
        raise app.UsageError("--predict needs the link probe (drop --noprobe)")
    probe_path = work_dir / "probe.json"
    probe_path.write_text(json.dumps({"workers": launcher.workers, **{k: v["samples"] for k, v in measured.items()}}))
    traces = dense_traces(launcher.engine, work_dir, model, launcher.workers)
    saved = prediction.record_profile(launcher, traces[0], FLAGS.compressors, path, work_dir / f"{model}-profile",
                                      f"{model} ({FLAGS.size})", link_probe=probe_path,
                                      sgd_momentum=registry.MODELS[model].sgd_momentum)
    keep_traces(traces, path)
    return saved


def dense_traces(engine, work_dir, model, workers):
    """Every worker's Timeline trace of a model's dense run, worker 0's first. The e2e
    worker records them beside its --out: WORKER.json for tf.distribute, the run's directory for
    Horovod's ranks."""
    run = work_dir / f"{model}-none"
    if engine == "horovod":
        return [run.parent / f"{run.name}.timeline" / f"rank{r}.trace.json" for r in range(workers)]
    return [run / f"worker{w}.json.timeline" / f"worker{w}.trace.json" for w in range(workers)]


def keep_traces(traces, profile_path):
    """The traces a profile was made from, gzipped beside it (PROFILE.WORKER.trace.json.gz), so
    that a change to how profiles are read from traces can be checked on the grid's own runs
    (tfcomp.analysis.measure.from_timeline reads them as they are)."""
    for trace in traces:
        if trace.exists():
            target = profile_path.with_name(f"{profile_path.stem}.{trace.name}.gz")
            with open(trace, "rb") as src, gzip.open(target, "wb") as dst:
                shutil.copyfileobj(src, dst)


def grid():
    for engine in FLAGS.engines:
        for workers in (int(w) for w in FLAGS.workers):
            for link in FLAGS.links:
                yield engine, workers, link, [(m, c) for m in FLAGS.models for c in FLAGS.compressors]


def _cluster(workers, link):
    if FLAGS.shared_loopback:
        return emulated_link(_rate(link) or "100gbit")
    return netns_cluster.emulated_cluster(workers, _rate(link), pin_cores=FLAGS.pin_cores)


def main(argv):
    del argv
    for engine in FLAGS.engines:
        if engine not in ("tf.distribute", "horovod"):
            raise app.UsageError(f"--engines takes tf.distribute and horovod, got {engine!r}")
    for model in FLAGS.models:
        if model not in registry.MODELS or FLAGS.size not in registry.MODELS[model].sizes:
            raise app.UsageError(f"no model {model!r} of size {FLAGS.size!r}; models/registry.py has "
                                 + ", ".join(f"{n} ({', '.join(s.sizes)})" for n, s in registry.MODELS.items()))
    for link in FLAGS.links:
        try:
            report.nominal_gbps(link)
        except ValueError as err:
            raise app.UsageError(f"--links: {err}") from err
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # cleans up as Ctrl-C does
    # Started as a background job (`cmd &` in a script), a process inherits SIGINT ignored and
    # Python then installs no KeyboardInterrupt: a SIGINT must still stop the grid and clean up.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    out = pathlib.Path(FLAGS.output)
    out.mkdir(parents=True, exist_ok=True)
    runs_path = out / "runs.jsonl"
    if FLAGS.repredict and not FLAGS.report_only:
        raise app.UsageError("--repredict goes with --report_only")
    if FLAGS.report_only:
        if FLAGS.repredict:
            repredict(runs_path, out)
        report.write(load_runs(runs_path), out, FLAGS.target_fraction)
        print(f"Rewrote {out / 'e2e.md'} and the plots from {runs_path}.")
        return
    if not FLAGS.resume and runs_path.exists():
        runs_path.unlink()
    done = {run_key(r) for r in load_runs(runs_path) if r.get("status") == "ok"}
    mode = "shared_loopback" if FLAGS.shared_loopback else "cluster"
    total = sum(len(runs) for *_, runs in grid())
    index = 0
    with tempfile.TemporaryDirectory(prefix="tfcomp-e2e-") as tmp:
        for engine, workers, link, runs in grid():
            keys = [(m, FLAGS.size, c, engine, workers, link, mode) for m, c in runs]
            if all(k in done for k in keys):
                index += len(runs)
                continue
            with _cluster(workers, link) as cluster:
                where = dict(prefix=cluster) if FLAGS.shared_loopback else dict(cluster=cluster)
                launcher = Launcher(engine, workers, **where, timeout_s=FLAGS.timeout_s,
                                    env=BFC_ALLOCATOR if FLAGS.bfc_allocator else None)
                work_dir = pathlib.Path(tmp) / f"{engine}-{workers}-{link}"
                measured = probe(launcher, work_dir) if FLAGS.probe else None
                plan_gbps = measured["allreduce"]["gbps"] if measured else report.nominal_gbps(link)
                profile_paths = {m: out / "profiles" / f"{engine}-{workers}w-{link}-{m}.json" for m in FLAGS.models}
                # A resumed grid keeps the profiles its dense runs recorded.
                profiles = {m: path for m, path in profile_paths.items() if FLAGS.predict and path.exists()}
                for (model, compression), key in zip(runs, keys):
                    index += 1
                    if key in done:
                        continue
                    record = dict(zip(("model", "size", "compression", "engine", "workers", "link", "link_mode"),
                                      key), probe=measured, bfc_allocator=FLAGS.bfc_allocator,
                                  worker_cores=[list(c) for c in getattr(cluster, "cores", ())])
                    before = launcher.link_stats()
                    started = time.monotonic()
                    spec = registry.MODELS[model]
                    runs_with = compression_specs.for_cluster(compression, model, workers, link)
                    ok, result, log = launcher.run("benchmarks.e2e.worker", [
                        f"--model={model}", f"--size={FLAGS.size}", f"--compression={runs_with}",
                        f"--steps={FLAGS.steps}", f"--warmup={FLAGS.warmup}", f"--eval_every={FLAGS.eval_every}",
                        f"--global_batch={FLAGS.global_batch or spec.batch_size}",
                        f"--lr={FLAGS.lr if FLAGS.lr is not None else spec.learning_rate}",
                        f"--bandwidth_gbps={plan_gbps}", f"--timeline_steps={FLAGS.timeline_steps}",
                        f"--auto_audit_steps={FLAGS.auto_audit_steps}"],
                        work_dir / f"{model}-{re.sub(r'[^A-Za-z0-9_.=-]', '_', compression)}")
                    record.update(result or {}, status="ok" if ok else "failed", error=log or None,
                                  wall_s=time.monotonic() - started, command=_command())
                    record.update(compression=compression, runs_with=runs_with)  # the grid's spec names the run
                    record["link_worker0"] = launcher.link_stats(before)
                    if FLAGS.predict and ok:
                        if compression == "none":
                            profiles[model] = record_profile(launcher, work_dir, model, measured, profile_paths[model])
                        if model in profiles:
                            record["profile"] = str(profiles[model].relative_to(out))
                            record["predicted_step_ms"] = _predicted_ms(out, record)
                    with open(runs_path, "a") as f:
                        f.write(json.dumps(record) + "\n")
                    print(f"[{index}/{total}] {_describe(record)}", flush=True)
                    report.write(load_runs(runs_path), out, FLAGS.target_fraction)
    print(f"\nResults: {runs_path}, {out / 'e2e.md'} and the plots beside them.")


def _command():
    return " ".join(["python", "-m", "benchmarks.e2e", *sys.argv[1:]])


def _describe(r):
    where = f"{r['model']} ({r['size']}) · {r['compression']} · {r['engine']} · {r['workers']} workers · {r['link']}"
    if r["status"] != "ok":
        return f"{where}: FAILED ({r['error'].splitlines()[0]})"
    return (f"{where}: {r['step_ms']:.1f} ms/step (p10 {r['step_ms_p10']:.1f}, p90 {r['step_ms_p90']:.1f}), "
            f"sends {r['dense_bytes'] / r['bytes_per_step']:.1f}x less than dense, "
            + ("not evaluated" if r["final_accuracy"] is None else f"final accuracy {r['final_accuracy']:.3f}")
            + f", {r['wall_s']:.0f} s")


if __name__ == "__main__":
    app.run(main)
