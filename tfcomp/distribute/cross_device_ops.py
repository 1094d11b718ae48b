"""A CollectiveAllReduce that compresses gradient aggregation.

MultiWorkerMirroredStrategy takes no cross_device_ops argument and asserts that
its own is a CollectiveAllReduce, so the engine subclasses it and swaps the
instance in. Only the reduction of a Keras optimizer's gradients goes through
the Exchange; every other reduction (metrics, variable syncs, user
all_reduce calls) takes the exact path of the parent class.
"""
from tensorflow.python.distribute import cross_device_ops as cross_device_ops_lib
from tensorflow.python.distribute import distribute_utils, reduce_util
from tensorflow.python.distribute import values as value_lib
from tensorflow.python.framework import ops
from tensorflow.python.ops import array_ops, collective_ops, math_ops
from tensorflow.python.util import nest

from tfcomp.distribute import gradient_calls
from tfcomp.exchange import fusion


class LauncherCollectives:
    """The exchange's collective interface on one replica's CollectiveReplicaLauncher:
    its group, instance keys and options, without its ordering token. The token
    (a resource every collective takes) would make TensorFlow order whole tf.cond
    branches, so a bucket's compression would wait for the bucket before it; the
    exchange orders its collectives itself (tfcomp.exchange.step.InOrder)."""

    def __init__(self, launcher, options, num_workers):
        self._launcher = launcher
        self._options = launcher._options.merge(options)  # pylint: disable=protected-access
        self.num_workers = num_workers

    def allreduce(self, buffers):
        return [self._run(collective_ops.all_reduce_v2, b) for b in buffers]

    def allgather(self, buffers):
        # Payloads have fixed capacity, so the unpadded gather fits.
        return [self._run(collective_ops.all_gather_v2, b) for b in buffers]

    def _run(self, collective, buffer):
        launcher = self._launcher
        # pylint: disable=protected-access
        instance_key = launcher._next_instance_key()
        with ops.device(launcher._device):
            return collective(buffer, launcher._group_size, launcher._group_key, instance_key,
                              communication_hint=self._options.implementation.value,
                              timeout=self._options.timeout_seconds)


class CompressingCollectiveAllReduce(cross_device_ops_lib.CollectiveAllReduce):
    """CollectiveAllReduce whose gradient aggregation runs tfcomp's Exchange."""

    def __init__(self, base, engine):
        super().__init__(devices=base._devices, group_size=base._group_size, options=base._options,
                         collective_keys=base._collective_keys,
                         canonicalize_devices=base._canonicalize_devices)
        if len(self._devices) != 1:
            raise NotImplementedError(
                f"tfcomp's MultiWorkerMirroredStrategy compresses between workers with one device "
                f"each; this worker has {len(self._devices)} ({', '.join(self._devices)}). Run one "
                f"worker per device (for example CUDA_VISIBLE_DEVICES per process).")
        self.engine = engine  # a tfcomp.distribute.engine.StrategyEngine

    @property
    def exchange(self):
        """The Exchange the next trace runs (set it to run another)."""
        return self.engine.exchange

    @exchange.setter
    def exchange(self, exchange):
        self.engine.exchange = exchange

    def _gather_across_workers(self, tensor):
        """[K, ...]: every worker's tensor, for saving per-worker state (all workers save)."""
        wire = fusion.on_wire(tensor)
        with ops.device(self._devices[0]):
            gathered = self._launchers[0]._all_gather(array_ops.expand_dims(wire, 0), self._options)  # pylint: disable=protected-access
        return math_ops.cast(gathered, tensor.dtype)

    def _compressed(self, reduce_op, value, call, replica_id, options):
        flat = nest.flatten(value, expand_composites=False)
        if len(flat) != len(call.variables):
            raise RuntimeError(f"tfcomp: {len(flat)} gradients reached the all-reduce for "
                               f"{len(call.variables)} variables; cannot match them up")
        collectives = LauncherCollectives(self._launchers[replica_id], self._options.merge(options),
                                          self._group_size)
        # The state hangs on the optimizer; on this object where the optimizer could not be seen.
        # Every worker saves every worker's rows (gathered), as tf.distribute programs save on all.
        reduced = self.engine.reduce_gradients(
            flat, call.variables, call.optimizer if call.optimizer is not None else self, collectives,
            "mean" if reduce_op == reduce_util.ReduceOp.MEAN else "sum", device=self._devices[replica_id],
            gather=self._gather_across_workers)
        return nest.pack_sequence_as(value, reduced)

    def _all_reduce(self, reduce_op, value, replica_id, options):
        # ReplicaContext.all_reduce without merge_call.
        call = gradient_calls.find()
        if call is None:
            return super()._all_reduce(reduce_op, value, replica_id, options)
        return self._compressed(reduce_op, value, call, replica_id, options)

    def batch_reduce_implementation(self, reduce_op, value_destination_pairs, options):
        # The merge_call path (Keras' aggregation under MultiWorkerMirroredStrategy).
        call = gradient_calls.find()
        if call is None:
            return super().batch_reduce_implementation(reduce_op, value_destination_pairs, options)
        values = [v.values[0] if isinstance(v, value_lib.DistributedValues) else v
                  for v, _ in value_destination_pairs]
        reduced = self._compressed(reduce_op, values, call, 0, options)
        return [distribute_utils.regroup((r,), wrap_class=value_lib.Mirrored) for r in reduced]
