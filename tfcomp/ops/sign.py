"""Sign packing, unpacking and majority vote (signSGD, EF-signSGD); custom_ops/sign."""
import tensorflow as tf

from tfcomp.ops.loader import check_dtype, count_tensor, integer_tensor, library


def sign_pack(x):
    """Packs the signs of x (any shape) into uint32 words; returns (words, scale).

    words has ceil(n / 32) elements for n = size of x; scale = mean |x| in x's dtype.
    """
    x = tf.convert_to_tensor(x)
    check_dtype(x.dtype, "sign_pack's input")
    return library().tfcomp_sign_pack(x)


def sign_unpack(words, scale, n):
    """The n signs in words as a vector of +scale (bit set) and -scale (clear), scale's dtype."""
    words = integer_tensor(words, "sign_unpack's words", (tf.uint32,))
    scale = tf.convert_to_tensor(scale)
    check_dtype(scale.dtype, "sign_unpack's scale")
    return library().tfcomp_sign_unpack(words, scale, count_tensor(n, "sign_unpack's n"))


def sign_majority(words, n, dtype=tf.float32):
    """Majority vote over the rows of words[K, W]: a vector of n values in {-1, 0, +1}."""
    dtype = tf.as_dtype(dtype)
    check_dtype(dtype, "sign_majority's dtype")
    words = integer_tensor(words, "sign_majority's words", (tf.uint32,))
    return library().tfcomp_sign_majority(words, count_tensor(n, "sign_majority's n"), dtype=dtype)
