"""An emulated cluster on one machine: each worker in a network namespace of its
own, with its own address on a veth pair whose far end joins a bridge (in a
namespace of its own), like a NIC on a switch. Needs root.

A rate shapes each worker's link in both directions (tc tbf on the worker's
end for what it sends, on the bridge's end for what it receives), so two
workers sending to each other at once each get the full rate, as on a
full-duplex switch port. The launcher (this process, in the root namespace)
reaches the workers through one more, unshaped, veth pair into the bridge:
Horovod's rendezvous server listens there.

Everything is created under one random name and removed on exit, whatever
happened inside: processes still running in a worker's namespace are killed,
and deleting the namespaces deletes their links.
"""
import contextlib
import dataclasses
import ipaddress
import os
import pathlib
import random
import re
import shutil
import signal
import socket
import subprocess
import uuid

# tbf needs a burst above the link's MTU; 256 kB held every rate from 100 Mbit/s up.
# After idle, that much goes through at line rate (tfcomp.analysis models it: Network.burst_s).
BURST_BYTES = 256 * 1024
BURST = f"{BURST_BYTES // 1024}kb"
LATENCY = "10ms"
WORKER_DEVICE = "eth0"
NETNS_ETC = pathlib.Path("/etc/netns")
# Each live cluster's maker: a file per cluster holding the pid of the process that
# made it, so that one test's check for leftovers does not count a cluster another
# test (in another pytest-xdist worker) is still using.
MAKERS = pathlib.Path("/run/tfcomp-clusters")


@dataclasses.dataclass(frozen=True)
class Cluster:
    name: str
    worker_hosts: tuple  # each worker's address
    launcher_host: str  # the launcher's address, reachable from every worker
    rate: object  # tc rate of each worker's link ("1gbit"), or None: unshaped
    cores: tuple = ()  # each worker's CPU cores (a tuple of ints), or () when workers are not pinned

    def prefix(self, worker):
        """The command prefix that runs a process as this worker (on its cores, when pinned)."""
        netns = ("ip", "netns", "exec", self.worker_namespace(worker))
        if not self.cores:
            return netns
        return (*netns, "taskset", "--cpu-list", ",".join(str(c) for c in self.cores[worker]))

    @property
    def worker_env(self):
        """Environment a pinned worker runs with: TensorFlow sizes its inter-op pool by the
        cores it may use, and with one it runs a step's ops one at a time, so a collective
        cannot wait while compute goes on, and the Timeline's timestamps run late."""
        if not self.cores:
            return {}
        return {"TF_NUM_INTEROP_THREADS": str(max(2, len(self.cores[0])))}

    def worker_namespace(self, worker):
        return f"{self.name}-w{worker}"

    @property
    def bridge_namespace(self):
        return f"{self.name}-br"

    def set_rate(self, rate, workers=None):
        """Reshapes running workers' links (default: all) to rate (tc notation), or
        unshapes them (None), in both directions, as emulated_cluster shaped them."""
        for w in range(len(self.worker_hosts)) if workers is None else workers:
            for namespace, device in ((self.worker_namespace(w), WORKER_DEVICE),
                                      (self.bridge_namespace, bridge_device(self.name, w))):
                if rate:
                    _shape(namespace, device, rate, verb="replace")
                else:
                    subprocess.run(["ip", "netns", "exec", namespace, "tc", "qdisc", "del", "dev", device, "root"],
                                   capture_output=True)  # fails only where no qdisc was set: nothing to undo

    def link_stats(self, worker):
        """What the worker's device did so far: {"qdisc": its root qdisc ("tbf"
        when shaped), "rate": tc's rate or None, "sent_bytes", "dropped"}."""
        text = run_command("ip", "netns", "exec", self.worker_namespace(worker), "tc", "-s", "qdisc", "show",
                    "dev", WORKER_DEVICE)
        words = text.split()
        rate = words[words.index("rate") + 1] if "rate" in words else None
        sent = int(words[words.index("Sent") + 1])
        dropped = int(words[words.index("(dropped") + 1].rstrip(","))
        return {"qdisc": words[1], "rate": rate, "sent_bytes": sent, "dropped": dropped}


