"""The PNG: time per phase per step, stacked, for one worker."""
import statistics

from tfcomp.callbacks.segments import PHASES

COLORS = {"input": "#9e9e9e", "forward_backward": "#4c72b0", "compress": "#dd8452",
          "communicate": "#c44e52", "decompress": "#8172b3", "apply": "#55a868", "metrics": "#ccb974"}


def write(path, records, worker):
    # The object-oriented API: no pyplot, so no global backend or figure state.
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # pylint: disable=import-outside-toplevel
    from matplotlib.figure import Figure  # pylint: disable=import-outside-toplevel

    records = [r for r in records if r.segments]
    steps = [r.step for r in records]
    totals = [r.phase_totals() for r in records]
    as_it_ran = records[-1] if records and records[-1].collectives else None
    figure = Figure(figsize=(10, 8 if as_it_ran else 4.5), dpi=100)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot(2 if as_it_ran else 1, 1, 1)
    bottom = [0.0] * len(records)
    for phase in PHASES:
        heights = [1e3 * t.get(phase, (0.0,))[0] for t in totals]
        if not any(heights):
            continue
        median = statistics.median(heights)
        axes.bar(steps, heights, bottom=bottom, width=0.85, color=COLORS[phase],
                 label=f"{phase} (median {median:.2f} ms)")
        bottom = [b + h for b, h in zip(bottom, heights)]
    median_step = statistics.median(bottom) if bottom else 0.0
    axes.set_title(f"{worker}: time per phase per step (median step {median_step:.2f} ms)")
    axes.set_xlabel("step")
    axes.set_ylabel("ms")
    if records:
        axes.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    if as_it_ran:
        _buckets(figure.add_subplot(2, 1, 2), as_it_ran)
    figure.tight_layout()
    figure.savefig(path)


def _buckets(axes, record):
    """A step recorded as it ran: when each gradient was ready, and each bucket's collectives
    (from payloads ready to results ready), in ms since the step began."""
    start = record.start
    ready = [1e3 * (t["ready"] - start) for t in record.tensors if t["ready"] is not None]
    axes.scatter(ready, [0] * len(ready), marker="|", s=200, color=COLORS["forward_backward"], label="gradient ready")
    buckets = sorted({c["bucket"] for c in record.collectives if c["bucket"] is not None})
    rows = {b: i + 1 for i, b in enumerate(buckets)}
    rows[None] = len(buckets) + 1
    for c in record.collectives:
        if c["begin"] is not None and c["end"] is not None:
            axes.barh(rows[c["bucket"]], 1e3 * (c["end"] - c["begin"]), left=1e3 * (c["begin"] - start), height=0.6,
                      color=COLORS["compress"] if c["collective"] == "allgather" else COLORS["communicate"])
    if record.backward_end is not None:
        axes.axvline(1e3 * (record.backward_end - start), color="black", lw=0.8, label="backward ends")
    axes.set_yticks([0, *rows.values()], ["gradients", *[f"bucket {b}" for b in buckets], "finite flag"])
    axes.set_ylim(-0.7, len(rows) + 0.7)
    axes.invert_yaxis()
    axes.set_xlabel("ms since the step began")
    axes.set_title(f"step {record.step} as it ran: each bucket's collectives (allgather orange, allreduce red)")
    axes.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
