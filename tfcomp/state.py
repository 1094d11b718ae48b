"""Compressor state (residuals, factors, the step counter) as tf.Variables in
one trackable, so that tf.train.Checkpoint, model.save and BackupAndRestore
carry it when it is attached to the optimizer. A restart must not lose
error-feedback memory."""
import re

import tensorflow as tf


def _key(tensor_name):
    return re.sub(r"[^0-9A-Za-z_.-]", "_", tensor_name)


class CompressionState(tf.Module):
    """Per-tensor state variables, created on first use and found again by name."""

    def __init__(self, name="tfcomp_state"):
        super().__init__(name=name)
        self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="step")
        self.tensors = {}

    def tensor_state(self, tensor_name, specs):
        """{state name: tf.Variable} for one tensor, created (zeros) on first call."""
        key = _key(tensor_name)
        if key not in self.tensors:
            with tf.init_scope():
                self.tensors[key] = {
                    name: tf.Variable(tf.zeros(shape, dtype), trainable=False, name=f"{key}/{name}")
                    for name, (shape, dtype) in specs.items()}
        return self.tensors[key]
