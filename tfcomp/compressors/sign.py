"""Sign compressors on the packed-sign ops: SignSGD (majority vote) and EF-SignSGD.

Packed signs do not add, so both allgather every worker's words.
"""
import tensorflow as tf

from tfcomp import ops
from tfcomp.compressors.base import Collective, Compressor, Payload, PayloadSpec, Round
from tfcomp.compressors.momentum import AUTO, WorkerMomentum


def _num_words(shape):
    return -(-tf.TensorShape(shape).num_elements() // 32)


def zero_bit(step):
    """The bit an exact zero (+0 or -0) is sent as: + on even steps, - on odd ones.
    One bit cannot say 0: a zero always packed as + would push every weight whose
    gradient is exactly 0 (dead ReLU units, unused embedding rows, padding) the same
    way every step, without bound under majority vote. The packing ops take it
    (sign_pack's and sign_ef_pack's zero_bit), so the rule costs no pass of its own."""
    return tf.equal(step % 2, 0)


class SignSGD(Compressor):
    """signSGD with majority vote (Bernstein et al.): the aggregate is
    sign(sum of the workers' signs), +1/-1 per element (0 on a tie), whether
    the engine asks for the mean or the sum; the step size is the learning
    rate's, as in the paper. An exact zero is sent as + and - on alternate
    steps (zero_bit). Encode: one pass over the gradient (sign_pack); decode:
    one write of the result (sign_majority)."""

    def payload_specs(self, shape, dtype):
        return [[PayloadSpec((_num_words(shape),), tf.uint32, Collective.ALLGATHER)]]

    def compress(self, grad, state, ctx):
        words, _ = ops.sign_pack(grad, zero_bit(ctx.step))

        def finish(gathered):
            signs = ops.sign_majority(gathered[0], tf.size(grad, out_type=tf.int64), dtype=grad.dtype)
            return tf.reshape(signs, tf.shape(grad))
        return Round([Payload(words, Collective.ALLGATHER)], finish)


class EFSignSGD(WorkerMomentum, Compressor):
    """EF-SignSGD (Karimireddy et al.): p = g + e is sent as mean|p| * sign(p);
    the residual e = p - mean|p| * sign(p) stays on the worker for the next
    step, so nothing is lost. The aggregate is the mean (or sum) of the
    workers' scaled signs. momentum: see WorkerMomentum. Exact zeros as in
    SignSGD (sent as + or - by step parity; an exact zero of p adds nothing to
    mean|p|). Encode: sign_ef_pack (two passes over g and e, one write of the
    residual); decode: sign_scaled_sum (one write of the result)."""

    def __init__(self, momentum=AUTO):
        self._init_momentum(momentum)

    def state_specs(self, shape, dtype):
        return {"residual": (tuple(shape), tf.as_dtype(dtype)), **self.momentum_state_specs(shape, dtype)}

    def payload_specs(self, shape, dtype):
        return [[PayloadSpec((_num_words(shape),), tf.uint32, Collective.ALLGATHER),
                 PayloadSpec((1,), tf.as_dtype(dtype), Collective.ALLGATHER)]]

    def compress(self, grad, state, ctx):
        # sign_ef_pack adds the residual itself and returns the new one as a fresh tensor.
        source = self.with_momentum(grad, state)
        residual = state["residual"]
        words, scale, new_residual = ops.sign_ef_pack(source, residual.read_value(), zero_bit(ctx.step))
        residual.assign(new_residual)
        n = tf.size(grad, out_type=tf.int64)

        def finish(gathered):
            all_words, all_scales = gathered  # [K, W], [K, 1]
            workers = tf.shape(all_words)[0]
            weight = 1 / tf.cast(workers, grad.dtype) if ctx.average else tf.ones([], grad.dtype)
            summed = ops.sign_scaled_sum(all_words, tf.reshape(all_scales, [-1]), n, weight)
            return self.hand_off(tf.reshape(summed, tf.shape(grad)), state)
        return Round([Payload(words, Collective.ALLGATHER),
                      Payload(tf.reshape(scale, [1]), Collective.ALLGATHER)], finish)
