"""The regret of tfcomp.Auto's choices from its audits (Auto's audit_steps): in each run,
the configuration it kept, dense and every single candidate timed interleaved in the
same process, each against dense's block of the same round. benchmarks.plan_regret
writes this beside its regret table; the cross-run comparison there sets runs minutes
or days apart against each other, which on a shared machine can differ by 10-30%."""
import statistics

from benchmarks.harness import plots

AUDIT = "audit"  # tfcomp.auto.core.AUDIT, without importing TensorFlow
REGRET_TARGET, SLOWDOWN_TARGET = 0.05, 0.02


def short(label):
    """'PowerSGD(matrix_approximation_rank=4)' -> 'PowerSGD'; 'dense' and 'plan' as they are."""
    return label.split("(")[0]


def rows(records):
    """One row per (model, workers, link) with an audited Auto run: each repeat's audit."""
    cells = {}
    for r in records:
        history = (r.get("auto") or {}).get("history") or []
        audits = [h for h in history if h.get("phase") == AUDIT]
        if r.get("status") == "ok" and audits:
            cells.setdefault((r["model"], r["workers"], r["link"]), []).append(dict(audits[-1],
                                                                                  repeat=r.get("repeat", 1)))
    out = []
    for (model, workers, link), audits in sorted(cells.items()):
        audits.sort(key=lambda a: a["repeat"])
        labels = [short(t["label"]) for t in audits[0]["trials"]]
        speedups = {label: statistics.median(1 / t["vs_dense"] for a in audits for t in a["trials"]
                                             if short(t["label"]) == label) for label in labels}
        regrets = [a["regret"] for a in audits]
        out.append({"model": model, "workers": workers, "link": link, "repeats": len(audits),
                    "kept": [short(a["kept"]) for a in audits], "fastest": [short(a["fastest"]) for a in audits],
                    "regret_each": regrets, "regret": statistics.median(regrets),
                    "vs_dense_each": [1 / a["vs_dense"] for a in audits], "speedups": speedups})
    return out


def markdown(audit_rows):
    if not audit_rows:
        return ""
    lines = ["", "## Side by side: Auto's audits", "",
             "After deciding, each Auto run timed the configuration it kept, dense and every single candidate "
             "(a candidate on every tensor; its own plan too where that runs as none of them does) in "
             "interleaved rounds of the same process, each against dense's block of the same round "
             "(tfcomp.Auto's audit_steps). **Regret**: the kept configuration's steps over the fastest's, "
             "minus 1, in that audit; the target is within 5%. **Speed-up over dense**: dense's steps over the "
             "kept configuration's, side by side; the target is never below 0.98x (where Auto kept dense it "
             "ran dense: 1.00x). Last column: each configuration's speed-up over dense, median over the repeats.",
             "", "| model | workers | link | Auto kept, each repeat | fastest in the audit, each repeat "
             "| regret, each repeat | median regret | speed-up over dense, each repeat | every configuration |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in audit_rows:
        every = ", ".join(f"{label} {x:.2f}x" for label, x in sorted(r["speedups"].items(), key=lambda kv: -kv[1]))
        lines.append(f"| {r['model']} | {r['workers']} | {r['link']} | {' / '.join(r['kept'])} "
                     f"| {' / '.join(r['fastest'])} | {' / '.join(f'{x:+.1%}' for x in r['regret_each'])} "
                     f"| {r['regret']:+.1%} | {' / '.join(f'{x:.2f}x' for x in r['vs_dense_each'])} | {every} |")
    within = [r for r in audit_rows if r["regret"] <= REGRET_TARGET]
    runs = [x for r in audit_rows for x in r["regret_each"]]
    slow = [x for r in audit_rows for x in r["vs_dense_each"] if x < 1 - SLOWDOWN_TARGET]
    worst = max(audit_rows, key=lambda r: r["regret"])
    lines += ["", f"Median regret within {REGRET_TARGET:.0%} in {len(within)} of {len(audit_rows)} cells "
              f"(largest {worst['regret']:+.1%}: {worst['model']}, {worst['link']}); single runs within it in "
              f"{sum(x <= REGRET_TARGET for x in runs)} of {len(runs)}. Runs whose kept configuration was more than "
              f"{SLOWDOWN_TARGET:.0%} slower than dense side by side: {len(slow)} of {len(runs)}.", ""]
    return "\n".join(lines) + "\n"


def plot(path, audit_rows):
    labels = sorted({label for r in audit_rows for label in r["speedups"]}, key=lambda c: (c != "dense", c))
    plots.speedup_bars(path, [f"{r['model']}\n{r['link']}" for r in audit_rows],
                      [(label, [r["speedups"].get(label, 0) for r in audit_rows]) for label in labels],
                      "speed-up over dense, side by side",
                      stars=("Auto's choice", [statistics.median(r["vs_dense_each"]) for r in audit_rows]),
                      title="tfcomp.Auto's audits: every configuration in interleaved rounds of one run")
