"""tfcomp.horovod's argument handling (no horovodrun needed)."""
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from tests.stacks import HOROVOD, HOROVOD_MISSING

hvd = pytest.importorskip("horovod.tensorflow", reason=HOROVOD_MISSING)  # its arguments below are Horovod's

import tfcomp  # pylint: disable=wrong-import-position
from tfcomp.horovod import engine  # pylint: disable=wrong-import-position

pytestmark = HOROVOD


def test_horovods_compression_maps_to_tfcomps():
    assert engine.tfcomp_compression(hvd.Compression.none) is tfcomp.NoCompression
    assert engine.tfcomp_compression(hvd.Compression.fp16) is tfcomp.FP16
    assert engine.tfcomp_compression(tfcomp.DRAGONN) is tfcomp.DRAGONN
    instance = tfcomp.PowerSGD(2)
    assert engine.tfcomp_compression(instance) is instance


def test_other_horovod_compressors_are_refused():
    class Custom(hvd.Compression.none):
        pass
    # A subclass of Horovod's NoneCompressor is still Horovod's "none".
    assert engine.tfcomp_compression(Custom) is tfcomp.NoCompression
    with pytest.raises(ValueError, match="Horovod compressor other than"):
        engine.tfcomp_compression(hvd.compression.Compressor)


@pytest.mark.parametrize("kwargs, message", [
    ({"op": hvd.Adasum}, "op must be hvd.Average or hvd.Sum"),
    ({"gradient_predivide_factor": 2.0}, "gradient_predivide_factor is not supported"),
    ({"groups": 2}, "groups are not supported"),
    ({"process_set": hvd.ProcessSet([0])}, "global process set only")])
def test_unsupported_horovod_arguments_are_refused(kwargs, message):
    args = {"op": hvd.Average, "gradient_predivide_factor": 1.0, "groups": None,
            "process_set": hvd.global_process_set, **kwargs}
    with pytest.raises(ValueError, match=message):
        engine.check_horovod_arguments(**args)


def test_the_engine_wants_horovod_initialised():
    # In a fresh interpreter: hvd.init() cannot be undone, so this process may
    # already have run it.
    check = textwrap.dedent("""
        import horovod.tensorflow as hvd
        import tfcomp
        from tfcomp.horovod import engine
        assert not hvd.is_initialized()
        try:
            engine.HorovodEngine(tfcomp.DRAGONN)
        except RuntimeError as e:
            print(e)
        else:
            raise SystemExit("HorovodEngine was created before hvd.init()")
        """)
    run = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "call hvd.init()" in run.stdout


def test_an_unknown_compressor_is_refused_before_anything_runs():
    with pytest.raises(ValueError, match="compression must be a tfcomp compressor"):
        tfcomp.horovod.DistributedOptimizer(None, compression="dragonn")


def test_momentum_and_advice_are_settled_at_construction():
    # In a fresh interpreter, one rank (hvd.init() without horovodrun).
    check = textwrap.dedent("""
        import horovod.tensorflow as hvd
        import tensorflow as tf
        import tfcomp, tfcomp.horovod
        hvd.init()
        try:
            tfcomp.horovod.DistributedOptimizer(tf.keras.optimizers.SGD(0.1, momentum=0.9),
                                                compression=tfcomp.EFSignSGD(momentum=0.9))
        except ValueError as e:
            print("refused:", e)
        opt = tfcomp.horovod.DistributedOptimizer(tf.keras.optimizers.SGD(0.1, momentum=0.9),
                                                  compression=tfcomp.EFSignSGD)
        print("bound:", opt.tfcomp_engine.exchange.compressor.momentum)
        tfcomp.horovod.DistributedOptimizer(tf.keras.optimizers.Adam(), compression=tfcomp.TopK(0.1))
        frozen = tfcomp.FrozenVarianceAdam()
        tfcomp.horovod.DistributedOptimizer(frozen, compression=tfcomp.TopK(0.01, warmup_steps=0), warmup_steps=10)
        print("variance_steps:", frozen.variance_steps)
        by_default = tfcomp.FrozenVarianceAdam()  # the bare name's dense epoch
        tfcomp.horovod.DistributedOptimizer(by_default, compression=tfcomp.TopK, steps_per_epoch=30)
        print("default variance_steps:", by_default.variance_steps)
        try:
            tfcomp.horovod.DistributedOptimizer(tfcomp.FrozenVarianceAdam(), compression=tfcomp.TopK(warmup_steps=0))
        except ValueError as e:
            print("refused:", e)
        """)
    run = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "refused:" in run.stdout and "compile the optimizer with momentum=0" in run.stdout, run.stdout
    assert "bound: 0.9" in run.stdout, run.stdout
    assert "TopK under Adam" in run.stderr and "Use tfcomp.FrozenVarianceAdam" in run.stderr, run.stderr[-2000:]
    assert "TopK(ratio=0.01) under FrozenVarianceAdam" in run.stderr and "ratio>=0.1" in run.stderr, run.stderr[-2000:]
    assert "variance_steps: 10" in run.stdout, run.stdout  # the variance freezes where compression starts
    assert "default variance_steps: 30" in run.stdout, run.stdout
    assert "compresses from the first step: pass warmup_steps=" in run.stdout, run.stdout


def test_a_round_of_float16_and_float32_payloads_runs_under_horovod():
    """A plan with FP16 on one tensor and PowerSGD on another allreduces float16 and float32
    payloads in one round; Horovod's grouped allreduce takes one dtype per call (one rank,
    in a fresh interpreter: the dtype check is made when the op is built)."""
    check = textwrap.dedent("""
        import horovod.tensorflow as hvd
        import numpy as np
        import tensorflow as tf
        import tfcomp, tfcomp.horovod
        hvd.init()
        tf.keras.utils.set_random_seed(0)
        model = tf.keras.Sequential([tf.keras.Input((64,)), tf.keras.layers.Dense(64, activation="relu"),
                                     tf.keras.layers.Dense(32)])
        plan = tfcomp.Plan({"dense/kernel:0": tfcomp.FP16(), "dense_1/kernel:0": tfcomp.PowerSGD(2)})
        opt = tfcomp.horovod.DistributedOptimizer(tf.keras.optimizers.SGD(0.1), compression=plan,
                                                  min_compress_elements=1)
        model.compile(optimizer=opt, loss="mse")
        x, y = np.ones((16, 64), np.float32), np.zeros((16, 32), np.float32)
        history = model.fit(x, y, epochs=3, verbose=0)
        collectives = tfcomp.horovod.engine.HorovodCollectives()
        summed = collectives.allreduce([tf.ones([3], tf.float16), tf.fill([2], 2.0), tf.ones([1], tf.float16)])
        print("dtypes:", [t.dtype.name for t in summed], "values:", [t.numpy().tolist() for t in summed])
        print("losses:", history.history["loss"])
        """)
    run = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr[-3000:]
    assert "dtypes: ['float16', 'float32', 'float16'] values: [[1.0, 1.0, 1.0], [2.0, 2.0], [1.0]]" \
        in run.stdout, run.stdout
    losses = [float(v) for v in run.stdout.split("losses: [")[1].split("]")[0].split(",")]
    assert len(losses) == 3 and all(np.isfinite(losses)) and losses[-1] < losses[0], losses
