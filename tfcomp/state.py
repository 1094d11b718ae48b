"""Compressor state (residuals, factors, the step counter) as tf.Variables in
one trackable, so that tf.train.Checkpoint, model.save and BackupAndRestore
carry it when it is attached to the optimizer. A restart must not lose
error-feedback memory."""
import contextlib
import re

import tensorflow as tf
from tensorflow.python.ops import resource_variable_ops


def _key(tensor_name):
    return re.sub(r"[^0-9A-Za-z_.-]", "_", tensor_name)


@contextlib.contextmanager
def worker_local_variables(device=None):
    """Variables created here belong to this worker alone: not mirrored by an
    enclosing tf.distribute strategy scope, because residuals differ per worker."""
    def plain(next_creator, **kwargs):
        del next_creator  # the strategy's creator would mirror the variable
        return resource_variable_ops.default_variable_creator_v2(None, **kwargs)

    with tf.init_scope(), tf.variable_creator_scope(plain), tf.device(device):
        yield


class CompressionState(tf.Module):
    """Per-tensor state variables, created on first use and found again by name."""

    def __init__(self, name="tfcomp_state", device=None):
        super().__init__(name=name)
        self._device = device
        with worker_local_variables(device):
            self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="step")
        self.tensors = {}

    def get(self, tensor_name):
        """{state name: tf.Variable} for one tensor, or None if it has none yet."""
        return self.tensors.get(_key(tensor_name))

    def tensor_state(self, tensor_name, specs):
        """{state name: tf.Variable} for one tensor, created (zeros) on first call."""
        key = _key(tensor_name)
        if key not in self.tensors:
            with worker_local_variables(self._device):
                self.tensors[key] = {
                    name: tf.Variable(tf.zeros(shape, dtype), trainable=False, name=f"{key}/{name}")
                    for name, (shape, dtype) in specs.items()}
        return self.tensors[key]
