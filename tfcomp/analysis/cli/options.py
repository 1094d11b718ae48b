"""The flags predict and whatif share (the profile, the fusion policy, a latency
override) and the checks that turn bad flag values into one-line usage errors."""
import math

from absl import flags

from tfcomp.analysis.model.fusion_policies import HOROVOD_CYCLE_S, HOROVOD_FUSION_BYTES, BucketFusion, CycleFusion
from tfcomp.analysis.model.profile import Profile
from tfcomp.exchange.buckets import DEFAULT_BUCKET_BYTES

MIB = 2**20


class UsageError(Exception):
    """A user's mistake on the command line: one line on stderr and exit status 1, no
    traceback (absl's app.UsageError without importing absl.app, which takes pdb along)."""


def define_profile_flag(fv):
    flags.DEFINE_string("profile", None, "Required. Path of a saved tfcomp.analysis profile (JSON, Profile.save).",
                        flag_values=fv)


def define_workers_flag(fv):
    flags.DEFINE_integer("workers", None, "Required. Number of workers (an integer >= 1).", flag_values=fv)


def define_link_flags(fv):
    """--bandwidth_gbps (one bandwidth for every collective) and the network flags."""
    flags.DEFINE_float("bandwidth_gbps", None,
                       "Bandwidth of every collective in Gbit/s, replacing the profile's measured ones; "
                       "default: the measured bandwidth of each collective.", flag_values=fv)
    define_network_flags(fv)


def define_network_flags(fv):
    """The latency override and the fusion policy."""
    flags.DEFINE_float("latency_us", None,
                       "Latency (alpha) of every collective in microseconds, replacing the profile's measured "
                       "ones; default: the measured latency of each collective.", flag_values=fv)
    flags.DEFINE_enum("fusion", "buckets", ["buckets", "horovod"],
                      "When gradients leave for the collectives: 'buckets' is tfcomp's exchange (consecutive "
                      "gradients in buckets of --bucket_bytes, each sent when its last gradient is ready); "
                      "'horovod' is Horovod's cycle (every --cycle_ms, the gradients ready by then, in buffers "
                      "of --bucket_bytes).", flag_values=fv)
    flags.DEFINE_float("bucket_bytes", None,
                       f"Bucket size in bytes: default {DEFAULT_BUCKET_BYTES / MIB:.0f} MiB for --fusion=buckets, "
                       f"{HOROVOD_FUSION_BYTES / MIB:.0f} MiB (Horovod's fusion threshold) for --fusion=horovod.",
                       flag_values=fv)
    flags.DEFINE_float("cycle_ms", HOROVOD_CYCLE_S * 1e3, "Horovod's cycle time in ms (--fusion=horovod only).",
                       flag_values=fv)


def load_profile(path):
    """The profile at path, or a UsageError saying why it cannot be read."""
    if not path:
        raise UsageError("--profile is required: the path of a saved profile (Profile.save)")
    try:
        return Profile.load(path)
    except OSError as e:
        raise UsageError(f"cannot read profile {path}: {e.strerror or e}") from None
    except ValueError as e:
        raise UsageError(str(e)) from None


def fusion_policy(fv):
    """The fusion policy the flags name."""
    check_positive(fv.bucket_bytes, "--bucket_bytes", optional=True)
    if fv.fusion == "buckets":
        return BucketFusion(fv.bucket_bytes or DEFAULT_BUCKET_BYTES)
    check_positive(fv.cycle_ms, "--cycle_ms")
    return CycleFusion(fv.cycle_ms / 1e3, fv.bucket_bytes or HOROVOD_FUSION_BYTES)


def describe_fusion(policy):
    if isinstance(policy, BucketFusion):
        return f"tfcomp buckets of {policy.bucket_bytes / MIB:.3g} MiB"
    return f"Horovod cycle of {policy.cycle_s * 1e3:.3g} ms, buffers of {policy.buffer_bytes / MIB:.3g} MiB"


def check_positive(value, flag, *, optional=False):
    if value is None and optional:
        return value
    if value is None or not (math.isfinite(value) and value > 0):
        raise UsageError(f"{flag} must be a finite number > 0, got {value}")
    return value


def check_latency(latency_us):
    if latency_us is not None and not (math.isfinite(latency_us) and latency_us >= 0):
        raise UsageError(f"--latency_us must be a finite number >= 0, got {latency_us}")
    return latency_us


def check_workers(workers, flag="--workers"):
    if workers is None or workers < 1:
        raise UsageError(f"{flag} must be an integer >= 1, got {workers}")
    return workers


def parse_list(values, flag, parse, what):
    """[parse(v) for v in values], or a UsageError naming the flag and the bad item."""
    out = []
    for v in values:
        try:
            out.append(parse(v))
        except ValueError:
            raise UsageError(f"{flag} takes a comma-separated list of {what}, got {v!r}") from None
    if not out:
        raise UsageError(f"{flag} is empty")
    return out


def resolve_compressor(profile, name):
    """The profile's key for name: name itself, or the one measured variant of a compressor
    named without its settings ('PowerSGD' for 'PowerSGD:rank=4'); None when neither."""
    if name in profile.compressors:
        return name
    variants = [key for key in profile.compressors if key.split(":", 1)[0] == name]
    return variants[0] if len(variants) == 1 else None


def check_compressors(profile, names):
    """names, each one the profile has measured (a bare compressor name standing for its one
    measured variant), or a UsageError listing the ones it has."""
    resolved = [resolve_compressor(profile, n) for n in names]
    unknown = [n for n, key in zip(names, resolved) if key is None]
    if unknown:
        raise UsageError(f"the profile has no compressor {', '.join(map(repr, unknown))} "
                         f"(it has: {', '.join(sorted(profile.compressors)) or 'none'})")
    if len(set(resolved)) != len(resolved):
        raise UsageError(f"a compressor is named twice: {', '.join(names)}")
    return resolved


def describe_link(link):
    return f"{link.bandwidth_bytes_per_s * 8 / 1e9:.4g} Gbit/s, {link.alpha_s * 1e6:.3g} us latency"
