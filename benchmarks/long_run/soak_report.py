"""The soak's figures, checks, table and plot (benchmarks/long_run/soak.py runs
them on a long run's results), apart from its flags so that tests can import them."""
import collections
import statistics

Limits = collections.namedtuple("Limits", "rss_growth_mib_per_hour step_time_drift traces_per_plan",
                                defaults=(50.0, 0.25, 6))


def periods(changes, end_time):
    """[(rate, start, end)] of the link changes (unix times)."""
    ends = [c["unix_time"] for c in changes[1:]] + [end_time]
    return [(c["rate"], c["unix_time"], end) for c, end in zip(changes, ends)]


def in_period(samples, start, end):
    return [s for s in samples if start <= s["unix_time"] < end]


def summarize(workers, changes, limits=Limits()):
    """Per-period figures, Auto's decisions and the checks, from the workers' results."""
    w0 = workers[0]
    begin = w0["samples"][0]["unix_time"]
    table = []
    for index, (rate, start, end) in enumerate(periods(changes, w0["samples"][-1]["unix_time"] + 1e-3)):
        inside = [in_period(w["samples"], start, end) for w in workers]
        if not inside[0]:
            continue
        timed = [s["step_ms"] for s in inside[0] if s["step_ms"] is not None]
        table.append({
            "period": index + 1, "rate": rate, "from_min": (start - begin) / 60, "to_min": (end - begin) / 60,
            "steps": inside[0][-1]["step"] - inside[0][0]["step"],
            "step_ms_median": statistics.median(timed) if timed else None,
            "rss_mib_end": [s[-1]["rss_kib"] / 1024 for s in inside],
            "traces_end": inside[0][-1]["traces"], "functions_end": inside[0][-1]["context_functions"],
            "threads_end": inside[0][-1]["threads"]})
    step_times = {s["step"]: s["unix_time"] for s in w0["samples"]}
    decisions = []
    for entry in w0["auto_history"] or []:
        step = entry.get("step")
        near = min(step_times, key=lambda k: abs(k - step)) if step is not None else None
        decisions.append({"step": step, "minute": (step_times[near] - begin) / 60 if near is not None else None,
                          "phase": entry["phase"], "trial": entry.get("trial"), "reason": entry.get("reason")})
    return table, decisions, checks(workers, table, decisions, begin, limits)


def checks(workers, table, decisions, begin, limits):
    """[(what, ok, figure)]: RSS growth after warm-up, step time per rate first against
    last period, traces per profiling cycle."""
    found = []
    after = table[1]["from_min"] if len(table) > 1 else 0.0
    for worker, result in enumerate(workers):
        samples = [s for s in result["samples"] if (s["unix_time"] - begin) / 60 >= after]
        slope = statistics.linear_regression([(s["unix_time"] - begin) / 3600 for s in samples],
                                             [s["rss_kib"] / 1024 for s in samples]).slope
        found.append((f"worker {worker} RSS growth from minute {after:.0f} (MiB/hour)",
                      slope <= limits.rss_growth_mib_per_hour, slope))
    for rate in dict.fromkeys(row["rate"] for row in table):
        # A rate's first period is Auto's warm-up on it (it ran the plan made for the other rate until
        # the drift check saw the change): compared from its second period on.
        rows = [row for row in table if row["rate"] == rate and row["step_ms_median"]][1:]
        if len(rows) >= 2:
            change = rows[-1]["step_ms_median"] / rows[0]["step_ms_median"] - 1
            found.append((f"{rate}: median step time, period {rows[-1]['period']} against {rows[0]['period']}",
                          abs(change) <= limits.step_time_drift, change))
    cycles = 1 + sum(1 for d in decisions if d["phase"] == "profiling")
    traces = workers[0]["samples"][-1]["traces"]
    found.append((f"traces per profiling cycle ({traces} traces, {cycles} cycles)",
                  traces <= limits.traces_per_plan * cycles, traces / cycles))
    return found


