"""Faults on an emulated cluster (tests.cluster.netns_cluster), as root: packet
loss on a worker's link (nftables, both directions: this kernel has no netem),
a link that goes down and comes back, and a worker with less CPU (a cgroup's
CPU quota). Each undoes itself on exit."""
import contextlib
import os
import pathlib
import re
import subprocess
import threading
import time
import uuid

from tests.cluster.netns_cluster import WORKER_DEVICE, run_command

CPU_CGROUP = pathlib.Path("/sys/fs/cgroup/cpu")  # cgroup v1's cpu controller, as on these machines
CFS_PERIOD_US = 100_000


# tests/workers/mwms_worker.py's line per finished step.
FINISHED = re.compile(r"finished step (\d+) at ([\d.]+)")


def finished_steps(log_text):
    """[(step, wall time it finished)] from a worker's log."""
    return [(int(step), float(at)) for step, at in FINISHED.findall(log_text)]


def reached(log_path, step):
    """A function telling whether the worker logging to log_path has finished `step`."""
    def ready():
        return log_path.exists() and f"finished step {step} at" in log_path.read_text()
    return ready


@contextlib.contextmanager
def packet_loss(cluster, worker, percent):
    """Drops percent% of the packets the worker's link carries, at random, each way;
    yields a function that counts the packets dropped so far."""
    if not 0 < percent < 100:
        raise ValueError(f"percent must be in (0, 100), got {percent}")
    namespace = cluster.worker_namespace(worker)
    rules = "table inet tfcomp_loss {\n" + "".join(
        f"  chain {chain} {{ type filter hook {hook} priority 0; numgen random mod 100 < {percent} counter drop; }}\n"
        for chain, hook in (("in", "input"), ("out", "output"))) + "}\n"
    subprocess.run(["ip", "netns", "exec", namespace, "nft", "-f", "-"], input=rules, text=True, check=True,
                   capture_output=True)

    def dropped():
        listing = run_command("ip", "netns", "exec", namespace, "nft", "list", "table", "inet", "tfcomp_loss")
        return sum(int(n) for n in re.findall(r"counter packets (\d+)", listing))

    try:
        yield dropped
    finally:
        subprocess.run(["ip", "netns", "exec", namespace, "nft", "delete", "table", "inet", "tfcomp_loss"],
                       capture_output=True)


def set_link(cluster, worker, up):
    run_command("ip", "-n", cluster.worker_namespace(worker), "link", "set", WORKER_DEVICE, "up" if up else "down")


class LinkFlap(threading.Thread):
    """Takes the worker's link down once `ready()` is true, for `seconds`, then up again;
    `down_at` and `up_at` are the wall-clock times it did so."""

    def __init__(self, cluster, worker, seconds, ready, timeout=300):
        super().__init__(daemon=True, name="tfcomp-link-flap")
        self.cluster, self.worker, self.seconds, self.ready, self.timeout = cluster, worker, seconds, ready, timeout
        self.down_at = self.up_at = None
        self._cancelled = threading.Event()

    def run(self):
        deadline = time.monotonic() + self.timeout
        while not self.ready():
            if self._cancelled.wait(0.05) or time.monotonic() > deadline:
                return
        set_link(self.cluster, self.worker, False)
        self.down_at = time.time()
        try:
            self._cancelled.wait(self.seconds)
        finally:
            set_link(self.cluster, self.worker, True)
            self.up_at = time.time()

    def stop(self):
        self._cancelled.set()
        self.join()


@contextlib.contextmanager
def cpu_quota(pids, cores):
    """Limits the processes (and their threads) to `cores` CPU cores' worth of time
    (0.5: half a core) through a cgroup of their own; removed on exit."""
    group = CPU_CGROUP / f"tfcomp-{uuid.uuid4().hex[:8]}"
    group.mkdir()
    try:
        (group / "cpu.cfs_period_us").write_text(str(CFS_PERIOD_US))
        (group / "cpu.cfs_quota_us").write_text(str(int(cores * CFS_PERIOD_US)))
        for pid in pids:
            (group / "cgroup.procs").write_text(str(pid))
        yield group
    finally:
        for task in (group / "tasks").read_text().split() if (group / "tasks").exists() else []:
            with contextlib.suppress(OSError):
                (CPU_CGROUP / "tasks").write_text(task)
        with contextlib.suppress(OSError):
            group.rmdir()


def with_a_straggler(cluster, worker, train, ready, cores=0.5, timeout=120):
    """Runs train() (which starts the workers and waits for them) and, once ready()
    (the worker has started training), holds that worker to `cores` of CPU until
    the end. Returns (what train returned, the quota's cpu.stat as a dict)."""
    outcome = {}
    runner = threading.Thread(target=lambda: outcome.update(result=train()))
    runner.start()
    deadline = time.monotonic() + timeout
    while runner.is_alive() and not ready() and time.monotonic() < deadline:
        time.sleep(0.05)
    with cpu_quota(namespace_pids(cluster, worker), cores) as group:
        runner.join()
        stat = dict(line.split() for line in (group / "cpu.stat").read_text().splitlines())
    return outcome["result"], stat


def namespace_pids(cluster, worker):
    """The processes running in the worker's namespace."""
    return [int(pid) for pid in run_command("ip", "netns", "pids", cluster.worker_namespace(worker)).split()]


def root_only_reason():
    """Why the fault tests cannot run here, or None."""
    if os.geteuid() != 0:
        return "network namespaces, nftables and cgroups need root"
    if subprocess.run(["sh", "-c", "command -v nft"], capture_output=True).returncode != 0:
        return "nft is missing: tools/setup_netfaults.sh installs it (make test runs it)"
    if not CPU_CGROUP.is_dir():
        return f"no cgroup v1 cpu controller at {CPU_CGROUP}"
    return None
