"""What the exchange's pipeline buys: step times before and after, in interleaved rounds.

Each round runs the end-to-end benchmark's grid (benchmarks.e2e: 2 workers on
the emulated cluster, model.fit, step times only) twice: once from a checkout of
the commit before the pipeline (--before, a git worktree made here) and once
from this tree, in alternating order. 'none' is the engine's own dense allreduce
(tf.distribute's MultiWorkerMirroredStrategy, Horovod's DistributedOptimizer),
NoCompression tfcomp's exchange running dense. Reports each configuration's
median over rounds of the run's median step time, the spread over rounds,
after/before, and each against the engine's own dense allreduce.

    python -m benchmarks.pipeline --rounds=2 --models=resnet50 --size=full --links=1gbit
"""
import json
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile

from absl import app, flags

from benchmarks.harness import plots, record

FLAGS = flags.FLAGS
flags.DEFINE_string("before", "b3b36cf", "The commit before the pipeline (the exchange as one barrier).")
flags.DEFINE_integer("rounds", 2, "Rounds; each runs both trees, in alternating order.", lower_bound=1)
flags.DEFINE_list("models", ["resnet50"], "Models of models/registry.py.")
flags.DEFINE_string("size", "full", "The models' size setting.")
flags.DEFINE_list("links", ["1gbit"], "Links, as benchmarks.e2e takes them.")
flags.DEFINE_list("engines", ["tf.distribute"], "Engines, as benchmarks.e2e takes them (tf.distribute, horovod).")
flags.DEFINE_list("compressors", ["none", "NoCompression", "FP16", "EFSignSGD", "DGC:warmup_steps=0",
                                  "PowerSGD:warmup_steps=0", "ACPSGD:warmup_steps=0"],
                  "As benchmarks.e2e takes them. The dense warm-up of the compressors that ask for one (an "
                  "epoch by default) is set to 0 so that the timed steps compress; nothing else differs from "
                  "the defaults.")
flags.DEFINE_integer("steps", 30, "Training steps per run.", lower_bound=4)
flags.DEFINE_integer("warmup", 8, "Steps not timed.", lower_bound=1)
flags.DEFINE_string("output", "benchmarks/results/pipeline", "Where NAME.{md,json,png} and the runs go.")
flags.DEFINE_string("name", "pipeline", "The result files' name.")

ROOT = pathlib.Path(__file__).resolve().parents[2]


def checkout(commit, where):
    """A worktree of commit at where, with this tree's built op library (the ops did not change)."""
    subprocess.run(["git", "worktree", "add", "--detach", "-f", str(where), commit], cwd=ROOT, check=True,
                   capture_output=True)
    changed = subprocess.run(["git", "diff", "--quiet", commit, "HEAD", "--", "custom_ops"], cwd=ROOT)
    if changed.returncode != 0:
        raise RuntimeError(f"custom_ops differ between {commit} and HEAD: build the op library in {where}")
    for library in (ROOT / "tfcomp").glob("_tfcomp_ops*.so"):
        shutil.copy(library, where / "tfcomp" / library.name)


def run_grid(tree, output):
    """benchmarks.e2e's grid from tree into output: its runs.jsonl rows."""
    command = [sys.executable, "-m", "benchmarks.e2e", f"--output={output}", f"--models={','.join(FLAGS.models)}",
               f"--size={FLAGS.size}", f"--compressors={','.join(FLAGS.compressors)}",
               f"--links={','.join(FLAGS.links)}", f"--engines={','.join(FLAGS.engines)}",
               f"--steps={FLAGS.steps}", f"--warmup={FLAGS.warmup}",
               "--timeline_steps=0", "--eval_every=100000", "--noprobe", "--noresume"]
    subprocess.run(command, cwd=tree, check=True)
    return [json.loads(line) for line in (pathlib.Path(output) / "runs.jsonl").read_text().splitlines()]


def key(row):
    return row["model"], row["engine"], row["link"], row["compression"]


