"""FP16's one-pass encode and decode (tfcomp.ops.cast_divide) give the bits of the
tf.cast and divide they replace."""
import numpy as np
import pytest
import tensorflow as tf

import tfcomp
from tfcomp.compressors import TensorContext
from tests.stacks import NO_KERAS

pytestmark = NO_KERAS


def old_fp16(grad, summed_payload, ctx):
    """FP16 as it was: tf.cast to float16; decode ctx.from_sum(tf.cast(summed, grad.dtype))."""
    return tf.cast(grad, tf.float16), ctx.from_sum(tf.cast(summed_payload, grad.dtype))


@pytest.mark.parametrize("dtype", [tf.float32, tf.float16, tf.float64, tf.bfloat16], ids=lambda d: d.name)
@pytest.mark.parametrize("k", [1, 2, 3, 8])
@pytest.mark.parametrize("average", [True, False])
def test_fp16_matches_cast_then_divide(dtype, k, average):
    rng = np.random.default_rng(k)
    x = rng.standard_normal(10007) * 2.0 ** rng.integers(-30, 20, 10007)
    x[:6] = [np.nan, np.inf, -np.inf, 1e5, -0.0, 1e-9]
    with np.errstate(over="ignore"):  # beyond float16's range: +-Inf, as intended
        grad = tf.constant(x.astype(dtype.as_numpy_dtype))
    ctx = TensorContext(name="g", num_workers=k, step=tf.constant(0, tf.int64), average=average)
    rnd = tfcomp.FP16().compress(grad, {}, ctx)
    payload = rnd.payloads[0].tensor
    summed = tf.cast(payload, tf.float32) * k  # what an allreduce of k equal payloads returns
    summed = tf.cast(summed, tf.float16)
    out = rnd.finish([summed])
    want_payload, want_out = old_fp16(grad, summed, ctx)
    assert payload.dtype == tf.float16 and out.dtype == dtype
    for got, want in ((payload, want_payload), (out, want_out)):
        got, want = got.numpy(), want.numpy()
        nan = np.isnan(want.astype(np.float64))
        np.testing.assert_array_equal(np.isnan(got.astype(np.float64)), nan)
        assert got[~nan].tobytes() == want[~nan].tobytes()
