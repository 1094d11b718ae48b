"""The low-rank factor ops against NumPy: lowrank_compensate (M = G + E and P = M Q in one pass) and
lowrank_project (Q = M^T P in one pass), PowerSGD's and ACP-SGD's encode."""
import numpy as np
import pytest
import tensorflow as tf

from tfcomp import ops
from tests.ops import threaded
from tests.ops.gpu import ON_GPU, assert_same_bits_on_cpu_and_gpu
from tests.stacks import NO_KERAS

pytestmark = NO_KERAS

# Columns around the 16 lanes, ranks around the CPU loops' blocks (4 rows, 2 to 6 ranks).
SHAPES = [(1, 1, 1), (7, 5, 2), (9, 16, 4), (5, 17, 6), (256, 256, 4), (4096, 512, 8), (300, 33, 13),
          (3, 130, 32)]


def problem(n, k, r, dtype, seed=0):
    rng = np.random.default_rng(seed)
    return tuple(rng.standard_normal(shape).astype(dtype) for shape in ((n, k), (n, k), (k, r)))


def product_bound(m, q, dtype):
    """m q in float64 and the bound on the kernel's rounding: ceil(k / 16) fused steps per lane
    and four additions of lanes, each rounding a value at most sum_c |m q| once."""
    m, q = m.astype(np.float64), q.astype(np.float64)
    steps = -(-m.shape[1] // 16) + 4
    return m @ q, steps * np.finfo(dtype).eps * (np.abs(m) @ np.abs(q)) + 1e-300


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=lambda d: d.__name__)
@pytest.mark.parametrize("n, k, r", SHAPES)
def test_matches_numpy(n, k, r, dtype):
    g, e, q = problem(n, k, r, dtype, seed=n + k + r)
    m, p = ops.lowrank_compensate(g, e, q)
    assert m.dtype == p.dtype == tf.as_dtype(dtype) and m.shape == (n, k) and p.shape == (n, r)
    assert m.numpy().tobytes() == (g + e).tobytes()  # one rounding of g + e, as NumPy's add
    exact, bound = product_bound(m.numpy(), q, dtype)
    np.testing.assert_array_less(np.abs(p.numpy() - exact), bound)


def test_lanes_are_summed_in_the_documented_order():
    """Lanes 0 and 8 hold 1 and 2^-30, lane 1 holds -1: the halves make lane 0 1 + 2^-30 = 1
    (float32), and then 1 + -1 = 0; a sum in column order would be 2^-30."""
    g = np.zeros((1, 17), np.float32)
    g[0, 0], g[0, 1], g[0, 8] = 1.0, -1.0, 2.0**-30
    _, p = ops.lowrank_compensate(g, np.zeros_like(g), np.ones((17, 1), np.float32))
    assert p.numpy()[0, 0] == 0.0
    _, p = ops.lowrank_compensate(g, np.zeros_like(g), np.ones((17, 2), np.float32))
    np.testing.assert_array_equal(p.numpy(), [[0.0, 0.0]])


@pytest.mark.parametrize("dtype", [tf.float16, tf.bfloat16], ids=lambda d: d.name)
def test_16_bit_types_round_m_then_sum_in_float(dtype):
    g, e, q = (tf.cast(x, dtype) for x in problem(70, 130, 5, np.float32, seed=3))
    m, p = ops.lowrank_compensate(g, e, q)
    assert m.dtype == p.dtype == dtype
    # m is g + e in float rounded once to the 16-bit type, which is TensorFlow's add.
    assert m.numpy().tobytes() == (g + e).numpy().tobytes()
    # p: the float sum of the rounded m's products, rounded once to the 16-bit type.
    exact, bound = product_bound(tf.cast(m, tf.float64).numpy(), tf.cast(q, tf.float64).numpy(), np.float32)
    got = tf.cast(p, tf.float64).numpy()
    half_ulp = {tf.float16: 2.0**-11, tf.bfloat16: 2.0**-8}[dtype]
    assert np.all(np.abs(got - exact) <= half_ulp * np.abs(exact) + bound + 2.0**-24)


def test_rank_zero_writes_m_and_no_columns_sum_to_positive_zero():
    g, e, _ = problem(3, 4, 0, np.float32)
    m, p = ops.lowrank_compensate(g, e, np.zeros((4, 0), np.float32))
    assert m.numpy().tobytes() == (g + e).tobytes() and p.shape == (3, 0)
    m, p = ops.lowrank_compensate(np.zeros((3, 0), np.float32), np.zeros((3, 0), np.float32),
                                  np.zeros((0, 2), np.float32))
    assert m.shape == (3, 0) and p.shape == (3, 2)
    assert not p.numpy().any() and not np.signbit(p.numpy()).any()


