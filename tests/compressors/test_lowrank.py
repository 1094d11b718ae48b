"""PowerSGD and ACP-SGD on the in-process emulator: the invariants of the papers."""
import logging

import numpy as np
import pytest
import tensorflow as tf

import tfcomp
from tfcomp.compressors.base import TensorContext
from tfcomp.compressors.lowrank import matrix_shape, orthonormalize
from tfcomp.exchange.step import Exchange
from tfcomp.testing import Emulator
from tests.stacks import NO_KERAS

pytestmark = [pytest.mark.usefixtures("compress_from_the_first_step"), NO_KERAS]  # what compression does, from step 0

SHAPE = (64, 48)


def grads(k, step, shape=SHAPE):
    rng = np.random.default_rng(10 * step + 3)
    return [[tf.constant(rng.standard_normal(shape).astype(np.float32))] for _ in range(k)]


def state(emu, rank):
    return {name: v.numpy() for name, v in emu.states[rank].get("w").items()}


def emulator(k, compressor, **options):
    return Emulator(k, compressor, min_compress_elements=1, **options)


@pytest.mark.parametrize("cls", [tfcomp.PowerSGD, tfcomp.ACPSGD], ids=lambda c: c.__name__)
@pytest.mark.parametrize("rank", [1, 2, 4])
def test_factors_are_orthonormal_and_identical_on_every_worker(cls, rank):
    emu = emulator(3, cls(rank))
    for step in range(4):
        emu.step(grads(3, step), ["w"])
        states = [state(emu, r) for r in range(3)]
        for name in ("p", "q"):
            for other in states[1:]:
                np.testing.assert_array_equal(states[0][name], other[name])
        orthonormal = states[0]["p"] if cls is tfcomp.PowerSGD or step % 2 == 1 else states[0]["q"]
        np.testing.assert_allclose(orthonormal.T @ orthonormal, np.eye(rank), atol=1e-5)


def test_powersgd_p_is_additive_across_workers():
    """The allreduced P is sum_k M_k Q for the Q every worker drew from the shared seed."""
    k, rank = 3, 2
    emu = emulator(k, tfcomp.PowerSGD(rank))
    g = grads(k, 0)
    emu.step(g, ["w"])
    seed = TensorContext("w", k, tf.constant(0, tf.int64)).seed(salt=10)
    q = tf.random.stateless_normal((SHAPE[1], rank), seed).numpy()
    p_sum = sum(x[0].numpy() @ q for x in g)
    expected = orthonormalize(tf.constant(p_sum)).numpy()
    np.testing.assert_allclose(state(emu, 0)["p"], expected, atol=1e-5)


@pytest.mark.parametrize("k", [1, 2, 3])
def test_powersgd_original_equals_averaged_plus_residual(k):
    emu = emulator(k, tfcomp.PowerSGD(2))
    residuals = [np.zeros(SHAPE, np.float32)] * k
    for step in range(3):
        g = grads(k, step)
        out = emu.step(g, ["w"])
        for r in range(k):
            original = g[r][0].numpy() + residuals[r]
            residuals[r] = state(emu, r)["residual"]
            np.testing.assert_allclose(original, out[r][0].numpy() + residuals[r], atol=1e-5)


@pytest.mark.parametrize("k", [1, 2, 3])
def test_acpsgd_conserves_mass_and_averages_the_local_estimates(k):
    emu = emulator(k, tfcomp.ACPSGD(2))
    residuals = [np.zeros(SHAPE, np.float32)] * k
    for step in range(4):
        g = grads(k, step)
        out = emu.step(g, ["w"])
        local = []
        for r in range(k):
            original = g[r][0].numpy() + residuals[r]
            residuals[r] = state(emu, r)["residual"]
            local.append(original - residuals[r])  # what this worker's factor carries
        np.testing.assert_allclose(out[0][0].numpy(), np.mean(local, axis=0), atol=1e-5)


