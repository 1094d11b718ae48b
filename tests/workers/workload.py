"""The small training problem every multi-process test shares: a linearly
separable 10-class task on 64 features and a 64-64-10 MLP, the same on every
worker and every run."""
import numpy as np
import tensorflow as tf

GLOBAL_BATCH = 64
BATCHES_PER_EPOCH = 8
#: min_compress_elements for runs with mixed_plan(), so that the 64x10 kernel is compressed too.
PLAN_MIN_COMPRESS_ELEMENTS = 100


def data():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((GLOBAL_BATCH * BATCHES_PER_EPOCH, 64)).astype(np.float32)
    w = rng.standard_normal((64, 10)).astype(np.float32)
    y = np.argmax(x @ w, axis=1).astype(np.int64)
    return x, y


def build_model(hidden=64):
    tf.keras.utils.set_random_seed(1)
    return tf.keras.Sequential([tf.keras.Input((64,)), tf.keras.layers.Dense(hidden, activation="relu"),
                                tf.keras.layers.Dense(10)])


def compressor(spec, ratio=None, rank=None):
    """The compressor a worker's flags name: a spec as the library reads it ('DGC',
    'ACPSGD:warmup_steps=0'), with --ratio and --rank where given."""
    from tfcomp.compressors import registry  # pylint: disable=import-outside-toplevel
    knobs = ([f"ratio={ratio}"] if ratio is not None else []) + ([f"rank={rank}"] if rank is not None else [])
    return registry.parse_compressor(":".join([spec, *knobs]))


def mixed_plan():
    """The tfcomp.Plan of the workers' --plan runs: ACPSGD (two phases, allreduce) on the
    hidden kernel, EFSignSGD (allgather) on the output kernel, the biases dense."""
    import tfcomp  # pylint: disable=import-outside-toplevel
    return tfcomp.Plan({"dense/kernel:0": tfcomp.ACPSGD(4), "dense_1/kernel:0": tfcomp.EFSignSGD(),
                        "*/bias:0": None}, default=tfcomp.FP16())


def assert_identical_weights(results):
    """Every worker's final weights, bitwise."""
    for other in results[1:]:
        for a, b in zip(results[0]["weights"], other["weights"]):
            np.testing.assert_array_equal(np.array(a), np.array(b))


def training_accuracy(weights):
    """Accuracy of the MLP with these final weights ([kernel, bias] per layer) on data()."""
    x, y = data()
    k1, b1, k2, b2 = (np.array(w, np.float32) for w in weights)
    logits = np.maximum(x @ k1 + b1, 0) @ k2 + b2
    return float(np.mean(np.argmax(logits, axis=1) == y))


MOMENTUM_TOLERANCE = 0.03  # accuracy on the 512 training examples after 96 steps (12 epochs)


MOMENTUM_RUN = {"lr": 0.05, "momentum": 0.9, "steps": 96}


def assert_trains_like_dense_with_momentum(train, tmp_path, dense, compression, extra):
    """train (an engine's test launcher) with compression under SGD(0.05, momentum=0.9)
    reaches the accuracy of dense (that launcher's NoCompression run with MOMENTUM_RUN)
    within MOMENTUM_TOLERANCE."""
    ours = train(tmp_path, compression=compression, **MOMENTUM_RUN, **extra)
    assert_identical_weights(ours)
    dense_accuracy, accuracy = training_accuracy(dense[0]["weights"]), training_accuracy(ours[0]["weights"])
    assert dense_accuracy > 0.9, dense_accuracy
    assert accuracy >= dense_accuracy - MOMENTUM_TOLERANCE, (accuracy, dense_accuracy)
    return ours


def assert_compressed_after_an_epoch(results, compression):
    """The default dense start was one epoch of the workload, then compressed steps
    (fewer bytes than dense: the 64x64 kernel, the one tensor over 1024 elements)."""
    dense_bytes = 4 * (64 * 64 + 64 + 64 * 10 + 10)
    epoch = BATCHES_PER_EPOCH if compression not in ("FP16", "SignSGD", "EFSignSGD") else 0
    for r in results:
        assert r["warmup_steps"] == epoch and r["state_step"] == MOMENTUM_RUN["steps"], r
        assert r["payload_bytes"] < dense_bytes, r["payload_bytes"]
