"""tfcomp.distribute.MultiWorkerMirroredStrategy: tf.distribute's strategy with
compressed gradient aggregation. Swap it in for tf.distribute's and keep the
rest of the program (TF_CONFIG, strategy.scope(), model.fit or strategy.run).
"""
import os

import tensorflow as tf
from tensorflow.python.distribute import cross_device_ops as cross_device_ops_lib
from tensorflow.python.eager import context
from tensorflow.python.framework import errors

from tfcomp.engines import agreement
from tfcomp.state import keras3 as keras3_saving
from tfcomp.keras import version as keras_in_use
from tfcomp.engines import peers
from tfcomp.distribute import gradient_calls, keras3_fit
from tfcomp.distribute.cross_device_ops import CompressingCollectiveAllReduce
from tfcomp.exchange import hooks
from tfcomp.exchange.step import Exchange


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
        (benchmarks/long_run.py: 8 threads a step on the main job).
    watch_peers: keep a connection to every other worker (tfcomp.engines.peers), so
        that a worker killed mid-step fails the step on every other worker at
        once, with an error (and a log line before it) that names it and the
        step. Where a collective failed on the dead worker's connection a
        moment before, the error is that collective's, after the log line.
    exchange_options: min_compress_elements, bucket_bytes, global_seed,
        selection, warmup_steps (see tfcomp.exchange.step.Exchange). Where tensor
        selection is on, the workers measure (or load) the compressor's
        compression times at construction and share their average.
    """

    def __init__(self, compression=None, cluster_resolver=None, communication_options=None, watch_peers=True,
                 **exchange_options):
        if isinstance(compression, hooks.Controller):
            keras_in_use.require_keras2("tfcomp.Auto", "profiles model.fit with the Timeline, which instruments "
                                        "Keras 2's train function")
        gradient_calls.check_supported()
        if keras_in_use.in_use().major >= 3:
            keras3_saving.install()  # compressor state in Keras 3's save_weights, .keras and BackupAndRestore
        exchange = Exchange(compression, **exchange_options)
        super().__init__(cluster_resolver=cluster_resolver,
                         communication_options=communication_options)
        extended = self.extended
        base = getattr(extended, "_cross_device_ops", None)
        if not isinstance(base, cross_device_ops_lib.CollectiveAllReduce):
            raise RuntimeError(
                "tfcomp hooks MultiWorkerMirroredStrategy's private _cross_device_ops, which this "
                f"TensorFlow ({tf.__version__}) does not have as a CollectiveAllReduce; install one of "
                "tfcomp's pinned stacks (requirements/)")
        extended._cross_device_ops = CompressingCollectiveAllReduce(
            base, exchange, rank=self.cluster_resolver.task_id or 0)
        self.exchange = exchange
        self._check_workers_agree()
        self._share_compression_profile()
        self._serve_auto()
        self.peer_watch = self._watch_peers() if watch_peers else None
        extended._cross_device_ops.peer_watch = self.peer_watch

    def reduce(self, reduce_op, value, axis):
        """tf.distribute's reduce, with what Keras 3's model.fit needs of it on more than one
        worker (tfcomp.distribute.keras3_fit)."""
        return keras3_fit.reduce(self, super().reduce, reduce_op, value, axis)

    @property
    def compressor(self):
        """The compressor (or tfcomp.Plan) gradients run with, momentum resolved once bound."""
        return self.exchange.compressor

    def payload_bytes(self, variables):
        """Bytes one worker sends per step for these (trainable) variables."""
        return self.exchange.payload_bytes([(v.shape, v.dtype) for v in variables],
                                           self.num_replicas_in_sync, [keras_in_use.tensor_name(v) for v in variables])

    def _check_workers_agree(self):
        """Every worker must run the same exchange, or payloads would not line up."""
        agreement.check_workers_agree(self.exchange, self._gather_int, self.cluster_resolver.task_id)

    def _gather_int(self, value):
        return [row[0] for row in self._gather_ints([value])]

    def _gather_ints(self, values):
        """Every worker's list of ints (as long as this worker's), in group-rank order."""
        @tf.function
        def run():
            ctx = tf.distribute.get_replica_context()
            return ctx.all_gather(tf.constant([values], tf.int64), axis=0)
        return self.experimental_local_results(self.run(run))[0].numpy().tolist()

    def _watch_peers(self):
        resolver = self.cluster_resolver
        addresses = cluster_addresses(resolver)
        if len(addresses) < 2:
            return None  # no other worker to watch
        jobs = sorted({job for job, _ in addresses})
        listener, port = peers.listen()
        gathered = self._gather_ints([jobs.index(resolver.task_type), resolver.task_id, port, os.getpid()])
        tasks = [(jobs[job], index) for job, index, _, _ in gathered]
        workers = [peers.Peer(rank, f"{job} {index}", addresses[(job, index)], pid)
                   for rank, ((job, index), (_, _, _, pid)) in enumerate(zip(tasks, gathered))]
        return peers.PeerWatch(tasks.index((resolver.task_type, resolver.task_id)), workers, listener,
                               [addresses[t].rsplit(":", 1)[0] for t in tasks], [g[2] for g in gathered],
                               on_loss=_abort_collectives)

    def _mean_floats(self, values):
        """Every worker's list of floats (as long as this worker's), averaged."""
        @tf.function
        def run():
            ctx = tf.distribute.get_replica_context()
            return ctx.all_reduce(tf.distribute.ReduceOp.MEAN, tf.constant(values, tf.float64))
        return self.experimental_local_results(self.run(run))[0].numpy().tolist()

    def _share_compression_profile(self):
        agreement.share_compression_profile(self.exchange, self._mean_floats)

    def _serve_auto(self):
        if self.exchange.controller is not None:
            self.exchange.controller.workers = hooks.Workers("tf.distribute", self.cluster_resolver.task_id or 0,
                                                 self.num_replicas_in_sync, self._mean_floats, self._gather_int,
                                                 strategy=self)


def cluster_addresses(cluster_resolver):
    """{(job, task index): host:port} of the tasks that train (chief and workers)."""
    spec = cluster_resolver.cluster_spec().as_dict()
    addresses = {}
    for job in ("chief", "worker"):
        tasks = spec.get(job, [])
        for index, address in (tasks.items() if isinstance(tasks, dict) else enumerate(tasks)):
            addresses[(job, index)] = address
    return addresses


def _abort_collectives(loss):
    """Fails the running step (and any later collective) with the loss's message."""
    context.context().abort_collective_ops(errors.UNAVAILABLE, loss.message)

