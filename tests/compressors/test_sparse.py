"""TopK, RandomK, DGC and DRAGONN on the in-process K-worker emulator."""
import numpy as np
import pytest
import tensorflow as tf

import tfcomp
from tfcomp.compressors import sparse
from tfcomp.compressors.base import TensorContext
from tfcomp.exchange.step import FINITE_FLAG_BYTES
from tfcomp.testing import Emulator
from tests.stacks import NO_KERAS

pytestmark = [pytest.mark.usefixtures("compress_from_the_first_step"), NO_KERAS]  # what compression does, from step 0

SHAPE = (120, 250)
SPARSIFIERS = [tfcomp.TopK, tfcomp.RandomK, tfcomp.DGC, tfcomp.DRAGONN]


def grads(k, step, dtype=np.float32):
    rng = np.random.default_rng(100 * step + 1)
    return [[tf.constant(rng.standard_normal(SHAPE).astype(dtype))] for _ in range(k)]


def residual(emu, rank):
    return emu.states[rank].get("w")["residual"].numpy()


@pytest.mark.parametrize("cls", SPARSIFIERS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("k", [1, 2, 3])
def test_error_feedback_conserves_mass_and_workers_agree(cls, k):
    compressor = cls(ratio=0.02)
    emu = Emulator(k, compressor, min_compress_elements=1, selection=False)
    capacity = compressor.capacity(SHAPE)
    previous = [np.zeros(SHAPE, np.float32) for _ in range(k)]
    for step in range(3):
        g = grads(k, step)
        out = emu.step(g, ["w"])
        for rank in range(k):
            np.testing.assert_array_equal(out[rank][0].numpy(), out[0][0].numpy())
        sent = []
        for rank in range(k):
            accumulated = g[rank][0].numpy() + previous[rank]
            previous[rank] = residual(emu, rank)
            sent_by_worker = accumulated - previous[rank]
            nonzero = np.count_nonzero(sent_by_worker)
            assert 0 < nonzero <= capacity
            # what was sent is exactly the accumulated value where anything was sent
            mask = sent_by_worker != 0
            np.testing.assert_allclose(sent_by_worker[mask], accumulated[mask], rtol=1e-6)
            sent.append(sent_by_worker)
        if cls is not tfcomp.RandomK:  # RandomK positions may repeat; its sum is tested below
            np.testing.assert_allclose(out[0][0].numpy(), np.mean(sent, axis=0), rtol=1e-5, atol=1e-6)


def test_topk_sends_the_largest_magnitudes():
    emu = Emulator(1, tfcomp.TopK(ratio=0.01), min_compress_elements=1, selection=False)
    g = grads(1, 0)
    out = emu.step(g, ["w"])[0][0].numpy()
    flat = g[0][0].numpy().reshape(-1)
    expected = np.zeros_like(flat)
    top = np.argsort(-np.abs(flat))[:300]
    expected[top] = flat[top]
    np.testing.assert_array_equal(out.reshape(-1), expected)


def test_dragonn_slots_follow_the_hash_and_the_sampled_threshold():
    compressor = tfcomp.DRAGONN(ratio=0.01)
    emu = Emulator(1, compressor, min_compress_elements=1, selection=False)
    g = grads(1, 0)
    out = emu.step(g, ["w"])[0][0].numpy().reshape(-1)
    sent = np.nonzero(out)[0]
    m = compressor.capacity(SHAPE)
    assert 0.9 * m < len(sent) <= m  # twice the slots' candidates in buckets of 4: about 98% fill
    magnitude = np.abs(g[0][0].numpy().reshape(-1))
    assert magnitude[sent].min() > np.quantile(magnitude, 0.95), "only large elements pass the threshold"


def test_randomk_uses_allreduce_and_the_same_positions_everywhere():
    emu = Emulator(3, tfcomp.RandomK(ratio=0.01), min_compress_elements=1, selection=False, check_finite=False)
    g = grads(3, 0)
    out = emu.step(g, ["w"])[0][0].numpy()
    assert [kind for kind, _ in emu.traffic] == ["allreduce"]
    sent_positions = [set(np.nonzero(g[r][0].numpy() - residual(emu, r))[0].tolist()) for r in range(3)]
    assert sent_positions[0] == sent_positions[1] == sent_positions[2]
    mean = np.mean([x[0].numpy() for x in g], axis=0)
    mask = out != 0
    np.testing.assert_allclose(out[mask], mean[mask], rtol=1e-5)


def test_randomk_with_many_repeated_positions_decodes_each_position_once():
    """At ratio 1 on a small tensor about a third of the draws repeat a position:
    every drawn position gets the workers' mean once, the rest stay 0, and the
    residual is 0 exactly where something was sent."""
    shape = (7, 9)
    emu = Emulator(2, tfcomp.RandomK(ratio=1.0), min_compress_elements=1, selection=False, check_finite=False)
    rng = np.random.default_rng(5)
    g = [[tf.constant(rng.standard_normal(shape).astype(np.float32))] for _ in range(2)]
    out = emu.step(g, ["w"])[0][0].numpy()
    sent = residual(emu, 0) == 0
    assert 0.5 * out.size < np.count_nonzero(sent) < out.size  # repeats left some positions out
    np.testing.assert_array_equal(residual(emu, 1) == 0, sent)
    mean = (g[0][0].numpy() + g[1][0].numpy()) / 2
    np.testing.assert_allclose(out[sent], mean[sent], rtol=1e-6)
    np.testing.assert_array_equal(out[~sent], 0)
    np.testing.assert_array_equal(residual(emu, 0)[~sent], g[0][0].numpy()[~sent])


@pytest.mark.parametrize("n, k", [(1, 1), (10, 3), (1000, 1000), (2**20 + 7, 5000)])
def test_sorted_uniform_positions_are_sorted_in_range_and_fixed_by_the_seed(n, k):
    seed = tf.constant([11, 4], tf.int64)
    positions = sparse.sorted_uniform_positions(n, k, seed).numpy()
    assert positions.dtype == np.int32 and positions.shape == (k,)
    assert positions.min() >= 0 and positions.max() < n
    assert np.all(np.diff(positions) >= 0)
    np.testing.assert_array_equal(positions, sparse.sorted_uniform_positions(n, k, seed).numpy())
    assert n == 1 or not np.array_equal(
        positions, sparse.sorted_uniform_positions(n, k, tf.constant([11, 5], tf.int64)).numpy())


def test_sorted_uniform_positions_are_uniform():
    """200,000 draws over 100 cells of 10^6 positions: each cell's count is within
    5 standard deviations of 2,000, and a chi-square over the cells within its
    0.001 quantile (148.2 for 99 degrees of freedom)."""
    n, k, cells = 100_000_000, 200_000, 100
    positions = sparse.sorted_uniform_positions(n, k, tf.constant([3, 9], tf.int64)).numpy()
    counts = np.bincount(positions // (n // cells), minlength=cells)
    expected = k / cells
    assert np.all(np.abs(counts - expected) < 5 * np.sqrt(expected)), counts
    assert np.sum((counts - expected) ** 2 / expected) < 148.2


@pytest.mark.parametrize("cls", [tfcomp.TopK, tfcomp.DGC, tfcomp.DRAGONN], ids=lambda c: c.__name__)
def test_payloads_are_allgathered_values_and_indices_of_fixed_size(cls):
    compressor = cls(ratio=0.01)
    emu = Emulator(2, compressor, min_compress_elements=1, selection=False)
    emu.step(grads(2, 0), ["w"])
    m = compressor.capacity(SHAPE)
    # Float32 values and int32 indices, fused; then the non-finite flag.
    assert emu.traffic == [("allgather", 8 * m), ("allreduce", FINITE_FLAG_BYTES)]
    assert compressor.payload_bytes(SHAPE, tf.float32) == 8 * m


@pytest.mark.parametrize("cls", SPARSIFIERS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("masking", [0.0, 0.5, 1.0])
def test_momentum_masking_drops_that_fraction_of_the_velocity_where_sent(cls, masking):
    """DGC's momentum correction, step by step against NumPy: u <- 0.9 u + g,
    r <- u + r - sent, then u <- u * (1 - masking) where an element was sent."""
    compressor = cls(ratio=0.02, momentum=0.9, momentum_masking=masking)
    emu = Emulator(1, compressor, min_compress_elements=1, selection=False, check_finite=False)
    velocity, rest = np.zeros(SHAPE, np.float32), np.zeros(SHAPE, np.float32)
    for step in range(4):
        g = grads(1, step)
        out = emu.step(g, ["w"])[0][0].numpy()
        velocity = 0.9 * velocity + g[0][0].numpy()
        corrected = velocity + rest
        state = emu.states[0].get("w")
        rest = state["residual"].numpy()
        sent = corrected != rest
        assert sent.any() and np.count_nonzero(sent) <= compressor.capacity(SHAPE)
        np.testing.assert_allclose(out[sent], corrected[sent], rtol=1e-5)
        np.testing.assert_allclose(rest[~sent], corrected[~sent], rtol=1e-5, atol=1e-6)
        velocity = np.where(sent, velocity * (1 - masking), velocity)
        np.testing.assert_allclose(state["velocity"].numpy(), velocity, rtol=1e-5, atol=1e-6)


def test_momentum_masking_defaults_to_what_trained_best():
    """TopK and DGC send the largest accumulated elements and trained best unmasked, RandomK
    (large ones left behind at random) with DGC's masking, DRAGONN (some of them lost
    to hash collisions) with half (benchmarks/results/convergence.md)."""
    assert [cls(0.1).momentum_masking for cls in SPARSIFIERS] == [0.0, 1.0, 0.0, 0.5]
    assert tfcomp.DGC(0.1, momentum_masking=0.5).config()["momentum_masking"] == 0.5
    for bad in (-0.1, 1.5, "yes"):
        with pytest.raises(ValueError, match="momentum_masking is the fraction of the velocity dropped"):
            tfcomp.TopK(0.1, momentum_masking=bad)


def test_dragonn_passes_nan_on_to_the_optimizer():
    """NaN is always selected; a hash collision can only delay it (it stays in the residual)."""
    emu = Emulator(1, tfcomp.DRAGONN(ratio=0.01), min_compress_elements=1, selection=False)
    rng = np.random.default_rng(0)
    g = rng.standard_normal(SHAPE).astype(np.float32)
    g[3, 4] = np.nan
    for step in range(10):
        out = emu.step([[tf.constant(g)]], ["w"])[0][0].numpy()
        if np.isnan(out[3, 4]):
            break
        g = rng.standard_normal(SHAPE).astype(np.float32)
    assert np.isnan(out[3, 4]), "the NaN never reached the aggregate"


@pytest.mark.parametrize("cls", SPARSIFIERS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("ratio", [0, -0.1, 1.5, "0.1", None])
def test_bad_ratio_is_rejected(cls, ratio):
    with pytest.raises(ValueError, match="ratio is the fraction of elements kept and must be in \\(0, 1\\]"):
        cls(ratio=ratio)


def test_bad_momentum_is_rejected():
    with pytest.raises(ValueError, match="momentum must be .auto., a number in \\[0, 1\\) or None"):
        tfcomp.DGC(momentum=1.0)


def test_ratio_one_keeps_everything_with_topk():
    emu = Emulator(2, tfcomp.TopK(ratio=1.0), min_compress_elements=1, selection=False)
    g = grads(2, 0)
    out = emu.step(g, ["w"])[0][0].numpy()
    np.testing.assert_allclose(out, np.mean([x[0].numpy() for x in g], axis=0), rtol=1e-6)


@pytest.mark.parametrize("dtype", [np.float16, np.float64], ids=str)
def test_other_float_dtypes(dtype):
    emu = Emulator(2, tfcomp.DRAGONN(ratio=0.02), min_compress_elements=1, selection=False)
    out = emu.step(grads(2, 0, dtype), ["w"])
    assert out[0][0].dtype == tf.as_dtype(dtype)
    assert np.count_nonzero(out[0][0].numpy()) > 0


def test_hash_seed_is_shared_by_workers_and_changes_every_step():
    k = 2
    emu = Emulator(k, tfcomp.DRAGONN(ratio=0.01), min_compress_elements=1, selection=False)
    ones = [[tf.constant(np.ones(SHAPE, np.float32))] for _ in range(k)]  # every element passes

    def sent_positions(before):
        return [np.nonzero((before[r] + 1 - residual(emu, r)).reshape(-1))[0] for r in range(k)]

    emu.step(ones, ["w"])
    step1 = sent_positions([np.zeros(SHAPE, np.float32)] * k)
    np.testing.assert_array_equal(step1[0], step1[1])  # the same hash on every worker
    before = [residual(emu, r) for r in range(k)]
    emu.step(ones, ["w"])
    step2 = sent_positions(before)
    np.testing.assert_array_equal(step2[0], step2[1])
    assert set(step1[0]) != set(step2[0])  # a new hash every step



def _count_at_or_above(values, threshold):
    return int(np.sum(np.abs(values) >= threshold))


@pytest.mark.parametrize("start_factor", [0.05, 3.0])
def test_threshold_adaptation_moves_the_count_toward_k(start_factor):
    """From a threshold far too low (or high), DGC's rule (x1.3 / x0.8 per round)
    brings the count of selected elements into [0.8 k, 1.3 k]."""
    from tfcomp.compressors.sparse import ADAPT_LOWER, ADAPT_UPPER, adapt_threshold
    values = np.random.default_rng(3).standard_normal(1 << 16).astype(np.float32)
    k = 655
    start = tf.constant(np.sort(np.abs(values))[-k] * start_factor, tf.float32)
    before = _count_at_or_above(values, float(start))
    assert not ADAPT_LOWER * k <= before <= ADAPT_UPPER * k
    adapted = float(adapt_threshold(tf.constant(values), start, k, rounds=30))
    assert ADAPT_LOWER * k <= _count_at_or_above(values, adapted) <= ADAPT_UPPER * k
    one_round = float(adapt_threshold(tf.constant(values), start, k, rounds=1))
    assert one_round == pytest.approx(float(start) * (ADAPT_UPPER if before > k else ADAPT_LOWER), rel=1e-6)
    assert float(adapt_threshold(tf.constant(values), start, k, rounds=0)) == float(start)


@pytest.mark.parametrize("cls", [tfcomp.DGC, tfcomp.DRAGONN])
def test_adapt_rounds_is_a_knob_of_the_threshold_sparsifiers(cls):
    with pytest.raises(ValueError, match="adapt_rounds must be an integer >= 0"):
        cls(ratio=0.01, adapt_rounds=-1)
    assert cls(adapt_rounds=3).config()["adapt_rounds"] == 3
    emu = Emulator(2, cls(ratio=0.01, adapt_rounds=3), selection=False)
    step = grads(2, 0)
    out = emu.step(step, ["w"])
    np.testing.assert_array_equal(out[0][0].numpy(), out[1][0].numpy())
    for rank in range(2):  # error feedback still conserves mass with the adapted threshold
        sent_by_rank = step[rank][0].numpy() - residual(emu, rank)
        assert np.count_nonzero(sent_by_rank) <= emu.exchange.compressor.capacity(SHAPE)
    np.testing.assert_allclose(2 * out[0][0].numpy(),
                               sum(step[r][0].numpy() - residual(emu, r) for r in range(2)), rtol=1e-5, atol=1e-6)


def _dgc_select(candidates_per_slot, step, x, ratio=0.01):
    dgc = tfcomp.DGC(ratio=ratio, candidates_per_slot=candidates_per_slot)
    values, indices = dgc.select(tf.constant(x), TensorContext("w", 1, tf.constant(step, tf.int64)))
    return values.numpy(), indices.numpy(), dgc.capacity(x.shape)


def test_dgc_threshold_aimed_past_its_slots_fills_them_with_the_largest():
    """With the threshold aimed at twice the slots (the default) DGC fills them with the
    largest elements; aimed at the slots (its paper's, candidates_per_slot=1) a high
    sample estimate leaves some empty. Either way it sends the top of |x|."""
    x = np.random.default_rng(7).standard_normal(1 << 16).astype(np.float32)
    order = np.argsort(-np.abs(x))
    filled = {1.0: 0.0, 2.0: 0.0}
    steps = 20
    for step in range(steps):
        for c in filled:
            values, indices, slots = _dgc_select(c, step, x)
            sent = indices[indices >= 0]
            assert set(sent) == set(order[:len(sent)])
            np.testing.assert_array_equal(values[indices >= 0], x[sent])
            np.testing.assert_array_equal(values[indices < 0], 0)
            filled[c] += len(sent) / slots / steps
    assert filled[2.0] > 0.99
    assert filled[1.0] < filled[2.0]


def test_candidates_per_slot_is_a_knob_of_the_threshold_sparsifiers():
    assert tfcomp.DGC(0.1).candidates_per_slot == 2.0
    assert tfcomp.DRAGONN(0.1).candidates_per_slot == 2.0
    assert tfcomp.DRAGONN(0.1, candidates_per_slot=3).config()["candidates_per_slot"] == 3.0
    for bad in (0.5, 0, "2"):
        with pytest.raises(ValueError, match="candidates_per_slot is how many elements the threshold aims"):
            tfcomp.DGC(0.1, candidates_per_slot=bad)
    # A threshold passing every element (ratio x candidates >= 1) still sends only the slots.
    x = np.random.default_rng(8).standard_normal(1000).astype(np.float32)
    values, indices, slots = _dgc_select(3.0, 0, x, ratio=0.5)
    assert np.count_nonzero(indices >= 0) == slots == 500
    assert set(indices) == set(np.argsort(-np.abs(x))[:500])


def test_dragonn_buckets_keep_more_of_the_largest_than_single_slots():
    """Buckets of 4 slots (the default) against a slot per element (bucket_size=1, as in
    DRAGONN's paper), the same threshold and seeds: more slots filled and more of the
    exact top-k's squared magnitude sent, every element sent above the threshold."""
    x = np.random.default_rng(9).standard_normal(1 << 16).astype(np.float32)
    m = tfcomp.DRAGONN(0.01).capacity(x.shape)
    top = np.sort(np.abs(x))[-m:]
    kept = {}
    for bucket_size in (1, 4):
        dragonn = tfcomp.DRAGONN(0.01, bucket_size=bucket_size)
        filled = energy = 0.0
        for step in range(10):
            ctx = TensorContext("w", 1, tf.constant(step, tf.int64))
            values, indices = (t.numpy() for t in dragonn.select(tf.constant(x), ctx))
            np.testing.assert_array_equal(values[indices >= 0], x[indices[indices >= 0]])
            assert np.abs(values[indices >= 0]).min() >= dragonn.threshold(tf.constant(x), ctx).numpy()
            filled += np.mean(indices >= 0) / 10
            energy += np.sum(values ** 2) / np.sum(top ** 2) / 10
        kept[bucket_size] = (filled, energy)
    assert kept[4][0] > 0.95 and kept[1][0] < 0.9, kept
    assert kept[4][1] > kept[1][1] + 0.08, kept


def test_bucket_size_is_a_knob_of_dragonn():
    assert tfcomp.DRAGONN(0.1).bucket_size == 4
    assert tfcomp.DRAGONN(0.1, bucket_size=1).config()["bucket_size"] == 1
    for bad in (0, 2.0, "4", True):
        with pytest.raises(ValueError, match="bucket_size is how many slots an element hashes to"):
            tfcomp.DRAGONN(0.1, bucket_size=bad)
