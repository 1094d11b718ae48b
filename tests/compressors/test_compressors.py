"""Compressors and the exchange, on the in-process K-worker emulator."""
import numpy as np
import pytest
import tensorflow as tf

import tfcomp
from tfcomp.exchange import fusion
from tfcomp.compressors import Collective, Compressor, Payload, PayloadSpec, Round, TensorContext, resolve
from tfcomp.exchange.step import Exchange
from tfcomp.testing import Emulator
from tests.stacks import NO_KERAS

pytestmark = NO_KERAS

SHAPES = [(40, 50), (50,), (3, 3, 4, 8), (7, 33)]
NAMES = ["dense/kernel", "dense/bias", "conv/kernel", "out/kernel"]


def worker_grads(k, seed=0, shapes=SHAPES, dtype=np.float32):
    rng = np.random.default_rng(seed)
    return [[tf.constant(rng.standard_normal(s).astype(dtype)) for s in shapes] for _ in range(k)]


def mean_over_workers(grads):
    return [np.mean([g[i].numpy().astype(np.float64) for g in grads], axis=0) for i in range(len(grads[0]))]


def assert_identical_on_all_workers(results):
    for worker in results[1:]:
        for a, b in zip(results[0], worker):
            np.testing.assert_array_equal(a.numpy(), b.numpy())


def sign_of(x):
    return np.where(x >= 0, 1.0, -1.0)


