"""Recognises the all-reduce that aggregates a Keras optimizer's gradients.

tf.distribute gives cross-device ops no way to tell gradients from other
reductions (metrics, loss-scale checks, user all_reduce calls). Keras 2.15's
optimizers (the current ones and the legacy ones) aggregate gradients through
keras.src.optimizers.utils.all_reduce_sum_gradients, which either all-reduces
in the replica context or, through merge_call, runs _all_reduce_sum_fn on the
strategy's thread while the replica thread waits. So the engine looks for
those calls on the stacks when a reduction is traced, and finds there the
variables the gradients belong to (their names key the compressor state) and
the optimizer that owns the state. The look happens once per trace, not per
step.
"""
import dataclasses
import sys

from keras.src.optimizers import utils as keras_optimizer_utils

_AGGREGATE = keras_optimizer_utils.all_reduce_sum_gradients.__code__
_MERGE_FN = keras_optimizer_utils._all_reduce_sum_fn.__code__  # pylint: disable=protected-access


def check_supported():
    """Fails with a clear message if the pinned Keras changed the functions looked for."""
    if ("filtered_grads_and_vars" not in _AGGREGATE.co_varnames
            or "grads_and_vars" not in _MERGE_FN.co_varnames):
        raise RuntimeError(
            "tfcomp's tf.distribute engine recognises gradient aggregation by Keras 2.15's "
            "keras.src.optimizers.utils.all_reduce_sum_gradients, which this Keras does not have "
            "in the expected form. Install the pinned stack (tensorflow==2.15.1).")


@dataclasses.dataclass(frozen=True)
class GradientCall:
    variables: list  # the variables of the gradients being reduced, in order
    optimizer: object  # the Keras optimizer, or None if it could not be seen


def find():
    """The GradientCall being traced, or None if this reduction is not of gradients."""
    frame = _frame_of(sys._getframe(1), (_AGGREGATE, _MERGE_FN))
    if frame is None:
        return None
    if frame.f_code is _AGGREGATE:
        pairs = frame.f_locals.get("filtered_grads_and_vars") or ()
        return GradientCall([v for _, v in pairs], _optimizer_above(frame))
    # merge_call: the optimizer's frames are on the replica thread, which waits for this one.
    pairs = frame.f_locals.get("grads_and_vars") or ()
    optimizer = None
    for other in sys._current_frames().values():  # pylint: disable=protected-access
        aggregate = _frame_of(other, (_AGGREGATE,))
        if aggregate is not None:
            optimizer = _optimizer_above(aggregate)
            break
    return GradientCall([v for _, v in pairs], optimizer)


def _frame_of(frame, codes):
    while frame is not None and frame.f_code not in codes:
        frame = frame.f_back
    return frame


def _optimizer_above(frame):
    from keras.src.optimizers import optimizer as current
    from keras.src.optimizers.legacy import optimizer_v2 as legacy
    kinds = (current.Optimizer, legacy.OptimizerV2)
    while frame is not None:
        candidate = frame.f_locals.get("self")
        if isinstance(candidate, kinds):
            return candidate
        frame = frame.f_back
    return None
