"""The low-rank residual and product ops (PowerSGD / ACP-SGD error feedback and estimate) against NumPy."""
import numpy as np
import pytest
import tensorflow as tf

from tfcomp import ops
from tests.ops import threaded
from tests.ops.gpu import ON_GPU, assert_same_bits_on_cpu_and_gpu
from tests.stacks import NO_KERAS

pytestmark = NO_KERAS

SHAPES = [(1, 1, 1), (7, 5, 2), (256, 256, 4), (4096, 512, 8), (300, 17, 32)]


def problem(n, k, r, dtype, seed=0):
    rng = np.random.default_rng(seed)
    return tuple(rng.standard_normal(shape).astype(dtype) for shape in ((n, k), (n, r), (k, r)))


def reference(m, p, q):
    """m - p q^T in float64, and the bound on a kernel's rounding error: r + 1 roundings in the
    dtype, each of a value at most |m| + sum_j |p q|."""
    m, p, q = (x.astype(np.float64) for x in (m, p, q))
    exact = m - p @ q.T
    magnitude = np.abs(m) + np.abs(p) @ np.abs(q).T
    return exact, magnitude


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=lambda d: d.__name__)
@pytest.mark.parametrize("n, k, r", SHAPES)
def test_matches_numpy(n, k, r, dtype):
    m, p, q = problem(n, k, r, dtype, seed=n + k + r)
    out = ops.lowrank_residual(m, p, q)
    assert out.dtype == tf.as_dtype(dtype) and out.shape == (n, k)
    exact, magnitude = reference(m, p, q)
    eps = np.finfo(dtype).eps
    np.testing.assert_array_less(np.abs(out.numpy() - exact), (r + 1) * eps * magnitude + 1e-300)
    np.testing.assert_allclose(out.numpy(), (m - p @ q.T), rtol=1e-4 if dtype == np.float32 else 1e-12,
                               atol=(r + 1) * eps * 8)


@pytest.mark.parametrize("dtype, rtol", [(tf.float16, 2e-3), (tf.bfloat16, 1.6e-2)], ids=["float16", "bfloat16"])
def test_16_bit_types_compute_in_float(dtype, rtol):
    m, p, q = (tf.cast(x, dtype) for x in problem(70, 130, 5, np.float32, seed=3))
    out = ops.lowrank_residual(m, p, q)
    assert out.dtype == dtype
    m64, p64, q64 = (tf.cast(x, tf.float64).numpy() for x in (m, p, q))
    # In float, then rounded once to the 16-bit type: within half an ulp of the exact value (plus
    # float's rounding).
    exact, magnitude = reference(m64, p64, q64)
    got = tf.cast(out, tf.float64).numpy()
    assert np.all(np.abs(got - exact) <= rtol / 2 * np.abs(exact) + 6 * 2**-24 * magnitude + 2**-24)


def test_rank_zero_is_m():
    m = np.arange(12, dtype=np.float32).reshape(3, 4)
    out = ops.lowrank_residual(m, np.zeros((3, 0), np.float32), np.zeros((4, 0), np.float32))
    np.testing.assert_array_equal(out.numpy(), m)


@pytest.mark.parametrize("n, k", [(0, 5), (5, 0), (0, 0)])
def test_empty(n, k):
    out = ops.lowrank_residual(np.zeros((n, k), np.float32), np.zeros((n, 3), np.float32),
                               np.zeros((k, 3), np.float32))
    assert out.shape == (n, k)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=lambda d: d.__name__)
def test_nan_and_inf_propagate(dtype):
    m, p, q = problem(6, 70, 3, dtype, seed=5)
    m[0, 3] = np.nan
    m[1, 4] = -np.inf
    p[2, 1] = np.nan          # row 2: NaN everywhere
    q[60, 2] = np.inf         # column 60: -Inf (p[i, 2] > 0) or +Inf (< 0) ...
    p[3, 2] = 0.0             # ... and NaN in row 3 (0 * Inf)
    p[:, 2] = np.where(p[:, 2] == 0, 0, np.abs(p[:, 2]))
    out = ops.lowrank_residual(m, p, q).numpy()
    with np.errstate(invalid="ignore"):
        expected = m.astype(np.float64) - p.astype(np.float64) @ q.astype(np.float64).T
    nan = np.isnan(out)
    assert nan[2].all() and nan[0, 3] and nan[3, 60]
    np.testing.assert_array_equal(nan, np.isnan(expected))
    assert out[1, 4] == -np.inf
    assert np.all(out[[0, 1, 4, 5], 60] == -np.inf)
    np.testing.assert_array_equal(np.isinf(out), np.isinf(expected))
    finite = np.isfinite(expected)
    np.testing.assert_allclose(out[finite], expected[finite], rtol=1e-5, atol=1e-5)


