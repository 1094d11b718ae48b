"""One worker of the main job (benchmarks.main_job): trains a model of
models/registry.py (the digits MLP unless --model says otherwise) under model.fit with
MultiWorkerMirroredStrategy (tf.distribute's, or tfcomp's with a compressor) or as a
Horovod rank (Horovod's optimizer wrapper, or tfcomp's), and writes its step time,
traffic and test accuracy as JSON. The workers of the end-to-end, long-run,
finite-check and Timeline-overhead benchmarks build on its flags and compiling."""
import json
import pathlib
import statistics
import time

import numpy as np
import tensorflow as tf
from absl import app, flags, logging

import tfcomp
from benchmarks.harness import compression_specs
from tests.cluster.step_times import StepTimes
from models import digits, registry
from tfcomp.keras import version as keras_in_use
from tfcomp.compressors.sparse import Sparsifier
from tfcomp.exchange.selection import EfficiencyAwareSelection, Network

FLAGS = flags.FLAGS
flags.DEFINE_string("out", None, "Result JSON path (with --engine=horovod: a directory for rank<r>.json).")
flags.DEFINE_enum("engine", "tf.distribute", ["tf.distribute", "horovod"],
                  "MultiWorkerMirroredStrategy workers (TF_CONFIG), or Horovod ranks (under horovodrun).")
flags.DEFINE_string("compression", "none", "'none' (tf.distribute's strategy) or a tfcomp compressor name, "
                    "optionally with knobs: 'DGC:ratio=0.001', 'PowerSGD:rank=2'.")
flags.DEFINE_string("model", "digits_mlp", "A model of models/registry.py.")
flags.DEFINE_string("size", "small", "The model's size setting (small, full; some models have more).")
flags.DEFINE_integer("epochs", 8, "Training epochs (the first is not timed).", lower_bound=2)
flags.DEFINE_integer("steps_per_epoch", None, "Steps per epoch (default: one pass over the training set).",
                     lower_bound=1)
flags.DEFINE_integer("global_batch", 64, "Global batch size.")
flags.DEFINE_float("lr", None, "Learning rate of the model's optimizer (SGD with momentum 0.9; Adam for bert) "
                   "(default: the model's, models/registry.py).")
flags.DEFINE_float("bandwidth_gbps", 10.0, "The link tensor selection plans for (sparsifiers).")
flags.DEFINE_string("timeline", None, "Record a tfcomp.callbacks.Timeline from the second epoch on here.")
flags.DEFINE_float("collective_timeout_s", None, "CommunicationOptions.timeout_seconds (default: none). "
                   "TensorFlow holds a sleeping thread per collective launch for this long.")
flags.DEFINE_integer("timeline_steps", None, "Steps the timeline records (default: one epoch).")
flags.DEFINE_integer("eval_every", 50, "Steps between test-accuracy evaluations (the accuracy curve against "
                     "training time).", lower_bound=1)
flags.DEFINE_bool("check_finite", True, "tfcomp's per-step non-finite flag (the exchange's check_finite).")
flags.DEFINE_integer("auto_audit_steps", 0, "With --compression=auto: tfcomp.Auto's audit_steps (after its "
                     "decision, time the kept configuration, dense and every single candidate side by side).",
                     lower_bound=0)
flags.DEFINE_integer("auto_replan_every", None, "With --compression=auto: tfcomp.Auto's replan_every (compare "
                     "the plan's step time with what it measured this many steps at a time, and plan again "
                     "where it drifted).", lower_bound=2)

# A step of signSGD moves every weight by the full learning rate.
LEARNING_RATE_SCALE = {"SignSGD": 0.02}
def strategy_options(spec):
    """The compressor (a spec for tfcomp.compressors.registry.parse_compressor: a bare name
    is the compressor at its defaults), and for the sparsifiers tensor selection
    planned for this link; 'plan:PATH' is the tfcomp.Plan that `python -m
    tfcomp.analysis plan --output=PATH` wrote, 'auto' a tfcomp.Auto() (whose
    callback the worker adds: auto_of). Where --steps_per_epoch is given, it is the
    epoch of the compressors' default dense start, as Keras counts it; otherwise the
    strategy learns one pass over the training data."""
    options = {"check_finite": FLAGS.check_finite, "steps_per_epoch": FLAGS.steps_per_epoch}
    if compression_specs.is_plan(spec):
        return {"compression": tfcomp.Plan.load(compression_specs.plan_path(spec)), **options}
    if spec == compression_specs.AUTO:
        return {"compression": tfcomp.Auto(audit_steps=FLAGS.auto_audit_steps,
                                           replan_every=FLAGS.auto_replan_every), **options}
    compressor = compression_specs.compressor(spec)
    if not isinstance(compressor, Sparsifier):
        return {"compression": compressor, **options}
    selection = EfficiencyAwareSelection(Network(bandwidth_gbps=FLAGS.bandwidth_gbps))
    return {"compression": compressor, "selection": selection, **options}


