"""Time per step under each network fault against the clean link, on the emulated
cluster (tests.cluster.netns_cluster: a namespace, address and veth link per
worker; root): 1% and 5% packet loss on worker 1's link (nftables, both
directions), that link down for 5 s in the middle of training, and worker 1 on
half a core (a cgroup CPU quota: a straggler). Cases run in interleaved rounds,
the clean link in every round; each run trains tests/workers/mwms_worker.py's
MLP for --steps steps with --compression, and its time per step is worker 0's
wall time from the end of step 8 to the last step, over the steps between.

    python -m benchmarks.faults [--rounds=3] [--steps=160] [--cases=clean,loss1,loss5,flap5,straggler]

A failed run (exit codes shown) is not timed.

Writes <output>/faults.md, .json and .png.
"""
import json
import pathlib
import shlex
import statistics
import tempfile
import time

from absl import app, flags

from benchmarks.harness import record
from tests.cluster import faults, netns_cluster
from tests.cluster.local_cluster import run_workers

FLAGS = flags.FLAGS
CASES = {
    "clean": "the clean link",
    "loss1": "1% packet loss on worker 1's link, each way",
    "loss5": "5% packet loss on worker 1's link, each way",
    "flap5": "worker 1's link down for 5 s from step 40",
    "flap5_tf_heartbeat": "the same with TensorFlow's coordination heartbeat timeout (10 s) in place of tfcomp's 60 s",
    "straggler": "worker 1 on half a core (CPU quota)",
}
flags.DEFINE_list("cases", list(CASES), f"Cases, of {', '.join(CASES)} ('clean' runs in every round anyway).")
flags.DEFINE_integer("rounds", 3, "Rounds; each runs every case once, in the same order.", lower_bound=1)
flags.DEFINE_integer("steps", 160, "Training steps per run.", lower_bound=48)
flags.DEFINE_string("compression", "EFSignSGD", "tfcomp compressor the workers run (mwms_worker's --compression).")
flags.DEFINE_float("collective_timeout_s", 0.0, "The workers' collective timeout (0: none, the default).")
flags.DEFINE_bool("pin_cores", True, "Each worker on cores of its own (the straggler's quota then halves its "
                  "core); --nopin_cores leaves them where this process may run (under `taskset -c 0`: one core "
                  "for both, a loaded machine).")
flags.DEFINE_string("output", "benchmarks/results", "Directory for faults.md, .json and .png.")
flags.DEFINE_bool("report_only", False, "Rewrite faults.md and .png from the faults.json in --output, running "
                  "nothing.")

FROM_STEP = 8  # the first steps trace and warm up
FLAP_AT_STEP, FLAP_SECONDS = 40, 5.0


def run_case(case, work_dir):
    """{"outcome", "ms_per_step", "longest_step_s", ...} of one run."""
    args = [f"--compression={FLAGS.compression}", f"--steps={FLAGS.steps}", f"--timeout={FLAGS.collective_timeout_s}"]
    if case == "flap5_tf_heartbeat":
        args.append("--heartbeat_timeout_s=0")
    log0 = pathlib.Path(work_dir) / "worker0.log"
    extra = {}
    with netns_cluster.emulated_cluster(2, pin_cores=FLAGS.pin_cores) as cluster:
        def train():
            return run_workers("tests.workers.mwms_worker", 2, args, work_dir, hosts=cluster.worker_hosts,
                               prefixes=[cluster.prefix(w) for w in range(2)], timeout=900, stop_on_failure_s=60,
                               env=cluster.worker_env)
        if case in ("loss1", "loss5"):
            with faults.packet_loss(cluster, 1, int(case[-1])) as dropped:
                codes, logs, _ = train()
                extra["packets_dropped"] = dropped()
        elif case in ("flap5", "flap5_tf_heartbeat"):
            flap = faults.LinkFlap(cluster, 1, FLAP_SECONDS, faults.reached(log0, FLAP_AT_STEP))
            flap.start()
            codes, logs, _ = train()
            flap.stop()
        elif case == "straggler":
            (codes, logs, _), _ = faults.with_a_straggler(cluster, 1, train,
                                                          faults.reached(pathlib.Path(work_dir) / "worker1.log", 1))
        else:
            codes, logs, _ = train()
    steps = faults.finished_steps(logs[0])
    timed = [(s, t) for s, t in steps if s >= FROM_STEP]
    gaps = [b[1] - a[1] for a, b in zip(timed, timed[1:])]
    result = {"outcome": "completed" if codes == [0, 0] else f"failed (exit codes {codes})",
              "steps_done": steps[-1][0] if steps else 0, **extra}
    if len(timed) >= 2:
        result.update(ms_per_step=1e3 * (timed[-1][1] - timed[0][1]) / (timed[-1][0] - timed[0][0]),
                      median_step_ms=1e3 * statistics.median(gaps), longest_step_s=max(gaps))
    return result


