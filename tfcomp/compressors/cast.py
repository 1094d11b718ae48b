"""Dense compressors: NoCompression (the exact average) and FP16 (half the bytes)."""
import tensorflow as tf

from tfcomp import ops
from tfcomp.compressors.base import Collective, Compressor, Payload, PayloadSpec, Round


class NoCompression(Compressor):
    """The gradient itself, averaged by allreduce."""

    def payload_specs(self, shape, dtype):
        return [[PayloadSpec(tuple(shape), tf.as_dtype(dtype), Collective.ALLREDUCE)]]

    def compress(self, grad, state, ctx):
        return Round([Payload(grad, Collective.ALLREDUCE)], lambda summed: ctx.from_sum(summed[0]))


class FP16(Compressor):
    """The gradient cast to float16, summed by allreduce, cast back and averaged.

    Encode and decode are one pass each (tfcomp.ops.cast_divide): the cast, and the
    cast back with the division by K, bit for bit tf.cast(grad, float16) and
    tf.cast(summed, grad.dtype) / K (tf.cast then a divide would pass over the
    tensor twice, and TensorFlow's CPU float16 arithmetic is not vectorised).
    """

    def payload_specs(self, shape, dtype):
        return [[PayloadSpec(tuple(shape), tf.float16, Collective.ALLREDUCE)]]

    def compress(self, grad, state, ctx):
        def finish(summed):
            if not ctx.average and grad.dtype == tf.float16:
                return summed[0]
            return ops.cast_divide(summed[0], grad.dtype, ctx.num_workers if ctx.average else 1)
        half = grad if grad.dtype == tf.float16 else ops.cast_divide(grad, tf.float16)
        return Round([Payload(half, Collective.ALLREDUCE)], finish)
