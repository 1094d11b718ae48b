"""`python -m tfcomp.analysis plan`: Espresso's per-tensor strategy for a saved profile
(planner.plan), printed as a table with its predicted step time next to dense, every
single compressor and the upper bound; --output saves it as JSON, which
tfcomp.Plan.load turns into the exchange's plan."""
import json

from absl import flags

from tfcomp.analysis.cli import options as opts
from tfcomp.analysis.model.links import links
from tfcomp.analysis.model import planner

SUMMARY = "Espresso's per-tensor compression plan, with its predicted step time beside every single compressor"


def define_flags(fv):
    opts.define_profile_flag(fv)
    opts.define_workers_flag(fv)
    flags.DEFINE_list("compressors", None,
                      "Compressors the plan may use, comma-separated, each one the profile has measured (a name "
                      "without settings stands for the one variant measured); "
                      "default: every one it has.", flag_values=fv)
    opts.define_link_flags(fv)
    flags.DEFINE_bool("offload", True, "Search CPU offloading of GPU-compressed gradients (Espresso's "
                      "Algorithm 2) where the profile has a compressor measured on both devices.", flag_values=fv)
    flags.DEFINE_bool("all_tensors", False, "List every gradient, the dense ones too (default: the compressed "
                      "ones, and the dense ones counted).", flag_values=fv)
    flags.DEFINE_string("output", None, "Also write the plan as JSON here (tfcomp.Plan.load reads it).",
                        flag_values=fv)
    flags.DEFINE_bool("json", False, "Print the plan as JSON instead of a table.", flag_values=fv)


def as_text(path, profile, result, link, allgather_link, fusion, all_tensors=False):
    model = profile.model
    lines = [f"{model.name} ({path}: {len(model.gradients)} gradients, {model.total_bytes / opts.MIB:.1f} MiB), "
             f"{result.workers} workers",
             f"allreduce: {opts.describe_link(link)}; allgather: {opts.describe_link(allgather_link)}",
             f"fusion: {opts.describe_fusion(fusion)}", ""]
    width = max([len("gradient"), *(len(name) for name, _, _ in result.gradients)])
    choice_width = max([len("dense"), *(len(c) for c in result.choices.values() if c is not None)])
    lines.append(f"{'gradient':{width}}  {'MiB':>8}  {'ready ms':>8}  {'choice':{choice_width}}  {'saves ms':>8}")
    dense_count, dense_bytes = 0, 0.0
    for name, nbytes, ready in result.gradients:
        choice = result.choices[name]
        if choice is None and not all_tensors:
            dense_count, dense_bytes = dense_count + 1, dense_bytes + nbytes
            continue
        saving = f"{result.savings[name] * 1e3:8.3f}" if name in result.savings else f"{'':8}"
        lines.append(f"{name:{width}}  {nbytes / opts.MIB:8.3f}  {ready * 1e3:8.2f}  "
                     f"{choice or 'dense':{choice_width}}  {saving}")
    if dense_count:
        lines.append(f"... and {dense_count} gradients sent dense ({dense_bytes / opts.MIB:.2f} MiB); "
                     "--all_tensors lists them")
    lines += ["", "'saves ms': how much slower the step would be with that gradient sent dense instead.", "",
              "predicted step time"]
    rows = [("plan", result.iteration_s), ("dense", result.dense_s), *result.singles.items(),
            ("upper bound", result.upper_bound_s)]
    if result.winner != planner.PLAN:
        rows.insert(1, ("Algorithms 1-2", result.algorithms_s))
    label_width = max(len(label) for label, _ in rows)
    for label, seconds in rows:
        note = "  (compression costing nothing)" if label == "upper bound" else ""
        lines.append(f"  {label:{label_width}}  {seconds * 1e3:9.2f} ms  {result.dense_s / seconds:6.2f}x dense{note}")
    if result.winner == planner.PLAN:
        chosen = "The plan is Algorithms 1 and 2's strategy, no slower than dense or any single option."
    else:
        chosen = (f"The plan is {result.winner} on every gradient: Algorithms 1 and 2's strategy "
                  f"({result.algorithms_s * 1e3:.2f} ms) replayed slower.")
    lines += ["", chosen,
              f"Planned in {result.planning_s * 1e3:.1f} ms ({result.replays} replays, at most "
              f"{result.replay_bound}): Algorithm 1 replayed {result.evaluations} strategies, starting from "
              f"{result.start}; {len(result.removed)} gradients were left dense as communicated before a bubble. "
              f"{result.offload_note}."]
    return "\n".join(lines)


def run(fv, out):
    workers = opts.check_workers(fv.workers)
    opts.check_positive(fv.bandwidth_gbps, "--bandwidth_gbps", optional=True)
    latency_us = opts.check_latency(fv.latency_us)
    fusion = opts.fusion_policy(fv)
    profile = opts.load_profile(fv.profile)
    if not profile.compressors:
        raise opts.UsageError(f"the profile {fv.profile} has no compressor measured: profile some first "
                              "(python -m tfcomp.analysis profile --compressors=...)")
    candidates = opts.check_compressors(profile, fv.compressors) if fv.compressors is not None else None
    link, allgather_link = links(profile, fv.bandwidth_gbps, latency_us)
    result = planner.plan(profile, workers, candidates, link=link, allgather_link=allgather_link, fusion=fusion,
                          offload=fv.offload)
    if fv.output:
        with open(fv.output, "w", encoding="utf-8") as f:
            json.dump(result.to_dict(), f, indent=1)
            f.write("\n")
    if fv.json:
        print(json.dumps(result.to_dict(), indent=1), file=out)
    else:
        print(as_text(fv.profile, profile, result, link, allgather_link, fusion, fv.all_tensors), file=out)
