"""The end-to-end benchmark's report, rewritten from runs.jsonl after every run:
e2e.md (a table per model, engine and worker count; the probed links) and PNG
plots per model, engine and worker count: speed-up over dense against link
bandwidth (per step and to the target accuracy, with the crossover where
compression stops paying), stacked phase times per compressor, and test
accuracy against training wall time."""
import json
import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # pylint: disable=wrong-import-position

from benchmarks.harness.accuracy import time_to  # pylint: disable=wrong-import-position
from benchmarks.e2e import validation  # pylint: disable=wrong-import-position
from tfcomp.analysis.model import whatif  # pylint: disable=wrong-import-position
from tests.cluster.netns_cluster import rate_gbps  # pylint: disable=wrong-import-position

DENSE = "none"
PHASES = ("forward_backward", "compress", "communicate", "decompress", "apply")


UNSHAPED_GBPS = 8.0  # what an unshaped veth carried between two workers here (measured 8.3 Gbit/s)


def run_label(compression):
    """A run's compression as plots name it: a plan file ('plan:PATH') is "plan"."""
    return "plan" if compression.startswith("plan:") else compression


def nominal_gbps(link):
    """A link of the grid ('unlimited', or a tc rate such as 500mbit) in Gbit/s."""
    return UNSHAPED_GBPS if link == "unlimited" else rate_gbps(link)


MIN_DENSE_ACCURACY = 0.2  # below it dense training has not learnt the task in the run: no target


def targets(records, fraction):
    """{(model, size): target accuracy}: fraction of the best final accuracy of dense
    runs, for the models whose dense runs reached MIN_DENSE_ACCURACY (a grid that
    times steps only, such as a paper-size model for a few steps, has no target)."""
    best = {}
    for r in records:
        if r["status"] == "ok" and r["compression"] == DENSE and r.get("final_accuracy") is not None:
            key = (r["model"], r["size"])
            best[key] = max(best.get(key, 0.0), r["final_accuracy"])
    return {k: fraction * v for k, v in best.items() if v >= MIN_DENSE_ACCURACY}


def _no_target(runs):
    if all(r.get("final_accuracy") is None for r in runs):
        return "No target accuracy: test accuracy was not evaluated (step times only)."
    return f"No target accuracy: dense training ended below {MIN_DENSE_ACCURACY} (step times only)."


def _groups(records):
    groups = {}
    for r in records:
        groups.setdefault((r["model"], r["size"], r["engine"], r["workers"], r["link_mode"]), []).append(r)
    return groups


def _links(runs):
    return sorted({r["link"] for r in runs}, key=nominal_gbps, reverse=True)


def _dense(runs, link):
    return next((r for r in runs if r["link"] == link and r["compression"] == DENSE and r["status"] == "ok"), None)


def _ratio(a, b):
    return a / b if a and b else None


def _fmt(x, spec=".2f", suffix=""):
    return "—" if x is None else f"{x:{spec}}{suffix}"


def rows(runs, target):
    """Per (link, compression): the table's figures, speed-ups against dense on the same link."""
    out = []
    for link in _links(runs):
        dense = _dense(runs, link)
        for r in (r for r in runs if r["link"] == link):
            if r["status"] != "ok":
                out.append({"link": link, "compression": r["compression"], "failed": True})
                continue
            tta = time_to(r["curve"], target) if target is not None else None
            dense_tta = time_to(dense["curve"], target) if dense and target is not None else None
            out.append({
                "link": link, "compression": r["compression"], "failed": False, "step_ms": r["step_ms"],
                "p10": r["step_ms_p10"], "p90": r["step_ms_p90"],
                "step_speedup": _ratio(dense and dense["step_ms"], r["step_ms"]),
                "sent_ratio": r["dense_bytes"] / r["bytes_per_step"], "tta_s": tta,
                "tta_speedup": _ratio(dense_tta, tta), "final_accuracy": r["final_accuracy"],
                "phases_ms": {p: 1e3 * s for p, s in (r.get("phases_s") or {}).items()}})
    return out


