"""Property-based tests of every op of tfcomp.ops (Hypothesis), and malformed inputs.

The properties compare each op with the NumPy references the op tests already
use (tests/ops/test_sign.py, tests/ops/sparse_reference.py, tests/ops/test_lowrank.py)
over drawn shapes (empty and odd sizes included), every float dtype, NaN, +-Inf,
-0 and subnormals, capacities, seeds and worker counts. The number of examples
comes from the Hypothesis profile registered in tests/conftest.py ("ci" by
default: a bounded, derandomized run; `--hypothesis-profile=thorough` for more).

The ops run on the CPU, where TensorFlow flushes subnormals to zero (FTZ/DAZ) in
kernels' arithmetic and comparisons: the references are applied to the inputs as
the kernel reads them (`as_read`), or compared within that flush, except for
sign_pack's sign bits, which read the bit patterns.

The malformed-input tests feed each op wrong ranks, shapes, lengths, dtypes,
counts and seeds, eagerly and inside a tf.function whose unknown shapes leave
the check to the kernel: each is refused with an error naming the problem
(InvalidArgumentError from the kernel, ValueError from shape inference,
TypeError/ValueError from the Python wrapper), never a crash.
"""
import math

import ml_dtypes
import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given
from hypothesis import strategies as st

from tests.ops import sparse_reference as sparse_ref
from tests.ops.test_lowrank import product_reference as lowrank_product_reference
from tests.ops.test_lowrank import reference as lowrank_reference
from tests.ops.test_sign import pack_bits, reference_majority, reference_pack, unpack_bits
from tfcomp import ops
from tests.stacks import NO_KERAS

pytestmark = NO_KERAS

DTYPES = [tf.float16, tf.bfloat16, tf.float32, tf.float64]
dtypes = st.sampled_from(DTYPES)
seeds = st.tuples(st.integers(-2**63, 2**63 - 1), st.integers(-2**63, 2**63 - 1))
# Sizes at the ops' boundaries: words (32), sample runs (256), scale blocks (4096).
BOUNDARY_SIZES = [0, 1, 2, 31, 32, 33, 63, 64, 65, 255, 256, 257, 511, 513, 4095, 4096, 4097]


def np_dtype(dtype):
    return dtype.as_numpy_dtype


def finfo(dtype):
    return ml_dtypes.finfo(np_dtype(dtype)) if dtype == tf.bfloat16 else np.finfo(np_dtype(dtype))


def acc_dtype(dtype):
    """What the kernels compare and sum in: float64 for float64, else float32."""
    return np.float64 if dtype == tf.float64 else np.float32


def specials(dtype):
    """NaN, +-Inf, +-0, the extreme finite and subnormal values of dtype, and +-1."""
    f = finfo(dtype)
    edge = [float(f.max), float(f.tiny), float(f.smallest_subnormal), 3 * float(f.smallest_subnormal), 1.0]
    return [math.nan, math.inf, -math.inf, 0.0, -0.0] + edge + [-v for v in edge]


def elements(dtype):
    """Any value of dtype, the special ones often."""
    width = {tf.float16: 16, tf.bfloat16: 32, tf.float32: 32, tf.float64: 64}[dtype]
    return st.one_of(st.sampled_from(specials(dtype)), st.floats(width=width))


def to_dtype(values, dtype, shape=None):
    with np.errstate(over="ignore"):  # bfloat16 from float32's range: may round to +-Inf
        array = np.asarray(values, np.float64).astype(np_dtype(dtype))
    return array if shape is None else array.reshape(shape)


@st.composite
def shapes(draw, max_size=5000):
    """Small shapes of rank 0 to 3 (zero-size ones included), or a vector of a boundary or any size."""
    return draw(st.one_of(
        st.lists(st.integers(0, 6), max_size=3).map(tuple),
        st.sampled_from(BOUNDARY_SIZES).filter(lambda n: n <= max_size).map(lambda n: (n,)),
        st.integers(0, max_size).map(lambda n: (n,))))


@st.composite
def arrays(draw, dtype, shape=None, max_size=5000, values=None, bound=None):
    """An array of dtype: every element drawn when small; else normal noise at a drawn
    scale (clipped to +-bound) with drawn values at drawn positions (so large arrays
    stay cheap)."""
    values = elements(dtype) if values is None else values
    shape = draw(shapes(max_size)) if shape is None else shape
    size = math.prod(shape)
    if size <= 64:
        flat = draw(st.lists(values, min_size=size, max_size=size))
    else:
        rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
        flat = rng.standard_normal(size) * 10.0 ** draw(st.integers(-3, 3))
        if bound is not None:
            flat = np.clip(flat, -bound, bound)
        for position, value in draw(st.lists(st.tuples(st.integers(0, size - 1), values), max_size=24)):
            flat[position] = value
    return to_dtype(flat, dtype, shape)


def as_read(x):
    """x as a kernel on TensorFlow's CPU reads it: subnormals of the accumulator type
    (float32 for float16/bfloat16/float32, float64 for float64) flushed to +-0. float16
    subnormals are normal floats and stay."""
    acc = acc_dtype(tf.as_dtype(x.dtype))
    wide = np.asarray(x).astype(acc)
    with np.errstate(invalid="ignore"):
        flushed = np.where(np.abs(wide) < np.finfo(acc).tiny, np.copysign(np.zeros_like(wide), wide), wide)
    return flushed.astype(x.dtype)


def assert_same_bits(actual, expected, what=""):
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.shape == expected.shape and actual.dtype == expected.dtype, (what, actual, expected)
    assert actual.tobytes() == expected.tobytes(), (what, actual, expected)