@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_no_compression_is_the_exact_mean(k):
    grads = worker_grads(k)
    results = Emulator(k, tfcomp.NoCompression, min_compress_elements=1).step(grads, NAMES)
    assert_identical_on_all_workers(results)
    for out, expected in zip(results[0], mean_over_workers(grads)):
        np.testing.assert_allclose(out.numpy(), expected, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("k", [2, 3])
def test_fp16_is_the_mean_at_half_precision(k):
    grads = worker_grads(k, seed=1)
    emu = Emulator(k, tfcomp.FP16, min_compress_elements=1, check_finite=False)  # payloads only
    results = emu.step(grads, NAMES)
    assert_identical_on_all_workers(results)
    for out, expected in zip(results[0], mean_over_workers(grads)):
        assert out.dtype == tf.float32
        np.testing.assert_allclose(out.numpy(), expected, rtol=2e-3, atol=2e-3)
    compressed = [s for s in SHAPES if len(s) > 1]
    dense = [s for s in SHAPES if len(s) == 1]
    sent = sum(n for kind, n in emu.traffic)
    assert sent == sum(2 * np.prod(s) for s in compressed) + sum(4 * np.prod(s) for s in dense)


@pytest.mark.parametrize("k", [1, 2, 3, 4, 5])
def test_signsgd_is_the_majority_vote(k):
    grads = worker_grads(k, seed=k)
    emu = Emulator(k, tfcomp.SignSGD, min_compress_elements=1)
    results = emu.step(grads, NAMES)
    assert_identical_on_all_workers(results)
    for i, out in enumerate(results[0]):
        if len(SHAPES[i]) == 1:
            continue  # 1-D tensors go dense
        votes = sum(sign_of(g[i].numpy()) for g in grads)
        np.testing.assert_array_equal(out.numpy(), np.sign(votes))
    assert {kind for kind, _ in emu.traffic} == {"allgather", "allreduce"}


def test_signsgd_sends_one_bit_per_element():
    compressor = tfcomp.SignSGD()
    assert compressor.payload_bytes((64, 32), tf.float32) == 64 * 32 // 8
    assert compressor.compression_rate((64, 32), tf.float32) == 1 / 32
    assert compressor.payload_bytes((33,), tf.float32) == 8  # two words


@pytest.mark.parametrize("k", [1, 2, 3])
def test_efsignsgd_conserves_mass_on_every_worker(k):
    emu = Emulator(k, tfcomp.EFSignSGD, min_compress_elements=1)
    shapes, names = SHAPES[:1] + SHAPES[2:], NAMES[:1] + NAMES[2:]
    residuals = [[np.zeros(s, np.float64) for s in shapes] for _ in range(k)]
    for step in range(4):
        grads = worker_grads(k, seed=10 + step, shapes=shapes)
        results = emu.step(grads, names)
        assert_identical_on_all_workers(results)
        for i, name in enumerate(names):
            sent = []
            for r in range(k):
                corrected = grads[r][i].numpy() + residuals[r][i]
                new_residual = emu.states[r].tensor_state(name, {})["residual"].numpy()
                scale = np.mean(np.abs(corrected))
                np.testing.assert_allclose(corrected - new_residual, scale * sign_of(corrected),
                                           rtol=1e-5, atol=1e-5)
                sent.append(corrected - new_residual)
                residuals[r][i] = new_residual
            np.testing.assert_allclose(results[0][i].numpy(), np.mean(sent, axis=0), rtol=1e-5, atol=1e-6)


def test_state_restored_from_a_checkpoint_continues_identically(tmp_path):
    def run(emu, seeds):
        return [emu.step(worker_grads(2, seed=s), NAMES) for s in seeds]

    uninterrupted = Emulator(2, tfcomp.EFSignSGD, min_compress_elements=1)
    expected = run(uninterrupted, [1, 2, 3, 4])[-1]

    first = Emulator(2, tfcomp.EFSignSGD, min_compress_elements=1)
    run(first, [1, 2])
    paths = [tf.train.Checkpoint(state=s).write(str(tmp_path / f"w{r}")) for r, s in enumerate(first.states)]
    resumed = Emulator(2, tfcomp.EFSignSGD, min_compress_elements=1)
    grads = worker_grads(2)[0]
    specs = resumed.exchange.state_specs([(g.shape, g.dtype) for g in grads], NAMES, 2)
    for state, path in zip(resumed.states, paths):
        state.build(specs)
        tf.train.Checkpoint(state=state).read(path).assert_existing_objects_matched()
    assert int(resumed.states[0].step.numpy()) == 2
    got = run(resumed, [3, 4])[-1]
    for worker_expected, worker_got in zip(expected, got):
        for a, b in zip(worker_expected, worker_got):
            np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_plan_sends_small_one_dimensional_and_integer_tensors_dense():
    ex = Exchange(tfcomp.SignSGD, min_compress_elements=100)
    assert isinstance(ex.plan((1000,), tf.float32, 2), tfcomp.NoCompression)
    assert isinstance(ex.plan((5, 5), tf.float32, 2), tfcomp.NoCompression)
    assert isinstance(ex.plan((50, 50), tf.int32, 2), tfcomp.NoCompression)
    assert isinstance(ex.plan((50, 50), tf.float32, 2), tfcomp.SignSGD)
    assert isinstance(ex.plan((50, 50), tf.bfloat16, 2), tfcomp.SignSGD)


def test_indexed_slices_are_made_dense():
    k = 2
    slices = [tf.IndexedSlices(tf.constant([[1.0, 2.0]] * 2) * (r + 1), tf.constant([0, 3]),
                               tf.constant([5, 2])) for r in range(k)]
    results = Emulator(k, tfcomp.NoCompression).step([[s] for s in slices], ["embedding"])
    expected = np.zeros((5, 2))
    expected[[0, 3]] = [[1.5, 3.0]] * 2
    np.testing.assert_allclose(results[0][0].numpy(), expected)


def test_sum_reduction_scales_by_workers():
    grads = worker_grads(3)
    results = Emulator(3, tfcomp.NoCompression).step(grads, NAMES, reduce_op="sum")
    for out, expected in zip(results[0], mean_over_workers(grads)):
        np.testing.assert_allclose(out.numpy(), 3 * expected, rtol=1e-5, atol=1e-6)


def test_fusion_round_trips_mixed_dtypes_through_allgather():
    k = 3
    per_worker = [[tf.constant(np.arange(10, dtype=np.uint32) + r), tf.constant([1.5 * r], tf.float16),
                   tf.constant([[r, -r]], tf.float64), tf.constant([r], tf.uint8)] for r in range(k)]

    emu = Emulator(k, check_finite=False)  # payloads only
    results = [None] * k
    import threading
    from tfcomp.testing.emulator import _WorkerCollectives

    def run(r):
        results[r] = fusion.allgather_fused(per_worker[r], _WorkerCollectives(r, emu.meeting), cap_bytes=20)

    threads = [threading.Thread(target=run, args=(r,)) for r in range(k)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    for i in range(4):
        expected = np.stack([per_worker[r][i].numpy() for r in range(k)])
        assert results[0][i].dtype == per_worker[0][i].dtype
        np.testing.assert_array_equal(results[0][i].numpy(), expected)
    # 40, 2 (+2 padding), 16 and 1 (+3 padding) bytes under a 20-byte cap: three int32 buffers.
    assert emu.traffic == [("allgather", 40), ("allgather", 20), ("allgather", 4)]


@pytest.mark.parametrize("cap, expected_groups",
                         [(1 << 30, [[0, 1, 2]]), (100, [[0], [1, 2]]), (1, [[0], [1], [2]])])
def test_buckets_respect_the_cap(cap, expected_groups):
    assert fusion.buckets([80, 40, 50], cap) == expected_groups


def test_compressed_payloads_use_scaled_buckets():
    k = 2
    shapes = [(64, 64)] * 4
    emu = Emulator(k, tfcomp.SignSGD, bucket_bytes=4 * 64 * 64 * 2, check_finite=False)  # two dense tensors per bucket
    emu.step(worker_grads(k, shapes=shapes), [f"t{i}" for i in range(4)])
    # Each payload is 512 bytes; the compressed cap is 32768 / 32 = 1024 bytes: two per bucket.
    assert emu.traffic == [("allgather", 1024), ("allgather", 1024)]


class TwoRoundSum(Compressor):
    """A test compressor with two rounds: allreduce the sum, then allgather it to check agreement."""

    def payload_specs(self, shape, dtype):
        return [[PayloadSpec(tuple(shape), dtype, Collective.ALLREDUCE)],
                [PayloadSpec(tuple(shape), dtype, Collective.ALLGATHER)]]

    def compress(self, grad, state, ctx):
        def second(summed):
            return Round([Payload(summed[0], Collective.ALLGATHER)],
                         lambda gathered: gathered[0][0] / ctx.num_workers)
        return Round([Payload(grad, Collective.ALLREDUCE)], second)


def test_multi_round_compressors_run_each_round():
    grads = worker_grads(2)
    emu = Emulator(2, TwoRoundSum(), min_compress_elements=1)
    results = emu.step(grads, NAMES)
    for out, expected in zip(results[0], mean_over_workers(grads)):
        np.testing.assert_allclose(out.numpy(), expected, rtol=1e-6, atol=1e-7)
    kinds = [kind for kind, _ in emu.traffic]
    assert kinds.index("allgather") > kinds.index("allreduce")
    assert TwoRoundSum().payload_bytes((4, 4), tf.float32) == 2 * 64


def test_seeds_depend_on_name_step_and_global_seed():
    step = tf.constant(3, tf.int64)
    a = TensorContext("a", 2, step).seed().numpy()
    assert np.array_equal(a, TensorContext("a", 2, step).seed().numpy())
    assert not np.array_equal(a, TensorContext("b", 2, step).seed().numpy())
    assert not np.array_equal(a, TensorContext("a", 2, step + 1).seed().numpy())
    assert not np.array_equal(a, TensorContext("a", 2, step, global_seed=1).seed().numpy())


def test_resolve_takes_classes_instances_and_none():
    assert isinstance(resolve(tfcomp.SignSGD), tfcomp.SignSGD)
    instance = tfcomp.FP16()
    assert resolve(instance) is instance
    assert isinstance(resolve(None), tfcomp.NoCompression)
    with pytest.raises(ValueError, match="compression must be a tfcomp compressor"):
        resolve("topk")


def test_unknown_static_shape_is_a_clear_error():
    with pytest.raises(ValueError, match="fully defined static shape"):
        @tf.function(input_signature=[tf.TensorSpec([None, 4])])
        def f(g):
            return Emulator(1, tfcomp.SignSGD).exchange.reduce([g], ["g"], Emulator(1).states[0],
                                                               None)
        f.get_concrete_function()


def test_a_failing_worker_does_not_hang_the_others():
    class Broken(tfcomp.NoCompression):
        def compress(self, grad, state, ctx):
            if ctx.name == "bad":
                raise RuntimeError("boom")
            return super().compress(grad, state, ctx)

    emu = Emulator(2, Broken(), min_compress_elements=1)
    grads = [[tf.ones((4, 4)), tf.ones((4, 4))] for _ in range(2)]
    with pytest.raises(RuntimeError, match="boom"):
        emu.step(grads, ["good", "bad"])


@pytest.mark.parametrize("options, message", [
    ({"bucket_bytes": 0}, "bucket_bytes must be a positive number of bytes"),
    ({"bucket_bytes": 1.5e6}, "bucket_bytes must be a positive number of bytes"),
    ({"min_compress_elements": -1}, "min_compress_elements must be an integer >= 0"),
])
def test_bad_exchange_options_are_rejected(options, message):
    with pytest.raises(ValueError, match=message):
        Exchange(tfcomp.SignSGD, **options)
