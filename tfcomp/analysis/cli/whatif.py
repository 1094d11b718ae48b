"""`python -m tfcomp.analysis whatif`: Zhang et al.'s what-if sweep from a saved profile.
Every (compute speed-up, compressor or dense, worker count, bandwidth) is simulated;
the scaling factors and speed-ups over dense go to whatif.md and whatif.json, with
each compressor's crossover bandwidth (where its speed-up crosses 1), and to PNG
plots (tfcomp.analysis.cli.plots). --compression_ratios adds Zhang et al.'s
dense-compression what-if: dense gradients sent that many times smaller at no
compute cost, tabled and plotted against the ratio."""
import json
import os
import time

import numpy as np
from absl import flags

from tfcomp.analysis.cli import options as opts
from tfcomp.analysis.model.whatif import sweep

SUMMARY = "sweep bandwidths, worker counts, compressors and compute speed-ups; write a table and plots"
DEFAULT_BANDWIDTHS_GBPS = tuple(float(b) for b in np.logspace(-1, 2, 31))  # ten a decade
DEFAULT_WORKERS = (2, 4, 8, 16, 32, 64, 128, 256)


def define_flags(fv):
    opts.define_profile_flag(fv)
    flags.DEFINE_list("bandwidths_gbps", None,
                      "Bandwidths to sweep in Gbit/s, comma-separated, each > 0; every collective gets the same "
                      f"one. Default: {len(DEFAULT_BANDWIDTHS_GBPS)} points log-spaced from 0.1 to 100.",
                      flag_values=fv)
    flags.DEFINE_list("workers", [str(w) for w in DEFAULT_WORKERS],
                      "Worker counts to sweep, comma-separated integers >= 1.", flag_values=fv)
    flags.DEFINE_list("compressors", None,
                      "Compressors to compare with dense, comma-separated (a name without settings stands for the "
                      "one variant measured); default: every one the profile has "
                      "measured.", flag_values=fv)
    flags.DEFINE_list("compute_speedups", ["1"],
                      "Accelerators this many times faster, comma-separated, each > 0 (Zhang et al.'s what-if): "
                      "the forward, backward (each gradient's ready time with it), apply, encode and decode "
                      "times are divided by it; the links and the vector adds (AddEst) are not.", flag_values=fv)
    flags.DEFINE_list("compression_ratios", None,
                      "Compression ratios to sweep, comma-separated, each > 0 (Zhang et al.'s what-if, Section 3): "
                      "dense gradients whose bandwidth term is divided by the ratio, the vector adds not, "
                      "encoding and decoding free; tabled beside the compressors as 'ratio Nx', and plotted as "
                      "the scaling factor against the ratio (compression_ratio.png). Default: none.",
                      flag_values=fv)
    opts.define_network_flags(fv)
    flags.DEFINE_string("output", "whatif", "Directory for whatif.md, whatif.json and the PNG plots "
                        "(created if missing).", flag_values=fv)
    flags.DEFINE_bool("plots", True, "Write the PNG plots (scaling factor and speed-up over dense against "
                      "bandwidth, one panel per worker count); --noplots writes the table and JSON only.",
                      flag_values=fv)


def markdown(result, path, profile, fusion, latency_us, plot_files):
    model = profile.model
    latency = "measured per collective" if latency_us is None else f"{latency_us:g} us"
    lines = [f"# What-if: {model.name}", "",
             f"Profile `{path}`: {len(model.gradients)} gradients, {model.total_bytes / opts.MIB:.1f} MiB; "
             f"one worker's step {model.single_step_s * 1e3:.1f} ms. Fusion: {opts.describe_fusion(fusion)}. "
             f"Latency: {latency}. {result.configurations} configurations.", "",
             "Scaling factor f = one worker's step time / the step time on N workers (1: no communication "
             "cost). Speed-up = dense step time / the compressor's, same link, workers and compute. The "
             "crossover is the bandwidth where the speed-up crosses 1, interpolated in log bandwidth.", "",
             "## Crossover bandwidths (Gbit/s)", "",
             "| compute speed-up | compressor | " + " | ".join(f"{w} workers" for w in result.workers) + " |",
             "|---|---|" + "---|" * len(result.workers)]
    rows = {}
    for speedup, name, _, _, description in result.crossovers():
        rows.setdefault((speedup, name), []).append(description)
    lines += [f"| {speedup:g}x | {name} | " + " | ".join(cells) + " |" for (speedup, name), cells in rows.items()]
    lines += _ratio_tables(result)
    lines += _sweep_tables(result)
    if plot_files:
        lines += ["", "## Plots", ""] + [f"![{os.path.basename(f)}]({os.path.basename(f)})" for f in plot_files]
    return "\n".join(lines) + "\n"


def _ratio_tables(result):
    """Zhang et al.'s what-if: the scaling factor at each compression ratio (1: dense), per
    bandwidth and worker count."""
    if not result.compression_ratios:
        return []
    ratios, factors = result.ratio_curves()
    lines = ["", "## Dense compression ratios (Zhang et al.'s what-if)", "",
             "Dense gradients whose bandwidth term is divided by the ratio (the vector adds are not), "
             "encoding and decoding free: the scaling factor each ratio reaches."]
    for s, speedup in enumerate(result.compute_speedups):
        for w, workers in enumerate(result.workers):
            lines += ["", f"### {workers} workers, compute speed-up {speedup:g}x", "",
                      "| Gbit/s | " + " | ".join(f"{r:g}x" for r in ratios) + " |",
                      "|---|" + "---|" * len(ratios)]
            lines += [f"| {gbps:.3g} | " + " | ".join(f"{factors[s, r, w, b]:.3f}" for r in range(len(ratios))) + " |"
                      for b, gbps in enumerate(result.bandwidths_gbps)]
    return lines


