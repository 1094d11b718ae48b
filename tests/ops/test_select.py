"""select_largest (exact threshold/top-k selection, custom_ops/sparse/cc/kernels/select_core.h)
against a NumPy reference: a sort of the qualifying elements by (float32(|x|), index)."""

import ml_dtypes
import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given
from hypothesis import strategies as st

from tfcomp import ops
from tests.ops import threaded
from tests.ops.gpu import ON_GPU
from tests.stacks import NO_KERAS

pytestmark = NO_KERAS

DTYPES = [tf.float16, tf.bfloat16, tf.float32, tf.float64]


def flush(a):
    """a (float32 or float64) as the CPU kernels compare it: subnormals as 0 (FTZ/DAZ)."""
    return np.where(np.abs(a) < np.finfo(a.dtype).tiny, np.zeros_like(a), a)


def reference(x, threshold, capacity):
    """(values, indices): the capacity largest of the elements with |x| >= threshold (or NaN),
    by float32(|x|)'s bits (NaN as 0x7fc00000 above +Inf, zero and denormals as 0), ties to
    the larger index, in increasing index order, padded with (0, -1)."""
    acc = np.float64 if x.dtype == np.float64 else np.float32
    flat = x.reshape(-1)
    wide = flush(flat.astype(acc))
    with np.errstate(over="ignore"):  # the op takes the threshold in x's dtype
        t = flush(np.array([threshold]).astype(x.dtype).astype(acc))[0]
    with np.errstate(invalid="ignore"):
        qualifying = np.nonzero(~(np.abs(wide) < t))[0]
    with np.errstate(over="ignore"):  # float64 beyond float32's range ranks as +Inf
        bits = np.abs(flat[qualifying].astype(acc)).astype(np.float32).view(np.uint32).astype(np.int64)
    bits &= 0x7FFFFFFF
    keys = np.where(bits > 0x7F800000, 0x7FC00000, np.where(bits < 0x00800000, 0, bits))
    winners = np.sort(qualifying[np.lexsort((-qualifying, -keys))[:capacity]])
    indices = np.full(capacity, -1, np.int64)
    indices[:len(winners)] = winners
    values = np.zeros(capacity, x.dtype)
    values[:len(winners)] = flat[winners]
    return values, indices


