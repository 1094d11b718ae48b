"""Runs K real worker processes on localhost with TF_CONFIG: the engine tests'
and the main job's cluster."""
import json
import os
import pathlib
import socket
import subprocess
import sys
import time

from tests.cluster import preload

ROOT = pathlib.Path(__file__).resolve().parent.parent.parent


def free_ports(n):
    sockets = [socket.socket() for _ in range(n)]
    for s in sockets:
        s.bind(("localhost", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def run_workers(module, num_workers, args, out_dir, timeout=240, per_worker_args=None, prefix=(),
                hosts=None, prefixes=None, stop_on_failure_s=None, env=None):
    """Starts `python -m module --out=... args` as K workers.

    Returns (exit codes, logs, JSON results); a worker still running after
    timeout seconds is killed (its code is then negative). per_worker_args[t]
    is added to worker t's arguments; prefix runs each worker under a command
    (for example `ip netns exec NAME`), prefixes[t] worker t alone; hosts[t] is
    worker t's address (default localhost). With stop_on_failure_s, once a
    worker has failed the others get that many seconds to end before they are
    killed (they would otherwise wait in a collective until the timeout).
    env adds to each worker's environment. Under the tests, workers on this host
    start from a preloaded interpreter (tests.cluster.preload).
    """
    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    hosts = hosts or ["localhost"] * num_workers
    cluster = {"worker": [f"{host}:{p}" for host, p in zip(hosts, free_ports(num_workers))]}
    for stale in out_dir.glob("worker*.json"):
        stale.unlink()
    procs = []
    for task in range(num_workers):
        worker_env = dict(os.environ, TF_CONFIG=json.dumps({"cluster": cluster,
                                                            "task": {"type": "worker", "index": task}}),
                          TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=str(ROOT), CUDA_VISIBLE_DEVICES="", **(env or {}))
        log = open(out_dir / f"worker{task}.log", "w")
        extra = per_worker_args[task] if per_worker_args else []
        launcher = prefixes[task] if prefixes else prefix
        command = [*launcher, *preload.python_m(worker_env, task, wrapped=bool(launcher)), module, f"--out={out_dir / f'worker{task}.json'}", *args, *extra]
        procs.append((subprocess.Popen(command, env=worker_env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT), log))
    wait_then_stop([proc for proc, _ in procs], [log for _, log in procs], timeout, stop_on_failure_s)
    codes = [proc.returncode for proc, _ in procs]
    logs = [(out_dir / f"worker{t}.log").read_text() for t in range(num_workers)]
    return codes, logs, [load_result(out_dir / f"worker{t}.json") for t in range(num_workers)]


def wait_then_stop(procs, logs, timeout, stop_on_failure_s=None):
    """Waits for the processes up to timeout seconds (stop_on_failure_s more once one
    has failed), then kills those still running and closes their logs, also when
    the wait is interrupted (Ctrl-C)."""
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and any(p.poll() is None for p in procs):
            if stop_on_failure_s is not None and any(p.poll() not in (None, 0) for p in procs):
                deadline = min(deadline, time.monotonic() + stop_on_failure_s)
                stop_on_failure_s = None
            time.sleep(0.1)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        for log in logs:
            log.close()


def load_result(path):
    """A worker's JSON result, or None if it wrote none."""
    return json.loads(path.read_text()) if path.exists() else None
