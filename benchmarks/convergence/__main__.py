"""Convergence of every compressor against dense training, on the in-process emulator.

    python -m benchmarks.convergence                  # everything (about 35 minutes on 2 cores)
    python -m benchmarks.convergence --tasks=mlp --optimizers=sgd_momentum --settings=recommended
    # every compressor by its bare name, judged against 99% of dense's final accuracy:
    python -m benchmarks.convergence --settings=defaults --name=convergence_defaults --seeds=3 \
        --target_fraction=0.99 --tolerance=0.005

For each task x optimizer (SGD with momentum 0.9, Adam; the learning rate
cosine-decayed to 0) x compressor at its recommended and its aggressive
settings: the held-out accuracy over steps, the steps to the task's target
accuracy, and the final accuracy, against dense training of the same model,
data, optimizer and epochs. Convergence does not depend on the network, so K
workers run in one process (tfcomp.testing.emulated_training). Writes
convergence.{md,json} and one PNG per task x optimizer under --out.

Verdict "like dense": final accuracy within --tolerance of dense and steps to
the target at most --max_step_ratio x dense's, warm-up steps counted. The target
is the task's own accuracy, or with --target_fraction that fraction of dense's
final accuracy (mean over seeds).
"""
import json
import math
import pathlib
import statistics

from absl import app, flags

import tfcomp
from benchmarks.harness import record, timing
from benchmarks.harness.convergence_tasks import OPTIMIZERS, TASKS, train_seed
from benchmarks.convergence.paper_dragonn import PaperRuleDRAGONN

FLAGS = flags.FLAGS


def define_flags():
    """Its flags, defined only when it runs as a command: the tests import it beside
    other benchmarks whose flags share names (--compressors, --name, --workers)."""
    flags.DEFINE_list("tasks", list(TASKS), f"Tasks to train: {', '.join(TASKS)}.")
    flags.DEFINE_list("optimizers", list(OPTIMIZERS), f"Optimizers: {', '.join(OPTIMIZERS)}.")
    flags.DEFINE_list("settings", ["recommended", "optimizer_momentum", "masking", "candidates", "buckets",
                                    "low_rank_takeover",
                                    "acpsgd_rank4", "other_warmup", "ratio_0.01", "plain_adam", "aggressive"],
                      "Compressor settings to run: defaults (every compressor by its bare name, as "
                      "compression=tfcomp.X runs it; not run by default: its results are "
                      "convergence_defaults.md), recommended, optimizer_momentum (the recommended ones with "
                      "momentum=None, under SGD), masking (the sparsifiers at the momentum_masking values 0, 0.5 "
                      "and 1 other than their default, under SGD), candidates (DGC with its threshold aimed at "
                      "its slots, candidates_per_slot=1, as in its paper; DRAGONN at 1 and 3 candidates per slot), "
                      "buckets (DRAGONN hashing to single slots, bucket_size=1, as in its paper, and to buckets of "
                      "2 slots; its default is 4), "
                      "paper_collisions (DRAGONN whose shared slots keep the last element written, as in its "
                      "paper, at 1 and 2 candidates per slot; not run by default: "
                      "--settings=recommended,candidates,paper_collisions --compressors=DRAGONN "
                      "--name=dragonn_collisions), "
                      "low_rank_takeover (PowerSGD and ACPSGD taking over the optimizer's momentum, "
                      "momentum='auto', under SGD), acpsgd_rank4 (ACPSGD at rank 4, half the recommended rank 8's "
                      "bytes), equal_bytes (ACPSGD at rank 8, PowerSGD(4)'s bytes per "
                      "step; not run by default: its results, from before rank 8 was the recommended one, are "
                      "convergence_equal_bytes.md, --settings=equal_bytes --name=convergence_equal_bytes), "
                      "other_warmup (the recommended ones with a dense epoch where they start without and without "
                      "where they start after one, under SGD), ratio_0.01 (the sparsifiers at ratio 0.01, under "
                      "SGD), plain_adam (the recommended ones under Keras' Adam, "
                      "and dense under tfcomp.FrozenVarianceAdam), aggressive.")
    flags.DEFINE_list("compressors", [], "Only these compressors (class names); empty: all.")
    flags.DEFINE_integer("workers", 2, "Emulated workers.")
    flags.DEFINE_integer("seeds", 0, "Runs per configuration (model initialisation and data order); 0: each task's "
                         "own (3 for the MLP and CNN, 1 for the language model).")
    flags.DEFINE_float("epochs_scale", 1.0, "Multiplies every task's epochs (a quick look: 0.5).")
    flags.DEFINE_integer("evals_per_epoch", 0, "Held-out evaluations per epoch: the resolution of 'steps to target'; "
                         "0: each task's own (11 on the digits tasks, every 2 steps; 8 on the language model, every "
                         "8 steps).", lower_bound=0)
    flags.DEFINE_float("tolerance", 0.01, "Final accuracy this close to dense counts as dense's.")
    flags.DEFINE_float("target_fraction", 0.0, "Count steps to this fraction of dense's final accuracy (0.99); "
                       "0: to each task's own target accuracy.", lower_bound=0.0, upper_bound=1.0)
    flags.DEFINE_float("max_step_ratio", 1.3, "Steps to target at most this many times dense's counts as dense's.")
    flags.DEFINE_string("out", "benchmarks/results", "Where convergence.{md,json} and the PNGs go.")
    flags.DEFINE_string("name", "convergence", "Base name of the result files.")
    flags.DEFINE_bool("merge", False, "Keep what an existing <name>.json has that this run does not redo: its task x "
                      "optimizer blocks, and in a block this run redoes, the rows of settings and compressors it "
                      "does not run (its dense training must come out the same; a block whose every row it redoes "
                      "is replaced whole). Each row keeps the command that made it.")