def gradient(n, dtype, seed=0, specials=False, ties=False):
    rng = np.random.default_rng(seed)
    g = rng.standard_normal(n).astype(np.float32)
    if ties and n > 10:
        g[rng.choice(n, n // 3, replace=False)] = 1.5
        g[rng.choice(n, n // 10, replace=False)] = -1.5
        g[rng.choice(n, n // 10, replace=False)] = 0.0
    if specials and n > 10:
        g[[3, 7, 9, n - 1]] = [np.nan, np.inf, -np.inf, -np.nan]
    return g.astype(dtype.as_numpy_dtype)


def check(x, threshold, capacity, wide=False):
    values, indices = ops.select_largest(x, threshold, capacity)
    expected_values, expected_indices = reference(x, threshold, capacity)
    assert values.shape == (capacity,) and indices.shape == (capacity,)
    assert values.dtype == tf.as_dtype(x.dtype)
    np.testing.assert_array_equal(indices.numpy(), expected_indices)
    assert values.numpy().tobytes() == expected_values.tobytes()


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("n, capacity, threshold", [
    (0, 0, 0.0), (0, 3, 0.0), (1, 0, 0.0), (1, 1, 0.0), (1, 5, 2.0), (33, 7, 0.0), (33, 33, 0.0), (33, 40, 0.5),
    (1000, 1, 0.0), (1000, 10, 1.0), (1000, 999, 0.0), (1000, 64, 1e9), (100003, 1000, 0.0),
    (100003, 5000, 2.5), (100003, 50000, 0.0), ((1 << 18) + 7, 2621, 0.0), ((1 << 20) + 3, 10486, 0.0),
    ((1 << 20) + 3, 10486, 2.0), ((1 << 20) + 3, 200000, 1.0), ((1 << 20) + 3, 1, 0.0),
    ((1 << 20) + 3, 500000, 0.0)])
@pytest.mark.parametrize("kind", ["finite", "nan_inf", "ties"])
def test_select_largest_matches_reference(n, capacity, threshold, dtype, kind):
    """Both paths (the sampled one-read path from 2^18 elements, the histogram passes
    below it and where the sample misses): bit for bit the sort."""
    check(gradient(n, dtype, seed=n + capacity, specials=kind == "nan_inf", ties=kind == "ties"), threshold,
          capacity)


def test_ordering_nan_above_inf_ties_to_the_larger_index_denormals_as_zero():
    tiny = np.finfo(np.float32).tiny / 8
    cases = [([1.0, -3.0, 2.0], 0.0, 1, [1]), ([3.0, -3.0, 2.0], 0.0, 1, [1]), ([3.0, -3.0, 2.0], 0.0, 2, [0, 1]),
             ([np.nan, np.inf, 1.0], 0.0, 1, [0]), ([np.inf, np.nan, 1.0], 5.0, 3, [0, 1, -1]),
             ([tiny, 0.0], 0.0, 1, [1]), ([0.0, tiny], 0.0, 1, [1]), ([tiny, 0.0, 0.5], 0.0, 2, [1, 2]),
             ([1.0, 2.0, 3.0], np.nan, 2, [1, 2]), ([0.5, 2.0, -2.0, 0.1], 1.0, 4, [1, 2, -1, -1])]
    for x, threshold, capacity, expected in cases:
        _, indices = ops.select_largest(np.array(x, np.float32), threshold, capacity)
        assert indices.numpy().tolist() == expected, (x, threshold, capacity, indices.numpy())


def test_float64_beyond_float32_ranks_as_inf():
    x = np.array([1e300, 1e39, np.inf, 3.0], np.float64)
    _, indices = ops.select_largest(x, 0.0, 2)
    assert indices.numpy().tolist() == [1, 2]  # three tie at +Inf: the larger indices


def test_all_zeros_and_constant_tensors():
    """Massive ties: the largest indices win."""
    for value in (0.0, 1.0):
        x = np.full((1 << 19) + 1, value, np.float32)
        _, indices = ops.select_largest(x, 0.0, 1000)
        np.testing.assert_array_equal(indices.numpy(), np.arange(x.size - 1000, x.size))


def test_large_tensor_and_int64_indices():
    x = gradient((1 << 20) + 3, tf.float32, seed=5, specials=True)
    _, narrow = ops.select_largest(x, 1.0, 5000)
    wide = ops.library().tfcomp_select_largest(x, np.float32(1.0), capacity=5000, Tindex=tf.int64)[1]
    assert narrow.dtype == tf.int32 and wide.dtype == tf.int64
    np.testing.assert_array_equal(wide.numpy(), narrow.numpy())


def test_shape_and_graph_mode():
    x = gradient(3000, tf.float32).reshape(30, 100)
    f = tf.function(lambda x, t: ops.select_largest(x, t, 17),
                    input_signature=[tf.TensorSpec(None, tf.float32), tf.TensorSpec([], tf.float32)])
    values, indices = f(x, 0.5)
    expected_values, expected_indices = reference(x, 0.5, 17)
    np.testing.assert_array_equal(indices.numpy(), expected_indices)
    np.testing.assert_array_equal(values.numpy(), expected_values)
    assert indices.dtype == tf.int64  # unknown size: int64 indices


def test_bad_input_is_rejected():
    with pytest.raises(ValueError, match="capacity"):
        ops.select_largest(np.ones(3, np.float32), 0.0, -1)
    with pytest.raises(TypeError):
        ops.select_largest(np.ones(3, np.int32), 0, 1)
    with pytest.raises((ValueError, tf.errors.InvalidArgumentError), match="rank|scalar"):
        ops.library().tfcomp_select_largest(np.ones(3, np.float32), np.ones(2, np.float32), capacity=1)


# Runs select_largest on each case of an .npz file with a given number of
# intra-op threads (fixed once per process, hence a subprocess).
_SELECT_WITH_THREADS = """
import sys
import numpy as np
import tensorflow as tf
from tfcomp import ops
cases = np.load(sys.argv[2])
out = {}
for c in range(int(cases["count"])):
    values, indices = ops.select_largest(cases[f"x{c}"], cases[f"threshold{c}"], int(cases[f"capacity{c}"]))
    out[f"values{c}"], out[f"indices{c}"] = values.numpy(), indices.numpy()
np.savez(sys.argv[3], **out)
"""


def test_select_largest_is_the_same_on_any_thread_count(tmp_path):
    cases = [(np.float32, (1 << 21) + 5, 20000, 0.0, "nan_inf"), (np.float32, (1 << 21) + 5, 300000, 1.0, "ties"),
             (np.float64, 300007, 3000, 0.0, "finite"), (np.float16, (1 << 20) + 1, 50000, 0.5, "nan_inf"),
             (np.float32, 200003, 100000, 0.0, "ties")]
    data = {"count": len(cases)}
    for c, (dtype, n, capacity, threshold, kind) in enumerate(cases):
        data.update({f"x{c}": gradient(n, tf.as_dtype(dtype), seed=c, specials=kind == "nan_inf",
                                       ties=kind == "ties"),
                     f"capacity{c}": capacity, f"threshold{c}": np.array(threshold, dtype)})
    np.savez(tmp_path / "cases.npz", **data)
    for threads in (1, 2, 3):
        out = tmp_path / f"out{threads}.npz"
        threaded.run(tmp_path, _SELECT_WITH_THREADS, threads, tmp_path / "cases.npz", out)
        got = np.load(out)
        for c, (_, _, capacity, threshold, _) in enumerate(cases):
            expected_values, expected_indices = reference(data[f"x{c}"], threshold, capacity)
            np.testing.assert_array_equal(got[f"indices{c}"], expected_indices, err_msg=f"{threads}: {cases[c]}")
            assert got[f"values{c}"].tobytes() == expected_values.tobytes(), f"{threads}: {cases[c]}"


def _specials(dtype):
    f = ml_dtypes.finfo(dtype.as_numpy_dtype) if dtype == tf.bfloat16 else np.finfo(dtype.as_numpy_dtype)
    edge = [float(f.max), float(f.tiny), float(f.smallest_subnormal), 1.0, 0.5]
    return [np.nan, np.inf, -np.inf, 0.0, -0.0] + edge + [-v for v in edge]


@given(st.data())
def test_select_largest_property(data):
    """Drawn sizes (empty, odd), dtypes, capacities (0, 1, >= n), thresholds and values from a
    small pool (ties) with NaN, +-Inf, +-0, extremes and subnormals: the sort's answer, and the
    winners are exactly min(capacity, #qualifying), distinct, in increasing order."""
    dtype = data.draw(st.sampled_from(DTYPES), "dtype")
    n = data.draw(st.sampled_from([0, 1, 2, 31, 33, 255, 257, 4097]) | st.integers(0, 3000), "n")
    pool = data.draw(st.lists(st.sampled_from(_specials(dtype)) | st.floats(-4, 4, width=32), min_size=1,
                              max_size=12), "pool")
    x = np.array(pool, np.float64)[data.draw(st.lists(st.integers(0, len(pool) - 1), min_size=n, max_size=n),
                                             "picks")].astype(dtype.as_numpy_dtype)
    capacity = data.draw(st.sampled_from([0, 1, n, n + 3]) | st.integers(0, max(0, n)), "capacity")
    threshold = data.draw(st.sampled_from([0.0, 0.5, 1.0, np.inf, np.nan, 1e-30]), "threshold")
    values, indices = ops.select_largest(x, threshold, capacity)
    expected_values, expected_indices = reference(x, threshold, capacity)
    np.testing.assert_array_equal(indices.numpy(), expected_indices)
    assert values.numpy().tobytes() == expected_values.tobytes()
    valid = indices.numpy()[indices.numpy() >= 0]
    assert (np.diff(valid) > 0).all() and (indices.numpy()[len(valid):] == -1).all()


@ON_GPU
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("n, capacity, threshold", [
    (0, 3, 0.0), (1, 1, 0.0), (33, 7, 0.0), (4097, 40, 0.5), ((1 << 20) + 3, 10486, 0.0),
    ((1 << 20) + 3, 10486, 2.0), ((1 << 20) + 3, 500000, 0.0)])
@pytest.mark.parametrize("kind", ["finite", "nan_inf", "ties"])
def test_gpu_kernel_matches_cpu(n, capacity, threshold, dtype, kind):
    x = gradient(n, dtype, seed=n, specials=kind == "nan_inf", ties=kind == "ties")
    outputs = []
    for device in ("/CPU:0", "/GPU:0"):
        with tf.device(device):
            outputs.append([t.numpy() for t in ops.select_largest(x, threshold, capacity)])
    (cv, ci), (gv, gi) = outputs
    np.testing.assert_array_equal(gi, ci)
    assert gv.tobytes() == cv.tobytes()
