"""The inputs of the analysis tools, measured once and kept as one versioned JSON file:
the model (forward, backward and apply times; each gradient's size and ready time in
backward order), the links (alpha and bandwidth per collective), the vector-add cost
(Zhang et al.'s AddEst, Section 3), the cost of tfcomp's exchange's finite check per
size, and each compressor's encode and decode time per size and payload per gradient
(Agarwal et al., Appendices B and C)."""
import dataclasses
import json
import math
import os
import pathlib
from typing import Dict, Optional, Tuple

from tfcomp.costs.checks import check_number, is_number
from tfcomp.costs.network import ALLGATHER, ALLREDUCE, COLLECTIVES, HALF, Link, Transfer
from tfcomp.costs.tables import SizeTable
from tfcomp.plan.file import GPU_SUFFIX

FORMAT = "tfcomp.analysis.profile"  # what a saved profile says it is (unchanged by the module's move)
VERSION = 1


@dataclasses.dataclass(frozen=True)
class GradientProfile:
    name: str
    nbytes: float
    ready_s: float  # seconds after the backward pass began


@dataclasses.dataclass(frozen=True)
class ModelProfile:
    """One training step on one worker; gradients in backward order."""
    name: str
    forward_s: float
    backward_s: float
    apply_s: float
    gradients: Tuple[GradientProfile, ...]

    def __post_init__(self):
        object.__setattr__(self, "gradients", tuple(self.gradients))
        for what in ("forward_s", "apply_s"):
            check_number(getattr(self, what), f"model {what} (seconds)")
        check_number(self.backward_s, "model backward_s (seconds)", positive=True)
        if not self.gradients:
            raise ValueError("model profile has no gradients")
        seen, previous = set(), 0.0
        for g in self.gradients:
            if g.name in seen:
                raise ValueError(f"gradient {g.name!r} appears twice in the model profile")
            seen.add(g.name)
            check_number(g.nbytes, f"gradient {g.name!r} bytes", positive=True)
            check_number(g.ready_s, f"gradient {g.name!r} ready_s (seconds)")
            if g.ready_s < previous:
                raise ValueError(f"gradient {g.name!r} is ready at {g.ready_s} s, before the one listed before "
                                 f"it ({previous} s): gradients must be listed in backward order")
            if g.ready_s > self.backward_s:
                raise ValueError(f"gradient {g.name!r} is ready at {g.ready_s} s, after the backward pass "
                                 f"ends ({self.backward_s} s)")
            previous = g.ready_s

    def ready_at_backward_end(self):
        """This profile with every gradient ready when the backward pass ends: what an
        exchange sees that gets the gradients all at once (Keras' model.fit hands them to
        the optimizer together), so none of its communication hides behind backward."""
        return dataclasses.replace(self, gradients=[dataclasses.replace(g, ready_s=self.backward_s)
                                                    for g in self.gradients])

    @property
    def total_bytes(self):
        return sum(g.nbytes for g in self.gradients)

    @property
    def single_step_s(self):
        """One worker's step with no communication: T in Zhang's scaling factor."""
        return self.forward_s + self.backward_s + self.apply_s

    def check_same_model(self, gradients):
        """Raises ValueError unless gradients ((name, bytes) pairs in backward order) are this
        profile's: a profile from another model predicts nothing about this one."""
        theirs = [(str(name), float(nbytes)) for name, nbytes in gradients]
        ours = [(g.name, float(g.nbytes)) for g in self.gradients]
        if theirs == ours:
            return
        if len(theirs) != len(ours):
            detail = f"it has {len(ours)} gradients, this model {len(theirs)}"
        else:
            i = next(i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b)
            detail = f"gradient {i} is {ours[i][0]!r} ({ours[i][1]:.0f} bytes) there, {theirs[i][0]!r} " \
                     f"({theirs[i][1]:.0f} bytes) here"
        raise ValueError(f"the profile is of model {self.name!r}, not this one: {detail}; "
                         "profile this model first")


