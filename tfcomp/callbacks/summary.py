"""The CSV summary: one row per step and phase, with the same durations as the
trace's events (summed per phase) and the bytes sent by this worker."""
import csv

COLUMNS = ("worker", "step", "phase", "start_ms", "duration_ms", "bytes", "segments", "step_ms")


def rows(records, worker):
    for record in records:
        if not record.segments:
            continue
        firsts = {}
        for seg in record.segments:
            firsts.setdefault(seg.phase, seg.start)
        for phase, (seconds, nbytes, count) in record.phase_totals().items():
            yield {"worker": worker, "step": record.step, "phase": phase,
                   "start_ms": round(1e3 * (firsts[phase] - record.start), 6),
                   "duration_ms": round(1e3 * seconds, 6), "bytes": nbytes, "segments": count,
                   "step_ms": round(1e3 * record.duration, 6)}


def write(path, records, worker):
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows(records, worker))
