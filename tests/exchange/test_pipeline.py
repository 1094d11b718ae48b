"""The exchange's pipeline: buckets in backward order, each exchanged on its own
(in-process emulator, eagerly and in compiled steps)."""
import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st

import tfcomp
from tfcomp.exchange.step import FINITE_FLAG_BYTES, Exchange
from tfcomp.testing import Emulator
from tests.stacks import NO_KERAS

pytestmark = [pytest.mark.usefixtures("compress_from_the_first_step"), NO_KERAS]  # what compression does, from step 0

# Variables' order; backward makes the last first. 64x64 float32 is 16 KiB.
SHAPES = [(64, 64), (64,), (64, 64), (64,), (64, 64), (64, 10)]
NAMES = ["l0/kernel", "l0/bias", "l1/kernel", "l1/bias", "l2/kernel", "l3/kernel"]
K = 2
ONE_BUCKET = 2**30
SMALL = 20 * 2**10  # one kernel (16 KiB) and whatever small tensors fit beside it


def grads_at(step):
    rng = np.random.default_rng(500 + step)
    return [[tf.constant(rng.standard_normal(s).astype(np.float32)) for s in SHAPES] for _ in range(K)]


def shapes():
    return [(s, tf.float32) for s in SHAPES]


def nbytes(shape):
    return 4 * int(np.prod(shape))


@given(sizes=st.lists(st.integers(1, 5000), min_size=1, max_size=30), cap=st.integers(1, 20000))
@settings(max_examples=200, deadline=None)
def test_buckets_take_the_tensors_in_backward_order_consecutively_and_within_the_cap(sizes, cap):
    exchange = Exchange(tfcomp.NoCompression, bucket_bytes=cap)
    pipeline = exchange.pipeline([((s,), tf.float32) for s in sizes], [f"t{i}" for i in range(len(sizes))], K)
    positions = [[i for p, _, _ in bucket for i in p] for bucket in pipeline]
    assert [i for bucket in positions for i in reversed(bucket)] == list(range(len(sizes)))[::-1]
    for bucket in positions:
        assert bucket == list(range(bucket[0], bucket[-1] + 1))
        assert len(bucket) == 1 or sum(4 * sizes[i] for i in bucket) <= cap


def test_low_rank_tensors_are_stacked_only_with_same_shape_tensors_of_their_bucket():
    exchange = Exchange(tfcomp.PowerSGD(2), bucket_bytes=SMALL * 2, min_compress_elements=1)
    units = [[name for _, name, _ in bucket] for bucket in exchange.pipeline(shapes(), NAMES, K)]
    # 40 KiB: l3, l2, l1 and l0's bias fit; l0's kernel, of l1's and l2's shape, goes alone
    assert units == [["l0/bias", "l1/kernel+l2/kernel", "l1/bias", "l3/kernel"], ["l0/kernel"]]
    one = Exchange(tfcomp.PowerSGD(2), bucket_bytes=ONE_BUCKET, min_compress_elements=1)
    assert [name for _, name, _ in one.units(shapes(), NAMES, K)] == \
        ["l0/kernel+l1/kernel+l2/kernel", "l0/bias", "l1/bias", "l3/kernel"]


def test_the_collectives_go_in_bucket_order_then_the_flag():
    emu = Emulator(K, tfcomp.EFSignSGD, bucket_bytes=SMALL, min_compress_elements=1, selection=False)
    emu.step(grads_at(0), NAMES)
    alone = Emulator(K, tfcomp.EFSignSGD, bucket_bytes=SMALL, min_compress_elements=1, selection=False,
                     check_finite=False)
    alone.step(grads_at(0), NAMES)
    # 20 KiB: [l1/bias, l2/kernel, l3/kernel], [l0/bias, l1/kernel], [l0/kernel]; in each bucket the
    # packed signs of its kernels, then its biases dense
    sign = tfcomp.EFSignSGD()
    expected = []
    for bucket in alone.exchange.pipeline(shapes(), NAMES, K):
        positions = [p[0] for p, _, _ in bucket]
        kernels = [i for i in positions if len(SHAPES[i]) == 2]
        biases = [i for i in positions if len(SHAPES[i]) == 1]
        expected.append(("allgather", sum(sign.payload_bytes(tf.TensorShape(SHAPES[i]), tf.float32)
                                          for i in kernels)))
        if biases:
            expected.append(("allreduce", sum(nbytes(SHAPES[i]) for i in biases)))
    assert [[name for _, name, _ in b] for b in alone.exchange.pipeline(shapes(), NAMES, K)] == \
        [["l1/bias", "l2/kernel", "l3/kernel"], ["l0/bias", "l1/kernel"], ["l0/kernel"]]
    assert alone.traffic == expected
    assert emu.traffic == alone.traffic + [("allreduce", FINITE_FLAG_BYTES)]