@dataclasses.dataclass(frozen=True)
class CompressorProfile:
    """A compressor's measured costs: encode and decode seconds per tensor size, and what
    it sends per step for each gradient (one Transfer a round; PowerSGD has two).

    A payload that is allgathered comes back once per worker, and decoding it handles
    every worker's copy (Agarwal et al. note SignSGD's decode is linear in the workers):
    decode_workers is how many copies the decode table's times decoded (the worker
    count it was measured at), decode_per_worker the seconds each further copy adds,
    per tensor size (measured at a second count; None: the whole decode taken as
    per-copy, decode / decode_workers). Profiles recorded before tfcomp measured it
    have neither, and their decode is taken as it was measured at any worker count."""
    name: str
    encode: SizeTable
    decode: SizeTable
    payloads: Dict[str, Tuple[Transfer, ...]]
    decode_workers: Optional[int] = None
    decode_per_worker: Optional[SizeTable] = None

    def __post_init__(self):
        object.__setattr__(self, "payloads", {k: tuple(v) for k, v in self.payloads.items()})
        if GPU_SUFFIX in self.name and not self.name.endswith(GPU_SUFFIX):
            raise ValueError(f"compressor {self.name!r}: {GPU_SUFFIX!r} may only end a name (the compressor "
                             "as measured on the GPU)")
        if self.decode_workers is not None:
            if not is_number(self.decode_workers) or self.decode_workers < 1 or \
                    self.decode_workers != int(self.decode_workers):
                raise ValueError(f"compressor {self.name!r}: decode_workers must be an integer >= 1, got "
                                 f"{self.decode_workers!r}")
            object.__setattr__(self, "decode_workers", int(self.decode_workers))
        elif self.decode_per_worker is not None:
            raise ValueError(f"compressor {self.name!r}: decode_per_worker needs decode_workers (the worker count "
                             "the decode table was measured at)")

    def decode_s(self, nbytes, transfers, workers=None):
        """Seconds to decode a gradient of nbytes sent as transfers, on `workers` workers
        (None: as measured): linear in the workers where a transfer is an allgather
        and the profile says at how many workers decode was measured; never below 0.
        The tables' isotonic fits (SizeTable.monotone)."""
        measured = self.decode.monotone().seconds_at(nbytes)
        k0 = self.decode_workers
        if workers is None or k0 is None or workers == k0 or \
                not any(t.collective == ALLGATHER for t in transfers):
            return measured
        per_worker = (measured / k0 if self.decode_per_worker is None
                      else self.decode_per_worker.monotone().seconds_at(nbytes))
        return max(0.0, measured + (workers - k0) * per_worker)

    @property
    def device(self):
        """'gpu' for a compressor measured on the GPU that trains (named 'spec@gpu'), else 'cpu'."""
        return "gpu" if self.name.endswith(GPU_SUFFIX) else "cpu"

    @property
    def spec(self):
        """The compressor's spec without its device ('DGC:ratio=0.01')."""
        return self.name[:-len(GPU_SUFFIX)] if self.name.endswith(GPU_SUFFIX) else self.name


