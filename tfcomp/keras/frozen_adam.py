"""FrozenVarianceAdam: Adam for compressed gradients.

Adam divides each element's step by the root of its second moment v. Fed
compressed gradients, v measures the compressor's output, not the gradient: a
sparsifier sends an element's accumulated residual in bursts, a sign
compressor sends every element of a tensor at one scale, a low-rank one
smears it. Either way v is off by a different factor per element, and in
tfcomp's convergence benchmark (benchmarks/results/convergence.md) every
error-feedback compressor under Keras' Adam ended 1.3 to 5.1 points below
dense on the digits CNN, after the same dense epoch.

The remedy is 1-bit Adam's (Tang et al., 2021): estimate v while the exchange
still sends dense gradients (its warm-up), then freeze it, so compressed
gradients only move the first moment, where error feedback makes their sum
right. Elements whose gradient was exactly zero during the warm-up (constant
input pixels, dead units) would keep v = 0 and turn any later compression
error into a step of error / epsilon, so v is floored at variance_floor times
its tensor's mean.
"""
import tensorflow as tf

VARIANCE_FLOOR = 0.01


class FrozenVarianceAdam(tf.keras.optimizers.Adam):
    """Keras' Adam whose second moment stops updating after variance_steps steps and
    is floored at variance_floor x its tensor's mean (see the module doc).

    variance_steps: None (default) to freeze it when the tfcomp exchange that hands
        this optimizer its gradients starts compressing (its warmup_steps, which
        must then be at least 1); or a number of steps. Used without tfcomp and
        left at None, v is never frozen.
    Every other argument is Adam's (weight_decay= makes it AdamW); amsgrad is not
    supported.
    """

    def __init__(self, learning_rate=0.001, *, variance_steps=None, variance_floor=VARIANCE_FLOOR, **adam_options):
        if adam_options.get("amsgrad"):
            raise ValueError("FrozenVarianceAdam: amsgrad keeps a running maximum of v, which a frozen v makes "
                             "moot; leave amsgrad off")
        if variance_steps is not None and (not isinstance(variance_steps, int) or variance_steps < 1):
            raise ValueError(f"FrozenVarianceAdam: variance_steps must be None or an integer >= 1, "
                             f"got {variance_steps!r}")
        if not (isinstance(variance_floor, (int, float)) and 0 <= variance_floor < 1):
            raise ValueError(f"FrozenVarianceAdam: variance_floor must be in [0, 1), got {variance_floor!r}")
        super().__init__(learning_rate, **adam_options)
        self.variance_steps = variance_steps
        self.variance_floor = float(variance_floor)

    def get_config(self):
        return {**super().get_config(), "variance_steps": self.variance_steps,
                "variance_floor": self.variance_floor}

    def freeze_at_warmup_end(self, warmup_steps):
        """The exchange's call: variance_steps left at None becomes its dense warm-up."""
        if self.variance_steps is not None:
            return
        if warmup_steps < 1:
            raise ValueError("FrozenVarianceAdam estimates the variance from dense gradients before it freezes "
                             "it, and this exchange compresses from the first step: pass warmup_steps= (for "
                             "example an epoch's steps) to the tfcomp strategy or DistributedOptimizer, or "
                             "variance_steps= to FrozenVarianceAdam")
        self.variance_steps = warmup_steps

    def _moments(self, variable):
        if hasattr(self, "_get_variable_index"):  # Keras 3
            index = self._get_variable_index(variable)
        else:
            index = self._index_dict[self._var_key(variable)]
        return self._momentums[index], self._velocities[index]

    def update_step(self, gradient, variable, learning_rate=None):
        # Keras 2 calls update_step(gradient, variable), Keras 3 adds the learning rate.
        dtype = variable.dtype
        lr = tf.cast(self.learning_rate if learning_rate is None else learning_rate, dtype)
        gradient = tf.cast(tf.convert_to_tensor(gradient), dtype)
        step = tf.cast(self.iterations + 1, dtype)
        variance_step = step if self.variance_steps is None else tf.minimum(step, float(self.variance_steps))
        m, v = self._moments(variable)
        beta_1, beta_2 = tf.cast(self.beta_1, dtype), tf.cast(self.beta_2, dtype)
        alpha = lr * tf.sqrt(1 - tf.pow(beta_2, variance_step)) / (1 - tf.pow(beta_1, step))
        m.assign_add((gradient - m) * (1 - beta_1))
        still_estimating = tf.cast(tf.equal(variance_step, step), dtype)
        v.assign_add(still_estimating * (tf.square(gradient) - v) * (1 - beta_2))
        floored = tf.maximum(v, self.variance_floor * tf.reduce_mean(v))
        variable.assign_sub(m * alpha / (tf.sqrt(floored) + self.epsilon))
