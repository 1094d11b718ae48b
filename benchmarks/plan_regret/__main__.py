"""Espresso's planner and tfcomp.Auto measured: for every model and link of a grid, the
per-tensor plan that `python -m tfcomp.analysis plan` makes from the cell's saved
profile, and compression=tfcomp.Auto(), trained by real workers on the emulated
cluster (benchmarks/e2e/) beside dense and every single compressor, and their
regret: how much slower their measured step is than the fastest measured
configuration (dense or one compressor on every tensor).

    python -m benchmarks.plan_regret --models=xml,resnet50 --links=unlimited,1gbit,100mbit

With --auto_audit_steps, each Auto run then audits its choice: the configuration it
kept, dense and every single candidate timed side by side in interleaved rounds of the
same process (tfcomp.Auto's audit_steps), so that the regret compares runs of the same
minutes rather than runs minutes or days apart; --noseparate_runs leaves out the
separate dense, single and plan runs and reports the audits alone:

    python -m benchmarks.plan_regret --noseparate_runs --auto_audit_steps=60 --repeats=3

Writes OUTPUT/plans/ (each cell's plan), OUTPUT/runs.jsonl with e2e.md and its plots
(the e2e harness's; OUTPUT/repeat<k>/ for each further --repeats), and OUTPUT/regret.md
with regret.png (and audit.png from the audits). Needs root (network
namespaces), as the e2e harness does. Step times only: the runs are too short to
train the models to accuracy.
"""
import json
import pathlib
import statistics
import subprocess
import sys

from absl import app, flags

from benchmarks.harness import plots, prediction
from benchmarks.plan_regret import audit_report
from tfcomp.analysis.model import planner
from tfcomp.analysis.model.profile import Profile
from tfcomp.analysis.model.simulator import burst_seconds

FLAGS = flags.FLAGS
flags.DEFINE_list("models", ["xml", "resnet50"], "Models of models/registry.py.")
flags.DEFINE_string("size", "small", "The models' size setting.")
flags.DEFINE_list("links", ["unlimited", "1gbit", "100mbit"], "Links of the grid (as benchmarks.e2e's --links).")
flags.DEFINE_list("workers", ["2"], "Worker counts.")
flags.DEFINE_list("compressors", ["FP16", "EFSignSGD", "DGC", "PowerSGD"],
                  "The single compressors to measure beside dense and the plan; the plan chooses among the "
                  "profile's compressors, which should be these.")
flags.DEFINE_string("profiles", "benchmarks/results/e2e/validation-small/profiles",
                    "Directory of saved profiles named ENGINE-<workers>w-<link>-<model>.json (what "
                    "benchmarks.e2e --predict records).")
flags.DEFINE_string("engine", "tf.distribute", "The engine the profiles were recorded with, and the runs use.")
flags.DEFINE_integer("steps", 100, "Training steps of each dense, single-compressor and plan run.", lower_bound=2)
flags.DEFINE_integer("auto_steps", 200, "Training steps of each Auto run: with its defaults it plans at step 30, "
                     "measures dense and its three trials interleaved and has settled by step 136.", lower_bound=2)
flags.DEFINE_integer("warmup", 10, "Steps not timed.", lower_bound=1)
flags.DEFINE_integer("repeats", 1, "Run the grid this many times (the first in OUTPUT, the others in "
                     "OUTPUT/repeat<k>) and report each configuration's median over them: on a shared machine one "
                     "run's median step can be 10-30% off another's.", lower_bound=1)
flags.DEFINE_string("output", "benchmarks/results/plan_regret", "Directory for the plans, runs and report.")
flags.DEFINE_bool("plan_burst", False, "Plan with the shaped links' token bucket (tc tbf's burst, which "
                  "benchmarks.e2e's predictions model). The committed regret runs planned without it.")
flags.DEFINE_integer("auto_audit_steps", 0, "tfcomp.Auto's audit_steps in the Auto runs: after its decision, "
                     "the kept configuration, dense and every single candidate are timed this many steps each, "
                     "interleaved, and the report gives the kept one's regret from them. Add the audit's steps "
                     "(up to 6 configurations) to --auto_steps.", lower_bound=0)