def settings(task, optimizer_name):
    """{setting: [(label, compressor factory, {"learning_rate": ..., "warmup_epochs": ...,
    "frozen_variance": ...})]}.

    Recommended: what a user should start from. The sparsifiers keep 10% of the elements
    (tfcomp.keras.optimizers.MIN_RATIO), ACPSGD runs at rank 8 (one rank-8 factor a step:
    PowerSGD(4)'s bytes), and every error-feedback compressor starts after a
    dense epoch but EFSignSGD under SGD (its one scale per tensor, switched on after
    dense training, set the MLP back for epochs). Under SGD, momentum="auto" takes over
    the optimizer's momentum for EFSignSGD and the sparsifiers (each with its default
    momentum_masking). Under Adam, every
    compressor runs with tfcomp.FrozenVarianceAdam (its variance is estimated in the
    dense epoch). The evidence for those choices: optimizer_momentum (under SGD, error
    feedback on the gradient under the optimizer's own momentum), masking (the
    sparsifiers' other momentum_masking values), candidates (DGC with its
    threshold aimed at its slots, as in its paper, and DRAGONN's threshold
    aimed at its slots and at three times them), paper_collisions (DRAGONN's
    shared slots keeping the last element written, as in its paper, not the
    largest), low_rank_takeover (PowerSGD and
    ACPSGD taking over the optimizer's momentum too), acpsgd_rank4 (ACPSGD at half the
    bytes, the recommended rank until rank 8 trained better), other_warmup and
    ratio_0.01 (under SGD, the recommended ones with the other warm-up choice, and the
    sparsifiers at 1%), plain_adam (under Adam, the same settings, dense epoch
    included, under Keras' Adam; and dense under FrozenVarianceAdam). Aggressive: the
    highest compression with no warm-up of its own (under Adam FrozenVarianceAdam's
    epoch), and EFSignSGD with error feedback on the gradient, reported as they come.
    """
    sgd = optimizer_name == "sgd_momentum"
    ratio = 0.1
    warm = {"warmup_epochs": 1}
    # Under Adam everything starts after FrozenVarianceAdam's dense epoch.
    adam = {} if sgd else {"warmup_epochs": 1, "frozen_variance": True}
    recommended = [
        ("FP16", tfcomp.FP16, {}),
        ("SignSGD", tfcomp.SignSGD, {"learning_rate": task.learning_rate(optimizer_name, "SignSGD")}),
        ("EFSignSGD", tfcomp.EFSignSGD, adam if sgd else {**warm, **adam}),
        (f"TopK({ratio})", lambda: tfcomp.TopK(ratio), {**warm, **adam}),
        ("RandomK(0.1)", lambda: tfcomp.RandomK(0.1), {**warm, **adam}),
        (f"DGC({ratio})", lambda: tfcomp.DGC(ratio), {**warm, **adam}),
        (f"DRAGONN({ratio})", lambda: tfcomp.DRAGONN(ratio), {**warm, **adam}),
        ("PowerSGD(4)", lambda: tfcomp.PowerSGD(4), {**warm, **adam}),
        ("ACPSGD(8)", lambda: tfcomp.ACPSGD(8), {**warm, **adam}),
    ]
    # What compression=tfcomp.X runs: each compressor's own defaults, the dense epoch they ask
    # for included. SignSGD keeps its own learning rate (the optimizer's setting, not the
    # compressor's); under Adam the error-feedback compressors run under FrozenVarianceAdam,
    # which freezes the variance where their warm-up ends (EFSignSGD asks for none: it
    # needs one named there).
    frozen = {} if sgd else {"frozen_variance": True}
    defaults = [
        ("FP16", tfcomp.FP16, {}),
        ("SignSGD", tfcomp.SignSGD, {"learning_rate": task.learning_rate(optimizer_name, "SignSGD")}),
        ("EFSignSGD", tfcomp.EFSignSGD, {}) if sgd else
        ("EFSignSGD, an epoch dense", tfcomp.EFSignSGD, {"warmup_epochs": 1, "frozen_variance": True}),
        *((name, getattr(tfcomp, name), frozen) for name in ("TopK", "RandomK", "DGC", "DRAGONN", "PowerSGD",
                                                           "ACPSGD")),
    ]
    return {
        "defaults": defaults,
        "recommended": recommended,
        "optimizer_momentum": [
            ("EFSignSGD(momentum=None)", lambda: tfcomp.EFSignSGD(momentum=None), warm),
            ("TopK(0.1, momentum=None)", lambda: tfcomp.TopK(0.1, momentum=None), warm),
            ("RandomK(0.1, momentum=None)", lambda: tfcomp.RandomK(0.1, momentum=None), warm),
            ("DGC(0.1, momentum=None)", lambda: tfcomp.DGC(0.1, momentum=None), warm),
            ("DRAGONN(0.1, momentum=None)", lambda: tfcomp.DRAGONN(0.1, momentum=None), warm),
        ] if sgd else [],
        "masking": [
            (f"{name}(0.1, momentum_masking={masking:g})", _sparsifier(name, momentum_masking=masking), warm)
            for name in ("TopK", "RandomK", "DGC", "DRAGONN") for masking in (0.0, 0.5, 1.0)
            if masking != getattr(tfcomp, name).default_momentum_masking
        ] if sgd else [],
        "candidates": [
            (f"{name}(0.1, candidates_per_slot={c:g})", _sparsifier(name, candidates_per_slot=c), {**warm, **adam})
            for name, c in (("DGC", 1), ("DRAGONN", 1), ("DRAGONN", 3))
        ],
        "buckets": [
            (f"DRAGONN(0.1, bucket_size={b})", _sparsifier("DRAGONN", bucket_size=b), {**warm, **adam})
            for b in (1, 2)
        ],
        "paper_collisions": [
            (f"DRAGONN(0.1, candidates_per_slot={c}, the last written kept)",
             lambda c=c: PaperRuleDRAGONN(0.1, candidates_per_slot=c), {**warm, **adam})
            for c in (1, 2)
        ],
        "low_rank_takeover": [
            ("PowerSGD(4, momentum='auto')", lambda: tfcomp.PowerSGD(4, momentum="auto"), warm),
            ("ACPSGD(8, momentum='auto')", lambda: tfcomp.ACPSGD(8, momentum="auto"), warm),
        ] if sgd else [],
        "acpsgd_rank4": [("ACPSGD(4)", lambda: tfcomp.ACPSGD(4), {**warm, **adam})],
        "equal_bytes": recommended[-1:],  # ACPSGD(8): convergence_equal_bytes.md's command
        "other_warmup": [(label, factory, {} if options.get("warmup_epochs") else warm)
                         for label, factory, options in recommended[2:]] if sgd else [],
        "ratio_0.01": [
            ("TopK(0.01)", lambda: tfcomp.TopK(0.01), warm),
            ("DGC(0.01)", lambda: tfcomp.DGC(0.01), warm),
            ("DRAGONN(0.01)", lambda: tfcomp.DRAGONN(0.01), warm),
        ] if sgd else [],
        "plain_adam": [] if sgd else [
            ("FrozenVarianceAdam, dense", None, adam),
            *((label, factory, {k: v for k, v in options.items() if k != "frozen_variance"})
              for label, factory, options in recommended[2:]),
        ],
        "aggressive": [
            ("SignSGD", tfcomp.SignSGD, {}),
            ("EFSignSGD(momentum=None)", lambda: tfcomp.EFSignSGD(momentum=None), adam),
            ("TopK(0.001)", lambda: tfcomp.TopK(0.001), adam),
            ("RandomK(0.01)", lambda: tfcomp.RandomK(0.01), adam),
            ("DGC(0.001)", lambda: tfcomp.DGC(0.001), adam),
            ("DRAGONN(0.001)", lambda: tfcomp.DRAGONN(0.001), adam),
            ("PowerSGD(1)", lambda: tfcomp.PowerSGD(1), adam),
            ("ACPSGD(1)", lambda: tfcomp.ACPSGD(1), adam),
        ],
    }


