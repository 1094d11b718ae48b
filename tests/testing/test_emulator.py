"""The in-process K-worker emulator (tfcomp.testing.Emulator), which the compressor tests
and the convergence benchmark train on: compiled steps equal eager ones, and too few
inter-op threads for its workers is an error, not a hang."""
import numpy as np
import pytest
import tensorflow as tf

import tfcomp
from tfcomp.testing import Emulator
from tfcomp.testing.emulator import inter_op_threads
from tests.stacks import NO_KERAS

pytestmark = [pytest.mark.usefixtures("compress_from_the_first_step"), NO_KERAS]  # what compression does, from step 0


def test_compiled_emulator_steps_equal_eager_ones():
    k = min(3, inter_op_threads())  # a waiting worker holds an inter-op thread
    rng = np.random.default_rng(0)
    grads = [[tf.constant(rng.standard_normal((32, 40)).astype(np.float32))] for _ in range(k)]
    eager = Emulator(k, tfcomp.DRAGONN(0.1), min_compress_elements=1, selection=False)
    compiled = Emulator(k, tfcomp.DRAGONN(0.1), min_compress_elements=1, selection=False)
    functions = [tf.function(lambda g, r=r: compiled.exchange.reduce(
        g, ["w"], compiled.states[r], compiled.collectives(r))) for r in range(k)]
    for _ in range(3):
        expected = eager.step(grads, ["w"])
        got = compiled.run(functions, [(g,) for g in grads])
        for e, g in zip(expected, got):
            np.testing.assert_array_equal(e[0].numpy(), g[0].numpy())
    assert compiled.traffic == eager.traffic


def test_too_few_inter_op_threads_is_a_clear_error_not_a_hang():
    workers = inter_op_threads() + 1
    emu = Emulator(workers, tfcomp.EFSignSGD)
    with pytest.raises(RuntimeError, match="inter-op threads"):
        emu.run([lambda: None] * workers, [()] * workers)