def markdown(runs, machine, seconds, command):
    lines = ["# Time per step under network faults", "",
             f"`{command}`", "",
             f"{machine['date']}; {machine['cpus']} CPUs ({machine['cpu']}), shared with other work; TensorFlow "
             f"{machine['tensorflow']}; {seconds / 60:.0f} minutes. Two tfcomp MultiWorkerMirroredStrategy workers on "
             f"the emulated cluster (a network namespace, address and unshaped veth link each) train the tests' MLP "
             f"with {FLAGS.compression} for {FLAGS.steps} steps, "
             f"{'each worker on a core of its own' if FLAGS.pin_cores else 'both workers on the CPUs this run was given'}"
             f", collective timeout "
             f"{FLAGS.collective_timeout_s or 'none'}{' s' if FLAGS.collective_timeout_s else ''}; "
             f"{FLAGS.rounds} interleaved rounds, the clean link in every round. *ms/step*: worker 0's wall time "
             f"from step {FROM_STEP} to the last, per step (a stall counts, spread over the run); *median step*: the "
             f"median of its step-to-step times; *longest*: the longest one.", "",
             "![time per step under each fault](faults.png)", "",
             "| case | what | outcomes | ms/step: median (min-max) | vs clean | median step ms | longest step s |",
             "|---|---|---|---|---|---|---|"]
    clean = statistics.median(r["ms_per_step"] for r in runs["clean"] if "ms_per_step" in r)
    for case, results in runs.items():
        timed = [r for r in results if "ms_per_step" in r and r["outcome"] == "completed"]  # a failed run stopped
        outcomes = ", ".join(f"{n}x {o}" for o, n in _counts(r["outcome"] for r in results))
        if not timed:
            lines.append(f"| {case} | {CASES[case]} | {outcomes} | - | - | - | - |")
            continue
        per = [r["ms_per_step"] for r in timed]
        lines.append(
            f"| {case} | {CASES[case]} | {outcomes} | {statistics.median(per):.1f} ({min(per):.1f}-{max(per):.1f}) "
            f"| {statistics.median(per) / clean:.2f}x | {statistics.median(r['median_step_ms'] for r in timed):.1f} "
            f"| {max(r['longest_step_s'] for r in timed):.2f} |")
    return "\n".join(lines) + "\n"


def _counts(values):
    counts = {}
    for value in values:
        counts[value] = counts.get(value, 0) + 1
    return counts.items()


def plot(path, runs):
    import matplotlib  # pylint: disable=import-outside-toplevel
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel

    fig, ax = plt.subplots(figsize=(7, 3.6))
    for x, (case, results) in enumerate(runs.items()):
        per = [r["ms_per_step"] for r in results if "ms_per_step" in r and r["outcome"] == "completed"]
        if per:
            ax.bar(x, statistics.median(per), color="tab:blue" if case == "clean" else "tab:orange", alpha=0.7)
            ax.plot([x] * len(per), per, "k.", ms=5)
    ax.set_xticks(range(len(runs)), list(runs), fontsize=8)
    ax.set_ylabel("ms per step (median; dots: rounds)")
    ax.set_title(f"2 workers, {FLAGS.compression}, emulated cluster: time per step under each fault", fontsize=9)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv):
    del argv
    unknown = [c for c in FLAGS.cases if c not in CASES]
    if unknown:
        raise app.UsageError(f"unknown cases {unknown}; choose from {list(CASES)}")
    if FLAGS.report_only:
        path = pathlib.Path(FLAGS.output) / "faults.json"
        if not path.exists():
            raise app.UsageError(f"--report_only rewrites a report from {path}, which does not exist")
        saved = json.loads(path.read_text())
        output = FLAGS.output
        FLAGS.unparse_flags()  # the run's own flags, for the report's words
        FLAGS(["faults", *shlex.split(saved["command"])[3:], f"--output={output}"])
        plot(pathlib.Path(FLAGS.output) / "faults.png", saved["runs"])
        (pathlib.Path(FLAGS.output) / "faults.md").write_text(
            markdown(saved["runs"], saved["machine"], saved["seconds"], saved["command"]))
        return
    reason = faults.root_only_reason()
    if reason:
        raise app.UsageError(f"cannot emulate faults here: {reason}")
    cases = ["clean"] + [c for c in FLAGS.cases if c != "clean"]
    runs = {case: [] for case in cases}
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="tfcomp-faults-") as work:
        for round_index in range(FLAGS.rounds):
            for case in cases:
                result = run_case(case, pathlib.Path(work) / f"r{round_index}" / case)
                runs[case].append(result)
                print(f"round {round_index + 1}/{FLAGS.rounds} {case}: {result}", flush=True)
    out = pathlib.Path(FLAGS.output)
    out.mkdir(parents=True, exist_ok=True)
    plot(out / "faults.png", runs)
    machine = record.machine()
    command, seconds = record.command_line("benchmarks.faults"), time.monotonic() - started
    _, md_path = record.write_results(out, "faults", {"command": command, "machine": machine, "runs": runs,
                                                      "seconds": seconds},
                                      markdown(runs, machine, seconds, command))
    print(md_path.read_text())


if __name__ == "__main__":
    app.run(main)