def _sparsifier(name, **knobs):
    return lambda: getattr(tfcomp, name)(0.1, **knobs)


def run_one(task, optimizer_name, factory, learning_rate=None, warmup_epochs=0, frozen_variance=False,
            target=None):
    """The configuration trained once per seed: mean final accuracy and curve, median steps to
    target (the task's own where None)."""
    seeds = FLAGS.seeds or task.seeds
    runs = [train_seed(task, optimizer_name, factory, seed, learning_rate, warmup_epochs, frozen_variance,
                       workers=FLAGS.workers, epochs_scale=FLAGS.epochs_scale,
                       evals_per_epoch=FLAGS.evals_per_epoch)
            for seed in range(1, seeds + 1)]
    run = {"steps": runs[0]["steps"], "metric": [statistics.fmean(m) for m in zip(*(r["metric"] for r in runs))],
           "final": statistics.fmean(r["final"] for r in runs), "curves": [r["metric"] for r in runs],
           "learning_rate": runs[0]["learning_rate"], "warmup_steps": runs[0]["warmup_steps"],
           "seconds": round(sum(r["seconds"] for r in runs), 1)}
    return counted_to(run, task.target if target is None else target)


def steps_to(steps, metric, target):
    """The first step whose held-out metric reached target, or None."""
    return next((s for s, m in zip(steps, metric) if m >= target), None)


