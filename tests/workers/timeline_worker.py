"""One worker of a timeline test: trains an MLP with MultiWorkerMirroredStrategy
(tfcomp's with a compressor, or tf.distribute's) under model.fit or a custom
loop with tfcomp.callbacks.Timeline, and writes the host-measured time of
every step and the timeline's file paths as JSON."""
import json
import time

import numpy as np
import tensorflow as tf
from absl import app, flags

import tfcomp
from tests.cluster.step_times import StepTimes
from tests.workers import workload
from tfcomp.compressors.sparse import Sparsifier

FLAGS = flags.FLAGS
flags.DEFINE_string("out", None, "Result JSON path.")
flags.DEFINE_string("timeline", None, "Timeline path (directory or NAME.json).")
flags.DEFINE_string("compression", "NoCompression", "A tfcomp compressor spec ('ACPSGD:warmup_steps=0'), or 'plain' for "
                    "tf.distribute's strategy.")
flags.DEFINE_enum("loop", "fit", ["fit", "custom"], "model.fit or strategy.run + apply_gradients.")
flags.DEFINE_integer("steps", 12, "Training steps.")
flags.DEFINE_integer("start_step", 2, "Timeline window start.")
flags.DEFINE_integer("num_steps", 8, "Timeline window length.")
flags.DEFINE_integer("hidden", 512, "Hidden units (larger: longer steps).")
flags.DEFINE_integer("warmup_steps", 0, "Exchange option.")
flags.DEFINE_integer("bucket_bytes", None, "Exchange option (default: the exchange's).")
flags.DEFINE_bool("serialize", True, "Timeline option: False records the step as it runs.")

GLOBAL_BATCH = 256
FEATURES = 256


def data():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((GLOBAL_BATCH * FLAGS.steps, FEATURES)).astype(np.float32)
    y = np.argmax(x[:, :10], axis=1).astype(np.int64)
    return x, y


def build_model():
    tf.keras.utils.set_random_seed(1)
    return tf.keras.Sequential([tf.keras.Input((FEATURES,)), tf.keras.layers.Dense(FLAGS.hidden, activation="relu"),
                                tf.keras.layers.Dense(FLAGS.hidden, activation="relu"), tf.keras.layers.Dense(10)])


def make_strategy():
    options = tf.distribute.experimental.CommunicationOptions(timeout_seconds=60)
    if FLAGS.compression == "plain":
        return tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
    compressor = workload.compressor(FLAGS.compression)
    if isinstance(compressor, Sparsifier):
        compressor = workload.compressor(FLAGS.compression, ratio=0.01)
    buckets = {} if FLAGS.bucket_bytes is None else {"bucket_bytes": FLAGS.bucket_bytes}
    return tfcomp.distribute.MultiWorkerMirroredStrategy(
        compressor, communication_options=options, selection=False, warmup_steps=FLAGS.warmup_steps, **buckets)


def train_fit(strategy, timeline, x, y):
    with strategy.scope():
        model = build_model()
        model.compile(optimizer=tf.keras.optimizers.SGD(0.01),
                      loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(GLOBAL_BATCH)
    opts = tf.data.Options()
    opts.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    timer = StepTimes()
    # The timer's hooks run around the Timeline's, so its times include the Timeline's reads.
    model.fit(ds.with_options(opts), epochs=1, verbose=0, callbacks=[timer, timeline])
    return timer.times


def train_custom(strategy, timeline, x, y):
    with strategy.scope():
        model = build_model()
        optimizer = tf.keras.optimizers.SGD(0.01)
    ds = strategy.experimental_distribute_dataset(tf.data.Dataset.from_tensor_slices((x, y)).batch(GLOBAL_BATCH))
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")

    def replica_step(xb, yb):
        with tf.GradientTape() as tape:
            loss = tf.nn.compute_average_loss(loss_fn(yb, model(xb)), global_batch_size=GLOBAL_BATCH)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    def step_body(batch):
        return strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(replica_step, args=batch), axis=None)

    step = tf.function(timeline.wrap(step_body, optimizer=optimizer))
    times = []
    for batch in ds:
        start = time.perf_counter()
        step(batch)
        times.append(time.perf_counter() - start)
        timeline.record()
    timeline.write()
    return times


def main(argv):
    del argv
    x, y = data()
    strategy = make_strategy()
    timeline = tfcomp.callbacks.Timeline(FLAGS.timeline, start_step=FLAGS.start_step, num_steps=FLAGS.num_steps,
                                         serialize=FLAGS.serialize)
    times = (train_fit if FLAGS.loop == "fit" else train_custom)(strategy, timeline, x, y)
    result = {"step_times": times, "paths": {k: str(v) for k, v in timeline.paths().items()},
              "worker": timeline.worker,
              "records": [{"step": r.step, "backward_end": r.backward_end, "collectives": r.collectives,
                           "phases": [s.phase for s in r.segments]} for r in timeline.records]}
    with open(FLAGS.out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    flags.mark_flags_as_required(["out", "timeline"])
    app.run(main)
