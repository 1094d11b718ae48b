"""The soak's report: a long run of tfcomp.Auto with re-planning on links that
change on a schedule (python -m benchmarks.long_run --compressors=auto
--minutes=60 --auto_replan_every=200 --link_schedule=unshaped:10,100mbit:10
--logs=DIR), read from DIR/auto: resident memory, step time, traces and Auto's
decisions per link period, and whether each stayed flat or bounded.

    python -m benchmarks.long_run.soak --run_dir=DIR/auto --command="..."

Writes <output>/soak.md, .json and .png; exits 1 if a check failed.
"""
import json
import pathlib
import sys

from absl import app, flags

from benchmarks.harness import record
from benchmarks.long_run import soak_report

FLAGS = flags.FLAGS
flags.DEFINE_string("run_dir", None, "The long run's directory for the auto run (worker*.json, "
                    "link_changes.jsonl).")
flags.DEFINE_string("command", None, "The long-run command that made run_dir, for the report.")
flags.DEFINE_string("commit", None, "The commit the run ran, for the report.")
flags.DEFINE_string("output", "benchmarks/results", "Directory for soak.md, .json and .png.")
flags.DEFINE_float("rss_growth_mib_per_hour", 50.0, "Largest RSS growth allowed after warm-up, per hour (least "
                   "squares over each worker's samples from the second link period on).")
flags.DEFINE_float("step_time_drift", 0.25, "Largest change of a link rate's median step time, its last "
                   "period against its first (Auto's own drift, by default).")
flags.DEFINE_integer("traces_per_plan", 6, "Most traces one profiling cycle may add (its trials, dense and the "
                     "one it keeps): bounded by re-plans, not by steps.")


def main(argv):
    del argv
    run = pathlib.Path(FLAGS.run_dir)
    workers = [json.loads(p.read_text()) for p in sorted(run.glob("worker*.json"))]
    if len(workers) < 2:
        raise app.UsageError(f"{run} has {len(workers)} worker results; the soak needs every worker's")
    changes = [json.loads(line) for line in (run / "link_changes.jsonl").read_text().splitlines() if line]
    table, decisions, found = soak_report.summarize(workers, changes, soak_report.Limits(
        FLAGS.rss_growth_mib_per_hour, FLAGS.step_time_drift, FLAGS.traces_per_plan))
    machine = record.machine()
    minutes = (workers[0]["samples"][-1]["unix_time"] - workers[0]["samples"][0]["unix_time"]) / 60
    out = pathlib.Path(FLAGS.output)
    out.mkdir(parents=True, exist_ok=True)
    soak_report.plot(out / "soak.png", workers, changes, decisions)
    payload = {"command": FLAGS.command, "commit": FLAGS.commit, "machine": machine, "periods": table,
               "decisions": decisions, "checks": [{"what": w, "ok": ok, "value": v} for w, ok, v in found],
               "steps": workers[0]["steps"]}
    text = soak_report.markdown(table, decisions, found, machine, minutes, FLAGS.command, FLAGS.commit)
    _, md_path = record.write_results(out, "soak", payload, text)
    print(md_path.read_text())
    if not all(ok for _, ok, _ in found):
        sys.exit(1)


if __name__ == "__main__":
    flags.mark_flag_as_required("run_dir")
    app.run(main)
