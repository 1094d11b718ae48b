"""How fast the analysis command line answers, on a synthetic profile of about
--gradients gradients (tfcomp.analysis.model.synthetic), and how long Espresso's planner
takes for a 314-gradient one, its 4 compressors measured on the CPU only and on the CPU
and the GPU (8 options: Algorithm 2 searches CPU offloading, bounded):

    python -m benchmarks.analysis_speed
    python -m benchmarks.analysis_speed --plan_only   # the planner's rows only

Times, each the median of several runs in this process: `predict` (profile load,
dense and four compressors, the table), one simulate_profile call, and a whatif
sweep of 1,000 configurations (the sweep alone, then the command) (25 bandwidths x 8 worker counts x dense and four
compressors) without plots and with them; plus `python -m tfcomp.analysis
predict` as a fresh process (interpreter start and imports included). Writes
analysis_speed.{md,json} under --out. No TensorFlow, so not benchmarks.harness.record's
machine() (which imports it).
"""
import datetime
import io
import json
import os
import pathlib
import platform
import shlex
import subprocess
import sys
import tempfile

import matplotlib
import numpy as np
from absl import app, flags

from tfcomp.analysis.model.timing import median_s
from tfcomp.analysis.cli import main as cli
from tfcomp.analysis.model import planner
from tfcomp.analysis.model import whatif
from tfcomp.costs.network import Link
from tfcomp.analysis.model.simulator import simulate_profile
from tfcomp.analysis.model.synthetic import synthetic_profile

FLAGS = flags.FLAGS
flags.DEFINE_string("out", "benchmarks/results", "Where analysis_speed.{md,json} go.")
flags.DEFINE_integer("gradients", 200, "About this many gradients in the synthetic profile (3 per conv layer, plus 2).")
flags.DEFINE_integer("runs", 21, "Runs of predict and of one simulation (the median is reported).")
flags.DEFINE_integer("sweep_runs", 5, "Runs of each whatif sweep (the median is reported).")
flags.DEFINE_bool("plan_only", False, "Time the planner only (its rows of the table).")

BANDWIDTHS = 25
PLAN_CONV_LAYERS = 104  # 3 * 104 + 2 = 314 gradients
PLAN_GBPS = (1, 10, 100)
WORKERS = (2, 4, 8, 16, 32, 64, 128, 256)
REPO = pathlib.Path(__file__).resolve().parents[2]


def quietly(*args):
    """Runs the command line in this process, its output discarded; fails loudly on an error."""
    err = io.StringIO()
    if cli.main(["tfcomp.analysis", *args], out=io.StringIO(), err=err) != 0:
        raise RuntimeError(err.getvalue())


def fresh_process(*args):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    subprocess.run([sys.executable, "-m", "tfcomp.analysis", *args], check=True, capture_output=True, env=env)


