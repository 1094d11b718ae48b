"""The analysis tools against the end-to-end benchmark (benchmarks.e2e --predict):
each run's predicted step time (tfcomp.analysis, from a profile recorded on the
same cluster) beside the measured one, their errors, the crossover bandwidths
both give, and a predicted-against-measured scatter plot."""
import statistics

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # pylint: disable=wrong-import-position

from benchmarks.harness import plots  # pylint: disable=wrong-import-position

DENSE = "none"


def rows(records):
    """The runs with a prediction: their keys, measured and predicted ms, relative error."""
    out = []
    for r in records:
        if r.get("status") == "ok" and r.get("predicted_step_ms"):
            out.append({k: r[k] for k in ("model", "size", "engine", "workers", "link", "compression")}
                       | {"measured_ms": r["step_ms"], "predicted_ms": r["predicted_step_ms"],
                          "error": r["predicted_step_ms"] / r["step_ms"] - 1,
                          "gbps": r["probe"]["allreduce"]["gbps"] if r.get("probe") else None})
    return out


def summary(table):
    """(median |error|, max |error|) over the runs, or None without predictions."""
    if not table:
        return None
    errors = [abs(r["error"]) for r in table]
    return statistics.median(errors), max(errors)


def _by_model(table):
    """A line per model of a grid of several: its runs' median and max |error|."""
    models = {}
    for r in table:
        models.setdefault(f"{r['model']} ({r['size']})", []).append(r)
    if len(models) < 2:
        return []
    lines = []
    for model, runs in models.items():
        median, worst = summary(runs)
        lines.append(f"- {model}, {len(runs)} runs: median |error| {100 * median:.1f}%, max {100 * worst:.1f}%.")
    return lines + [""]


def crossovers(table, crossover):
    """Per (model, size, engine, workers, compression): the bandwidths where the measured
    and the predicted speed-up over dense cross 1 (crossover: [(Gbit/s, speed-up)] ->
    Gbit/s or None), with the grid's bandwidths, for groups over two links or more."""
    groups = {}
    for r in table:
        groups.setdefault((r["model"], r["size"], r["engine"], r["workers"]), []).append(r)
    out = []
    for key, runs in groups.items():
        dense = {r["link"]: r for r in runs if r["compression"] == DENSE}
        for compression in dict.fromkeys(r["compression"] for r in runs if r["compression"] != DENSE):
            mine = [r for r in runs if r["compression"] == compression and r["link"] in dense and r["gbps"]]
            if len(mine) < 2:
                continue
            measured = [(r["gbps"], dense[r["link"]]["measured_ms"] / r["measured_ms"]) for r in mine]
            predicted = [(r["gbps"], dense[r["link"]]["predicted_ms"] / r["predicted_ms"]) for r in mine]
            out.append({"group": key, "compression": compression, "measured": crossover(measured),
                        "predicted": crossover(predicted), "grid_gbps": sorted(r["gbps"] for r in mine)})
    return out


def within_one_grid_step(found):
    """Whether the predicted crossover lies within one step of the grid of the measured one
    (both absent counts as agreeing: compression pays, or loses, on the whole grid)."""
    measured, predicted, grid = found["measured"], found["predicted"], found["grid_gbps"]
    if measured is None or predicted is None:
        return measured is None and predicted is None
    below = max([g for g in grid if g <= measured], default=grid[0])
    above = min([g for g in grid if g >= measured], default=grid[-1])
    lower = max([g for g in grid if g < below], default=0.0)
    upper = min([g for g in grid if g > above], default=float("inf"))
    return lower <= predicted <= upper


def markdown(records, crossover):
    table = rows(records)
    if not table:
        return []
    median, worst = summary(table)
    lines = ["## Predicted against measured step time", "",
             "Predicted by `tfcomp.analysis` (the what-if simulator) from a profile recorded on the same cluster "
             "before the compressed runs: the dense run's Timeline trace, the cluster's link probe, and each "
             "compressor's encode and decode times measured on the workers (`profiles/`).", "",
             f"Over {len(table)} runs: median |error| {100 * median:.1f}%, max {100 * worst:.1f}%.", "",
             *_by_model(table),
             "| model | engine | workers | link | compression | measured ms | predicted ms | error |",
             "|---|---|---|---|---|---|---|---|"]
    for r in table:
        lines.append(f"| {r['model']} ({r['size']}) | {r['engine']} | {r['workers']} | {r['link']} | "
                     f"{r['compression']} | {r['measured_ms']:.1f} | {r['predicted_ms']:.1f} | "
                     f"{100 * r['error']:+.1f}% |")
    found = crossovers(table, crossover)
    if found:
        lines += ["", "| model | engine | workers | compression | measured crossover Gbit/s | predicted | "
                      "within one grid step |", "|---|---|---|---|---|---|---|"]
        for c in found:
            model, size, engine, workers = c["group"]
            show = lambda x: "none in the grid" if x is None else f"{x:.2f}"  # noqa: E731
            lines.append(f"| {model} ({size}) | {engine} | {workers} | {c['compression']} | {show(c['measured'])} "
                         f"| {show(c['predicted'])} | {'yes' if within_one_grid_step(c) else 'no'} |")
    return lines + [""]


def plot(path, records):
    table = rows(records)
    if not table:
        return
    fig, ax = plt.subplots(figsize=(5.5, 5))
    for compression in dict.fromkeys(r["compression"] for r in table):
        mine = [r for r in table if r["compression"] == compression]
        ax.scatter([r["measured_ms"] for r in mine], [r["predicted_ms"] for r in mine], label=compression, s=18)
    low = min(min(r["measured_ms"], r["predicted_ms"]) for r in table) * 0.8
    high = max(max(r["measured_ms"], r["predicted_ms"]) for r in table) * 1.25
    plots.diagonal_axes(ax, low, high, "measured ms/step (median)")
    median, worst = summary(table)
    ax.set_title(f"tfcomp.analysis against the harness: median |error| {100 * median:.1f}%, max {100 * worst:.1f}%\n"
                 "(dotted: ±15%)", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