def test_acpsgd_error_is_orthogonal_to_the_factor_it_was_projected_on():
    """E_t Q_t = 0 after a P step and P_t^T E_t = 0 after a Q step."""
    emu = emulator(2, tfcomp.ACPSGD(3))
    for step in range(4):
        emu.step(grads(2, step), ["w"])
        for r in range(2):
            s = state(emu, r)
            if step % 2 == 0:
                np.testing.assert_allclose(s["residual"] @ s["q"], 0, atol=1e-4)
            else:
                np.testing.assert_allclose(s["p"].T @ s["residual"], 0, atol=1e-4)


def test_acpsgd_alternates_p_and_q_and_halves_powersgd_traffic():
    n, m = SHAPE
    emu = emulator(2, tfcomp.ACPSGD(4), check_finite=False)  # payloads only
    for step in range(4):
        emu.step(grads(2, step), ["w"])
    assert [b for _, b in emu.traffic] == [4 * n * 4, 4 * m * 4] * 2
    power = emulator(2, tfcomp.PowerSGD(4), check_finite=False)
    power.step(grads(2, 0), ["w"])
    assert sum(b for _, b in emu.traffic[:2]) == sum(b for _, b in power.traffic)  # two ACP steps = one PowerSGD
    assert tfcomp.ACPSGD(4).payload_bytes(SHAPE, tf.float32) * 2 == tfcomp.PowerSGD(4).payload_bytes(SHAPE, tf.float32)


def low_rank_matrix(rank, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((SHAPE[0], rank)) @ rng.standard_normal((rank, SHAPE[1]))).astype(np.float32)


def test_powersgd_reconstructs_exactly_when_rank_suffices():
    m = low_rank_matrix(2)
    emu = emulator(1, tfcomp.PowerSGD(3))
    out = emu.step([[tf.constant(m)]], ["w"])[0][0].numpy()
    np.testing.assert_allclose(out, m, atol=1e-4)
    np.testing.assert_allclose(state(emu, 0)["residual"], 0, atol=1e-4)


def test_acpsgd_reconstructs_exactly_over_a_p_and_a_q_step():
    m = low_rank_matrix(2, seed=1)
    emu = emulator(1, tfcomp.ACPSGD(3))
    first = emu.step([[tf.constant(m)]], ["w"])[0][0].numpy()
    second = emu.step([[tf.constant(m)]], ["w"])[0][0].numpy()
    np.testing.assert_allclose(first + second, 2 * m, atol=1e-4)
    np.testing.assert_allclose(state(emu, 0)["residual"], 0, atol=1e-4)


@pytest.mark.parametrize("cls", [tfcomp.PowerSGD, tfcomp.ACPSGD], ids=lambda c: c.__name__)
def test_state_restored_from_a_checkpoint_continues_identically(cls, tmp_path):
    def run(emu, steps):
        return [emu.step(grads(2, s), ["w"]) for s in steps][-1]

    expected = run(emulator(2, cls(2)), range(5))
    first = emulator(2, cls(2))
    run(first, range(3))
    paths = [tf.train.Checkpoint(state=s).write(str(tmp_path / f"w{r}")) for r, s in enumerate(first.states)]
    resumed = emulator(2, cls(2))
    specs = resumed.exchange.state_specs([(SHAPE, tf.float32)], ["w"], 2)
    for s, path in zip(resumed.states, paths):
        s.build(specs)
        tf.train.Checkpoint(state=s).read(path).assert_existing_objects_matched()
    got = run(resumed, range(3, 5))
    for a, b in zip(expected, got):
        np.testing.assert_array_equal(a[0].numpy(), b[0].numpy())


def test_conv_kernels_are_viewed_as_matrices():
    assert matrix_shape((3, 3, 8, 16)) == (72, 16)
    emu = emulator(2, tfcomp.PowerSGD(2))
    out = emu.step(grads(2, 0, shape=(3, 3, 8, 16)), ["w"])
    assert out[0][0].shape == (3, 3, 8, 16)
    assert state(emu, 0)["p"].shape == (72, 2) and state(emu, 0)["q"].shape == (16, 2)


