"""The compressor specs the benchmarks pass around ('DGC', 'PowerSGD:rank=2': what
tfcomp.compressors.registry.parse_compressor reads, the library's one parser) and what
only the benchmarks add to them: 'auto' (tfcomp.Auto) and 'plan:PATH' (a per-tensor
plan), and plan paths per cell of a grid.

canonical() and compressor() read a spec through the library's registry, which imports
TensorFlow on their first call; the rest is plain string handling."""

AUTO = "auto"  # tfcomp.Auto() with its default candidates: FP16, DGC and ACPSGD at their defaults
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


def canonical(spec):
    """The spec as the library names the compressor it reads (registry.spec: a bare name is
    the compressor at its defaults, and 'PowerSGD:rank=4' is 'PowerSGD'), so that a profile
    (tfcomp.analysis.measure.codecs) names the compressor the workers run one way. A spec the
    library's parser refuses (no such compressor, a malformed or unknown knob) raises its
    ValueError. A plan ('plan:PATH') and 'auto' are left as they are."""
    if is_plan(spec) or spec == AUTO:
        return spec
    from tfcomp.compressors import registry  # pylint: disable=import-outside-toplevel  (imports TensorFlow)
    return registry.spec(registry.parse_compressor(spec))


def compressor(spec):
    """The compressor a benchmark's workers run for a compressor spec (not a plan, not
    'auto'): the library's parse_compressor."""
    from tfcomp.compressors import registry  # pylint: disable=import-outside-toplevel
    return registry.parse_compressor(spec)