def report(rounds, commit_after):
    """(markdown, payload) from {label: [rows of each round]}."""
    cells = sorted({key(r) for rows in rounds["after"] for r in rows})
    ms = {label: {cell: [r["step_ms"] for rows in per_round for r in rows if key(r) == cell and r["status"] == "ok"]
                  for cell in cells} for label, per_round in rounds.items()}
    lines = ["# The exchange's pipeline: step times before and after", "",
             f"`{record.command_line('benchmarks.pipeline')}` on {record.cpu_model()} "
             f"({record.machine()['cpus']} CPUs), {record.machine()['date']}.", "",
             f"Before: {FLAGS.before} (the exchange as one barrier after backward). After: {commit_after} (buckets "
             "in backward order, each exchanged once its gradients are ready). 2 workers on the emulated cluster, "
             "model.fit, SGD with momentum; 'none' is the engine's own dense allreduce. "
             f"{FLAGS.rounds} rounds, each running both trees in alternating order; ms/step: the median over "
             "rounds of each run's median step time (its range over rounds in brackets).", "",
             "| model | engine | link | compression | before ms | after ms | after/before | before vs none | "
             "after vs none |", "|---|---|---|---|---|---|---|---|---|"]
    rows = []
    for cell in cells:
        model, engine, link, compression = cell
        before, after = ms["before"].get(cell), ms["after"].get(cell)
        if not before or not after:
            continue
        none_before = ms["before"].get((model, engine, link, "none")) or [float("nan")]
        none_after = ms["after"].get((model, engine, link, "none")) or [float("nan")]
        row = {"model": model, "engine": engine, "link": link, "compression": compression, "before_ms": before,
               "after_ms": after,
               "after_over_before": statistics.median(after) / statistics.median(before),
               "before_speedup_over_none": statistics.median(none_before) / statistics.median(before),
               "after_speedup_over_none": statistics.median(none_after) / statistics.median(after)}
        rows.append(row)
        lines.append(f"| {model} ({FLAGS.size}) | {engine} | {link} | {compression} | {statistics.median(before):.0f} "
                     f"[{min(before):.0f}-{max(before):.0f}] | {statistics.median(after):.0f} "
                     f"[{min(after):.0f}-{max(after):.0f}] | {row['after_over_before']:.2f}x | "
                     f"{row['before_speedup_over_none']:.2f}x | {row['after_speedup_over_none']:.2f}x |")
    return "\n".join(lines) + "\n", rows


def main(argv):
    del argv
    output = pathlib.Path(FLAGS.output).resolve()
    output.mkdir(parents=True, exist_ok=True)
    commit_after = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                  text=True, check=True).stdout.strip()
    rounds = {"before": [], "after": []}
    with tempfile.TemporaryDirectory(prefix="tfcomp-pipeline-before-") as scratch:
        before_tree = pathlib.Path(scratch) / "tree"
        checkout(FLAGS.before, before_tree)
        try:
            for r in range(FLAGS.rounds):
                order = [("before", before_tree), ("after", ROOT)]
                for label, tree in order if r % 2 == 0 else order[::-1]:
                    print(f"round {r + 1}/{FLAGS.rounds}: {label}", flush=True)
                    rounds[label].append(run_grid(tree, output / "runs" / FLAGS.name / f"round{r + 1}-{label}"))
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(before_tree)], cwd=ROOT, check=False)
    markdown, rows = report(rounds, commit_after)
    record.write_results(output, FLAGS.name, {"machine": record.machine(), "command":
                                              record.command_line("benchmarks.pipeline"), "rows": rows}, markdown)
    cells = [f"{r['compression'].split(':')[0]}\n{r['engine']} {r['link']}" for r in rows]
    plots.speedup_bars(output / f"{FLAGS.name}.png", cells,
                       [("before: barrier", [r["before_speedup_over_none"] for r in rows]),
                        ("after: pipeline", [r["after_speedup_over_none"] for r in rows])],
                       "step speed-up over the engine's own dense allreduce",
                       title=f"{', '.join(FLAGS.models)} ({FLAGS.size}), 2 workers: before and after the pipeline")
    print(markdown)


if __name__ == "__main__":
    app.run(main)