def _sweep_tables(result):
    lines = []
    for s, speedup in enumerate(result.compute_speedups):
        for w, workers in enumerate(result.workers):
            lines += ["", f"## {workers} workers, compute speed-up {speedup:g}x", "",
                      "| Gbit/s | dense step (ms) | dense f | " +
                      " | ".join(f"{n} f | {n} speed-up" for n in result.names[1:]) + " |",
                      "|---|---|---|" + "---|---|" * (len(result.names) - 1)]
            for b, gbps in enumerate(result.bandwidths_gbps):
                cells = [f"{result.scaling_factor[s, c, w, b]:.3f} | {result.speedup[s, c, w, b]:.2f}"
                         for c in range(1, len(result.names))]
                lines.append(f"| {gbps:.3g} | {result.iteration_s[s, 0, w, b] * 1e3:.1f} | "
                             f"{result.scaling_factor[s, 0, w, b]:.3f} | " + " | ".join(cells) + " |")
    return lines


def as_dict(result, path, profile, fusion, latency_us):
    return {
        "profile": str(path), "model": profile.model.name, "fusion": opts.describe_fusion(fusion),
        "latency_us": latency_us, "bandwidths_gbps": list(result.bandwidths_gbps), "workers": list(result.workers),
        "compute_speedups": list(result.compute_speedups), "names": list(result.names),
        "compression_ratios": list(result.compression_ratios),
        "iteration_s": result.iteration_s.tolist(), "scaling_factor": result.scaling_factor.tolist(),
        "speedup_over_dense": result.speedup.tolist(),
        "crossovers": [{"compute_speedup": speedup, "compressor": name, "workers": workers,
                        "gbps": [gbps for gbps, _ in crossings], "faster": [side for _, side in crossings]}
                       for speedup, name, workers, crossings, _ in result.crossovers()],
    }


def _parsed(fv):
    """(bandwidths, workers, compute speed-ups, compression ratios) from the flags, sorted,
    or a UsageError."""
    bandwidths = DEFAULT_BANDWIDTHS_GBPS if fv.bandwidths_gbps is None else \
        opts.parse_list(fv.bandwidths_gbps, "--bandwidths_gbps", float, "numbers")
    for b in bandwidths:
        opts.check_positive(b, "every --bandwidths_gbps")
    workers = opts.parse_list(fv.workers, "--workers", int, "integers")
    for w in workers:
        opts.check_workers(w, "every --workers")
    speedups = opts.parse_list(fv.compute_speedups, "--compute_speedups", float, "numbers")
    for s in speedups:
        opts.check_positive(s, "every --compute_speedups")
    ratios = [] if fv.compression_ratios is None else \
        opts.parse_list(fv.compression_ratios, "--compression_ratios", float, "numbers")
    for r in ratios:
        opts.check_positive(r, "every --compression_ratios")
    return sorted(set(bandwidths)), sorted(set(workers)), sorted(set(speedups)), sorted(set(ratios))


def write(result, output, path, profile, fusion, latency_us, plot):
    """Writes whatif.md, whatif.json and (plot) the PNGs under output; returns their paths."""
    try:
        os.makedirs(output, exist_ok=True)
    except OSError as e:
        raise opts.UsageError(f"cannot create --output directory {output}: {e.strerror or e}") from None
    plot_files = []
    if plot:
        # matplotlib only when plotting
        from tfcomp.analysis.cli import plots  # pylint: disable=import-outside-toplevel
        plot_files = plots.plot_sweep(result, output, profile.model.name)
    table, data = os.path.join(output, "whatif.md"), os.path.join(output, "whatif.json")
    with open(table, "w", encoding="utf-8") as f:
        f.write(markdown(result, path, profile, fusion, latency_us, plot_files))
    with open(data, "w", encoding="utf-8") as f:
        json.dump(as_dict(result, path, profile, fusion, latency_us), f, indent=1)
        f.write("\n")
    return [table, data, *plot_files]


def run(fv, out):
    bandwidths, workers, compute_speedups, ratios = _parsed(fv)
    latency_us = opts.check_latency(fv.latency_us)
    fusion = opts.fusion_policy(fv)
    profile = opts.load_profile(fv.profile)
    compressors = opts.check_compressors(profile, list(profile.compressors) if fv.compressors is None
                                         else fv.compressors)
    start = time.perf_counter()
    result = sweep(profile, bandwidths, workers, compressors, compute_speedups, latency_us=latency_us, fusion=fusion,
                   compression_ratios=ratios)
    swept_s = time.perf_counter() - start
    written = write(result, fv.output, fv.profile, profile, fusion, latency_us, fv.plots)
    print(f"{result.configurations} configurations simulated in {swept_s:.2f} s; wrote {written[0]}"
          + "".join(f", {os.path.basename(p)}" for p in written[1:]), file=out)
    for speedup, name, workers, _, description in result.crossovers():
        print(f"  compute {speedup:g}x, {workers} workers, {name}: crossover {description}", file=out)