flags.DEFINE_bool("separate_runs", True, "Run dense, each single compressor and the profile's plan in runs of "
                  "their own (false: the Auto runs alone, for their audits; needs --auto_audit_steps).")
flags.DEFINE_bool("report_only", False, "Only rewrite OUTPUT/regret.md and regret.png from OUTPUT/runs.jsonl.")

PLAN_FILE = "{model}-{workers}w-{link}.json"
DENSE, AUTO = "none", "auto"


def make_plans(out):
    """Each cell's plan, from its profile: {(model, workers, link): the plan's dict}."""
    plans = {}
    (out / "plans").mkdir(parents=True, exist_ok=True)
    for model in FLAGS.models:
        for workers in (int(w) for w in FLAGS.workers):
            for link in FLAGS.links:
                profile_path = pathlib.Path(FLAGS.profiles) / f"{FLAGS.engine}-{workers}w-{link}-{model}.json"
                if not profile_path.exists():
                    raise app.UsageError(f"no profile {profile_path}: record one with benchmarks.e2e --predict")
                profile = Profile.load(profile_path)
                burst_s = burst_seconds(prediction.burst_bytes(link), profile.allreduce) if FLAGS.plan_burst else 0.0
                result = planner.plan(profile, workers, burst_s=burst_s)
                saved = {**result.to_dict(), "profile": str(profile_path)}
                (out / "plans" / PLAN_FILE.format(model=model, workers=workers, link=link)).write_text(
                    json.dumps(saved, indent=1) + "\n")
                plans[(model, workers, link)] = saved
                print(f"{model} {workers}w {link}: plan predicted {result.iteration_s * 1e3:.1f} ms, "
                      f"dense {result.dense_s * 1e3:.1f} ms, {sum(c is not None for c in result.choices.values())}"
                      f" of {len(result.choices)} gradients compressed", flush=True)
    return plans


def plan_spec(out):
    return f"plan:{out / 'plans' / PLAN_FILE}"


def repeat_dirs(out):
    return [out] + [out / f"repeat{k}" for k in range(2, FLAGS.repeats + 1)]


def run_grid(out):
    for where in repeat_dirs(out):
        run_grid_once(out, where)


def run_grid_once(out, where):
    """The grid's dense, single-compressor and plan runs, then its Auto runs (longer)."""
    common = [sys.executable, "-m", "benchmarks.e2e", f"--models={','.join(FLAGS.models)}", f"--size={FLAGS.size}",
              f"--engines={FLAGS.engine}", f"--workers={','.join(FLAGS.workers)}", f"--links={','.join(FLAGS.links)}",
              f"--warmup={FLAGS.warmup}", "--timeline_steps=5", f"--output={where}"]
    runs = [([DENSE, *FLAGS.compressors, plan_spec(out)], FLAGS.steps, [])] if FLAGS.separate_runs else []
    runs.append(([AUTO], FLAGS.auto_steps, [f"--auto_audit_steps={FLAGS.auto_audit_steps}"]))
    for compressors, steps, extra in runs:
        command = [*common, f"--compressors={','.join(compressors)}", f"--steps={steps}", f"--eval_every={steps + 1}",
                   *extra]
        print(" ".join(command[1:]), flush=True)
        subprocess.run(command, check=True)


def cells(records, plans_dir):
    """Per (model, workers, link): {compression: its runs' record with the median step
    times over the repeats}, and the plan's dict."""
    runs = {}
    for r in records:
        if r["status"] == "ok":
            runs.setdefault((r["model"], r["workers"], r["link"]), {}).setdefault(r["compression"], []).append(r)
    out = {}
    for key, by_compression in runs.items():
        for compression, repeats in by_compression.items():
            merged = dict(repeats[0], repeats=len(repeats), autos=[r["auto"] for r in repeats if r.get("auto")],
                          each={r.get("repeat", 1): r.get("settled_step_ms") or r["step_ms"] for r in repeats})
            for field in ("step_ms", "settled_step_ms"):
                values = [r[field] for r in repeats if r.get(field) is not None]
                merged[field] = statistics.median(values) if values else None
            out.setdefault(key, {})[compression] = merged
    plans = {}
    for key in out:
        path = plans_dir / PLAN_FILE.format(model=key[0], workers=key[1], link=key[2])
        if path.exists():
            plans[key] = json.loads(path.read_text())
    return out, plans


