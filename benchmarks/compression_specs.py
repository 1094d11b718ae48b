"""The main job's compressor settings, in the spec form the benchmarks pass around
('DGC', 'PowerSGD:rank=2'), without TensorFlow: the driver processes that
launch workers and read profiles (benchmarks/e2e.py) do not import it."""

# The digits MLP and the small models are small: keep 1% rather than the papers' 0.1%, and rank 4.
SPARSE_RATIO = 0.01
RANK = 4
LOW_RANK = ("PowerSGD", "ACPSGD")  # tfcomp.compressors.lowrank.LowRank's subclasses
SPARSIFIERS = ("TopK", "RandomK", "DGC", "DRAGONN")  # tfcomp.compressors.sparse.Sparsifier's
AUTO = "auto"  # tfcomp.Auto() with its default candidates: the main job's FP16, EFSignSGD, DGC and PowerSGD
PLAN_PREFIX = "plan:"  # 'plan:PATH': the per-tensor plan `python -m tfcomp.analysis plan --output=PATH` wrote


def is_plan(spec):
    return spec.startswith(PLAN_PREFIX)


def plan_path(spec):
    return spec[len(PLAN_PREFIX):]


def for_cluster(spec, model, workers, link):
    """The spec a run's workers get: a plan's PATH may name {model}, {workers} and {link},
    so that one grid runs the plan made for each of its cells."""
    if not is_plan(spec):
        return spec
    try:
        return spec.format(model=model, workers=workers, link=link)
    except (KeyError, IndexError, ValueError) as e:
        raise ValueError(f"{spec!r}: a plan's path may name {{model}}, {{workers}} and {{link}} only ({e})") from None


def explicit(spec):
    """The spec with the main job's rank and ratio made explicit where it leaves them
    out ('PowerSGD' -> 'PowerSGD:rank=4'), so that a profile (tfcomp.analysis.measure.codecs)
    measures the compressor the workers run. A plan ('plan:PATH') and 'auto' are left as they are."""
    if is_plan(spec) or spec == AUTO:
        return spec
    name, *pairs = spec.split(":")
    keys = {pair.partition("=")[0] for pair in pairs}
    if name in LOW_RANK and "rank" not in keys:
        pairs.append(f"rank={RANK}")
    if name in SPARSIFIERS and "ratio" not in keys:
        pairs.append(f"ratio={SPARSE_RATIO}")
    return ":".join([name, *pairs])
