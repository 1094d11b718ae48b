"""The learnable tasks of benchmarks.convergence: model, data, loss, metric and the
learning rates at which dense training converges well, per optimizer.

Each trains on a 2-core CPU in seconds to minutes, on data shipped with a
package or generated (nothing downloaded).
"""
import dataclasses
from typing import Callable

import tensorflow as tf

from models import digits, markov_lm
from tfcomp.frozen_adam import FrozenVarianceAdam


def _classification_loss(y, logits):
    return tf.reduce_mean(tf.keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True))


def _accuracy(y, logits):
    predicted = tf.argmax(logits, axis=-1, output_type=tf.int64)
    return tf.reduce_mean(tf.cast(tf.equal(predicted, tf.cast(y, tf.int64)), tf.float32))


def _lm_accuracy(y, logits):
    """Next-token accuracy where the chain makes the token predictable (from position 2 on)."""
    return _accuracy(y[:, 1:], logits[:, 1:])


@dataclasses.dataclass(frozen=True)
class Task:
    name: str
    describe: str
    build: Callable  # (seed) -> a fresh Keras model, the same weights for a seed
    load: Callable  # () -> ((x, y), (x_test, y_test))
    loss: Callable
    metric: Callable
    epochs: int
    learning_rates: dict  # optimizer name -> learning rate (cosine-decayed to 0 over the run)
    target: float  # the held-out accuracy steps are counted to
    seeds: int = 3  # runs per configuration (model initialisation and data order)
    batch_per_worker: int = 32


TASKS = {
    "mlp": Task("mlp", "digits MLP 64-256-256-10", lambda seed: digits.build(hidden=256, seed=seed), digits.load,
                _classification_loss, _accuracy, epochs=12,
                learning_rates={"sgd_momentum": 0.1, "adam": 1e-3}, target=0.95),
    "cnn": Task("cnn", "digits CNN conv32-conv64-pool-128-10", lambda seed: digits.build_cnn(seed=seed),
                digits.load,
                _classification_loss, _accuracy, epochs=12,
                learning_rates={"sgd_momentum": 0.05, "adam": 1e-3}, target=0.95),
    "lstm_lm": Task("lstm_lm", "LSTM language model on a 2nd-order Markov chain (best accuracy "
                    f"{markov_lm.best_accuracy():.3f})", lambda seed: markov_lm.build(seed=seed), markov_lm.load,
                    _classification_loss, _lm_accuracy, epochs=6,
                    learning_rates={"sgd_momentum": 2.0, "adam": 1e-2}, target=0.78, seeds=1),
}

def optimizer(name, learning_rate, total_steps, frozen_variance=False):
    """SGD(momentum=0.9) or Adam, the learning rate cosine-decayed to 0 over total_steps;
    frozen_variance: tfcomp.FrozenVarianceAdam for Adam (its variance frozen when the
    exchange starts compressing)."""
    schedule = tf.keras.optimizers.schedules.CosineDecay(learning_rate, total_steps)
    if name == "sgd_momentum":
        return tf.keras.optimizers.SGD(schedule, momentum=0.9)
    if name == "adam":
        return FrozenVarianceAdam(schedule) if frozen_variance else tf.keras.optimizers.Adam(schedule)
    raise ValueError(f"unknown optimizer {name!r}: choose from sgd_momentum, adam")


OPTIMIZERS = ("sgd_momentum", "adam")

#: SignSGD's aggregate is +-1 per element, so the learning rate is every weight's
#: step: with SGD it needs one about 100x smaller than dense training's (as in
#: signSGD's paper); with Adam the task's own.
SIGN_SGD_LEARNING_RATE = 3e-4
