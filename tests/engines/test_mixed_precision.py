"""mixed_float16 under model.fit with 2 real workers, on both engines: a loss
scale that overflows at chosen steps (one worker's batch holds a value float16
cannot represent) skips those steps on every worker, as with TensorFlow's and
Horovod's own uncompressed training, and training goes on with finite weights
identical on every worker."""
import numpy as np
import pytest

from tests.cluster.horovod_cluster import horovodrun
from tests.cluster.local_cluster import run_workers
from tests.workers.workload import BATCHES_PER_EPOCH, assert_identical_weights
from tests.stacks import HOROVOD, KERAS3, PINNED, stacks


POISON_BATCHES = [3, 5]  # of every epoch of 8 batches
STEPS = 32
INITIAL_SCALE = 2.0 ** 15  # Keras' dynamic loss scale starts here and halves on each overflow


def train(engine, tmp_path, **flags):
    args = [f"--engine={engine}", f"--poison_batches={','.join(map(str, POISON_BATCHES))}", f"--steps={STEPS}",
            *(f"--{k}={v}" for k, v in flags.items())]
    if engine == "distribute":
        codes, logs, results = run_workers("tests.workers.mixed_precision_worker", 2, args, tmp_path)
        assert codes == [0, 0], "\n".join(log[-3000:] for log in logs)
    else:
        code, log, results = horovodrun("tests.workers.mixed_precision_worker", 2, args, tmp_path)
        assert code == 0 and None not in results, log[-4000:]
    return results


def expected_scales():
    """Keras' dynamic loss scale after each step: halved after an overflowing one
    (no growth within 2000 steps)."""
    scale, scales = INITIAL_SCALE, []
    for step in range(STEPS):
        if step % BATCHES_PER_EPOCH in POISON_BATCHES:
            scale /= 2
        scales.append(scale)
    return scales


def overflowing_steps():
    return STEPS // BATCHES_PER_EPOCH * len(POISON_BATCHES)


@pytest.fixture(scope="module")
def uncompressed(tmp_path_factory):
    """uncompressed(engine): TensorFlow's own strategy, or Horovod's own optimizer, on the same
    data; run once per engine for the whole module."""
    runs = {}

    def run(engine):
        if engine not in runs:
            runs[engine] = train(engine, tmp_path_factory.mktemp(f"plain-{engine}"), plain=True)
        return runs[engine]
    return run


# One compressor of each family on tf.distribute; Horovod runs the same exchange, so there
# the uncompressed path and one compressor (the one test below also wraps both ways).
@stacks(PINNED, why="Keras 2's LossScaleOptimizer beside TensorFlow's and Horovod's own (tf-keras takes the "
        "pinned stack's path); Keras 3's: the tests below")
@pytest.mark.parametrize("engine, compression", [
    ("distribute", "NoCompression"), ("distribute", "EFSignSGD"), ("distribute", "DRAGONN"),
    ("distribute", "ACPSGD"), ("horovod", "NoCompression"), ("horovod", "DRAGONN")])
def test_overflow_skips_the_step_on_every_worker_and_training_goes_on(uncompressed, engine, compression, tmp_path):
    plain = uncompressed(engine)
    assert plain[0]["loss_scales"] == expected_scales(), "the uncompressed reference must see the overflows"
    results = train(engine, tmp_path, compression=compression)
    assert_identical_weights(results)
    for result in results:
        assert result["finite"], "weights must stay finite"
        assert result["loss_scales"] == plain[0]["loss_scales"]
        assert result["iterations"] == plain[0]["iterations"] == STEPS
        # Nothing compressed: no flag, no state to protect, and every step counts.
        skipped = 0 if compression == "NoCompression" else overflowing_steps()
        assert result["state_step"] == STEPS - skipped, "overflowing steps leave the compressor state"
    if compression == "NoCompression":  # the same arithmetic as the uncompressed engine, up to summation order
        for a, b in zip(results[0]["weights"], plain[0]["weights"]):
            np.testing.assert_allclose(np.array(a), np.array(b), rtol=1e-4, atol=1e-5)


@HOROVOD
def test_horovod_exchanges_unscaled_gradients_whichever_optimizer_wraps_the_other(tmp_path):
    """Keras wraps the compiled optimizer in a LossScaleOptimizer: tfcomp's then
    sees scaled gradients, divides the scale out for the exchange and puts it
    back, so error feedback trains exactly as with the LossScaleOptimizer inside."""
    inside = train("horovod", tmp_path / "inside", compression="EFSignSGD")
    outside = train("horovod", tmp_path / "outside", compression="EFSignSGD", keras_wraps=True)
    assert outside[0]["optimizer_class"] == "LossScaleOptimizerV3"
    assert outside[0]["loss_scales"] == expected_scales()
    assert outside[0]["state_step"] == inside[0]["state_step"]
    assert_identical_weights([*inside, *outside])


@stacks(KERAS3, why="Keras 3's LossScaleOptimizer: the test above covers Keras 2's")
@pytest.mark.parametrize("compression", ["NoCompression", "EFSignSGD", "DRAGONN", "ACPSGD"])
def test_keras3_overflow_on_one_worker_skips_the_step_on_every_worker(compression, tmp_path):
    """Keras 3's LossScaleOptimizer decides from each worker's own gradients; under tfcomp's
    strategy the exchanged ones decide, so a worker that alone overflows skips with the others:
    the loss scale halves at each overflow as on one worker, no weight or state moves then."""
    results = train("distribute", tmp_path, compression=compression)
    assert_identical_weights(results)
    for result in results:
        assert result["optimizer_class"] == "LossScaleOptimizer"
        assert result["finite"], "weights must stay finite"
        assert result["loss_scales"] == expected_scales()
        # Keras 3 counts applied steps only (Keras 2 counts every step).
        assert result["iterations"] == STEPS - overflowing_steps()
        skipped = 0 if compression == "NoCompression" else overflowing_steps()
        assert result["state_step"] == STEPS - skipped, "overflowing steps leave the compressor state"


@stacks(KERAS3, why="Keras 3 (the pinned stack's Keras 2 runs mixed_float16 above)")
def test_keras3_mixed_bfloat16_trains_identically_on_every_worker(tmp_path):
    """bfloat16 has float32's range: no loss scale, nothing skipped, every step exchanged."""
    results = train("distribute", tmp_path, compression="EFSignSGD", policy="mixed_bfloat16")
    assert_identical_weights(results)
    for result in results:
        assert result["finite"] and result["loss_scales"] == [None] * STEPS
        assert result["iterations"] == result["state_step"] == STEPS