def assert_equal_or_both_nan(actual, expected, what=""):
    """Equal bits, except that any NaN matches any NaN (sign and payload aside)."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.shape == expected.shape and actual.dtype == expected.dtype, what
    nan = np.isnan(expected.astype(np.float64))
    np.testing.assert_array_equal(np.isnan(actual.astype(np.float64)), nan, err_msg=what)
    assert actual[~nan].tobytes() == expected[~nan].tobytes(), (what, actual, expected)


# --- sign_pack, sign_unpack, sign_majority -----------------------------------------------------

SCALE_RTOL = {tf.float16: 2e-3, tf.bfloat16: 2e-2, tf.float32: 1e-5, tf.float64: 1e-12}


@given(st.data())
def test_sign_pack(data):
    dtype = data.draw(dtypes, "dtype")
    x = data.draw(arrays(dtype), "x")
    words, scale = ops.sign_pack(x)
    with np.errstate(over="ignore"):  # a sum past float64's range is +Inf
        expected_words, expected_scale = reference_pack(x)
    # The sign bits read the bit patterns: subnormals keep their sign, no flush.
    assert words.dtype == tf.uint32 and words.shape == (-(-x.size // 32),)
    assert_same_bits(words.numpy(), expected_words)
    assert scale.dtype == dtype and scale.shape == ()
    got = float(np.float64(scale.numpy()))
    wide = x.astype(np.float64)
    if np.isnan(wide).any():
        assert math.isnan(got), "NaN in x must show in the scale"
        return
    if np.isinf(wide).any():
        assert got == math.inf, "Inf in x must show in the scale"
        return
    acc = np.finfo(acc_dtype(dtype))
    if x.size and expected_scale > float(acc.max) / 2 / x.size:
        # |x| is summed in the accumulator type (float32 for the 32- and 16-bit types):
        # a sum past its range is +Inf.
        assert got == math.inf or got == pytest.approx(float(to_dtype(expected_scale, dtype)), rel=1e-3)
        return
    expected = float(np.float64(to_dtype(expected_scale, dtype)))
    # The sum runs in blocks and in the accumulator type, with subnormals flushed.
    tolerance = SCALE_RTOL[dtype] * expected + float(acc.tiny) + float(finfo(dtype).smallest_subnormal)
    assert abs(got - expected) <= tolerance, (got, expected)


@given(st.data())
def test_sign_unpack(data):
    dtype = data.draw(dtypes, "dtype")
    num_words = data.draw(st.integers(0, 12), "W")
    n = data.draw(st.integers(0, 32 * num_words), "n")
    words = np.array(data.draw(st.lists(st.integers(0, 2**32 - 1), min_size=num_words, max_size=num_words)),
                     np.uint32)
    scale = to_dtype(data.draw(elements(dtype), "scale"), dtype)
    out = ops.sign_unpack(words, scale, n)
    assert out.dtype == dtype and out.shape == (n,)
    # +scale for a set bit, -scale (the sign bit flipped, also for NaN and 0) for a clear one.
    expected = np.where(unpack_bits(words, n), scale, -scale).astype(np_dtype(dtype))
    assert_same_bits(out.numpy(), expected)


@given(st.data())
def test_sign_pack_unpack_roundtrip(data):
    dtype = data.draw(dtypes, "dtype")
    x = data.draw(arrays(dtype, max_size=600), "x")
    words, scale = ops.sign_pack(x)
    out = ops.sign_unpack(words, scale, x.size).numpy()
    with np.errstate(over="ignore"):
        positive = unpack_bits(reference_pack(x)[0], x.size)
    s = scale.numpy()
    assert_same_bits(out, np.where(positive, s, -s).astype(np_dtype(dtype)))


@given(st.data())
def test_sign_majority(data):
    dtype = data.draw(dtypes, "dtype")
    # Worker counts around the kernel's 255-row flush of its byte counters, and small
    # odd and even ones (ties).
    k = data.draw(st.one_of(st.integers(1, 9), st.sampled_from([254, 255, 256, 257, 511, 512])), "K")
    num_words = data.draw(st.integers(0, 5), "W")
    n = data.draw(st.integers(0, 32 * num_words), "n")
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), "rng"))
    # Biased bits, so that some positions are unanimous and ties are frequent at even K.
    bias = data.draw(st.sampled_from([0.0, 0.5, 1.0, 0.3]), "bias")
    bits = rng.random((k, 32 * num_words)) < bias
    words = np.stack([np.packbits(row, bitorder="little").view(np.uint32) for row in bits]) if num_words \
        else np.zeros((k, 0), np.uint32)
    out = ops.sign_majority(words, n, dtype=dtype)
    assert out.dtype == dtype and out.shape == (n,)
    expected = reference_majority(words, n).astype(np_dtype(dtype))
    assert_same_bits(out.numpy(), expected)


@given(st.data())
def test_sign_majority_is_the_sign_of_the_summed_signs(data):
    k = data.draw(st.integers(1, 6), "K")
    n = data.draw(st.sampled_from(BOUNDARY_SIZES[:12]) | st.integers(0, 200), "n")
    grads = [data.draw(arrays(tf.float32, shape=(n,)), f"grad{w}") for w in range(k)]
    words = tf.stack([ops.sign_pack(g)[0] for g in grads])
    votes = np.stack([np.where(unpack_bits(reference_pack(g)[0], n), 1, -1) for g in grads])
    np.testing.assert_array_equal(ops.sign_majority(words, n).numpy(), np.sign(votes.sum(axis=0)))


@given(st.data())
def test_sign_pack_zero_bit(data):
    dtype = data.draw(dtypes, "dtype")
    x = data.draw(arrays(dtype), "x")
    zero_bit = data.draw(st.booleans(), "zero_bit")
    words, scale = ops.sign_pack(x, zero_bit)
    wide = x.reshape(-1).astype(np.float64)
    with np.errstate(over="ignore"):
        bits = unpack_bits(reference_pack(x)[0], x.size)
    bits[wide == 0] = zero_bit
    assert_same_bits(words.numpy(), pack_bits(bits))
    assert_same_bits(scale.numpy(), ops.sign_pack(x)[1].numpy())  # zeros add nothing either way


@given(st.data())
def test_sign_ef_pack(data):
    dtype = data.draw(dtypes, "dtype")
    g = data.draw(arrays(dtype, bound=1e3), "g")
    e = data.draw(arrays(dtype, shape=g.shape, bound=1e3), "e")
    zero_bit = data.draw(st.booleans(), "zero_bit")
    words, scale, residual = ops.sign_ef_pack(g, e, zero_bit)
    # p as the CPU computes it: inputs and the sum read with subnormals flushed.
    acc = acc_dtype(dtype)
    with np.errstate(over="ignore", invalid="ignore"):
        wide = as_read(g).astype(acc) + as_read(e).astype(acc)
        p = as_read(wide).astype(np_dtype(dtype))
    # Words and scale: sign_pack's of p, bit for bit.
    packed_words, packed_scale = ops.sign_pack(p, zero_bit)
    assert_same_bits(words.numpy(), packed_words.numpy())
    assert_equal_or_both_nan(scale.numpy(), packed_scale.numpy())
    s = np.asarray(scale.numpy()).astype(acc)
    sent = np.where(unpack_bits(words.numpy(), p.size), s, -s).astype(acc)
    with np.errstate(invalid="ignore", over="ignore"):
        expected = as_read(p.reshape(-1).astype(acc) - sent).astype(np_dtype(dtype)).reshape(g.shape)
    assert residual.shape == g.shape
    assert_equal_or_both_nan(residual.numpy(), expected)


@given(st.data())
def test_sign_scaled_sum(data):
    dtype = data.draw(dtypes, "dtype")
    k = data.draw(st.one_of(st.integers(1, 9), st.sampled_from([127, 128, 300])), "K")
    num_words = data.draw(st.integers(0, 5), "W")
    n = data.draw(st.integers(0, 32 * num_words), "n")
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), "rng"))
    words = rng.integers(0, 2**32, (k, num_words), dtype=np.uint64).astype(np.uint32)
    scales = to_dtype(rng.random(k) * 10.0 ** data.draw(st.integers(-3, 3)), dtype, (k,))
    weight = data.draw(st.sampled_from([1.0, 1.0 / k, 0.5]), "weight")
    out = ops.sign_scaled_sum(words, scales, n, weight)
    accd = acc_dtype(dtype)
    total = np.zeros(n, accd)
    for row, s in zip(words, scales.astype(accd)):
        total = as_read((total + np.where(unpack_bits(row, n), s, -s).astype(accd)).astype(accd))
    expected = as_read(total * accd(to_dtype(weight, dtype, ()))).astype(np_dtype(dtype))
    assert out.dtype == dtype and out.shape == (n,)
    assert_same_bits(out.numpy(), expected)


@given(st.data())
def test_sign_majority_wide_k_takes_every_path(data):
    """K around the vectorized path's 127-row limit gives the generic path's votes."""
    k = data.draw(st.sampled_from([126, 127, 128, 129]), "K")
    n = data.draw(st.integers(0, 100), "n")
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), "rng"))
    words = rng.integers(0, 2**32, (k, -(-n // 32)), dtype=np.uint64).astype(np.uint32)
    for dtype in (tf.float16, tf.bfloat16, tf.float32, tf.float64):
        out = ops.sign_majority(words, n, dtype=dtype)
        assert_same_bits(out.numpy(), reference_majority(words, n).astype(np_dtype(dtype)))


# --- hash_select, sampled_threshold, sparse_decode, scale_at -----------------------------------

@given(st.data())
def test_hash_select(data):
    dtype = data.draw(dtypes, "dtype")
    g = data.draw(arrays(dtype, max_size=3000), "g")
    n = g.size
    # Capacities 0 (no slots: two empty outputs) to past n.
    capacity = data.draw(st.one_of(st.integers(0, n + 8), st.sampled_from([0, 1, n])), "capacity")
    threshold = to_dtype(data.draw(elements(dtype), "threshold"), dtype)
    seed = data.draw(seeds, "seed")
    bucket_size = data.draw(st.one_of(st.just(1), st.integers(1, 9)), "bucket_size")
    wide = data.draw(st.booleans(), "int64 indices")
    if wide:
        values, indices = ops.library().tfcomp_hash_select(
            tf.constant(g), tf.constant(threshold), tf.constant(seed, tf.int64), capacity=capacity,
            bucket_size=bucket_size, Tindex=tf.int64)
    else:
        values, indices = ops.hash_select(g, threshold, seed, capacity, bucket_size)
    assert values.shape == (capacity,) and indices.shape == (capacity,)
    assert values.dtype == dtype and indices.dtype == (tf.int64 if wide else tf.int32)
    # The kernel compares |g| and the threshold as it reads them (subnormals flushed);
    # the values it returns are g's own bits.
    _, expected_indices, selected = sparse_ref.hash_select(as_read(g), as_read(threshold), seed, capacity,
                                                           bucket_size)
    np.testing.assert_array_equal(indices.numpy(), expected_indices)
    valid = expected_indices >= 0
    expected_values = np.zeros(capacity, g.dtype)
    expected_values[valid] = g.reshape(-1)[expected_indices[valid]]
    assert_same_bits(values.numpy(), expected_values)
    assert len(set(expected_indices[valid])) == valid.sum() and set(expected_indices[valid]) <= set(selected)


@given(st.data())
def test_sampled_threshold(data):
    dtype = data.draw(dtypes, "dtype")
    g = data.draw(arrays(dtype, max_size=3000), "g")
    # Fewer samples than elements (sampled runs) or at least as many (all of g).
    num_samples = data.draw(st.one_of(st.integers(1, g.size + 300), st.integers(1, 600)), "num_samples")
    k = data.draw(st.one_of(st.integers(1, num_samples), st.sampled_from([1, num_samples])), "k")
    seed = data.draw(seeds, "seed")
    got = ops.sampled_threshold(g, seed, num_samples, k)
    assert got.dtype == dtype and got.shape == ()
    expected = sparse_ref.sampled_threshold(as_read(g), seed, num_samples, k)
    assert_same_bits(got.numpy(), np.asarray(expected))


# Decoded values: multiples of 2^-8 (any sum of them rounds to another one, never to
# a subnormal, so the CPU's flush cannot change a sum), and the special values.
def decode_values(dtype):
    f = finfo(dtype)
    return st.one_of(st.integers(-2**16, 2**16).map(lambda m: m / 256),
                     st.sampled_from([math.nan, math.inf, -math.inf, 0.0, -0.0, float(f.max), -float(f.max)]))


@given(st.data())
def test_sparse_decode(data):
    dtype = data.draw(dtypes, "dtype")
    n = data.draw(st.integers(0, 300), "n")
    k = data.draw(st.integers(1, 8), "K workers")
    index = st.integers(-1, n - 1)
    lists = []
    for worker in range(k):
        m = data.draw(st.integers(0, 24), f"slots{worker}")
        values = to_dtype(data.draw(st.lists(decode_values(dtype), min_size=m, max_size=m)), dtype)
        indices = np.array(data.draw(st.lists(index, min_size=m, max_size=m)), np.int64)
        lists.append((values, indices))
    all_values = np.concatenate([v for v, _ in lists])
    index_dtype = data.draw(st.sampled_from([np.int32, np.int64]), "index dtype")
    all_indices = np.concatenate([i for _, i in lists]).astype(index_dtype)
    # The sum, or the mean of the K workers (any divisor: 1/K rounded in the accumulator).
    divisor = data.draw(st.sampled_from([1, k, 3, 7]), "divisor")
    out = ops.sparse_decode(all_values, all_indices, n, divisor=divisor)
    assert out.dtype == dtype and out.shape == (n,)
    with np.errstate(invalid="ignore", over="ignore"):  # Inf - Inf, max + max
        expected = sparse_ref.sparse_decode(all_values, all_indices, n, divisor)
    assert_equal_or_both_nan(out.numpy(), expected)


@given(st.data())
def test_scale_at(data):
    """Each listed element (repeats and -1 among the indices) scaled once; factor 0
    clears, NaN and Inf included; the others keep their bits (subnormals too)."""
    dtype = data.draw(dtypes, "dtype")
    x = np.array(data.draw(arrays(dtype), "x"))
    n = x.size
    count = data.draw(st.integers(0, 40), "count")
    indices = np.array(data.draw(st.lists(st.integers(-1, n - 1), min_size=count, max_size=count)), np.int64)
    # Listed elements from the decode's values (no subnormal product for the flush to change).
    listed = np.unique(indices[indices >= 0])
    flat = x.reshape(-1)
    flat[listed] = to_dtype(data.draw(st.lists(decode_values(dtype), min_size=len(listed), max_size=len(listed))),
                            dtype)
    factor = data.draw(st.sampled_from([0.0, -0.0, 1.0, 0.5, -3.0, 0.25, 2.0, math.inf, math.nan]), "factor")
    index_dtype = data.draw(st.sampled_from([np.int32, np.int64]), "index dtype")
    out = ops.scale_at(x, indices.astype(index_dtype), factor)
    assert out.dtype == dtype and out.shape == x.shape
    expected = sparse_ref.scale_at(x, indices, to_dtype(factor, dtype))
    assert_equal_or_both_nan(out.numpy(), expected)


@given(st.data())
def test_sparse_decode_of_a_selection_restores_the_selected_elements(data):
    dtype = data.draw(dtypes, "dtype")
    g = data.draw(arrays(dtype, max_size=3000), "g")
    capacity = data.draw(st.integers(0, g.size + 4), "capacity")
    threshold = to_dtype(data.draw(elements(dtype), "threshold"), dtype)
    values, indices = ops.hash_select(g, threshold, data.draw(seeds, "seed"), capacity)
    dense = ops.sparse_decode(values, indices, g.size).numpy()
    kept = indices.numpy()[indices.numpy() >= 0]
    flat = g.reshape(-1)
    expected = np.zeros_like(flat)
    # 0 + x is x, except that the flush reads a subnormal x as 0 (and -0 + 0 is +0).
    expected[kept] = as_read(flat[kept]) + np.zeros((), flat.dtype)
    assert_equal_or_both_nan(dense, expected)


# --- lowrank_residual -------------------------------------------------------------------------

def lowrank_values(dtype):
    """Finite values of at most 16 in magnitude (no overflow of m - p q^T, whose rounding
    is bounded relative to |m| + |p||q|^T), with NaN, +-Inf, +-0 and subnormals."""
    f = finfo(dtype)
    width = {tf.float16: 16, tf.bfloat16: 32, tf.float32: 32, tf.float64: 64}[dtype]
    return st.one_of(
        st.floats(-16, 16, width=width),
        st.sampled_from([math.nan, math.inf, -math.inf, 0.0, -0.0, float(f.smallest_subnormal),
                         -float(f.tiny), 1.0, -16.0]))


def assert_lowrank_arithmetic(out, exact, magnitude, dtype, steps):
    """out against the float64 result of the inputs as the kernel reads them (a subnormal
    operand is 0: Inf x a subnormal is NaN): NaN and +-Inf exactly where the arithmetic puts
    them (the finite values cannot overflow), the rest within `steps` roundings in the
    accumulator type, one to dtype, and the flush of a subnormal step result (each less than
    the smallest normal)."""
    got = out.numpy().astype(np.float64)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(exact))
    np.testing.assert_array_equal(np.isposinf(got), np.isposinf(exact))
    np.testing.assert_array_equal(np.isneginf(got), np.isneginf(exact))
    finite = np.isfinite(exact)
    acc = np.finfo(acc_dtype(dtype))
    to_t = 0.0 if acc_dtype(dtype) == np_dtype(dtype) else float(finfo(dtype).eps)
    bound = (steps * float(acc.eps) * magnitude[finite] + to_t * np.abs(exact[finite])
             + steps * float(acc.tiny) + float(finfo(dtype).smallest_subnormal))
    assert np.all(np.abs(got[finite] - exact[finite]) <= bound), (got[finite], exact[finite])
    return got


def draw_lowrank_shape(data):
    return data.draw(dtypes, "dtype"), data.draw(st.integers(0, 13), "n"), data.draw(st.integers(0, 40), "k"), \
        data.draw(st.integers(0, 6), "r")


@given(st.data())
def test_lowrank_residual(data):
    dtype, n, k, r = draw_lowrank_shape(data)
    m, p, q = (data.draw(arrays(dtype, shape=shape, values=lowrank_values(dtype), bound=16), name)
               for shape, name in (((n, k), "m"), ((n, r), "p"), ((k, r), "q")))
    out = ops.lowrank_residual(m, p, q)
    assert out.dtype == dtype and out.shape == (n, k)
    with np.errstate(invalid="ignore", over="ignore"):
        exact, magnitude = lowrank_reference(as_read(m), as_read(p), as_read(q))
    assert_lowrank_arithmetic(out, exact, magnitude, dtype, steps=r + 1)


@given(st.data())
def test_lowrank_residual_of_rank_zero_is_m(data):
    dtype = data.draw(dtypes, "dtype")
    m = data.draw(arrays(dtype, shape=data.draw(st.tuples(st.integers(0, 9), st.integers(0, 9)))), "m")
    out = ops.lowrank_residual(m, np.zeros((m.shape[0], 0), m.dtype), np.zeros((m.shape[1], 0), m.dtype))
    # No arithmetic: m's bits come back (a subnormal is rounded through the accumulator).
    assert_equal_or_both_nan(out.numpy(), m.astype(acc_dtype(dtype)).astype(m.dtype))


@given(st.data())
def test_lowrank_product(data):
    dtype, n, k, r = draw_lowrank_shape(data)
    p, q = (data.draw(arrays(dtype, shape=shape, values=lowrank_values(dtype), bound=16), name)
            for shape, name in (((n, r), "p"), ((k, r), "q")))
    out = ops.lowrank_product(p, q)
    assert out.dtype == dtype and out.shape == (n, k)
    with np.errstate(invalid="ignore", over="ignore"):
        exact, magnitude = lowrank_product_reference(as_read(p), as_read(q))
    got = assert_lowrank_arithmetic(out, exact, magnitude, dtype, steps=r)
    if r == 0:  # no arithmetic: +0 everywhere
        assert not np.signbit(got).any() and not got.any()


@given(st.data())
def test_lowrank_compensate(data):
    dtype, n, k, r = draw_lowrank_shape(data)
    g, e = (data.draw(arrays(dtype, shape=(n, k), values=lowrank_values(dtype), bound=16), name)
            for name in ("g", "e"))
    q = data.draw(arrays(dtype, shape=(k, r), values=lowrank_values(dtype), bound=16), "q")
    m, p = ops.lowrank_compensate(g, e, q)
    assert m.dtype == p.dtype == dtype and m.shape == (n, k) and p.shape == (n, r)
    # m: the sum of the operands as read, in the accumulator type, its flush, one rounding to dtype.
    acc = acc_dtype(dtype)
    with np.errstate(invalid="ignore", over="ignore"):
        total = as_read(as_read(g).astype(acc) + as_read(e).astype(acc))
    assert_equal_or_both_nan(m.numpy(), total.astype(g.dtype))
    # p: m as written, times q, in ceil(k / 16) fused steps per lane and four lane additions.
    with np.errstate(invalid="ignore", over="ignore"):
        read_m, read_q = as_read(m.numpy()).astype(np.float64), as_read(q).astype(np.float64)
        exact, magnitude = read_m @ read_q, np.abs(read_m) @ np.abs(read_q)
    got = assert_lowrank_arithmetic(p, exact, magnitude, dtype, steps=-(-k // 16) + 4)
    if k == 0:  # sums of no columns: +0 everywhere
        assert not np.signbit(got).any() and not got.any()


@given(st.data())
def test_lowrank_project(data):
    dtype, n, k, r = draw_lowrank_shape(data)
    n = data.draw(st.sampled_from([n, 255, 256, 257, 600]), "rows")  # within and across blocks of 256
    m, p = (data.draw(arrays(dtype, shape=shape, values=lowrank_values(dtype), bound=16), name)
            for shape, name in (((n, k), "m"), ((n, r), "p")))
    q = ops.lowrank_project(m, p)
    assert q.dtype == dtype and q.shape == (k, r)
    with np.errstate(invalid="ignore", over="ignore"):
        read_m, read_p = as_read(m).astype(np.float64), as_read(p).astype(np.float64)
        exact, magnitude = read_m.T @ read_p, np.abs(read_m).T @ np.abs(read_p)
    # up to 256 fused steps per block, one addition per block
    got = assert_lowrank_arithmetic(q, exact, magnitude, dtype, steps=min(n, 256) + -(-n // 256))
    if n == 0:  # no rows: +0 everywhere
        assert not np.signbit(got).any() and not got.any()


# --- malformed inputs ------------------------------------------------------------------------

REFUSED = (tf.errors.InvalidArgumentError, ValueError, TypeError)
L = ops.library


def f32(*shape):
    return np.zeros(shape, np.float32)


def u32(*shape):
    return np.zeros(shape, np.uint32)


def i32(*values):
    return np.array(values, np.int32)


def i64(*values):
    return np.array(values, np.int64)


SEED_SHAPE = r"seed must be an int64 vector of 2 elements, got shape "
ONE_LENGTH = r"values and indices must be vectors of one length, got shapes "
FLOATS = "float16, bfloat16, float32, float64"

# (op, call, message): the call is refused eagerly with an error matching message.
EAGER_CASES = [
    # sign_pack takes any shape; only its dtype can be wrong.
    ("sign_pack", lambda: ops.sign_pack(i32(1, 2)), FLOATS),
    ("sign_pack", lambda: L().tfcomp_sign_pack(tf.constant([1, 2]), True), "attr 'T' of int32 is not in the list"),
    ("sign_pack", lambda: ops.sign_pack(f32(3), [True, False]), r"zero_bit must be a scalar bool, got shape \[2\]"),
    ("sign_ef_pack", lambda: ops.sign_ef_pack(i32(1, 2), i32(1, 2)), FLOATS),
    ("sign_ef_pack", lambda: ops.sign_ef_pack(f32(3), f32(4)), r"must have the same shape, got \[3\] and \[4\]"),
    ("sign_ef_pack", lambda: ops.sign_ef_pack(f32(3), f32(3), [True]), "zero_bit must be a scalar bool"),
    ("sign_scaled_sum", lambda: ops.sign_scaled_sum(u32(2, 3), f32(2), 97), r"n = 97 is larger than 32 \* W = 96"),
    ("sign_scaled_sum", lambda: ops.sign_scaled_sum(u32(2, 3), f32(3), 10), "one scale per worker"),
    ("sign_scaled_sum", lambda: ops.sign_scaled_sum(u32(3), f32(1), 10), "words must be a matrix"),
    ("sign_scaled_sum", lambda: ops.sign_scaled_sum(u32(0, 3), f32(0), 10), "at least one worker"),
    ("sign_scaled_sum", lambda: ops.sign_scaled_sum(u32(2, 3), f32(2), 10, f32(2)), "weight must be a scalar"),
    ("sign_scaled_sum", lambda: ops.sign_scaled_sum(u32(2, 3), i32(1, 2), 10), FLOATS),
    ("sign_unpack", lambda: ops.sign_unpack(u32(3), 1.0, 97), r"n = 97 is larger than 32 \* W = 96"),
    ("sign_unpack", lambda: ops.sign_unpack(u32(0), 1.0, 1), r"n = 1 is larger than 32 \* W = 0"),
    ("sign_unpack", lambda: ops.sign_unpack(u32(3), 1.0, -1), "n must be >= 0, got -1"),
    ("sign_unpack", lambda: ops.sign_unpack(u32(3), 1.0, [3, 4]), r"n must be a scalar int64, got shape \[2\]"),
    ("sign_unpack", lambda: ops.sign_unpack(u32(3), 1.0, 3.0), "sign_unpack's n must be an integer tensor, got float32"),
    ("sign_unpack", lambda: ops.sign_unpack(u32(2, 3), 1.0, 10),
     r"words must be a vector \(rank 1\) of uint32, got shape \[2,3\]"),
    ("sign_unpack", lambda: ops.sign_unpack(np.uint32(7), 1.0, 1), r"words must be a vector \(rank 1\) .* got shape \[\]"),
    ("sign_unpack", lambda: ops.sign_unpack(i64(0, 0, 0), 1.0, 10), "sign_unpack's words must be uint32, got int64"),
    ("sign_unpack", lambda: ops.sign_unpack(f32(3), 1.0, 10), "words must be uint32, got float32"),
    ("sign_unpack", lambda: ops.sign_unpack(u32(3), f32(2), 10), r"scale must be a scalar, got shape \[2\]"),
    ("sign_unpack", lambda: ops.sign_unpack(u32(3), np.int32(1), 10), "scale must be one of float16"),
    ("sign_unpack", lambda: L().tfcomp_sign_unpack(u32(3), 1.0, tf.constant(3, tf.int32)),
     "expected to be a int64 tensor but is a int32"),
    ("sign_majority", lambda: ops.sign_majority(u32(3), 10),
     r"words must be a matrix \[workers, words_per_worker\] \(rank 2\) of uint32, got shape \[3\]"),
    ("sign_majority", lambda: ops.sign_majority(u32(2, 3, 1), 10), r"words must be a matrix .* got shape \[2,3,1\]"),
    ("sign_majority", lambda: ops.sign_majority(u32(0, 3), 10), "at least one worker's row, got 0"),
    ("sign_majority", lambda: ops.sign_majority(u32(2, 3), 97), r"n = 97 is larger than 32 \* W = 96"),
    ("sign_majority", lambda: ops.sign_majority(u32(2, 0), 1), r"n = 1 is larger than 32 \* W = 0"),
    ("sign_majority", lambda: ops.sign_majority(u32(2, 3), -5), "n must be >= 0, got -5"),
    ("sign_majority", lambda: ops.sign_majority(u32(2, 3), i64(1, 2)), r"n must be a scalar int64, got shape \[2\]"),
    ("sign_majority", lambda: ops.sign_majority(np.zeros((2, 3), np.int32), 10),
     "sign_majority's words must be uint32, got int32"),
    ("sign_majority", lambda: ops.sign_majority(u32(2, 3), 10, dtype=tf.int32), "dtype must be one of float16"),
    ("cast_divide", lambda: ops.cast_divide(np.ones(4, np.int32), tf.float32), FLOATS),
    ("cast_divide", lambda: ops.cast_divide(f32(4), tf.int32), FLOATS),
    ("cast_divide", lambda: L().tfcomp_cast_divide(f32(3), f32(2)), "divisor must be a scalar"),
    ("select_largest", lambda: ops.select_largest(np.ones(4, np.int32), 0, 2), FLOATS),
    ("select_largest", lambda: ops.select_largest(f32(4), 0.0, -1), "capacity must be >= 0, got -1"),
    ("select_largest", lambda: ops.select_largest(f32(4), f32(2), 2), r"threshold must be a scalar"),
    ("hash_select", lambda: ops.hash_select(f32(4), 1.0, 5, 2), SEED_SHAPE + r"\[\]"),
    ("hash_select", lambda: ops.hash_select(f32(4), 1.0, (1, 2, 3), 2), SEED_SHAPE + r"\[3\]"),
    ("hash_select", lambda: ops.hash_select(f32(4), 1.0, [[1, 2]], 2), SEED_SHAPE + r"\[1,2\]"),
    ("hash_select", lambda: ops.hash_select(f32(4), 1.0, i64(), 2), SEED_SHAPE + r"\[0\]"),
    ("hash_select", lambda: ops.hash_select(f32(4), 1.0, (1.5, 2.0), 2),
     "hash_select's seed must be an integer tensor, got float32"),
    ("hash_select", lambda: ops.hash_select(f32(4), f32(2), (1, 2), 2), r"threshold must be a scalar, got shape \[2\]"),
    ("hash_select", lambda: ops.hash_select(f32(4), 1.0, (1, 2), -1), "capacity must be >= 0, got -1"),
    ("hash_select", lambda: ops.hash_select(f32(4), 1.0, (1, 2), 2.5), "hash_select's capacity must be an integer, got 2.5"),
    ("hash_select", lambda: ops.hash_select(f32(4), 1.0, (1, 2), 2, 0), "bucket_size must be >= 1, got 0"),
    ("hash_select", lambda: L().tfcomp_hash_select(f32(4), 1.0, i64(1, 2), capacity=2, bucket_size=0),
     "bucket_size.* must be at least minimum 1"),
    ("hash_select", lambda: ops.hash_select(np.ones(4, np.int32), 1, (1, 2), 2), FLOATS),
    ("hash_select", lambda: L().tfcomp_hash_select(tf.zeros([4]), tf.constant(1.0, tf.float64), i64(1, 2), capacity=2),
     "expected to be a float tensor but is a double"),
    ("hash_select", lambda: L().tfcomp_hash_select(f32(4), 1.0, i64(1, 2), capacity=-1),
     "capacity.* must be at least minimum 0"),
    ("sampled_threshold", lambda: ops.sampled_threshold(f32(4), 5, 2, 1), SEED_SHAPE + r"\[\]"),
    ("sampled_threshold", lambda: ops.sampled_threshold(f32(4), (1, 2, 3), 2, 1), SEED_SHAPE + r"\[3\]"),
    ("sampled_threshold", lambda: ops.sampled_threshold(f32(4), (0.5, 1.0), 2, 1),
     "sampled_threshold's seed must be an integer tensor, got float32"),
    ("sampled_threshold", lambda: ops.sampled_threshold(f32(4), (1, 2), 2, 3),
     "need 1 <= k <= num_samples, got k=3, num_samples=2"),
    ("sampled_threshold", lambda: ops.sampled_threshold(f32(4), (1, 2), 2, 0), "need 1 <= k <= num_samples, got k=0"),
    ("sampled_threshold", lambda: ops.sampled_threshold(f32(4), (1, 2), 0, 0), "need 1 <= k <= num_samples"),
    ("sampled_threshold", lambda: ops.sampled_threshold(f32(4), (1, 2), 2.0, 1),
     "sampled_threshold's num_samples must be an integer, got 2.0"),
    ("sampled_threshold", lambda: ops.sampled_threshold(np.ones(4, np.int64), (1, 2), 2, 1), FLOATS),
    ("sampled_threshold", lambda: L().tfcomp_sampled_threshold(f32(4), i64(1, 2), num_samples=2, k=3),
     "k = 3 is larger than num_samples = 2"),
    ("sampled_threshold", lambda: L().tfcomp_sampled_threshold(f32(4), i64(1, 2), num_samples=2, k=0),
     "'k' of 0 must be at least minimum 1"),
    ("sparse_decode", lambda: ops.sparse_decode(f32(2), i32(0, 5), 5), r"indices\[1\] = 5 is outside \[0, n = 5\)"),
    ("sparse_decode", lambda: ops.sparse_decode(f32(2), i32(-2, 0), 5), r"indices\[0\] = -2 is outside .* not -1"),
    # int64 indices are not wrapped to int32 (2^40 + 3 would become 3).
    ("sparse_decode", lambda: ops.sparse_decode(f32(2), i64(0, 2**40 + 3), 5), r"indices\[1\] = 1099511627779 is outside"),
    ("sparse_decode", lambda: ops.sparse_decode(f32(2), i64(0, -2**63), 5), r"indices\[1\] = -9223372036854775808 is outside"),
    ("sparse_decode", lambda: ops.sparse_decode(f32(1), i32(0), 0), r"indices\[0\] = 0 is outside \[0, n = 0\)"),
    ("sparse_decode", lambda: ops.sparse_decode(f32(3), i32(0, 1), 5), ONE_LENGTH + r"\[3\] and \[2\]"),
    ("sparse_decode", lambda: ops.sparse_decode(f32(2, 1), i32(0, 0), 5), ONE_LENGTH + r"\[2,1\] and \[2\]"),
    ("sparse_decode", lambda: ops.sparse_decode(f32(2), np.zeros((2, 1), np.int32), 5), ONE_LENGTH + r"\[2\] and \[2,1\]"),
    ("sparse_decode", lambda: ops.sparse_decode(f32(1), i32(0), -1), "n must be >= 0, got -1"),
    ("sparse_decode", lambda: ops.sparse_decode(f32(1), i32(0), [5, 5]), r"n must be a scalar int64, got shape \[2\]"),
    # Float indices are not truncated (2.7 would become 2).
    ("sparse_decode", lambda: ops.sparse_decode(f32(2), np.array([0.0, 2.7], np.float32), 5),
     "sparse_decode's indices must be int32 or int64, got float32"),
    ("sparse_decode", lambda: ops.sparse_decode(f32(2), np.array([0, 3], np.uint8), 5),
     "indices must be int32 or int64, got uint8"),
    ("sparse_decode", lambda: ops.sparse_decode(np.ones(2, np.int32), i32(0, 3), 5), "values must be one of float16"),
    ("sparse_decode", lambda: ops.sparse_decode(f32(2), i32(0, 3), 5.0), "sparse_decode's n must be an integer tensor"),
    ("sparse_decode", lambda: ops.sparse_decode(f32(2), i32(0, 3), 5, divisor=0), "divisor must be >= 1, got 0"),
    ("sparse_decode", lambda: L().tfcomp_sparse_decode(f32(2), i32(0, 3), n64(5), divisor=0),
     "divisor.* must be at least minimum 1"),
    ("scale_at", lambda: ops.scale_at(f32(5), i32(0, 5), 0), r"indices\[1\] = 5 is outside \[0, n = 5\)"),
    ("scale_at", lambda: ops.scale_at(f32(5), i64(-2), 0), r"indices\[0\] = -2 is outside .* not -1"),
    ("scale_at", lambda: ops.scale_at(f32(0), i32(0), 0), r"indices\[0\] = 0 is outside \[0, n = 0\)"),
    ("scale_at", lambda: ops.scale_at(f32(5), np.zeros((1, 1), np.int32), 0), "rank 1|must be a vector"),
    ("scale_at", lambda: ops.scale_at(f32(5), i32(0), f32(2)), "rank 0|must be a scalar"),
    ("scale_at", lambda: ops.scale_at(f32(5), np.array([0.0], np.float32), 0), "scale_at's indices must be int32 or int64"),
    ("scale_at", lambda: ops.scale_at(np.ones(2, np.int32), i32(0), 0), FLOATS),
    ("lowrank_residual", lambda: ops.lowrank_residual(f32(6), f32(6, 2), f32(1, 2)),
     r"m must be a matrix \[n, k\] \(rank 2\), got shape \[6\]"),
    ("lowrank_residual", lambda: ops.lowrank_residual(f32(2, 3), f32(2), f32(3, 2)),
     r"p must be a matrix \[n, r\] \(rank 2\), got shape \[2\]"),
    ("lowrank_residual", lambda: ops.lowrank_residual(f32(2, 3), f32(2, 2), f32()),
     r"q must be a matrix \[k, r\] \(rank 2\), got shape \[\]"),
    ("lowrank_residual", lambda: ops.lowrank_residual(f32(4, 3), f32(5, 2), f32(3, 2)),
     r"p must have one row per row of m: m is \[4,3\] \(n = 4\) but p is \[5,2\]"),
    ("lowrank_residual", lambda: ops.lowrank_residual(f32(4, 3), f32(4, 2), f32(2, 2)),
     "q must have one row per column of m"),
    ("lowrank_residual", lambda: ops.lowrank_residual(f32(4, 3), f32(4, 2), f32(3, 1)),
     "p and q must have the same number of columns"),
    ("lowrank_residual", lambda: ops.lowrank_residual(f32(2, 2), np.zeros((2, 1)), f32(2, 1)),
     "one dtype, got float32, float64 and float32"),
    ("lowrank_residual", lambda: ops.lowrank_residual(*(np.zeros(s, np.int32) for s in ((2, 2), (2, 1), (2, 1)))), FLOATS),
    ("lowrank_residual", lambda: L().tfcomp_low_rank_residual(tf.zeros([2, 2]), tf.zeros([2, 1], tf.float64), tf.zeros([2, 1])),
     "expected to be a float tensor but is a double"),
    ("lowrank_product", lambda: ops.lowrank_product(f32(6), f32(1, 2)), r"p must be a matrix \[n, r\] \(rank 2\), got shape \[6\]"),
    ("lowrank_product", lambda: ops.lowrank_product(f32(2, 2), f32()), r"q must be a matrix \[k, r\] \(rank 2\), got shape \[\]"),
    ("lowrank_product", lambda: ops.lowrank_product(f32(4, 2), f32(3, 1)),
     r"p and q must have the same number of columns \(the rank r\): p is \[4,2\] but q is \[3,1\]"),
    ("lowrank_product", lambda: ops.lowrank_product(f32(2, 1), np.zeros((2, 1))), "one dtype, got float32 and float64"),
    ("lowrank_product", lambda: ops.lowrank_product(np.zeros((2, 1), np.int32), np.zeros((2, 1), np.int32)), FLOATS),
    ("lowrank_product", lambda: L().tfcomp_low_rank_product(tf.zeros([2, 1]), tf.zeros([2, 1], tf.float64)),
     "expected to be a float tensor but is a double"),
    ("lowrank_compensate", lambda: ops.lowrank_compensate(f32(6), f32(6), f32(6, 2)),
     r"g must be a matrix \[n, k\] \(rank 2\), got shape \[6\]"),
    ("lowrank_compensate", lambda: ops.lowrank_compensate(f32(4, 3), f32(4, 2), f32(3, 2)),
     r"e must have g's shape"),
    ("lowrank_compensate", lambda: ops.lowrank_compensate(f32(4, 3), f32(4, 3), f32(3)),
     r"q must be a matrix \[k, r\] \(rank 2\)"),
    ("lowrank_compensate", lambda: ops.lowrank_compensate(f32(4, 3), f32(4, 3), f32(2, 1)),
     "q must have one row per column of g"),
    ("lowrank_compensate", lambda: ops.lowrank_compensate(f32(2, 2), f32(2, 2), np.zeros((2, 1))),
     "one dtype, got float32, float32 and float64"),
    ("lowrank_compensate", lambda: ops.lowrank_compensate(*(np.zeros(s, np.int32) for s in ((2, 2), (2, 2), (2, 1)))),
     FLOATS),
    ("lowrank_compensate", lambda: L().tfcomp_low_rank_compensate(tf.zeros([2, 2]), tf.zeros([2, 2], tf.float64),
                                                                  tf.zeros([2, 1])),
     "expected to be a float tensor but is a double"),
    ("lowrank_project", lambda: ops.lowrank_project(f32(6), f32(6, 2)), r"m must be a matrix \[n, k\] \(rank 2\)"),
    ("lowrank_project", lambda: ops.lowrank_project(f32(4, 3), f32(4)), r"p must be a matrix \[n, r\] \(rank 2\)"),
    ("lowrank_project", lambda: ops.lowrank_project(f32(4, 3), f32(5, 2)), "p must have one row per row of m"),
    ("lowrank_project", lambda: ops.lowrank_project(f32(2, 2), np.zeros((2, 1))), "one dtype, got float32 and float64"),
    ("lowrank_project", lambda: ops.lowrank_project(np.zeros((2, 2), np.int32), np.zeros((2, 1), np.int32)), FLOATS),
    ("lowrank_project", lambda: L().tfcomp_low_rank_project(tf.zeros([2, 2]), tf.zeros([2, 1], tf.float64)),
     "expected to be a float tensor but is a double"),
]


def case_ids(cases):
    return [f"{case[0]}-{i}" for i, case in enumerate(cases)]


@pytest.mark.parametrize("op, call, message", EAGER_CASES, ids=case_ids(EAGER_CASES))
def test_malformed_input_is_refused_eagerly(op, call, message):
    with pytest.raises(REFUSED, match=message):
        call()


_SPECS = {"f32": tf.TensorSpec(None, tf.float32), "u32": tf.TensorSpec(None, tf.uint32),
          "i32": tf.TensorSpec(None, tf.int32), "i64": tf.TensorSpec(None, tf.int64)}


def unknown_shapes(fn, *specs):
    """fn in a tf.function whose inputs have unknown shapes: shape inference cannot
    reject them, the kernel checks them."""
    return tf.function(fn, input_signature=[_SPECS[s] for s in specs])


_sign_pack = unknown_shapes(lambda x: ops.sign_pack(x), "f32")
_sign_unpack = unknown_shapes(lambda w, s, n: ops.sign_unpack(w, s, n), "u32", "f32", "i64")
_sign_majority = unknown_shapes(lambda w, n: ops.sign_majority(w, n), "u32", "i64")
_sign_ef_pack = unknown_shapes(lambda g, e: ops.sign_ef_pack(g, e, False), "f32", "f32")
_sign_scaled_sum = unknown_shapes(lambda w, s, n: ops.sign_scaled_sum(w, s, n, 0.5), "u32", "f32", "i64")
_hash_select = unknown_shapes(lambda g, t, s: ops.hash_select(g, t, s, 4), "f32", "f32", "i64")
_select_largest = unknown_shapes(lambda x, t: ops.select_largest(x, t, 2), "f32", "f32")
_cast_divide = unknown_shapes(lambda x, d: L().tfcomp_cast_divide(x, d), "f32", "f32")
_sampled_threshold = unknown_shapes(lambda g, s: ops.sampled_threshold(g, s, 8, 2), "f32", "i64")
_sparse_decode32 = unknown_shapes(lambda v, i, n: ops.sparse_decode(v, i, n), "f32", "i32", "i64")
_sparse_decode64 = unknown_shapes(lambda v, i, n: ops.sparse_decode(v, i, n), "f32", "i64", "i64")
_scale_at32 = unknown_shapes(lambda x, i, f: ops.scale_at(x, i, f), "f32", "i32", "f32")
_lowrank_residual = unknown_shapes(lambda m, p, q: ops.lowrank_residual(m, p, q), "f32", "f32", "f32")
_lowrank_product = unknown_shapes(lambda p, q: ops.lowrank_product(p, q), "f32", "f32")
_lowrank_compensate = unknown_shapes(lambda g, e, q: ops.lowrank_compensate(g, e, q), "f32", "f32", "f32")
_lowrank_project = unknown_shapes(lambda m, p: ops.lowrank_project(m, p), "f32", "f32")
one, n64 = np.float32(1), np.int64

# The same kinds of mistakes inside a graph with unknown shapes: the kernels' own checks.
GRAPH_CASES = [
    ("sign_pack", lambda: _sign_pack(f32(2, 0, 3)), None),  # any shape is valid, an empty one too
    ("sign_ef_pack", lambda: _sign_ef_pack(f32(2, 0, 3), f32(2, 0, 3)), None),
    ("sign_ef_pack", lambda: _sign_ef_pack(f32(2, 3), f32(3, 2)), "grad and residual must have the same shape"),
    ("sign_scaled_sum", lambda: _sign_scaled_sum(u32(2, 3), f32(2), n64(97)), r"n = 97 is larger than 32 \* W = 96"),
    ("sign_scaled_sum", lambda: _sign_scaled_sum(u32(2, 3), f32(2), n64(-1)), "n must be >= 0, got -1"),
    ("sign_scaled_sum", lambda: _sign_scaled_sum(u32(2, 3), f32(1), n64(3)), "one scale per worker"),
    ("sign_scaled_sum", lambda: _sign_scaled_sum(u32(3), f32(1), n64(3)), r"words must be a matrix"),
    ("sign_unpack", lambda: _sign_unpack(u32(3), one, n64(97)), r"n = 97 is larger than 32 \* W = 96"),
    ("sign_unpack", lambda: _sign_unpack(u32(3), one, n64(-1)), "n must be >= 0, got -1"),
    ("sign_unpack", lambda: _sign_unpack(u32(3), one, i64(1, 2)), r"n must be a scalar int64, got shape \[2\]"),
    ("sign_unpack", lambda: _sign_unpack(u32(2, 3), one, n64(3)), r"words must be a vector \(rank 1\)"),
    ("sign_unpack", lambda: _sign_unpack(u32(3), f32(2), n64(3)), "scale must be a scalar"),
    ("sign_majority", lambda: _sign_majority(u32(3), n64(3)), r"words must be a matrix .* \(rank 2\)"),
    ("sign_majority", lambda: _sign_majority(u32(0, 3), n64(3)), "at least one worker's row"),
    ("sign_majority", lambda: _sign_majority(u32(2, 3), n64(97)), r"n = 97 is larger than 32 \* W = 96"),
    ("sign_majority", lambda: _sign_majority(u32(2, 3), n64(-2)), "n must be >= 0, got -2"),
    ("sign_majority", lambda: _sign_majority(u32(2, 3), i64(1)), r"n must be a scalar int64, got shape \[1\]"),
    ("hash_select", lambda: _hash_select(f32(4), one, i64(1, 2, 3)), SEED_SHAPE + r"\[3\]"),
    ("hash_select", lambda: _hash_select(f32(4), one, n64(1)), SEED_SHAPE + r"\[\]"),
    ("hash_select", lambda: _hash_select(f32(4), f32(2), i64(1, 2)), r"threshold must be a scalar, got shape \[2\]"),
    ("cast_divide", lambda: _cast_divide(f32(4), f32(2)), "divisor must be a scalar"),
    ("cast_divide", lambda: _cast_divide(f32(2, 0, 3), one), None),
    ("select_largest", lambda: _select_largest(f32(4), f32(2)), r"threshold must be a scalar"),
    ("select_largest", lambda: _select_largest(f32(2, 0, 3), one), None),
    ("sampled_threshold", lambda: _sampled_threshold(f32(4), np.ones((2, 1), np.int64)), SEED_SHAPE + r"\[2,1\]"),
    ("sparse_decode", lambda: _sparse_decode32(f32(2), i32(0, 9), n64(9)), r"indices\[1\] = 9 is outside \[0, n = 9\)"),
    ("sparse_decode", lambda: _sparse_decode64(f32(2), i64(0, -7), n64(9)), r"indices\[1\] = -7 is outside"),
    ("sparse_decode", lambda: _sparse_decode32(f32(3), i32(0, 1), n64(9)), ONE_LENGTH + r"\[3\] and \[2\]"),
    ("sparse_decode", lambda: _sparse_decode32(f32(2, 1), i32(0, 1), n64(9)), ONE_LENGTH + r"\[2,1\] and \[2\]"),
    ("sparse_decode", lambda: _sparse_decode32(f32(2), i32(0, 1), n64(-9)), "n must be >= 0, got -9"),
    ("sparse_decode", lambda: _sparse_decode32(f32(2), i32(0, 1), i64(9, 9)), r"n must be a scalar int64, got shape \[2\]"),
    ("scale_at", lambda: _scale_at32(f32(9), i32(0, 9), one), r"indices\[1\] = 9 is outside \[0, n = 9\)"),
    ("scale_at", lambda: _scale_at32(f32(9), np.zeros((2, 1), np.int32), one), r"indices must be a vector, got shape \[2,1\]"),
    ("scale_at", lambda: _scale_at32(f32(9), i32(0), f32(2)), r"factor must be a scalar, got shape \[2\]"),
    ("lowrank_residual", lambda: _lowrank_residual(f32(6), f32(6, 2), f32(1, 2)), r"m must be a matrix \[n, k\] \(rank 2\)"),
    ("lowrank_residual", lambda: _lowrank_residual(f32(2, 3), f32(2, 2, 1), f32(3, 2)), r"p must be a matrix \[n, r\]"),
    ("lowrank_residual", lambda: _lowrank_residual(f32(2, 3), f32(2, 2), f32(3)), r"q must be a matrix \[k, r\]"),
    ("lowrank_residual", lambda: _lowrank_residual(f32(4, 3), f32(5, 2), f32(3, 2)), "p must have one row per row of m"),
    ("lowrank_residual", lambda: _lowrank_residual(f32(4, 3), f32(4, 2), f32(2, 2)), "q must have one row per column of m"),
    ("lowrank_residual", lambda: _lowrank_residual(f32(4, 3), f32(4, 2), f32(3, 1)), "the same number of columns"),
    ("lowrank_product", lambda: _lowrank_product(f32(6), f32(1, 2)), r"p must be a matrix \[n, r\]"),
    ("lowrank_product", lambda: _lowrank_product(f32(2, 2), f32(3, 2, 1)), r"q must be a matrix \[k, r\]"),
    ("lowrank_product", lambda: _lowrank_product(f32(4, 2), f32(3, 1)), "the same number of columns"),
    ("lowrank_compensate", lambda: _lowrank_compensate(f32(6), f32(6), f32(6, 2)), r"g must be a matrix \[n, k\]"),
    ("lowrank_compensate", lambda: _lowrank_compensate(f32(4, 3), f32(3, 4), f32(3, 2)), "e must have g's shape"),
    ("lowrank_compensate", lambda: _lowrank_compensate(f32(4, 3), f32(4, 3), f32(3)), r"q must be a matrix \[k, r\]"),
    ("lowrank_compensate", lambda: _lowrank_compensate(f32(4, 3), f32(4, 3), f32(2, 2)),
     "q must have one row per column of g"),
    ("lowrank_project", lambda: _lowrank_project(f32(6), f32(6, 2)), r"m must be a matrix \[n, k\]"),
    ("lowrank_project", lambda: _lowrank_project(f32(4, 3), f32(4)), r"p must be a matrix \[n, r\]"),
    ("lowrank_project", lambda: _lowrank_project(f32(4, 3), f32(5, 2)), "p must have one row per row of m"),
]


@pytest.mark.parametrize("op, call, message", GRAPH_CASES, ids=case_ids(GRAPH_CASES))
def test_malformed_input_is_refused_by_the_kernel_in_a_graph(op, call, message):
    if message is None:
        call()
        return
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        call()


def spec(*shape, dtype=tf.float32):
    return tf.TensorSpec(shape, dtype)


# Static shapes that shape inference already knows are wrong: refused when the graph is built.
STATIC_CASES = [
    ("sign_unpack", ops.sign_unpack, (spec(2, 3, dtype=tf.uint32), spec(), spec(dtype=tf.int64)), "rank 1"),
    ("sign_unpack", ops.sign_unpack, (spec(3, dtype=tf.uint32), spec(2), spec(dtype=tf.int64)), "rank 0"),
    ("sign_majority", ops.sign_majority, (spec(3, dtype=tf.uint32), spec(dtype=tf.int64)), "rank 2"),
    ("hash_select", lambda g, t, s: ops.hash_select(g, t, s, 4), (spec(4), spec(), spec(3, dtype=tf.int64)),
     "seed must be an int64 vector of 2 elements"),
    ("hash_select", lambda g, t, s: ops.hash_select(g, t, s, 4), (spec(4), spec(), spec(2, 2, dtype=tf.int64)),
     "seed must be an int64 vector of 2 elements"),
    ("hash_select", lambda g, t, s: ops.hash_select(g, t, s, 4), (spec(4), spec(1), spec(2, dtype=tf.int64)),
     "rank 0"),
    ("sampled_threshold", lambda g, s: ops.sampled_threshold(g, s, 2, 1), (spec(4), spec(1, dtype=tf.int64)),
     "seed must be an int64 vector of 2 elements"),
    ("sparse_decode", ops.sparse_decode, (spec(3), spec(2, dtype=tf.int32), spec(dtype=tf.int64)),
     "values and indices must be vectors of one length"),
    ("sparse_decode", ops.sparse_decode, (spec(3, 1), spec(3, dtype=tf.int32), spec(dtype=tf.int64)), "rank 1"),
    ("lowrank_residual", ops.lowrank_residual, (spec(4, 3), spec(5, 2), spec(3, 2)), "p must have one row per row of m"),
    ("lowrank_product", ops.lowrank_product, (spec(4, 2), spec(3, 1)), "the same number of columns"),
    ("lowrank_compensate", ops.lowrank_compensate, (spec(4, 3), spec(4, 2), spec(3, 2)), "e must have g's shape"),
    ("lowrank_compensate", ops.lowrank_compensate, (spec(4, 3), spec(4, 3), spec(2, 2)),
     "q must have one row per column of g"),
    ("lowrank_project", ops.lowrank_project, (spec(4, 3), spec(5, 2)), "p must have one row per row of m"),
]


@pytest.mark.parametrize("op, fn, specs, message", STATIC_CASES, ids=case_ids(STATIC_CASES))
def test_malformed_static_shapes_are_refused_when_traced(op, fn, specs, message):
    with pytest.raises((ValueError, tf.errors.InvalidArgumentError), match=message):
        tf.function(fn).get_concrete_function(*specs)


def test_constant_negative_or_too_large_n():
    with pytest.raises((ValueError, tf.errors.InvalidArgumentError), match="-3"):  # shape inference
        tf.function(lambda w: ops.sign_unpack(w, 1.0, -3)).get_concrete_function(spec(3, dtype=tf.uint32))
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"n = 97 is larger than 32 \* W = 96"):  # the kernel
        tf.function(lambda w: ops.sign_unpack(w, 1.0, 97))(u32(3))


def test_every_op_is_covered():
    """A new op in ops.py needs its properties and malformed inputs here (select_largest's
    and cast_divide's properties are in test_select.py and test_cast.py)."""
    names = {"sign_pack", "sign_ef_pack", "sign_unpack", "sign_majority", "sign_scaled_sum", "sampled_threshold",
             "hash_select", "select_largest", "sparse_decode", "scale_at", "cast_divide", "lowrank_residual",
             "lowrank_product", "lowrank_compensate", "lowrank_project"}
    assert {case[0] for case in EAGER_CASES} == names
    assert {case[0] for case in GRAPH_CASES} == names
    library_ops = {name for name in dir(L()) if name.startswith("tfcomp_") and not name.endswith("_eager_fallback")}
    assert len(library_ops) == len(names), library_ops
