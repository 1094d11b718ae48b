"""Sign compressors on the packed-sign ops: SignSGD (majority vote) and EF-SignSGD.

Packed signs do not add, so both allgather every worker's words.
"""
import numpy as np
import tensorflow as tf

from tfcomp import ops
from tfcomp.compressors.base import Collective, Compressor, Payload, PayloadSpec, Round
from tfcomp.compressors.momentum import AUTO, WorkerMomentum


def _num_words(shape):
    return -(-tf.TensorShape(shape).num_elements() // 32)


def zeros_alternating(x, step):
    """x with its exact zeros made the smallest normal number, + on even steps and
    - on odd ones. One bit cannot say 0: a zero always packed as + would push every
    weight whose gradient is exactly 0 (dead ReLU units, unused embedding rows,
    padding) the same way every step, without bound under majority vote."""
    tiny = np.finfo(x.dtype.as_numpy_dtype).tiny
    signed_tiny = tf.where(tf.equal(step % 2, 0), tf.constant(tiny, x.dtype), tf.constant(-tiny, x.dtype))
    return tf.where(tf.equal(x, 0), signed_tiny, x)


class SignSGD(Compressor):
    """signSGD with majority vote (Bernstein et al.): the aggregate is
    sign(sum of the workers' signs), +1/-1 per element (0 on a tie), whether
    the engine asks for the mean or the sum; the step size is the learning
    rate's, as in the paper. An exact zero is sent as + and - on alternate
    steps (zeros_alternating)."""

    def payload_specs(self, shape, dtype):
        return [[PayloadSpec((_num_words(shape),), tf.uint32, Collective.ALLGATHER)]]

    def compress(self, grad, state, ctx):
        words, _ = ops.sign_pack(zeros_alternating(grad, ctx.step))

        def finish(gathered):
            signs = ops.sign_majority(gathered[0], tf.size(grad, out_type=tf.int64), dtype=grad.dtype)
            return tf.reshape(signs, tf.shape(grad))
        return Round([Payload(words, Collective.ALLGATHER)], finish)


class EFSignSGD(WorkerMomentum, Compressor):
    """EF-SignSGD (Karimireddy et al.): p = g + e is sent as mean|p| * sign(p);
    the residual e = p - mean|p| * sign(p) stays on the worker for the next
    step, so nothing is lost. The aggregate is the mean (or sum) of the
    workers' scaled signs. momentum: see WorkerMomentum. Exact zeros as in
    SignSGD."""

    def __init__(self, momentum=AUTO):
        self._init_momentum(momentum)

    def state_specs(self, shape, dtype):
        return {"residual": (tuple(shape), tf.as_dtype(dtype)), **self.momentum_state_specs(shape, dtype)}

    def payload_specs(self, shape, dtype):
        return [[PayloadSpec((_num_words(shape),), tf.uint32, Collective.ALLGATHER),
                 PayloadSpec((1,), tf.as_dtype(dtype), Collective.ALLGATHER)]]

    def compress(self, grad, state, ctx):
        corrected = self.corrected(grad, state)
        words, scale = ops.sign_pack(zeros_alternating(corrected, ctx.step))
        n = tf.size(grad, out_type=tf.int64)
        sent = tf.reshape(ops.sign_unpack(words, scale, n), tf.shape(grad))
        state["residual"].assign(corrected - sent)

        def finish(gathered):
            all_words, all_scales = gathered  # [K, W], [K, 1]
            words_per_worker = all_words.shape[1]
            signs = ops.sign_unpack(tf.reshape(all_words, [-1]), tf.ones([], grad.dtype),
                                    tf.size(all_words, out_type=tf.int64) * 32)
            signs = tf.reshape(signs, [-1, words_per_worker * 32])[:, :n]
            return self.hand_off(tf.reshape(ctx.from_stacked(signs * all_scales), tf.shape(grad)), state)
        return Round([Payload(words, Collective.ALLGATHER),
                      Payload(tf.reshape(scale, [1]), Collective.ALLGATHER)], finish)
