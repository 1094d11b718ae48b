"""Sign packing, unpacking, majority vote and the fused EF-sign ops (signSGD,
EF-signSGD); custom_ops/sign. Each op's memory-traffic floor is in bytes per
element read + written (b = the element size)."""
import tensorflow as tf

from tfcomp.ops.loader import check_dtype, count_tensor, integer_tensor, library


def _zero_bit(zero_bit):
    return tf.convert_to_tensor(zero_bit, tf.bool)


def sign_pack(x, zero_bit=True):
    """Packs the signs of x (any shape) into uint32 words; returns (words, scale).

    words has ceil(n / 32) elements for n = size of x; scale = mean |x| in x's dtype.
    +0 and -0 pack as zero_bit (a bool scalar, may be a tensor); an exact zero adds
    nothing to the scale. One pass: reads x (b), writes 1/8 byte of words.
    """
    x = tf.convert_to_tensor(x)
    check_dtype(x.dtype, "sign_pack's input")
    return library().tfcomp_sign_pack(x, _zero_bit(zero_bit))


def sign_ef_pack(grad, residual, zero_bit=True):
    """Error-feedback sign pack; returns (words, scale, new_residual).

    p = grad + residual (rounded to their dtype, as TensorFlow's add), scale = mean |p|
    (summed as sign_pack sums it: sign_pack(grad + residual, zero_bit) gives the same
    words and scale), words = the signs of p with +-0 as zero_bit, and new_residual =
    p - (bit ? scale : -scale), shaped as grad. Two passes, no float intermediate:
    reads grad and residual twice (4b), writes new_residual (b) and 1/8 byte of words.
    """
    grad = tf.convert_to_tensor(grad)
    check_dtype(grad.dtype, "sign_ef_pack's grad")
    residual = tf.convert_to_tensor(residual, grad.dtype)
    return library().tfcomp_sign_ef_pack(grad, residual, _zero_bit(zero_bit))


def sign_unpack(words, scale, n):
    """The n signs in words as a vector of +scale (bit set) and -scale (clear), scale's dtype."""
    words = integer_tensor(words, "sign_unpack's words", (tf.uint32,))
    scale = tf.convert_to_tensor(scale)
    check_dtype(scale.dtype, "sign_unpack's scale")
    return library().tfcomp_sign_unpack(words, scale, count_tensor(n, "sign_unpack's n"))


def sign_majority(words, n, dtype=tf.float32):
    """Majority vote over the rows of words[K, W]: a vector of n values in {-1, 0, +1}.

    One pass: reads K/8 bytes of words, writes the output (b).
    """
    dtype = tf.as_dtype(dtype)
    check_dtype(dtype, "sign_majority's dtype")
    words = integer_tensor(words, "sign_majority's words", (tf.uint32,))
    return library().tfcomp_sign_majority(words, count_tensor(n, "sign_majority's n"), dtype=dtype)


def sign_scaled_sum(words, scales, n, weight=1.0):
    """weight * the sum over the rows k of words[K, W] of +scales[k] (bit set) or
    -scales[k] (clear): a vector of n values in scales' dtype.

    weight = 1/K gives the workers' mean, 1 their sum. The terms are added in the
    accumulator type (float32 for the 16-bit types) in row order k = 0..K-1, so
    every device and thread count gives the same bits. One pass: reads K/8 bytes
    of words, writes the output (b); no [K, n] intermediate.
    """
    words = integer_tensor(words, "sign_scaled_sum's words", (tf.uint32,))
    scales = tf.convert_to_tensor(scales)
    check_dtype(scales.dtype, "sign_scaled_sum's scales")
    weight = tf.convert_to_tensor(weight, scales.dtype)
    return library().tfcomp_sign_scaled_sum(words, scales, count_tensor(n, "sign_scaled_sum's n"), weight)
