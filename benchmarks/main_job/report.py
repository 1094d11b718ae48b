"""The main job's printout: a side-by-side table per link, and the one-line verdict.

Each run carries its accuracy curve (benchmarks.harness.train_worker.Evaluator);
the target is target_fraction of dense's final accuracy on the same link, and
time to it counts training from the end of the first step, the dense start of
the compressors that ask for one included."""
from benchmarks.harness import compression_specs
from benchmarks.harness.accuracy import time_to


def targets(results, target_fraction):
    """{link: the accuracy each run's time is counted to}: a fraction of dense's final one."""
    return {link: target_fraction * rows[0]["accuracy"] for link, rows in results.items()}


def at_defaults(compression):
    """Whether a run's compression is a compressor by its bare name (its defaults)."""
    return (":" not in compression and compression not in ("none", compression_specs.AUTO)
            and not compression_specs.is_plan(compression))


def table(title, rows, target):
    """The side-by-side table; with predictions (tfcomp.analysis), a column of them."""
    base = rows[0]
    base_tta = time_to(base.get("curve", []), target)
    predicted = any(r.get("predicted_ms") for r in rows)
    lines = [title, f"{'compression':<14}{'ms/step':>9}{'speed-up':>10}{'bytes/step/worker':>19}"
             f"{'vs dense':>10}{'accuracy':>10}{'s to target':>13}{'speed-up':>10}"
             + (f"{'predicted ms':>14}" if predicted else "")]
    for r in rows:
        tta = time_to(r.get("curve", []), target)
        line = (f"{r['compression']:<14}{r['step_ms']:>9.2f}{base['step_ms'] / r['step_ms']:>9.2f}x"
                f"{r['bytes_per_step']:>19,.0f}{r['dense_bytes'] / r['bytes_per_step']:>9.1f}x"
                f"{100 * r['accuracy']:>9.1f}%"
                + (f"{tta:>13.1f}" if tta is not None else f"{'never':>13}")
                + (f"{base_tta / tta:>9.2f}x" if tta and base_tta else f"{'—':>10}"))
        if predicted:
            line += f"{r['predicted_ms']:>14.2f}" if r.get("predicted_ms") else f"{'—':>14}"
        lines.append(line)
    lines.append(f"(target: {100 * target:.1f}% test accuracy, {target / base['accuracy']:.0%} of dense's; "
                 "s to target: training seconds until an evaluation reached it, dense starts included)")
    return "\n".join(lines)


# Below this a speed-up is within the run-to-run noise of a shared machine.
MIN_SPEEDUP = 1.05


def verdict(model, results, target_fraction):
    """One line: on which links compression pays for this model, counting only compressors
    at their defaults that reached target_fraction of dense's accuracy, by time to it (at
    least MIN_SPEEDUP sooner than dense), and on which it does not."""
    pays, loses = [], []
    goals = targets(results, target_fraction)
    for link, rows in results.items():
        words = "unshaped loopback" if link == "loopback" else f"{link}/s links"
        dense, compressed = rows[0], [r for r in rows[1:] if at_defaults(r["compression"])]
        dense_tta = time_to(dense.get("curve", []), goals[link])
        reached = [(r, time_to(r.get("curve", []), goals[link])) for r in compressed]
        reached = [(r, tta) for r, tta in reached if tta is not None]
        best = min(reached, key=lambda pair: pair[1], default=None)
        if best is not None and dense_tta is not None and dense_tta >= MIN_SPEEDUP * best[1]:
            pays.append(f"{words} ({best[0]['compression']} {dense_tta / best[1]:.2f}x sooner)")
        elif best is not None and dense_tta is not None:
            loses.append(f"{words} (best {best[0]['compression']} {dense_tta / best[1]:.2f}x)")
        else:
            loses.append(f"{words} (none at its defaults reached {target_fraction:.0%} of dense's accuracy)")
    said = [f"pays on {', '.join(pays)}"] if pays else []
    said += [f"does not pay on {', '.join(loses)}"] if loses else []
    return (f"Compression for {model} {' and '.join(said)} (time to {target_fraction:.0%} of dense's test "
            "accuracy, counting compressors at their defaults).")
