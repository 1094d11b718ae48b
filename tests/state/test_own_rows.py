"""CompressionState in the Horovod engine's mode: each rank saves its own rows."""
import numpy as np
import pytest
import tensorflow as tf

from tfcomp.state.variables import CompressionState
from tests.stacks import NO_KERAS

pytestmark = NO_KERAS

SPECS = {"dense/kernel:0": {"residual": ((3, 4), tf.float32), "q": ((4, 2), tf.float32)}}


def state_of(rank, num_workers=2, fill=None):
    state = CompressionState(num_workers=num_workers, rank=rank, own_rows=True)
    state.build(SPECS)
    if fill is not None:
        variables = state.get("dense/kernel:0")
        variables["residual"].assign(tf.fill((3, 4), float(fill)))
        variables["q"].assign(tf.fill((4, 2), 10.0 + fill))
        state.step.assign(7)
    return state


def save(state, path):
    return tf.train.Checkpoint(state=state).write(str(path))


def test_a_rank_restores_its_own_rows(tmp_path):
    path = save(state_of(1, fill=3), tmp_path / "rank1")
    restored = state_of(1)
    tf.train.Checkpoint(state=restored).read(path).assert_consumed()
    variables = restored.get("dense/kernel:0")
    np.testing.assert_array_equal(variables["residual"].numpy(), np.full((3, 4), 3.0))
    np.testing.assert_array_equal(variables["q"].numpy(), np.full((4, 2), 13.0))
    assert int(restored.step.numpy()) == 7


def test_another_ranks_save_keeps_shared_state_and_zeroes_residuals(tmp_path):
    path = save(state_of(0, fill=5), tmp_path / "rank0")
    restored = state_of(1, fill=1)
    tf.train.Checkpoint(state=restored).read(path).assert_consumed()
    variables = restored.get("dense/kernel:0")
    np.testing.assert_array_equal(variables["residual"].numpy(), np.zeros((3, 4)))
    np.testing.assert_array_equal(variables["q"].numpy(), np.full((4, 2), 15.0))
    assert int(restored.step.numpy()) == 7


def test_a_save_of_another_world_size_is_refused(tmp_path):
    path = save(state_of(0, num_workers=3, fill=2), tmp_path / "three")
    with pytest.raises(ValueError, match="saved by one of 3 workers, this run has 2"):
        tf.train.Checkpoint(state=state_of(0)).read(path)


def test_nothing_is_gathered_when_saving(tmp_path):
    path = save(state_of(1, fill=2), tmp_path / "own")
    shapes = dict(tf.train.list_variables(path))
    residual = [shape for name, shape in shapes.items() if "residual" in name]
    assert residual == [[3, 4]]  # this rank's rows only, not [num_workers, 3, 4]