def _exchange_of(model):
    """The tfcomp exchange the model's strategy or optimizer runs, or None."""
    engine = getattr(model.optimizer, "tfcomp_engine", None)  # Horovod's optimizer wrapper
    return engine.exchange if engine is not None else getattr(model.distribute_strategy, "exchange", None)


def dense_start(model):
    """The dense steps tfcomp's exchange ran before compressing (None: not tfcomp's)."""
    exchange = _exchange_of(model)
    return exchange.warmup_steps if exchange is not None else None


def auto_of(model):
    """The tfcomp.Auto the model's strategy or optimizer runs, or None."""
    exchange = _exchange_of(model)
    return exchange.controller if exchange is not None else None


def _loss():
    return tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def _sgd(lr):
    return tf.keras.optimizers.SGD(lr, momentum=0.9)


def compile_for_tf_distribute(lr, build=digits.build, loss=_loss, optimizer=_sgd):
    """The model (build()) compiled with optimizer(lr) under tf.distribute's strategy
    or tfcomp's; returns (model, payload_bytes)."""
    options = tf.distribute.experimental.CommunicationOptions(timeout_seconds=FLAGS.collective_timeout_s)
    if FLAGS.compression != "none":
        strategy = tfcomp.distribute.MultiWorkerMirroredStrategy(
            communication_options=options, **strategy_options(FLAGS.compression))
    elif keras_in_use.in_use().major >= 3:
        # Keras 3's model.fit fails under tf.distribute's own strategy with more than one worker
        # (keras-team/keras#20585): dense is tfcomp's strategy without compression, the same allreduce.
        logging.info("Keras %s: the dense baseline runs tfcomp's strategy with NoCompression",
                     keras_in_use.in_use().version)
        strategy = tfcomp.distribute.MultiWorkerMirroredStrategy(tfcomp.NoCompression(), communication_options=options)
    else:
        strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
    with strategy.scope():
        model = build()
        model.compile(optimizer=optimizer(lr), loss=loss())
    return model, strategy.payload_bytes if FLAGS.compression != "none" else None


def compile_for_horovod(lr, build=digits.build, loss=_loss, optimizer=_sgd):
    """The model (build()) compiled with optimizer(lr) in Horovod's optimizer wrapper
    or tfcomp's; returns (model, payload_bytes)."""
    import horovod.tensorflow.keras as hvd  # pylint: disable=import-outside-toplevel
    import tfcomp.horovod  # pylint: disable=import-outside-toplevel,redefined-outer-name
    hvd.init()
    if FLAGS.compression == "none":
        wrapped = hvd.DistributedOptimizer(optimizer(lr))
    else:
        wrapped = tfcomp.horovod.DistributedOptimizer(optimizer(lr), **strategy_options(FLAGS.compression))
    model = build()
    model.compile(optimizer=wrapped, loss=loss())
    return model, wrapped.tfcomp_engine.payload_bytes if FLAGS.compression != "none" else None


def batches(x_train, y_train):
    """Global batches; under Horovod each rank takes its slice of every one, as
    tf.distribute's DATA sharding does."""
    ds = tf.data.Dataset.from_tensor_slices((x_train, y_train)).shuffle(len(x_train), seed=0)
    ds = ds.batch(FLAGS.global_batch, drop_remainder=True)
    if FLAGS.engine == "horovod":
        import horovod.tensorflow.keras as hvd  # pylint: disable=import-outside-toplevel
        per_rank = FLAGS.global_batch // hvd.size()
        mine = slice(hvd.rank() * per_rank, (hvd.rank() + 1) * per_rank)
        return ds.map(lambda x, y: (x[mine], y[mine]))
    opts = tf.data.Options()
    opts.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return ds.with_options(opts)


def learning_rate():
    lr = registry.MODELS[FLAGS.model].learning_rate if FLAGS.lr is None else FLAGS.lr
    return lr * LEARNING_RATE_SCALE.get(FLAGS.compression.split(":")[0], 1.0)


