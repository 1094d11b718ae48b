"""cast_divide against a NumPy reference and against TensorFlow's tf.cast then divide.

The op runs on the CPU, where TensorFlow reads and divides with subnormals flushed to
zero (FTZ/DAZ): the reference applies the same flush to what the kernel reads and to
the division (float16 subnormals are normal floats and stay).
"""

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given
from hypothesis import strategies as st

from tests.ops.test_properties import acc_dtype, arrays, as_read, assert_equal_or_both_nan, specials, to_dtype
from tfcomp import ops
from tests.ops import threaded
from tests.stacks import NO_KERAS

pytestmark = NO_KERAS

DTYPES = [tf.float16, tf.bfloat16, tf.float32, tf.float64]
PAIRS = [(s, d) for s in DTYPES for d in DTYPES]
DIVISORS = [1, 2, 3, 7, 0.5, -2.0, 0.0, float("inf"), float("nan")]
SIZES = [0, 1, 7, 8, 9, 15, 16, 17, 33, 1000, 4097, (1 << 20) + 3]


def pair_id(pair):
    return f"{pair[0].name}->{pair[1].name}"


def flush(values):
    """Subnormals of values' own (accumulator) dtype to +-0, as TensorFlow's CPU threads."""
    with np.errstate(invalid="ignore"):
        tiny = np.finfo(values.dtype).tiny
        return np.where(np.abs(values) < tiny, np.copysign(np.zeros_like(values), values), values)


def reference(x, dtype, divisor):
    """tf.cast(x, dtype) / divisor as the kernel computes it on the CPU: x as read
    (flushed), rounded to dtype (a float64 to a 16-bit dtype through float32), widened to
    the accumulator type and divided there (operands and quotient flushed), rounded to dtype."""
    dtype = tf.as_dtype(dtype)
    out_type, acc = dtype.as_numpy_dtype, acc_dtype(dtype)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        read = as_read(np.asarray(x)) if np.asarray(x).size else np.asarray(x)
        if read.dtype == np.float64 and dtype.size == 2:
            read = read.astype(np.float32)
        widened = flush(read.astype(out_type).astype(acc))
        d = flush(np.asarray(divisor, np.float64).astype(np.float32 if dtype.size == 2 else np.float64)
                  .astype(out_type).astype(acc))
        return flush(widened / d).astype(out_type)


def random_values(rng, n, dtype):
    """Normal noise over a wide range of scales, with every special value of dtype spread in."""
    x = rng.standard_normal(n) * 2.0 ** rng.integers(-40, 40, n)
    for i, v in enumerate(specials(dtype) + [65504.0, 65519.0, 65520.0, -70000.0, 3e-8, 1e-40, 3.4e38]):
        if i * 37 < n:
            x[i * 37] = v
    return to_dtype(x, dtype)


@pytest.mark.parametrize("pair", PAIRS, ids=pair_id)
@pytest.mark.parametrize("n", SIZES)
def test_matches_numpy_and_tensorflow(pair, n):
    src, dst = pair
    x = random_values(np.random.default_rng(n), n, src)
    for divisor in DIVISORS:
        got = ops.cast_divide(x, dst, divisor)
        assert got.dtype == dst and got.shape == x.shape
        what = f"{pair_id(pair)} n={n} / {divisor}"
        assert_equal_or_both_nan(got.numpy(), reference(x, dst, divisor), what)
        assert_equal_or_both_nan(got.numpy(), (tf.cast(x, dst) / tf.cast(divisor, dst)).numpy(), what + " (TF)")


@pytest.mark.parametrize("pair", PAIRS, ids=pair_id)
def test_divisor_one_is_tf_cast(pair):
    """With divisor 1: tf.cast where float16 is either side (FP16's encode and the sum's
    decode); elsewhere tf.cast with the subnormals the CPU's division flushes."""
    src, dst = pair
    x = random_values(np.random.default_rng(5), 4099, src)
    expected = tf.cast(x, dst).numpy()
    if tf.float16 not in pair:
        expected = flush(expected.astype(acc_dtype(dst))).astype(dst.as_numpy_dtype)
    assert_equal_or_both_nan(ops.cast_divide(x, dst).numpy(), expected, pair_id(pair))


def test_rounding_edges():
    """Round to nearest even, overflow to Inf, half subnormals produced and read, NaN kept."""
    x = np.array([65504.0, 65519.99, 65520.0, -1e6, 2.0 ** -25, 2.0 ** -25 * 1.0001, 2.0 ** -24 * 1.5,
                  np.nan, -np.inf, -0.0], np.float32)
    got = ops.cast_divide(x, tf.float16).numpy()
    assert got.view(np.uint16).tolist()[:7] == [0x7bff, 0x7bff, 0x7c00, 0xfc00, 0x0000, 0x0001, 0x0002]
    assert np.isnan(got[7]) and got[8] == -np.inf and got.view(np.uint16)[9] == 0x8000
    # float16 subnormals are read as they are and divided in float32.
    halves = np.array([2 ** -24, 3 * 2 ** -24, 2 ** -14], np.float16)
    np.testing.assert_array_equal(ops.cast_divide(halves, tf.float32, 2).numpy(),
                                  np.array([2 ** -25, 1.5 * 2 ** -24, 2 ** -15], np.float32))
    assert ops.cast_divide(halves, tf.float16, 2).numpy().view(np.uint16).tolist() == [0x0000, 0x0002, 0x0200]
    # A float64 reaches float16 through float32, as tf.cast takes it.
    double_rounded = np.float64(1 + 2 ** -11 - 2 ** -40)  # float32 rounds it to the midpoint 1 + 2^-11
    assert ops.cast_divide([double_rounded], tf.float16).numpy().view(np.uint16)[0] == 0x3c00


