"""Runs `horovodrun -np N` (Gloo) on localhost: the Horovod engine's tests'
and the main job's cluster."""
import os
import pathlib
import signal
import subprocess
import sys

from tfcomp.testing.local_cluster import ROOT, load_result


def horovodrun(module, num_ranks, args, out_dir, timeout=240, env=None, prefix=()):
    """Runs `python -m module --out=out_dir args` on num_ranks ranks.

    Returns (exit code, log, [each rank's out_dir/rank<r>.json or None]). A job
    still running after timeout seconds is killed with its whole process group
    (exit code -9). prefix runs horovodrun under a command (`ip netns exec NAME`).
    """
    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for stale in out_dir.glob("rank*.json"):
        stale.unlink()
    runner = pathlib.Path(sys.executable).parent / "horovodrun"
    # horovodrun's parser also reads the command's options, and takes any that
    # abbreviate one of its own (--timeline, --out): the flags go in an absl flagfile.
    flagfile = out_dir / "flags.txt"
    flagfile.write_text("\n".join([f"--out={out_dir}", *args]) + "\n")
    command = [*prefix, str(runner), "-np", str(num_ranks), "-H", f"localhost:{num_ranks}", "--gloo",
               sys.executable, "-m", module, f"--flagfile={flagfile}"]
    run_env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=str(ROOT), CUDA_VISIBLE_DEVICES="",
                   **(env or {}))
    run_env.pop("TF_CONFIG", None)
    log_path = out_dir / "horovodrun.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(command, env=run_env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            code = -9
    results = [load_result(out_dir / f"rank{r}.json") for r in range(num_ranks)]
    return code, log_path.read_text(), results

