"""Data-parallel training of a Keras model on the Emulator, for convergence studies.

Every step, each of K workers computes the gradient of its own shard of the
global batch, the workers exchange them through tfcomp's Exchange (the same
code the real engines run), and the optimizer applies the result. Every worker
gets bitwise the same result (emulator collectives reduce in rank order), so
one model and one optimizer stand for all K. A step is one tf.function per
worker, so a small model trains at a few milliseconds a step on a CPU.
"""
import dataclasses
import time

import numpy as np
import tensorflow as tf

from tfcomp.keras import version as keras_in_use
from tfcomp.testing.emulator import Emulator
from tfcomp.keras.optimizers import bind_exchange


@dataclasses.dataclass
class History:
    """The held-out metric after each evaluation, with the steps and seconds it took."""
    steps: list = dataclasses.field(default_factory=list)
    seconds: list = dataclasses.field(default_factory=list)
    metric: list = dataclasses.field(default_factory=list)
    loss: list = dataclasses.field(default_factory=list)
    warmup_steps: int = 0  # the dense steps the exchange ran first

    @property
    def final(self):
        return self.metric[-1]

    def steps_to(self, target):
        """Steps until the held-out metric first reached target, or None."""
        for steps, value in zip(self.steps, self.metric):
            if value >= target:
                return steps
        return None


def train(model, optimizer, data, loss_fn, metric_fn, compression=None, *, num_workers=2,
          batch_per_worker=32, epochs=12, evals_per_epoch=1, seed=0, **exchange_options):
    """Trains model with optimizer on data = ((x, y), (x_test, y_test)) across
    num_workers emulated workers; returns the History of metric_fn(y_test, model(x_test)).

    loss_fn(y, outputs) is each worker's mean loss on its shard.
    """
    (x, y), (x_test, y_test) = data
    global_batch = batch_per_worker * num_workers
    steps_per_epoch = len(x) // global_batch
    if steps_per_epoch < 1:
        raise ValueError(f"{len(x)} examples make no global batch of {global_batch}")
    emulator = Emulator(num_workers, compression, **exchange_options)
    emulator.exchange.learn_steps_per_epoch(steps_per_epoch)  # as an engine learns it from model.fit's data
    bind_exchange(emulator.exchange, optimizer)
    variables = model.trainable_variables
    names = [keras_in_use.tensor_name(v) for v in variables]
    eval_every = max(1, steps_per_epoch // evals_per_epoch)

    def worker_step(rank):
        @tf.function
        def step(xb, yb):
            with tf.GradientTape() as tape:
                loss = loss_fn(yb, model(xb, training=True))
            grads = tape.gradient(loss, variables)
            return emulator.exchange.reduce(grads, names, emulator.states[rank], emulator.collectives(rank))
        return step

    steps = [worker_step(rank) for rank in range(num_workers)]

    @tf.function
    def apply(grads):
        optimizer.apply_gradients(zip(grads, variables))

    @tf.function
    def evaluate():
        outputs = model(x_test, training=False)
        return metric_fn(y_test, outputs), loss_fn(y_test, outputs)

    history = History(warmup_steps=emulator.exchange.warmup_steps)
    rng = np.random.default_rng(seed)
    step, seconds = 0, 0.0
    for _ in range(epochs):
        order = rng.permutation(len(x))
        for b in range(steps_per_epoch):
            batch = order[b * global_batch:(b + 1) * global_batch]
            shards = [(x[batch[r::num_workers]], y[batch[r::num_workers]]) for r in range(num_workers)]
            start = time.perf_counter()
            results = emulator.run(steps, shards)
            apply(results[0])
            seconds += time.perf_counter() - start
            step += 1
            if step % eval_every == 0 or step == steps_per_epoch * epochs:
                metric, loss = evaluate()
                history.steps.append(step)
                history.seconds.append(seconds)
                history.metric.append(float(metric))
                history.loss.append(float(loss))
    return history
