"""The long run's verdicts, table and plot, from the workers' samples
(benchmarks/long_run/worker.py's JSON)."""
import statistics

# Thread pools may start a thread or two late; a leak adds many.
THREAD_TOLERANCE_PERCENT = 10.0


def window_median(samples, first_step, last_step, key="rss_kib"):
    """Median of samples[key] over first_step < step <= last_step (steps done)."""
    values = [s[key] for s in samples if first_step < s["step"] <= last_step and s[key] is not None]
    if not values:
        raise ValueError(f"no samples with {key} in steps ({first_step}, {last_step}]")
    return statistics.median(values)


def at_step(samples, step):
    """The sample taken when `step` steps were done."""
    for sample in samples:
        if sample["step"] == step:
            return sample
    raise ValueError(f"no sample at step {step}")


def worker_summary(result, window):
    """One worker's figures: traces and functions after warm-up, RSS windows, op counts."""
    samples, steps, warmup = result["samples"], result["steps"], result["warmup"]
    start, end = at_step(samples, warmup), samples[-1]
    rss_start = window_median(samples, warmup, warmup + window)
    rss_end = window_median(samples, steps - window, steps)
    after = [s for s in samples if s["step"] > warmup]
    trend = statistics.linear_regression([s["step"] for s in after], [s["rss_kib"] for s in after]).slope
    return {
        "traces_at_warmup": start["traces"],
        "traces_after_warmup": end["traces"] - start["traces"],
        "tracing_count_after_warmup": (None if None in (end["train_function_tracing_count"],
                                                        start["train_function_tracing_count"])
                                       else end["train_function_tracing_count"]
                                       - start["train_function_tracing_count"]),
        "context_functions": (start["context_functions"], end["context_functions"]),
        "ops": (result["ops"]["warmup"], result["ops"]["end"]),
        "concrete_functions": (result["concrete_functions"]["warmup"], result["concrete_functions"]["end"]),
        "rss_mib": (rss_start / 1024, rss_end / 1024),
        "rss_change_percent": 100.0 * (rss_end - rss_start) / rss_start,
        "rss_trend_mib_per_1k_steps": trend * 1000 / 1024,  # least squares over the samples after warm-up
        "threads": (window_median(samples, warmup, warmup + window, key="threads"),
                    window_median(samples, steps - window, steps, key="threads")),
        "step_ms": result["step_ms"],
        "loss": window_median(samples, steps - window, steps, key="loss"),
    }


def violations(summary, rss_tolerance_percent):
    """What breaks a long run's promises, in words (empty: none)."""
    found = []
    if summary["traces_after_warmup"] or summary["tracing_count_after_warmup"]:
        found.append(f"{summary['traces_after_warmup']} train-step traces after warm-up")
    for key in ("context_functions", "ops", "concrete_functions"):
        before, after = summary[key]
        if after != before:
            found.append(f"{key.replace('_', ' ')} {before} -> {after} after warm-up")
    threads_start, threads_end = summary["threads"]
    if threads_end > threads_start * (1 + THREAD_TOLERANCE_PERCENT / 100):
        found.append(f"threads {threads_start:g} -> {threads_end:g} after warm-up")
    if abs(summary["rss_change_percent"]) > rss_tolerance_percent:
        found.append(f"RSS changed {summary['rss_change_percent']:+.1f}% (tolerance {rss_tolerance_percent}%)")
    return found


def markdown_table(rows):
    """rows: (compression, steps, [worker summaries], bytes sent/dense). Worker 0's
    RSS, ops and time; traces and the RSS change are the largest over workers."""
    lines = ["| compressor | steps | traces by warm-up | traces after warm-up | TF functions warm-up → end "
             "| RSS MiB warm-up | RSS MiB end | RSS change (w0; largest) | RSS trend MiB/1k steps (w0) | threads warm-up → end | ops warm-up "
             "| ops end | ms/step | sent/dense | loss (last window) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, steps, summaries, sent_fraction in rows:
        w0 = summaries[0]
        largest = max((s["rss_change_percent"] for s in summaries), key=abs)
        traces_after = max(max(s["traces_after_warmup"], s["tracing_count_after_warmup"] or 0)  # None: see probe
                           for s in summaries)
        lines.append(
            f"| {name} | {steps} | {w0['traces_at_warmup']} | {traces_after} "
            f"| {w0['context_functions'][0]} → {w0['context_functions'][1]} "
            f"| {w0['rss_mib'][0]:.1f} | {w0['rss_mib'][1]:.1f} "
            f"| {w0['rss_change_percent']:+.2f}%; {largest:+.2f}% | {w0['rss_trend_mib_per_1k_steps']:+.2f} "
            f"| {w0['threads'][0]:g} → {w0['threads'][1]:g} "
            f"| {w0['ops'][0]} | {w0['ops'][1]} "
            f"| {w0['step_ms']:.2f} | {sent_fraction:.3f} | {w0['loss']:.4f} |")
    return "\n".join(lines)


def plot_rss(path, runs, warmup, window, title):
    """RSS over steps, a panel per compressor, a line per worker; the two
    compared windows shaded. runs: [(compression, [worker results])]."""
    import matplotlib  # pylint: disable=import-outside-toplevel
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel

    cols = min(5, len(runs))
    rows = -(-len(runs) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.6 * cols, 2.8 * rows), squeeze=False)
    for ax, (name, results) in zip(axes.flat, runs):
        steps = results[0]["steps"]
        ax.axvspan(warmup, warmup + window, color="tab:green", alpha=0.15)
        ax.axvspan(steps - window, steps, color="tab:red", alpha=0.15)
        ax.axvline(warmup, color="grey", lw=0.8, ls=":")
        for worker, result in enumerate(results):
            samples = result["samples"]
            ax.plot([s["step"] for s in samples], [s["rss_kib"] / 1024 for s in samples], lw=1,
                    label=f"worker {worker}")
        ax.set_title(name, fontsize=10)
        ax.set_xlabel("step")
        ax.set_ylabel("RSS MiB")
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(runs):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