def counted_to(run, target):
    """run with its steps to target: each seed's, and their median (None where most never reached it)."""
    per_seed = [steps_to(run["steps"], curve, target) for curve in run["curves"]]
    median = statistics.median(sorted(math.inf if s is None else s for s in per_seed))
    return {**run, "target": target, "steps_to_target": None if math.isinf(median) else median,
            "per_seed": [{"final": curve[-1], "steps_to_target": s} for curve, s in zip(run["curves"], per_seed)]}


def _commands(block):
    """[(command, date)] of the runs whose rows a block holds (blocks written before rows kept
    their commands hold one)."""
    return block.get("commands") or [(block["command"], block["machine"]["date"])]


def _compressor(label):
    return label.split("(")[0].split(",")[0]


def merged_block(earlier, block, settings, compressors):
    """block, with the earlier block's rows that a run of these settings and compressors (empty:
    all) does not cover, grouped by setting in the earlier order. Rows compared with different dense runs would
    not compare, so dense training must have come out the same (it is deterministic on CPU). A run
    covering every earlier row replaces the block, whatever its dense training did (a task's
    learning rate changed, say)."""
    def covered(row):
        return row["setting"] in settings and (not compressors or _compressor(row["label"]) in compressors)

    if all(covered(r) for r in earlier["runs"]):
        return block
    theirs, ours = earlier["dense"], block["dense"]
    if [theirs["final"], theirs["steps_to_target"]] != [ours["final"], ours["steps_to_target"]]:
        raise ValueError(f"dense training came out differently from the run being merged into "
                         f"(final {ours['final']} against {theirs['final']}, target at step "
                         f"{ours['steps_to_target']} against {theirs['steps_to_target']}): redo the whole "
                         "block (all its settings and compressors)")
    new = {(r["setting"], r["label"]): r for r in block["runs"]}
    rows = {}
    for r in earlier["runs"]:
        kept = new.pop((r["setting"], r["label"]), None) or (None if covered(r) else r)
        rows.setdefault(r["setting"], []).extend([kept] if kept else [])
    for r in new.values():
        rows.setdefault(r["setting"], []).append(r)
    return {**block, "runs": [r for group in rows.values() for r in group],
            "commands": _commands(earlier) + _commands(block)}