@pytest.mark.parametrize("rank", [0, -1, 1.5])
def test_rank_below_one_is_rejected(rank):
    with pytest.raises(ValueError, match="matrix_approximation_rank must be an integer >= 1"):
        tfcomp.PowerSGD(rank)


def test_rank_not_below_min_dimension_goes_dense_and_says_so(caplog):
    ex = Exchange(tfcomp.PowerSGD(16), min_compress_elements=1)
    with caplog.at_level(logging.INFO):
        assert isinstance(ex.plan((16, 400), tf.float32, 2), tfcomp.NoCompression)
    assert "rank 16 >= min(16, 400)" in caplog.text
    assert isinstance(ex.plan((300, 400), tf.float32, 2), tfcomp.PowerSGD)
    assert isinstance(Exchange(tfcomp.PowerSGD(4)).plan((20, 20), tf.float32, 2), tfcomp.NoCompression)


def test_ablation_switches():
    for compressor in (tfcomp.ACPSGD(2, use_error_feedback=False), tfcomp.ACPSGD(2, reuse_query=False),
                       tfcomp.PowerSGD(2, warm_start=False, use_error_feedback=False)):
        emu = emulator(2, compressor)
        for step in range(3):
            out = emu.step(grads(2, step), ["w"])
            np.testing.assert_array_equal(out[0][0].numpy(), out[1][0].numpy())
        assert "residual" not in emu.states[0].get("w") or compressor.use_error_feedback


def test_start_powersgd_iter_sends_dense_first():
    emu = emulator(2, tfcomp.PowerSGD(2, start_powerSGD_iter=2), check_finite=False)  # payloads only
    for step in range(3):
        g = grads(2, step)
        out = emu.step(g, ["w"])[0][0].numpy()
        if step < 2:
            np.testing.assert_allclose(out, np.mean([x[0].numpy() for x in g], axis=0), rtol=1e-6)
    assert [b for _, b in emu.traffic] == [SHAPE[0] * SHAPE[1] * 4] * 2 + [SHAPE[0] * 2 * 4, SHAPE[1] * 2 * 4]
    # start_powerSGD_iter (PyTorch's hook's name) is warmup_steps
    assert tfcomp.PowerSGD(2, start_powerSGD_iter=2).config() == tfcomp.PowerSGD(2, warmup_steps=2).config()
    for bad in (-1, 1.5, "one", True):
        with pytest.raises(ValueError, match="warmup_steps is the dense steps before compression starts"):
            tfcomp.PowerSGD(start_powerSGD_iter=bad)
    with pytest.raises(TypeError, match="start_powerSGD_iter= is warmup_steps="):
        tfcomp.PowerSGD(start_powerSGD_iter=2, warmup_steps=2)


@pytest.mark.parametrize("cls", [tfcomp.PowerSGD, tfcomp.ACPSGD], ids=lambda c: c.__name__)
@pytest.mark.parametrize("rank", [1, 3])
def test_same_shape_tensors_are_batched_with_the_same_result(cls, rank):
    shapes = [SHAPE, (3, 3, 4, 8), SHAPE, SHAPE]
    names = ["a", "conv", "b", "c"]
    rng = np.random.default_rng(5)
    steps = [[[tf.constant(rng.standard_normal(s).astype(np.float32)) for s in shapes] for _ in range(2)]
             for _ in range(3)]
    batched = Emulator(2, cls(rank), min_compress_elements=1)
    separate = Emulator(2, cls(rank, batch_tensors_with_same_shape=False), min_compress_elements=1)
    for g in steps:
        got, want = batched.step(g, names), separate.step(g, names)
        for a, b in zip(got[0], want[0]):
            np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-4, atol=1e-5)
    state = batched.states[0]
    assert state.get("a+b+c")["q"].shape == (3, SHAPE[1], rank) and state.get("a") is None
    assert state.get("conv")["q"].shape == (8, rank)
    q = state.get("a+b+c")["p" if cls is tfcomp.PowerSGD else "q"].numpy()
    for matrix in q:
        np.testing.assert_allclose(matrix.T @ matrix, np.eye(rank), atol=1e-5)