def test_same_bits_on_every_call_and_reuse_of_m():
    m, p, q = problem(513, 1000, 16, np.float32, seed=9)
    first = ops.lowrank_residual(m, p, q).numpy()
    np.testing.assert_array_equal(ops.lowrank_residual(m, p, q).numpy(), first)
    # In a graph, a temporary m (nothing else holds it) may be overwritten by the residual.
    forwarded = tf.function(lambda m, p, q: ops.lowrank_residual(m * 1.0, p, q))(m, p, q).numpy()
    np.testing.assert_array_equal(forwarded, first)
    np.testing.assert_array_equal(m, problem(513, 1000, 16, np.float32, seed=9)[0])  # untouched


def test_works_inside_tf_function_with_unknown_shapes():
    spec = tf.TensorSpec([None, None], tf.float32)

    @tf.function(input_signature=[spec, spec, spec])
    def f(m, p, q):
        return ops.lowrank_residual(m, p, q)

    for n, k, r in [(3, 4, 2), (10, 1, 5), (1, 7, 1)]:
        m, p, q = problem(n, k, r, np.float32)
        np.testing.assert_allclose(f(m, p, q).numpy(), m - p @ q.T, rtol=1e-5, atol=1e-5)


def test_static_shape_is_inferred():
    @tf.function
    def f(m, p, q):
        out = ops.lowrank_residual(m, p, q)
        assert out.shape == (4, 3)
        return out

    f(tf.zeros([4, 3]), tf.zeros([4, 2]), tf.zeros([3, 2]))

    @tf.function(input_signature=[tf.TensorSpec([None, 3]), tf.TensorSpec([4, None]),
                                  tf.TensorSpec([None, 2])])
    def g(m, p, q):
        out = ops.lowrank_residual(m, p, q)
        assert out.shape.as_list() == [4, 3]  # n from p, k from m
        return out

    g.get_concrete_function()


def _zeros(*shape):
    return np.zeros(shape, np.float32)


@pytest.mark.parametrize("args, message", [
    ((_zeros(6), _zeros(6, 2), _zeros(1, 2)), r"m must be a matrix \[n, k\] \(rank 2\)"),
    ((_zeros(2, 3, 1), _zeros(2, 2), _zeros(3, 2)), r"m must be a matrix \[n, k\] \(rank 2\)"),
    ((_zeros(2, 3), _zeros(2), _zeros(3, 2)), r"p must be a matrix \[n, r\] \(rank 2\)"),
    ((_zeros(2, 3), _zeros(2, 2), _zeros(3, 2, 1)), r"q must be a matrix \[k, r\] \(rank 2\)"),
    ((_zeros(4, 3), _zeros(5, 2), _zeros(3, 2)), r"p must have one row per row of m: m is \[4,3\] \(n = 4\) but p is \[5,2\]"),
    ((_zeros(4, 3), _zeros(4, 2), _zeros(2, 2)), r"q must have one row per column of m: m is \[4,3\] \(k = 3\) but q is \[2,2\]"),
    ((_zeros(4, 3), _zeros(4, 2), _zeros(3, 1)), r"p and q must have the same number of columns \(the rank r\): p is \[4,2\] but q is \[3,1\]"),
])
def test_bad_shapes_are_invalid_argument(args, message):
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        ops.lowrank_residual(*args)


@pytest.mark.parametrize("shapes, message", [
    (([6], [6, 2], [1, 2]), "m must be a matrix"),
    (([4, 3], [5, 2], [3, 2]), "p must have one row per row of m"),
    (([4, 3], [4, 2], [2, 2]), "q must have one row per column of m"),
    (([4, 3], [4, 2], [3, 1]), "p and q must have the same number of columns"),
])
def test_bad_static_shapes_fail_when_traced(shapes, message):
    f = tf.function(ops.lowrank_residual)
    with pytest.raises((ValueError, tf.errors.InvalidArgumentError), match=message):
        f.get_concrete_function(*(tf.TensorSpec(s, tf.float32) for s in shapes))


