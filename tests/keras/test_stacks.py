"""tfcomp on either supported stack: which Keras tf.keras is, the op library for
the installed TensorFlow, and clear refusals where an engine cannot work (Keras
3, Horovod missing), never a failure at import."""
import subprocess
import sys

import pytest
import tensorflow as tf

import tfcomp
from tfcomp import ops
from tfcomp.keras import version as keras_in_use
from tests.stacks import EVERY_STACK, HOROVOD, KERAS3, PINNED, TF_KERAS, stacks

pytestmark = EVERY_STACK


@stacks(PINNED, TF_KERAS, why="tf.keras is Keras 3 there: test_under_real_keras3_the_ops_and_the_strategy_work")
def test_the_keras_found_is_tf_keras():
    keras = keras_in_use.in_use()
    assert tf.keras.optimizers.SGD.__module__.split(".")[0] == keras.package
    assert keras.major == 2, "the suite runs tf.keras as Keras 2 (TF_USE_LEGACY_KERAS=1 on the current stack)"
    assert keras.owns(tf.keras.optimizers.SGD(0.1))
    assert keras.internal("optimizers.utils").all_reduce_sum_gradients is not None


@stacks(PINNED, TF_KERAS, why="tf.keras is Keras 3 there, whose optimizers the Horovod engine refuses")
def test_an_optimizer_subclassed_outside_keras_is_still_keras():
    class Mine(tf.keras.optimizers.SGD):
        pass
    keras_in_use.require_keras2("engine", "needs it", Mine(0.1))


@stacks(PINNED, TF_KERAS, why="tf.keras is Keras 3 there, which the Horovod engine refuses before it looks at the optimizer")
def test_an_optimizer_of_another_keras_is_refused_naming_it():
    foreign = type("SGD", (), {"__module__": "otherkeras.optimizers"})()
    with pytest.raises(keras_in_use.UnsupportedKeras, match="otherkeras.optimizers.SGD.*not from tf.keras"):
        keras_in_use.require_keras2("tfcomp.horovod.DistributedOptimizer", "needs it", foreign)


def test_keras3_is_refused_by_the_horovod_engine_in_one_sentence(monkeypatch):
    monkeypatch.setattr(keras_in_use, "in_use", lambda: keras_in_use.Keras("keras", "3.15.1"))
    with pytest.raises(keras_in_use.UnsupportedKeras) as refused:
        keras_in_use.require_keras2("tfcomp.horovod.DistributedOptimizer", "wraps Keras 2's optimizers")
    message = str(refused.value)
    assert "tf.keras here is Keras 3.15.1" in message and "TF_USE_LEGACY_KERAS=1" in message
    assert message.count(". ") == 0, message


def test_keras3_variables_are_named_by_their_path():
    class Keras3Variable:  # what a Keras 3 variable shows: its own name, and the tf.Variable it wraps
        name = "kernel"
        value = tf.Variable(1.0, name="sequential/dense/kernel")
    assert keras_in_use.tensor_name(Keras3Variable()) == "sequential/dense/kernel:0"
    assert keras_in_use.tensor_name(tf.Variable(1.0, name="dense/bias")) == "dense/bias:0"


@stacks(KERAS3, why="Keras 3 comes with TensorFlow 2.16 and later, as tf.keras where TF_USE_LEGACY_KERAS is unset")
def test_under_real_keras3_the_ops_and_the_strategy_work():
    """The op library and the strategy's model.fit under Keras 3, in a new process, on one
    worker (tests/engines/test_distribute.py runs 2 and 3 workers)."""
    script = """
import numpy as np
import tensorflow as tf
import tfcomp
from tfcomp import ops
from tfcomp.keras import version as keras_in_use
words, scale = ops.sign_pack(tf.constant([1.0, -2.0, 0.0]))
print("pack", words.numpy().tolist(), round(float(scale), 4))
print("keras", keras_in_use.in_use().name)
strategy = tfcomp.distribute.MultiWorkerMirroredStrategy(tfcomp.EFSignSGD)
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.Input((64,)), tf.keras.layers.Dense(32), tf.keras.layers.Dense(4)])
    model.compile(tf.keras.optimizers.SGD(0.01, momentum=0.9), "mse")
x = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)
losses = model.fit(x, x[:, :4], batch_size=16, epochs=8, verbose=0).history["loss"]
print("trained", losses[-1] < 0.5 * losses[0], losses)
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = dict(line.split(" ", 1) for line in out.stdout.splitlines())
    assert lines["pack"] == "[5] 1.0"  # bits 0 and 2 (1.0 and +0) positive; mean |x| = 1
    assert lines["keras"].startswith("Keras 3.")
    assert lines["trained"].startswith("True"), lines["trained"]


def test_the_library_for_the_installed_tensorflow_is_preferred(monkeypatch, tmp_path):
    monkeypatch.delenv("TFCOMP_OPS_LIBRARY", raising=False)
    monkeypatch.setattr(ops.loader, "LIBRARY_PATH", tmp_path / "_tfcomp_ops.so")
    assert ops.library_path() == tmp_path / "_tfcomp_ops.so"
    versioned = tmp_path / f"_tfcomp_ops.tf{tf.__version__}.so"
    versioned.write_bytes(b"")
    assert ops.library_path() == versioned
    (tmp_path / "_tfcomp_ops.tf0.0.1.so").write_bytes(b"")
    assert ops.library_path() == versioned
    monkeypatch.setenv("TFCOMP_OPS_LIBRARY", "/elsewhere/lib.so")
    assert str(ops.library_path()) == "/elsewhere/lib.so"


def test_horovod_missing_is_named_when_tfcomp_horovod_is_first_used(monkeypatch):
    monkeypatch.setitem(sys.modules, "horovod", None)  # what find_spec reports for an absent package
    for name in [n for n in sys.modules if n == "tfcomp.horovod" or n.startswith("tfcomp.horovod.")]:
        monkeypatch.delitem(sys.modules, name)
    if "horovod" in vars(tfcomp):  # set on the package by an earlier import (hasattr would import it)
        monkeypatch.delattr(tfcomp, "horovod")
    with pytest.raises(ModuleNotFoundError, match="tfcomp.horovod needs Horovod, which is not installed"):
        tfcomp.horovod.DistributedOptimizer  # pylint: disable=expression-not-assigned


@HOROVOD
def test_tfcomp_horovod_loads_on_first_use_without_its_own_import():
    script = "import tfcomp; print(tfcomp.horovod.DistributedOptimizer.__name__)"
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "DistributedOptimizer", out.stderr[-3000:]
