"""Each training step's host wall time, for the workers that tests and benchmarks launch."""
import time

import tensorflow as tf


class StepTimes(tf.keras.callbacks.Callback):
    """Host wall time of each training batch, from batch begin to batch end."""

    def __init__(self):
        super().__init__()
        self.times, self._start = [], None

    def on_train_batch_begin(self, batch, logs=None):
        self._start = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        self.times.append(time.perf_counter() - self._start)
