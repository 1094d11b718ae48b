"""Sign compressors and gradients that are exactly 0 (dead ReLU units, unused
embedding rows, padding): one bit cannot say 0, so a zero packed as + every step
would move such weights the same way every step. tfcomp sends zeros as + and -
on alternate steps, so they do not drift."""
import numpy as np
import pytest
import tensorflow as tf

import tfcomp
from tfcomp import ops
from tfcomp.compressors.sign import zero_bit
from tfcomp.testing import Emulator
from tests.stacks import NO_KERAS

pytestmark = NO_KERAS

SHAPE = (40, 64)
DEAD_ROWS = slice(0, 8)  # zero on every worker, every step


def gradients(step, k):
    rng = np.random.default_rng(step)
    out = []
    for _ in range(k):
        g = rng.standard_normal(SHAPE).astype(np.float32)
        g[DEAD_ROWS] = 0.0
        out.append([tf.constant(g)])
    return out


@pytest.mark.parametrize("compressor", [tfcomp.SignSGD, tfcomp.EFSignSGD], ids=lambda c: c.__name__)
@pytest.mark.parametrize("k", [2, 3])
def test_weights_whose_gradient_is_zero_do_not_drift(compressor, k):
    emu = Emulator(k, compressor, min_compress_elements=1)
    steps = 40
    total = np.zeros(SHAPE, np.float32)  # what plain SGD with lr 1 would have moved each weight
    largest = 0.0
    for step in range(steps):
        out = emu.step(gradients(step, k), ["w"])[0][0].numpy()
        total += out
        largest = max(largest, np.abs(out[DEAD_ROWS.stop:]).max())
    # Each step moves a dead weight by at most one aggregate; over 40 steps they cancel.
    assert np.abs(total[DEAD_ROWS]).max() <= 2 * largest, np.abs(total[DEAD_ROWS]).max()
    # The live weights' aggregate is untouched by the zero handling.
    assert np.abs(total[DEAD_ROWS.stop:]).max() > 2 * largest


@pytest.mark.parametrize("dtype", [tf.float16, tf.float32, tf.float64])
def test_zeros_pack_with_alternating_sign_and_nothing_else_changes(dtype):
    x = tf.constant([0.0, -0.0, 1.5, -2.0, 1e-3], dtype)
    for step, positive in [(0, True), (1, False), (6, True)]:
        words, scale = ops.sign_pack(x, zero_bit(tf.constant(step, tf.int64)))
        signs = ops.sign_unpack(words, tf.ones([], dtype), 5).numpy()
        assert np.all((signs[:2] > 0) if positive else (signs[:2] < 0)), (step, signs)
        np.testing.assert_array_equal(signs[2:], np.sign(x.numpy()[2:]))
        # An exact zero adds nothing to the scale, mean |x|.
        assert float(scale) == pytest.approx((1.5 + 2.0 + 1e-3) / 5, rel=1e-3)


def test_signsgd_majority_is_unchanged_where_gradients_are_nonzero():
    k = 3
    grads = gradients(5, k)
    out = Emulator(k, tfcomp.SignSGD, min_compress_elements=1).step(grads, ["w"])[0][0].numpy()
    votes = np.sign(sum(np.sign(g[0].numpy()) for g in grads))
    np.testing.assert_array_equal(out[DEAD_ROWS.stop:], votes[DEAD_ROWS.stop:])
