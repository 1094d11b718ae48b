"""The low-rank error-feedback residual, estimate and factors (PowerSGD, ACP-SGD); custom_ops/lowrank."""
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


def lowrank_compensate(g, e, q):
    """The first pass of low-rank compression's encode (PowerSGD's P = M Q, ACP-SGD's even
    steps): (m, p) with m = g + e, the gradient compensated by the error-feedback residual,
    and p = m @ q, in one pass over g and e (the add and TensorFlow's matmul read m again).

    g and e are [n, k] and q [k, r], all of one float dtype; m is [n, k] and p [n, r] in that
    dtype. m's elements are g + e rounded once (computed in float32 for float16 and bfloat16).
    Each p[i, j] sums m[i, c] q[c, j] in 16 lanes: lane l takes the columns l, l + 16, ... by
    fused multiply-add from +0 (the columns padded with zeros to a multiple of 16), then the
    lanes are added pairwise (halves, quarters, eighths, the last two), so every device and
    thread count gives the same bits. NaN and Inf propagate as in the arithmetic.
    """
    g = tf.convert_to_tensor(g)
    check_dtype(g.dtype, "lowrank_compensate's g")
    e = tf.convert_to_tensor(e)
    q = tf.convert_to_tensor(q)
    if e.dtype != g.dtype or q.dtype != g.dtype:
        raise TypeError(f"lowrank_compensate needs g, e and q of one dtype, got {g.dtype.name}, "
                        f"{e.dtype.name} and {q.dtype.name}")
    m, p = library().tfcomp_low_rank_compensate(g, e, q)
    return m, p


def lowrank_project(m, p):
    """The other factor of low-rank compression (PowerSGD's Q = M^T P, ACP-SGD's odd steps):
    m^T @ p in one pass over m (TensorFlow's matmul took about two reads of m at 4096^2).

    m is [n, k] and p [n, r], of one float dtype; the result is [k, r] in that dtype. The rows
    are cut into blocks of 256: each block's sum starts at +0 and takes one fused multiply-add
    fma(m[i, c], p[i, j], .) per row in order, and the blocks' sums are added in block order (in
    float32 for float16 and bfloat16), so every device and thread count gives the same bits.
    """
    m = tf.convert_to_tensor(m)
    check_dtype(m.dtype, "lowrank_project's m")
    p = tf.convert_to_tensor(p)
    if p.dtype != m.dtype:
        raise TypeError(f"lowrank_project needs m and p of one dtype, got {m.dtype.name} and {p.dtype.name}")
    return library().tfcomp_low_rank_project(m, p)