def evaluate(model, x, y, metric, batch=512):
    """The model's metric on the test set, run locally: metric(targets, logits) -> mean
    over a batch, or "accuracy" (top-1 of the logits' last axis)."""
    total = 0.0
    for i in range(0, len(x), batch):
        logits, targets = model(x[i:i + batch], training=False), y[i:i + batch]
        if callable(metric):
            value = float(metric(targets, logits))
        else:
            value = float(np.mean(np.argmax(logits.numpy(), axis=-1) == targets))
        total += value * len(targets)
    return total / len(x)


class Evaluator(tf.keras.callbacks.Callback):
    """Test accuracy every eval_every steps, against training wall time: from the
    end of the first step (which traces the train function, a one-off cost the
    same for any length of training), the evaluations' own time left out."""

    def __init__(self, x_test, y_test, eval_every, metric):
        super().__init__()
        self.x_test, self.y_test, self.eval_every, self.metric = x_test, y_test, eval_every, metric
        self.curve = []  # (training seconds, steps done, accuracy)
        self._start = self._excluded = 0.0
        self._steps = 0

    def on_train_batch_end(self, batch, logs=None):
        self._steps += 1
        if self._steps == 1:
            self._start = time.perf_counter()
        if self._steps % self.eval_every == 0:
            begun = time.perf_counter()
            seconds = begun - self._start - self._excluded
            accuracy = evaluate(self.model, self.x_test, self.y_test, self.metric)
            self.curve.append((seconds, self._steps, accuracy))
            self._excluded += time.perf_counter() - begun


def result_path():
    """tf.distribute's workers get a file each; Horovod's ranks share the command line and a directory."""
    if FLAGS.engine == "horovod":
        import horovod.tensorflow.keras as hvd  # pylint: disable=import-outside-toplevel
        out = pathlib.Path(FLAGS.out)
        out.mkdir(parents=True, exist_ok=True)
        return out / f"rank{hvd.rank()}.json"
    return pathlib.Path(FLAGS.out)


def main(argv):
    del argv
    if FLAGS.model not in registry.MODELS or FLAGS.size not in registry.MODELS[FLAGS.model].sizes:
        raise app.UsageError(f"no model {FLAGS.model!r} of size {FLAGS.size!r} in models/registry.py")
    spec = registry.MODELS[FLAGS.model]
    (x_train, y_train), (x_test, y_test) = spec.data(FLAGS.size)
    compile_model = compile_for_horovod if FLAGS.engine == "horovod" else compile_for_tf_distribute
    model, payload_bytes = compile_model(learning_rate(), build=lambda: spec.build(FLAGS.size), loss=spec.loss,
                                         optimizer=spec.optimizer)
    timer = StepTimes()
    steps_per_epoch = min(len(x_train) // FLAGS.global_batch, FLAGS.steps_per_epoch or len(x_train))
    evaluator = Evaluator(x_test, y_test, FLAGS.eval_every, spec.metric)
    callbacks = [timer, evaluator]
    auto = auto_of(model)
    if auto is not None:
        callbacks.append(auto.callback())
    if FLAGS.timeline and auto is None:  # before the timer: its reads at batch end count in the step times
        callbacks.insert(0, tfcomp.callbacks.Timeline(FLAGS.timeline, start_step=steps_per_epoch,
                                                      num_steps=FLAGS.timeline_steps or steps_per_epoch))
    model.fit(batches(x_train, y_train).repeat(), epochs=FLAGS.epochs, steps_per_epoch=steps_per_epoch, verbose=0,
              callbacks=callbacks)

    dense_bytes = sum(tf.TensorShape(v.shape).num_elements() * tf.as_dtype(v.dtype).size  # also Keras 3 variables
                      for v in model.trainable_variables)
    sent = payload_bytes(model.trainable_variables) if payload_bytes else dense_bytes
    accuracy = evaluate(model, x_test, y_test, spec.metric)
    result_path().write_text(json.dumps({
        "step_ms": 1e3 * statistics.median(timer.times[steps_per_epoch:]), "bytes_per_step": sent,
        "dense_bytes": dense_bytes, "accuracy": accuracy, "curve": evaluator.curve,
        "warmup_steps": dense_start(model),
        "stack": f"TensorFlow {tf.__version__}, {keras_in_use.in_use().name}"}))


if __name__ == "__main__":
    flags.mark_flag_as_required("out")
    app.run(main)
