"""The low-rank error-feedback residual, estimate and factors (PowerSGD, ACP-SGD); custom_ops/lowrank."""
import tensorflow as tf

from tfcomp.ops.loader import check_dtype, library


def _listed(words):
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} and {words[-1]}"


def _of_one_float_dtype(op, **inputs):
    """The inputs as tensors, refused with TypeError unless they share one float dtype."""
    names = list(inputs)
    tensors = [tf.convert_to_tensor(x) for x in inputs.values()]
    check_dtype(tensors[0].dtype, f"{op}'s {names[0]}")
    if any(t.dtype != tensors[0].dtype for t in tensors[1:]):
        raise TypeError(f"{op} needs {_listed(names)} of one dtype, got {_listed([t.dtype.name for t in tensors])}")
    return tensors


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
    return library().tfcomp_low_rank_residual(*_of_one_float_dtype("lowrank_residual", m=m, p=p, q=q))


def lowrank_product(p, q):
    """The estimate of low-rank compression (PowerSGD, ACP-SGD): p @ q^T, written
    once, with non-temporal stores where it is large (TensorFlow's matmul, with an
    inner dimension of a few, took 1.2-1.3x its time at 4096^2, ranks 4 and 8).

    p is [n, r] and q [k, r], of one float dtype; the result is [n, k] in that
    dtype. Element (i, c) starts at +0 and takes one fused multiply-add
    fma(p[i, j], q[c, j], .) per j = 0 .. r-1, in that order (in float32 for
    float16 and bfloat16), so every device and thread count gives the same bits.
    """
    return library().tfcomp_low_rank_product(*_of_one_float_dtype("lowrank_product", p=p, q=q))


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
    m, p = library().tfcomp_low_rank_compensate(*_of_one_float_dtype("lowrank_compensate", g=g, e=e, q=q))
    return m, p


def lowrank_project(m, p):
    """The other factor of low-rank compression (PowerSGD's Q = M^T P, ACP-SGD's odd steps):
    m^T @ p in one pass over m (TensorFlow's matmul took about two reads of m at 4096^2).

    m is [n, k] and p [n, r], of one float dtype; the result is [k, r] in that dtype. The rows
    are cut into blocks of 256: each block's sum starts at +0 and takes one fused multiply-add
    fma(m[i, c], p[i, j], .) per row in order, and the blocks' sums are added in block order (in
    float32 for float16 and bfloat16), so every device and thread count gives the same bits.
    """
    return library().tfcomp_low_rank_project(*_of_one_float_dtype("lowrank_project", m=m, p=p))
