"""One rank of a Horovod test (run under horovodrun): trains a small Keras
model with tfcomp.horovod.DistributedOptimizer / DistributedGradientTape, or
with Horovod's own optimizer for comparison, and writes its losses and final
weights as JSON (out/rank<r>.json)."""
import json
import os
import pathlib
import signal

import horovod.tensorflow as hvd_tf
import horovod.tensorflow.keras as hvd
import tensorflow as tf
from absl import app, flags, logging

import tfcomp
import tfcomp.horovod

from tests.workers import workload
from tests.workers.workload import BATCHES_PER_EPOCH, GLOBAL_BATCH, build_model, data, mixed_plan

FLAGS = flags.FLAGS
flags.DEFINE_string("out", None, "Directory for rank<r>.json.")
flags.DEFINE_enum("engine", "tfcomp", ["tfcomp", "horovod"], "tfcomp's wrapper or hvd.DistributedOptimizer.")
flags.DEFINE_string("compression", "NoCompression",
                    "A tfcomp compressor spec ('DGC', 'DGC:warmup_steps=0'), or hvd.none / hvd.fp16 for Horovod's.")
flags.DEFINE_bool("plan", False,
                  "Compress with tests.workers.workload.mixed_plan() (a tfcomp.Plan), not --compression.")
flags.DEFINE_string("rank1_compression", None, "Rank 1 asks for this compression instead (disagreement test).")
flags.DEFINE_enum("loop", "fit", ["fit", "custom"], "model.fit or a GradientTape loop.")
flags.DEFINE_enum("optimizer", "sgd", ["sgd", "legacy_sgd", "lamb", "adamw", "frozen_adam"],
                  "The wrapped optimizer (frozen_adam: tfcomp.FrozenVarianceAdam).")
flags.DEFINE_integer("steps", 32, "Training steps (model.fit: whole epochs of 8 steps).")
flags.DEFINE_float("lr", 0.05, "Learning rate.")
flags.DEFINE_float("momentum", 0.0, "SGD momentum (sgd and legacy_sgd).")
flags.DEFINE_float("ratio", None, "The sparsifiers' ratio.")
flags.DEFINE_integer("rank", None, "The low-rank compressors' rank.")
flags.DEFINE_integer("min_compress_elements", 1024, "Exchange option.")
flags.DEFINE_integer("warmup_steps", 0, "Dense warm-up steps (exchange option).")
flags.DEFINE_integer("steps_per_epoch", 0, "Steps in an epoch, for a warm-up of one (exchange option; 0: not given).")
flags.DEFINE_integer("backward_passes_per_step", 1, "Local gradient accumulation.")
flags.DEFINE_bool("horovod_callbacks", False, "Broadcast, metric average and learning-rate warm-up callbacks.")
flags.DEFINE_string("backup_dir", None, "BackupAndRestore into <dir>/rank<r>.")
flags.DEFINE_integer("kill_at", -1, "Rank kill_rank SIGKILLs itself when it starts the step after this many.")
flags.DEFINE_integer("kill_rank", 1, "The rank --kill_at kills.")
flags.DEFINE_integer("interrupt_at", -1, "Exit (code 3) at this step, after a backup.")
flags.DEFINE_string("trace_dir", None, "Record a tfcomp.callbacks.Timeline of steps 8-15 here.")
flags.DEFINE_bool("conv_model", False, "model.fit trains conv_model(): a long forward-backward pass, small "
                  "gradients.")



def make_optimizer():
    if FLAGS.optimizer == "sgd":
        return tf.keras.optimizers.SGD(FLAGS.lr, momentum=FLAGS.momentum)
    if FLAGS.optimizer == "legacy_sgd":
        return tf.keras.optimizers.legacy.SGD(FLAGS.lr, momentum=FLAGS.momentum)
    if FLAGS.optimizer == "frozen_adam":
        return tfcomp.FrozenVarianceAdam(FLAGS.lr)
    import tensorflow_addons as tfa  # pylint: disable=import-outside-toplevel
    if FLAGS.optimizer == "lamb":
        return tfa.optimizers.LAMB(FLAGS.lr)
    return tfa.optimizers.AdamW(weight_decay=1e-4, learning_rate=FLAGS.lr)


def compression():
    if FLAGS.plan:
        return mixed_plan()
    name = FLAGS.rank1_compression if FLAGS.rank1_compression and hvd.rank() == 1 else FLAGS.compression
    if name.startswith("hvd."):
        return getattr(hvd.Compression, name[4:])
    return workload.compressor(name, FLAGS.ratio, FLAGS.rank)


def exchange_options():
    return {"min_compress_elements": FLAGS.min_compress_elements, "selection": False,
            "warmup_steps": FLAGS.warmup_steps, "steps_per_epoch": FLAGS.steps_per_epoch or None}


def wrap(optimizer):
    if FLAGS.engine == "horovod":
        return hvd.DistributedOptimizer(optimizer, compression=compression(),
                                        backward_passes_per_step=FLAGS.backward_passes_per_step)
    return tfcomp.horovod.DistributedOptimizer(optimizer, compression=compression(),
                                               backward_passes_per_step=FLAGS.backward_passes_per_step,
                                               **exchange_options())


