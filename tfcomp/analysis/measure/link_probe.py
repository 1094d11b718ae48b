"""The link as the engine's own collectives see it: allreduce and allgather timed
over message sizes among the workers this process belongs to (tf.distribute's
MultiWorkerMirroredStrategy from TF_CONFIG, or Horovod's ranks), fitted to a
latency and a bandwidth per collective by tfcomp.analysis.model.link_fit.

Every worker must run the probe at once, as they run a training step.
"""
import tensorflow as tf

from tfcomp.costs.network import ALLREDUCE, COLLECTIVES, HALF_ALLREDUCE
from tfcomp.analysis.model.link_fit import fit_link
from tfcomp.costs.tables import SizeTable
from tfcomp.analysis.model.timing import median_s

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

    def make(kind, elements, dtype=tf.float32):
        value = tf.ones([elements], dtype)

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

    def make(kind, elements, dtype=tf.float32):
        value = tf.ones([elements], dtype)
        op = (lambda: hvd.allreduce(value, op=hvd.Sum)) if kind == "allreduce" else (lambda: hvd.allgather(value))
        return lambda: op().numpy()

    return make, hvd.rank(), hvd.size()


def probe(engine, max_bytes=4 << 20, runs=7, strategy=None):
    """{"rank", "workers", "allreduce": [(bytes per worker, median seconds)], "allgather": [...],
    "allreduce_float16": [...] (the allreduce of float16 payloads of the same bytes)}.
    strategy: the tf.distribute strategy this process trains with (default: a new
    MultiWorkerMirroredStrategy, for a process that only probes)."""
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {ENGINES}, got {engine!r}")
    make, rank, workers = _horovod() if engine == "horovod" else _tf_distribute(strategy)
    result = {"rank": rank, "workers": workers}
    for kind in COLLECTIVES:
        result[kind] = [(4 * n, median_s(make(kind, n), runs)) for n in sizes(max_bytes)]
    result[HALF_ALLREDUCE] = [(4 * n, median_s(make(ALLREDUCE, 2 * n, tf.float16), runs)) for n in sizes(max_bytes)]
    return result


def half_extra(samples):
    """What an allreduce of float16 costs beyond one of float32 of the same bytes (never
    below 0), per size, from probe()'s samples; None for a probe without float16 samples."""
    if HALF_ALLREDUCE not in samples:
        return None
    full = dict((float(n), float(t)) for n, t in samples[ALLREDUCE])
    extra = [(float(n), max(0.0, float(t) - full[float(n)])) for n, t in samples[HALF_ALLREDUCE] if float(n) in full]
    if not extra:
        raise ValueError("the float16 allreduce was probed at none of the float32 allreduce's sizes")
    return SizeTable(extra, "float16 allreduce extra")


def fitted_links(samples, workers):
    """{collective: Link} from probe()'s samples."""
    return {kind: fit_link(samples[kind], kind, workers)[0] for kind in COLLECTIVES}
