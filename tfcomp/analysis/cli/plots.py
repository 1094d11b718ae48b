"""The what-if sweep's PNG plots, one panel per worker count: the scaling factor
against bandwidth (dense and each compressor), each compressor's speed-up over
dense against bandwidth with its crossovers marked, and, where the sweep has
compression ratios, the scaling factor against the ratio at several bandwidths
(Zhang et al.'s dense-compression what-if). matplotlib's Agg backend, so no display
is needed; imported only when plotting."""
import math
import os

import matplotlib

matplotlib.use("Agg")
from matplotlib import pyplot as plt  # pylint: disable=wrong-import-position
from matplotlib.ticker import FuncFormatter, LogLocator  # pylint: disable=wrong-import-position

from tfcomp.analysis.model.whatif import crossovers  # pylint: disable=wrong-import-position

PANEL_COLUMNS = 4
RATIO_LINES = 6  # bandwidths drawn in the compression-ratio plot, spread over those swept
PLAIN = FuncFormatter(lambda value, _: f"{value:g}")  # 0.1, 1, 10 rather than powers of ten


def plot_sweep(result, out_dir, title):
    """Writes scaling_factor[_computeNx].png and speedup[_computeNx].png (the suffix when
    several compute speed-ups were swept), and compression_ratio[_computeNx].png where the
    sweep has compression ratios, under out_dir; returns their paths."""
    paths = []
    compressors = len(result.compressors)
    for s, speedup in enumerate(result.compute_speedups):
        suffix = "" if len(result.compute_speedups) == 1 else f"_compute{speedup:g}x"
        heading = f"{title}, compute speed-up {speedup:g}x"
        paths.append(_plot(os.path.join(out_dir, f"scaling_factor{suffix}.png"), result, s, heading,
                           "scaling factor", range(1 + compressors), result.scaling_factor))
        if compressors:
            paths.append(_plot(os.path.join(out_dir, f"speedup{suffix}.png"), result, s, heading,
                               "speed-up over dense", range(1, 1 + compressors), result.speedup, marks=True))
        if result.compression_ratios:
            paths.append(_plot_ratios(os.path.join(out_dir, f"compression_ratio{suffix}.png"), result, s,
                                      f"{heading}; dense gradients compressed at no compute cost"))
    return paths


def _plot_ratios(path, result, s, heading):
    """Zhang et al.'s what-if: the scaling factor against the compression ratio (1: dense), a
    line per bandwidth (at most RATIO_LINES of those swept, spread over them), a panel per
    worker count."""
    ratios, factors = result.ratio_curves()
    count = len(result.bandwidths_gbps)
    picks = range(count) if count <= RATIO_LINES else \
        sorted({round(k * (count - 1) / (RATIO_LINES - 1)) for k in range(RATIO_LINES)})
    fig, axes, columns = _panels(len(result.workers))
    for w, workers in enumerate(result.workers):
        ax = axes[w // columns][w % columns]
        for n, b in enumerate(picks):
            ax.plot(ratios, factors[s, :, w, b], marker="o", markersize=3, color=f"C{n}", linewidth=1.5,
                    label=f"{result.bandwidths_gbps[b]:.3g} Gbit/s")
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(PLAIN)
        ax.minorticks_off()
        ax.set_title(f"{workers} workers", fontsize=10)
        ax.grid(True, which="major", alpha=0.3)
        if w + columns >= len(result.workers):
            ax.set_xlabel("compression ratio (1: dense)")
            ax.xaxis.set_tick_params(labelbottom=True)
    return _finish(fig, axes, len(result.workers), "scaling factor", heading, path)


def _panels(count):
    """(figure, axes, columns): one panel per worker count, sharing their axes."""
    columns = min(PANEL_COLUMNS, count)
    rows = math.ceil(count / columns)
    fig, axes = plt.subplots(rows, columns, figsize=(3.6 * columns, 2.9 * rows + 0.8), squeeze=False,
                             sharex=True, sharey=True)
    return fig, axes, columns


def _finish(fig, axes, count, ylabel, title, path):
    """Hides the unused panels, labels, legends and saves the figure; returns path."""
    for ax in axes.flat[count:]:
        ax.set_visible(False)
    for row in axes:
        row[0].set_ylabel(ylabel)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), frameon=False)
    fig.suptitle(title, fontsize=11)
    # fixed margins, in inches: tight_layout took half the plotting time
    width, height = fig.get_size_inches()
    fig.subplots_adjust(left=0.75 / width, right=1 - 0.15 / width, bottom=0.95 / height, top=1 - 0.75 / height,
                        wspace=0.12, hspace=0.3)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _plot(path, result, s, heading, ylabel, names, values, marks=False):
    """One panel per worker count, a line per name; marks: the crossovers and the line y = 1, on a
    log scale so that 2x faster and 2x slower lie as far from it."""
    count = len(result.workers)
    fig, axes, columns = _panels(count)
    colours = {name: f"C{c}" for c, name in enumerate(result.names)}
    for w, workers in enumerate(result.workers):
        ax = axes[w // columns][w % columns]
        for c in names:
            name = result.names[c]
            ax.plot(result.bandwidths_gbps, values[s, c, w], color=colours[name], label=name, linewidth=1.5)
            if marks:
                for gbps, _ in crossovers(result.bandwidths_gbps, values[s, c, w]):
                    ax.axvline(gbps, color=colours[name], linestyle=":", linewidth=1)
                    ax.plot([gbps], [1.0], "o", color=colours[name], markersize=5)
        if marks:
            ax.axhline(1.0, color="black", linewidth=0.8)
            ax.set_yscale("log")
            ax.yaxis.set_major_locator(LogLocator(subs=(1, 2, 5)))  # 0.5, 1, 2: labelled near 1 too
            ax.yaxis.set_major_formatter(PLAIN)
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(PLAIN)
        ax.minorticks_off()  # log axes' minor ticks took two thirds of the plotting time
        ax.set_title(f"{workers} workers", fontsize=10)
        ax.grid(True, which="major", alpha=0.3)
        if w + columns >= count:  # the lowest panel of its column
            ax.set_xlabel("bandwidth, Gbit/s")
            ax.xaxis.set_tick_params(labelbottom=True)
    note = "; dotted: crossover (speed-up = 1)" if marks else ""
    return _finish(fig, axes, count, ylabel, f"{heading}{note}", path)
