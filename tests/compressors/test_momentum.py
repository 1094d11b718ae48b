"""momentum="auto": EFSignSGD and the sparsifiers take over a Keras SGD optimizer's
momentum (worker-side velocity, error feedback on the update), and hand the
optimizer what its own momentum turns back into the averaged update."""

import logging

import numpy as np
import pytest
import tensorflow as tf

import tfcomp
from tfcomp.keras.optimizers import advice, advise_on_settings, settings_advice, sgd_momentum
from tfcomp.testing import Emulator
from tfcomp.keras.optimizers import bind_exchange
from tests.stacks import EVERY_STACK, PINNED, TF_KERAS, stacks

pytestmark = [pytest.mark.usefixtures("compress_from_the_first_step"), EVERY_STACK]  # what compression does, from step 0

BETA = 0.9
LR = 0.1
SHAPE = (64, 48)
TAKE_OVER = [tfcomp.EFSignSGD, lambda **kw: tfcomp.TopK(0.05, **kw), lambda **kw: tfcomp.DGC(0.05, **kw),
             lambda **kw: tfcomp.DRAGONN(0.05, **kw), lambda **kw: tfcomp.RandomK(0.05, **kw),
             # the low-rank ones keep the optimizer's momentum unless asked
             lambda **kw: tfcomp.PowerSGD(2, **{"momentum": "auto", **kw}),
             lambda **kw: tfcomp.ACPSGD(2, **{"momentum": "auto", **kw})]
IDS = ["EFSignSGD", "TopK", "DGC", "DRAGONN", "RandomK", "PowerSGD", "ACPSGD"]


def gradients(step, k=2):
    rng = np.random.default_rng(step)
    return [[tf.constant(rng.standard_normal(SHAPE).astype(np.float32))] for _ in range(k)]


def run(compressor, optimizer, steps=6, nonfinite_at=None):
    emu = Emulator(2, compressor, min_compress_elements=1, selection=False)
    bind_exchange(emu.exchange, optimizer)
    weights = tf.Variable(tf.zeros(SHAPE))
    for step in range(steps):
        grads = gradients(step)
        if step == nonfinite_at:
            grads[1] = [tf.tensor_scatter_nd_update(grads[1][0], [[0, 0]], [np.inf])]
        out = emu.step(grads, ["w"])
        if step != nonfinite_at:
            optimizer.apply_gradients([(out[0][0], weights)])
    return weights.numpy(), emu


KERAS2_LEGACY = stacks(PINNED, TF_KERAS, why="Keras 3 has no legacy optimizers")