def regret_rows(measured, plans):
    rows = []
    for key, runs in sorted(measured.items()):
        plan = next((r for c, r in runs.items() if c.startswith("plan:")), None)
        auto = runs.get(AUTO)
        if DENSE not in runs or (plan is None and auto is None):
            continue
        singles = {c: r["step_ms"] for c, r in runs.items() if not c.startswith("plan:") and c != AUTO}
        best = min(singles, key=singles.get)
        saved = plans.get(key, {})
        choices = saved.get("choices", {})
        dense_ms = singles[DENSE]
        row = {"model": key[0], "workers": key[1], "link": key[2], "dense_ms": dense_ms, "singles": singles,
               "best": best, "best_ms": singles[best]}
        if plan is not None:
            row.update(plan_ms=plan["step_ms"], predicted_ms=1e3 * saved["iteration_s"] if saved else None,
                       compressed=sum(c is not None for c in choices.values()), gradients=len(choices),
                       choices=sorted({c for c in choices.values() if c is not None}),
                       regret=plan["step_ms"] / singles[best] - 1, vs_dense=dense_ms / plan["step_ms"])
        if auto is not None and auto.get("settled_step_ms"):
            row.update(auto_ms=auto["settled_step_ms"], auto_whole_ms=auto["step_ms"],
                       auto_chose=[_chose(decided) for decided in auto["autos"]],
                       auto_regret=auto["settled_step_ms"] / singles[best] - 1,
                       auto_vs_dense=dense_ms / auto["settled_step_ms"],
                       auto_vs_dense_each=[runs[DENSE]["each"][k] / ms for k, ms in sorted(auto["each"].items())
                                           if k in runs[DENSE]["each"]])
        rows.append(row)
    return rows


def _chose(decided):
    """What one Auto run kept: 'dense', or its compressors (and on how many tensors)."""
    if decided["phase"] != "planned":
        return "dense"
    return f"{', '.join(c.split('(')[0] for c in decided['choices'])} ({decided['compressed']} tensors)"


