"""A worker (tf.distribute, under TF_CONFIG) or rank (Horovod, under horovodrun)
training the tests' MLP with compression=tfcomp.Auto() under model.fit; writes JSON:
Auto's decisions, how often the exchange was traced, payload bytes, final weights."""
import json
import pathlib
import time

import tensorflow as tf
from absl import app, flags

import tfcomp

from tests.workers.workload import BATCHES_PER_EPOCH, GLOBAL_BATCH, build_model, data

FLAGS = flags.FLAGS
flags.DEFINE_string("out", None, "Result JSON path (Horovod: a directory for rank<r>.json).")
flags.DEFINE_enum("engine", "tf.distribute", ["tf.distribute", "horovod"], "Whose engine trains.")
flags.DEFINE_integer("steps", 32, "Training steps (whole epochs of 8 steps).")
flags.DEFINE_integer("hidden", 64, "Hidden units of the MLP.")
flags.DEFINE_float("network_gbps", None, "Plan for a link of this bandwidth (default: measure the link).")
flags.DEFINE_bool("slow_candidate", False, "The only candidate is FP16 made slow on purpose (a plan that loses).")
flags.DEFINE_integer("replan_every", None, "Auto's replan_every.")
flags.DEFINE_float("drift", 0.25, "Auto's drift.")
flags.DEFINE_integer("trials", 3, "Auto's trials.")
flags.DEFINE_integer("rounds", 2, "Auto's rounds (its check_steps are 4).")
flags.DEFINE_integer("audit_steps", 0, "Auto's audit_steps.")
flags.DEFINE_string("backup_dir", None, "Use BackupAndRestore with this directory.")
flags.DEFINE_integer("interrupt_at", -1, "Stop the process (exit 3) at this step.")
flags.DEFINE_integer("slow_from_step", -1, "From this step on, every step takes 100 ms longer (as on a slower "
                     "link): the step-time drift replan_every watches for.")


class SlowFP16(tfcomp.FP16):
    """FP16 with about 50 ms of extra work per tensor: a plan of it must lose to dense."""

    def compress(self, grad, state, ctx):
        # From the gradient, and adding exactly 0 in a way grappler cannot see: computed every step.
        m = tf.fill([384, 384], tf.reshape(grad, [-1])[0])
        for _ in range(30):
            m = tf.tanh(1e-3 * tf.linalg.matmul(m, m))
        return super().compress(grad + tf.minimum(tf.abs(tf.reduce_sum(m)), 0.0), state, ctx)


class SlowDown(tf.keras.callbacks.Callback):
    """Runs before Auto's callback at each batch end, so that Auto counts the wait in the step."""

    def on_train_batch_end(self, batch, logs=None):
        if int(self.model.optimizer.iterations.numpy()) > FLAGS.slow_from_step:
            time.sleep(0.1)


class Interrupt(tf.keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        if int(self.model.optimizer.iterations.numpy()) == FLAGS.interrupt_at:
            raise SystemExit(3)


def make_auto():
    network = tfcomp.Network(FLAGS.network_gbps, 50.0) if FLAGS.network_gbps else None
    candidates = [SlowFP16()] if FLAGS.slow_candidate else None
    return tfcomp.Auto(candidates, network=network, profile_steps=4, untimed_steps=2, timeline_steps=2,
                       check_steps=4, trials=FLAGS.trials, rounds=FLAGS.rounds, audit_steps=FLAGS.audit_steps,
                       replan_every=FLAGS.replan_every, drift=FLAGS.drift,
                       probe_max_bytes=256 << 10, runs=3)


def main(argv):
    del argv
    x, y = data()
    auto = make_auto()
    callbacks = []
    if FLAGS.engine == "horovod":
        import horovod.tensorflow.keras as hvd  # pylint: disable=import-outside-toplevel
        from tfcomp.horovod import DistributedOptimizer  # pylint: disable=import-outside-toplevel
        hvd.init()
        rank, size = hvd.rank(), hvd.size()
        model = build_model(FLAGS.hidden)
        optimizer = DistributedOptimizer(tf.keras.optimizers.SGD(0.05, momentum=0.9),
                                                        compression=auto)
        model.compile(optimizer=optimizer, loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        per_rank = GLOBAL_BATCH // size
        mine = slice(rank * per_rank, (rank + 1) * per_rank)
        ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(GLOBAL_BATCH).map(lambda a, b: (a[mine], b[mine]))
        engine = optimizer.tfcomp_engine
        out = pathlib.Path(FLAGS.out) / f"rank{rank}.json"
        backup = f"{FLAGS.backup_dir}/rank{rank}" if FLAGS.backup_dir else None
    else:
        strategy = tfcomp.distribute.MultiWorkerMirroredStrategy(auto)
        with strategy.scope():
            model = build_model(FLAGS.hidden)
            model.compile(optimizer=tf.keras.optimizers.SGD(0.05, momentum=0.9),
                          loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        options = tf.data.Options()
        options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
        ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(GLOBAL_BATCH).with_options(options)
        engine = strategy
        out = pathlib.Path(FLAGS.out)
        backup = FLAGS.backup_dir
    if backup:
        callbacks.append(tf.keras.callbacks.BackupAndRestore(backup))
    if FLAGS.slow_from_step >= 0:
        callbacks.append(SlowDown())
    callbacks.append(auto.callback())
    if FLAGS.interrupt_at >= 0:
        callbacks.append(Interrupt())
    history = model.fit(ds, epochs=-(-FLAGS.steps // BATCHES_PER_EPOCH), verbose=0, callbacks=callbacks)
    result = {"phase": auto.phase, "choices": auto.choices, "history": auto.history,
              "traces": auto.exchange.traces, "losses": [float(v) for v in history.history["loss"]],
              "payload_bytes": engine.payload_bytes(model.trainable_variables),
              "dense_bytes": sum(v.shape.num_elements() * 4 for v in model.trainable_variables),
              "weights": [w.tolist() for w in model.get_weights()],
              "step": int(model.optimizer.iterations.numpy())}
    out.write_text(json.dumps(result))


if __name__ == "__main__":
    app.run(main)
