"""The tutorial's main.py ("Multi-worker training with Keras", tensorflow.org), in
its fault-tolerant form (model.fit with BackupAndRestore, one backup_dir for every
worker), unchanged but for the strategy line (tfcomp's, compressing) and the
backup directory (relative, so that test runs do not share one)."""
import json
import os

import tensorflow as tf

import mnist_setup
import tfcomp

per_worker_batch_size = 64
tf_config = json.loads(os.environ['TF_CONFIG'])
num_workers = len(tf_config['cluster']['worker'])

strategy = tfcomp.distribute.MultiWorkerMirroredStrategy(compression=tfcomp.EFSignSGD)

global_batch_size = per_worker_batch_size * num_workers
multi_worker_dataset = mnist_setup.mnist_dataset(global_batch_size)

with strategy.scope():
    # Model building/compiling need to be within `strategy.scope()`.
    multi_worker_model = mnist_setup.build_and_compile_cnn_model()

# Multi-worker training with BackupAndRestore: one backup directory, as the tutorial writes it.
callbacks = [tf.keras.callbacks.BackupAndRestore(backup_dir='backup')]
multi_worker_model.fit(multi_worker_dataset, epochs=3, steps_per_epoch=70, callbacks=callbacks)