def markdown(rows, command):
    lines = ["# Espresso's planner and tfcomp.Auto, measured", "", f"Command: `{command}`", "",
             "Real workers on the emulated cluster (benchmarks/e2e/), median ms/step (with --repeats, the median "
             "over the repeats of each run's median). **plan**: the plan "
             "`python -m tfcomp.analysis plan` makes from the cell's saved profile, run from the first step. "
             "**Auto**: `compression=tfcomp.Auto()` (default candidates: the singles below), which profiles, plans "
             "and measures its trials (the plan and the single candidates predicted fastest) while it trains; its "
             "ms/step is the median after it settled (decision, trials, warm-up of the train function it kept), and "
             "'whole run' the median over all its timed steps, profiling and trials included. Regret: ms/step "
             "over the fastest single configuration measured (dense or one compressor "
             "on every tensor) minus 1; the targets are Auto within 5% of it and never more than 2% slower than "
             "dense. Negative: faster than every single configuration. 'Each repeat': dense's run over Auto's settled "
             "steps in the same repeat (a few minutes apart).", "",
             "| model | workers | link | dense ms | best single | best ms | plan ms (predicted) | plan uses "
             "| plan regret | Auto ms (whole run) | Auto kept, each repeat | Auto regret | Auto vs dense "
             "| Auto vs dense, each repeat |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        plan = auto = "| | |"
        if "plan_ms" in r:
            predicted = f" ({r['predicted_ms']:.1f})" if r["predicted_ms"] is not None else ""
            uses = f"{r['compressed']}/{r['gradients']} gradients: {', '.join(r['choices']) or 'none'}"
            plan = f"| {r['plan_ms']:.1f}{predicted} | {uses} | {r['regret']:+.1%}"
        if "auto_ms" in r:
            auto = (f"| {r['auto_ms']:.1f} ({r['auto_whole_ms']:.1f}) | {' / '.join(r['auto_chose'])} "
                    f"| {r['auto_regret']:+.1%} "
                    f"| {r['auto_vs_dense']:.2f}x | {' / '.join(f'{x:.2f}x' for x in r['auto_vs_dense_each'])}")
        else:
            auto = "| | | | |"
        lines.append(f"| {r['model']} | {r['workers']} | {r['link']} | {r['dense_ms']:.1f} | {r['best']} "
                     f"| {r['best_ms']:.1f} {plan} {auto} |")
    autos = [r for r in rows if "auto_ms" in r]
    if autos:
        worst = max(autos, key=lambda r: r["auto_regret"])
        slowest = min(autos, key=lambda r: r["auto_vs_dense"])
        lines += ["", f"Auto: largest regret {worst['auto_regret']:+.1%} ({worst['model']}, {worst['link']}); "
                  f"slowest against dense {slowest['auto_vs_dense']:.2f}x ({slowest['model']}, {slowest['link']}); "
                  f"faster than every single configuration in {sum(r['auto_regret'] < 0 for r in autos)} of "
                  f"{len(autos)} cells.", ""]
    return "\n".join(lines) + "\n"


def plot(path, rows):
    compressors = sorted({c for r in rows for c in r["singles"] if c != DENSE})
    series = [(c, [r["dense_ms"] / r["singles"][c] if c in r["singles"] else 0 for r in rows]) for c in compressors]
    series.append(("plan", [r.get("vs_dense", 0) for r in rows]))
    series.append(("Auto (settled)", [r.get("auto_vs_dense", 0) for r in rows]))
    plots.speedup_bars(path, [f"{r['model']}\n{r['link']}" for r in rows], series,
                      "step speed-up over dense (measured)", colors={"plan": "black", "Auto (settled)": "dimgrey"})


def write_report(out, command):
    records = [dict(json.loads(line), repeat=k)
               for k, where in enumerate([out, *sorted(out.glob("repeat*"), key=lambda p: int(p.name[len("repeat"):]))],
                                 start=1) if (where / "runs.jsonl").exists()
               for line in (where / "runs.jsonl").read_text().splitlines() if line.strip()]
    rows = regret_rows(*cells(records, out / "plans"))
    audits = audit_report.rows(records)
    text = markdown(rows, command) if rows else f"# tfcomp.Auto's audits\n\nCommand: `{command}`\n"
    (out / "regret.md").write_text(text + audit_report.markdown(audits))
    if rows:
        plot(out / "regret.png", rows)
    if audits:
        audit_report.plot(out / "audit.png", audits)
    print(f"\n{out / 'regret.md'}", flush=True)


def recorded_command(report):
    """The command an earlier report names, or None."""
    if report.exists():
        for line in report.read_text().splitlines():
            if line.startswith("Command: `") and line.endswith("`"):
                return line[len("Command: `"):-1]
    return None


def main(argv):
    del argv
    out = pathlib.Path(FLAGS.output)
    command = "python -m benchmarks.plan_regret " + " ".join(a for a in sys.argv[1:] if not a.startswith("--report"))
    if FLAGS.report_only:  # the report names the command that made the runs, not this one
        command = recorded_command(out / "regret.md") or command
    if not FLAGS.separate_runs and not FLAGS.auto_audit_steps:
        raise app.UsageError("--noseparate_runs measures with the Auto runs' audits: give --auto_audit_steps")
    if not FLAGS.report_only:
        if FLAGS.separate_runs:
            make_plans(out)
        run_grid(out)
    write_report(out, command)


if __name__ == "__main__":
    app.run(main)
