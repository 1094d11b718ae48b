"""Recognises the all-reduce that aggregates a Keras optimizer's gradients.

tf.distribute gives cross-device ops no way to tell gradients from other
reductions (metrics, loss-scale checks, user all_reduce calls). Keras 2's
optimizers (the current ones and the legacy ones; Keras 2.15 as `keras` on
TensorFlow 2.15, tf-keras as `tf_keras` later) aggregate gradients through
<keras>.src.optimizers.utils.all_reduce_sum_gradients, which either
all-reduces in the replica context or, through merge_call, runs
_all_reduce_sum_fn on the strategy's thread while the replica thread waits. So
the engine looks for those calls on the stacks when a reduction is traced, and
finds there the variables the gradients belong to (their names key the
compressor state) and the optimizer that owns the state. The look happens once
per trace, not per step.

Keras 3 (TensorFlow backend) aggregates in TFOptimizer._all_reduce_sum_gradients,
which calls ReplicaContext.all_reduce: under MultiWorkerMirroredStrategy on CPUs
that is a merge_call of TensorFlow's own batch_all_reduce, so the reduction runs
on the strategy's thread and the aggregation's frame is found on the replica
thread, which waits for it.
"""
import dataclasses
import functools
import sys

from tfcomp.keras import version as keras_in_use

ENGINE = "tfcomp.distribute.MultiWorkerMirroredStrategy"
_PAIRS = "filtered_grads_and_vars"  # the aggregation's local holding the (gradient, variable) pairs


@dataclasses.dataclass(frozen=True)
class _Aggregation:
    aggregate: object  # code of the function whose local _PAIRS holds the pairs
    merge_fn: object  # code of the merge_call function that reduces them on the strategy's thread
    merge_fn_pairs: str  # merge_fn's local holding the pairs (Keras 2), or None: read them at aggregate
    optimizers: tuple  # the optimizer classes, one of which runs the aggregation


@functools.lru_cache(maxsize=None)
def _aggregation():
    """Where the Keras in use aggregates gradients."""
    keras = keras_in_use.in_use()
    if keras.major >= 3:
        optimizer = keras.internal("backend.tensorflow.optimizer").TFOptimizer
        return _Aggregation(optimizer._all_reduce_sum_gradients.__code__, _tensorflow_batch_all_reduce(),  # pylint: disable=protected-access
                            None, (keras.internal("optimizers.base_optimizer").BaseOptimizer,))
    utils = keras.internal("optimizers.utils")
    return _Aggregation(utils.all_reduce_sum_gradients.__code__, utils._all_reduce_sum_fn.__code__,  # pylint: disable=protected-access
                        "grads_and_vars", (keras.internal("optimizers.optimizer").Optimizer,
                                           keras.internal("optimizers.legacy.optimizer_v2").OptimizerV2))


def _tensorflow_batch_all_reduce():
    """The code of the batch_all_reduce that ReplicaContext.all_reduce merge_calls."""
    from tensorflow.python.distribute import distribute_lib  # pylint: disable=import-outside-toplevel
    for constant in distribute_lib.ReplicaContext.all_reduce.__code__.co_consts:
        if getattr(constant, "co_name", None) == "batch_all_reduce":
            return constant
    return None


def check_supported():
    """Fails with a clear message unless the Keras in use aggregates gradients where this module looks."""
    keras = keras_in_use.in_use()
    try:
        aggregation = _aggregation()
    except (ImportError, AttributeError):
        aggregation = None
    if (aggregation is None or aggregation.merge_fn is None
            or _PAIRS not in aggregation.aggregate.co_varnames
            or (aggregation.merge_fn_pairs is not None
                and aggregation.merge_fn_pairs not in aggregation.merge_fn.co_varnames)):
        raise keras_in_use.UnsupportedKeras(
            f"{ENGINE} recognises gradient aggregation by Keras 2's all_reduce_sum_gradients and Keras 3's "
            f"TFOptimizer._all_reduce_sum_gradients, which {keras.name} does not have in the expected form: "
            f"install one of tfcomp's pinned stacks (requirements/).")


@dataclasses.dataclass(frozen=True)
class GradientCall:
    variables: list  # the variables of the gradients being reduced, in order
    optimizer: object  # the Keras optimizer, or None if it could not be seen


def find():
    """The GradientCall being traced, or None if this reduction is not of gradients."""
    aggregation = _aggregation()
    frame = _frame_of(sys._getframe(1), (aggregation.aggregate, aggregation.merge_fn))
    if frame is None:
        return None
    if frame.f_code is aggregation.aggregate:
        return _call(frame.f_locals.get(_PAIRS), frame, aggregation)
    # merge_call: the optimizer's frames are on the replica thread, which waits for this one.
    for other in sys._current_frames().values():  # pylint: disable=protected-access
        aggregate = _frame_of(other, (aggregation.aggregate,))
        if aggregate is not None:
            # Keras 2 passes the pairs to its own merge function; Keras 3's stay at the aggregation.
            if aggregation.merge_fn_pairs:
                return _call(frame.f_locals.get(aggregation.merge_fn_pairs), aggregate, aggregation)
            return _call(aggregate.f_locals.get(_PAIRS), aggregate, aggregation)
    return None


def _call(pairs, aggregate, aggregation):
    return GradientCall([v for _, v in pairs or ()], _optimizer_above(aggregate, aggregation.optimizers))


def _frame_of(frame, codes):
    while frame is not None and frame.f_code not in codes:
        frame = frame.f_back
    return frame


def _optimizer_above(frame, kinds):
    while frame is not None:
        candidate = frame.f_locals.get("self")
        if isinstance(candidate, kinds):
            return candidate
        frame = frame.f_back
    return None
