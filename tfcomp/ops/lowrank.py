"""The low-rank error-feedback residual and estimate (PowerSGD, ACP-SGD); custom_ops/lowrank."""
import tensorflow as tf

from tfcomp.ops.loader import check_dtype, library


def lowrank_residual(m, p, q):
    """The error-feedback update of low-rank compression (PowerSGD, ACP-SGD):
    m - p @ q^T, computed in one pass over m.

    m is [n, k], p [n, r] and q [k, r], all of one float dtype; the result is
    [n, k] in that dtype. Element (i, c) starts at m[i, c] and takes one fused
    multiply-add fma(-p[i, j], q[c, j], .) per j = 0 .. r-1, in that order (in
    float32 for float16 and bfloat16), so every device and thread count gives the
    same bits. NaN and Inf propagate as in the arithmetic. The residual may reuse
    m's buffer when nothing else holds m.
    """
    m = tf.convert_to_tensor(m)
    check_dtype(m.dtype, "lowrank_residual's m")
    p = tf.convert_to_tensor(p)
    q = tf.convert_to_tensor(q)
    if p.dtype != m.dtype or q.dtype != m.dtype:
        raise TypeError(f"lowrank_residual needs m, p and q of one dtype, got {m.dtype.name}, "
                        f"{p.dtype.name} and {q.dtype.name}")
    return library().tfcomp_low_rank_residual(m, p, q)


def lowrank_product(p, q):
    """The estimate of low-rank compression (PowerSGD, ACP-SGD): p @ q^T, written
    once, with non-temporal stores where it is large (TensorFlow's matmul, with an
    inner dimension of a few, took 1.2-1.3x its time at 4096^2, ranks 4 and 8).

    p is [n, r] and q [k, r], of one float dtype; the result is [n, k] in that
    dtype. Element (i, c) starts at +0 and takes one fused multiply-add
    fma(p[i, j], q[c, j], .) per j = 0 .. r-1, in that order (in float32 for
    float16 and bfloat16), so every device and thread count gives the same bits.
    """
    p = tf.convert_to_tensor(p)
    check_dtype(p.dtype, "lowrank_product's p")
    q = tf.convert_to_tensor(q)
    if q.dtype != p.dtype:
        raise TypeError(f"lowrank_product needs p and q of one dtype, got {p.dtype.name} and {q.dtype.name}")
    return library().tfcomp_low_rank_product(p, q)
