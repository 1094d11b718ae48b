"""One Horovod rank of benchmarks/dense_reference/: one model of models/registry.py
compiled once per variant (Horovod's own DistributedOptimizer, and tfcomp's
DistributedOptimizer running dense, with and without the non-finite flag), trained
in alternating blocks of --steps under model.fit so that every variant sees the same
machine load. Writes OUT/rank<r>.json: {"blocks": {variant: [median ms/step of each
block]}, "variants": {variant: what it is}}.
"""
import json
import pathlib
import statistics

import horovod.tensorflow.keras as hvd
import tensorflow as tf
from absl import app, flags

import tfcomp
import tfcomp.horovod
from tests.cluster.step_times import StepTimes
from models import registry

FLAGS = flags.FLAGS
flags.DEFINE_string("out", None, "Directory for rank<r>.json.")
flags.DEFINE_string("model", "xml", "A model of models/registry.py.")
flags.DEFINE_string("size", "small", "The model's size setting.")
flags.DEFINE_list("variants", ["horovod", "tfcomp_dense", "tfcomp_dense_flagged"], "What to compare (VARIANTS).")
flags.DEFINE_integer("blocks", 6, "Blocks per variant; the order alternates between blocks.", lower_bound=1)
flags.DEFINE_integer("steps", 50, "Steps per block; the first --skip of each are not timed.", lower_bound=2)
flags.DEFINE_integer("skip", 10, "Steps at the start of each block left untimed.", lower_bound=0)

VARIANTS = {
    "horovod": "horovod.tensorflow.keras.DistributedOptimizer (Horovod's own allreduce)",
    "tfcomp_dense": "tfcomp.horovod.DistributedOptimizer(compression=NoCompression) as it runs now: no flag",
    "tfcomp_dense_flagged": "the same exchange made to send the non-finite flag anyway, as it did before it "
                            "skipped the flag where nothing is compressed",
}


def compiled(spec, variant):
    optimizer = spec.optimizer()
    if variant == "horovod":
        wrapped = hvd.DistributedOptimizer(optimizer)
    else:
        wrapped = tfcomp.horovod.DistributedOptimizer(optimizer, compression=tfcomp.NoCompression())
        if variant == "tfcomp_dense_flagged":
            exchange = wrapped.tfcomp_engine.exchange
            exchange._checks = lambda compressors: exchange.check_finite  # pylint: disable=protected-access
    model = spec.build(FLAGS.size, seed=1)
    spec.compile(model, wrapped)
    return model


def main(argv):
    del argv
    unknown = sorted(set(FLAGS.variants) - set(VARIANTS))
    if unknown:
        raise app.UsageError(f"--variants: unknown {unknown}; known: {sorted(VARIANTS)}")
    hvd.init()
    spec = registry.MODELS[FLAGS.model]
    (x, y), _ = spec.data(FLAGS.size, seed=0)
    per_rank = spec.batch_size // hvd.size()
    x, y = x[hvd.rank()::hvd.size()], y[hvd.rank()::hvd.size()]
    data = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(per_rank, drop_remainder=True).prefetch(4)
    models = {v: compiled(spec, v) for v in FLAGS.variants}
    blocks = {v: [] for v in FLAGS.variants}
    for block in range(FLAGS.blocks):
        for variant in FLAGS.variants if block % 2 == 0 else FLAGS.variants[::-1]:
            times = StepTimes()
            models[variant].fit(data, steps_per_epoch=FLAGS.steps, epochs=1, verbose=0, callbacks=[times])
            blocks[variant].append(1e3 * statistics.median(times.times[FLAGS.skip:]))
    out = pathlib.Path(FLAGS.out)
    (out / f"rank{hvd.rank()}.json").write_text(json.dumps(
        {"blocks": blocks, "variants": {v: VARIANTS[v] for v in FLAGS.variants}}))


if __name__ == "__main__":
    flags.mark_flag_as_required("out")
    app.run(main)
