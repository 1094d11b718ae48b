"""Chrome trace-event JSON (loads in ui.perfetto.dev and chrome://tracing): one
process per worker, one track per phase, a complete event ("ph": "X", ts and
dur in microseconds) per segment, and an instant event per gradient when it
became ready. A step recorded as it runs (Timeline(serialize=False)) adds a
track per bucket of the exchange: each collective from its payloads being
ready to its results being ready, overlapping the backward pass where it does. Timestamps are tf.timestamp()'s wall clock, so the files of
workers on one host (or on hosts with synchronised clocks) line up when merged.

    python -m tfcomp.callbacks.merge merged.json timeline/*.trace.json
"""
import json

from tfcomp.callbacks.segments import PHASES

STEP_TRACK = 0  # one event per step, above the phases
GRADIENT_TRACK = len(PHASES) + 1


def _us(seconds):
    return round(seconds * 1e6, 3)


def events(records, pid, worker):
    """The trace events of one worker's StepRecords."""
    tracks = {STEP_TRACK: "step", **{i + 1: p for i, p in enumerate(PHASES)}, GRADIENT_TRACK: "gradient ready"}
    out = [{"ph": "M", "pid": pid, "tid": 0, "name": "process_name", "args": {"name": worker}},
           {"ph": "M", "pid": pid, "tid": 0, "name": "process_sort_index", "args": {"sort_index": pid}}]
    for tid, name in tracks.items():
        out.append({"ph": "M", "pid": pid, "tid": tid, "name": "thread_name", "args": {"name": name}})
        out.append({"ph": "M", "pid": pid, "tid": tid, "name": "thread_sort_index", "args": {"sort_index": tid}})
    buckets = sorted({c["bucket"] for r in records for c in r.collectives if c["bucket"] is not None})
    for bucket in [None, *buckets] if any(r.collectives for r in records) else []:
        tid, name = _collective_track(bucket)
        out.append({"ph": "M", "pid": pid, "tid": tid, "name": "thread_name", "args": {"name": name}})
        out.append({"ph": "M", "pid": pid, "tid": tid, "name": "thread_sort_index", "args": {"sort_index": tid}})
    for record in records:
        if not record.segments:
            continue
        for c in record.collectives:
            if c["begin"] is None or c["end"] is None:
                continue
            ts = _us(c["begin"])
            out.append({"ph": "X", "pid": pid, "tid": _collective_track(c["bucket"])[0],
                        "name": f"{c['collective']}#{c['index']}", "cat": "collective", "ts": ts,
                        "dur": round(_us(c["end"]) - ts, 3), "args": {"step": record.step, **c}})
        start = _us(record.start)
        out.append({"ph": "X", "pid": pid, "tid": STEP_TRACK, "name": f"step {record.step}", "cat": "step",
                    "ts": start, "dur": round(_us(record.segments[-1].end) - start, 3),
                    "args": {"step": record.step}})
        for seg in record.segments:
            ts = _us(seg.start)
            out.append({"ph": "X", "pid": pid, "tid": PHASES.index(seg.phase) + 1, "name": seg.name,
                        "cat": "phase", "ts": ts, "dur": round(_us(seg.end) - ts, 3),
                        "args": {"step": record.step, "phase": seg.phase, **seg.args}})
        for tensor in record.tensors:
            args = {"step": record.step, **{k: v for k, v in tensor.items() if k != "ready"}}
            if tensor["ready"] is not None:
                out.append({"ph": "i", "s": "t", "pid": pid, "tid": GRADIENT_TRACK, "name": tensor["name"],
                            "cat": "gradient", "ts": _us(tensor["ready"]), "args": args})
    return out


def _collective_track(bucket):
    """(tid, name) of a bucket's collectives (bucket None: the exchange's own, the non-finite flag)."""
    if bucket is None:
        return GRADIENT_TRACK + 1, "exchange collectives"
    return GRADIENT_TRACK + 2 + bucket, f"bucket {bucket} collectives"


def document(records, pid, worker):
    """The whole JSON object for one worker, with the per-tensor sizes and plan in otherData."""
    tensors = records[-1].tensors if records else []
    return {"traceEvents": events(records, pid, worker), "displayTimeUnit": "ms",
            "otherData": {"worker": worker, "clock": "tf.timestamp(), microseconds since the epoch",
                          "phases": list(PHASES),
                          "tensors": [{k: v for k, v in t.items() if k not in ("ready", "order")} for t in tensors]}}


def write(path, records, pid, worker):
    with open(path, "w") as f:
        json.dump(document(records, pid, worker), f)


def merge(out_path, paths):
    """One trace holding every worker's events (each file keeps its own pid)."""
    merged = {"traceEvents": [], "displayTimeUnit": "ms", "otherData": {"workers": []}}
    for path in paths:
        with open(path) as f:
            doc = json.load(f)
        merged["traceEvents"].extend(doc["traceEvents"])
        merged["otherData"]["workers"].append(doc.get("otherData", {}))
    with open(out_path, "w") as f:
        json.dump(merged, f)