@pytest.mark.parametrize("n, k, r", [(0, 5, 2), (0, 0, 0), (4, 0, 0)])
def test_empty(n, k, r):
    m, p = ops.lowrank_compensate(np.zeros((n, k), np.float32), np.zeros((n, k), np.float32),
                                  np.zeros((k, r), np.float32))
    assert m.shape == (n, k) and p.shape == (n, r)


def test_nan_and_inf_propagate():
    g, e, q = problem(6, 70, 3, np.float32, seed=5)
    g[0, 3] = np.nan          # row 0: NaN in every rank
    e[1, 4] = -np.inf         # row 1: +-Inf, NaN where q[4] is 0
    q[4, 2] = 0.0
    q[60, 1] = np.inf         # rank 1: +-Inf in every row (NaN where it meets row 1's -Inf ...)
    m, p = ops.lowrank_compensate(g, e, q)
    m, p = m.numpy(), p.numpy()
    assert np.isnan(m[0, 3]) and m[1, 4] == -np.inf
    with np.errstate(invalid="ignore"):
        expected = (g + e).astype(np.float64) @ q.astype(np.float64)
    np.testing.assert_array_equal(np.isnan(p), np.isnan(expected))
    np.testing.assert_array_equal(np.isinf(p), np.isinf(expected))
    assert np.isnan(p[0]).all() and np.isnan(p[1, 2])
    finite = np.isfinite(expected)
    np.testing.assert_allclose(p[finite], expected[finite], rtol=1e-5, atol=1e-5)


def test_inputs_are_untouched_and_calls_agree_bit_for_bit():
    g, e, q = problem(513, 1000, 16, np.float32, seed=9)
    first = [x.numpy() for x in ops.lowrank_compensate(g, e, q)]
    in_graph = tf.function(lambda g, e, q: ops.lowrank_compensate(g * 1.0, e * 1.0, q))(g, e, q)
    for a, b in zip(first, in_graph):
        assert a.tobytes() == b.numpy().tobytes()
    for kept, fresh in zip((g, e, q), problem(513, 1000, 16, np.float32, seed=9)):
        np.testing.assert_array_equal(kept, fresh)


def test_shapes_inside_tf_function():
    spec = tf.TensorSpec([None, None], tf.float32)
    f = tf.function(ops.lowrank_compensate, input_signature=[spec, spec, spec])
    for n, k, r in [(3, 4, 2), (10, 1, 5), (1, 37, 1)]:
        g, e, q = problem(n, k, r, np.float32)
        m, p = f(g, e, q)
        np.testing.assert_allclose(p.numpy(), (g + e) @ q, rtol=1e-5, atol=1e-5)

    @tf.function(input_signature=[tf.TensorSpec([None, 3]), tf.TensorSpec([4, None]), tf.TensorSpec([None, 2])])
    def static(g, e, q):
        m, p = ops.lowrank_compensate(g, e, q)
        assert m.shape.as_list() == [4, 3] and p.shape.as_list() == [4, 2]
        return p

    static.get_concrete_function()


def _zeros(*shape):
    return np.zeros(shape, np.float32)


@pytest.mark.parametrize("args, message", [
    ((_zeros(6), _zeros(6), _zeros(6, 2)), r"g must be a matrix \[n, k\] \(rank 2\)"),
    ((_zeros(4, 3), _zeros(3, 4), _zeros(3, 2)), r"e must have g's shape"),
    ((_zeros(4, 3), _zeros(4, 3), _zeros(3)), r"q must be a matrix \[k, r\] \(rank 2\)"),
    ((_zeros(4, 3), _zeros(4, 3), _zeros(2, 2)), r"q must have one row per column of g"),
])
def test_bad_shapes_are_refused_eagerly_and_when_traced(args, message):
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        ops.lowrank_compensate(*args)
    with pytest.raises((ValueError, tf.errors.InvalidArgumentError), match=message):
        tf.function(ops.lowrank_compensate).get_concrete_function(
            *(tf.TensorSpec(a.shape, tf.float32) for a in args))


