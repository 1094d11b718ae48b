"""tfcomp's custom ops: loads the one op library and wraps its ops.

The library (the file named by $TFCOMP_OPS_LIBRARY, else
tfcomp/_tfcomp_ops.tf<installed TensorFlow version>.so where a checkout holds
one per stack, else tfcomp/_tfcomp_ops.so) is loaded once, on first use. If it is missing or was built against another
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

Malformed input (a wrong rank, shape, length or dtype, a negative count or one
the words cannot hold, an index outside [0, n) other than -1, a seed that is not
an int64 vector of 2) raises tf.errors.InvalidArgumentError from the kernel,
ValueError from shape inference when the graph's static shapes show it, or
TypeError here for a dtype an op does not take. Integer inputs are checked here
rather than converted, since TensorFlow casts a NumPy array to an op's input
dtype silently (int64 indices would wrap to int32). The GPU sparse_decode skips
out-of-range indices instead of checking them (they stay in device memory).

TensorFlow runs CPU kernels with subnormals flushed to zero (FTZ/DAZ): there the
sparse ops and lowrank_residual compare and add a subnormal input as +-0; CUDA
does not flush. Only sign_pack's sign bits read the bit pattern.
"""
import functools
import operator
import os
import pathlib
import re

import tensorflow as tf

LIBRARY_PATH = pathlib.Path(__file__).resolve().parent / "_tfcomp_ops.so"
REBUILD_HINT = ("Rebuild it from the tfcomp checkout with `make build` (`make build STACK=current` "
                "on the current-TensorFlow stack), or `pip install --no-build-isolation -e .`.")
FLOAT_DTYPES = (tf.float16, tf.bfloat16, tf.float32, tf.float64)  # every op takes these

_BUILD_INFO = re.compile(rb"tfcomp-build-info: tensorflow=([^ ;]+) cuda=([01]);")


class OpLibraryError(RuntimeError):
    """tfcomp's op library is missing, stale or cannot be loaded."""


def library_path():
    if "TFCOMP_OPS_LIBRARY" in os.environ:
        return pathlib.Path(os.environ["TFCOMP_OPS_LIBRARY"])
    for_this_tensorflow = LIBRARY_PATH.with_name(f"_tfcomp_ops.tf{tf.__version__}.so")
    return for_this_tensorflow if for_this_tensorflow.is_file() else LIBRARY_PATH


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


# Integer inputs are converted without a target dtype and then checked: TensorFlow's
# own conversion to an op's input dtype casts a NumPy array silently (int64 indices
# wrap to int32, float words truncate), which would turn a wrong input into a wrong
# answer instead of an error.
def _integer_tensor(x, what, dtypes=None):
    x = tf.convert_to_tensor(x)
    if dtypes is None:
        if not x.dtype.is_integer:
            raise TypeError(f"{what} must be an integer tensor, got {x.dtype.name}")
    elif x.dtype not in dtypes:
        names = " or ".join(d.name for d in dtypes)
        raise TypeError(f"{what} must be {names}, got {x.dtype.name}")
    return x


def _count(n, what="n"):
    return tf.cast(_integer_tensor(n, what), tf.int64)


def _seed(seed, what):
    return tf.cast(_integer_tensor(seed, what), tf.int64)


def _int_attr(value, what):
    """A Python int from an int-like value (not a float, which would be truncated)."""
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{what} must be an integer, got {value!r}") from None


def sign_pack(x):
    """Packs the signs of x (any shape) into uint32 words; returns (words, scale).

    words has ceil(n / 32) elements for n = size of x; scale = mean |x| in x's dtype.
    """
    x = tf.convert_to_tensor(x)
    _check_dtype(x.dtype, "sign_pack's input")
    return library().tfcomp_sign_pack(x)


def sign_unpack(words, scale, n):
    """The n signs in words as a vector of +scale (bit set) and -scale (clear), scale's dtype."""
    words = _integer_tensor(words, "sign_unpack's words", (tf.uint32,))
    scale = tf.convert_to_tensor(scale)
    _check_dtype(scale.dtype, "sign_unpack's scale")
    return library().tfcomp_sign_unpack(words, scale, _count(n, "sign_unpack's n"))


def sign_majority(words, n, dtype=tf.float32):
    """Majority vote over the rows of words[K, W]: a vector of n values in {-1, 0, +1}."""
    dtype = tf.as_dtype(dtype)
    _check_dtype(dtype, "sign_majority's dtype")
    words = _integer_tensor(words, "sign_majority's words", (tf.uint32,))
    return library().tfcomp_sign_majority(words, _count(n, "sign_majority's n"), dtype=dtype)


def index_dtype(num_elements):
    """int32 indices while they fit, else int64."""
    return tf.int32 if num_elements <= 2**31 else tf.int64


def hash_select(g, threshold, seed, capacity, bucket_size=1):
    """DRAGONN's hashed threshold selection over g (any shape, flattened).

    Every element with |g| >= threshold (and every NaN) goes to bucket h(i) of
    the `capacity` slots cut into buckets of `bucket_size` consecutive slots (the
    last may be shorter), h a universal hash drawn from seed (int64[2]). A bucket
    keeps the bucket_size largest magnitudes hashed to it, largest first
    (float32(|g|), NaN above +Inf), ties to the larger index, on every device and
    thread count; bucket_size=1 is a slot per element, as in DRAGONN's paper. At
    most 2^32 elements. Returns (values[capacity], indices[capacity]); empty
    slots are (0, -1).
    """
    g = tf.convert_to_tensor(g)
    _check_dtype(g.dtype, "hash_select's input")
    capacity = _int_attr(capacity, "hash_select's capacity")
    if capacity < 0:
        raise ValueError(f"capacity must be >= 0, got {capacity}")
    bucket_size = _int_attr(bucket_size, "hash_select's bucket_size")
    if bucket_size < 1:
        raise ValueError(f"bucket_size must be >= 1, got {bucket_size}")
    n = g.shape.num_elements()
    return library().tfcomp_hash_select(
        g, tf.cast(threshold, g.dtype), _seed(seed, "hash_select's seed"), capacity=capacity,
        bucket_size=bucket_size, Tindex=tf.int64 if n is None else index_dtype(n))


def sampled_threshold(g, seed, num_samples, k):
    """DGC's threshold estimate: the k-th largest |g| among num_samples elements of
    g (flattened) sampled in contiguous runs at offsets drawn from seed (int64[2]);
    NaN counts as +Inf; 0 for an empty g. A scalar of g's dtype."""
    g = tf.convert_to_tensor(g)
    _check_dtype(g.dtype, "sampled_threshold's input")
    num_samples = _int_attr(num_samples, "sampled_threshold's num_samples")
    k = _int_attr(k, "sampled_threshold's k")
    if not 1 <= k <= num_samples:
        raise ValueError(f"need 1 <= k <= num_samples, got k={k}, num_samples={num_samples}")
    return library().tfcomp_sampled_threshold(g, _seed(seed, "sampled_threshold's seed"),
                                              num_samples=num_samples, k=k)


def sparse_decode(values, indices, n):
    """zeros(n) plus values scatter-added at indices, in order; index -1 is skipped."""
    values = tf.convert_to_tensor(values)
    _check_dtype(values.dtype, "sparse_decode's values")
    indices = _integer_tensor(indices, "sparse_decode's indices", (tf.int32, tf.int64))
    return library().tfcomp_sparse_decode(values, indices, _count(n, "sparse_decode's n"))


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
