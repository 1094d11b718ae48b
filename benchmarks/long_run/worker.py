"""One worker of the long run: trains the main job's model (models/digits.py,
compiled as benchmarks/harness/train_worker.py does for tf.distribute or Horovod)
for --steps steps under model.fit and writes what benchmarks/long_run/probe.py
sampled as JSON.

Of train_worker's flags, --out, --engine, --compression, --global_batch,
--lr and --bandwidth_gbps apply; --epochs and --timeline* do not.
"""
import json
import statistics
import time

import tensorflow as tf
from absl import app, flags

from benchmarks.harness import train_worker
from tests.cluster.step_times import StepTimes
from benchmarks.long_run.probe import LongRunProbe, count_traces
from models import digits, registry

FLAGS = flags.FLAGS
flags.DEFINE_integer("steps", 2000, "Training steps (one Keras epoch over the repeated data).", lower_bound=1)
flags.DEFINE_integer("warmup", 200, "Steps after which nothing should trace, and ops are first counted.",
                     lower_bound=1)
flags.DEFINE_integer("sample_every", 10, "Steps between samples of RSS, traces and TensorFlow functions.",
                     lower_bound=1)
flags.DEFINE_integer("progress_every", 100, "Steps between progress lines (worker 0 / rank 0 only).",
                     lower_bound=1)
flags.DEFINE_float("minutes", None, "Train this long instead (--steps is then the most): every --agree_every "
                   "steps the workers average their elapsed time with the engine's own collective and stop "
                   "together once it passes. tfcomp's engines only.", lower_bound=0)
flags.DEFINE_integer("agree_every", 1000, "Steps between the workers' checks of --minutes.", lower_bound=1)
flags.DEFINE_bool("retrace_every_step", False, "Rebuild Keras' train function after every step, so that it "
                  "traces again: a run with it must report retraces (a check of the checks).")


def main(argv):
    del argv
    if FLAGS.warmup >= FLAGS.steps:
        raise app.UsageError(f"--warmup ({FLAGS.warmup}) must be less than --steps ({FLAGS.steps})")
    (x_train, y_train), _ = digits.load()
    lr = train_worker.learning_rate()
    compile_model = (train_worker.compile_for_horovod if FLAGS.engine == "horovod"
                     else train_worker.compile_for_tf_distribute)
    model, payload_bytes = compile_model(lr)
    chief = _chief(model)
    timer = StepTimes()
    probe = LongRunProbe(count_traces(model), FLAGS.steps, FLAGS.warmup, FLAGS.sample_every,
                         FLAGS.progress_every, FLAGS.compression, progress=chief,
                         retrace_every_step=FLAGS.retrace_every_step, step_times=timer.times)
    auto = train_worker.auto_of(model)
    callbacks = [timer, probe] + ([auto.callback()] if auto is not None else [])
    if FLAGS.minutes is not None:
        callbacks.append(StopAfter(60.0 * FLAGS.minutes, FLAGS.agree_every, _engine(model).mean_floats))
    model.fit(train_worker.batches(x_train, y_train).repeat(), epochs=1, steps_per_epoch=FLAGS.steps,
              verbose=0, callbacks=callbacks)

    steps = len(timer.times)
    _, dense_bytes, _ = registry.gradient_summary(model)
    after_warmup = sorted(timer.times[FLAGS.warmup:])
    train_worker.result_path().write_text(json.dumps({
        "compression": FLAGS.compression, "engine": FLAGS.engine, "steps": steps, "warmup": FLAGS.warmup,
        "samples": probe.samples, "ops": probe.ops, "concrete_functions": probe.concrete_functions,
        "step_ms": 1e3 * statistics.median(after_warmup),
        "step_ms_p90": 1e3 * after_warmup[int(0.9 * (len(after_warmup) - 1))],
        "bytes_per_step": payload_bytes(model.trainable_variables) if payload_bytes else dense_bytes,
        "dense_bytes": dense_bytes,
        "auto_history": auto.history if auto is not None else None}, default=str))


class StopAfter(tf.keras.callbacks.Callback):
    """Stops every worker at the same step once their mean elapsed time passes seconds."""

    def __init__(self, seconds, every, mean_floats):
        super().__init__()
        self.seconds, self.every, self.mean_floats = seconds, every, mean_floats
        self._start = None

    def on_train_begin(self, logs=None):
        self._start = time.monotonic()

    def on_train_batch_end(self, batch, logs=None):
        if (batch + 1) % self.every == 0 and self.mean_floats([time.monotonic() - self._start])[0] >= self.seconds:
            self.model.stop_training = True


def _engine(model):
    """The tfcomp engine that trains the model (its collectives outside the train step)."""
    engine = getattr(model.optimizer, "tfcomp_engine", None) or getattr(model.distribute_strategy, "engine", None)
    if engine is None:
        raise app.UsageError("--minutes needs one of tfcomp's engines (not --compression=none)")
    return engine


def _chief(model):
    """Worker 0 of tf.distribute's cluster, or Horovod's rank 0."""
    if FLAGS.engine == "horovod":
        import horovod.tensorflow.keras as hvd  # pylint: disable=import-outside-toplevel
        return hvd.rank() == 0
    return (model.distribute_strategy.cluster_resolver.task_id or 0) == 0


if __name__ == "__main__":
    flags.mark_flag_as_required("out")
    app.run(main)
