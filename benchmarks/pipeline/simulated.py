"""What overlap buys, as the what-if simulator predicts it: the synthetic ResNet-50-sized
profile (tfcomp.analysis.model.synthetic: GPU-speed compute, forward 40 ms, backward
80 ms) and the same profile with compute 10x slower (about this machine's CPU step),
on 2 workers at 1 Gbit/s, each compressor with its non-finite check, its buckets
sent after the whole backward pass (the barrier) or as their gradients are ready.

    python -m benchmarks.pipeline.simulated
"""
from absl import app, flags

from benchmarks.harness import record
from tfcomp.analysis.model import synthetic, whatif
from tfcomp.analysis.model.simulator import simulate_profile
from tfcomp.costs.network import Link
from tfcomp.costs.tables import SizeTable

FLAGS = flags.FLAGS
flags.DEFINE_float("gbps", 1.0, "The link, Gbit/s.")
flags.DEFINE_integer("workers", 2, "Workers.")
flags.DEFINE_string("out_dir", "benchmarks/results/pipeline", "Where simulated_overlap.{md,json} go.")

COMPUTE = {"GPU-speed": 1.0, "10x slower (CPU-speed)": 0.1}
SCAN = SizeTable([(1e3, 2e-6), (1e8, 6e-3)], "finite scan")  # a streaming read, GPU-speed


def main(argv):
    del argv
    base = synthetic.synthetic_profile()
    base = type(base)(base.model, base.allreduce, base.allgather, base.addest, base.compressors, SCAN)
    link = Link.from_gbit(FLAGS.gbps, alpha_s=base.allreduce.alpha_s)
    rows = []
    for label, speedup in COMPUTE.items():
        profile = whatif.faster_compute(base, speedup)
        for name in [None, *profile.compressors]:
            step = {overlap: simulate_profile(profile, FLAGS.workers, compressor=name, link=link, overlap=overlap,
                                              finite_check=name is not None).iteration_s
                    for overlap in (False, True)}
            rows.append({"compute": label, "compression": name or "dense", "barrier_ms": 1e3 * step[False],
                         "pipeline_ms": 1e3 * step[True], "speedup": step[False] / step[True],
                         "single_ms": 1e3 * profile.model.single_step_s})
    lines = ["# What overlap buys, simulated", "",
             f"`{record.command_line('benchmarks.pipeline.simulated')}`, {record.machine()['date']}.", "",
             f"The synthetic ResNet-50-sized profile (97.5 MiB of gradients, 161 tensors), {FLAGS.workers} workers, "
             f"{FLAGS.gbps:g} Gbit/s, tfcomp's 25 MiB buckets; compressed steps with the non-finite check. "
             "Barrier: every bucket leaves after the backward pass; pipeline: each as its gradients are ready.", "",
             "| compute | compression | one worker's step ms | barrier ms | pipeline ms | barrier/pipeline |",
             "|---|---|---|---|---|---|"]
    lines += [f"| {r['compute']} | {r['compression']} | {r['single_ms']:.0f} | {r['barrier_ms']:.0f} | "
              f"{r['pipeline_ms']:.0f} | {r['speedup']:.2f}x |" for r in rows]
    record.write_results(FLAGS.out_dir, "simulated_overlap", {"machine": record.machine(), "command":
                         record.command_line("benchmarks.pipeline.simulated"), "rows": rows}, "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    app.run(main)
