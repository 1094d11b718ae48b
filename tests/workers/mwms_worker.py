"""One worker of a multi-worker test: trains a small Keras model with
tfcomp.distribute.MultiWorkerMirroredStrategy (or tf.distribute's, for
comparison) and writes its losses and final weights as JSON."""
import json
import os
import signal
import time

import numpy as np
import tensorflow as tf
from absl import app, flags, logging

import tfcomp
from tfcomp.keras import version as keras_in_use
from tfcomp.distribute import MultiWorkerMirroredStrategy

from tests.cluster.step_times import StepTimes
from tests.workers import workload
from tests.workers.workload import BATCHES_PER_EPOCH, GLOBAL_BATCH, build_model, data, mixed_plan

FLAGS = flags.FLAGS
flags.DEFINE_string("out", None, "Result JSON path.")
flags.DEFINE_enum("strategy", "tfcomp", ["tfcomp", "plain"], "Which MultiWorkerMirroredStrategy.")
flags.DEFINE_string("compression", "NoCompression", "A tfcomp compressor spec ('DGC', 'DGC:warmup_steps=0').")
flags.DEFINE_bool("plan", False,
                  "Compress with tests.workers.workload.mixed_plan() (a tfcomp.Plan), not --compression.")
flags.DEFINE_enum("loop", "fit", ["fit", "custom"], "model.fit or strategy.run + apply_gradients.")
flags.DEFINE_integer("steps", 32, "Training steps (model.fit: whole epochs of 8 steps).")
flags.DEFINE_float("lr", 0.05, "SGD learning rate.")
flags.DEFINE_float("momentum", 0.0, "SGD momentum.")
flags.DEFINE_enum("optimizer", "sgd", ["sgd", "frozen_adam"], "SGD(--lr, --momentum), or "
                  "tfcomp.FrozenVarianceAdam(--lr) (its variance freezes at --warmup_steps).")
flags.DEFINE_integer("accumulate", None, "Keras 3 optimizers' gradient_accumulation_steps (SGD).")
flags.DEFINE_integer("min_compress_elements", 1024, "Exchange option.")
flags.DEFINE_float("ratio", None, "The sparsifiers' ratio (default: the class default).")
flags.DEFINE_integer("rank", None, "The low-rank compressors' rank (default: the class default).")
flags.DEFINE_bool("selection", True, "Efficiency-aware tensor selection where the compressor wants it.")
flags.DEFINE_integer("warmup_steps", 0, "Dense warm-up steps.")
flags.DEFINE_string("backup_dir", None, "Use BackupAndRestore with this directory.")
flags.DEFINE_integer("kill_at", -1, "SIGKILL this process when it starts the step after this many.")
flags.DEFINE_integer("interrupt_at", -1, "Stop the process (exit 3) at this step, after a backup.")
flags.DEFINE_float("timeout", 60, "Collective timeout in seconds (0: none).")
flags.DEFINE_float("heartbeat_timeout_s", 60.0, "The strategy's heartbeat_timeout_s (0: None, TensorFlow's).")
flags.DEFINE_bool("watch_peers", True, "The strategy's watch_peers (off: TensorFlow's own failure detection).")
flags.DEFINE_string("save_dir", None, "model.save() here after training (every worker saves).")
flags.DEFINE_string("load_weights", None, "model.load_weights() from this path before training.")
flags.DEFINE_float("hold_peer_watch_s", 0, "Print this worker's peer-watch port, and wait this long before "
                   "connecting to lower ranks' watches (keeps their listeners open: the stranger tests).")
flags.DEFINE_bool("check_mass", False, "Custom loop: check error feedback's mass conservation on a last step.")



def make_strategy():
    options = tf.distribute.experimental.CommunicationOptions(timeout_seconds=FLAGS.timeout or None)
    if FLAGS.strategy == "plain":
        return tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
    compressor = workload.compressor(FLAGS.compression, FLAGS.ratio, FLAGS.rank)
    if FLAGS.plan:
        compressor = mixed_plan()
    return MultiWorkerMirroredStrategy(compressor, communication_options=options,
                                       min_compress_elements=FLAGS.min_compress_elements,
                                       selection=None if FLAGS.selection else False,
                                       warmup_steps=FLAGS.warmup_steps, watch_peers=FLAGS.watch_peers,
                                       heartbeat_timeout_s=FLAGS.heartbeat_timeout_s or None)