def shard(x, y):
    """This rank's part of every global batch."""
    per_rank = GLOBAL_BATCH // hvd.size()
    mine = slice(hvd.rank() * per_rank, (hvd.rank() + 1) * per_rank)
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(GLOBAL_BATCH).map(lambda xb, yb: (xb[mine], yb[mine]))


class Kill(tf.keras.callbacks.Callback):
    """Dies mid-training without cleaning up, as a crashed or killed worker does."""

    def on_train_batch_begin(self, batch, logs=None):
        if hvd.rank() == FLAGS.kill_rank and int(self.model.optimizer.iterations.numpy()) == FLAGS.kill_at:
            logging.warning("SIGKILL to this worker")  # timestamped, for the survivors' reaction time
            os.kill(os.getpid(), signal.SIGKILL)


class Interrupt(tf.keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        if int(self.model.optimizer.iterations.numpy()) == FLAGS.interrupt_at:
            raise SystemExit(3)


def conv_model():
    """Convolutions over the digits upsampled to 64x64: tens of ms of forward-backward
    computation on a CPU and 7k parameters, so the allreduce takes a small part of a step."""
    layers = tf.keras.layers
    inputs = tf.keras.Input((64,))
    h = layers.UpSampling2D(8)(layers.Reshape((8, 8, 1))(inputs))
    for _ in range(3):
        h = layers.Conv2D(16, 3, padding="same", activation="relu")(h)
    return tf.keras.Model(inputs, layers.Dense(10)(layers.GlobalAveragePooling2D()(h)))


def train_fit(x, y):
    model = conv_model() if FLAGS.conv_model else build_model()
    optimizer = wrap(make_optimizer())
    model.compile(optimizer=optimizer, loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    callbacks = []
    if FLAGS.horovod_callbacks:
        callbacks += [hvd.callbacks.BroadcastGlobalVariablesCallback(0), hvd.callbacks.MetricAverageCallback(),
                      hvd.callbacks.LearningRateWarmupCallback(initial_lr=FLAGS.lr, warmup_epochs=2,
                                                               steps_per_epoch=BATCHES_PER_EPOCH, verbose=0)]
    if FLAGS.backup_dir:
        callbacks.append(tf.keras.callbacks.BackupAndRestore(f"{FLAGS.backup_dir}/rank{hvd.rank()}"))
    if FLAGS.interrupt_at >= 0:
        callbacks.append(Interrupt())
    if FLAGS.kill_at >= 0:
        callbacks.append(Kill())
    if FLAGS.trace_dir:
        callbacks.append(tfcomp.callbacks.Timeline(FLAGS.trace_dir, start_step=8, num_steps=8))
    history = model.fit(shard(x, y), epochs=-(-FLAGS.steps // BATCHES_PER_EPOCH), verbose=0, callbacks=callbacks)
    return model, optimizer, [float(loss) for loss in history.history["loss"]]


def train_custom(x, y):
    model = build_model()
    optimizer = make_optimizer()
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    def step_body(xb, yb):
        with tf.GradientTape() as tape:
            loss = loss_fn(yb, model(xb))
        if FLAGS.engine == "horovod":
            tape = hvd_tf.DistributedGradientTape(tape, compression=compression())
        else:
            tape = tfcomp.horovod.DistributedGradientTape(tape, compression=compression(), optimizer=optimizer,
                                                          **exchange_options())
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return hvd_tf.allreduce(loss)

    timeline = FLAGS.trace_dir and tfcomp.callbacks.Timeline(FLAGS.trace_dir, start_step=8, num_steps=8)
    step = tf.function(timeline.wrap(step_body, optimizer=optimizer) if timeline else step_body)
    batches = iter(shard(x, y).repeat())
    losses = []
    for _ in range(FLAGS.steps):
        losses.append(float(step(*next(batches))))
        if timeline:
            timeline.record()
    if timeline:
        timeline.write()
    return model, optimizer, losses


def main(argv):
    del argv
    hvd.init()
    x, y = data()
    model, optimizer, losses = (train_fit if FLAGS.loop == "fit" else train_custom)(x, y)
    result = {"losses": losses, "weights": [w.tolist() for w in model.get_weights()],
              "optimizer_class": type(optimizer).__name__}
    if FLAGS.optimizer == "frozen_adam":
        result["variance_steps"] = optimizer.variance_steps
    state = getattr(optimizer, "tfcomp_state", None)
    result["state_step"] = int(state.step.numpy()) if state is not None else None
    if FLAGS.engine == "tfcomp":
        result["payload_bytes"] = optimizer.tfcomp_engine.payload_bytes(model.trainable_variables)
        result["warmup_steps"] = optimizer.tfcomp_engine.exchange.warmup_steps
    out = pathlib.Path(FLAGS.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"rank{hvd.rank()}.json").write_text(json.dumps(result))


if __name__ == "__main__":
    flags.mark_flag_as_required("out")
    app.run(main)
