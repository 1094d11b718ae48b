"""tfcomp.distribute.MultiWorkerMirroredStrategy: tf.distribute's strategy with
compressed gradient aggregation. Swap it in for tf.distribute's and keep the
rest of the program (TF_CONFIG, strategy.scope(), model.fit or strategy.run).
"""
import json
import zlib

import tensorflow as tf
from tensorflow.python.distribute import collective_util
from tensorflow.python.distribute import cross_device_ops as cross_device_ops_lib

from tfcomp.distribute import gradient_calls
from tfcomp.distribute.cross_device_ops import CompressingCollectiveAllReduce
from tfcomp.exchange import Exchange
from tfcomp.selection import CompressionProfile

DEFAULT_TIMEOUT_SECONDS = 600.0


class MultiWorkerMirroredStrategy(tf.distribute.MultiWorkerMirroredStrategy):
    """MultiWorkerMirroredStrategy whose gradient reductions compress.

    compression: a tfcomp compressor class or instance (None: no compression).
    cluster_resolver, communication_options: as tf.distribute's. Collectives
        get a timeout of DEFAULT_TIMEOUT_SECONDS unless communication_options
        sets one, so a worker that is gone or misconfigured fails the step
        instead of hanging it.
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
                         communication_options=_with_timeout(communication_options))
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
        config = json.dumps(self.exchange.config(), sort_keys=True, default=str)
        fingerprint = zlib.crc32(config.encode())

        @tf.function
        def gather():
            ctx = tf.distribute.get_replica_context()
            return ctx.all_gather(tf.constant([fingerprint], tf.int64), axis=0)

        per_replica = self.run(gather)
        gathered = self.experimental_local_results(per_replica)[0].numpy().tolist()
        if len(set(gathered)) != 1:
            raise ValueError(
                f"workers disagree on the compression: this worker (task "
                f"{self.cluster_resolver.task_id}) runs {config} (fingerprint {fingerprint}); the "
                f"workers' fingerprints in task order are {gathered}. Give every worker the same "
                f"compression= and exchange options.")


    def _share_compression_profile(self):
        """Tensor selection decides from measured compression times; the workers
        average theirs, so that they all make the same decisions."""
        selection = self.exchange.selection
        if not selection:
            return
        local = selection.profile(self.compressor)

        @tf.function
        def average():
            ctx = tf.distribute.get_replica_context()
            return ctx.all_reduce(tf.distribute.ReduceOp.MEAN, tf.constant(local.seconds, tf.float64))

        shared = self.experimental_local_results(self.run(average))[0].numpy()
        selection.set_profile(self.compressor, CompressionProfile(local.sizes, shared.tolist()))


def _with_timeout(options):
    options = options or tf.distribute.experimental.CommunicationOptions()
    if options.timeout_seconds is None:
        options = options.merge(collective_util.Options(timeout_seconds=DEFAULT_TIMEOUT_SECONDS))
    return options