def rate_gbps(rate):
    """tc's rate notation (1gbit, 500mbit, 100kbit) in Gbit/s."""
    units = {"gbit": 1.0, "mbit": 1e-3, "kbit": 1e-6}
    for unit, scale in units.items():
        if rate.endswith(unit):
            try:
                return float(rate[: -len(unit)]) * scale
            except ValueError:
                break
    raise ValueError(f"a tc rate ends in {', '.join(units)}, got {rate!r}")


def run_command(*command):
    """Runs a command; its stdout, or RuntimeError with its stderr."""
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"`{' '.join(command)}` failed ({done.returncode}): {done.stderr.strip()}")
    return done.stdout


def _subnet():
    """A /24 in 10.0.0.0/8 that no route of this machine covers."""
    taken = [ipaddress.ip_network(line.split()[0], strict=False)
             for line in run_command("ip", "-4", "route", "show").splitlines()
             if line and line.split()[0][0].isdigit()]
    rng = random.Random(uuid.uuid4().int)
    for _ in range(100):
        net = ipaddress.ip_network(f"10.{rng.randrange(100, 250)}.{rng.randrange(0, 256)}.0/24")
        if not any(net.overlaps(t) for t in taken):
            return net
    raise RuntimeError("no free 10.x.y.0/24 subnet for the emulated cluster")


def _shape(namespace, device, rate, verb="add"):
    run_command("ip", "netns", "exec", namespace, "tc", "qdisc", verb, "dev", device, "root", "tbf",
         "rate", rate, "burst", BURST, "latency", LATENCY)


def disjoint_cores(num_workers, available=None):
    """Each worker's share of this process's CPU cores, as equal disjoint runs of
    consecutive cores, or () when there are fewer cores than workers."""
    available = sorted(os.sched_getaffinity(0) if available is None else available)
    if num_workers < 1 or len(available) < num_workers:
        return ()
    share = len(available) // num_workers
    return tuple(tuple(available[w * share:(w + 1) * share]) for w in range(num_workers))


@contextlib.contextmanager
def emulated_cluster(num_workers, rate=None, pin_cores=False):
    """Yields a Cluster of num_workers namespaces, each link shaped to rate (tc
    notation: "1gbit", "500mbit") or unshaped (None); removed on exit.

    pin_cores runs each worker on cores of its own (disjoint_cores), as workers on
    separate machines would; with fewer cores than workers they share them all
    (Cluster.cores is then ())."""
    if os.geteuid() != 0:
        raise PermissionError("emulating a cluster needs root (network namespaces, veth, tc)")
    if num_workers < 1:
        raise ValueError(f"need at least one worker, got {num_workers}")
    tag = uuid.uuid4().hex[:6]
    name = f"tfc{tag}"
    net = _subnet()
    hosts = [str(net[i + 1]) for i in range(num_workers)]
    cluster = Cluster(name, tuple(hosts), str(net[254]), rate, disjoint_cores(num_workers) if pin_cores else ())
    created = []
    MAKERS.mkdir(parents=True, exist_ok=True)
    (MAKERS / name).write_text(str(os.getpid()))
    try:
        bridge = cluster.bridge_namespace
        run_command("ip", "netns", "add", bridge)
        created.append(bridge)
        run_command("ip", "-n", bridge, "link", "add", "br0", "type", "bridge")
        run_command("ip", "-n", bridge, "link", "set", "br0", "up")
        for w, host in enumerate(hosts):
            ns = cluster.worker_namespace(w)
            run_command("ip", "netns", "add", ns)
            created.append(ns)
            _resolve_hostname_to(ns, host)
            worker_end, bridge_end = f"{name}w{w}", bridge_device(name, w)  # at most 15 characters
            run_command("ip", "link", "add", worker_end, "type", "veth", "peer", "name", bridge_end)
            run_command("ip", "link", "set", worker_end, "netns", ns)
            run_command("ip", "link", "set", bridge_end, "netns", bridge)
            run_command("ip", "-n", ns, "link", "set", worker_end, "name", WORKER_DEVICE)
            run_command("ip", "-n", ns, "addr", "add", f"{host}/{net.prefixlen}", "dev", WORKER_DEVICE)
            run_command("ip", "-n", ns, "link", "set", WORKER_DEVICE, "up")
            run_command("ip", "-n", ns, "link", "set", "lo", "up")
            run_command("ip", "-n", bridge, "link", "set", bridge_end, "master", "br0")
            run_command("ip", "-n", bridge, "link", "set", bridge_end, "up")
            if rate:
                _shape(ns, WORKER_DEVICE, rate)
                _shape(bridge, bridge_end, rate)
        launcher_end, launcher_bridge_end = f"{name}l", f"{name}lb"
        run_command("ip", "link", "add", launcher_end, "type", "veth", "peer", "name", launcher_bridge_end)
        created.append(launcher_end)  # deleting either end deletes the pair
        run_command("ip", "link", "set", launcher_bridge_end, "netns", bridge)
        run_command("ip", "-n", bridge, "link", "set", launcher_bridge_end, "master", "br0")
        run_command("ip", "-n", bridge, "link", "set", launcher_bridge_end, "up")
        run_command("ip", "addr", "add", f"{cluster.launcher_host}/{net.prefixlen}", "dev", launcher_end)
        run_command("ip", "link", "set", launcher_end, "up")
        yield cluster
    finally:
        _remove(created)
        (MAKERS / name).unlink(missing_ok=True)


