"""One worker of the main job: trains models/digits.py's MLP with
MultiWorkerMirroredStrategy (tf.distribute's, or tfcomp's with a compressor)
under model.fit, and writes its step time, traffic and test accuracy as JSON."""
import json
import statistics
import time

import numpy as np
import tensorflow as tf
from absl import app, flags

import tfcomp
from models import digits
from tfcomp.compressors.lowrank import LowRank
from tfcomp.compressors.sparse import Sparsifier
from tfcomp.selection import EfficiencyAwareSelection, Network

FLAGS = flags.FLAGS
flags.DEFINE_string("out", None, "Result JSON path.")
flags.DEFINE_string("compression", "none", "'none' (tf.distribute's strategy) or a tfcomp compressor name.")
flags.DEFINE_integer("epochs", 8, "Training epochs.")
flags.DEFINE_integer("global_batch", 64, "Global batch size.")
flags.DEFINE_float("lr", 0.05, "SGD learning rate (momentum 0.9).")
flags.DEFINE_float("bandwidth_gbps", 10.0, "The link tensor selection plans for (sparsifiers).")
flags.DEFINE_string("timeline", None, "Record a tfcomp.callbacks.Timeline from the second epoch on here.")
flags.DEFINE_integer("timeline_steps", None, "Steps the timeline records (default: one epoch).")

# A step of signSGD moves every weight by the full learning rate.
LEARNING_RATE_SCALE = {"SignSGD": 0.02}
# The digits MLP is small: keep 1% rather than the papers' 0.1%, and rank 4.
SPARSE_RATIO = 0.01
RANK = 4


def strategy_options(name):
    """The compressor, and for the sparsifiers tensor selection planned for this link."""
    cls = getattr(tfcomp, name)
    if issubclass(cls, LowRank):
        return {"compression": cls(RANK)}
    if not issubclass(cls, Sparsifier):
        return {"compression": cls}
    selection = EfficiencyAwareSelection(Network(bandwidth_gbps=FLAGS.bandwidth_gbps))
    return {"compression": cls(ratio=SPARSE_RATIO), "selection": selection}


class StepTimes(tf.keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.times, self._last = [], None

    def on_train_batch_begin(self, batch, logs=None):
        self._last = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        self.times.append(time.perf_counter() - self._last)


def main(argv):
    del argv
    (x_train, y_train), (x_test, y_test) = digits.load()
    options = tf.distribute.experimental.CommunicationOptions(timeout_seconds=120)
    if FLAGS.compression == "none":
        strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
    else:
        strategy = tfcomp.distribute.MultiWorkerMirroredStrategy(
            communication_options=options, **strategy_options(FLAGS.compression))
    lr = FLAGS.lr * LEARNING_RATE_SCALE.get(FLAGS.compression, 1.0)
    with strategy.scope():
        model = digits.build()
        model.compile(optimizer=tf.keras.optimizers.SGD(lr, momentum=0.9),
                      loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    ds = tf.data.Dataset.from_tensor_slices((x_train, y_train)).shuffle(len(x_train), seed=0)
    ds = ds.batch(FLAGS.global_batch, drop_remainder=True)
    opts = tf.data.Options()
    opts.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    timer = StepTimes()
    steps_per_epoch = len(x_train) // FLAGS.global_batch
    callbacks = [timer]
    if FLAGS.timeline:  # before the timer: its reads at batch end count in the step times
        callbacks.insert(0, tfcomp.callbacks.Timeline(FLAGS.timeline, start_step=steps_per_epoch,
                                                      num_steps=FLAGS.timeline_steps or steps_per_epoch))
    model.fit(ds.with_options(opts), epochs=FLAGS.epochs, verbose=0, callbacks=callbacks)

    dense_bytes = sum(v.shape.num_elements() * v.dtype.size for v in model.trainable_variables)
    sent = dense_bytes if FLAGS.compression == "none" else strategy.payload_bytes(model.trainable_variables)
    accuracy = float(np.mean(np.argmax(model(x_test).numpy(), axis=1) == y_test))
    with open(FLAGS.out, "w") as f:
        json.dump({"step_ms": 1e3 * statistics.median(timer.times[steps_per_epoch:]),
                   "bytes_per_step": sent, "dense_bytes": dense_bytes, "accuracy": accuracy}, f)


if __name__ == "__main__":
    flags.mark_flag_as_required("out")
    app.run(main)
