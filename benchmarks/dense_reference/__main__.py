"""Is tfcomp's exchange running dense as fast as the engine's own dense allreduce?
tfcomp.Auto profiles and falls back to dense through tfcomp's exchange, and a user
compares compressed runs with the engine's dense; the two must cost the same.

Two Horovod ranks on localhost (`horovodrun -np 2`, Gloo) train each model under
model.fit with Horovod's DistributedOptimizer, with tfcomp's running NoCompression, and
with tfcomp's made to send the non-finite flag anyway (what every dense step paid
before the exchange skipped the flag where nothing is compressed), in alternating
blocks. Reports each variant's median over blocks and ranks of the blocks' median
step time, and its ratio to Horovod's.

    python -m benchmarks.dense_reference [--models=xml,resnet50] [--blocks=6] [--steps=50]
"""
import os
import statistics
import tempfile
import time

from absl import app, flags

from benchmarks.harness import record
from tests.cluster.horovod_cluster import horovodrun

FLAGS = flags.FLAGS
flags.DEFINE_list("models", ["xml", "resnet50"], "Models of models/registry.py (size small).")
flags.DEFINE_integer("blocks", 6, "Blocks per variant and model; the order alternates.", lower_bound=1)
flags.DEFINE_integer("steps", 50, "Steps per block, the first 10 untimed.", lower_bound=12)
flags.DEFINE_string("out_dir", "benchmarks/results", "Where dense_reference.{md,json} go.")


def run(model):
    """({variant: [each block's median ms on each rank]}, {variant: what it is})."""
    args = [f"--model={model}", f"--blocks={FLAGS.blocks}", f"--steps={FLAGS.steps}"]
    with tempfile.TemporaryDirectory(prefix="tfcomp-dense-reference-") as out:
        code, log, results = horovodrun("benchmarks.dense_reference.worker", 2, args, out, timeout=1800)
    if code != 0 or None in results:
        raise RuntimeError(f"{model}: horovodrun exited {code}\n{log[-3000:]}")
    variants = results[0]["variants"]
    return {v: [ms for rank in results for ms in rank["blocks"][v]] for v in variants}, variants


def main(argv):
    del argv
    load_before, start = os.getloadavg(), time.time()
    measured, described = {}, {}
    for model in FLAGS.models:
        measured[model], variants = run(model)
        described.update(variants)
        print(f"{model}: " + ", ".join(f"{v} {statistics.median(ms):.1f} ms" for v, ms in measured[model].items()),
              flush=True)
    lines = [
        "# tfcomp's exchange running dense against Horovod's own allreduce",
        "",
        f"`{record.command_line('benchmarks.dense_reference')}` on {os.cpu_count()} CPUs (load average "
        f"{load_before[0]:.1f} before, {os.getloadavg()[0]:.1f} after; {time.time() - start:.0f} s).",
        "",
        f"Two Horovod ranks on localhost (Gloo), each model (size small) under model.fit with SGD(momentum=0.9), "
        f"{FLAGS.blocks} blocks of {FLAGS.steps} steps per variant in alternating order, the first 10 steps of "
        "each block untimed. ms/step: the median over blocks and ranks of each block's median.",
        "",
        "| model | variant | ms/step | vs Horovod | what it is |",
        "|---|---|---|---|---|",
    ]
    summary = {}
    for model, variants in measured.items():
        reference = statistics.median(variants["horovod"])
        for variant, ms in variants.items():
            summary.setdefault(model, {})[variant] = statistics.median(ms)
            lines.append(f"| {model} | {variant} | {statistics.median(ms):.1f} | "
                         f"{statistics.median(ms) / reference:.3f}x | {described[variant]} |")
    text = "\n".join(lines) + "\n"
    print("\n" + text)
    record.write_results(FLAGS.out_dir, "dense_reference",
                          {"machine": record.machine(), "summary": summary, "blocks": measured}, text)


if __name__ == "__main__":
    app.run(main)
