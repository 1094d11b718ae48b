"""tfcomp.distribute.MultiWorkerMirroredStrategy: tf.distribute's strategy with
compressed gradient aggregation. Swap it in for tf.distribute's and keep the
rest of the program (TF_CONFIG, strategy.scope(), model.fit or strategy.run).
"""
import tensorflow as tf
from tensorflow.python.distribute import cross_device_ops as cross_device_ops_lib

from tfcomp import agreement
from tfcomp.distribute import gradient_calls
from tfcomp.distribute.cross_device_ops import CompressingCollectiveAllReduce
from tfcomp.exchange import Exchange


class MultiWorkerMirroredStrategy(tf.distribute.MultiWorkerMirroredStrategy):
    """MultiWorkerMirroredStrategy whose gradient reductions compress.

    compression: a tfcomp compressor class or instance (None: no compression).
    cluster_resolver, communication_options: as tf.distribute's, and as there
        collectives have no timeout unless communication_options sets one.
        TensorFlow 2.15 holds a sleeping thread per collective launch for the
        length of the timeout (tsl's PosixEnv::SchedClosureAfter), so a long
        timeout on fast steps piles up threads until thread creation fails
        (benchmarks/long_run.py: 8 threads a step on the main job).
    exchange_options: min_compress_elements, bucket_bytes, global_seed,
        selection, warmup_steps (see tfcomp.exchange.Exchange). Where tensor
        selection is on, the workers measure (or load) the compressor's
        compression times at construction and share their average.
    """

    def __init__(self, compression=None, cluster_resolver=None, communication_options=None,
                 **exchange_options):
        gradient_calls.check_supported()
        exchange = Exchange(compression, **exchange_options)
        super().__init__(cluster_resolver=cluster_resolver,
                         communication_options=communication_options)
        extended = self.extended
        base = getattr(extended, "_cross_device_ops", None)
        if not isinstance(base, cross_device_ops_lib.CollectiveAllReduce):
            raise RuntimeError(
                "tfcomp hooks MultiWorkerMirroredStrategy's private _cross_device_ops, which this "
                f"TensorFlow ({tf.__version__}) does not have as a CollectiveAllReduce; install the "
                "pinned tensorflow==2.15.1")
        extended._cross_device_ops = CompressingCollectiveAllReduce(
            base, exchange, rank=self.cluster_resolver.task_id or 0)
        self.exchange = exchange
        self._check_workers_agree()
        self._share_compression_profile()

    @property
    def compressor(self):
        return self.exchange.compressor

    def payload_bytes(self, variables):
        """Bytes one worker sends per step for these (trainable) variables."""
        return self.exchange.payload_bytes([(v.shape, v.dtype) for v in variables],
                                           self.num_replicas_in_sync)

    def _check_workers_agree(self):
        """Every worker must run the same exchange, or payloads would not line up."""
        def gather(value):
            @tf.function
            def run():
                ctx = tf.distribute.get_replica_context()
                return ctx.all_gather(tf.constant([value], tf.int64), axis=0)
            return self.experimental_local_results(self.run(run))[0].numpy().tolist()

        agreement.check_workers_agree(self.exchange, gather, self.cluster_resolver.task_id)

    def _share_compression_profile(self):
        def average(seconds):
            @tf.function
            def run():
                ctx = tf.distribute.get_replica_context()
                return ctx.all_reduce(tf.distribute.ReduceOp.MEAN, tf.constant(seconds, tf.float64))
            return self.experimental_local_results(self.run(run))[0].numpy().tolist()

        agreement.share_compression_profile(self.exchange, average)

