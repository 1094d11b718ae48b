"""tfcomp.FrozenVarianceAdam against a NumPy transcription, and how the exchange binds it."""
import numpy as np
import pytest
import tensorflow as tf

import tfcomp
from tfcomp.exchange.step import Exchange
from tfcomp.keras.optimizers import bind_exchange
from tests.stacks import EVERY_STACK

pytestmark = EVERY_STACK

LR, BETA_1, BETA_2, EPSILON = 0.01, 0.9, 0.999, 1e-7


def numpy_frozen_adam(x, gradients, variance_steps, floor):
    """Adam (Kingma and Ba) whose v stops updating after variance_steps steps (None: never) and
    enters the step floored at floor x its mean; the bias correction of v stops with it."""
    m, v = np.zeros_like(x), np.zeros_like(x)
    for t, g in enumerate(gradients, start=1):
        tv = t if variance_steps is None else min(t, variance_steps)
        m = BETA_1 * m + (1 - BETA_1) * g
        if tv == t:
            v = BETA_2 * v + (1 - BETA_2) * g * g
        alpha = LR * np.sqrt(1 - BETA_2 ** tv) / (1 - BETA_1 ** t)
        x = x - alpha * m / (np.sqrt(np.maximum(v, floor * v.mean())) + EPSILON)
    return x, v


def run(optimizer, x, gradients):
    var = tf.Variable(x)
    for g in gradients:
        optimizer.apply_gradients([(tf.constant(g), var)])
    return var.numpy()


@pytest.mark.parametrize("shape", [(1,), (7,), (16, 33), (3, 3, 4, 8)])
@pytest.mark.parametrize("variance_steps, floor", [(None, 0.0), (3, 0.0), (3, 0.01), (1, 0.5)])
def test_steps_equal_the_numpy_transcription(shape, variance_steps, floor):
    rng = np.random.default_rng(sum(shape))
    x = rng.standard_normal(shape).astype(np.float32)
    gradients = [rng.standard_normal(shape).astype(np.float32) for _ in range(7)]
    gradients[2] = np.where(rng.random(shape) < 0.3, 0, gradients[2]).astype(np.float32)  # exact zeros
    expected, _ = numpy_frozen_adam(x.astype(np.float64), gradients, variance_steps, floor)
    optimizer = tfcomp.FrozenVarianceAdam(LR, variance_steps=variance_steps, variance_floor=floor, epsilon=EPSILON)
    np.testing.assert_allclose(run(optimizer, x, gradients), expected, rtol=2e-5, atol=2e-6)


def test_without_freezing_or_floor_it_is_keras_adam():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((20, 5)).astype(np.float32)
    gradients = [rng.standard_normal((20, 5)).astype(np.float32) for _ in range(6)]
    ours = run(tfcomp.FrozenVarianceAdam(LR, variance_floor=0.0), x, gradients)
    np.testing.assert_allclose(ours, run(tf.keras.optimizers.Adam(LR), x, gradients), rtol=2e-5, atol=1e-6)


def test_the_variance_stops_moving_after_variance_steps():
    optimizer = tfcomp.FrozenVarianceAdam(LR, variance_steps=2)
    var = tf.Variable(tf.zeros([4]))
    seen = []
    for step in range(5):
        optimizer.apply_gradients([(tf.fill([4], float(step + 1)), var)])
        seen.append(optimizer.variables[-1].numpy().copy())  # v of var
    np.testing.assert_array_equal(seen[1], seen[4])
    assert not np.array_equal(seen[0], seen[1])


def test_a_weight_whose_gradient_was_zero_while_estimating_moves_by_a_bounded_step():
    """v = 0 there; without the floor a compression error e would step it by e / epsilon."""
    optimizer = tfcomp.FrozenVarianceAdam(1.0, variance_steps=3)
    var = tf.Variable([0.0, 0.0])
    for _ in range(3):
        optimizer.apply_gradients([(tf.constant([1.0, 0.0]), var)])
    before = var.numpy()[1]
    optimizer.apply_gradients([(tf.constant([1.0, 1e-3]), var)])
    assert abs(var.numpy()[1] - before) < 1.0


def test_config_round_trips():
    optimizer = tfcomp.FrozenVarianceAdam(0.003, variance_steps=40, variance_floor=0.05, weight_decay=0.01)
    again = tfcomp.FrozenVarianceAdam.from_config(optimizer.get_config())
    assert (again.variance_steps, again.variance_floor, again.weight_decay) == (40, 0.05, 0.01)


@pytest.mark.parametrize("options, match", [({"amsgrad": True}, "amsgrad"), ({"variance_steps": 0}, "variance_steps"),
                                            ({"variance_steps": 2.5}, "variance_steps"),
                                            ({"variance_floor": 1.0}, "variance_floor"),
                                            ({"variance_floor": -0.1}, "variance_floor")])
def test_bad_arguments_are_clear_errors(options, match):
    with pytest.raises(ValueError, match=match):
        tfcomp.FrozenVarianceAdam(**options)


def test_the_exchange_freezes_the_variance_where_compression_starts():
    optimizer = tfcomp.FrozenVarianceAdam()
    bind_exchange(Exchange(tfcomp.EFSignSGD, warmup_steps=30), optimizer)
    assert optimizer.variance_steps == 30
    given = tfcomp.FrozenVarianceAdam(variance_steps=12)
    bind_exchange(Exchange(tfcomp.EFSignSGD, warmup_steps=30), given)
    assert given.variance_steps == 12  # the user's own choice stands


def test_an_exchange_without_a_dense_warmup_is_refused():
    with pytest.raises(ValueError, match="warmup_steps="):
        bind_exchange(Exchange(tfcomp.EFSignSGD), tfcomp.FrozenVarianceAdam())
    with pytest.raises(ValueError, match="variance_steps="):
        bind_exchange(Exchange(tfcomp.Auto()), tfcomp.FrozenVarianceAdam())


def test_efsignsgd_compresses_the_first_moment_and_the_sparsifiers_the_gradient():
    for compressor, momentum in ((tfcomp.EFSignSGD(), BETA_1), (tfcomp.TopK(0.1), "auto"),
                                 (tfcomp.DGC(0.1), "auto")):
        exchange = Exchange(compressor, warmup_steps=5)
        bind_exchange(exchange, tfcomp.FrozenVarianceAdam(beta_1=BETA_1))
        assert exchange.compressor.momentum == momentum, exchange.compressor
    plain = Exchange(tfcomp.EFSignSGD(), warmup_steps=5)
    bind_exchange(plain, tf.keras.optimizers.Adam())
    assert plain.compressor.momentum == "auto"  # nothing taken over from Keras' Adam