def verdict(run, dense):
    close = run["final"] >= dense["final"] - FLAGS.tolerance
    reached, dense_reached = run["steps_to_target"], dense["steps_to_target"]
    fast = reached is not None and (dense_reached is None or reached <= FLAGS.max_step_ratio * dense_reached)
    return close and fast


def _final(run):
    """The mean final accuracy, with the seeds' range where there are several."""
    finals = [seed["final"] for seed in run["per_seed"]]
    spread = f" ({min(finals):.3f}-{max(finals):.3f})" if len(finals) > 1 else ""
    return f"{run['final']:.3f}{spread}"


def _steps(steps):
    return "never" if steps is None else f"{steps:g}"


def markdown(results):
    target_words = (f"{FLAGS.target_fraction:g} of dense's final accuracy" if FLAGS.target_fraction
                    else "each task's own")
    lines = [f"# Convergence against dense training\n",
             f"`{record.command_line('benchmarks.convergence')}`\n",
             f"{FLAGS.workers} emulated workers, every eligible tensor compressed (selection off), "
             "learning rate cosine-decayed to 0, held-out accuracy evaluated every few steps (each block says "
             "how many). Each configuration runs once per seed (model initialisation "
             "and data order): final accuracy is the mean over seeds (the seeds' range beside it), steps to target "
             "the median ('never' when most seeds never reach it), the plotted curve the mean. Steps count from "
             "the first, dense warm-up steps included. Like dense: final held-out accuracy within "
             f"{FLAGS.tolerance:g} of dense's and steps to the target ({target_words}) at most "
             f"{FLAGS.max_step_ratio:g}x dense's.\n",
             f"Machine: {json.dumps(record.machine())}\n"]
    for key, block in results.items():
        task = TASKS[block["task"]]
        dense = block["dense"]
        target = block.get("target", task.target)
        lines += [f"\n## {task.describe}, {block['optimizer']} (target accuracy {target:g}, "
                  f"{len(dense['per_seed'])} seed{'s' if len(dense['per_seed']) > 1 else ''})\n"]
        if "command" in block:  # the runs that made this block (--merge keeps rows of earlier runs)
            lines += [f"`{command}` ({date})\n" for command, date in _commands(block)]
        every = dense['steps'][1] - dense['steps'][0]
        resolution = (f": one evaluation is {100 * every / dense['steps_to_target']:.1f}% of dense's steps to the "
                      "target" if dense["steps_to_target"] else "")
        lines += [f"Held-out accuracy evaluated every {every} steps{resolution}.\n"]
        lines += ["| setting | compressor | dense warm-up steps | final | vs dense | steps to target | x dense "
                  "| like dense |",
                  "|---|---|---|---|---|---|---|---|",
                  f"| | dense | | {_final(dense)} | | {_steps(dense['steps_to_target'])} | 1.00 | |"]
        for run in block["runs"]:
            ratio = (f"{run['steps_to_target'] / dense['steps_to_target']:.2f}"
                     if run["steps_to_target"] and dense["steps_to_target"] else "never")
            lines.append(f"| {run['setting']} | {run['label']} | {run['warmup_steps']} | {_final(run)} | "
                         f"{run['final'] - dense['final']:+.3f} | {_steps(run['steps_to_target'])} | {ratio} | "
                         f"{'yes' if run['like_dense'] else 'no'} |")
        lines.append(f"\n![{key}]({key}.png)\n")
    return "\n".join(lines) + "\n"