def kill():
    """Dies mid-training without cleaning up, as a crashed or killed worker does."""
    logging.warning("SIGKILL to this worker")  # timestamped, for the survivors' reaction time
    os.kill(os.getpid(), signal.SIGKILL)


class Kill(tf.keras.callbacks.Callback):
    def on_train_batch_begin(self, batch, logs=None):
        if int(self.model.optimizer.iterations.numpy()) == FLAGS.kill_at:
            kill()


class Interrupt(tf.keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        step = int(self.model.optimizer.iterations.numpy())
        if step == FLAGS.interrupt_at:
            raise SystemExit(3)


def make_optimizer():
    if FLAGS.optimizer == "frozen_adam":
        return tfcomp.FrozenVarianceAdam(FLAGS.lr)
    accumulate = {} if FLAGS.accumulate is None else {"gradient_accumulation_steps": FLAGS.accumulate}
    return tf.keras.optimizers.SGD(FLAGS.lr, momentum=FLAGS.momentum, **accumulate)


class VarianceAtWarmupEnd(tf.keras.callbacks.Callback):
    """The sum of each of Adam's second moments after the dense warm-up's last step."""
    sums = None

    def on_train_batch_end(self, batch, logs=None):
        if int(self.model.optimizer.iterations.numpy()) == FLAGS.warmup_steps:
            self.sums = variance_sums(self.model.optimizer)


def variance_sums(optimizer):
    return [float(tf.reduce_sum(v).numpy()) for v in optimizer._velocities]  # pylint: disable=protected-access


def train_fit(strategy, x, y):
    """model.fit; returns the model, its optimizer, its per-epoch losses and, under
    FrozenVarianceAdam, its variance after the warm-up and at the end."""
    with strategy.scope():
        model = build_model()
        model.compile(optimizer=make_optimizer(),
                      loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        if FLAGS.load_weights:
            model.load_weights(FLAGS.load_weights)
    # A finite dataset, so that every epoch sees the same batches, also after a restart.
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(GLOBAL_BATCH)
    opts = tf.data.Options()
    opts.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    ds = ds.with_options(opts)
    timer = StepTimes()
    callbacks = [StepLog(), timer]  # the log's read of the step counter waits for the step: the timer counts it
    if FLAGS.backup_dir:  # one directory for every worker, as users write it
        callbacks.append(tf.keras.callbacks.BackupAndRestore(FLAGS.backup_dir))
    if FLAGS.interrupt_at >= 0:
        callbacks.append(Interrupt())
    if FLAGS.kill_at >= 0:
        callbacks.append(Kill())
    variance = VarianceAtWarmupEnd()
    if FLAGS.optimizer == "frozen_adam":
        callbacks.append(variance)
    epochs = -(-FLAGS.steps // BATCHES_PER_EPOCH)
    history = model.fit(ds, epochs=epochs, verbose=0, callbacks=callbacks)
    extra = {"step_times": timer.times}
    if FLAGS.optimizer == "frozen_adam":
        extra = {"variance_steps": model.optimizer.variance_steps, "variance_at_warmup_end": variance.sums,
                 "variance_at_end": variance_sums(model.optimizer)}
    return model, model.optimizer, history.history["loss"], extra


def train_custom(strategy, x, y):
    with strategy.scope():
        model = build_model()
        optimizer = make_optimizer()
    ds = strategy.experimental_distribute_dataset(
        tf.data.Dataset.from_tensor_slices((x, y)).batch(GLOBAL_BATCH).repeat())
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")

    def replica_step(xb, yb):
        with tf.GradientTape() as tape:
            loss = tf.nn.compute_average_loss(loss_fn(yb, model(xb)), global_batch_size=GLOBAL_BATCH)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss, grads

    @tf.function
    def step(batch):
        losses, grads = strategy.run(replica_step, args=batch)
        return strategy.reduce(tf.distribute.ReduceOp.SUM, losses, axis=None), grads

    iterator = iter(ds)
    losses = []
    for done in range(FLAGS.steps):
        if done == FLAGS.kill_at:
            kill()
        losses.append(float(step(next(iterator))[0]))
    extra = check_mass(model, optimizer, strategy, step, iterator) if FLAGS.check_mass else {}
    return model, optimizer, losses, extra


def check_mass(model, optimizer, strategy, step, iterator):
    """One more step: gradient + old residual == sent + new residual, on this worker."""
    residuals = {}
    for v in model.trainable_variables:
        state = optimizer.tfcomp_state.get(keras_in_use.tensor_name(v))
        if state and "residual" in state:
            residuals[keras_in_use.tensor_name(v)] = state["residual"]
    before = {name: r.numpy() for name, r in residuals.items()}
    _, grads = step(next(iterator))
    worst = 0.0
    for v, g in zip(model.trainable_variables, grads):
        name = keras_in_use.tensor_name(v)
        if name in residuals:
            corrected = strategy.experimental_local_results(g)[0].numpy() + before[name]
            sent = corrected - residuals[name].numpy()
            expected = np.mean(np.abs(corrected)) * np.where(corrected >= 0, 1.0, -1.0)
            worst = max(worst, float(np.max(np.abs(sent - expected))))
    return {"mass_error": worst, "compressed_tensors": len(residuals)}


class StepLog(tf.keras.callbacks.Callback):
    """A line per finished step (the optimizer's iterations), for tests that act mid-training."""

    def on_train_batch_end(self, batch, logs=None):
        print(f"finished step {int(self.model.optimizer.iterations.numpy())} at {time.time():.3f}", flush=True)


def hold_peer_watch(seconds):
    """Each worker prints the port its peer watch listens on, and waits before
    connecting to the lower ranks', so that a test can reach their listeners first."""
    from tfcomp.engines import peers  # pylint: disable=import-outside-toplevel
    listen, connect_to = peers.listen, peers.PeerWatch._connect_to  # pylint: disable=protected-access

    def printing_listen(host=None):
        sock, port = listen(host)
        print(f"peer watch port {port}", flush=True)
        return sock, port

    def waiting_connect_to(self, *args):
        time.sleep(seconds)
        return connect_to(self, *args)

    peers.listen = printing_listen
    peers.PeerWatch._connect_to = waiting_connect_to  # pylint: disable=protected-access


def main(argv):
    del argv
    x, y = data()
    if FLAGS.hold_peer_watch_s:
        hold_peer_watch(FLAGS.hold_peer_watch_s)
    strategy = make_strategy()
    model, optimizer, losses, extra = (train_fit if FLAGS.loop == "fit" else train_custom)(strategy, x, y)
    result = {"losses": losses, "weights": [w.tolist() for w in model.get_weights()], **extra}
    if FLAGS.save_dir:
        task = strategy.cluster_resolver.task_id
        path = f"{FLAGS.save_dir}/model" if task == 0 else f"{FLAGS.save_dir}/worker{task}_tmp"
        if keras_in_use.in_use().major >= 3:  # Keras 3 saves to .keras files only
            os.makedirs(FLAGS.save_dir, exist_ok=True)
            model.save(f"{path}.keras")
        else:
            model.save(path)
            result["saved_variables"] = tf.train.list_variables(f"{path}/variables/variables")
    if FLAGS.strategy == "tfcomp":
        result["payload_bytes"] = strategy.payload_bytes(model.trainable_variables)
        result["warmup_steps"] = strategy.exchange.warmup_steps
        state = getattr(optimizer, "tfcomp_state", None)
        result["state_step"] = int(state.step.numpy()) if state is not None else None
    with open(FLAGS.out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    flags.mark_flag_as_required("out")
    app.run(main)
