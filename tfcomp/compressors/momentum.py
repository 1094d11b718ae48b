"""Momentum on the worker, before compression, for the error-feedback compressors."""
import copy

import tensorflow as tf

AUTO = "auto"


class WorkerMomentum:
    """Momentum on the worker, before compression, for error-feedback compressors
    whose aggregate is unstable under the optimizer's own momentum (EFSignSGD and
    the sparsifiers: benchmarks/results/convergence.md). The low-rank compressors
    default to None, as in PowerSGD's paper, and take "auto" when asked.

    momentum="auto" takes over the momentum of a Keras SGD optimizer
    that the engine sees: the worker keeps the velocity u <- beta * u + g and
    compresses u plus the residual (error feedback on the update, DGC's momentum
    correction), and the optimizer is handed u_t - beta * u_{t-1} of the averaged
    u, which its own momentum turns back into exactly u_t, so the user's optimizer
    and its checkpoints stay as they were. A number is a momentum the compressor
    applies itself; then compile the optimizer without momentum. None: error
    feedback on the gradient, the optimizer's momentum as it is.
    """

    def _init_momentum(self, momentum):
        if momentum != AUTO and momentum is not None and not (
                isinstance(momentum, (int, float)) and 0 <= momentum < 1):
            raise ValueError(f"{type(self).__name__}: momentum must be 'auto', a number in [0, 1) or None, "
                             f"got {momentum!r}")
        self.momentum = momentum
        self._handoff = False  # set by with_optimizer_momentum

    @property
    def worker_momentum(self):
        """The momentum this compressor applies (None: none)."""
        return None if self.momentum == AUTO else self.momentum

    def with_optimizer_momentum(self, beta):
        """A copy that takes over an SGD optimizer's momentum beta (momentum='auto')."""
        taken = copy.copy(self)
        taken.momentum = beta
        taken._handoff = True  # pylint: disable=protected-access
        return taken

    def momentum_state_specs(self, shape, dtype):
        specs = {}
        if self.worker_momentum is not None:
            specs["velocity"] = (tuple(shape), tf.as_dtype(dtype))
        if self._handoff:
            specs["handed_off"] = (tuple(shape), tf.as_dtype(dtype))
        return specs

    def with_momentum(self, grad, state):
        """grad, or the worker's velocity after this step's update where it keeps one."""
        if self.worker_momentum is None:
            return grad
        velocity = state["velocity"]
        velocity.assign(self.worker_momentum * velocity + grad)
        return velocity.read_value()

    def corrected(self, grad, state):
        """What is compressed: grad (or the worker's velocity) plus the residual."""
        grad = self.with_momentum(grad, state)
        return grad + state["residual"] if "residual" in state else grad

    def hand_off(self, averaged, state):
        """What the optimizer is given for the averaged update: itself, or when the
        optimizer's momentum was taken over, u_t - beta * u_{t-1}."""
        if not self._handoff:
            return averaged
        previous = state["handed_off"]
        given = averaged - self.worker_momentum * previous
        with tf.control_dependencies([given]):
            previous.assign(averaged)
        return tf.identity(given)