def plot(results, out):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    for key, block in results.items():
        settings_run = sorted({r["setting"] for r in block["runs"]})
        fig, axes = plt.subplots(1, len(settings_run), figsize=(6.5 * len(settings_run), 4.5), squeeze=False)
        for ax, setting in zip(axes[0], settings_run):
            ax.plot(block["dense"]["steps"], block["dense"]["metric"], "k-", lw=2.5, label="dense")
            for run in block["runs"]:
                if run["setting"] == setting:
                    ax.plot(run["steps"], run["metric"], lw=1.2, label=run["label"])
            ax.axhline(TASKS[block["task"]].target, color="grey", ls=":", lw=1)
            ax.set(title=f"{block['task']}, {block['optimizer']}, {setting}", xlabel="step",
                   ylabel="held-out accuracy", ylim=(0, 1))
            ax.legend(fontsize=7, loc="lower right")
        fig.tight_layout()
        fig.savefig(out / f"{key}.png", dpi=90)
        plt.close(fig)


def main(argv):
    del argv
    timing.pin_threads(2, 4)  # the workers' step functions run side by side
    out = pathlib.Path(FLAGS.out)
    out.mkdir(parents=True, exist_ok=True)
    earlier = out / f"{FLAGS.name}.json"
    results = {}
    if FLAGS.merge and earlier.exists():
        kept = json.loads(earlier.read_text())
        results = {key: {"command": kept["command"], "machine": kept["machine"], **block}
                   for key, block in kept["results"].items()}
    for task_name in FLAGS.tasks:
        task = TASKS[task_name]
        for optimizer_name in FLAGS.optimizers:
            key = f"{FLAGS.name}_{task_name}_{optimizer_name}"
            dense = run_one(task, optimizer_name, None)
            target = task.target
            if FLAGS.target_fraction:
                target = round(FLAGS.target_fraction * dense["final"], 4)
                dense = counted_to(dense, target)
            print(f"[{task_name} {optimizer_name}] dense: final {dense['final']:.3f}, "
                  f"target at step {dense['steps_to_target']} ({dense['seconds']} s)", flush=True)
            runs = []
            chosen = settings(task, optimizer_name)
            for setting in FLAGS.settings:
                for label, factory, options in chosen[setting]:
                    if FLAGS.compressors and _compressor(label) not in FLAGS.compressors:
                        continue
                    run = run_one(task, optimizer_name, factory, **options, target=target)
                    run.update(setting=setting, label=label)
                    run["like_dense"] = verdict(run, dense)
                    runs.append(run)
                    print(f"[{task_name} {optimizer_name}] {setting:11s} {label:26s} final {run['final']:.3f} "
                          f"({run['final'] - dense['final']:+.3f}), target at step {run['steps_to_target']}"
                          f" -> {'like dense' if run['like_dense'] else 'NOT like dense'} ({run['seconds']} s)",
                          flush=True)
            block = {"task": task_name, "optimizer": optimizer_name, "dense": dense, "runs": runs, "target": target,
                     "command": record.command_line("benchmarks.convergence"), "machine": record.machine()}
            results[key] = (merged_block(results[key], block, FLAGS.settings, FLAGS.compressors)
                            if key in results else block)
            record.write_results(out, FLAGS.name, {"machine": record.machine(), "results": results,
                                                    "command": record.command_line("benchmarks.convergence")},
                                  markdown(results))
            plot({key: results[key]}, out)
    print(f"wrote {out / (FLAGS.name + '.md')}")


if __name__ == "__main__":
    define_flags()
    app.run(main)
