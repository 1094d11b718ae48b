"""Keras 3's model.fit under a MultiWorkerMirroredStrategy of more than one
worker, which fails upstream (keras-team/keras#20585, in Keras 3.15.1 still)
on two calls of strategy.reduce that tf.distribute's strategy cannot serve:

- TensorFlowTrainer._maybe_symbolic_build reduces the first distributed data
  batch (a nest of per-replica values) across workers, only to build the model
  and optimizer from its shapes: a collective on data, which fails on a nest
  and on workers whose shards differ in size. The local batch serves the same
  purpose, so that is what it gets.
- reduce_per_replica averages per-replica scalars (the logs) with axis=0,
  which a scalar does not have: they are reduced with no axis.
"""
import functools
import sys

import tensorflow as tf

from tfcomp.keras import version as keras_in_use


def reduce(strategy, base_reduce, reduce_op, value, axis):
    """strategy.reduce(reduce_op, value, axis) through base_reduce, tf.distribute's."""
    caller = sys._getframe(2)  # pylint: disable=protected-access  # (1 is the strategy's reduce)
    if caller is not None and caller.f_code is _symbolic_build_code():
        return tf.nest.map_structure(lambda v: strategy.experimental_local_results(v)[0], value)

    def one(v):
        local = strategy.experimental_local_results(v)
        scalar = bool(local) and getattr(local[0], "shape", None) is not None and local[0].shape.rank == 0
        return base_reduce(reduce_op, v, None if scalar else axis)
    return tf.nest.map_structure(one, value)


@functools.lru_cache(maxsize=None)
def _symbolic_build_code():
    keras = keras_in_use.in_use()
    if keras.major < 3:
        return None
    trainer = keras.internal("backend.tensorflow.trainer").TensorFlowTrainer
    return getattr(getattr(trainer, "_maybe_symbolic_build", None), "__code__", None)
