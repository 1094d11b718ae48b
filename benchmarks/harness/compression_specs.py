"""The compressor specs the benchmarks pass around ('DGC', 'PowerSGD:rank=2': what
tfcomp.compressors.registry.parse_compressor reads, the library's one parser) and what
only the benchmarks add to them: the main job's rank and ratio where a spec leaves them
out, 'auto' (tfcomp.Auto) and 'plan:PATH' (a per-tensor plan), and plan paths per cell
of a grid.

explicit() and compressor() read a spec through the library's registry, which imports
TensorFlow on their first call; the rest is plain string handling."""

# The digits MLP and the small models are small: keep 1% rather than the papers' 0.1%, and rank 4.
SPARSE_RATIO = 0.01
RANK = 4
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


def _main_job_knobs(cls):
    """{knob as a spec names it: value} the main job sets where a spec leaves it out."""
    from tfcomp.compressors.lowrank import LowRank  # pylint: disable=import-outside-toplevel
    from tfcomp.compressors.sparse import Sparsifier  # pylint: disable=import-outside-toplevel
    if issubclass(cls, LowRank):
        return {"rank": RANK}
    if issubclass(cls, Sparsifier):
        return {"ratio": SPARSE_RATIO}
    return {}


def explicit(spec):
    """The spec with the main job's rank and ratio made explicit where it leaves them
    out ('PowerSGD' -> 'PowerSGD:rank=4'), so that a profile (tfcomp.analysis.measure.codecs)
    measures the compressor the workers run. A spec the library's parser refuses (no such
    compressor, a malformed or unknown knob) raises its ValueError. A plan ('plan:PATH')
    and 'auto' are left as they are."""
    if is_plan(spec) or spec == AUTO:
        return spec
    from tfcomp.compressors import registry  # pylint: disable=import-outside-toplevel  (imports TensorFlow)
    cls = type(registry.parse_compressor(spec))
    given = {pair.partition("=")[0] for pair in spec.split(":")[1:]}  # parse_compressor has read them
    missing = [f"{knob}={value}" for knob, value in _main_job_knobs(cls).items()
               if not given & {knob, registry.KNOB_ALIASES.get(knob, knob)}]
    return ":".join([spec, *missing])


def compressor(spec):
    """The compressor a benchmark's workers run for a compressor spec (not a plan, not
    'auto'): the library's parse_compressor of explicit(spec)."""
    from tfcomp.compressors import registry  # pylint: disable=import-outside-toplevel
    return registry.parse_compressor(explicit(spec))
