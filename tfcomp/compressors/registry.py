"""Compressors by name: the one place that turns what a user or a command line names
(a class, an instance, None, or a spec such as "PowerSGD:rank=4") into a compressor,
and a compressor back into its shortest name."""
from tfcomp.compressors.base import KNOB_ALIASES, Compressor
from tfcomp.compressors.cast import FP16, NoCompression
from tfcomp.compressors.lowrank import ACPSGD, PowerSGD
from tfcomp.compressors.sign import EFSignSGD, SignSGD
from tfcomp.compressors.sparse import DGC, DRAGONN, RandomK, TopK

#: Every compressor by its class name, in the order the docs list them.
COMPRESSORS = {cls.__name__: cls for cls in (NoCompression, FP16, SignSGD, EFSignSGD, TopK, RandomK, DGC, DRAGONN,
                                             PowerSGD, ACPSGD)}
# A spec writes a knob by its shortest name ("PowerSGD:rank=2").
_SHORTEST = {knob: alias for alias, knob in KNOB_ALIASES.items() if len(alias) < len(knob)}


def resolve(compression):
    """A Compressor instance from a class, an instance, or None (no compression)."""
    if compression is None:
        return NoCompression()
    if isinstance(compression, type) and issubclass(compression, Compressor):
        return compression()
    if isinstance(compression, Compressor):
        return compression
    raise ValueError(
        f"compression must be a tfcomp compressor class or instance (for example "
        f"tfcomp.EFSignSGD or tfcomp.EFSignSGD()), got {compression!r}")


def parse_compressor(spec):
    """'DGC' or 'PowerSGD:rank=4' (knobs name=value, ':'-separated) -> a tfcomp compressor."""
    name, *pairs = spec.split(":")
    knobs = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"compressor knobs are name=value, got {pair!r} in {spec!r}")
        knobs[KNOB_ALIASES.get(key, key)] = _number_or_text(value)
    cls = COMPRESSORS.get(name)
    if cls is None:
        raise ValueError(f"no tfcomp compressor {name!r} (in {spec!r}); choose from {', '.join(COMPRESSORS)}")
    try:
        return cls(**knobs)
    except TypeError as e:
        raise ValueError(f"{spec!r}: {e}") from None


def _number_or_text(value):
    constants = {"None": None, "True": True, "False": False}
    if value in constants:
        return constants[value]
    for kind in (int, float):
        try:
            return kind(value)
        except ValueError:
            pass
    return value


def _changed(compressor):
    """{argument: value} where the compressor differs from its class's defaults."""
    try:
        defaults = type(compressor)().arguments()
    except (TypeError, ValueError):  # a compressor with required arguments
        defaults = {}
    return {k: v for k, v in compressor.arguments().items() if defaults.get(k, object()) != v}


def spec(compressor):
    """The compressor's name as parse_compressor reads it, with the knobs that differ from its
    defaults: 'PowerSGD' at its defaults (a bare name always means them), 'DGC:ratio=0.01'."""
    knobs = [f"{_SHORTEST.get(k, k)}={v}" for k, v in _changed(compressor).items()]
    return ":".join([type(compressor).__name__, *knobs])


def short_repr(compressor):
    """The compressor's class with the arguments that differ from its defaults: PowerSGD(matrix_approximation_rank=2)."""
    knobs = ", ".join(f"{k}={v!r}" for k, v in _changed(compressor).items())
    return f"{type(compressor).__name__}({knobs})"
