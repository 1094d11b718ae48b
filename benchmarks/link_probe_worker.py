"""One worker of a link probe: times the engine's own allreduce and allgather
(tf.distribute's collectives, or Horovod's over Gloo) over message sizes, and
writes [(bytes per worker, median seconds)] per collective as JSON, for
tfcomp.analysis.link_fit to turn into latency and bandwidth.

--max_bytes bounds the largest message, so that a probe of a slow link stays short.
"""
import json
import pathlib

import tensorflow as tf
from absl import app, flags

from benchmarks.timing import median_s

FLAGS = flags.FLAGS
flags.DEFINE_string("out", None, "Result JSON path (with --engine=horovod: a directory for rank<r>.json).")
flags.DEFINE_enum("engine", "tf.distribute", ["tf.distribute", "horovod"], "Whose collectives to time.")
flags.DEFINE_integer("max_bytes", 8 << 20, "Largest message per worker, in bytes.", lower_bound=4096)
flags.DEFINE_integer("runs", 7, "Timed runs per size (the median is kept).", lower_bound=1)


def sizes(max_bytes):
    """Message sizes in float32 elements: powers of 4 from 1 KiB up to max_bytes."""
    out, n = [], 1024
    while n <= max_bytes:
        out.append(n // 4)
        n *= 4
    return out


def tf_distribute_collectives():
    strategy = tf.distribute.MultiWorkerMirroredStrategy()

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

    return make, strategy.cluster_resolver.task_id or 0, pathlib.Path(FLAGS.out)


def horovod_collectives():
    import horovod.tensorflow as hvd  # pylint: disable=import-outside-toplevel
    hvd.init()

    def make(kind, elements):
        value = tf.ones([elements], tf.float32)
        op = (lambda: hvd.allreduce(value, op=hvd.Sum)) if kind == "allreduce" else (lambda: hvd.allgather(value))
        return lambda: op().numpy()

    out = pathlib.Path(FLAGS.out)
    out.mkdir(parents=True, exist_ok=True)
    return make, hvd.rank(), out / f"rank{hvd.rank()}.json"


def main(argv):
    del argv
    make, rank, path = horovod_collectives() if FLAGS.engine == "horovod" else tf_distribute_collectives()
    result = {}
    for kind in ("allreduce", "allgather"):
        result[kind] = [(4 * n, median_s(make(kind, n), FLAGS.runs)) for n in sizes(FLAGS.max_bytes)]
    result["rank"] = rank
    path.write_text(json.dumps(result))


if __name__ == "__main__":
    flags.mark_flag_as_required("out")
    app.run(main)
