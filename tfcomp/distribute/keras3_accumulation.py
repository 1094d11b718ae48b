"""Keras 3 optimizers' gradient_accumulation_steps under tfcomp's strategy.

Keras 3 (TensorFlow backend) accumulates gradients in a tf.cond in the replica
context whose applying branch reduces them across replicas. Under
MultiWorkerMirroredStrategy on CPUs that reduction is a merge_call, which a
tf.cond in the replica context cannot hold, so model.fit fails at its first
trace (tf.distribute's own strategy alike). Here the decision is taken in the
cross-replica context, as Keras' own LossScaleOptimizer takes its: on a step
that applies, every worker adds the step's gradients to its accumulators,
averages them and exchanges that once (the compressor and its error feedback
step once per applied step, not per micro-batch); on the others it only
accumulates. Every worker counts the same steps, so all take the same branch.
"""
import tensorflow as tf

from tfcomp.keras import version as keras_in_use


def install(applies_to):
    """Patches Keras 3's optimizers once per process, for steps run under a strategy for
    which applies_to(strategy) is true; others (and optimizers that do not accumulate)
    run as Keras wrote them."""
    cls = keras_in_use.in_use().internal("optimizers.base_optimizer").BaseOptimizer
    if getattr(cls, "_tfcomp_accumulates_across_workers", False):
        return
    keras_apply = cls._backend_apply_gradients  # pylint: disable=protected-access

    def _backend_apply_gradients(self, grads, trainable_variables):
        if (not self.gradient_accumulation_steps or tf.distribute.in_cross_replica_context()
                or not applies_to(tf.distribute.get_strategy())):
            return keras_apply(self, grads, trainable_variables)
        if self.use_ema:
            raise ValueError("tfcomp: gradient_accumulation_steps with use_ema is not supported under "
                             "tfcomp's strategy; use one or the other")
        return accumulate_or_apply(self, grads, list(trainable_variables))

    cls._backend_apply_gradients = _backend_apply_gradients  # pylint: disable=protected-access
    cls._tfcomp_accumulates_across_workers = True  # pylint: disable=protected-access


def accumulate_or_apply(optimizer, grads, variables):
    """What Keras 3's _backend_apply_gradients does with gradient accumulation, its decision
    taken in the cross-replica context."""
    steps = optimizer.gradient_accumulation_steps
    accumulators = [optimizer._accumulated_gradients[optimizer._get_variable_index(v)]  # pylint: disable=protected-access
                    for v in variables]
    is_update_step = tf.equal((optimizer.iterations + 1) % steps, 0)

    def apply(step_grads):
        mean = [(g + a) / steps for g, a in zip(step_grads, accumulators)]
        mean = optimizer._clip_gradients(mean)  # pylint: disable=protected-access
        optimizer._apply_weight_decay(variables)  # pylint: disable=protected-access
        optimizer._backend_update_step(mean, variables, optimizer.learning_rate)  # pylint: disable=protected-access
        optimizer._backend_reset_gradient_accumulators()  # pylint: disable=protected-access

    def accumulate(step_grads):
        optimizer._backend_increment_gradient_accumulators(step_grads, accumulators)  # pylint: disable=protected-access

    def decide(distribution, step_grads):
        each = distribution.extended.call_for_each_replica
        tf.cond(is_update_step, lambda: each(apply, args=(step_grads,)), lambda: each(accumulate, args=(step_grads,)))

    tf.distribute.get_replica_context().merge_call(decide, args=(list(grads),))