def markdown(table, decisions, found, machine, minutes, command=None, commit=None):
    lines = ["# Soak: an hour of tfcomp.Auto re-planning on links that change", "",
             f"`{command}`" if command else "", "",
             f"Commit {commit or 'unknown'}; {machine['date']}; {machine['cpus']} CPUs ({machine['cpu']}), the "
             f"run's two workers pinned to one core while other work used the other; TensorFlow "
             f"{machine['tensorflow']}; {minutes:.0f} minutes. Two tfcomp MultiWorkerMirroredStrategy workers, each "
             f"in a network namespace of its own on the emulated cluster, train the main job's digits MLP under "
             f"`tfcomp.Auto(replan_every=200)`; every link is reshaped on the schedule (unshaped, then 100 Mbit/s "
             f"tc tbf).", "",
             "![RSS, step time and traces over the soak](soak.png)", "",
             "| period | link | minutes | steps | median ms/step | RSS MiB at end (w0, w1) | traces | TF functions "
             "| threads |", "|---|---|---|---|---|---|---|---|---|"]
    for row in table:
        ms = f"{row['step_ms_median']:.1f}" if row["step_ms_median"] else "-"
        lines.append(f"| {row['period']} | {row['rate']} | {row['from_min']:.1f}-{row['to_min']:.1f} | {row['steps']} "
                     f"| {ms} | {row['rss_mib_end'][0]:.0f}, {row['rss_mib_end'][1]:.0f} | {row['traces_end']} "
                     f"| {row['functions_end']} | {row['threads_end']} |")
    lines += ["", "Auto's decisions (worker 0; both decide together):", "",
              "| minute | step | phase | trial kept | reason |", "|---|---|---|---|---|"]
    for d in decisions:
        minute = f"{d['minute']:.1f}" if d["minute"] is not None else "-"
        reason = (d["reason"] or "").replace("|", "/")
        lines.append(f"| {minute} | {d['step']} | {d['phase']} | {d['trial'] or ''} | {reason[:160]} |")
    lines += ["", "Checks:", ""]
    lines += [f"- {'pass' if ok else '**FAIL**'}: {what}: {value:+.3g}" for what, ok, value in found]
    return "\n".join(lines) + "\n"


def plot(path, workers, changes, decisions):
    import matplotlib  # pylint: disable=import-outside-toplevel
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel

    begin = workers[0]["samples"][0]["unix_time"]
    minutes = lambda samples: [(s["unix_time"] - begin) / 60 for s in samples]  # noqa: E731
    fig, axes = plt.subplots(3, 1, figsize=(10, 8), sharex=True)
    for worker, result in enumerate(workers):
        axes[0].plot(minutes(result["samples"]), [s["rss_kib"] / 1024 for s in result["samples"]], lw=1,
                     label=f"worker {worker}")
    timed = [s for s in workers[0]["samples"] if s["step_ms"] is not None]
    axes[1].plot(minutes(timed), [s["step_ms"] for s in timed], lw=0.6, color="tab:purple")
    axes[1].set_yscale("log")
    axes[2].plot(minutes(workers[0]["samples"]), [s["traces"] for s in workers[0]["samples"]], label="traces")
    axes[2].plot(minutes(workers[0]["samples"]), [s["context_functions"] for s in workers[0]["samples"]],
                 label="TF functions")
    end = workers[0]["samples"][-1]["unix_time"]
    for rate, start, stop in periods(changes, end):
        if rate != "unshaped":
            for ax in axes:
                ax.axvspan((start - begin) / 60, (stop - begin) / 60, color="tab:orange", alpha=0.12)
    for d in decisions:
        if d["minute"] is not None and d["phase"] == "profiling":
            for ax in axes:
                ax.axvline(d["minute"], color="grey", lw=0.8, ls=":")
    axes[0].set_ylabel("RSS MiB")
    axes[1].set_ylabel("ms/step (median\nof 50 steps)")
    axes[2].set_ylabel("count")
    axes[2].set_xlabel("minutes (shaded: 100 Mbit/s; dotted: Auto re-plans on drift)")
    axes[0].legend(fontsize=8)
    axes[2].legend(fontsize=8)
    for ax in axes:
        ax.grid(alpha=0.3)
    fig.suptitle("Soak: tfcomp.Auto(replan_every=200), 2 workers, links alternating unshaped / 100 Mbit/s",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
