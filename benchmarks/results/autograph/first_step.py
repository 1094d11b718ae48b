"""The first call of a custom-loop training step that calls into tfcomp: its trace.

    python benchmarks/results/autograph/first_step.py [--convert_tfcomp]

One Horovod rank (hvd.init() without horovodrun), a 64-256-256-10 MLP, SGD, a step
under tf.function that takes its gradients from tfcomp.horovod.DistributedGradientTape
(warmup_steps=0, min_compress_elements=100), alone and wrapped by tfcomp's Timeline.
Prints, per compressor, the seconds of the first call (the trace, then one run), of
the second (a run), and how many functions AutoGraph converted from tfcomp's modules.
--convert_tfcomp takes tfcomp's rule out of AutoGraph's conversion rules (tfcomp.autograph),
as tfcomp was before it had one. Each configuration runs in a fresh process (AutoGraph
caches what it converted): the command runs one configuration, given by --compressor
and --timeline.
"""
import collections
import tempfile
import time

from absl import app, flags
import tensorflow as tf
from tensorflow.python.autograph.core import config
from tensorflow.python.autograph.impl import api

FLAGS = flags.FLAGS
flags.DEFINE_bool("convert_tfcomp", False, "Let AutoGraph convert tfcomp's functions (remove tfcomp's rule).")
flags.DEFINE_string("compressor", "DRAGONN", "A tfcomp compressor name.")
flags.DEFINE_bool("timeline", False, "Wrap the step with tfcomp.callbacks.Timeline.wrap.")


def main(argv):
    del argv
    converted = collections.Counter()
    convert = api._convert_actual  # pylint: disable=protected-access

    def recording(entity, program_ctx):
        converted[entity.__module__.split(".")[0]] += 1
        return convert(entity, program_ctx)

    api._convert_actual = recording  # pylint: disable=protected-access
    import horovod.tensorflow as hvd  # pylint: disable=import-outside-toplevel
    import tfcomp  # pylint: disable=import-outside-toplevel
    import tfcomp.callbacks  # pylint: disable=import-outside-toplevel
    import tfcomp.horovod  # pylint: disable=import-outside-toplevel
    if FLAGS.convert_tfcomp:
        config.CONVERSION_RULES = tuple(r for r in config.CONVERSION_RULES if not r.matches("tfcomp"))
    hvd.init()
    model = tf.keras.Sequential([tf.keras.layers.Dense(256, activation="relu", input_shape=(64,)),
                                 tf.keras.layers.Dense(256, activation="relu"), tf.keras.layers.Dense(10)])
    optimizer = tf.keras.optimizers.SGD(0.1)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    compression = getattr(tfcomp, FLAGS.compressor)

    def step_body(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x))
        tape = tfcomp.horovod.DistributedGradientTape(tape, compression=compression, optimizer=optimizer,
                                                      warmup_steps=0, min_compress_elements=100)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    if FLAGS.timeline:
        step_body = tfcomp.callbacks.Timeline(tempfile.mkdtemp(), start_step=0, num_steps=2).wrap(
            step_body, optimizer=optimizer)
    step = tf.function(step_body)
    x, y = tf.random.normal((32, 64)), tf.zeros((32,), tf.int32)
    times = []
    for _ in range(2):
        start = time.perf_counter()
        step(x, y)
        times.append(time.perf_counter() - start)
    print(f"{FLAGS.compressor:9s} timeline={FLAGS.timeline!s:5s} convert_tfcomp={FLAGS.convert_tfcomp!s:5s} "
          f"first call {times[0]:6.2f} s, second {1e3 * times[1]:6.1f} ms, "
          f"converted: tfcomp {converted['tfcomp']}, other {sum(converted.values()) - converted['tfcomp']}")


if __name__ == "__main__":
    app.run(main)
