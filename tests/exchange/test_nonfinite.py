"""Non-finite gradients: one worker's NaN or Inf makes every worker's aggregate
non-finite for that step, leaves all compressor state as it was, and training
continues exactly as if the step had not happened (in-process emulator)."""
import numpy as np
import pytest
import tensorflow as tf

import tfcomp
from tfcomp.exchange.step import FINITE_FLAG_BYTES, Exchange
from tfcomp.testing import Emulator
from tests.stacks import NO_KERAS

pytestmark = [pytest.mark.usefixtures("compress_from_the_first_step"), NO_KERAS]  # what compression does, from step 0

SHAPES = [(256, 128), (128,), (3, 3, 8, 16)]
NAMES = ["dense/kernel", "dense/bias", "conv/kernel"]
K = 2

COMPRESSORS = {
    "FP16": tfcomp.FP16(),
    "SignSGD": tfcomp.SignSGD(),
    "EFSignSGD": tfcomp.EFSignSGD(),
    "TopK": tfcomp.TopK(ratio=0.01),
    "RandomK": tfcomp.RandomK(ratio=0.01, momentum=0.9),
    "DGC": tfcomp.DGC(ratio=0.01, momentum=0.9),
    "DRAGONN": tfcomp.DRAGONN(ratio=0.01),
    "PowerSGD": tfcomp.PowerSGD(matrix_approximation_rank=2),
    "ACPSGD": tfcomp.ACPSGD(matrix_approximation_rank=2),
}


def grads_at(step, dtype=np.float32):
    rng = np.random.default_rng(1000 + step)
    return [[tf.constant(rng.standard_normal(s).astype(dtype)) for s in SHAPES] for _ in range(K)]


def poisoned(grads, worker, tensor, value):
    grads = [list(g) for g in grads]
    flat = grads[worker][tensor].numpy().reshape(-1).copy()
    flat[flat.size // 3] = value
    grads[worker][tensor] = tf.constant(flat.reshape(SHAPES[tensor]))
    return grads


def state_values(emu):
    return [{v.name: v.numpy() for v in state.variables} for state in emu.states]


def emulator(compressor):
    return Emulator(K, compressor, min_compress_elements=1, selection=False)


@pytest.mark.parametrize("value", [np.inf, -np.inf, np.nan])
@pytest.mark.parametrize("name", list(COMPRESSORS))
def test_a_nonfinite_gradient_skips_the_step_on_every_worker(name, value):
    compressor = COMPRESSORS[name]
    emu, reference = emulator(compressor), emulator(compressor)
    for step in range(3):
        emu.step(grads_at(step), NAMES)
        reference.step(grads_at(step), NAMES)
    before = state_values(emu)
    assert any(np.any(v != 0) for worker in before for k, v in worker.items() if "step" not in k) or \
        name in ("FP16", "SignSGD")  # stateless compressors

    results = emu.step(poisoned(grads_at(99), worker=1, tensor=0, value=value), NAMES)
    for worker in results:
        for out in worker:
            assert np.all(np.isnan(out.numpy())), "every worker's aggregate must be non-finite"
    after = state_values(emu)
    for b, a in zip(before, after):
        assert b.keys() == a.keys()
        for key in b:
            np.testing.assert_array_equal(a[key], b[key], err_msg=f"{name}: state {key} changed")

    # Training goes on finitely, exactly as if the poisoned step had not happened.
    for step in range(3, 7):
        got = emu.step(grads_at(step), NAMES)
        expected = reference.step(grads_at(step), NAMES)
        for g_worker, e_worker in zip(got, expected):
            for g, e in zip(g_worker, e_worker):
                assert np.all(np.isfinite(g.numpy()))
                np.testing.assert_array_equal(g.numpy(), e.numpy())


@pytest.mark.parametrize("tensor", [0, 1])  # a compressed tensor, and one that goes dense
def test_the_flag_travels_whichever_tensor_holds_the_overflow(tensor):
    emu = emulator(tfcomp.EFSignSGD)
    results = emu.step(poisoned(grads_at(0), worker=0, tensor=tensor, value=np.inf), NAMES)
    assert all(np.all(np.isnan(out.numpy())) for worker in results for out in worker)
    assert int(emu.states[0].step.numpy()) == 0


def test_warmup_counts_exchanged_steps_only():
    emu = Emulator(K, tfcomp.EFSignSGD, min_compress_elements=1, warmup_steps=2)
    emu.step(grads_at(0), NAMES)
    emu.step(poisoned(grads_at(1), worker=1, tensor=2, value=np.nan), NAMES)
    assert [int(s.step.numpy()) for s in emu.states] == [1, 1]
    residual = [v for v in emu.states[0].variables if "residual" in v.name]
    assert residual and all(not np.any(v.numpy()) for v in residual), "still warming up: nothing compressed"


@pytest.mark.parametrize("dtype", [np.float16, np.float64])
def test_other_float_dtypes(dtype):
    emu = emulator(tfcomp.EFSignSGD)
    results = emu.step(poisoned(grads_at(0, dtype), worker=1, tensor=0, value=np.inf), NAMES)
    for worker in results:
        for out in worker:
            assert out.dtype == dtype and np.all(np.isnan(out.numpy()))
    finite = emu.step(grads_at(1, dtype), NAMES)
    assert all(np.all(np.isfinite(out.numpy())) for worker in finite for out in worker)


def test_the_flag_is_one_float32_allreduce_per_step_after_every_bucket():
    """The flag waits for every gradient, so it goes last: no bucket's collectives wait for it."""
    emu = emulator(tfcomp.EFSignSGD)
    emu.step(grads_at(0), NAMES)
    assert emu.traffic[-1] == ("allreduce", FINITE_FLAG_BYTES)
    unchecked = Emulator(K, tfcomp.EFSignSGD, min_compress_elements=1, selection=False, check_finite=False)
    unchecked.step(grads_at(0), NAMES)
    assert emu.traffic[:-1] == unchecked.traffic
    exchange = Exchange(tfcomp.EFSignSGD)
    shapes = [(s, tf.float32) for s in SHAPES]
    assert exchange.payload_bytes(shapes, K) == \
        Exchange(tfcomp.EFSignSGD, check_finite=False).payload_bytes(shapes, K) + FINITE_FLAG_BYTES


@pytest.mark.parametrize("compression", [tfcomp.NoCompression(), tfcomp.Plan({}, default=None)],
                         ids=["NoCompression", "all-dense Plan"])
def test_nothing_compressed_sends_no_flag_and_keeps_a_nan_in_its_own_tensor(compression):
    """With no state to protect, the exchange does what the engine's own dense allreduce does."""
    emu = emulator(compression)
    results = emu.step(poisoned(grads_at(0), worker=1, tensor=0, value=np.nan), NAMES)
    assert all(kind != "allreduce" or nbytes != FINITE_FLAG_BYTES for kind, nbytes in emu.traffic)
    for worker in results:
        assert np.isnan(worker[0].numpy()).sum() == 1, "the poisoned element alone, as a dense sum gives"
        for out in worker[1:]:
            assert np.all(np.isfinite(out.numpy()))
    assert int(emu.states[0].step.numpy()) == 1
    shapes = [(s, tf.float32) for s in SHAPES]
    dense_bytes = sum(int(np.prod(s)) * 4 for s in SHAPES)
    assert Exchange(compression).payload_bytes(shapes, K, names=NAMES) == dense_bytes


def test_check_finite_must_be_a_bool():
    with pytest.raises(ValueError, match="check_finite"):
        Exchange(check_finite="yes")
