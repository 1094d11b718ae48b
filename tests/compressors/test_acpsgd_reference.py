"""tfcomp's ACPSGD against an independent NumPy transcription of Algorithm 2 (with
error feedback) of the ACP-SGD paper, "Evaluation and Optimization of Gradient
Compression for Distributed Deep Learning", step by step on the same gradients.

The transcription shares nothing with tfcomp but the starting factor Q_0 (a
draw from the seed every worker shares). It compares what is invariant to the
sign of QR's columns: each step's aggregate P_t Q_t^T and every worker's
error E_t.
"""
import zlib

import numpy as np
import pytest
import tensorflow as tf

import tfcomp
from tfcomp.testing import Emulator
from tests.stacks import NO_KERAS

pytestmark = [pytest.mark.usefixtures("compress_from_the_first_step"), NO_KERAS]  # what compression does, from step 0


def orthogonalize(x):
    if x.shape[1] == 1:
        return x / np.linalg.norm(x)
    return np.linalg.qr(x, mode="reduced")[0]


def algorithm2(gradients, q0):
    """gradients[t][k]: worker k's M_t. Yields (aggregate, [E_t per worker]) per step.
    Steps are counted from 0, so the paper's odd steps (compute P) are tfcomp's even ones."""
    workers = len(gradients[0])
    errors = [np.zeros_like(g) for g in gradients[0]]
    p_prev, q_prev = None, q0
    for step, ms in enumerate(gradients):
        corrected = [m + e for m, e in zip(ms, errors)]
        if step % 2 == 0:
            q = orthogonalize(q_prev)
            ps = [c @ q for c in corrected]
            errors = [c - p @ q.T for c, p in zip(corrected, ps)]
            p = sum(ps) / workers  # All-Reduce, averaged as PowerSGD does
            aggregate = p @ q.T
        else:
            p = orthogonalize(p_prev)
            qs = [c.T @ p for c in corrected]
            errors = [c - p @ q.T for c, q in zip(corrected, qs)]
            q = sum(qs) / workers
            aggregate = p @ q.T
        p_prev, q_prev = p, q
        yield aggregate, errors


def starting_query(shape, rank, name="w", global_seed=0):
    """The Q_0 every worker draws: N(0, 1) from (tensor name, step 0, global seed)."""
    name_hash = zlib.crc32(f"{global_seed}/20/{name}".encode()) & 0x7FFFFFFF
    seed = tf.constant([name_hash, 0], tf.int64)
    return tf.random.stateless_normal((shape[1], rank), seed).numpy().astype(np.float64)


@pytest.mark.parametrize("shape,rank,workers", [((24, 12), 1, 2), ((24, 12), 3, 2), ((40, 16), 2, 3),
                                                ((16, 32), 1, 4)])
def test_acpsgd_follows_algorithm_2_step_by_step(shape, rank, workers):
    rng = np.random.default_rng(sum(shape) + rank + workers)
    steps = 8
    # A slowly drifting gradient with noise per worker, as in training.
    base = rng.standard_normal(shape)
    gradients = [[base + 0.1 * t * rng.standard_normal(shape) + 0.5 * rng.standard_normal(shape)
                  for _ in range(workers)] for t in range(steps)]
    emu = Emulator(workers, tfcomp.ACPSGD(rank), min_compress_elements=1, check_finite=False)
    reference = algorithm2(gradients, starting_query(shape, rank))
    for t, (aggregate, errors) in enumerate(reference):
        out = emu.step([[tf.constant(g, tf.float64)] for g in gradients[t]], ["w"])
        for k in range(workers):
            np.testing.assert_allclose(out[k][0].numpy(), aggregate, rtol=1e-9, atol=1e-9,
                                       err_msg=f"aggregate, step {t}, worker {k}")
            np.testing.assert_allclose(emu.states[k].get("w")["residual"].numpy(), errors[k],
                                       rtol=1e-9, atol=1e-9, err_msg=f"error, step {t}, worker {k}")
