"""tfcomp.distribute.MultiWorkerMirroredStrategy: tf.distribute's strategy with
compressed gradient aggregation. Swap it in for tf.distribute's and keep the
rest of the program (TF_CONFIG, strategy.scope(), model.fit or strategy.run).
"""
import tensorflow as tf
from tensorflow.python.distribute import cross_device_ops as cross_device_ops_lib

from tfcomp.distribute import (coordination, gradient_calls, keras3_accumulation, keras3_backup, keras3_fit,
                               keras3_loss_scale)
from tfcomp.distribute.cross_device_ops import CompressingCollectiveAllReduce
from tfcomp.distribute.engine import StrategyEngine
from tfcomp.exchange.step import Exchange
from tfcomp.keras import version as keras_in_use
from tfcomp.state import keras3 as keras3_saving


HEARTBEAT_TIMEOUT_S = 60.0


# tf.data datasets (class names, with or without a leading underscore) that pass on
# every element of their single input once, so that above a repeat() they keep its
# batches per pass.
_ONE_FOR_ONE = {"MapDataset", "ParallelMapDataset", "PrefetchDataset", "ShuffleDataset", "CacheDataset",
                "OptionsDataset"}


def steps_per_epoch(dataset):
    """Batches in one pass over a tf.data dataset's data, or None where unknown: the
    dataset's cardinality where finite; for an infinite one that repeats finite batches
    (batches.repeat(), as model.fit(steps_per_epoch=) is often fed, with map, prefetch,
    shuffle or cache above the repeat), the cardinality of what it repeats."""
    while dataset is not None:
        try:
            steps = int(dataset.cardinality())
        except (AttributeError, TypeError, ValueError):
            return None
        if steps > 0:
            return steps
        kind = type(dataset).__name__.lstrip("_")
        if steps != int(tf.data.INFINITE_CARDINALITY) or kind not in _ONE_FOR_ONE | {"RepeatDataset"}:
            return None
        # tf.data's unary datasets keep their input here (TensorFlow 2.15 to 2.21).
        dataset = getattr(dataset, "_input_dataset", None)
    return None


def _backup_folder(strategy):
    """This worker's folder in a shared backup directory ("worker1", "chief0") where strategy
    is tfcomp's with more than one worker, else None."""
    if not isinstance(strategy, MultiWorkerMirroredStrategy) or strategy.engine.num_workers < 2:
        return None
    resolver = strategy.cluster_resolver
    return f"{resolver.task_type or 'worker'}{resolver.task_id or 0}"


def _is_tfcomps(strategy):
    return isinstance(strategy, MultiWorkerMirroredStrategy)


class MultiWorkerMirroredStrategy(tf.distribute.MultiWorkerMirroredStrategy):
    """MultiWorkerMirroredStrategy whose gradient reductions compress.

    compression: a tfcomp compressor class or instance (None: no compression),
        a tfcomp.Plan of a compressor per tensor, or a tfcomp.Auto (which plans
        one itself; pass its callback() to model.fit).
    cluster_resolver, communication_options: as tf.distribute's, and as there
        collectives have no timeout unless communication_options sets one.
        TensorFlow 2.15 holds a sleeping thread per collective launch for the
        length of the timeout (tsl's PosixEnv::SchedClosureAfter), so a long
        timeout on fast steps piles up threads until thread creation fails
        (benchmarks/long_run/: 8 threads a step on the main job).
    watch_peers: keep a connection to every other worker (tfcomp.engines.peers), so
        that a worker killed mid-step fails the step on every other worker at
        once, with an error (and a log line before it) that names it and the
        step. Where a collective failed on the dead worker's connection a
        moment before, the error is that collective's, after the log line.
    heartbeat_timeout_s: how long TensorFlow's coordination service waits for a
        worker's heartbeat before it fails the job; None keeps TensorFlow's 10 s.
        A link down for 5 s took 7-10 s to carry traffic again (TCP's
        retransmissions back off meanwhile) and TensorFlow's default then
        failed the job, where 60 s let it finish (docs/failures.md). Killed
        workers are reported at once by the peer watch whatever this is; a
        collective timeout (communication_options) still bounds a stalled step.
        Applies only where the program has not configured the coordination
        service itself.
    exchange_options: min_compress_elements, bucket_bytes, global_seed,
        selection, warmup_steps, steps_per_epoch (see tfcomp.exchange.step.Exchange).
        Where a warm-up of one epoch is asked for and steps_per_epoch is not given,
        the strategy takes it from the dataset it distributes (model.fit's), when its
        length is known and the same on every worker. Where tensor
        selection is on, the workers measure (or load) the compressor's
        compression times at construction and share their average.
    """

    def __init__(self, compression=None, cluster_resolver=None, communication_options=None, watch_peers=True,
                 heartbeat_timeout_s=HEARTBEAT_TIMEOUT_S, **exchange_options):
        gradient_calls.check_supported()
        if keras_in_use.in_use().major >= 3:
            keras3_saving.install()  # compressor state in Keras 3's save_weights, .keras and BackupAndRestore
            keras3_backup.install(_backup_folder)  # one backup_dir for every worker
            keras3_loss_scale.install(_is_tfcomps)  # mixed precision: apply or skip alike on every worker
            keras3_accumulation.install(_is_tfcomps)  # gradient_accumulation_steps: exchanged when applied
        exchange = Exchange(compression, **exchange_options)
        if heartbeat_timeout_s is not None:
            cluster_resolver = cluster_resolver or tf.distribute.cluster_resolver.TFConfigClusterResolver()
            coordination.configure(cluster_resolver, heartbeat_timeout_s)
        super().__init__(cluster_resolver=cluster_resolver,
                         communication_options=communication_options)
        extended = self.extended
        base = getattr(extended, "_cross_device_ops", None)
        if not isinstance(base, cross_device_ops_lib.CollectiveAllReduce):
            raise RuntimeError(
                "tfcomp hooks MultiWorkerMirroredStrategy's private _cross_device_ops, which this "
                f"TensorFlow ({tf.__version__}) does not have as a CollectiveAllReduce; install one of "
                "tfcomp's pinned stacks (requirements/)")
        self.engine = StrategyEngine(exchange, self)
        extended._cross_device_ops = CompressingCollectiveAllReduce(base, self.engine)
        self.engine.start(watch_peers)

    def experimental_distribute_dataset(self, dataset, options=None):
        """tf.distribute's, learning the length of an epoch of the training data (model.fit
        distributes its dataset so) for a dense warm-up of one epoch: the dataset's
        cardinality where it is known, the same on every worker."""
        self.engine.learn_steps_per_epoch(steps_per_epoch(dataset))
        return super().experimental_distribute_dataset(dataset, options)

    def reduce(self, reduce_op, value, axis):
        """tf.distribute's reduce, with what Keras 3's model.fit needs of it on more than one
        worker (tfcomp.distribute.keras3_fit)."""
        return keras3_fit.reduce(self, super().reduce, reduce_op, value, axis)

    @property
    def exchange(self):
        """The tfcomp.exchange.step.Exchange the gradients run through."""
        return self.engine.exchange

    @property
    def peer_watch(self):
        """The tfcomp.engines.peers.PeerWatch (None: watch_peers=False, or one worker)."""
        return self.engine.peer_watch

    @property
    def compressor(self):
        """The compressor (or tfcomp.Plan) gradients run with, momentum resolved once bound."""
        return self.exchange.compressor

    def payload_bytes(self, variables):
        """Bytes one worker sends per step for these (trainable) variables."""
        return self.engine.payload_bytes(variables)
