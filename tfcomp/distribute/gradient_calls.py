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
"""
import dataclasses
import functools
import sys

from tfcomp import keras_in_use

ENGINE = "tfcomp.distribute.MultiWorkerMirroredStrategy"


@functools.lru_cache(maxsize=None)
def _codes():
    """(all_reduce_sum_gradients, _all_reduce_sum_fn) code objects of the Keras in use."""
    utils = keras_in_use.in_use().internal("optimizers.utils")
    return utils.all_reduce_sum_gradients.__code__, utils._all_reduce_sum_fn.__code__  # pylint: disable=protected-access


def check_supported():
    """Fails with a clear message unless tf.keras is a Keras 2 whose aggregation functions are as expected."""
    keras = keras_in_use.require_keras2(ENGINE)
    try:
        aggregate, merge_fn = _codes()
    except (ImportError, AttributeError):
        aggregate = merge_fn = None
    if (aggregate is None or "filtered_grads_and_vars" not in aggregate.co_varnames
            or "grads_and_vars" not in merge_fn.co_varnames):
        raise keras_in_use.UnsupportedKeras(
            f"{ENGINE} recognises gradient aggregation by Keras 2's "
            f"{keras.package}.src.optimizers.utils.all_reduce_sum_gradients, which {keras.name} does not have "
            f"in the expected form: install one of tfcomp's pinned stacks (requirements/).")


@dataclasses.dataclass(frozen=True)
class GradientCall:
    variables: list  # the variables of the gradients being reduced, in order
    optimizer: object  # the Keras optimizer, or None if it could not be seen


def find():
    """The GradientCall being traced, or None if this reduction is not of gradients."""
    aggregate_code, merge_code = _codes()
    frame = _frame_of(sys._getframe(1), (aggregate_code, merge_code))
    if frame is None:
        return None
    if frame.f_code is aggregate_code:
        pairs = frame.f_locals.get("filtered_grads_and_vars") or ()
        return GradientCall([v for _, v in pairs], _optimizer_above(frame))
    # merge_call: the optimizer's frames are on the replica thread, which waits for this one.
    pairs = frame.f_locals.get("grads_and_vars") or ()
    optimizer = None
    for other in sys._current_frames().values():  # pylint: disable=protected-access
        aggregate = _frame_of(other, (aggregate_code,))
        if aggregate is not None:
            optimizer = _optimizer_above(aggregate)
            break
    return GradientCall([v for _, v in pairs], optimizer)


def _frame_of(frame, codes):
    while frame is not None and frame.f_code not in codes:
        frame = frame.f_back
    return frame


def _optimizer_above(frame):
    keras = keras_in_use.in_use()
    kinds = (keras.internal("optimizers.optimizer").Optimizer,
             keras.internal("optimizers.legacy.optimizer_v2").OptimizerV2)
    while frame is not None:
        candidate = frame.f_locals.get("self")
        if isinstance(candidate, kinds):
            return candidate
        frame = frame.f_back
    return None
