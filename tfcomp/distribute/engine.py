"""The tf.distribute engine's side of tfcomp.engines.engine.Engine: the strategy's
collectives (all_gather and all_reduce in a replica context) and its cluster's
tasks, for the start-up steps every engine runs."""
import tensorflow as tf
from tensorflow.python.eager import context
from tensorflow.python.framework import errors

from tfcomp.engines.engine import Engine


_COLLECTIVES = {
    "gather": lambda ctx, x: ctx.all_gather(x, axis=0),
    "mean": lambda ctx, x: ctx.all_reduce(tf.distribute.ReduceOp.MEAN, x),
}


class StrategyEngine(Engine):
    """The engine of a tfcomp.distribute.MultiWorkerMirroredStrategy (one device per worker)."""

    kind = "tf.distribute"

    def __init__(self, exchange, strategy):
        resolver = strategy.cluster_resolver
        super().__init__(exchange, rank=resolver.task_id or 0, num_workers=strategy.num_replicas_in_sync)
        self.strategy = strategy
        self._addresses = cluster_addresses(resolver)
        self._jobs = sorted({job for job, _ in self._addresses})
        self._collective_functions = {}  # kind -> tf.function (_on_the_replica)

    def gather_ints(self, values):
        return self._on_the_replica("gather", tf.constant([values], tf.int64))

    def mean_floats(self, values):
        return self._on_the_replica("mean", tf.constant(values, tf.float64))

    def _on_the_replica(self, kind, value):
        """A start-up or controller collective (_COLLECTIVES[kind]) of value, run on this
        worker's replica, as a list. Its tf.function is made once per kind and traced once
        per shape: one made per call would register a new function in the eager context
        each time (tfcomp.Auto's drift check calls this every replan_every steps)."""
        function = self._collective_functions.get(kind)
        if function is None:
            collective = _COLLECTIVES[kind]
            strategy = self.strategy

            @tf.function
            def function(x):
                # tf.identity puts the argument on the replica's device: the collective's destination.
                return strategy.run(lambda y: collective(tf.distribute.get_replica_context(), tf.identity(y)),
                                    args=(x,))
            self._collective_functions[kind] = function
        return self.strategy.experimental_local_results(function(value))[0].numpy().tolist()

    def peer_identity(self):
        resolver = self.strategy.cluster_resolver
        return [self._jobs.index(resolver.task_type), resolver.task_id]

    def describe_peer(self, identity):
        job, index = self._jobs[identity[0]], identity[1]
        address = self._addresses[(job, index)]
        return f"{job} {index}", address, address.rsplit(":", 1)[0]

    @staticmethod
    def on_peer_loss(loss):
        """Fails the running step (and any later collective) with the loss's message."""
        context.context().abort_collective_ops(errors.UNAVAILABLE, loss.message)


def cluster_addresses(cluster_resolver):
    """{(job, task index): host:port} of the tasks that train (chief and workers)."""
    spec = cluster_resolver.cluster_spec().as_dict()
    addresses = {}
    for job in ("chief", "worker"):
        tasks = spec.get(job, [])
        for index, address in (tasks.items() if isinstance(tasks, dict) else enumerate(tasks)):
            addresses[(job, index)] = address
    return addresses
