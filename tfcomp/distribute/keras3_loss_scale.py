"""Keras 3's LossScaleOptimizer under tfcomp's strategy: every worker applies or
skips a step alike, decided from the exchanged gradients.

Keras 3's LossScaleOptimizer (TensorFlow backend) decides apply-or-skip from
each worker's own gradients, before its inner optimizer exchanges them: a worker
whose gradients alone overflow skips an exchange that the others enter, and
they wait for it until the collective timeout. Keras 2's LossScaleOptimizer
exchanges first and decides from the aggregate, as this does under tfcomp's
strategy: the gradients are unscaled, exchanged (the exchange gives every worker
NaN where any worker's gradients were not finite, and then changes no
compressor state), and the aggregate decides on every worker alike; the inner
optimizer then applies the aggregate without reducing it again. The loss scale
follows Keras' own rule: halved on a skipped step, doubled after
dynamic_growth_steps applied ones.
"""
import contextlib

import tensorflow as tf

from tfcomp.keras import version as keras_in_use


def install(applies_to):
    """Patches Keras 3's LossScaleOptimizer once per process, for steps run under a
    strategy for which applies_to(strategy) is true; others run as Keras wrote them."""
    cls = keras_in_use.in_use().internal("optimizers.loss_scale_optimizer").LossScaleOptimizer
    if getattr(cls, "_tfcomp_exchanges_first", False):
        return
    keras_apply = cls._tf_apply  # pylint: disable=protected-access

    def _tf_apply(self, grads, trainable_variables=None):
        if tf.distribute.in_cross_replica_context() or not applies_to(tf.distribute.get_strategy()):
            return keras_apply(self, grads, trainable_variables)
        return exchange_then_apply(self, grads, trainable_variables)

    cls._tf_apply = _tf_apply  # pylint: disable=protected-access
    cls._tfcomp_exchanges_first = True  # pylint: disable=protected-access


def exchange_then_apply(optimizer, grads, trainable_variables=None):
    """optimizer (a Keras 3 LossScaleOptimizer) applies grads, exchanged first, or skips
    the step, on every worker alike."""
    variables = list(trainable_variables or optimizer._trainable_variables)  # pylint: disable=protected-access
    scale = optimizer.dynamic_scale
    unscaled = [g if g is None or optimizer._overwrite_variable_with_gradient(v)  # pylint: disable=protected-access
                else g / tf.cast(scale, g.dtype) for g, v in zip(grads, variables)]
    inner = optimizer.inner_optimizer
    # The exchange (tfcomp's strategy recognises the inner optimizer's gradient reduction).
    reduced = [g for g, _ in inner._all_reduce_sum_gradients(list(zip(unscaled, variables)))]  # pylint: disable=protected-access

    def apply(aggregate):
        with _reduced_already(inner):
            inner.apply(aggregate, trainable_variables=variables)
        tf.cond(tf.equal(optimizer.step_counter, optimizer.dynamic_growth_steps - 1), grow, count)

    def grow():
        optimizer.step_counter.assign(0)
        optimizer.dynamic_scale.assign(optimizer.dynamic_scale * 2.0)

    def count():
        optimizer.step_counter.assign_add(1)

    def skip():
        optimizer.step_counter.assign(0)
        optimizer.dynamic_scale.assign(optimizer.dynamic_scale * 0.5)

    def decide(distribution, aggregate):
        # Every worker holds the same aggregate, so the same decision.
        finite = distribution.experimental_local_results(
            distribution.extended.call_for_each_replica(optimizer.check_finite, args=(aggregate,)))[0]
        # In the cross-replica context: the inner optimizer's update merge_calls, which a
        # tf.cond in the replica context cannot hold (as in Keras' own _tf_apply).
        tf.cond(finite, lambda: distribution.extended.call_for_each_replica(apply, args=(aggregate,)), skip)

    tf.distribute.get_replica_context().merge_call(decide, args=(reduced,))


@contextlib.contextmanager
def _reduced_already(inner):
    """inner's gradient reduction passes its (already exchanged) gradients through."""
    inner._all_reduce_sum_gradients = list  # pylint: disable=protected-access
    try:
        yield
    finally:
        del inner._all_reduce_sum_gradients  # pylint: disable=protected-access
