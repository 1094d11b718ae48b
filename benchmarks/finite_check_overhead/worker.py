"""One worker of benchmarks/finite_check_overhead/: the main job's model and
compressor settings (benchmarks/harness/train_worker.py, whose flags it takes) in a
custom loop under tfcomp's MultiWorkerMirroredStrategy, with two step
functions traced from one strategy and one compressor state: one whose
exchange checks for non-finite gradients, one whose exchange does not. They
alternate step by step, so both see the same machine load. Writes each step's
host time and which step function ran."""
import copy
import json
import time

import tensorflow as tf
from absl import app, flags

import tfcomp
from benchmarks.harness import train_worker as job  # defines --compression, --steps, --out, ...
from models import digits

FLAGS = flags.FLAGS
flags.DEFINE_integer("steps", 400, "Steps per step function (they alternate).")


def main(argv):
    del argv
    (x_train, y_train), _ = digits.load()
    strategy = tfcomp.distribute.MultiWorkerMirroredStrategy(**job.strategy_options(FLAGS.compression))
    cross_device_ops = strategy.extended._cross_device_ops  # pylint: disable=protected-access
    checked = cross_device_ops.exchange
    unchecked = copy.copy(checked)
    unchecked.check_finite = False
    with strategy.scope():
        model = digits.build()
        optimizer = tf.keras.optimizers.SGD(job.learning_rate(),
                                            momentum=0.9)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")
    ds = tf.data.Dataset.from_tensor_slices((x_train, y_train)).shuffle(len(x_train), seed=0)
    ds = strategy.experimental_distribute_dataset(ds.batch(FLAGS.global_batch, drop_remainder=True).repeat())

    def replica_step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.nn.compute_average_loss(loss_fn(y, model(x, training=True)),
                                              global_batch_size=FLAGS.global_batch)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    def step(batch):
        return strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(replica_step, args=batch), axis=None)

    steps = {"with": tf.function(step), "without": tf.function(step)}
    batches = iter(ds)
    for name, exchange in (("with", checked), ("without", unchecked)):  # each traces with its exchange
        cross_device_ops.exchange = exchange
        float(steps[name](next(batches)))
    times = {"with": [], "without": []}
    for i in range(2 * FLAGS.steps):
        name = ("with", "without")[(i + i // 2) % 2]  # with, without, without, with, ...
        start = time.perf_counter()
        float(steps[name](next(batches)))
        times[name].append(time.perf_counter() - start)
    with open(FLAGS.out, "w") as f:
        json.dump({"step_ms": {k: [1e3 * t for t in v] for k, v in times.items()}}, f)


if __name__ == "__main__":
    flags.mark_flag_as_required("out")
    app.run(main)