def test_wrong_dtypes():
    with pytest.raises(TypeError, match="float16, bfloat16, float32, float64"):
        ops.lowrank_compensate(*(np.zeros((2, 2), np.int32),) * 2, np.zeros((2, 1), np.int32))
    with pytest.raises(TypeError, match="one dtype, got float32, float64 and float32"):
        ops.lowrank_compensate(_zeros(2, 2), np.zeros((2, 2)), _zeros(2, 1))


_WITH_THREADS = """
import hashlib
import numpy as np
from tfcomp import ops
rng = np.random.default_rng(8)
for dtype, (n, k, r) in [(np.float32, (1029, 2048, 8)), (np.float64, (600, 77, 5)), (np.float16, (700, 400, 3))]:
    g, e = rng.standard_normal((2, n, k)).astype(dtype)
    q = rng.standard_normal((k, r)).astype(dtype)
    m, p = ops.lowrank_compensate(g, e, q)
    projected = ops.lowrank_project(m, p)
    print(hashlib.sha256(m.numpy().tobytes() + p.numpy().tobytes() + projected.numpy().tobytes()).hexdigest())
"""


def test_both_ops_give_the_same_bits_on_any_thread_count(tmp_path):
    assert len({threaded.run(tmp_path, _WITH_THREADS, threads) for threads in (1, 2, 3)}) == 1


@ON_GPU
@pytest.mark.parametrize("dtype", [tf.float16, tf.bfloat16, tf.float32, tf.float64], ids=lambda d: d.name)
@pytest.mark.parametrize("n, k, r", SHAPES + [(65, 130, 64), (2000, 3, 33)])
def test_gpu_kernel_matches_cpu_bit_for_bit(n, k, r, dtype):
    g, e, q = (tf.cast(x, dtype) for x in problem(n, k, r, np.float32, seed=r))
    assert_same_bits_on_cpu_and_gpu(lambda: ops.lowrank_compensate(g, e, q))


# --- lowrank_project: Q = M^T P ----------------------------------------------------------

def project_bound(m, p, dtype):
    """m^T p in float64 and the bound on the kernel's rounding: 256 fused steps per block of
    rows and one addition per block, each rounding a value at most sum_i |m p| once."""
    m, p = m.astype(np.float64), p.astype(np.float64)
    steps = min(m.shape[0], 256) + -(-m.shape[0] // 256)
    return m.T @ p, steps * np.finfo(dtype).eps * (np.abs(m).T @ np.abs(p)) + 1e-300


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=lambda d: d.__name__)
@pytest.mark.parametrize("n, k, r", SHAPES + [(257, 1030, 3), (513, 2049, 8)])  # several blocks of rows
def test_project_matches_numpy(n, k, r, dtype):
    rng = np.random.default_rng(n + k + r)
    m, p = rng.standard_normal((n, k)).astype(dtype), rng.standard_normal((n, r)).astype(dtype)
    q = ops.lowrank_project(m, p)
    assert q.dtype == tf.as_dtype(dtype) and q.shape == (k, r)
    exact, bound = project_bound(m, p, dtype)
    np.testing.assert_array_less(np.abs(q.numpy() - exact), bound)


def test_project_sums_blocks_of_256_rows_in_order():
    """Column 0: rows 0 and 1 hold 1 and -1 (block 0 sums to 0), row 256 holds 2^-30 (block 1),
    so q = 2^-30. Column 1: rows 0, 1 and 2 hold 1, 2^-30 and -1, summed in row order: 1 + 2^-30
    rounds to 1 in float32, so q = 0 (a sum that took -1 first would give 2^-30)."""
    m = np.zeros((300, 2), np.float32)
    m[0, 0], m[1, 0], m[256, 0] = 1.0, -1.0, 2.0**-30
    m[0, 1], m[1, 1], m[2, 1] = 1.0, 2.0**-30, -1.0
    q = ops.lowrank_project(m, np.ones((300, 1), np.float32)).numpy()
    np.testing.assert_array_equal(q, [[2.0**-30], [0.0]])


@pytest.mark.parametrize("dtype", [tf.float16, tf.bfloat16], ids=lambda d: d.name)
def test_project_16_bit_types_compute_in_float(dtype):
    m, _, _ = problem(300, 130, 5, np.float32, seed=3)
    p = np.random.default_rng(4).standard_normal((300, 5)).astype(np.float32)
    m, p = tf.cast(m, dtype), tf.cast(p, dtype)
    q = ops.lowrank_project(m, p)
    assert q.dtype == dtype
    exact, bound = project_bound(tf.cast(m, tf.float64).numpy(), tf.cast(p, tf.float64).numpy(), np.float32)
    half_ulp = {tf.float16: 2.0**-11, tf.bfloat16: 2.0**-8}[dtype]
    got = tf.cast(q, tf.float64).numpy()
    assert np.all(np.abs(got - exact) <= half_ulp * np.abs(exact) + bound + 2.0**-24)


