"""Cast and divide in one pass (FP16's encode and decode, the dense mean); custom_ops/cast."""
import numpy as np
import tensorflow as tf

from tfcomp.ops.loader import check_dtype, library


def cast_divide(x, dtype, divisor=1):
    """tf.cast(x, dtype) / divisor, bit for bit, in one pass over x.

    x (any shape) is rounded to dtype (round to nearest even, overflow to +-Inf;
    a float64 reaches a 16-bit dtype through float32, as tf.cast takes it), then
    divided by divisor in dtype's accumulator type (float32 for float16, bfloat16
    and float32; float64 for float64) and rounded once back to dtype, as
    TensorFlow divides float16 and bfloat16. NaN stays NaN (its bits are not
    specified). Where dtype is at least as wide as x's, the result is rounded
    once. divisor (a number or a scalar tensor) is converted to dtype first.
    Elementwise, so the result does not depend on the thread count. On the CPU,
    subnormal float32/float64 operands and quotients of the division are flushed
    to zero, as in TensorFlow's own divide there: so with divisor 1 it is
    tf.cast(x, dtype) exactly where float16 is on either side (FP16's pairs), and
    elsewhere up to that flush of subnormal results.

    Memory traffic: one read of x and one write of the result, x.dtype.size +
    dtype.size bytes per element (an encode float32 -> float16 reads 4 and writes
    2; a decode float16 -> float32 reads 2 and writes 4), where tf.cast followed
    by a divide reads and writes the cast result once more. Where x already has
    dtype its buffer is reused when TensorFlow allows it.
    """
    x = tf.convert_to_tensor(x)
    dtype = tf.as_dtype(dtype)
    check_dtype(x.dtype, "cast_divide's input")
    check_dtype(dtype, "cast_divide's dtype")
    if not tf.is_tensor(divisor):
        # A number: taken as a float64, not as tf.convert_to_tensor's default float32, which
        # would round a float64 divisor outside its range (1e-308 to 0; 1e308 is refused); and
        # as an array, since TensorFlow caches Python scalars by value, where -0.0 == 0.0.
        divisor = tf.constant(np.asarray(divisor, np.float64))
    if divisor.dtype != dtype:
        divisor = tf.cast(divisor, dtype)
    return library().tfcomp_cast_divide(x, divisor)
