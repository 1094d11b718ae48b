"""One worker of the mixed-precision test: trains the shared workload under the
mixed_float16 (or mixed_bfloat16) policy with model.fit, on tf.distribute (tfcomp's strategy or
TensorFlow's own) or Horovod (tfcomp's optimizer or Horovod's own), with some
batches poisoned so that one worker's float16 forward pass overflows at chosen
steps. Writes its final weights, loss scale and counters as JSON."""
import json
import pathlib

import numpy as np
import tensorflow as tf
from absl import app, flags

import tfcomp
from tfcomp.compressors.sparse import Sparsifier

from tests.workers.workload import BATCHES_PER_EPOCH, GLOBAL_BATCH, build_model, data

FLAGS = flags.FLAGS
flags.DEFINE_string("out", None, "Result JSON path (MultiWorkerMirroredStrategy) or directory (Horovod).")
flags.DEFINE_enum("engine", "distribute", ["distribute", "horovod"], "Which engine runs the workers.")
flags.DEFINE_bool("plain", False, "TensorFlow's own strategy / Horovod's own optimizer instead of tfcomp's.")
flags.DEFINE_string("compression", "NoCompression", "tfcomp compressor class name.")
flags.DEFINE_list("poison_batches", [], "Batches of every epoch whose global batch holds a value float16 "
                  "cannot represent.")
flags.DEFINE_bool("keras_wraps", False, "Horovod: compile tfcomp's optimizer and let Keras wrap it in a "
                  "LossScaleOptimizer, instead of wrapping one.")
flags.DEFINE_enum("policy", "mixed_float16", ["mixed_float16", "mixed_bfloat16"], "Keras' mixed-precision "
                  "policy (mixed_bfloat16 scales no loss).")
flags.DEFINE_integer("steps", 32, "Training steps (whole epochs of 8 steps).")
flags.DEFINE_float("lr", 0.05, "SGD learning rate (momentum 0.9).")


def poisoned_data():
    x, y = data()
    for batch in map(int, FLAGS.poison_batches):  # (bfloat16 represents it: no overflow)
        # Sample 5 of the global batch: one worker's share overflows in float16.
        x[batch * GLOBAL_BATCH + 5, 0] = 1e6
    return x, y


class LossScaleLog(tf.keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.scales = []

    def on_train_batch_end(self, batch, logs=None):
        optimizer = self.model.optimizer
        # Keras 2's LossScaleOptimizer has loss_scale, Keras 3's dynamic_scale; none under mixed_bfloat16.
        scale = getattr(optimizer, "loss_scale", None) or getattr(optimizer, "dynamic_scale", None)
        self.scales.append(None if scale is None else float(np.array(scale)))


def compressor():
    cls = getattr(tfcomp, FLAGS.compression)
    return cls(ratio=0.05) if issubclass(cls, Sparsifier) else cls()


def optimizer():
    return tf.keras.optimizers.SGD(FLAGS.lr, momentum=0.9)


def compile_and_fit(model, opt, ds, callbacks=()):
    log = LossScaleLog()
    model.compile(optimizer=opt, loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(ds, epochs=FLAGS.steps // BATCHES_PER_EPOCH, verbose=0, callbacks=[*callbacks, log])
    return log.scales


def run_distribute(x, y):
    options = tf.distribute.experimental.CommunicationOptions(timeout_seconds=60)
    if FLAGS.plain:
        strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
    else:
        strategy = tfcomp.distribute.MultiWorkerMirroredStrategy(
            compressor(), communication_options=options, min_compress_elements=1, selection=False)
    with strategy.scope():
        model = build_model()
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(GLOBAL_BATCH)
    opts = tf.data.Options()
    opts.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    with strategy.scope():
        scales = compile_and_fit(model, optimizer(), ds.with_options(opts))
    return model, scales, FLAGS.out


def run_horovod(x, y):
    import horovod.tensorflow.keras as hvd  # pylint: disable=import-outside-toplevel
    import tfcomp.horovod  # pylint: disable=import-outside-toplevel,redefined-outer-name
    hvd.init()
    model = build_model()
    if FLAGS.plain:  # Horovod's documented order: Keras wraps the distributed optimizer in a LossScaleOptimizer
        opt = hvd.DistributedOptimizer(optimizer())
    else:  # tfcomp's, around the LossScaleOptimizer or (keras_wraps) inside the one compile adds
        inner = optimizer() if FLAGS.keras_wraps else tf.keras.mixed_precision.LossScaleOptimizer(optimizer())
        opt = tfcomp.horovod.DistributedOptimizer(inner, compression=compressor(), min_compress_elements=1,
                                                  selection=False)
    per_rank = GLOBAL_BATCH // hvd.size()
    mine = slice(hvd.rank() * per_rank, (hvd.rank() + 1) * per_rank)
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(GLOBAL_BATCH).map(lambda a, b: (a[mine], b[mine]))
    scales = compile_and_fit(model, opt, ds, [hvd.callbacks.BroadcastGlobalVariablesCallback(0)])
    out = pathlib.Path(FLAGS.out)
    out.mkdir(parents=True, exist_ok=True)
    return model, scales, out / f"rank{hvd.rank()}.json"


def main(argv):
    del argv
    tf.keras.mixed_precision.set_global_policy(FLAGS.policy)
    x, y = poisoned_data()
    model, scales, out = (run_distribute if FLAGS.engine == "distribute" else run_horovod)(x, y)
    state = getattr(model.optimizer, "tfcomp_state", None)
    if state is None:  # the state hangs on the optimizer that runs the exchange, inside the LossScaleOptimizer
        state = getattr(getattr(model.optimizer, "inner_optimizer", None), "tfcomp_state", None)
    weights = model.get_weights()
    result = {"weights": [w.tolist() for w in weights], "finite": bool(all(np.all(np.isfinite(w)) for w in weights)),
              "loss_scales": scales, "iterations": int(model.optimizer.iterations.numpy()),
              "state_step": int(state.step.numpy()) if state is not None else None,
              "optimizer_class": type(model.optimizer).__name__}
    pathlib.Path(out).write_text(json.dumps(result))


if __name__ == "__main__":
    flags.mark_flag_as_required("out")
    app.run(main)
