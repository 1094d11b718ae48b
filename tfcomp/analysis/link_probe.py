"""The link as the engine's own collectives see it: allreduce and allgather timed
over message sizes among the workers this process belongs to (tf.distribute's
MultiWorkerMirroredStrategy from TF_CONFIG, or Horovod's ranks), fitted to a
latency and a bandwidth per collective by tfcomp.analysis.link_fit.

Every worker must run the probe at once, as they run a training step.
"""
import tensorflow as tf

from tfcomp.analysis.costs import COLLECTIVES
from tfcomp.analysis.link_fit import fit_link
from tfcomp.analysis.timing import median_s

ENGINES = ("tf.distribute", "horovod")


def sizes(max_bytes):
    """Message sizes in float32 elements: powers of 4 from 1 KiB up to max_bytes."""
    out, n = [], 1024
    while n <= max_bytes:
        out.append(n // 4)
        n *= 4
    return out


def _tf_distribute(strategy=None):
    strategy = strategy or tf.distribute.MultiWorkerMirroredStrategy()

    def make(kind, elements):
        value = tf.ones([elements], tf.float32)

        @tf.function
        def step():
            def replica():
                ctx = tf.distribute.get_replica_context()
                if kind == "allreduce":
                    return ctx.all_reduce(tf.distribute.ReduceOp.SUM, value)
                return ctx.all_gather(value, axis=0)
            return strategy.run(replica)

        return lambda: strategy.experimental_local_results(step())[0].numpy()

    return make, strategy.cluster_resolver.task_id or 0, strategy.num_replicas_in_sync


def _horovod():
    import horovod.tensorflow as hvd  # pylint: disable=import-outside-toplevel
    hvd.init()

    def make(kind, elements):
        value = tf.ones([elements], tf.float32)
        op = (lambda: hvd.allreduce(value, op=hvd.Sum)) if kind == "allreduce" else (lambda: hvd.allgather(value))
        return lambda: op().numpy()

    return make, hvd.rank(), hvd.size()


def probe(engine, max_bytes=4 << 20, runs=7, strategy=None):
    """{"rank", "workers", "allreduce": [(bytes per worker, median seconds)], "allgather": [...]}.
    strategy: the tf.distribute strategy this process trains with (default: a new
    MultiWorkerMirroredStrategy, for a process that only probes)."""
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {ENGINES}, got {engine!r}")
    make, rank, workers = _horovod() if engine == "horovod" else _tf_distribute(strategy)
    result = {"rank": rank, "workers": workers}
    for kind in COLLECTIVES:
        result[kind] = [(4 * n, median_s(make(kind, n), runs)) for n in sizes(max_bytes)]
    return result


def fitted_links(samples, workers):
    """{collective: Link} from probe()'s samples."""
    return {kind: fit_link(samples[kind], kind, workers)[0] for kind in COLLECTIVES}