@pytest.mark.parametrize("n, k, r", [(0, 5, 2), (4, 0, 2), (4, 3, 0), (0, 0, 0)])
def test_project_empty(n, k, r):
    q = ops.lowrank_project(np.zeros((n, k), np.float32), np.zeros((n, r), np.float32)).numpy()
    assert q.shape == (k, r) and not q.any() and not np.signbit(q).any()  # no rows: +0


def test_project_nan_and_inf_propagate():
    m = np.random.default_rng(5).standard_normal((600, 6)).astype(np.float32)
    p = np.random.default_rng(6).standard_normal((600, 3)).astype(np.float32)
    m[400, 2] = np.nan         # column 2: NaN in every rank
    p[10, 1] = np.inf          # rank 1: +-Inf in every column (NaN where it meets column 2's NaN)
    q = ops.lowrank_project(m, p).numpy()
    with np.errstate(invalid="ignore"):
        expected = m.T.astype(np.float64) @ p.astype(np.float64)
    np.testing.assert_array_equal(np.isnan(q), np.isnan(expected))
    np.testing.assert_array_equal(np.isinf(q), np.isinf(expected))
    assert np.isnan(q[2]).all() and np.isinf(q[[0, 1, 3, 4, 5], 1]).all()
    finite = np.isfinite(expected)
    np.testing.assert_allclose(q[finite], expected[finite], rtol=1e-4, atol=1e-4)


def test_project_shapes_inside_tf_function():
    spec = tf.TensorSpec([None, None], tf.float32)
    f = tf.function(ops.lowrank_project, input_signature=[spec, spec])
    for n, k, r in [(3, 4, 2), (10, 1, 5), (300, 7, 1)]:
        m, _, _ = problem(n, k, r, np.float32)
        p = np.ones((n, r), np.float32)
        np.testing.assert_allclose(f(m, p).numpy(), m.T @ p, rtol=1e-5, atol=1e-4)

    @tf.function(input_signature=[tf.TensorSpec([None, 3]), tf.TensorSpec([4, 2])])
    def static(m, p):
        q = ops.lowrank_project(m, p)
        assert q.shape.as_list() == [3, 2]
        return q

    static.get_concrete_function()


@pytest.mark.parametrize("args, message", [
    ((_zeros(6), _zeros(6, 2)), r"m must be a matrix \[n, k\] \(rank 2\)"),
    ((_zeros(4, 3), _zeros(4)), r"p must be a matrix \[n, r\] \(rank 2\)"),
    ((_zeros(4, 3), _zeros(5, 2)), r"p must have one row per row of m"),
])
def test_project_bad_shapes_are_refused_eagerly_and_when_traced(args, message):
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        ops.lowrank_project(*args)
    with pytest.raises((ValueError, tf.errors.InvalidArgumentError), match=message):
        tf.function(ops.lowrank_project).get_concrete_function(*(tf.TensorSpec(a.shape, tf.float32) for a in args))


def test_project_wrong_dtypes():
    with pytest.raises(TypeError, match="float16, bfloat16, float32, float64"):
        ops.lowrank_project(np.zeros((2, 2), np.int32), np.zeros((2, 1), np.int32))
    with pytest.raises(TypeError, match="one dtype, got float32 and float64"):
        ops.lowrank_project(_zeros(2, 2), np.zeros((2, 1)))


@ON_GPU
@pytest.mark.parametrize("dtype", [tf.float16, tf.bfloat16, tf.float32, tf.float64], ids=lambda d: d.name)
@pytest.mark.parametrize("n, k, r", SHAPES + [(600, 130, 9), (2000, 3, 33)])
def test_project_gpu_kernel_matches_cpu_bit_for_bit(n, k, r, dtype):
    m, _, _ = problem(n, k, r, np.float32, seed=r)
    m, p = tf.cast(m, dtype), tf.cast(np.random.default_rng(r).standard_normal((n, r)), dtype)
    assert_same_bits_on_cpu_and_gpu(lambda: ops.lowrank_project(m, p))
