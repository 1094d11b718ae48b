"""One way to start a module's workers with either engine, wherever they run: on an
emulated cluster (tests.cluster.netns_cluster: a namespace and address per
worker), or all on one host's loopback, unshaped or under a command that shapes
it (`ip netns exec NAME` of tests.cluster.slow_link). The end-to-end benchmark
and the main job launch through it."""
from tests.cluster.horovod_cluster import horovod_ranks, horovodrun
from tests.cluster.local_cluster import run_workers


class Launcher:
    """Runs `python -m module --out=... args --engine=E` as `workers` processes, env
    added to their environment (after the cluster's worker_env)."""

    def __init__(self, engine, workers, cluster=None, prefix=(), timeout_s=900, stop_on_failure_s=20, env=None):
        if engine not in ("tf.distribute", "horovod"):
            raise ValueError(f"engine must be tf.distribute or horovod, got {engine!r}")
        self.engine, self.workers, self.cluster, self.prefix = engine, workers, cluster, tuple(prefix)
        self.timeout_s, self.stop_on_failure_s = timeout_s, stop_on_failure_s
        self.env = {**(cluster.worker_env if cluster is not None else {}), **(env or {})}

    def link_stats(self, before=None):
        """Worker 0's device: its qdisc and rate, and bytes sent and packets dropped
        since before (another link_stats). None off a cluster."""
        if self.cluster is None:
            return None
        stats = self.cluster.link_stats(0)
        if before:
            stats["sent_bytes"] -= before["sent_bytes"]
            stats["dropped"] -= before["dropped"]
        return stats

    def run(self, module, args, out_dir):
        """(ok, worker 0's result or None, the first failed worker's log tail or "")."""
        args = [*args, f"--engine={self.engine}"]
        if self.engine == "horovod":
            if self.cluster is None:
                code, log, results = horovodrun(module, self.workers, args, out_dir, timeout=self.timeout_s,
                                                env=self.env, prefix=self.prefix)
                ok = code == 0 and None not in results
                return ok, results[0], "" if ok else f"horovodrun exited {code}:\n{log[-3000:]}"
            codes, logs, results = horovod_ranks(module, self.cluster, args, out_dir, timeout=self.timeout_s,
                                                 stop_on_failure_s=self.stop_on_failure_s, env=self.env)
        else:
            if self.cluster is None:
                hosts, prefixes = None, [self.prefix] * self.workers
            else:
                hosts, prefixes = self.cluster.worker_hosts, [self.cluster.prefix(w) for w in range(self.workers)]
            codes, logs, results = run_workers(module, self.workers, args, out_dir, timeout=self.timeout_s,
                                               hosts=hosts, prefixes=prefixes,
                                               stop_on_failure_s=self.stop_on_failure_s, env=self.env)
        ok = all(c == 0 for c in codes) and None not in results
        failed = next((i for i, c in enumerate(codes) if c != 0), 0)
        return ok, results[0], "" if ok else f"exit codes {codes}; worker {failed}:\n{logs[failed][-3000:]}"


# TensorFlow's default CPU allocator maps fresh pages for every large tensor: a 64 MiB
# temporary costs about 50 ms of page faults each step, more than the arithmetic of most
# compressors. Its BFC allocator keeps and reuses the buffers (one thread, 4096^2 float32:
# g + e 68 -> 14 ms). The benchmarks give it to every worker, dense and compressed alike.
BFC_ALLOCATOR = {"TF_CPU_ALLOCATOR_USE_BFC": "true"}
BFC_ALLOCATOR_HELP = ("Give every worker, dense and compressed alike, TensorFlow's BFC allocator for CPU tensors "
                      "(TF_CPU_ALLOCATOR_USE_BFC=true), which reuses large buffers instead of faulting in fresh "
                      "pages for each (tests.cluster.launcher.BFC_ALLOCATOR).")
