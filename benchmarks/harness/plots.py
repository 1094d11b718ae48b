"""Plot shapes several benchmarks share: speed-up bars over dense (the regret reports)
and predicted-against-measured axes (the end-to-end validation, prediction_repeats)."""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # pylint: disable=wrong-import-position


def speedup_bars(path, cells, series, ylabel, colors=None, stars=None, title=None):
    """Per cell (model, link), a bar per configuration of its step speed-up over dense, on
    a log axis with 1x marked. cells: the x labels; series: [(label, one value per cell)];
    stars: (label, one value per cell) drawn as markers over each cell's bars."""
    fig, ax = plt.subplots(figsize=(max(6, 1.5 * len(cells)), 4))
    width = 0.8 / len(series)
    centres = [i + 0.4 - width / 2 for i in range(len(cells))]
    for k, (label, values) in enumerate(series):
        ax.bar([i + k * width for i in range(len(cells))], values, width, label=label,
               color=(colors or {}).get(label))
    if stars is not None:
        ax.scatter(centres, stars[1], marker="*", s=120, color="black", zorder=3, label=stars[0])
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xticks(centres, cells, fontsize=8)
    ax.set_ylabel(ylabel)
    ax.set_yscale("log")
    if title:
        ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def diagonal_axes(ax, low, high, xlabel):
    """Log-log predicted against measured axes from low to high ms: y = x, and ±15% dotted."""
    ax.plot([low, high], [low, high], color="black", linewidth=0.8)
    for k in (0.85, 1.15):
        ax.plot([low, high], [k * low, k * high], color="grey", linestyle=":", linewidth=0.8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("predicted ms/step")
    ax.grid(alpha=0.3, which="both")
