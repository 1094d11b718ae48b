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
    figure = Figure(figsize=(10, 4.5), dpi=100)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot(1, 1, 1)
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
    figure.tight_layout()
    figure.savefig(path)
