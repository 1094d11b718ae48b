"""The sign-packing ops against NumPy references (tfcomp.ops documents the conventions)."""
import numpy as np
import pytest
import tensorflow as tf

from tfcomp import ops
from tests.ops import threaded
from tests.ops.gpu import ON_GPU
from tests.stacks import NO_KERAS

pytestmark = NO_KERAS

DTYPES = [tf.float16, tf.bfloat16, tf.float32, tf.float64]
SHAPES = [(0,), (1,), (31,), (32,), (33,), (63,), (64,), (65,), (1000,), (4096,), (4097,),
          (2, 0, 3), (3, 5, 7), (64, 33, 3), (8, 8, 8, 8), (1 << 20,), ((1 << 20) + 3,)]
SCALE_RTOL = {tf.float16: 2e-3, tf.bfloat16: 2e-2, tf.float32: 1e-5, tf.float64: 1e-12}


def np_dtype(dtype):
    return dtype.as_numpy_dtype


def accumulate(values):
    """Values as the kernels accumulate them: float64 for float64, else float32."""
    return values.astype(np.float64 if values.dtype == np.float64 else np.float32)


def pack_bits(bits):
    """bool[n] -> uint32[ceil(n/32)], element i at bit i % 32 of word i // 32."""
    n = bits.size
    padded = np.zeros(-(-n // 32) * 32, dtype=np.uint64)
    padded[:n] = bits
    weights = np.left_shift(np.uint64(1), np.arange(32, dtype=np.uint64))
    return (padded.reshape(-1, 32) * weights).sum(axis=1).astype(np.uint32)


def unpack_bits(words, n):
    return ((words[:, None] >> np.arange(32, dtype=np.uint32)) & 1).reshape(-1)[:n].astype(bool)


def reference_pack(x):
    values = accumulate(x.reshape(-1))
    with np.errstate(invalid="ignore"):
        bits = values >= 0  # NaN compares false: packs as negative
    scale = np.abs(values.astype(np.float64)).sum() / values.size if values.size else 0.0
    return pack_bits(bits), scale


def reference_majority(words, n):
    positives = np.stack([unpack_bits(row, n) for row in words]).sum(axis=0)
    return np.sign(2 * positives.astype(np.int64) - words.shape[0])


def random_values(rng, shape, dtype, special=True):
    x = rng.standard_normal(shape).astype(np.float32)
    flat = x.reshape(-1)
    if special and flat.size:
        specials = [0.0, -0.0, np.nan, np.inf, -np.inf, 1e-30, -1e-30, -1e-45, 1e-45, -1e-40]
        positions = rng.choice(flat.size, size=min(flat.size, 3 * len(specials)), replace=False)
        for i, p in enumerate(positions):
            flat[p] = specials[i % len(specials)]
    return x.astype(np_dtype(dtype))


def assert_scale(actual, expected, dtype):
    actual = float(np.asarray(actual, dtype=np.float64))
    expected = float(np.asarray(np.asarray(expected).astype(np_dtype(dtype)), dtype=np.float64))
    np.testing.assert_allclose(actual, expected, rtol=SCALE_RTOL[dtype], equal_nan=True)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("special", [False, True], ids=["finite", "nan_inf_zero"])
def test_pack_matches_numpy(shape, dtype, special):
    x = random_values(np.random.default_rng(len(shape) * 1000 + sum(shape)), shape, dtype, special)
    words, scale = ops.sign_pack(x)
    expected_words, expected_scale = reference_pack(x)
    assert words.dtype == tf.uint32 and words.shape == (-(-x.size // 32),)
    assert scale.dtype == dtype and scale.shape == ()
    np.testing.assert_array_equal(words.numpy(), expected_words)
    assert_scale(scale.numpy(), expected_scale, dtype)
    if special and x.size >= 3:
        assert np.isnan(scale.numpy()), "NaN in x must show in the scale"


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_pack_conventions_for_zero_nan_inf(dtype):
    x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 1.0, -1.0], np_dtype(dtype))
    words, scale = ops.sign_pack(x)
    assert words.numpy().tolist() == [0b01000111]
    assert np.isnan(scale.numpy())
    _, finite_scale = ops.sign_pack(np.array([1.0, -3.0, 0.0, np.inf], np_dtype(dtype)))
    assert np.isinf(finite_scale.numpy())


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_negative_subnormals_pack_as_negative(dtype):
    tiny = np.finfo(np_dtype(dtype)).smallest_subnormal if dtype != tf.bfloat16 else np.float32(1e-40)
    x = np.array([-tiny, tiny, -3 * tiny, 0.0], np.float64).astype(np_dtype(dtype))
    assert (x[[0, 2]] != 0).all(), "the test values must be nonzero subnormals"
    words, _ = ops.sign_pack(x)
    assert words.numpy().tolist() == [0b1010]


def test_pack_empty_has_zero_scale():
    words, scale = ops.sign_pack(tf.zeros([0, 7]))
    assert words.shape == (0,) and scale.numpy() == 0.0


def test_pack_bytes_and_ratio():
    for d in (32, 320, 33, 1):
        words, _ = ops.sign_pack(tf.ones([d]))
        assert words.numpy().nbytes == 4 * -(-d // 32) >= -(-d // 8)
        if d % 32 == 0:
            assert tf.ones([d]).numpy().nbytes / words.numpy().nbytes == 32


def test_pack_large_tensor_is_deterministic():
    x = np.random.default_rng(7).standard_normal((1 << 22) + 5).astype(np.float32)
    first = ops.sign_pack(x)
    second = ops.sign_pack(x)
    np.testing.assert_array_equal(first[0].numpy(), second[0].numpy())
    assert first[1].numpy() == second[1].numpy()
    expected_words, expected_scale = reference_pack(x)
    np.testing.assert_array_equal(first[0].numpy(), expected_words)
    np.testing.assert_allclose(first[1].numpy(), expected_scale, rtol=1e-5)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("n", [0, 1, 31, 32, 33, 100, 1000, 4097])
def test_unpack_matches_numpy(n, dtype):
    rng = np.random.default_rng(n)
    extra = 1 if n % 3 == 0 else 0  # n may be smaller than 32 * W
    words = rng.integers(0, 2**32, size=-(-n // 32) + extra, dtype=np.uint64).astype(np.uint32)
    scale = np.asarray(0.75, np_dtype(dtype))
    out = ops.sign_unpack(words, scale, n)
    assert out.dtype == dtype and out.shape == (n,)
    expected = np.where(unpack_bits(words, n), scale, -scale).astype(np_dtype(dtype))
    np.testing.assert_array_equal(out.numpy(), expected)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("shape", [(0,), (1,), (33,), (3, 5, 7), (4097,)], ids=str)
def test_roundtrip_is_sign_times_scale(shape, dtype):
    x = random_values(np.random.default_rng(3), shape, dtype, special=False)
    words, scale = ops.sign_pack(x)
    out = ops.sign_unpack(words, scale, x.size).numpy()
    signs = np.where(accumulate(x.reshape(-1)) >= 0, 1.0, -1.0)
    np.testing.assert_array_equal(out, (signs * scale.numpy()).astype(np_dtype(dtype)))


# k past 8 on rows 4 KiB apart (n = 32768) and the AVX2 byte counters' limit (127)
@pytest.mark.parametrize("k", [1, 2, 3, 4, 5, 8, 16, 17, 127, 128])
@pytest.mark.parametrize("n", [0, 1, 31, 32, 33, 1000, 4097, 32768])
def test_majority_matches_numpy(k, n):
    rng = np.random.default_rng(k * 10000 + n)
    words = rng.integers(0, 2**32, size=(k, -(-n // 32)), dtype=np.uint64).astype(np.uint32)
    out = ops.sign_majority(words, n)
    assert out.dtype == tf.float32 and out.shape == (n,)
    np.testing.assert_array_equal(out.numpy(), reference_majority(words, n))


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_majority_is_sign_of_summed_signs(dtype):
    rng = np.random.default_rng(11)
    grads = rng.standard_normal((4, 77)).astype(np.float32)
    grads[:2, :10] = 1.0
    grads[2:, :10] = -1.0  # ties on the first ten elements
    words = tf.stack([ops.sign_pack(g)[0] for g in grads])
    out = ops.sign_majority(words, 77, dtype=dtype)
    assert out.dtype == dtype
    np.testing.assert_array_equal(out.numpy().astype(np.float32), np.sign(np.sign(grads).sum(axis=0)))
    assert not out.numpy()[:10].any(), "a tie votes 0"


def test_ops_work_inside_tf_function_with_unknown_shapes():
    @tf.function(input_signature=[tf.TensorSpec(None, tf.float32)])
    def roundtrip(x):
        words, scale = ops.sign_pack(x)
        return ops.sign_unpack(words, scale, tf.size(x, out_type=tf.int64)), ops.sign_majority(
            tf.stack([words, words, words]), tf.size(x, out_type=tf.int64))

    for n in (0, 5, 70):
        x = np.linspace(-1, 1, n).astype(np.float32)
        unpacked, voted = roundtrip(x)
        assert unpacked.shape == (n,) and voted.shape == (n,)
        np.testing.assert_array_equal(voted.numpy(), np.where(x >= 0, 1.0, -1.0))


def test_static_shapes_are_inferred():
    @tf.function
    def f(x):
        words, scale = ops.sign_pack(x)
        assert words.shape == (4,) and scale.shape == ()
        assert ops.sign_unpack(words, scale, 100).shape == (100,)
        assert ops.sign_majority(tf.stack([words, words]), 100).shape == (100,)
        return words

    f(tf.zeros([10, 10]))


@pytest.mark.parametrize("call, message", [
    (lambda: ops.sign_unpack(np.zeros(3, np.uint32), 1.0, 97), "larger than 32 \\* W = 96"),
    (lambda: ops.sign_unpack(np.zeros(3, np.uint32), 1.0, -1), "n must be >= 0"),
    (lambda: ops.sign_unpack(np.zeros((2, 3), np.uint32), 1.0, 10), "words must be a vector"),
    (lambda: ops.sign_unpack(np.zeros(3, np.uint32), np.ones(2, np.float32), 10), "scale must be a scalar"),
    (lambda: ops.sign_majority(np.zeros(3, np.uint32), 10), "words must be a matrix"),
    (lambda: ops.sign_majority(np.zeros((0, 3), np.uint32), 10), "at least one worker"),
    (lambda: ops.sign_majority(np.zeros((2, 3), np.uint32), 97), "larger than 32 \\* W = 96"),
    (lambda: ops.library().tfcomp_sign_pack(tf.constant([1, 2]), True), "attr 'T' of int32 is not in the list"),
    (lambda: ops.sign_pack(np.zeros(3, np.float32), [True, False]), "zero_bit must be a scalar bool"),
    (lambda: ops.sign_ef_pack(np.zeros(3, np.float32), np.zeros(4, np.float32)), "grad and residual must have the same shape"),
    (lambda: ops.sign_scaled_sum(np.zeros((2, 3), np.uint32), np.ones(2, np.float32), 97), "larger than 32 \\* W = 96"),
    (lambda: ops.sign_scaled_sum(np.zeros(3, np.uint32), np.ones(1, np.float32), 10), "words must be a matrix"),
    (lambda: ops.sign_scaled_sum(np.zeros((0, 3), np.uint32), np.ones(0, np.float32), 10), "at least one worker"),
    (lambda: ops.sign_scaled_sum(np.zeros((2, 3), np.uint32), np.ones(3, np.float32), 10),
     "scales must be a vector of one scale per worker"),
    (lambda: ops.library().tfcomp_sign_unpack(tf.constant([1], tf.int32), 1.0, tf.constant(3, tf.int64)),
     "uint32"),
])
def test_bad_input_is_invalid_argument(call, message):
    with pytest.raises((tf.errors.InvalidArgumentError, ValueError, TypeError), match=message):
        call()


@pytest.mark.parametrize("call", [
    lambda: ops.sign_pack(tf.constant([1, 2])),
    lambda: ops.sign_ef_pack(tf.constant([1, 2]), tf.constant([1, 2])),
    lambda: ops.sign_scaled_sum(np.zeros((1, 1), np.uint32), np.ones(1, np.int32), 3),
    lambda: ops.sign_unpack(np.zeros(1, np.uint32), np.int32(1), 3),
    lambda: ops.sign_majority(np.zeros((1, 1), np.uint32), 3, dtype=tf.int32),
])
def test_wrong_dtype_names_the_allowed_ones(call):
    with pytest.raises(TypeError, match="float16, bfloat16, float32, float64"):
        call()


# --- zero_bit, sign_ef_pack, sign_scaled_sum ------------------------------------------------

def reference_ef_pack(g, e, zero_bit):
    """(words, scale, p) of p = g + e rounded to the dtype, as the kernels compute it
    (the add in the accumulator type; inputs chosen without subnormals, which the CPU
    flushes)."""
    p = (accumulate(g.reshape(-1)) + accumulate(e.reshape(-1))).astype(g.dtype)
    wide = accumulate(p)
    with np.errstate(invalid="ignore"):
        bits = np.where(wide == 0, zero_bit, wide > 0)
    scale = np.abs(wide.astype(np.float64)).sum() / wide.size if wide.size else 0.0
    return pack_bits(bits), scale, p


def reference_residual(p, words, scale):
    """p - (bit ? scale : -scale) in the accumulator type, rounded to p's dtype."""
    wide, s = accumulate(p), accumulate(np.asarray(scale).reshape(1))[0]
    return (wide - np.where(unpack_bits(words, p.size), s, -s).astype(wide.dtype)).astype(p.dtype)


def reference_scaled_sum(words, scales, n, weight):
    acc = np.float64 if scales.dtype == np.float64 else np.float32
    total = np.zeros(n, acc)
    for row, s in zip(words, scales.astype(acc)):
        total = (total + np.where(unpack_bits(row, n), s, -s).astype(acc)).astype(acc)
    return (total * acc(np.asarray(weight, scales.dtype))).astype(scales.dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("zero_bit", [True, False])
def test_zero_bit_is_what_zeros_pack_as(dtype, zero_bit):
    x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 0.0], np_dtype(dtype))
    words, scale = ops.sign_pack(x, zero_bit)
    assert words.numpy().tolist() == [0b00100100 | (0b10000011 if zero_bit else 0)]
    # Zeros add nothing to the scale; a tensor zero_bit works as a Python bool does.
    _, zeros_scale = ops.sign_pack(np.zeros(40, np_dtype(dtype)), tf.constant(zero_bit))
    assert zeros_scale.numpy() == 0
    words, _ = ops.sign_pack(np.zeros(40, np_dtype(dtype)), tf.constant(zero_bit))
    assert words.numpy().tolist() == ([2**32 - 1, 0xff] if zero_bit else [0, 0])


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("shape", [(0,), (1,), (31,), (33,), (3, 5, 7), (4097,), (8200,), ((1 << 20) + 3,)], ids=str)
@pytest.mark.parametrize("zero_bit", [True, False])
def test_ef_pack_matches_numpy(shape, dtype, zero_bit):
    rng = np.random.default_rng(sum(shape) + 7)
    g = random_values(rng, shape, dtype, special=False)
    e = random_values(rng, shape, dtype, special=False)
    flat_g, flat_e = g.reshape(-1), e.reshape(-1)
    flat_g[::5], flat_e[::5] = 0, 0  # exact zeros of p
    flat_e[1::7] = -flat_g[1::7]  # cancellations: zeros of p from nonzero g and e
    words, scale, residual = ops.sign_ef_pack(g, e, zero_bit)
    expected_words, expected_scale, p = reference_ef_pack(g, e, zero_bit)
    assert words.dtype == tf.uint32 and scale.dtype == dtype and residual.dtype == dtype
    assert residual.shape == shape
    np.testing.assert_array_equal(words.numpy(), expected_words)
    assert_scale(scale.numpy(), expected_scale, dtype)
    assert residual.numpy().tobytes() == reference_residual(p, words.numpy(), scale.numpy()).reshape(shape).tobytes()
    # The scale is sign_pack's of g + e, bit for bit; so are the words.
    packed_words, packed_scale = ops.sign_pack(p, zero_bit)
    np.testing.assert_array_equal(words.numpy(), packed_words.numpy())
    assert scale.numpy().tobytes() == packed_scale.numpy().tobytes()


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_ef_pack_nan_inf(dtype):
    g = np.array([np.nan, np.inf, -np.inf, 1.0, -1.0, 0.0], np_dtype(dtype))
    e = np.array([1.0, 1.0, 1.0, 2.0, np.inf, 0.0], np_dtype(dtype))
    words, scale, residual = ops.sign_ef_pack(g, e, False)
    assert words.numpy().tolist() == [0b011010]
    assert np.isnan(scale.numpy()) and np.isnan(residual.numpy()).all()
    _, scale, _ = ops.sign_ef_pack(g[1:], e[1:])
    assert np.isinf(scale.numpy())


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("k", [1, 2, 3, 8, 16, 130])
@pytest.mark.parametrize("n", [0, 1, 31, 33, 1000, 4097, 32768])
def test_scaled_sum_matches_numpy(n, k, dtype):
    rng = np.random.default_rng(k * 1000 + n)
    words = rng.integers(0, 2**32, size=(k, -(-n // 32) + (n % 2)), dtype=np.uint64).astype(np.uint32)
    scales = rng.random(k).astype(np_dtype(dtype))
    for weight in (1.0, 1.0 / k):
        out = ops.sign_scaled_sum(words, scales, n, weight)
        assert out.dtype == dtype and out.shape == (n,)
        assert out.numpy().tobytes() == reference_scaled_sum(words, scales, n, weight).tobytes()


def test_scaled_sum_is_the_mean_of_the_unpacked_workers():
    rng = np.random.default_rng(5)
    grads = rng.standard_normal((3, 200)).astype(np.float32)
    packed = [ops.sign_pack(g) for g in grads]
    words = tf.stack([w for w, _ in packed])
    scales = tf.stack([s for _, s in packed])
    unpacked = np.stack([ops.sign_unpack(w, s, 200).numpy() for w, s in packed])
    np.testing.assert_allclose(ops.sign_scaled_sum(words, scales, 200, 1 / 3).numpy(), unpacked.mean(axis=0),
                               rtol=1e-6)
    np.testing.assert_allclose(ops.sign_scaled_sum(words, scales, 200).numpy(), unpacked.sum(axis=0), rtol=1e-6)


def test_fused_ops_are_deterministic_across_thread_counts(tmp_path):
    """Fixed blocks and worker order: the same bits for 1 and several intra-op threads."""
    script = """
import hashlib, numpy as np, tensorflow as tf
from tfcomp import ops
rng = np.random.default_rng(3)
g, e = (rng.standard_normal((1 << 20) + 77).astype(np.float32) for _ in range(2))
words, scale, residual = ops.sign_ef_pack(g, e, False)
all_words = tf.stack([words, ops.sign_pack(g)[0], ops.sign_pack(e, False)[0]])
out = ops.sign_scaled_sum(all_words, tf.stack([scale, scale * 2, scale / 3]), g.size, 1 / 3)
votes = ops.sign_majority(all_words, g.size)
print(hashlib.sha256(b"".join(t.numpy().tobytes() for t in (words, scale, residual, out, votes))).hexdigest())
"""
    digests = {threaded.run(tmp_path, script, threads).strip().splitlines()[-1] for threads in (1, 2, 4)}
    assert len(digests) == 1, digests


@ON_GPU
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("n", [0, 1, 33, 4097, (1 << 20) + 3])
def test_gpu_kernels_match_cpu(n, dtype):
    x = random_values(np.random.default_rng(n), (n,), dtype)
    rows = np.random.default_rng(1).integers(0, 2**32, (3, -(-n // 32) + 1), dtype=np.uint64)
    rows = tf.constant(rows.astype(np.uint32))
    outputs = []
    for device in ("/CPU:0", "/GPU:0"):
        with tf.device(device):
            words, scale = ops.sign_pack(x)
            unpacked = ops.sign_unpack(words, tf.constant(1.5, dtype), n)
            outputs.append((words, scale, unpacked, ops.sign_majority(rows, n, dtype=dtype)))
    (cw, cs, cu, cm), (gw, gs, gu, gm) = [[t.numpy() for t in out] for out in outputs]
    np.testing.assert_array_equal(gw, cw)
    assert_scale(gs, cs, dtype)  # equal up to summation order
    assert gu.tobytes() == cu.tobytes() and gm.tobytes() == cm.tobytes()


@ON_GPU
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("n", [0, 1, 33, 4097, (1 << 20) + 3])
def test_gpu_fused_kernels_match_cpu(n, dtype):
    rng = np.random.default_rng(n)
    g, e = random_values(rng, (n,), dtype, special=False), random_values(rng, (n,), dtype, special=False)
    g[::5], e[::5] = 0, 0
    rows = rng.integers(0, 2**32, (3, -(-n // 32) + 1), dtype=np.uint64).astype(np.uint32)
    scales = rng.random(3).astype(np_dtype(dtype))
    outputs = []
    for device in ("/CPU:0", "/GPU:0"):
        with tf.device(device):
            words, scale, residual = ops.sign_ef_pack(g, e, False)
            zero_words, _ = ops.sign_pack(g, False)
            outputs.append((words, scale, residual, zero_words, ops.sign_scaled_sum(rows, scales, n, 1 / 3)))
    (cw, cs, cr, cz, co), (gw, gs, gr, gz, go) = [[t.numpy() for t in out] for out in outputs]
    np.testing.assert_array_equal(gw, cw)
    np.testing.assert_array_equal(gz, cz)
    assert_scale(gs, cs, dtype)
    # The residual uses each device's own scale.
    assert gr.tobytes() == reference_residual(
        reference_ef_pack(g, e, False)[2], gw, gs).tobytes()
    assert go.tobytes() == co.tobytes()