@dataclasses.dataclass(frozen=True)
class Profile:
    model: ModelProfile
    allreduce: Link
    allgather: Link
    addest: SizeTable
    compressors: Dict[str, CompressorProfile] = dataclasses.field(default_factory=dict)
    # Seconds to check a gradient of a size for NaN and Inf (tfcomp's exchange does, every step);
    # None in profiles recorded before tfcomp measured it.
    finite_scan: Optional[SizeTable] = None
    # Seconds an allreduce of float16 payloads costs beyond one of float32, per float16 bytes, measured
    # with the engine's collectives (link_probe.half_extra); None in profiles recorded before.
    half_allreduce_extra: Optional[SizeTable] = None

    def __post_init__(self):
        names = {g.name for g in self.model.gradients}
        for c in self.compressors.values():
            if set(c.payloads) != names:
                missing, extra = sorted(names - set(c.payloads)), sorted(set(c.payloads) - names)
                raise ValueError(f"compressor {c.name!r}: its payloads name other gradients than the model "
                                 f"{self.model.name!r} (missing {missing[:5]}, unknown {extra[:5]}); "
                                 "was it profiled on another model?")

    def compressor(self, name):
        if name not in self.compressors:
            raise ValueError(f"the profile has no measurements for compressor {name!r} "
                             f"(it has: {sorted(self.compressors) or 'none'}); profile that compressor first")
        return self.compressors[name]

    def link(self, collective):
        return {ALLREDUCE: self.allreduce, ALLGATHER: self.allgather}[collective]

    def to_dict(self):
        return {
            "format": FORMAT, "version": VERSION,
            "model": {"name": self.model.name, "forward_s": self.model.forward_s,
                      "backward_s": self.model.backward_s, "apply_s": self.model.apply_s,
                      "gradients": [{"name": g.name, "bytes": g.nbytes, "ready_s": g.ready_s}
                                    for g in self.model.gradients]},
            "links": {c: {"alpha_s": self.link(c).alpha_s,
                          "bandwidth_bytes_per_s": self.link(c).bandwidth_bytes_per_s} for c in COLLECTIVES},
            "addest": self.addest.points(),
            **({"finite_scan": self.finite_scan.points()} if self.finite_scan is not None else {}),
            **({"half_allreduce_extra": self.half_allreduce_extra.points()}
               if self.half_allreduce_extra is not None else {}),
            "compressors": {name: {"encode": c.encode.points(), "decode": c.decode.points(),
                                   **({"decode_workers": c.decode_workers} if c.decode_workers is not None else {}),
                                   **({"decode_per_worker": c.decode_per_worker.points()}
                                      if c.decode_per_worker is not None else {}),
                                   "payloads": {g: [[t.collective, t.nbytes, *([HALF] if t.half else [])]
                                                    for t in transfers]
                                                for g, transfers in c.payloads.items()}}
                            for name, c in self.compressors.items()},
        }

    @classmethod
    def from_dict(cls, data):
        return _parse(data)

    def averaged(self, mean, order=None):
        """This profile with every measured number replaced by its mean over the workers
        (mean(list of floats) -> list of floats, one collective that every worker joins
        with a profile of the same model and compressors): what all workers then plan
        from alike. Gradients are ordered by ready time, then by order (their names as
        the exchange receives them; default: by name), the same on every worker."""
        data = self.to_dict()
        data["model"]["gradients"].sort(key=lambda g: g["name"])  # the workers' orders may differ
        leaves = []
        _numbers(data, leaves.append)
        averaged = iter(mean([float(x) for x in leaves]))
        data = _numbers(data, lambda _: next(averaged))
        rank = {name: i for i, name in enumerate(order or [])}
        data["model"]["gradients"].sort(key=lambda g: (g["ready_s"], rank.get(g["name"], len(rank)), g["name"]))
        data["version"] = VERSION
        return _parse(data)

    def save(self, path):
        """Written to a temporary file beside path and renamed into place: a reader never
        sees half a profile."""
        path = pathlib.Path(path)
        temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        with open(temporary, "w", encoding="utf-8") as f:
            json.dump(self.to_dict(), f, indent=1)
            f.write("\n")
        os.replace(temporary, path)

    @classmethod
    def load(cls, path):
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}: not a JSON profile ({e})") from None
        try:
            return _parse(data)
        except ValueError as e:
            raise ValueError(f"{path}: {e}") from None


def _numbers(data, visit):
    """data with each number (not a bool) replaced by visit(number), in a fixed order:
    dict keys sorted, lists in order."""
    if isinstance(data, dict):
        return {k: _numbers(data[k], visit) for k in sorted(data)}
    if isinstance(data, list):
        return [_numbers(x, visit) for x in data]
    if isinstance(data, (int, float)) and not isinstance(data, bool):
        return visit(data)
    return data


