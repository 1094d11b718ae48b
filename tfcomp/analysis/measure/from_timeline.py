"""A model profile from what tfcomp.callbacks.Timeline recorded: its trace file
(WORKER.trace.json) holds each step's phases and the moment each gradient was
ready. Numpy and json only.

Per step: forward is from the data being ready to the first gradient being ready
(the output layer's, the first the backward pass computes), backward from then to
the last gradient, apply is the optimizer's phase; each gradient's ready time is
counted from the backward pass's start. What a step spends outside these and the
exchange, which no compression changes (the input and metrics phases, and the
time between consecutive steps: Keras' own per-step work), is counted in forward,
so that a predicted step time is a measured one's. The profile keeps the median
of each over the recorded steps, so one slow step does not set it.
"""
import gzip
import json
import statistics

from tfcomp.analysis.model.profile import GradientProfile, ModelProfile


def _steps(events):
    """{step: {"segments": [(phase, start_us, dur_us)], "ready": {name: (ts_us, bytes)}}}"""
    steps = {}
    for e in events:
        args = e.get("args") or {}
        if "step" not in args:
            continue
        step = steps.setdefault(args["step"], {"segments": [], "ready": {}})
        if e.get("ph") == "X" and e.get("cat") == "phase":
            step["segments"].append((args["phase"], e["ts"], e["dur"]))
        elif e.get("ph") == "i" and e.get("cat") == "gradient":
            step["ready"][e["name"]] = (e["ts"], args["bytes"])
    return steps


def _one_step(step):
    """(forward_s, backward_s, apply_s, {name: (ready_s, bytes)}) of one recorded step, or None
    when it lacks the forward-backward phase or gradients; forward includes the input and
    metrics phases."""
    fb = [(start, dur) for phase, start, dur in step["segments"] if phase == "forward_backward"]
    if not fb or not step["ready"]:
        return None
    fb_start, fb_end = fb[0][0], fb[-1][0] + fb[-1][1]
    first = min(ts for ts, _ in step["ready"].values())
    last = max(ts for ts, _ in step["ready"].values())
    backward_end = max(fb_end, last)

    def phase_s(name):
        return 1e-6 * sum(dur for phase, _, dur in step["segments"] if phase == name)

    ready = {name: (1e-6 * (ts - first), nbytes) for name, (ts, nbytes) in step["ready"].items()}
    forward_s = 1e-6 * max(0.0, first - fb_start) + phase_s("input") + phase_s("metrics")
    return forward_s, 1e-6 * (backward_end - first), phase_s("apply"), ready


def _between_steps_s(steps):
    """Median time from one recorded step's last segment to the next step's first, over
    consecutive recorded steps (0 without any)."""
    spans = {n: (min(start for _, start, _ in s["segments"]), max(start + dur for _, start, dur in s["segments"]))
             for n, s in steps.items() if s["segments"]}
    gaps = [1e-6 * max(0.0, spans[n + 1][0] - spans[n][1]) for n in spans if n + 1 in spans]
    return statistics.median(gaps) if gaps else 0.0


def read_trace(path):
    """The parsed JSON of a Timeline trace file: WORKER.trace.json, or that file gzipped
    (WORKER.trace.json.gz, as benchmarks.e2e keeps them). OSError when it cannot be opened,
    ValueError when it is not a trace."""
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        try:
            return json.load(f)
        except (json.JSONDecodeError, OSError, EOFError) as e:
            raise ValueError(f"{path}: not a Timeline trace ({e})") from None


def model_profile(trace, name=None):
    """ModelProfile from a Timeline trace: a path read_trace reads, or its parsed JSON."""
    if not isinstance(trace, dict):
        trace = read_trace(trace)
    if not isinstance(trace.get("traceEvents"), list):
        raise ValueError("not a Timeline trace: no traceEvents (write one with tfcomp.callbacks.Timeline)")
    recorded = _steps(trace["traceEvents"])
    steps = [s for s in (_one_step(step) for step in recorded.values()) if s is not None]
    if not steps:
        raise ValueError("the trace has no step with a forward-backward phase and gradient ready times: "
                         "record at least one training step with tfcomp.callbacks.Timeline")
    names = set(steps[0][3])
    if any(set(s[3]) != names for s in steps):
        raise ValueError("the trace's steps report different gradients; record one model's steps only")
    gradients = []
    for g in names:
        ready = statistics.median(s[3][g][0] for s in steps)
        gradients.append((ready, g, steps[0][3][g][1]))
    backward_s = statistics.median(s[1] for s in steps)
    gradients.sort()
    worker = (trace.get("otherData") or {}).get("worker", "worker")
    forward_s = statistics.median(s[0] for s in steps) + _between_steps_s(recorded)
    return ModelProfile(name or f"timeline of {worker}", forward_s, backward_s,
                        statistics.median(s[2] for s in steps),
                        [GradientProfile(g, float(nbytes), min(ready, backward_s)) for ready, g, nbytes in gradients])