def test_wrong_dtypes():
    with pytest.raises(TypeError, match="float16, bfloat16, float32, float64"):
        ops.lowrank_residual(np.zeros((2, 2), np.int32), np.zeros((2, 1), np.int32), np.zeros((2, 1), np.int32))
    with pytest.raises(TypeError, match="one dtype, got float32, float64 and float32"):
        ops.lowrank_residual(_zeros(2, 2), np.zeros((2, 1)), _zeros(2, 1))


def test_no_gradient_is_registered():
    m, p, q = (tf.constant(x) for x in problem(3, 4, 2, np.float32))
    with tf.GradientTape() as tape:
        tape.watch(m)
        out = ops.lowrank_residual(m, p, q)
    assert tape.gradient(out, m) is None


@ON_GPU
@pytest.mark.parametrize("dtype", [tf.float16, tf.bfloat16, tf.float32, tf.float64], ids=lambda d: d.name)
@pytest.mark.parametrize("n, k, r", SHAPES + [(65, 130, 64), (2000, 3, 33)])
def test_gpu_kernel_matches_cpu_bit_for_bit(n, k, r, dtype):
    m, p, q = (tf.cast(x, dtype) for x in problem(n, k, r, np.float32, seed=r))
    assert_same_bits_on_cpu_and_gpu(lambda: ops.lowrank_residual(m, p, q))


# --- lowrank_product: the estimate p q^T --------------------------------------------------

def product_reference(p, q):
    """p q^T in float64, and the bound on a kernel's rounding error: r roundings in the
    dtype, each of a value at most sum_j |p q|."""
    p, q = (x.astype(np.float64) for x in (p, q))
    return p @ q.T, np.abs(p) @ np.abs(q).T


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=lambda d: d.__name__)
@pytest.mark.parametrize("n, k, r", SHAPES + [(1024, 2048, 8)])  # 8 MiB of float: non-temporal stores
def test_product_matches_numpy(n, k, r, dtype):
    _, p, q = problem(n, k, r, dtype, seed=n + k + r)
    out = ops.lowrank_product(p, q)
    assert out.dtype == tf.as_dtype(dtype) and out.shape == (n, k)
    exact, magnitude = product_reference(p, q)
    np.testing.assert_array_less(np.abs(out.numpy() - exact), r * np.finfo(dtype).eps * magnitude + 1e-300)


def test_product_is_the_residual_of_zero_with_p_negated_bit_for_bit():
    """The documented evaluation: +0, then fma(p, q, .) in order, which is the residual's
    fma(-(-p), q, .) from a zero m."""
    _, p, q = problem(300, 17, 32, np.float32, seed=4)
    product = ops.lowrank_product(p, q).numpy()
    residual = ops.lowrank_residual(np.zeros((300, 17), np.float32), -p, q).numpy()
    assert product.tobytes() == residual.tobytes()


@pytest.mark.parametrize("dtype, rtol", [(tf.float16, 2e-3), (tf.bfloat16, 1.6e-2)], ids=["float16", "bfloat16"])
def test_product_16_bit_types_compute_in_float(dtype, rtol):
    _, p, q = (tf.cast(x, dtype) for x in problem(70, 130, 5, np.float32, seed=3))
    out = ops.lowrank_product(p, q)
    assert out.dtype == dtype
    exact, magnitude = product_reference(*(tf.cast(x, tf.float64).numpy() for x in (p, q)))
    got = tf.cast(out, tf.float64).numpy()
    assert np.all(np.abs(got - exact) <= rtol / 2 * np.abs(exact) + 5 * 2**-24 * magnitude + 2**-24)


def test_product_of_rank_zero_is_positive_zero():
    out = ops.lowrank_product(np.zeros((3, 0), np.float32), np.zeros((4, 0), np.float32)).numpy()
    assert out.shape == (3, 4) and np.all(out == 0) and not np.signbit(out).any()


@pytest.mark.parametrize("n, k", [(0, 5), (5, 0), (0, 0)])
def test_product_empty(n, k):
    assert ops.lowrank_product(np.zeros((n, 3), np.float32), np.zeros((k, 3), np.float32)).shape == (n, k)


