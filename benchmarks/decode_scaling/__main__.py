"""Does decode grow with the workers as the model predicts? For every compressor that
allgathers (each worker's payload comes back once per worker), the profile a user
records at 2 workers (tfcomp.analysis.measure.compressor_profile: decode timed at 2
workers' payloads, and again at 4 and 8 for the per-worker slope) predicts decode at any K
(CompressorProfile.decode_s, linear in K). This benchmark measures decode directly at
every K and sets the two side by side, over a model's own gradients:

    python -m benchmarks.decode_scaling
    python -m benchmarks.decode_scaling --models=resnet50:full --compressors=SignSGD --workers=2,3,8 --rounds=1

Decode is what a worker runs from the collectives' results to its gradient
(codec_seconds: the same compiled compress-then-finish the profile times, with K
copies of this worker's payload standing in for the allgather's result), summed
over the model's gradients. K = 2, 4 and 8 are what the profile was fitted to;
every other K is held out. Rounds interleave every compressor and K, and a fresh profile
is recorded in each, so the prediction's own noise shows in the spread. A
least-squares line over the measured points says how linear decode is in K (Agarwal
et al., "On the Utility of Gradient Compression in Distributed Training Systems",
Section 3.2, on SignSGD: its decode grows linearly with the workers).

Writes decode_scaling.{json,md,png} under --out_dir.
"""
import os

os.environ.setdefault("TF_CPU_ALLOCATOR_USE_BFC", "true")  # as the benchmark workers run

import time  # pylint: disable=wrong-import-position

import numpy as np  # pylint: disable=wrong-import-position
from absl import app, flags  # pylint: disable=wrong-import-position

from benchmarks.decode_scaling.report import PROFILE_WORKERS, fits, markdown, plot, summarize  # pylint: disable=wrong-import-position
from benchmarks.harness import record  # pylint: disable=wrong-import-position
from models.registry import MODELS  # pylint: disable=wrong-import-position
from tfcomp.analysis.measure import codecs  # pylint: disable=wrong-import-position
from tfcomp.compressors.registry import parse_compressor  # pylint: disable=wrong-import-position
from tfcomp.costs.network import ALLGATHER  # pylint: disable=wrong-import-position

FLAGS = flags.FLAGS
flags.DEFINE_list("models", ["resnet50:full", "xml:medium"], "Models (MODELS name, optionally :size; default small) "
                  "whose trainable tensors are the gradients.")
flags.DEFINE_list("compressors", ["SignSGD", "EFSignSGD", "TopK", "DGC", "DRAGONN"],
                  "Compressor specs; those that send nothing by allgather are left out (their decode does not "
                  "see K).")
flags.DEFINE_list("workers", ["2", "3", "4", "6", "8", "16"], "Worker counts K at which decode is measured.")
flags.DEFINE_integer("rounds", 3, "Rounds; each records a fresh profile and measures every K.")
flags.DEFINE_integer("runs", 7, "Timed calls per codec_seconds figure (the median is kept).")
flags.DEFINE_float("sgd_momentum", 0.9, "Compressors whose momentum is 'auto' run as under Keras SGD with this "
                   "momentum, as the models train.")
flags.DEFINE_string("out_dir", "benchmarks/results", "Where decode_scaling.{json,md,png} go.")



def gradients_of(model_flag):
    name, _, size = model_flag.partition(":")
    model = MODELS[name].build(size or "small", seed=1)
    return [(v.name, tuple(v.shape), v.dtype) for v in model.trainable_variables]


def measured_decode(compressor, gradients, workers):
    """Seconds of decode over every gradient at `workers` workers: each distinct shape timed once."""
    counts = {}
    for _, shape, dtype in gradients:
        counts[(shape, dtype)] = counts.get((shape, dtype), 0) + 1
    return sum(n * codecs.codec_seconds(compressor, shape, dtype, workers, FLAGS.runs)[1]
               for (shape, dtype), n in counts.items())


def predicted_decode(compressor, label, gradients):
    """{K: seconds} over every gradient, from a profile recorded as a user's would be."""
    profile = codecs.compressor_profile(label, compressor, gradients, PROFILE_WORKERS, FLAGS.runs)

    def at(k):
        return sum(profile.decode_s(float(np.prod(shape, dtype=np.int64)) * dtype.size, profile.payloads[name], k)
                   for name, shape, dtype in gradients)
    return at


def allgathers(compressor, gradients):
    return any(t.collective == ALLGATHER for _, shape, dtype in gradients
               for t in codecs.transfers(compressor, shape, dtype))


def main(argv):
    del argv
    ks = sorted({int(k) for k in FLAGS.workers})
    if ks[0] < 1:
        raise app.UsageError("--workers: worker counts of at least 1")
    gradients = {m: gradients_of(m) for m in FLAGS.models}
    compressors = codecs.under_sgd({s: parse_compressor(s) for s in FLAGS.compressors}, FLAGS.sgd_momentum)
    cells = {}
    for model, grads in gradients.items():
        for spec, compressor in compressors.items():
            if allgathers(compressor, grads):
                cells[(model, spec)] = []
            else:
                print(f"{model}: {spec} allgathers nothing; left out", flush=True)
    load_before, start = os.getloadavg(), time.time()
    for rnd in range(FLAGS.rounds):
        order = list(cells) if rnd % 2 == 0 else list(reversed(cells))
        for model, spec in order:
            compressor, grads = compressors[spec], gradients[model]
            predicted = predicted_decode(compressor, spec, grads)
            measured = {}
            for k in (ks if rnd % 2 == 0 else list(reversed(ks))):
                measured[str(k)] = measured_decode(compressor, grads, k)
            cells[(model, spec)].append({"measured": measured, "predicted": {str(k): predicted(k) for k in ks}})
            print(f"[{rnd + 1}/{FLAGS.rounds}] {model} {spec}: " + ", ".join(
                f"K={k} {1e3 * measured[str(k)]:.2f}/{1e3 * predicted(k):.2f} ms" for k in ks), flush=True)
    meta = {"command": record.command_line("benchmarks.decode_scaling"), "machine": record.machine(),
            "commit": os.popen("git rev-parse --short HEAD 2>/dev/null").read().strip() or "unknown",
            "rounds": FLAGS.rounds, "elapsed_s": time.time() - start, "load": [load_before[0], os.getloadavg()[0]]}
    rows = summarize(cells, ks)
    line_fits = fits(cells, ks)
    payload = {"meta": meta, "workers": ks, "rows": rows, "linear_fits": line_fits,
               "rounds": {f"{m} {s}": r for (m, s), r in cells.items()}}
    json_path, md_path = record.write_results(FLAGS.out_dir, "decode_scaling", payload,
                                              markdown(rows, line_fits, meta, ks))
    plot(rows, os.path.join(FLAGS.out_dir, "decode_scaling.png"))
    print(md_path.read_text())
    print(f"wrote {json_path}, {md_path}")


if __name__ == "__main__":
    app.run(main)