def machine():
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    cpu = next((line.split(":", 1)[1].strip() for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor() or "unknown")
    return {"cpu": cpu, "cpus": os.cpu_count(), "load_average_1min": load, "python": platform.python_version(),
            "numpy": np.__version__, "matplotlib": matplotlib.__version__,
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}


def planning_times():
    """planner.plan on a 314-gradient synthetic profile (ResNet-101's count, Espresso's Table 5)
    at 64 workers, per link speed, its compressors on the CPU and, `_gpu_cpu`, on both
    devices: {key: seconds}."""
    out = {}
    for suffix, gpu in (("", False), ("_gpu_cpu", True)):
        profile = synthetic_profile(conv_layers=PLAN_CONV_LAYERS, total_bytes=170 * 2**20, gpu=gpu)
        for gbit in PLAN_GBPS:
            out[f"plan_314_gradients{suffix}_{gbit:g}gbit_s"] = median_s(
                lambda: planner.plan(profile, 64, link=Link.from_gbit(gbit)), FLAGS.runs)  # noqa: B023
    return out


def measure(profile_path, profile, out_dir):
    compressors = ",".join(profile.compressors)
    predict = ["predict", f"--profile={profile_path}", "--workers=16", f"--compressors={compressors}"]
    bandwidths = ",".join(f"{b:.6g}" for b in np.logspace(-1, 2, BANDWIDTHS))
    sweep = ["whatif", f"--profile={profile_path}", f"--output={out_dir}", f"--bandwidths_gbps={bandwidths}",
             f"--workers={','.join(map(str, WORKERS))}", f"--compressors={compressors}"]
    grid = (list(np.logspace(-1, 2, BANDWIDTHS)), list(WORKERS), list(profile.compressors))
    return {
        "predict_s": median_s(lambda: quietly(*predict), FLAGS.runs),
        "simulate_profile_s": median_s(lambda: simulate_profile(profile, 16, compressor="TopK"), FLAGS.runs),
        "sweep_only_s": median_s(lambda: whatif.sweep(profile, *grid), FLAGS.sweep_runs),
        "whatif_noplots_s": median_s(lambda: quietly(*sweep, "--noplots"), FLAGS.sweep_runs),
        "whatif_plots_s": median_s(lambda: quietly(*sweep), FLAGS.sweep_runs),
        "predict_fresh_process_s": median_s(lambda: fresh_process(*predict), 5),
        **planning_times(),
    }


def markdown(times, profile, machine_info):
    configurations = BANDWIDTHS * len(WORKERS) * (1 + len(profile.compressors))
    command = shlex.join(["python", "-m", "benchmarks.analysis_speed"] + sys.argv[1:])
    rows = [] if "predict_s" not in times else [
            ("`predict`, 16 workers, dense and 4 compressors (in process: load, 5 simulations, table)",
             times["predict_s"]),
            ("one `simulate_profile` (TopK, 16 workers)", times["simulate_profile_s"]),
            (f"the sweep alone (whatif.sweep), {configurations} configurations", times["sweep_only_s"]),
            (f"`whatif --noplots`, {configurations} configurations (sweep, whatif.md, whatif.json)",
             times["whatif_noplots_s"]),
            (f"`whatif`, {configurations} configurations, with the 2 PNG plots (8 panels each)",
             times["whatif_plots_s"]),
            ("`python -m tfcomp.analysis predict` as a fresh process (interpreter and imports included)",
             times["predict_fresh_process_s"])]
    rows += [(f"planner.plan, {3 * PLAN_CONV_LAYERS + 2} gradients (ResNet-101's count; 170 MiB), 64 workers, "
              f"{gbit:g} Gbit/s, {what}", times[f"plan_314_gradients{suffix}_{gbit:g}gbit_s"])
             for suffix, what in (("", "4 compressors on the CPU"),
                                  ("_gpu_cpu", "4 compressors on the CPU and the GPU (8 options, CPU offloading)"))
             for gbit in PLAN_GBPS]
    if "predict_s" in times:
        about = (f"Synthetic profile (tfcomp.analysis.model.synthetic, not measured): {len(profile.model.gradients)} "
                 f"gradients, {profile.model.total_bytes / 2**20:.1f} MiB, compressors "
                 f"{', '.join(profile.compressors)}; tfcomp's 25 MiB buckets. Sweep: {BANDWIDTHS} bandwidths "
                 f"0.1-100 Gbit/s x {len(WORKERS)} worker counts x dense and {len(profile.compressors)} compressors. "
                 f"Median of {FLAGS.runs} runs ({FLAGS.sweep_runs} for the sweeps, 5 for the fresh process), after "
                 "one warm-up.")
    else:
        about = (f"The planner only (--plan_only), on synthetic profiles (tfcomp.analysis.model.synthetic, not "
                 f"measured); tfcomp's 25 MiB buckets. Median of {FLAGS.runs} runs, after one warm-up.")
    lines = ["# Speed of the analysis command line", "", f"`{command}`", "", about, "",
             f"Machine: {machine_info}", "", *_load_note(machine_info), "| what | median |", "|---|---|"]
    lines += [f"| {what} | {seconds * 1e3:.1f} ms |" if seconds < 1 else f"| {what} | {seconds:.2f} s |"
              for what, seconds in rows]
    return "\n".join(lines) + "\n"


def _load_note(machine_info):
    load, cpus = machine_info["load_average_1min"], machine_info["cpus"]
    if load is None or load < cpus:
        return []
    return [f"The 1-minute load average ({load:.1f}) was at or above the {cpus} CPUs: other work shared the "
            "machine, so these times include waiting for a core and are upper bounds.", ""]


def main(argv):
    del argv
    profile = synthetic_profile(conv_layers=max(4, (FLAGS.gradients - 2) // 3))
    if FLAGS.plan_only:
        times = planning_times()
    else:
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "profile.json")
            profile.save(path)
            times = measure(path, profile, os.path.join(tmp, "whatif"))
    for what, seconds in times.items():
        print(f"{what}: {seconds * 1e3:.1f} ms", flush=True)
    info = machine()
    out = pathlib.Path(FLAGS.out)
    out.mkdir(parents=True, exist_ok=True)
    name = "analysis_speed_plan" if FLAGS.plan_only else "analysis_speed"  # --plan_only keeps the full table
    (out / f"{name}.md").write_text(markdown(times, profile, info))
    (out / f"{name}.json").write_text(json.dumps({"machine": info, "times_s": times, "gradients":
                                                  len(profile.model.gradients)}, indent=2) + "\n")


if __name__ == "__main__":
    app.run(main)