def test_shapes_and_dtypes():
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    out = ops.cast_divide(x, tf.float16, 4)
    assert out.shape == (2, 3, 4) and out.dtype == tf.float16
    np.testing.assert_array_equal(out.numpy(), (x / 4).astype(np.float16))
    assert ops.cast_divide(np.float32(3), tf.float64, 2).numpy() == 1.5  # a scalar
    assert ops.cast_divide(np.zeros((2, 0, 3), np.float16), tf.float32).shape == (2, 0, 3)
    with pytest.raises(TypeError):
        ops.cast_divide(np.arange(3), tf.float32)
    with pytest.raises(TypeError):
        ops.cast_divide(np.zeros(3, np.float32), tf.int32)
    with pytest.raises((ValueError, tf.errors.InvalidArgumentError)):
        ops.library().tfcomp_cast_divide(tf.zeros(3), tf.ones(2))

    @tf.function(input_signature=[tf.TensorSpec(None, tf.float32), tf.TensorSpec(None, tf.float16)])
    def unknown_shapes(x, d):
        return ops.library().tfcomp_cast_divide(x, d)

    with pytest.raises(tf.errors.InvalidArgumentError, match="divisor must be a scalar"):
        unknown_shapes(tf.zeros(3), tf.ones(2, tf.float16))
    assert unknown_shapes(tf.ones(3), tf.constant(2, tf.float16)).numpy().tolist() == [0.5] * 3


def test_in_place_when_tensorflow_forwards():
    """Where x has the output dtype the op may reuse x's buffer: the result is the same."""
    x = random_values(np.random.default_rng(9), 10007, tf.float32)

    @tf.function
    def mean(a):
        return ops.cast_divide(a * 1.0, tf.float32, 3)  # a fresh tensor, forwardable

    assert_equal_or_both_nan(mean(x).numpy(), reference(x, tf.float32, 3))


@pytest.mark.parametrize("dst", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("src", [tf.float16, tf.float64], ids=lambda d: d.name)
def test_every_special_number_divisor_as_the_reference_takes_it(src, dst):
    """A divisor given as a number is dst's value of it, also past float32's range (the
    float64 extremes were once taken as float32 first: 1e-308 became 0, 1e308 an error),
    and -0.0 after 0.0 (TensorFlow's cache of Python scalars once gave 0.0 for it)."""
    x = random_values(np.random.default_rng(3), 101, src)
    for divisor in specials(dst):
        assert_equal_or_both_nan(ops.cast_divide(x, dst, divisor).numpy(), reference(x, dst, divisor),
                                 f"{src.name}->{dst.name} / {divisor}")


@given(st.data())
def test_property(data):
    src = data.draw(st.sampled_from(DTYPES), "src")
    dst = data.draw(st.sampled_from(DTYPES), "dst")
    x = data.draw(arrays(src), "x")
    divisor = data.draw(st.one_of(st.integers(1, 64), st.sampled_from(specials(dst))), "divisor")
    got = ops.cast_divide(x, dst, divisor).numpy()
    assert_equal_or_both_nan(got, reference(x, dst, divisor), f"{src.name}->{dst.name} / {divisor}")
    # The divisor as a float64 array, as cast_divide takes a number (not TensorFlow's float32, cached scalar).
    divisor_dst = tf.cast(tf.constant(np.asarray(divisor, np.float64)), dst)
    assert_equal_or_both_nan(got, (tf.cast(x, dst) / divisor_dst).numpy(), "TF")


# Runs cast_divide on each case of an .npz file with a given number of intra-op threads
# (fixed once per process, hence a subprocess) and saves the outputs. Arrays travel as
# their bits (np.savez does not hold bfloat16).
_CAST_WITH_THREADS = """
import sys
import numpy as np
import tensorflow as tf
from tfcomp import ops
cases = np.load(sys.argv[2])
out = {}
for c in range(int(cases["count"])):
    x = cases[f"bits{c}"].view(tf.as_dtype(str(cases[f"src{c}"])).as_numpy_dtype)
    y = ops.cast_divide(x, str(cases[f"dst{c}"]), float(cases[f"divisor{c}"])).numpy()
    out[f"out{c}"] = y.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[y.itemsize])
np.savez(sys.argv[3], **out)
"""


def bits(a):
    return a.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[a.itemsize])


def test_same_bits_on_any_thread_count(tmp_path):
    """Elementwise, so any split over threads gives the reference's bits."""
    cases = [(tf.float32, tf.float16, 1), (tf.float16, tf.float32, 2), (tf.float16, tf.float16, 3),
             (tf.float32, tf.float32, 2), (tf.float64, tf.bfloat16, 7), (tf.bfloat16, tf.float64, 3)]
    data, xs = {"count": len(cases)}, []
    for c, (src, dst, divisor) in enumerate(cases):
        xs.append(random_values(np.random.default_rng(c), (1 << 21) + 5, src))
        data.update({f"bits{c}": bits(xs[-1]), f"src{c}": src.name, f"dst{c}": dst.name, f"divisor{c}": divisor})
    np.savez(tmp_path / "cases.npz", **data)
    for threads in (1, 2, 3):
        out = tmp_path / f"out{threads}.npz"
        threaded.run(tmp_path, _CAST_WITH_THREADS, threads, tmp_path / "cases.npz", out)
        got = np.load(out)
        for c, (src, dst, divisor) in enumerate(cases):
            actual = got[f"out{c}"].view(dst.as_numpy_dtype)
            assert_equal_or_both_nan(actual, reference(xs[c], dst, divisor), f"{threads} thread(s), case {c}")