@pytest.mark.parametrize("make", TAKE_OVER, ids=IDS)
@pytest.mark.parametrize("legacy", [False, pytest.param(True, marks=KERAS2_LEGACY)], ids=["keras", "legacy"])
def test_taking_over_sgd_momentum_equals_worker_momentum_under_plain_sgd(make, legacy):
    sgd = tf.keras.optimizers.legacy.SGD if legacy else tf.keras.optimizers.SGD
    taken_over, emu = run(make(), sgd(LR, momentum=BETA))
    assert set(emu.states[0].get("w")) >= {"velocity", "handed_off", "residual"}
    by_hand, _ = run(make(momentum=BETA), sgd(LR, momentum=0.0))
    assert np.abs(by_hand).max() > 0
    np.testing.assert_allclose(taken_over, by_hand, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("make", TAKE_OVER, ids=IDS)
def test_a_nonfinite_step_changes_no_momentum_state(make):
    _, skipped = run(make(), tf.keras.optimizers.SGD(LR, momentum=BETA), steps=4, nonfinite_at=3)
    _, clean = run(make(), tf.keras.optimizers.SGD(LR, momentum=BETA), steps=3)
    for name, value in clean.states[0].get("w").items():
        np.testing.assert_array_equal(skipped.states[0].get("w")[name].numpy(), value.numpy(), err_msg=name)


@pytest.mark.parametrize("optimizer", [lambda: tf.keras.optimizers.Adam(1e-3), lambda: tf.keras.optimizers.SGD(LR)],
                         ids=["adam", "sgd_without_momentum"])
def test_auto_is_error_feedback_on_the_gradient_without_sgd_momentum(optimizer):
    emu = Emulator(2, tfcomp.EFSignSGD, min_compress_elements=1)
    bind_exchange(emu.exchange, optimizer())
    specs = emu.exchange.state_specs([(SHAPE, tf.float32)], ["w"], 2)["w"]
    assert set(specs) == {"residual"}


def test_the_low_rank_compressors_keep_the_optimizers_momentum_by_default():
    for compressor in (tfcomp.PowerSGD(2), tfcomp.ACPSGD(2)):
        emu = Emulator(2, compressor, min_compress_elements=1)
        bind_exchange(emu.exchange, tf.keras.optimizers.SGD(LR, momentum=BETA))
        specs = emu.exchange.state_specs([(SHAPE, tf.float32)], ["w"], 2)["w"]
        assert "velocity" not in specs and "residual" in specs


def test_momentum_applied_twice_is_refused_with_what_to_change():
    emu = Emulator(2, tfcomp.EFSignSGD(momentum=0.9), min_compress_elements=1)
    with pytest.raises(ValueError, match="momentum=0") as raised:
        bind_exchange(emu.exchange, tf.keras.optimizers.SGD(LR, momentum=0.9))
    assert "'auto'" in str(raised.value)


def test_one_exchange_serves_one_momentum():
    emu = Emulator(2, tfcomp.EFSignSGD, min_compress_elements=1)
    bind_exchange(emu.exchange, tf.keras.optimizers.SGD(LR, momentum=0.9))
    bind_exchange(emu.exchange, tf.keras.optimizers.SGD(LR, momentum=0.9))  # the same again: fine
    with pytest.raises(ValueError, match="one strategy or DistributedOptimizer per optimizer"):
        bind_exchange(emu.exchange, tf.keras.optimizers.SGD(LR, momentum=0.5))


def test_sgd_momentum_is_read_through_a_loss_scale_optimizer():
    inner = tf.keras.optimizers.SGD(LR, momentum=0.8)
    assert sgd_momentum(tf.keras.mixed_precision.LossScaleOptimizer(inner)) == pytest.approx(0.8)
    assert sgd_momentum(tf.keras.optimizers.Adam()) is None


@KERAS2_LEGACY
def test_sgd_momentum_is_read_from_a_keras2_legacy_optimizer():
    assert sgd_momentum(tf.keras.optimizers.legacy.SGD(LR, momentum=0.7)) == pytest.approx(0.7)


@pytest.mark.parametrize("momentum", [1.0, -0.1, "yes"])
def test_bad_momentum_is_rejected(momentum):
    with pytest.raises(ValueError, match="momentum must be 'auto'"):
        tfcomp.EFSignSGD(momentum=momentum)


def test_the_configured_compressor_is_what_workers_compare():
    emu = Emulator(2, tfcomp.EFSignSGD, min_compress_elements=1)
    before = emu.exchange.config()
    bind_exchange(emu.exchange, tf.keras.optimizers.SGD(LR, momentum=0.9))
    assert emu.exchange.config() == before and before["compressor"]["momentum"] == "auto"


def test_advice_names_what_to_change():
    sgd = tf.keras.optimizers.SGD(LR, momentum=BETA)
    for compressor in (tfcomp.TopK(0.1), tfcomp.TopK(0.01), tfcomp.PowerSGD(4), tfcomp.EFSignSGD(), tfcomp.DRAGONN(0.1)):
        for adaptive in (tf.keras.optimizers.Adam(), tf.keras.optimizers.AdamW()):
            assert "Use tfcomp.FrozenVarianceAdam" in advice(compressor, adaptive)
    for compressor in (tfcomp.TopK(0.1), tfcomp.PowerSGD(4), tfcomp.EFSignSGD(), tfcomp.ACPSGD(4)):
        assert advice(compressor, tfcomp.FrozenVarianceAdam()) is None
    assert advice(tfcomp.FP16(), tf.keras.optimizers.Adam()) is None
    assert "EFSignSGD with tfcomp.FrozenVarianceAdam" in advice(tfcomp.SignSGD(), tfcomp.FrozenVarianceAdam())
    assert advice(tfcomp.PowerSGD(4), sgd) is None
    assert "ratio>=0.1" in advice(tfcomp.TopK(0.01), tfcomp.FrozenVarianceAdam())
    assert "100x smaller" in advice(tfcomp.SignSGD(), sgd)
    # at a sign-sized learning rate it trained like dense on both digits models: nothing to say
    assert advice(tfcomp.SignSGD(), tf.keras.optimizers.SGD(6e-4, momentum=BETA)) is None
    clipped = tf.keras.optimizers.SGD(LR, momentum=BETA, global_clipnorm=1.0)
    assert "global_clipnorm" in advice(tfcomp.DGC(0.01), clipped)
    assert advice(tfcomp.DGC(0.1, momentum=None), clipped) is None
    # Under SGD the defaults (ratio 0.1, PowerSGD(4), ACPSGD(8), a dense epoch) have nothing to change.
    for compressor in (tfcomp.TopK(), tfcomp.DGC(), tfcomp.DRAGONN(), tfcomp.PowerSGD(), tfcomp.ACPSGD()):
        assert advice(compressor, sgd, warmup_steps=22) is None
    assert advice(tfcomp.EFSignSGD(), sgd, warmup_steps=0) is None  # it starts best without one
    assert advice(tfcomp.PowerSGD(4), sgd, warmup_steps=22) is None and advice(tfcomp.FP16(), sgd) is None


def test_settings_advice_names_what_to_change_whatever_the_optimizer(caplog):
    # Said when the engine is made, before any worker trains.
    assert "ratio>=0.1" in settings_advice(tfcomp.TopK(0.01)) and "warm-up" not in settings_advice(tfcomp.TopK(0.01))
    assert "warm-up" in settings_advice(tfcomp.DGC(0.1, warmup_steps=0))
    both = settings_advice(tfcomp.DRAGONN(0.001, warmup_steps=0))
    assert "ratio>=0.1" in both and "warm-up" in both
    assert "rank>=8" in settings_advice(tfcomp.ACPSGD(4)) and "rank>=4" in settings_advice(tfcomp.PowerSGD(rank=1))
    assert "warm-up" in settings_advice(tfcomp.PowerSGD(start_powerSGD_iter=0))
    assert "TopK, DGC and DRAGONN" in settings_advice(tfcomp.RandomK())
    for bare in (tfcomp.FP16, tfcomp.SignSGD, tfcomp.EFSignSGD, tfcomp.TopK, tfcomp.DGC, tfcomp.DRAGONN,
                 tfcomp.PowerSGD, tfcomp.ACPSGD, tfcomp.NoCompression):
        assert settings_advice(bare()) is None, bare
    assert settings_advice(tfcomp.DGC(warmup_steps=50)) is None  # a warm-up of the user's own length
    with caplog.at_level(logging.WARNING):
        advise_on_settings([tfcomp.ACPSGD(2), tfcomp.ACPSGD(2), tfcomp.TopK()])
    said = [r.getMessage() for r in caplog.records if "rank>=8" in r.getMessage()]
    assert len(said) == 1 and said[0].startswith("tfcomp: ACPSGD(matrix_approximation_rank=2")
