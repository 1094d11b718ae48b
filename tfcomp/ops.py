"""tfcomp's custom ops: loads the one op library and wraps its ops.

The library (tfcomp/_tfcomp_ops.so, or the file named by $TFCOMP_OPS_LIBRARY)
is loaded once, on first use. If it is missing or was built against another
TensorFlow, OpLibraryError says how to rebuild it: tfcomp never falls back to
slower code behind the user's back.

Hashed selection and sparse decoding (DRAGONN): see hash_select and
sparse_decode, and custom_ops/sparse/cc/kernels/sparse_core.h.

Sign packing (signSGD, EF-signSGD):
  * element i of the flattened tensor is bit i % 32 of word i // 32, least
    significant bit first; padding bits past n are 0;
  * the bit is 0 for NaN and for negative values (sign bit set, nonzero
    magnitude), else 1: +0 and -0 pack as positive, +Inf as positive, -Inf
    and negative subnormals as negative, NaN as negative. The rule reads the
    bit pattern, so it does not depend on a device flushing subnormals to zero;
  * scale = mean |x| (0 for an empty tensor); NaN or Inf in x make the scale
    NaN or Inf, so a diverged gradient stays visible after unpacking;
  * the majority vote of K workers is sign(#positive - #negative) per element:
    +1, -1, or 0 on a tie (possible when K is even), as sign(sum of +-1) is.
"""
import functools
import os
import pathlib
import re

import tensorflow as tf

LIBRARY_PATH = pathlib.Path(__file__).resolve().parent / "_tfcomp_ops.so"
REBUILD_HINT = ("Rebuild it from the tfcomp checkout with `make build` "
                "(or `pip install --no-build-isolation -e .`).")
FLOAT_DTYPES = (tf.float16, tf.bfloat16, tf.float32, tf.float64)  # every op takes these

_BUILD_INFO = re.compile(rb"tfcomp-build-info: tensorflow=([^ ;]+) cuda=([01]);")


class OpLibraryError(RuntimeError):
    """tfcomp's op library is missing, stale or cannot be loaded."""


def library_path():
    return pathlib.Path(os.environ.get("TFCOMP_OPS_LIBRARY", LIBRARY_PATH))


def build_info(path):
    """(tensorflow version, built with CUDA) read from the library file."""
    match = _BUILD_INFO.search(pathlib.Path(path).read_bytes())
    if match is None:
        raise OpLibraryError(f"{path} is not a tfcomp op library (no build marker). {REBUILD_HINT}")
    return match.group(1).decode(), match.group(2) == b"1"


@functools.lru_cache(maxsize=None)
def library():
    """The loaded op library module (loaded once per process)."""
    path = library_path()
    if not path.is_file():
        raise OpLibraryError(f"tfcomp's op library is missing: {path} does not exist. {REBUILD_HINT}")
    built_against, _ = build_info(path)
    if built_against != tf.__version__:
        raise OpLibraryError(
            f"{path} was built against TensorFlow {built_against}, but TensorFlow "
            f"{tf.__version__} is installed. {REBUILD_HINT}")
    try:
        return tf.load_op_library(str(path))
    except (tf.errors.NotFoundError, OSError) as err:
        raise OpLibraryError(f"could not load {path}: {err}. {REBUILD_HINT}") from err


def _check_dtype(dtype, what):
    if dtype not in FLOAT_DTYPES:
        names = ", ".join(d.name for d in FLOAT_DTYPES)
        raise TypeError(f"{what} must be one of {names}, got {dtype.name}")


def _count(n):
    return tf.cast(tf.convert_to_tensor(n), tf.int64)


def sign_pack(x):
    """Packs the signs of x (any shape) into uint32 words; returns (words, scale).

    words has ceil(n / 32) elements for n = size of x; scale = mean |x| in x's dtype.
    """
    x = tf.convert_to_tensor(x)
    _check_dtype(x.dtype, "sign_pack's input")
    return library().tfcomp_sign_pack(x)


def sign_unpack(words, scale, n):
    """The n signs in words as a vector of +scale (bit set) and -scale (clear), scale's dtype."""
    scale = tf.convert_to_tensor(scale)
    _check_dtype(scale.dtype, "sign_unpack's scale")
    return library().tfcomp_sign_unpack(words, scale, _count(n))


def sign_majority(words, n, dtype=tf.float32):
    """Majority vote over the rows of words[K, W]: a vector of n values in {-1, 0, +1}."""
    dtype = tf.as_dtype(dtype)
    _check_dtype(dtype, "sign_majority's dtype")
    return library().tfcomp_sign_majority(words, _count(n), dtype=dtype)


def index_dtype(num_elements):
    """int32 indices while they fit, else int64."""
    return tf.int32 if num_elements <= 2**31 else tf.int64


def hash_select(g, threshold, seed, capacity):
    """DRAGONN's hashed threshold selection over g (any shape, flattened).

    Every element with |g| >= threshold (and every NaN) goes to slot h(i) of
    `capacity` slots, h a universal hash drawn from seed (int64[2]); the largest
    index wins a shared slot, on every device and thread count. Returns
    (values[capacity], indices[capacity]); empty slots are (0, -1).
    """
    g = tf.convert_to_tensor(g)
    _check_dtype(g.dtype, "hash_select's input")
    if capacity < 0:
        raise ValueError(f"capacity must be >= 0, got {capacity}")
    n = g.shape.num_elements()
    return library().tfcomp_hash_select(
        g, tf.cast(threshold, g.dtype), tf.cast(seed, tf.int64), capacity=int(capacity),
        Tindex=tf.int64 if n is None else index_dtype(n))


def sampled_threshold(g, seed, num_samples, k):
    """DGC's threshold estimate: the k-th largest |g| among num_samples elements of
    g (flattened) sampled in contiguous runs at offsets drawn from seed (int64[2]);
    NaN counts as +Inf; 0 for an empty g. A scalar of g's dtype."""
    g = tf.convert_to_tensor(g)
    _check_dtype(g.dtype, "sampled_threshold's input")
    if not 1 <= k <= num_samples:
        raise ValueError(f"need 1 <= k <= num_samples, got k={k}, num_samples={num_samples}")
    return library().tfcomp_sampled_threshold(g, tf.cast(seed, tf.int64), num_samples=int(num_samples),
                                              k=int(k))


def sparse_decode(values, indices, n):
    """zeros(n) plus values scatter-added at indices, in order; index -1 is skipped."""
    values = tf.convert_to_tensor(values)
    _check_dtype(values.dtype, "sparse_decode's values")
    return library().tfcomp_sparse_decode(values, indices, _count(n))


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
    _check_dtype(m.dtype, "lowrank_residual's m")
    p = tf.convert_to_tensor(p)
    q = tf.convert_to_tensor(q)
    if p.dtype != m.dtype or q.dtype != m.dtype:
        raise TypeError(f"lowrank_residual needs m, p and q of one dtype, got {m.dtype.name}, "
                        f"{p.dtype.name} and {q.dtype.name}")
    return library().tfcomp_low_rank_residual(m, p, q)


for _op in ("TfcompSignPack", "TfcompSignUnpack", "TfcompSignMajority", "TfcompHashSelect",
            "TfcompSampledThreshold", "TfcompSparseDecode", "TfcompLowRankResidual"):
    tf.no_gradient(_op)
