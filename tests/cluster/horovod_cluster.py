"""Runs `horovodrun -np N` (Gloo) on localhost: the Horovod engine's tests'
and the main job's cluster."""
import os
import pathlib
import signal
import subprocess
import sys

from tests.cluster import preload
from tests.cluster.local_cluster import ROOT, load_result


def horovodrun(module, num_ranks, args, out_dir, timeout=240, env=None, prefix=()):
    """Runs `python -m module --out=out_dir args` on num_ranks ranks.

    Returns (exit code, log, [each rank's out_dir/rank<r>.json or None]). A job
    still running after timeout seconds is killed with its whole process group
    (exit code -9). prefix runs horovodrun under a command (`ip netns exec NAME`).
    Under the tests, ranks on this host start from a preloaded interpreter
    (tests.cluster.preload).
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
    run_env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=str(ROOT), CUDA_VISIBLE_DEVICES="",
                   **(env or {}))
    run_env.pop("TF_CONFIG", None)
    command = [*prefix, str(runner), "-np", str(num_ranks), "-H", f"localhost:{num_ranks}", "--gloo",
               *preload.python_m(run_env, wrapped=bool(prefix)), module, f"--flagfile={flagfile}"]
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



def horovod_ranks(module, cluster, args, out_dir, timeout=240, stop_on_failure_s=None, env=None):
    """Runs `python -m module --out=out_dir args` as one Horovod rank (Gloo) per
    worker of an emulated cluster (tests.cluster.netns_cluster): what horovodrun
    does for remote hosts, with `ip netns exec` in place of ssh. The rendezvous
    server runs in this process, on the launcher's address.

    Returns (exit codes, logs, [each rank's out_dir/rank<r>.json or None]). env adds
    to each rank's environment.
    """
    from horovod.runner.common.util.hosts import get_host_assignments, parse_hosts  # pylint: disable=import-outside-toplevel
    from horovod.runner.gloo_run import create_run_env_vars, create_slot_env_vars  # pylint: disable=import-outside-toplevel
    from horovod.runner.http.http_server import RendezvousServer  # pylint: disable=import-outside-toplevel
    from tests.cluster.local_cluster import wait_then_stop  # pylint: disable=import-outside-toplevel
    from tests.cluster.netns_cluster import WORKER_DEVICE  # pylint: disable=import-outside-toplevel

    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for stale in out_dir.glob("rank*.json"):
        stale.unlink()
    num_ranks = len(cluster.worker_hosts)
    plan = get_host_assignments(parse_hosts(",".join(f"{h}:1" for h in cluster.worker_hosts)), num_ranks)
    server = RendezvousServer()
    port = server.start()
    server.init(plan)
    procs, logs = [], []
    try:
        for slot in plan:
            worker = cluster.worker_hosts.index(slot.hostname)
            rank_env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=str(ROOT), CUDA_VISIBLE_DEVICES="",
                            PYTHONUNBUFFERED="1", **{k: str(v) for k, v in create_run_env_vars(
                                cluster.launcher_host, [WORKER_DEVICE], port).items()},
                            **create_slot_env_vars(slot), **(env or {}))
            rank_env.pop("TF_CONFIG", None)
            log = open(out_dir / f"rank{slot.rank}.log", "w")
            logs.append(log)
            command = [*cluster.prefix(worker), sys.executable, "-m", module, f"--out={out_dir}", *args]
            procs.append(subprocess.Popen(command, env=rank_env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT))
        wait_then_stop(procs, logs, timeout, stop_on_failure_s)
    finally:
        wait_then_stop(procs, logs, 0)  # at once, if starting a rank failed
        server.stop()
    texts = [(out_dir / f"rank{r}.log").read_text() for r in range(len(procs))]
    return ([p.returncode for p in procs], texts,
            [load_result(out_dir / f"rank{r}.json") for r in range(num_ranks)])
