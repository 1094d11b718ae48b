"""Dense compressors: NoCompression (the exact average) and FP16 (half the bytes)."""
import tensorflow as tf

from tfcomp.compressors.base import Collective, Compressor, Payload, PayloadSpec, Round


class NoCompression(Compressor):
    """The gradient itself, averaged by allreduce."""

    def payload_specs(self, shape, dtype):
        return [[PayloadSpec(tuple(shape), tf.as_dtype(dtype), Collective.ALLREDUCE)]]

    def compress(self, grad, state, ctx):
        return Round([Payload(grad, Collective.ALLREDUCE)], lambda summed: ctx.from_sum(summed[0]))


class FP16(Compressor):
    """The gradient cast to float16, summed by allreduce, cast back and averaged."""

    def payload_specs(self, shape, dtype):
        return [[PayloadSpec(tuple(shape), tf.float16, Collective.ALLREDUCE)]]

    def compress(self, grad, state, ctx):
        def finish(summed):
            return ctx.from_sum(tf.cast(summed[0], grad.dtype))
        return Round([Payload(tf.cast(grad, tf.float16), Collective.ALLREDUCE)], finish)
