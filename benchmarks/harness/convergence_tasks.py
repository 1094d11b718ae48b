"""The learnable tasks of benchmarks.convergence: model, data, loss, metric and the
learning rates at which dense training converges well, per optimizer
(benchmarks/results/dense_lr_sweep.md: the language model's are the smallest of
a factor-2 grid at which dense ends within half a point of the grid's best; at
half them it was still climbing when its learning rate reached 0), and SignSGD's
under SGD by the same rule (sign_sgd_lr_sweep.md; the digits tasks share the
smallest that converges on both). The digits CNN trains at 2e-3 under Adam, the
smallest converging rate (dense_lr_sweep_digits.md: 0.985 at 1e-3 against 0.992).

Each trains on a 2-core CPU in seconds to minutes, on data shipped with a
package or generated (nothing downloaded).
"""
import dataclasses
import time
from typing import Callable

import tensorflow as tf

from models import digits, markov_lm
from tfcomp.keras.frozen_adam import FrozenVarianceAdam
from tfcomp.testing.emulated_training import train


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
    # SignSGD's under SGD with momentum (with Adam it trains at the task's own): its aggregate is
    # +-1 per element, so the learning rate is every weight's step, 100-400x smaller than dense's.
    sign_sgd_learning_rate: float = 6e-4
    seeds: int = 3  # runs per configuration (model initialisation and data order)
    batch_per_worker: int = 32
    # Held-out evaluations per epoch, the resolution of steps to target: every 2 of the digits
    # tasks' 22 steps per epoch on 2 workers (dense reaches their targets at steps 44-62, so
    # 1.3x dense falls between two evaluations 5% apart), every 8 of the language model's 64.
    evals_per_epoch: int = 11

    def learning_rate(self, optimizer_name, compressor_name=""):
        """The rate a compressor (class name; empty: dense) trains the task at."""
        if compressor_name == "SignSGD" and optimizer_name == "sgd_momentum":
            return self.sign_sgd_learning_rate
        return self.learning_rates[optimizer_name]


TASKS = {
    "mlp": Task("mlp", "digits MLP 64-256-256-10", lambda seed: digits.build(hidden=256, seed=seed), digits.load,
                _classification_loss, _accuracy, epochs=12,
                learning_rates={"sgd_momentum": 0.1, "adam": 1e-3}, target=0.95),
    "cnn": Task("cnn", "digits CNN conv32-conv64-pool-128-10", lambda seed: digits.build_cnn(seed=seed),
                digits.load,
                _classification_loss, _accuracy, epochs=12,
                learning_rates={"sgd_momentum": 0.05, "adam": 2e-3}, target=0.95),
    "lstm_lm": Task("lstm_lm", "LSTM language model on a 2nd-order Markov chain (best accuracy "
                    f"{markov_lm.best_accuracy():.3f})", lambda seed: markov_lm.build(seed=seed), markov_lm.load,
                    _classification_loss, _lm_accuracy, epochs=6,
                    learning_rates={"sgd_momentum": 4.0, "adam": 2e-2}, target=0.78, sign_sgd_learning_rate=1e-2,
                    seeds=1, evals_per_epoch=8),
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


def train_seed(task, optimizer_name, factory, seed, learning_rate=None, warmup_epochs=0, frozen_variance=False, *,
               workers=2, epochs_scale=1.0, evals_per_epoch=0):
    """One run of a task on `workers` emulated workers, every eligible tensor compressed by
    factory() (None: dense) after warmup_epochs of dense training: its held-out curve, final
    accuracy and steps to the task's target, evaluated evals_per_epoch times per epoch (0: the
    task's own)."""
    data = task.load()
    epochs = max(1, round(task.epochs * epochs_scale))
    steps_per_epoch = len(data[0][0]) // (task.batch_per_worker * workers)
    steps = epochs * steps_per_epoch
    lr = learning_rate or task.learning_rates[optimizer_name]
    start = time.perf_counter()
    history = train(task.build(seed), optimizer(optimizer_name, lr, steps, frozen_variance), data, task.loss,
                    task.metric, factory() if factory else None, num_workers=workers,
                    batch_per_worker=task.batch_per_worker, epochs=epochs,
                    evals_per_epoch=evals_per_epoch or task.evals_per_epoch,
                    seed=seed,
                    selection=False,  # every eligible tensor compressed: the worst case for accuracy
                    warmup_steps=warmup_epochs * steps_per_epoch)
    return {"steps": history.steps, "metric": history.metric, "final": history.final,
            "steps_to_target": history.steps_to(task.target), "learning_rate": lr,
            "warmup_steps": history.warmup_steps, "seconds": time.perf_counter() - start}