@pytest.mark.parametrize("compressor", [tfcomp.EFSignSGD(), tfcomp.TopK(ratio=0.1), tfcomp.DGC(ratio=0.1),
                                        tfcomp.FP16(), tfcomp.ACPSGD(2)], ids=lambda c: type(c).__name__)
def test_buckets_change_what_travels_together_not_the_results(compressor):
    """The same averaged gradients, step after step, in one bucket or in many: bitwise, but for
    the low-rank compressors, whose same-shape tensors of one bucket are stacked into one
    batched product (float32 rounding)."""
    many = Emulator(K, compressor, bucket_bytes=SMALL, min_compress_elements=1, selection=False)
    one = Emulator(K, compressor, bucket_bytes=ONE_BUCKET, min_compress_elements=1, selection=False)
    for step in range(3):
        for a, b in zip(many.step(grads_at(step), NAMES), one.step(grads_at(step), NAMES)):
            for x, y in zip(a, b):
                if compressor.batches_same_shape:
                    np.testing.assert_allclose(x.numpy(), y.numpy(), rtol=1e-4, atol=1e-6)
                else:
                    np.testing.assert_array_equal(x.numpy(), y.numpy())


def compiled_steps(emu):
    """Each worker's exchange as a tf.function (a compiled step, as the engines run it)."""
    return [tf.function(lambda grads, rank=rank: emu.exchange.reduce(grads, NAMES, emu.states[rank],
                                                                     emu.collectives(rank)))
            for rank in range(K)]


def poisoned(grads, tensor):
    grads = [list(g) for g in grads]
    value = grads[1][tensor].numpy().copy()
    value.reshape(-1)[3] = np.nan
    grads[1][tensor] = tf.constant(value)
    return grads


@pytest.mark.parametrize("compressor", [tfcomp.EFSignSGD(), tfcomp.DGC(ratio=0.1), tfcomp.ACPSGD(2)],
                         ids=lambda c: type(c).__name__)
def test_compiled_a_nan_in_the_last_bucket_undoes_every_buckets_state(compressor):
    """In a compiled step each bucket writes its state as it goes; a NaN in the bucket that runs
    last (the first layer's) puts every bucket's state back and skips the step on every worker."""
    emu = Emulator(K, compressor, bucket_bytes=SMALL, min_compress_elements=1, selection=False)
    reference = Emulator(K, compressor, bucket_bytes=SMALL, min_compress_elements=1, selection=False)
    steps, reference_steps = compiled_steps(emu), compiled_steps(reference)
    for step in range(2):
        emu.run(steps, [(g,) for g in grads_at(step)])
        reference.run(reference_steps, [(g,) for g in grads_at(step)])
    before = [{v.name: v.numpy() for v in state.variables} for state in emu.states]
    skipped = emu.run(steps, [(g,) for g in poisoned(grads_at(2), tensor=0)])
    for worker in skipped:
        assert all(np.all(np.isnan(out.numpy())) for out in worker)
    after = [{v.name: v.numpy() for v in state.variables} for state in emu.states]
    for b, a in zip(before, after):
        assert b.keys() == a.keys()
        for name in b:
            np.testing.assert_array_equal(b[name], a[name], err_msg=name)
    for step in range(3, 5):  # training goes on as if the step had not happened
        out = emu.run(steps, [(g,) for g in grads_at(step)])
        expected = reference.run(reference_steps, [(g,) for g in grads_at(step)])
        for a, b in zip(out, expected):
            for x, y in zip(a, b):
                np.testing.assert_array_equal(x.numpy(), y.numpy())
