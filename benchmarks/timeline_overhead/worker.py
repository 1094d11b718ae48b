"""One worker of benchmarks/timeline_overhead/: the main job's model and
training (benchmarks/harness/train_worker.py, whose flags it takes), with a
Timeline whose window is every other block of steps from the second epoch on,
so that steps with and without recording run side by side in one run. Writes
each step's host time and whether it was recorded."""
import json
import time

import tensorflow as tf
from absl import app, flags

import tfcomp
from benchmarks.harness import train_worker as job  # defines --compression, --epochs, --out, ...
from models import digits

FLAGS = flags.FLAGS
flags.DEFINE_integer("block", 1, "Steps per block; blocks alternate between Keras' "
                     "train function and the Timeline's.")
flags.DEFINE_string("timeline_dir", None, "Where the Timeline writes its files.")


class AlternatingTimeline(tfcomp.callbacks.Timeline):
    """A Timeline recording blocks 1, 3, 5, ... of steps counted from `first`."""

    def __init__(self, path, first, block):
        super().__init__(path)
        self.first, self.block = first, block
        self.read_seconds = []  # host time of each recorded step's read (inside its step time)

    def record(self, marks=None):
        recorded, start = self.in_window(), time.perf_counter()
        super().record(marks)
        if recorded:
            self.read_seconds.append(time.perf_counter() - start)

    def in_window(self, step=None):
        step = self._step if step is None else step
        return step >= self.first and (step - self.first) // self.block % 2 == 1


class TaggedStepTimes(tf.keras.callbacks.Callback):
    def __init__(self, timeline):
        super().__init__()
        self.timeline = timeline
        self.steps, self._start, self._recorded = [], None, None

    def on_train_batch_begin(self, batch, logs=None):
        self._recorded = self.timeline.in_window()
        self._start = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        self.steps.append((time.perf_counter() - self._start, self._recorded))


def main(argv):
    del argv
    (x_train, y_train), _ = digits.load()
    options = tf.distribute.experimental.CommunicationOptions(timeout_seconds=120)
    if FLAGS.compression == "none":
        strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
    else:
        strategy = tfcomp.distribute.MultiWorkerMirroredStrategy(
            communication_options=options, **job.strategy_options(FLAGS.compression))
    lr = job.learning_rate()
    with strategy.scope():
        model = digits.build()
        model.compile(optimizer=tf.keras.optimizers.SGD(lr, momentum=0.9),
                      loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    ds = tf.data.Dataset.from_tensor_slices((x_train, y_train)).shuffle(len(x_train), seed=0)
    ds = ds.batch(FLAGS.global_batch, drop_remainder=True)
    opts = tf.data.Options()
    opts.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    steps_per_epoch = len(x_train) // FLAGS.global_batch
    timeline = AlternatingTimeline(FLAGS.timeline_dir, first=steps_per_epoch, block=FLAGS.block)
    timer = TaggedStepTimes(timeline)
    # The timeline first: its read at batch end falls inside the timer's step.
    model.fit(ds.with_options(opts), epochs=FLAGS.epochs, verbose=0, callbacks=[timeline, timer])
    steps = timer.steps[steps_per_epoch:]
    first_recorded = next(i for i, (_, recorded) in enumerate(steps) if recorded)
    del steps[first_recorded]  # it also traced the instrumented train function
    with open(FLAGS.out, "w") as f:
        json.dump({"recorded_ms": [1e3 * t for t, r in steps if r], "plain_ms": [1e3 * t for t, r in steps if not r],
                   "read_ms": [1e3 * t for t in timeline.read_seconds[1:]],
                   "timeline_records": len(timeline.records)}, f)


if __name__ == "__main__":
    flags.mark_flags_as_required(["out", "timeline_dir"])
    app.run(main)
