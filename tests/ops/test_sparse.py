"""The sparse ops (DRAGONN's hashed selection, batched sparse decode) against NumPy references."""

import numpy as np
import pytest
import tensorflow as tf

from tests.ops import sparse_reference as ref
from tfcomp import ops
from tests.ops import threaded
from tests.stacks import NO_KERAS

pytestmark = NO_KERAS

DTYPES = [tf.float16, tf.bfloat16, tf.float32, tf.float64]


def gradient(n, dtype, seed=0, specials=False):
    g = np.random.default_rng(seed).standard_normal(n).astype(np.float32)
    if specials and n > 10:
        g[[3, 7, 9]] = [np.nan, np.inf, -np.inf]
    return g.astype(dtype.as_numpy_dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_a_shared_slot_keeps_the_largest_and_denormals_claim_as_zero(dtype):
    """One slot, everything selected: the largest magnitude wins whatever its sign, ties go to
    the larger index, and a denormal ties with 0 (kernels may run with denormals flushed, and
    the choice must not depend on it; found by the property test on bfloat16)."""
    tiny = np.finfo(np.float32).tiny / 8  # denormal in float32, and as float32 in every dtype
    cases = [([1.0, -3.0, 2.0], 1), ([3.0, -3.0, 2.0], 1), ([tiny, 0.0], 1), ([0.0, tiny], 1),
             ([tiny, 0.0, 0.5], 2), ([np.nan, np.inf, 1.0], 0)]
    for values, winner in cases:
        g = np.array(values, np.float64).astype(dtype.as_numpy_dtype)
        _, indices = ops.hash_select(g, np.nan, (1, 2), 1)
        assert indices.numpy().tolist() == [winner], (values, indices.numpy())


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("n, capacity, threshold, bucket_size", [
    (0, 0, 1.0, 1), (0, 4, 1.0, 1), (1, 1, 0.0, 1), (33, 7, 1.0, 1), (1000, 1, 1.5, 1), (1000, 64, 2.0, 1),
    (1000, 64, 0.0, 1), (1000, 64, 1e9, 1), (100003, 1024, 2.5, 1), ((1 << 20) + 3, 1024, 3.5, 1),
    (0, 4, 1.0, 4), (1000, 1, 1.5, 4), (1000, 64, 0.0, 4), (1000, 63, 1.0, 4), (33, 7, 0.0, 8),
    (1000, 64, 1.5, 64), (100003, 1022, 2.5, 3), ((1 << 20) + 3, 1024, 3.5, 4)])
@pytest.mark.parametrize("specials", [False, True], ids=["finite", "nan_inf"])
def test_hash_select_matches_sequential_reference(n, capacity, threshold, bucket_size, dtype, specials):
    """Bit for bit the reference; every kept index passed the threshold, sits in its hash
    bucket, and a bucket holds the largest claims hashed to it, largest first, then its empty
    slots (buckets of bucket_size slots, the last shorter where capacity is not a multiple;
    one bucket of all the slots where bucket_size >= capacity)."""
    g = gradient(n, dtype, seed=n, specials=specials)
    seed = (n * 7 + 1, capacity)
    values, indices = ops.hash_select(g, threshold, seed, capacity, bucket_size)
    expected_values, expected_indices, selected = ref.hash_select(g, threshold, seed, capacity, bucket_size)
    assert values.shape == (capacity,) and indices.shape == (capacity,) and indices.dtype == tf.int32
    np.testing.assert_array_equal(indices.numpy(), expected_indices)
    np.testing.assert_array_equal(values.numpy().view(np.uint8), expected_values.view(np.uint8))
    valid = indices.numpy()[indices.numpy() >= 0]
    assert len(set(valid)) == len(valid), "valid indices are distinct"
    assert set(valid) <= set(selected), "every valid index passed the threshold"
    params = ref.hash_from_seed(*seed)
    buckets = -(-capacity // bucket_size)
    assert all(ref.hash_slot(params, i, buckets) == slot // bucket_size
               for slot, i in enumerate(indices.numpy()) if i >= 0)
    assert not values.numpy()[indices.numpy() < 0].any(), "empty slots hold (0, -1)"
    read = g.reshape(-1).astype(np.float32)  # claims compare float32 magnitudes
    for begin in range(0, capacity, bucket_size):
        kept = indices.numpy()[begin:begin + bucket_size]
        claims = [ref.slot_claim(abs(read[i]), i) for i in kept[kept >= 0]]
        assert claims == sorted(claims, reverse=True) and (kept[len(claims):] == -1).all(), (begin, kept)


@pytest.mark.parametrize("bucket_size", [2, 4, 8])
def test_a_bucket_keeps_the_largest_elements_hashed_to_it(bucket_size):
    """Everything in one bucket (bucket_size = capacity): the bucket_size largest magnitudes,
    largest first, whatever their order in g; fewer candidates leave the last slots empty."""
    rng = np.random.default_rng(bucket_size)
    g = rng.standard_normal(200).astype(np.float32)
    _, indices = ops.hash_select(g, 0.0, (4, 5), bucket_size, bucket_size)
    np.testing.assert_array_equal(indices.numpy(), np.argsort(-np.abs(g), kind="stable")[:bucket_size])
    _, indices = ops.hash_select(g[:bucket_size - 1], 0.0, (4, 5), bucket_size, bucket_size)
    assert indices.numpy()[-1] == -1 and sorted(indices.numpy()[:-1]) == list(range(bucket_size - 1))


def test_element_zero_is_selectable():
    g = np.zeros(1000, np.float32)
    g[0] = 5.0
    values, indices = ops.hash_select(g, 1.0, (1, 2), 8)
    assert 0 in indices.numpy() and 5.0 in values.numpy()
    assert (indices.numpy() >= 0).sum() == 1


def test_nan_and_inf_are_always_selected():
    g = np.zeros(500, np.float32)
    g[[10, 20]] = [np.nan, -np.inf]
    _, indices = ops.hash_select(g, 1e30, (3, 4), 4096)
    assert sorted(i for i in indices.numpy() if i >= 0) == [10, 20]


def test_same_seed_same_selection_other_seed_other_slots():
    g = gradient(10000, tf.float32, seed=1)
    first = ops.hash_select(g, 1.0, (5, 6), 256)[1].numpy()
    np.testing.assert_array_equal(first, ops.hash_select(g, 1.0, (5, 6), 256)[1].numpy())
    assert not np.array_equal(first, ops.hash_select(g, 1.0, (5, 7), 256)[1].numpy())


@pytest.mark.parametrize("m, l, expected", [(1024, 1024, 1 - (1 - 1 / 1024) ** 1024),
                                            (512, 1024, 1 - (1 - 1 / 512) ** 1024)])
def test_expected_occupancy(m, l, expected):
    """Filled slots ~ m (1 - (1 - 1/m)^l) (DRAGONN Appendix A.2.2): 0.632 and 0.865 here."""
    g = np.zeros(50000, np.float32)
    fills = []
    for seed in range(40):
        g[:] = 0
        g[np.random.default_rng(seed).choice(g.size, l, replace=False)] = 1.0
        fills.append((ops.hash_select(g, 0.5, (seed, 99), m)[1].numpy() >= 0).mean())
    assert abs(np.mean(fills) - expected) < 0.01, (np.mean(fills), expected)


def test_large_tensor_and_int64_indices():
    n = 1 << 26
    g = np.zeros(n, np.float32)
    hot = np.random.default_rng(3).choice(n, 3000, replace=False)
    g[hot] = np.random.default_rng(4).standard_normal(3000).astype(np.float32) * 10
    g[n - 1] = 100.0
    values, indices = ops.hash_select(g, 1.0, (8, 9), 4096)
    expected_values, expected_indices, _ = ref.hash_select(g, 1.0, (8, 9), 4096)
    np.testing.assert_array_equal(indices.numpy(), expected_indices)
    np.testing.assert_array_equal(values.numpy(), expected_values)
    wide = ops.library().tfcomp_hash_select(tf.constant(g[:100000]), tf.constant(1.0), tf.constant([8, 9], tf.int64),
                                            capacity=64, Tindex=tf.int64)
    narrow = ops.hash_select(g[:100000], 1.0, (8, 9), 64)
    assert wide[1].dtype == tf.int64
    np.testing.assert_array_equal(wide[1].numpy(), narrow[1].numpy())
    assert ops.index_dtype(2**31) == tf.int32 and ops.index_dtype(2**31 + 1) == tf.int64


# Runs hash_select on each case of an .npz file with a given number of intra-op
# threads (fixed once per process, hence a subprocess) and saves the outputs.
_SELECT_WITH_THREADS = """
import sys
import numpy as np
import tensorflow as tf
from tfcomp import ops
cases = np.load(sys.argv[2])
out = {}
for c in range(int(cases["count"])):
    g, seed, capacity = cases[f"g{c}"], cases[f"seed{c}"], int(cases[f"capacity{c}"])
    values, indices = ops.library().tfcomp_hash_select(
        tf.constant(g), tf.constant(cases[f"threshold{c}"]), tf.constant(seed), capacity=capacity,
        bucket_size=int(cases[f"bucket_size{c}"]), Tindex=tf.int64 if cases[f"wide{c}"] else tf.int32)
    out[f"values{c}"], out[f"indices{c}"] = values.numpy(), indices.numpy()
np.savez(sys.argv[3], **out)
"""


def test_hash_select_with_large_capacity_matches_reference_on_any_thread_count(tmp_path):
    """Slot arrays larger than the cache (up to 1.2 MB, capacities that are not
    powers of two), many collisions (everything selected: each slot is claimed
    ~3 times), NaN, +-Inf, -0, element 0 selected and a NaN threshold, one slot
    and several per bucket: bit for bit the sequential reference on 1 thread
    (the in-order pass) and on 2 and 3 (atomic max on the index, a displaced
    claim moving on through its bucket, values read afterwards)."""
    cases = [  # dtype, n, capacity, threshold, int64 indices, bucket size
        (np.float32, 300007, 100003, 0.0, False, 1),  # all selected: 3 per slot
        (np.float32, 300007, 100003, 1.0, False, 1),  # ~ capacity selected
        (np.float32, (1 << 20) + 5, 40000, 2.0, False, 1),
        (np.float32, 300007, 32768, 0.5, False, 1),
        (np.float32, 300007, 70001, 0.5, True, 1),
        (np.float32, 200003, 65536, np.nan, False, 1),  # a NaN threshold selects everything
        (np.float64, 300007, 100003, 0.5, False, 1),
        (np.float16, 300007, 100003, 0.5, True, 1),
        (np.float32, 300007, 100003, 0.0, False, 4),  # every claim passes through up to 4 slots
        (np.float32, (1 << 20) + 5, 40001, 2.0, True, 4),  # the last bucket shorter
        (np.float64, 300007, 50000, 0.5, False, 3),
    ]
    data = {"count": len(cases)}
    for c, (dtype, n, capacity, threshold, wide, bucket_size) in enumerate(cases):
        rng = np.random.default_rng(c)
        g = rng.standard_normal(n).astype(np.float32)
        g[0] = 5.0
        g[rng.choice(n, 40, replace=False)] = np.nan
        g[rng.choice(n, 40, replace=False)] = np.inf
        g[rng.choice(n, 40, replace=False)] = -np.inf
        g[rng.choice(n, n // 20, replace=False)] = -0.0
        data.update({f"g{c}": g.astype(dtype), f"seed{c}": np.array([c + 3, capacity], np.int64),
                     f"capacity{c}": capacity, f"threshold{c}": np.array(threshold, dtype),
                     f"wide{c}": wide, f"bucket_size{c}": bucket_size})
    np.savez(tmp_path / "cases.npz", **data)
    expected = [ref.hash_select(data[f"g{c}"], data[f"threshold{c}"], tuple(map(int, data[f"seed{c}"])), cases[c][2],
                                cases[c][5])
                for c in range(len(cases))]
    assert len(expected[0][2]) == 300007 and len(expected[5][2]) == 200003, "everything selected"
    for threads in (1, 2, 3):
        out = tmp_path / f"out{threads}.npz"
        threaded.run(tmp_path, _SELECT_WITH_THREADS, threads, tmp_path / "cases.npz", out)
        got = np.load(out)
        for c, (expected_values, expected_indices, _) in enumerate(expected):
            what = f"{threads} thread(s), case {cases[c]}"
            assert got[f"indices{c}"].dtype == (np.int64 if cases[c][4] else np.int32), what
            np.testing.assert_array_equal(got[f"indices{c}"], expected_indices, err_msg=what)
            assert got[f"values{c}"].tobytes() == expected_values.tobytes(), what


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("n, num_samples, k", [
    (0, 10, 1), (1, 10, 1), (1000, 1, 1), (1000, 7, 3), (1000, 1000, 10), (1000, 5000, 5000),
    (100003, 512, 1), (100003, 1000, 17), (100003, 4096, 4096), ((1 << 20) + 3, 10486, 105)])
@pytest.mark.parametrize("specials", [False, True], ids=["finite", "nan_inf"])
def test_sampled_threshold_matches_reference(n, num_samples, k, dtype, specials):
    g = gradient(n, dtype, seed=n + 1, specials=specials)
    got = ops.sampled_threshold(g, (n, 3), num_samples, k)
    assert got.dtype == dtype and got.shape == ()
    expected = ref.sampled_threshold(g, (n, 3), num_samples, k)
    assert got.numpy().tobytes() == np.asarray(expected).tobytes(), (got.numpy(), expected)


@pytest.mark.parametrize("dtype", [tf.float32, tf.float64, tf.float16], ids=lambda d: d.name)
@pytest.mark.parametrize("n, num_samples, k", [
    (1 << 20, 20000, 1), (1 << 20, 20000, 200), (1 << 20, 20000, 5000), (1 << 20, 20000, 19999),
    (30000, 40000, 3000)])
def test_sampled_threshold_with_ties_and_signed_zeros(n, num_samples, k, dtype):
    """Few distinct magnitudes (many ties at the k-th), -0, NaN and +-Inf: the
    k-th largest still matches the sort-based reference bit for bit, whatever
    order the kernel prunes its candidates in."""
    rng = np.random.default_rng(k)
    g = (rng.integers(-8, 9, n) * 0.25).astype(np.float32)
    g[rng.choice(n, n // 10, replace=False)] = -0.0
    g[rng.choice(n, 50, replace=False)] = np.nan
    g[rng.choice(n, 50, replace=False)] = np.inf
    g = g.astype(dtype.as_numpy_dtype)
    got = ops.sampled_threshold(g, (k, 5), num_samples, k)
    expected = ref.sampled_threshold(g, (k, 5), num_samples, k)
    assert got.numpy().tobytes() == np.asarray(expected).tobytes(), (got.numpy(), expected)


def test_sampled_threshold_samples_runs_across_the_whole_tensor():
    n, samples = 1 << 20, 10486
    positions = ref.sample_positions((1, 2), samples, n)
    assert positions.min() < n // 40 and positions.max() > n - n // 40
    assert len(np.unique(positions // (n // 41))) == 41  # every stratum is visited


def test_sampled_threshold_estimates_the_quantile():
    """About ratio * n elements pass the estimated threshold (DGC's 1% sample)."""
    g = gradient(1 << 22, tf.float32, seed=5)
    for ratio in (0.001, 0.01):
        samples = int(0.01 * g.size)
        k = int(ratio * samples)
        t = ops.sampled_threshold(g, (9, 9), samples, k).numpy()
        passed = np.count_nonzero(np.abs(g) >= t)
        # k sampled elements above the threshold: a relative error of about 1/sqrt(k)
        assert abs(passed / (ratio * g.size) - 1) < 3 / np.sqrt(k), (ratio, passed)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("k", [1, 2, 5, 16])
def test_sparse_decode_is_the_sum_of_dense_decodes(k, dtype):
    n, m = 3000, 200
    lists = []
    for worker in range(k):
        values, indices = ops.hash_select(gradient(n, dtype, seed=worker), 1.0, (worker, 1), m)
        lists.append((values.numpy(), indices.numpy()))
    all_values = np.concatenate([v for v, _ in lists])
    all_indices = np.concatenate([i for _, i in lists]).astype(np.int32)
    decoded = ops.sparse_decode(all_values, all_indices, n).numpy()
    np.testing.assert_array_equal(decoded, ref.sparse_decode(all_values, all_indices, n))
    dense_sum = sum(ref.sparse_decode(v, i, n).astype(np.float64) for v, i in lists)
    tol = {tf.bfloat16: 0.1, tf.float16: 0.02}.get(dtype, 1e-6)  # K roundings in the element type
    np.testing.assert_allclose(decoded.astype(np.float64), dense_sum, rtol=tol, atol=tol)


def test_sparse_decode_adds_duplicates_and_skips_empty_slots():
    out = ops.sparse_decode(np.array([1.0, 2.0, 5.0, 7.0], np.float32), np.array([3, 3, -1, 0], np.int32), 5)
    np.testing.assert_array_equal(out.numpy(), [7.0, 0, 0, 3.0, 0])


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("k", [2, 3, 5])
def test_sparse_decode_with_a_divisor_is_the_mean(k, dtype):
    """divisor=K: each element's in-order sum times 1/K (in float32, float64 for
    float64), once: what from_sum's division gave, to a rounding."""
    n, m = 3000, 200
    lists = [ops.hash_select(gradient(n, dtype, seed=w, specials=True), 1.0, (w, 1), m) for w in range(k)]
    values = np.concatenate([v.numpy() for v, _ in lists])
    indices = np.concatenate([i.numpy() for _, i in lists])
    mean = ops.sparse_decode(values, indices, n, divisor=k).numpy()
    np.testing.assert_array_equal(mean.astype(np.float64),  # NaN matches NaN in float64, not bfloat16
                                  ref.sparse_decode(values, indices, n, divisor=k).astype(np.float64))
    divided = (ops.sparse_decode(values, indices, n) / k).numpy().astype(np.float64)
    tol = {tf.bfloat16: 0.01, tf.float16: 0.001}.get(dtype, 1e-6)
    np.testing.assert_allclose(mean.astype(np.float64), divided, rtol=tol, atol=tol)
    assert np.isnan(mean[3]) and np.isinf(mean[7]), "NaN and Inf pass through the mean"


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64], ids=str)
def test_scale_at_clears_or_scales_each_listed_element_once(dtype, index_dtype):
    x = gradient(1001, dtype, specials=True).reshape(7, 143)
    indices = np.array([5, 3, -1, 5, 7, 1000, 9, 0, 5, -1], index_dtype)  # 5 thrice; NaN at 3, Inf at 7
    cleared = ops.scale_at(x, indices, 0).numpy()
    assert cleared.shape == x.shape
    expected = x.copy().reshape(-1)
    expected[[5, 3, 7, 1000, 9, 0]] = 0  # NaN and Inf too: nothing of a sent element stays
    assert cleared.reshape(-1).tobytes() == expected.tobytes()
    halved = ops.scale_at(x, indices, 0.5).numpy().reshape(-1)
    np.testing.assert_array_equal(halved.astype(np.float64), ref.scale_at(x, indices, 0.5).reshape(-1).astype(np.float64))
    assert halved[5] == (x.reshape(-1)[5].astype(np.float64) * 0.5).astype(x.dtype)  # once, not thrice
    assert np.isnan(halved[3]) and np.isinf(halved[7])
    assert ops.scale_at(x, indices, 1).numpy().tobytes() == x.tobytes()
    assert ops.scale_at(np.zeros(0, x.dtype), np.array([-1, -1], index_dtype), 0).shape == (0,)


# Runs sparse_decode (divisor 1 and 3) and scale_at (factors 0 and 0.5) on each
# case of an .npz file with a given number of intra-op threads and saves the outputs.
_DECODE_WITH_THREADS = """
import sys
import numpy as np
import tensorflow as tf
from tfcomp import ops
cases = np.load(sys.argv[2])
out = {}
for c in range(int(cases["count"])):
    values, indices, n = cases[f"values{c}"], cases[f"indices{c}"], int(cases[f"n{c}"])
    out[f"sum{c}"] = ops.sparse_decode(values, indices, n).numpy()
    out[f"mean{c}"] = ops.sparse_decode(values, indices, n, divisor=3).numpy()
    x = cases[f"x{c}"]
    out[f"cleared{c}"] = ops.scale_at(x, indices, 0).numpy()
    out[f"halved{c}"] = ops.scale_at(x, indices, 0.5).numpy()
np.savez(sys.argv[3], **out)
"""


def sorted_runs(rng, n, runs, length, pad):
    """What K = runs workers' select_largest lists gather to: each an increasing list of
    distinct indices, then its pad -1 slots; runs share indices (their sum's order shows)."""
    lists = [np.concatenate([np.sort(rng.choice(n, length, replace=False)), np.full(pad, -1)]) for _ in range(runs)]
    return np.concatenate(lists)


def test_sparse_decode_and_scale_at_on_large_lists_match_reference_on_any_thread_count(tmp_path):
    """Lists longer than a partition segment (2^16 entries) over outputs of several
    chunks (2^16 elements) and not a multiple of one, many repeats (the sum's order
    shows with large and small values), -1 slots, NaN and Inf: bit for bit the
    in-order reference on 1, 2 and 3 threads. Random lists take the partition; lists of
    up to 64 sorted runs (TopK's and DGC's, a run per worker) are read in place, and
    65 runs take the partition again."""
    cases = [(np.float32, 300007, 200000, np.int32), (np.float64, 200003, 150001, np.int64),
             (np.float16, 65536 * 3, 70000, np.int32), (np.float32, 1000, 140000, np.int64),
             (np.float32, 300007, (3, 60000, 500), np.int32), (np.float64, 200003, (8, 20000, 7), np.int64),
             (np.float32, 65536 * 2 + 5, (64, 900, 0), np.int32), (np.float32, 65536 * 2 + 5, (65, 900, 0), np.int32),
             (np.float16, 70001, (2, 30000, 1), np.int64)]
    data = {"count": len(cases)}
    expected = []
    for c, (dtype, n, count, index_dtype) in enumerate(cases):
        rng = np.random.default_rng(c)
        if isinstance(count, tuple):
            indices = sorted_runs(rng, n, *count).astype(index_dtype)
            count = indices.size
        else:
            indices = rng.integers(-1, n, count).astype(index_dtype)
        values = (rng.standard_normal(count) * np.where(rng.random(count) < 0.1, 1e4, 1)).astype(dtype)
        values[rng.choice(count, 20, replace=False)] = np.nan
        values[rng.choice(count, 20, replace=False)] = np.inf
        x = rng.standard_normal(n).astype(dtype)
        x[rng.choice(n, 20, replace=False)] = np.nan
        data.update({f"values{c}": values, f"indices{c}": indices, f"n{c}": n, f"x{c}": x})
        valid = indices >= 0
        total = np.zeros(n, dtype)
        np.add.at(total, indices[valid], values[valid])  # in list order, rounding to dtype each time
        acc = np.float64 if dtype == np.float64 else np.float32
        with np.errstate(invalid="ignore", over="ignore"):
            mean = (total.astype(acc) * (acc(1) / acc(3))).astype(dtype)
        expected.append((total, mean, ref.scale_at(x, indices, 0), ref.scale_at(x, indices, 0.5)))
    np.savez(tmp_path / "cases.npz", **data)
    for threads in (1, 2, 3):
        out = tmp_path / f"out{threads}.npz"
        threaded.run(tmp_path, _DECODE_WITH_THREADS, threads, tmp_path / "cases.npz", out)
        got = np.load(out)
        for c, want in enumerate(expected):
            for name, w in zip(("sum", "mean", "cleared", "halved"), want):
                what = f"{threads} thread(s), case {cases[c]}, {name}"
                g = got[f"{name}{c}"]
                nan = np.isnan(w.astype(np.float64))
                np.testing.assert_array_equal(np.isnan(g.astype(np.float64)), nan, err_msg=what)
                assert g[~nan].tobytes() == w[~nan].tobytes(), what


@pytest.mark.parametrize("call, message", [
    (lambda: ops.sparse_decode(np.ones(2, np.float32), np.array([0, 1], np.int32), 5, divisor=0), "divisor must be >= 1"),
    (lambda: ops.scale_at(np.ones(5, np.float32), np.array([0, 5], np.int32), 0), "outside \\[0, n = 5\\)"),
    (lambda: ops.scale_at(np.ones(5, np.float32), np.array([-2], np.int64), 0), "indices\\[0\\] = -2 is outside"),
    (lambda: ops.scale_at(np.ones(5, np.float32), np.array([[0]], np.int32), 0), "rank 1|must be a vector"),
    (lambda: ops.scale_at(np.ones(5, np.float32), np.array([0], np.int32), [0, 1]), "rank 0|must be a scalar"),
    (lambda: ops.scale_at(np.ones(5, np.int32), np.array([0], np.int32), 0), "float16, bfloat16, float32, float64"),
    (lambda: ops.sparse_decode(np.ones(2, np.float32), np.array([0, 5], np.int32), 5), "outside \\[0, n = 5\\)"),
    (lambda: ops.sparse_decode(np.ones(2, np.float32), np.array([0, -2], np.int32), 5), "outside"),
    (lambda: ops.sparse_decode(np.ones(3, np.float32), np.array([0, 1], np.int32), 5), "one length|Dimensions must be equal"),
    (lambda: ops.sparse_decode(np.ones(1, np.float32), np.array([0], np.int32), -1), "n must be >= 0"),
    (lambda: ops.hash_select(np.ones(4, np.float32), np.ones(2, np.float32), (1, 2), 2), "threshold must be a scalar|rank 0"),
    (lambda: ops.hash_select(np.ones(4, np.float32), 1.0, (1, 2, 3), 2), "seed must be an int64 vector of 2"),
    (lambda: ops.hash_select(np.ones(4, np.float32), 1.0, (1, 2), -1), "capacity must be >= 0"),
    (lambda: ops.hash_select(np.ones(4, np.int32), 1, (1, 2), 2), "float16, bfloat16, float32, float64"),
    (lambda: ops.sampled_threshold(np.ones(4, np.float32), (1, 2), 2, 3), "need 1 <= k <= num_samples"),
    (lambda: ops.library().tfcomp_sampled_threshold(np.ones(4, np.float32), np.ones(3, np.int64),
                                                     num_samples=2, k=1), "seed must be an int64 vector of 2"),
    (lambda: ops.library().tfcomp_sampled_threshold(np.ones(4, np.float32), np.ones(2, np.int64),
                                                     num_samples=2, k=3), "k = 3 is larger than num_samples = 2"),
])
def test_bad_input_is_rejected_with_a_message(call, message):
    with pytest.raises((tf.errors.InvalidArgumentError, ValueError, TypeError), match=message):
        call()
