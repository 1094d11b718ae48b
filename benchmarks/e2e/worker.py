"""One worker of the end-to-end benchmark (benchmarks/e2e/): trains a
reference model (models/registry.py) on its synthetic task under model.fit, as
a MultiWorkerMirroredStrategy worker or a Horovod rank (compiled as the main
job's workers are), evaluating test accuracy every --eval_every steps, and
writes JSON: step times after warm-up, bytes sent per step, the Timeline's
phase breakdown and the accuracy curve against training wall time.

Of train_worker's flags, --out, --model, --size, --engine, --compression,
--global_batch, --lr, --bandwidth_gbps, --timeline_steps, --eval_every and
--check_finite apply. The optimizer is the model's (SGD with momentum 0.9, or Adam for the encoder).
"""
import json
import os
import statistics

from absl import app, flags

import tfcomp
from benchmarks.harness import train_worker
from tests.cluster.step_times import StepTimes
from models import registry

FLAGS = flags.FLAGS
flags.DEFINE_integer("steps", 300, "Training steps.", lower_bound=2)
flags.DEFINE_integer("warmup", 20, "Steps not timed (tracing, allocator warm-up).", lower_bound=1)
flags.DEFINE_integer("seed", 1, "Model and data seed.")

def phase_medians(timeline):
    """{phase: median seconds per step} over the Timeline's recorded steps."""
    per_step = [r.phase_totals() for r in timeline.records if r.segments]
    phases = sorted({p for totals in per_step for p in totals})
    return {p: statistics.median(t.get(p, (0.0,))[0] for t in per_step) for p in phases}


def main(argv):
    del argv
    spec = registry.MODELS[FLAGS.model]
    (x_train, y_train), (x_test, y_test) = spec.data(FLAGS.size, FLAGS.seed)
    compile_model = (train_worker.compile_for_horovod if FLAGS.engine == "horovod"
                     else train_worker.compile_for_tf_distribute)
    model, payload_bytes = compile_model(train_worker.learning_rate(),
                                         build=lambda: spec.build(FLAGS.size, FLAGS.seed), loss=spec.loss,
                                         optimizer=spec.optimizer)
    timer = StepTimes()
    evaluator = train_worker.Evaluator(x_test, y_test, FLAGS.eval_every, spec.metric)
    callbacks = [timer, evaluator]
    auto = train_worker.auto_of(model)
    if auto is not None:  # it records its own Timeline steps, so the run records none
        callbacks.append(auto.callback())
    timeline = None
    if FLAGS.timeline_steps and auto is None:  # right after warm-up; those steps are left out of the step times
        timeline = tfcomp.callbacks.Timeline(FLAGS.out + ".timeline", start_step=FLAGS.warmup,
                                             num_steps=FLAGS.timeline_steps)
        callbacks.insert(0, timeline)
    model.fit(train_worker.batches(x_train, y_train).repeat(), epochs=1, steps_per_epoch=FLAGS.steps,
              verbose=0, callbacks=callbacks)

    timed_from = FLAGS.warmup + (FLAGS.timeline_steps if timeline else 0)
    times = sorted(timer.times[timed_from:] or timer.times[FLAGS.warmup:])
    _, dense_bytes, _ = registry.gradient_summary(model)

    def percentile(q):
        return 1e3 * times[min(len(times) - 1, int(q * (len(times) - 1) + 0.5))]

    train_worker.result_path().write_text(json.dumps({
        "model": FLAGS.model, "size": FLAGS.size, "compression": FLAGS.compression, "engine": FLAGS.engine,
        "steps": FLAGS.steps, "step_ms": 1e3 * statistics.median(times), "step_ms_p10": percentile(0.1),
        "step_ms_p90": percentile(0.9),
        "bytes_per_step": payload_bytes(model.trainable_variables) if payload_bytes else dense_bytes,
        "dense_bytes": dense_bytes, "gradient_tensors": len(model.trainable_variables),
        "cpus": sorted(os.sched_getaffinity(0)),
        "phases_s": phase_medians(timeline) if timeline else None,
        "curve": evaluator.curve, "final_accuracy": evaluator.curve[-1][2] if evaluator.curve else None,
        **(auto_result(auto, timer.times) if auto is not None else {})}))


def auto_result(auto, times):
    """tfcomp.Auto's decisions, and the median step time once it settled: after its last
    decision and the warm-up of the train function it then runs."""
    decision = auto.history[-1] if auto.history else {}
    settled = decision.get("settled_step")  # none while it profiles or measures
    after = times[settled:] if settled is not None else []
    return {"auto": {"phase": auto.phase, "compressed": len(auto.choices),
                     "choices": sorted(set(auto.choices.values())), "history": auto.history,
                     "settled_from_step": settled},
            "settled_step_ms": 1e3 * statistics.median(after) if after else None,
            "step_ms_each": [round(1e3 * t, 2) for t in times]}


if __name__ == "__main__":
    flags.mark_flag_as_required("out")
    app.run(main)
