"""One plot shape the regret reports share: per cell (model, link), a bar per
configuration of its step speed-up over dense, on a log axis with 1x marked."""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # pylint: disable=wrong-import-position


def plot(path, cells, series, ylabel, colors=None, stars=None, title=None):
    """cells: the x labels; series: [(label, one value per cell)]; stars: (label, one
    value per cell) drawn as markers over each cell's bars."""
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
