"""One recorded step as phases: the marks that ran, in order, cut the step into
contiguous segments, each labelled by the mark that opens it (and, where that
depends on what follows, by the next mark)."""
import collections
import dataclasses

#: The phases, in the order they occur in a step.
PHASES = ("input", "forward_backward", "compress", "communicate", "decompress", "apply", "metrics")


@dataclasses.dataclass
class Segment:
    phase: str
    name: str  # the phase, or for communication the collective ("allreduce#0") or "fuse"/"unfuse"
    start: float  # seconds since the epoch (tf.timestamp)
    end: float
    args: dict = dataclasses.field(default_factory=dict)

    @property
    def duration(self):
        return self.end - self.start


@dataclasses.dataclass
class StepRecord:
    step: int
    segments: list
    tensors: list  # per gradient: name, shape, dtype, bytes, ready (seconds or None), order, plan
    #: Recorded as the step runs (Timeline(serialize=False)): every collective of the exchange,
    #: {bucket, collective, index, bytes, begin (its payloads ready), end (its results ready)}.
    collectives: list = dataclasses.field(default_factory=list)

    @property
    def backward_end(self):
        """When the last gradient was ready (None if no gradient was stamped)."""
        ready = [t["ready"] for t in self.tensors if t["ready"] is not None]
        return max(ready) if ready else None

    @property
    def start(self):
        return self.segments[0].start if self.segments else None

    @property
    def duration(self):
        return self.segments[-1].end - self.segments[0].start if self.segments else 0.0

    def phase_totals(self):
        """{phase: (seconds, bytes, segments)} in PHASES order."""
        totals = {}
        for seg in self.segments:
            seconds, nbytes, count = totals.get(seg.phase, (0.0, 0, 0))
            totals[seg.phase] = (seconds + seg.duration, nbytes + seg.args.get("bytes", 0), count + 1)
        return {p: totals[p] for p in PHASES if p in totals}


def _label(mark, following):
    """(phase, name, args) of the segment that mark opens; following is the next mark's kind."""
    kind, meta = mark.kind, mark.meta
    if kind == "step_begin":
        return "input", "input", {}
    if kind == "data_ready":
        return "forward_backward", "forward_backward", {}
    if kind == "gradients_ready":
        if meta.get("exchange") or following == "exchange_begin":
            return "compress", "compress", {}
        return "communicate", "aggregate", {}  # an engine without tfcomp's exchange (tf.distribute's)
    if kind == "exchange_begin":
        return "compress", "compress", {}
    if kind == "collective_begin":
        args = {k: meta[k] for k in ("collective", "bytes", "buffer_bytes", "workers")}
        return "communicate", f"{meta['collective']}#{meta['index']}", args
    if kind == "collective_end":
        return ("communicate", "fuse" if following == "collective_begin" else "unfuse", {})
    if kind == "round_end":  # the next round's payloads (PowerSGD's Q), or the last decompression
        return ("compress", "compress", {}) if following == "collective_begin" else ("decompress", "decompress", {})
    if kind == "backward_end":  # recorded as it runs: the exchange's work left once backward is done
        return "communicate", "exchange", {}
    if kind == "finite_check":  # the workers' non-finite flag, summed once every bucket is done
        return "communicate", "finite_flag", {}
    if kind in ("exchange_end", "aggregated"):
        return "apply", "apply", {}
    if kind == "applied":
        return "metrics", "metrics", {}
    raise ValueError(f"unknown timeline mark {kind!r}")


_BACKWARD_END = collections.namedtuple("Boundary", "kind meta")("backward_end", {})


def step_record(step, marks):
    """A StepRecord from Recorder.read()'s [(Mark, seconds or None)]."""
    boundaries = [(m, t) for m, t in marks if m.boundary and m.kind != "tensor_ready" and t is not None]
    free = [(m, t) for m, t in marks if not m.boundary and t is not None]
    ready = [t for m, t in free if m.kind == "tensor_ready"]
    if ready and boundaries:  # recorded as it ran: forward_backward ends with the last gradient
        end = max(ready)
        at = next((i for i, (_, t) in enumerate(boundaries) if t > end), len(boundaries))
        if 0 < at < len(boundaries):
            boundaries.insert(at, (_BACKWARD_END, end))
    segments = []
    for (mark, start), (following, end) in zip(boundaries, boundaries[1:]):
        phase, name, args = _label(mark, following.kind)
        last = segments[-1] if segments else None
        if last is not None and (last.phase, last.name) == (phase, name) and not args and not last.args:
            last.end = end
        else:
            segments.append(Segment(phase, name, start, end, args))
    plan = {}
    for mark, _ in marks:
        plan.update(mark.meta.get("plan") or {})
    tensors = [dict(m.meta, ready=t, **({"plan": plan[m.meta["name"]]} if m.meta["name"] in plan else {}))
               for m, t in marks if m.kind == "tensor_ready"]
    ready = sorted((t["ready"], i) for i, t in enumerate(tensors) if t["ready"] is not None)
    for order, (_, i) in enumerate(ready):
        tensors[i]["order"] = order
    ends = {m.meta["index"]: t for m, t in free if m.kind == "collective_end"}
    collectives = [dict(m.meta, begin=t, end=ends.get(m.meta["index"]))
                   for m, t in free if m.kind == "collective_begin"]
    return StepRecord(step, segments, tensors, collectives)
