"""tfcomp.Plan: a compressor per tensor.

    tfcomp.Plan({"dense_1/kernel:0": tfcomp.PowerSGD(4), "conv*/kernel:0": tfcomp.EFSignSGD(),
                 "embedding*": None}, default=tfcomp.FP16())

Keys are tensor (variable) names or fnmatch patterns, matched case-sensitively,
against the whole name or its end after a "/": Keras 3 names a variable by its
path ("sequential/dense/kernel:0"), which ends in the name Keras 2 gives it
("dense/kernel:0"), so one plan serves both. A key equal to the name (or its
end) wins; otherwise the first pattern that matches, in the order given;
otherwise `default`. None (as a value or the default) sends the
tensor dense. The exchange's eligibility rules still apply: a 1-D, small or
non-floating-point tensor goes dense whatever the plan says.
"""
import collections.abc
import fnmatch
import json

from absl import logging

from tfcomp.compressors.cast import NoCompression
from tfcomp.compressors.registry import parse_compressor, resolve, short_repr
from tfcomp.exchange.hooks import PerTensor
from tfcomp.plan import file as plan_file
from tfcomp.plan import table as plan_table


class Plan(PerTensor):
    """Which compressor each tensor runs with. See the module doc."""

    def __init__(self, choices, default=None):
        if not isinstance(choices, collections.abc.Mapping):
            raise ValueError(f"Plan: choices must be a dict of {{tensor name or pattern: compressor or None}}, "
                             f"got {type(choices).__name__}")
        self._dense = NoCompression()
        self._by_config = {}  # equal compressors share one instance, so they batch and bind alike
        entries = []
        for key, value in choices.items():
            if not isinstance(key, str) or not key:
                raise ValueError(f"Plan: keys must be non-empty strings (tensor names or fnmatch patterns), "
                                 f"got {key!r}")
            entries.append((key, self._compressor(value, f"the value for {key!r}")))
        self._entries = entries
        self._exact = {}
        for key, compressor in entries:
            self._exact.setdefault(key, compressor)
        self.default = self._compressor(default, "default")

    @classmethod
    def load(cls, path):
        """The plan `python -m tfcomp.analysis plan --output=PATH` wrote: every gradient
        the planner chose a compressor for, by its exact name; the rest (and tensors
        the profile did not have) dense."""
        specs = plan_file.read_choices(path)
        on_gpu = {spec for spec in specs.values() if spec.endswith(plan_file.GPU_SUFFIX)}
        if on_gpu and len(on_gpu) < len(set(specs.values())):
            logging.warning("tfcomp: %s offloads some compression to the CPU (Espresso's Algorithm 2); tfcomp's "
                            "exchange compresses every tensor on the device that holds its gradient, so those "
                            "run there too", path)
        parsed = {}
        for spec in set(specs.values()):
            try:
                parsed[spec] = parse_compressor(spec.removesuffix(plan_file.GPU_SUFFIX))
            except ValueError as e:
                raise ValueError(f"Plan.load: {path}: {e}") from None
        return cls({name: parsed[spec] for name, spec in specs.items()})

    def _compressor(self, value, what):
        if value is None:
            return self._dense
        try:
            compressor = resolve(value)
        except ValueError:
            raise ValueError(f"Plan: {what} must be a tfcomp compressor class or instance, or None (dense), "
                             f"got {value!r}") from None
        if isinstance(compressor, NoCompression):
            return self._dense
        key = json.dumps(compressor.config(), sort_keys=True, default=str)
        return self._by_config.setdefault(key, compressor)

    def choose(self, name):
        """The compressor the plan gives tensor `name` (a NoCompression for dense)."""
        for end in _ends(name):
            if end in self._exact:
                return self._exact[end]
        for key, compressor in self._entries:
            if _matches(name, key):
                return compressor
        return self.default

    def compressors(self):
        """Every distinct compressor the plan can choose (dense included), in order."""
        seen = {}
        for compressor in [c for _, c in self._entries] + [self.default]:
            seen.setdefault(id(compressor), compressor)
        return list(seen.values())

    def with_compressors(self, convert):
        """A plan with convert(compressor) in place of every compressor but dense
        (each distinct compressor converted once)."""
        converted = {id(c): c if isinstance(c, NoCompression) else convert(c) for c in self.compressors()}
        plan = Plan.__new__(Plan)
        plan._dense = self._dense  # pylint: disable=protected-access
        plan._by_config = {}  # pylint: disable=protected-access
        plan._entries = [(k, converted[id(c)]) for k, c in self._entries]  # pylint: disable=protected-access
        plan._exact = {k: converted[id(c)] for k, c in self._exact.items()}  # pylint: disable=protected-access
        plan.default = converted[id(self.default)]
        return plan

    def unmatched(self, names):
        """The keys that match none of these tensor names, in order."""
        return [key for key, _ in self._entries if not any(_matches(n, key) for n in names)]

    def config(self):
        """The plan as JSON-able data, in the order given (what workers compare)."""
        return {"name": "Plan", "choices": [[key, _config(c)] for key, c in self._entries],
                "default": _config(self.default)}

    def table(self, shapes_and_dtypes, names, num_workers, **exchange_options):
        """What every tensor runs with and sends, as a text table (exchange_options
        as tfcomp.exchange.step.Exchange's, for its eligibility rules)."""
        return plan_table.table(self, list(shapes_and_dtypes), list(names), num_workers, **exchange_options)

    def __repr__(self):
        choices = ", ".join(f"{key!r}: {_repr(c)}" for key, c in self._entries)
        return f"Plan({{{choices}}}, default={_repr(self.default)})"


def _ends(name):
    """name, then each end of it after a "/" (longest first)."""
    parts = name.split("/")
    return ["/".join(parts[i:]) for i in range(len(parts))]


def _matches(name, key):
    """Whether key (a name or fnmatch pattern) matches name or an end of it after a "/"."""
    return fnmatch.fnmatchcase(name, key) or fnmatch.fnmatchcase(name, "*/" + key)


def _config(compressor):
    return None if isinstance(compressor, NoCompression) else compressor.config()


def _repr(compressor):
    return "None" if isinstance(compressor, NoCompression) else short_repr(compressor)

