"""benchmarks.decode_scaling's report: the prediction against the measurement per
model, compressor and K, the line through the measured points, the markdown and
the plot. No TensorFlow."""
import statistics

import numpy as np

#: What a 2-worker user's profile records, and where it times decode (tfcomp.analysis.measure.codecs'
#: num_workers and SLOPE_WORKERS, 2 and 4 times that): the cells the prediction was fitted to.
PROFILE_WORKERS = 2
FITTED = (PROFILE_WORKERS, 2 * PROFILE_WORKERS, 4 * PROFILE_WORKERS)


def line_fit(ks, seconds):
    """(intercept, slope, R^2) of the least-squares line through (K, seconds)."""
    slope, intercept = np.polyfit(ks, seconds, 1)
    fitted = intercept + slope * np.asarray(ks)
    total = float(np.sum((np.asarray(seconds) - np.mean(seconds)) ** 2))
    return float(intercept), float(slope), 1.0 - float(np.sum((np.asarray(seconds) - fitted) ** 2)) / total \
        if total > 0 else 1.0


def summarize(cells, ks):
    rows = []
    for (model, spec), rounds in cells.items():
        for k in ks:
            measured = [r["measured"][str(k)] for r in rounds]
            predicted = [r["predicted"][str(k)] for r in rounds]
            m, p = statistics.median(measured), statistics.median(predicted)
            rows.append({"model": model, "compressor": spec, "workers": k, "fitted": k in FITTED,
                         "measured_ms": 1e3 * m, "measured_min_ms": 1e3 * min(measured),
                         "measured_max_ms": 1e3 * max(measured), "predicted_ms": 1e3 * p,
                         "predicted_min_ms": 1e3 * min(predicted), "predicted_max_ms": 1e3 * max(predicted),
                         "error": (p - m) / m if m > 0 else None})
    return rows


def fits(cells, ks):
    out = {}
    for (model, spec), rounds in cells.items():
        medians = [statistics.median(r["measured"][str(k)] for r in rounds) for k in ks]
        intercept, slope, r2 = line_fit(ks, medians)
        out[f"{model} {spec}"] = {"intercept_ms": 1e3 * intercept, "per_worker_ms": 1e3 * slope, "r2": r2}
    return out


def markdown(rows, line_fits, meta, ks):
    held = [r for r in rows if not r["fitted"] and r["error"] is not None]
    worst = max(held, key=lambda r: abs(r["error"])) if held else None
    lines = [
        "# Decode at K workers: the 2-worker profile's prediction against a measurement",
        "",
        f"`{meta['command']}`",
        "",
        f"Commit {meta['commit']}; {meta['machine']['date']}; {meta['machine']['cpus']} CPUs "
        f"({meta['machine']['cpu']}); TensorFlow {meta['machine']['tensorflow']}; {meta['rounds']} rounds, "
        f"{meta['elapsed_s']:.0f} s; load average {meta['load'][0]:.1f} before, {meta['load'][1]:.1f} after.",
        "",
        "Decode summed over the model's gradients, on this worker, with K copies of its payload standing in "
        "for the allgather's result. *Predicted*: a profile recorded as `python -m tfcomp.analysis profile` "
        f"records it on {PROFILE_WORKERS} workers (decode timed at {PROFILE_WORKERS} workers' payloads, and "
        f"at {' and '.join(map(str, FITTED[1:]))} for the per-worker slope: the least-squares line through the "
        "three), priced at K by the model "
        "(`CompressorProfile.decode_s`). *Measured*: decode timed at K directly. "
        f"K = {', '.join(map(str, FITTED))} are what the profile was fitted to (marked *); the "
        "other K are held out. Medians over rounds, [min-max]; each round records a fresh profile.",
        "",
    ]
    if worst is not None:
        within = sum(abs(r["error"]) <= 0.15 for r in held)
        lines += [f"Held-out cells: {len(held)}; prediction within 15% of the measurement in {within}; "
                  f"median |error| {100 * statistics.median(abs(r['error']) for r in held):.1f}%; worst "
                  f"{100 * worst['error']:+.1f}% ({worst['model']}, {worst['compressor']}, K={worst['workers']}).",
                  ""]
    lines += ["![decode against K](decode_scaling.png)", "",
              "| model | compressor | K | measured ms | predicted ms | error |", "|---|---|---|---|---|---|"]
    for r in rows:
        k = f"{r['workers']}{'*' if r['fitted'] else ''}"
        err = "—" if r["error"] is None else f"{100 * r['error']:+.1f}%"
        lines.append(f"| {r['model']} | {r['compressor']} | {k} | {r['measured_ms']:.2f} "
                     f"[{r['measured_min_ms']:.2f}-{r['measured_max_ms']:.2f}] | {r['predicted_ms']:.2f} "
                     f"[{r['predicted_min_ms']:.2f}-{r['predicted_max_ms']:.2f}] | {err} |")
    lines += ["", f"How linear measured decode is in K (least squares over K = {', '.join(map(str, ks))}):", "",
              "| model, compressor | ms at K=0 | ms per worker | R^2 |", "|---|---|---|---|"]
    for name, f in line_fits.items():
        lines.append(f"| {name} | {f['intercept_ms']:.2f} | {f['per_worker_ms']:.3f} | {f['r2']:.3f} |")
    return "\n".join(lines) + "\n"


def plot(rows, path):
    import matplotlib  # pylint: disable=import-outside-toplevel
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
    models = sorted({r["model"] for r in rows})
    fig, axes = plt.subplots(1, len(models), figsize=(6 * len(models), 4.5), squeeze=False)
    for ax, model in zip(axes[0], models):
        for i, spec in enumerate(sorted({r["compressor"] for r in rows if r["model"] == model})):
            mine = sorted((r for r in rows if r["model"] == model and r["compressor"] == spec),
                          key=lambda r: r["workers"])
            ks = [r["workers"] for r in mine]
            color = f"C{i}"
            ax.errorbar(ks, [r["measured_ms"] for r in mine],
                        yerr=[[r["measured_ms"] - r["measured_min_ms"] for r in mine],
                              [r["measured_max_ms"] - r["measured_ms"] for r in mine]],
                        fmt="o", color=color, label=f"{spec} measured")
            ax.plot(ks, [r["predicted_ms"] for r in mine], "-", color=color, alpha=0.7,
                    label=f"{spec} predicted from K={PROFILE_WORKERS}")
        ax.set_title(f"{model}: decode over all gradients")
        ax.set_xlabel("workers K")
        ax.set_ylabel("ms")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