def _parse(data):
    """A Profile from the dict to_dict writes; ValueError naming the first bad field."""
    top = _Fields(data, "profile")
    if top.get("format", str) != FORMAT:
        raise ValueError(f"not a tfcomp analysis profile (format {data.get('format')!r}, expected {FORMAT!r})")
    version = top.get("version", int)
    if version != VERSION:
        raise ValueError(f"profile version {version} is not supported: this tfcomp reads version {VERSION}")
    model = top.sub("model")
    gradients = []
    for i, g in enumerate(model.get("gradients", list)):
        g = _Fields(g, f"model.gradients[{i}]")
        gradients.append(GradientProfile(g.get("name", str), g.number("bytes"), g.number("ready_s")))
    links = top.sub("links")
    parsed_links = {}
    for c in COLLECTIVES:
        link = links.sub(c)
        parsed_links[c] = link.build(Link, link.number("alpha_s"), link.number("bandwidth_bytes_per_s"))
    compressors = {}
    for name, c in top.sub("compressors").data.items():
        c = _Fields(c, f"compressors.{name}")
        payloads = {}
        for grad, rounds in c.sub("payloads").data.items():
            where = f"compressors.{name}.payloads.{grad}"
            if not isinstance(rounds, list) or not rounds:
                raise ValueError(f"{where}: expected a list of [collective, bytes] rounds, got {rounds!r}")
            payloads[grad] = tuple(_transfer(r, f"{where}[{j}]") for j, r in enumerate(rounds))
        decode_workers = c.number("decode_workers") if "decode_workers" in c.data else None
        per_worker = c.table("decode_per_worker") if "decode_per_worker" in c.data else None
        compressors[name] = c.build(CompressorProfile, name, c.table("encode"), c.table("decode"), payloads,
                                    decode_workers, per_worker)
    return top.build(Profile, model.build(ModelProfile, model.get("name", str), model.number("forward_s"),
                                          model.number("backward_s"), model.number("apply_s"), gradients),
                     parsed_links[ALLREDUCE], parsed_links[ALLGATHER], top.table("addest"), compressors,
                     top.table("finite_scan") if "finite_scan" in data else None,
                     top.table("half_allreduce_extra") if "half_allreduce_extra" in data else None)


def _transfer(pair, where):
    """[collective, bytes], or [allreduce, bytes, float16] for float16 payloads."""
    if (not isinstance(pair, list) or len(pair) not in (2, 3) or pair[0] not in COLLECTIVES
            or not is_number(pair[1]) or (len(pair) == 3 and (pair[2] != HALF or pair[0] != ALLREDUCE))):
        raise ValueError(f"{where}: expected [collective, bytes] with collective one of {COLLECTIVES}, or "
                         f"[{ALLREDUCE!r}, bytes, {HALF!r}], got {pair!r}")
    return Transfer(pair[0], pair[1], half=len(pair) == 3)


class _Fields:
    """A JSON object being read, with its place in the file for error messages."""

    def __init__(self, data, where):
        if not isinstance(data, dict):
            raise ValueError(f"{where}: expected a JSON object, got {type(data).__name__}")
        self.data, self.where = data, where

    def get(self, key, kind):
        if key not in self.data:
            raise ValueError(f"{self.where}: missing field {key!r}")
        value = self.data[key]
        if not isinstance(value, kind) or isinstance(value, bool):
            expected = "a number" if kind == (int, float) else kind.__name__
            raise ValueError(f"{self.where}.{key}: expected {expected}, got {value!r}")
        return value

    def number(self, key):
        value = self.get(key, (int, float))
        if not math.isfinite(value):
            raise ValueError(f"{self.where}.{key}: expected a finite number, got {value!r}")
        return value

    def sub(self, key):
        return _Fields(self.get(key, dict), f"{self.where}.{key}")

    def table(self, key):
        return SizeTable(self.get(key, list), f"{self.where}.{key}")

    def build(self, cls, *args):
        """cls(*args), its ValueError prefixed with where it stands in the file."""
        try:
            return cls(*args)
        except ValueError as e:
            raise ValueError(f"{self.where}: {e}") from None

