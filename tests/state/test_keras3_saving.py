"""tfcomp.state.keras3: the compressor state saved with a Keras 3 optimizer and loaded back,
before the state exists (a load before the first step) and after."""
import numpy as np
import tensorflow as tf

from tfcomp.state import keras3
from tfcomp.state.variables import STATE_ATTRIBUTE, CompressionState, attach
from tests.stacks import KERAS3, NO_KERAS, stacks

KERAS3_ONLY = stacks(KERAS3, why="Keras 3's own saving (save_own_variables); Keras 2 saves the optimizer "
                     "through tf.train.Checkpoint, whose rule test_checkpoint_restores_what_the_state_holds_now pins")

#: A tfcomp.Auto run's state after two trials: the kept one's residual, and what a dropped
#: trial left (a momentum hand-off on the same tensor, and a tensor the kept one sends dense).
SAVED = {"dense/kernel:0": {"residual": ((3, 4), tf.float32), "handed_off": ((3, 4), tf.float32)},
         "dense_1/kernel:0": {"p": ((4, 2), tf.float32)}}
KEPT = {"dense/kernel:0": {"residual": ((3, 4), tf.float32)}}


def state_of(specs, fill=None):
    state = CompressionState()
    state.build(specs)
    if fill is not None:
        for states in state.in_use().values():
            for variable in states.values():
                variable.assign(tf.fill(variable.shape, fill))
        state.step.assign(5)
    return state


def saved_optimizer_store():
    import keras  # pylint: disable=import-outside-toplevel
    keras3.install()
    optimizer = keras.optimizers.SGD(0.1, momentum=0.9)
    attach(optimizer, state_of(SAVED, fill=2.0), STATE_ATTRIBUTE)
    store = {}
    optimizer.save_own_variables(store)
    return keras, store


@KERAS3_ONLY
def test_a_load_before_the_state_exists_restores_what_it_holds_when_attached():
    keras, store = saved_optimizer_store()
    assert {"tfcomp_state:dense_2fkernel_3a0--handed_off", "tfcomp_state:@step"} <= set(store)
    optimizer = keras.optimizers.SGD(0.1, momentum=0.9)
    optimizer.load_own_variables(store)
    state = state_of(KEPT)
    attach(optimizer, state, STATE_ATTRIBUTE)
    np.testing.assert_array_equal(state.get("dense/kernel:0")["residual"].numpy(), np.full((3, 4), 2.0))
    assert int(state.step.numpy()) == 5
    assert state.get("dense_1/kernel:0") is None


@KERAS3_ONLY
def test_a_load_after_the_state_exists_restores_what_it_holds():
    keras, store = saved_optimizer_store()
    optimizer = keras.optimizers.SGD(0.1, momentum=0.9)
    state = state_of(KEPT)
    attach(optimizer, state, STATE_ATTRIBUTE)
    optimizer.load_own_variables(store)
    np.testing.assert_array_equal(state.get("dense/kernel:0")["residual"].numpy(), np.full((3, 4), 2.0))
    assert int(state.step.numpy()) == 5


@NO_KERAS
def test_checkpoint_restores_what_the_state_holds_now(tmp_path):
    path = tf.train.Checkpoint(state=state_of(SAVED, fill=3.0)).write(str(tmp_path / "saved"))
    state = state_of(KEPT)
    tf.train.Checkpoint(state=state).read(path).expect_partial()
    np.testing.assert_array_equal(state.get("dense/kernel:0")["residual"].numpy(), np.full((3, 4), 3.0))
    assert int(state.step.numpy()) == 5
    assert state.get("dense_1/kernel:0") is None


@KERAS3_ONLY
def test_an_optimizer_saved_without_tfcomp_state_leaves_the_state_at_zero():
    import keras  # pylint: disable=import-outside-toplevel
    keras3.install()
    optimizer = keras.optimizers.SGD(0.1)
    store = {}
    optimizer.save_own_variables(store)
    fresh = keras.optimizers.SGD(0.1)
    fresh.load_own_variables(store)
    state = state_of(KEPT)
    attach(fresh, state, STATE_ATTRIBUTE)
    assert not np.any(state.get("dense/kernel:0")["residual"].numpy())