def bridge_device(cluster_name, worker):
    """The bridge's end of a worker's veth pair."""
    return f"{cluster_name}b{worker}"


def _resolve_hostname_to(namespace, address):
    """Inside the namespace this machine's hostname resolves to the worker's
    address (`ip netns exec` mounts /etc/netns/NAME/hosts over /etc/hosts): Gloo
    contexts that Horovod builds without an interface name (its process sets)
    bind to the hostname's address, which is loopback outside."""
    name = socket.gethostname()
    try:
        others = [line for line in pathlib.Path("/etc/hosts").read_text().splitlines()
                  if name not in line.split()]
    except OSError:
        others = ["127.0.0.1 localhost"]
    directory = NETNS_ETC / namespace
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "hosts").write_text("\n".join([f"{address} {name}", *others]) + "\n")


def _remove(created):
    for entry in reversed(created):
        if "-" in entry:  # a namespace (links have no dash)
            shutil.rmtree(NETNS_ETC / entry, ignore_errors=True)
            for pid in subprocess.run(["ip", "netns", "pids", entry], capture_output=True,
                                      text=True).stdout.split():
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid), signal.SIGKILL)
            subprocess.run(["ip", "netns", "delete", entry], capture_output=True)
        else:
            subprocess.run(["ip", "link", "delete", entry], capture_output=True)


_OURS = re.compile(r"(?P<cluster>tfc[0-9a-f]{6})(-br|-w\d+|[wb]\d+|lb?)$")


def leftovers():
    """Namespaces and links this module made that still exist although the process
    that made them has exited (none, after every cluster). Clusters of running
    processes are theirs, not leftovers: see made_by."""
    return [name for name in _ours() if not _running(_maker(name))]


def made_by(pid):
    """Namespaces and links of the clusters process pid made that still exist."""
    return [name for name in _ours() if _maker(name) == pid]


def _ours():
    namespaces = [line.split()[0] for line in run_command("ip", "netns", "list").splitlines()]
    links = [line.split(":")[1].strip().split("@")[0] for line in run_command("ip", "-o", "link", "show").splitlines()]
    return [name for name in namespaces + links if _OURS.match(name)]


def _maker(name):
    """The pid that made the cluster a name belongs to, or None where none is recorded."""
    try:
        return int((MAKERS / _OURS.match(name).group("cluster")).read_text())
    except (OSError, ValueError):
        return None


def _running(pid):
    if pid is None:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie (exited, not yet reaped) has exited
        return pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