def test_product_nan_and_inf_propagate():
    _, p, q = problem(6, 70, 3, np.float32, seed=5)
    p[2, 1] = np.nan          # row 2: NaN everywhere
    q[60, 2] = np.inf         # column 60: +-Inf ...
    p[3, 2] = 0.0             # ... and NaN in row 3 (0 * Inf)
    out = ops.lowrank_product(p, q).numpy()
    with np.errstate(invalid="ignore"):
        expected = p.astype(np.float64) @ q.astype(np.float64).T
    np.testing.assert_array_equal(np.isnan(out), np.isnan(expected))
    assert np.isnan(out[2]).all() and np.isnan(out[3, 60])
    np.testing.assert_array_equal(np.isinf(out), np.isinf(expected))
    np.testing.assert_array_equal(np.sign(out[np.isinf(out)]), np.sign(expected[np.isinf(expected)]))


def test_product_inside_tf_function_with_unknown_and_static_shapes():
    spec = tf.TensorSpec([None, None], tf.float32)
    f = tf.function(ops.lowrank_product, input_signature=[spec, spec])
    for n, k, r in [(3, 4, 2), (10, 1, 5), (1, 7, 1)]:
        _, p, q = problem(n, k, r, np.float32)
        np.testing.assert_allclose(f(p, q).numpy(), p @ q.T, rtol=1e-5, atol=1e-5)

    @tf.function(input_signature=[tf.TensorSpec([4, None]), tf.TensorSpec([3, 2])])
    def g(p, q):
        out = ops.lowrank_product(p, q)
        assert out.shape.as_list() == [4, 3]
        return out

    g.get_concrete_function()


@pytest.mark.parametrize("args, message", [
    ((_zeros(6), _zeros(1, 2)), r"p must be a matrix \[n, r\] \(rank 2\)"),
    ((_zeros(2, 2), _zeros(3, 2, 1)), r"q must be a matrix \[k, r\] \(rank 2\)"),
    ((_zeros(4, 2), _zeros(3, 1)), r"p and q must have the same number of columns \(the rank r\): p is \[4,2\] but q is \[3,1\]"),
])
def test_product_bad_shapes_are_invalid_argument(args, message):
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        ops.lowrank_product(*args)
    with pytest.raises((ValueError, tf.errors.InvalidArgumentError), match=message.split(r" \(")[0]):
        tf.function(ops.lowrank_product).get_concrete_function(*(tf.TensorSpec(a.shape, tf.float32) for a in args))


def test_product_wrong_dtypes_and_no_gradient():
    with pytest.raises(TypeError, match="float16, bfloat16, float32, float64"):
        ops.lowrank_product(np.zeros((2, 1), np.int32), np.zeros((2, 1), np.int32))
    with pytest.raises(TypeError, match="one dtype, got float32 and float64"):
        ops.lowrank_product(_zeros(2, 1), np.zeros((2, 1)))
    _, p, q = (tf.constant(x) for x in problem(3, 4, 2, np.float32))
    with tf.GradientTape() as tape:
        tape.watch(p)
        out = ops.lowrank_product(p, q)
    assert tape.gradient(out, p) is None


_PRODUCT_WITH_THREADS = """
import hashlib, sys
import numpy as np
from tfcomp import ops
from tests.ops import threaded
rng = np.random.default_rng(8)
for dtype, (n, k, r) in [(np.float32, (1029, 2048, 8)), (np.float64, (513, 77, 5)), (np.float16, (300, 400, 3))]:
    p, q = rng.standard_normal((n, r)).astype(dtype), rng.standard_normal((k, r)).astype(dtype)
    print(hashlib.sha256(ops.lowrank_product(p, q).numpy().tobytes()).hexdigest())
"""


def test_product_same_bits_on_any_thread_count(tmp_path):
    assert len({threaded.run(tmp_path, _PRODUCT_WITH_THREADS, threads) for threads in (1, 2, 3)}) == 1


@ON_GPU
@pytest.mark.parametrize("dtype", [tf.float16, tf.bfloat16, tf.float32, tf.float64], ids=lambda d: d.name)
@pytest.mark.parametrize("n, k, r", SHAPES + [(65, 130, 64), (2000, 3, 33)])
def test_product_gpu_kernel_matches_cpu_bit_for_bit(n, k, r, dtype):
    _, p, q = (tf.cast(x, dtype) for x in problem(n, k, r, np.float32, seed=r))
    assert_same_bits_on_cpu_and_gpu(lambda: ops.lowrank_product(p, q))
