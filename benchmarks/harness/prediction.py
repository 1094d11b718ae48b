"""The analysis tools inside the benchmarks: record a profile on the workers a
benchmark launched (`python -m tfcomp.analysis profile` through
benchmarks/harness/profile_worker.py), and predict a run's step time from it. Nothing
here trains: TensorFlow is loaded only by compression_specs.canonical(), which reads a
compressor's spec through the library's registry."""
import json

from benchmarks.harness import compression_specs
from tfcomp.analysis.model.fusion_policies import CycleFusion
from tfcomp.analysis.model.profile import Profile
from tfcomp.analysis.model.simulator import burst_seconds, simulate_profile

DENSE = "none"


def record_profile(launcher, trace, compressions, path, work_dir, name, link_probe=None, sgd_momentum=None):
    """Runs the profile command on the launcher's workers from a dense run's Timeline
    trace; every compressor of `compressions` (specs) but 'none' is measured, as it runs
    under SGD with sgd_momentum where the model trains with that. Without link_probe (a
    saved probe's path) the workers probe the link with their engine."""
    if not trace.exists():
        raise RuntimeError(f"no Timeline trace of the dense run at {trace}: record one to predict from it")
    path.parent.mkdir(parents=True, exist_ok=True)
    specs = [compression_specs.canonical(c) for c in compressions
             if c not in (DENSE, compression_specs.AUTO) and not compression_specs.is_plan(c)]
    args = [f"--timeline={trace}", f"--compressors={','.join(specs)}", f"--output={path}", f"--name={name}"]
    if link_probe:
        args.append(f"--link_probe={link_probe}")
    if sgd_momentum is not None:
        args.append(f"--sgd_momentum={sgd_momentum}")
    ok, _, log = launcher.run("benchmarks.harness.profile_worker", args, work_dir)
    if not ok:
        raise RuntimeError(f"recording the profile failed: {log}")
    return path


def burst_bytes(link):
    """The token bucket tc tbf gives a shaped link of the harness ('unlimited': none):
    what it lets through at line rate after idle."""
    from tests.cluster import netns_cluster  # pylint: disable=import-outside-toplevel
    return 0.0 if link == "unlimited" else float(netns_cluster.BURST_BYTES)


def predicted_step_ms(profile_path, engine, workers, compression, burst_bytes=0.0):
    """The predicted step time of a run, in ms, from a profile record_profile saved (every
    gradient ready when the backward pass ends, as model.fit hands them over): tfcomp's
    buckets, Horovod's cycle for Horovod's own dense allreduce. None for a compressor the
    profile lacks; a plan ('plan:PATH') is replayed gradient by gradient. burst_bytes: the
    shaped link's token bucket (netns_cluster.BURST_BYTES; 0 for an unshaped one)."""
    if compression == compression_specs.AUTO:
        return None  # it decides while it runs
    profile = Profile.load(profile_path)
    burst_s = burst_seconds(burst_bytes, profile.allreduce)
    if compression_specs.is_plan(compression):
        with open(compression_specs.plan_path(compression), encoding="utf-8") as f:
            choices = json.load(f)["choices"]
        if not set(c for c in choices.values() if c is not None) <= set(profile.compressors):
            return None  # planned from a profile with compressors this one lacks
        return 1e3 * simulate_profile(profile, workers, strategy=choices, burst_s=burst_s,
                                      finite_check=profile.finite_scan is not None).iteration_s
    fusion = CycleFusion() if engine == "horovod" and compression == DENSE else None
    name = None if compression == DENSE else compression_specs.canonical(compression)
    if name is not None and name not in profile.compressors:
        return None  # e.g. a compressor added to a resumed grid after its profile was recorded
    return 1e3 * simulate_profile(profile, workers, compressor=name, fusion=fusion, burst_s=burst_s,
                                  finite_check=name is not None and profile.finite_scan is not None).iteration_s