def markdown(records, fraction):
    goals = targets(records, fraction)
    lines = ["# End-to-end benchmark", "",
             f"Command: `{records[-1]['command']}`" if records else "", "",
             "Speed-ups are against dense training (the engine's own allreduce) on the same link; time to "
             f"accuracy is training wall time (evaluations left out) until test accuracy first reaches "
             f"{fraction:.0%} of dense training's final accuracy on the model.", ""]
    for (model, size, engine, workers, mode), runs in _groups(records).items():
        target = goals.get((model, size))
        lines += [f"## {model} ({size}), {engine}, {workers} workers ({mode.replace('_', ' ')})", "",
                  f"Target accuracy: {_fmt(target, '.3f')}" if target is not None else _no_target(runs), "",
                  _cores_line(runs), "",
                  "| link | compression | ms/step (p10–p90) | step speed-up | sent/dense | time to target s "
                  "| speed-up to target | final accuracy | fwd+bwd / compress / communicate / decompress ms |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for row in rows(runs, target):
            if row["failed"]:
                lines.append(f"| {row['link']} | {row['compression']} | failed | | | | | | |")
                continue
            phases = " / ".join(_fmt(row["phases_ms"].get(p), ".1f") for p in PHASES[:4]) if row["phases_ms"] else "—"
            lines.append(
                f"| {row['link']} | {row['compression']} | {row['step_ms']:.1f} ({row['p10']:.1f}–{row['p90']:.1f}) "
                f"| {_fmt(row['step_speedup'], '.2f', 'x')} | 1/{row['sent_ratio']:.1f} | {_fmt(row['tta_s'], '.1f')} "
                f"| {_fmt(row['tta_speedup'], '.2f', 'x')} | {_fmt(row['final_accuracy'], '.3f')} | {phases} |")
        lines += ["", *_crossover_lines(runs, target), ""]
    lines += validation.markdown(records, crossover)
    lines += ["## Links as probed", "", "| engine | workers | link | allreduce Gbit/s | allreduce alpha µs "
              "| allgather Gbit/s | allgather alpha µs |", "|---|---|---|---|---|---|---|"]
    seen = set()
    for r in records:
        key = (r["engine"], r["workers"], r["link"], r["link_mode"])
        if r.get("probe") and key not in seen:
            seen.add(key)
            p = r["probe"]
            lines.append(f"| {r['engine']} | {r['workers']} | {r['link']} | {p['allreduce']['gbps']:.3f} "
                         f"| {p['allreduce']['alpha_us']:.0f} | {p['allgather']['gbps']:.3f} "
                         f"| {p['allgather']['alpha_us']:.0f} |")
    return "\n".join(lines) + "\n"


def _cores_line(runs):
    """Where the group's workers ran: each on cores of its own (e2e --pin_cores), or sharing them."""
    placements = {json.dumps(r.get("worker_cores")) for r in runs}
    if len(placements) != 1:
        return "Workers' cores: differ between runs (see worker_cores in runs.jsonl)."
    cores = runs[0].get("worker_cores")
    if cores is None:
        return "Workers' cores: not recorded (runs from before --pin_cores: the workers shared every core)."
    if not cores:
        return "Workers' cores: shared (not pinned)."
    return "Workers' cores: " + ", ".join(f"worker {w} on {','.join(map(str, c))}" for w, c in enumerate(cores)) + "."


def crossover(points):
    """The first bandwidth (Gbit/s) where speed-up crosses 1, from [(Gbit/s, speed-up)], or None."""
    points = sorted(points)
    found = whatif.crossovers([b for b, _ in points], [s for _, s in points])
    return found[0][0] if found else None


def _crossover_lines(runs, target):
    """Each compressor's crossover bandwidth, per step and to the target, with two links or more."""
    if len(_links(runs)) < 2:
        return []
    table = rows(runs, target)
    bandwidth = {r["link"]: _bandwidth(r) for r in runs}
    lines = []
    for compression in dict.fromkeys(r["compression"] for r in runs if r["compression"] != DENSE):
        found = []
        for field, label in (("step_speedup", "per step"), ("tta_speedup", "to target")):
            points = [(bandwidth[row["link"]], row[field]) for row in table
                      if row["compression"] == compression and not row["failed"] and row[field]]
            cross = crossover(points) if len(points) > 1 else None
            found.append(f"{label} {_fmt(cross, '.2f', ' Gbit/s') if cross else 'none in the grid'}")
        lines.append(f"- Crossover of {compression} (probed allreduce bandwidth where its speed-up crosses 1): "
                     + "; ".join(found))
    return lines


def _bandwidth(run):
    probe = run.get("probe")
    return probe["allreduce"]["gbps"] if probe else nominal_gbps(run["link"])


def plot_speedups(path, runs, target, title):
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    table = rows(runs, target)
    bandwidth = {r["link"]: _bandwidth(r) for r in runs}
    for ax, field, label in [(axes[0], "step_speedup", "per step"), (axes[1], "tta_speedup", "to target accuracy")]:
        for compression in dict.fromkeys(r["compression"] for r in runs if r["compression"] != DENSE):
            points = [(bandwidth[row["link"]], row[field]) for row in table
                      if row["compression"] == compression and not row["failed"] and row[field]]
            if not points:
                continue
            points.sort()
            line, = ax.plot([b for b, _ in points], [s for _, s in points], marker="o", label=run_label(compression))
            cross = crossover(points)
            if cross:
                ax.axvline(cross, color=line.get_color(), linestyle=":", linewidth=1)
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_xscale("log")
        ax.set_xlabel("link bandwidth, Gbit/s (probed allreduce)")
        ax.set_ylabel(f"speed-up over dense, {label}")
        ax.grid(alpha=0.3)
    if axes[0].get_legend_handles_labels()[0]:
        axes[0].legend(fontsize=8)
    fig.suptitle(f"{title}\n(dotted: crossover, where compression stops paying)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_phases(path, runs, title):
    links = _links(runs)
    fig, axes = plt.subplots(1, len(links), figsize=(4.5 * len(links), 4), squeeze=False)
    for ax, link in zip(axes[0], links):
        here = [r for r in runs if r["link"] == link and r["status"] == "ok" and r.get("phases_s")]
        bottoms = [0.0] * len(here)
        for phase in PHASES:
            heights = [1e3 * r["phases_s"].get(phase, 0.0) for r in here]
            ax.bar(range(len(here)), heights, bottom=bottoms, label=phase)
            bottoms = [b + h for b, h in zip(bottoms, heights)]
        ax.set_xticks(range(len(here)), [run_label(r["compression"]) for r in here], rotation=45, ha="right",
                      fontsize=8)
        ax.set_title(link)
        ax.set_ylabel("ms per step (median of the Timeline's steps)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="lower center", ncol=len(PHASES), fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_accuracy(path, runs, target, title):
    links = _links(runs)
    fig, axes = plt.subplots(1, len(links), figsize=(4.5 * len(links), 4), squeeze=False)
    for ax, link in zip(axes[0], links):
        for r in (r for r in runs if r["link"] == link and r["status"] == "ok"):
            ax.plot([s for s, _, _ in r["curve"]], [a for _, _, a in r["curve"]], marker=".",
                    label=run_label(r["compression"]))
        if target is not None:
            ax.axhline(target, color="black", linestyle="--", linewidth=0.8)
        ax.set_title(link)
        ax.set_xlabel("training wall time, s")
        ax.set_ylabel("test accuracy")
        ax.grid(alpha=0.3)
    if axes[0][0].get_legend_handles_labels()[0]:
        axes[0][0].legend(fontsize=8)
    fig.suptitle(f"{title} (dashed: target)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write(records, out, fraction):
    (out / "e2e.md").write_text(markdown(records, fraction))
    validation.plot(out / "predicted-vs-measured.png", records)
    goals = targets(records, fraction)
    for (model, size, engine, workers, mode), runs in _groups(records).items():
        stem = f"{model}-{size}-{engine.replace('.', '_')}-{workers}w" + ("-loopback" if mode != "cluster" else "")
        title = f"{model} ({size}), {engine}, {workers} workers"
        target = goals.get((model, size))
        if len(_links(runs)) > 1:  # against bandwidth: needs two links at least
            plot_speedups(out / f"{stem}-speedup.png", runs, target, title)
        plot_phases(out / f"{stem}-phases.png", runs, title)
        plot_accuracy(out / f"{stem}-accuracy.png", runs, target, title)
