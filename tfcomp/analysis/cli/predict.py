"""`python -m tfcomp.analysis predict`: one configuration's predicted step time and
where it goes, dense and with each compressor named, from a saved profile
(simulator.simulate_profile: Zhang et al.'s what-if simulator)."""
import dataclasses
import json

from absl import flags

from tfcomp.analysis.cli import options as opts
from tfcomp.analysis.model.links import DENSE, links
from tfcomp.analysis.model.simulator import simulate_profile

SUMMARY = "one configuration's predicted step time and its breakdown, dense and per compressor"

# The text table's rows: (label, SimResult field, multiplier); None fields are computed.
ROWS = (
    ("step time (ms)", "iteration_s", 1e3),
    ("  forward", "forward_s", 1e3),
    ("  backward", "backward_s", 1e3),
    ("  apply", "apply_s", 1e3),
    ("  exposed communication", "exposed_s", 1e3),
    ("encode (ms, total)", "encode_s", 1e3),
    ("transfer (ms, total)", "transfer_s", 1e3),
    ("vector adds (ms, total)", "vector_add_s", 1e3),
    ("decode (ms, total)", "decode_s", 1e3),
    ("buckets", "buckets", 1),
    ("scaling factor", "scaling_factor", 1),
    ("speed-up over dense", None, 1),
)


def define_flags(fv):
    opts.define_profile_flag(fv)
    opts.define_workers_flag(fv)
    flags.DEFINE_list("compressors", [],
                      "Compressors to predict beside dense, comma-separated, each one the profile has measured "
                      "(e.g. PowerSGD:rank=4,TopK; a name without settings stands for the one variant measured); "
                      "default: dense only.", flag_values=fv)
    opts.define_link_flags(fv)
    flags.DEFINE_bool("json", False, "Print the result as JSON (every SimResult field, in seconds) instead of "
                      "a table.", flag_values=fv)


def predict(profile, workers, compressors=(), *, link=None, allgather_link=None, fusion=None):
    """{'dense': SimResult, compressor: SimResult, ...}: one step on `workers` workers
    (links: the profile's measured ones unless given). Dense is the engine's own
    allreduce; a compressor runs in tfcomp's exchange, behind its finite check where
    the profile measured that."""
    return {name: simulate_profile(profile, workers, compressor=None if name == DENSE else name, link=link,
                                   allgather_link=allgather_link, fusion=fusion,
                                   finite_check=name != DENSE and profile.finite_scan is not None)
            for name in (DENSE, *compressors)}


def speedups(results):
    """{name: dense step time / its step time}."""
    dense = results[DENSE].iteration_s
    return {name: dense / r.iteration_s for name, r in results.items()}


def as_dict(path, profile, workers, link, allgather_link, fusion, results):
    faster = speedups(results)
    return {
        "profile": str(path), "model": profile.model.name, "workers": workers,
        "links": {"allreduce": dataclasses.asdict(link), "allgather": dataclasses.asdict(allgather_link)},
        "fusion": opts.describe_fusion(fusion),
        "results": {name: {**dataclasses.asdict(r), "speedup_over_dense": faster[name]}
                    for name, r in results.items()},
    }


def as_text(path, profile, workers, link, allgather_link, fusion, results):
    model = profile.model
    lines = [f"{model.name} ({path}: {len(model.gradients)} gradients, {model.total_bytes / opts.MIB:.1f} MiB), "
             f"{workers} workers",
             f"allreduce: {opts.describe_link(link)}; allgather: {opts.describe_link(allgather_link)}",
             f"fusion: {opts.describe_fusion(fusion)}", ""]
    faster = speedups(results)
    width = max(10, *(len(n) + 2 for n in results))
    lines.append(f"{'':26}" + "".join(f"{name:>{width}}" for name in results))
    for label, field, scale in ROWS:
        values = [faster[n] if field is None else getattr(r, field) * scale for n, r in results.items()]
        cells = [f"{v:>{width}d}" if isinstance(v, int) else f"{v:>{width}.{_digits(field)}f}" for v in values]
        lines.append(f"{label:26}" + "".join(cells))
    lines += ["", "Step time = forward + backward + exposed communication + apply. Encode, transfer, vector adds "
              "and decode are totals over the buckets, hidden behind the backward pass or not."]
    return "\n".join(lines)


def _digits(field):
    return 2 if field is not None and field.endswith("_s") else 3


def run(fv, out):
    workers = opts.check_workers(fv.workers)
    opts.check_positive(fv.bandwidth_gbps, "--bandwidth_gbps", optional=True)
    latency_us = opts.check_latency(fv.latency_us)
    fusion = opts.fusion_policy(fv)
    profile = opts.load_profile(fv.profile)
    compressors = opts.check_compressors(profile, fv.compressors)
    link, allgather_link = links(profile, fv.bandwidth_gbps, latency_us)
    results = predict(profile, workers, compressors, link=link, allgather_link=allgather_link, fusion=fusion)
    report = as_dict if fv.json else as_text
    text = report(fv.profile, profile, workers, link, allgather_link, fusion, results)
    print(json.dumps(text, indent=1) if fv.json else text, file=out)
