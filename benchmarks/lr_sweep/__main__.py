"""Training of the convergence benchmark's tasks over a grid of learning rates,
dense or with one compressor: the evidence for the rates each task trains at
(benchmarks/harness/convergence_tasks.py).

    python -m benchmarks.lr_sweep --tasks=lstm_lm --name=dense_lr_sweep     # about 3 minutes on 2 cores
    python -m benchmarks.lr_sweep --compressor=SignSGD --optimizers=sgd_momentum --name=sign_sgd_lr_sweep

A compressor is judged against dense training at the task's learning rate, so that
rate must be one at which dense training converges in the task's epochs: a dense
run still climbing when its learning rate has decayed to 0 makes any compressor's
slower start look like lower final accuracy. The grid is the task's configured
rate times --factors; a rate converges where dense ends within --converged of the
best final accuracy in the grid. The configured rate must converge; the language
model's is the smallest that does (a larger one trains no better and sits nearer
the edge of stability). SignSGD's aggregate is +-1 per element, so under SGD its
rate is every weight's step and its grid is around the task's own SignSGD rate.
Writes <name>.{md,json} and one PNG per task x optimizer under --out.
"""
import json
import pathlib
import statistics

from absl import app, flags

import tfcomp
from benchmarks.harness import record, timing
from benchmarks.harness.convergence_tasks import OPTIMIZERS, TASKS, train_seed

FLAGS = flags.FLAGS


def define_flags():
    flags.DEFINE_list("tasks", list(TASKS), f"Tasks to train: {', '.join(TASKS)}.")
    flags.DEFINE_list("optimizers", list(OPTIMIZERS), f"Optimizers: {', '.join(OPTIMIZERS)}.")
    flags.DEFINE_string("compressor", "", "A tfcomp compressor (class name, default arguments) to train with, "
                        "on every eligible tensor; empty: dense.")
    flags.DEFINE_integer("warmup_epochs", 0, "Dense epochs before the compressor starts.")
    flags.DEFINE_list("factors", ["0.25", "0.5", "1", "2"], "The grid: each task's configured learning rate "
                      "times these.")
    flags.DEFINE_integer("seeds", 0, "Runs per learning rate; 0: each task's own (3 for the digits tasks, 1 for "
                         "the language model).")
    flags.DEFINE_integer("workers", 2, "Emulated workers.")
    flags.DEFINE_integer("evals_per_epoch", 2, "Held-out evaluations per epoch.", lower_bound=1)
    flags.DEFINE_float("converged", 0.005, "A rate converges if dense ends within this of the grid's best final "
                       "accuracy.")
    flags.DEFINE_string("out", "benchmarks/results", "Where <name>.{md,json} and the PNGs go.")
    flags.DEFINE_string("name", "lr_sweep", "Base name of the result files.")


def sweep(task, optimizer_name, factors, seeds, converged, compressor="", **training):
    """[{learning_rate, factor, final (mean over seeds), steps_to_target (median), steps, metric (mean
    curve), converges}] for the task's rate times each factor, dense or with compressor (a class name)."""
    factory = getattr(tfcomp, compressor) if compressor else None
    rows = []
    for factor in sorted(factors):
        lr = task.learning_rate(optimizer_name, compressor) * factor
        runs = [train_seed(task, optimizer_name, factory, seed, lr, **training) for seed in range(1, seeds + 1)]
        reached = [r["steps_to_target"] for r in runs if r["steps_to_target"] is not None]
        rows.append({"learning_rate": lr, "factor": factor, "final": statistics.fmean(r["final"] for r in runs),
                     "steps_to_target": statistics.median(reached) if len(reached) > len(runs) / 2 else None,
                     "steps": runs[0]["steps"],
                     "metric": [statistics.fmean(m) for m in zip(*(r["metric"] for r in runs))],
                     "seconds": round(sum(r["seconds"] for r in runs), 1)})
        print(f"[{task.name} {optimizer_name}] lr {lr:g}: final {rows[-1]['final']:.3f}, target at step "
              f"{rows[-1]['steps_to_target']}", flush=True)
    best = max(r["final"] for r in rows)
    for r in rows:
        r["converges"] = r["final"] >= best - converged
    return rows


def markdown(results):
    lines = [f"# {FLAGS.compressor or 'Dense'} training over learning rates\n",
             f"`{record.command_line('benchmarks.lr_sweep')}`\n",
             f"{FLAGS.workers} emulated workers, the learning rate cosine-decayed to 0 over each task's epochs, "
             "final held-out accuracy the mean over seeds, steps to target the median. Converges: final accuracy "
             f"within {FLAGS.converged:g} of the grid's best; configured: the rate "
             "benchmarks/harness/convergence_tasks.py trains the task at.\n", f"Machine: {json.dumps(record.machine())}\n"]
    for key, block in results.items():
        task = TASKS[block["task"]]
        lines += [f"\n## {task.describe}, {block['optimizer']} (target {task.target}, {task.epochs} epochs, "
                  f"{block['seeds']} seed{'s' if block['seeds'] > 1 else ''})\n",
                  "| learning rate | final | steps to target | converges | configured |", "|---|---|---|---|---|"]
        for r in block["rows"]:
            steps = "never" if r["steps_to_target"] is None else f"{r['steps_to_target']:g}"
            lines.append(f"| {r['learning_rate']:g} | {r['final']:.3f} | {steps} | {'yes' if r['converges'] else 'no'} "
                         f"| {'yes' if r['factor'] == 1 else ''} |")
        lines.append(f"\n![{key}]({key}.png)\n")
    return "\n".join(lines) + "\n"


def plot(key, block, out):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    for r in block["rows"]:
        ax.plot(r["steps"], r["metric"], lw=2.5 if r["factor"] == 1 else 1.2,
                label=f"lr {r['learning_rate']:g}" + (" (configured)" if r["factor"] == 1 else ""))
    ax.axhline(TASKS[block["task"]].target, color="grey", ls=":", lw=1)
    ax.set(title=f"{FLAGS.compressor or 'dense'} {block['task']}, {block['optimizer']}", xlabel="step",
           ylabel="held-out accuracy", ylim=(0, 1))
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(out / f"{key}.png", dpi=90)
    plt.close(fig)


def main(argv):
    del argv
    timing.pin_threads(2, 4)
    out = pathlib.Path(FLAGS.out)
    factors = [float(f) for f in FLAGS.factors]
    results = {}
    for task_name in FLAGS.tasks:
        task = TASKS[task_name]
        seeds = FLAGS.seeds or task.seeds
        for optimizer_name in FLAGS.optimizers:
            key = f"{FLAGS.name}_{task_name}_{optimizer_name}"
            rows = sweep(task, optimizer_name, factors, seeds, FLAGS.converged, FLAGS.compressor,
                         workers=FLAGS.workers, evals_per_epoch=FLAGS.evals_per_epoch,
                         warmup_epochs=FLAGS.warmup_epochs)
            results[key] = {"task": task_name, "optimizer": optimizer_name, "seeds": seeds, "rows": rows}
            record.write_results(out, FLAGS.name, {"machine": record.machine(), "results": results,
                                                    "command": record.command_line("benchmarks.lr_sweep")},
                                  markdown(results))
            plot(key, results[key], out)
    print(f"wrote {out / (FLAGS.name + '.md')}")


if __name__ == "__main__":
    define_flags()
    app.run(main)
