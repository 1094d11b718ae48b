"""The main job's printout: a side-by-side table per link, and the one-line verdict."""


def table(title, rows):
    """The side-by-side table; with predictions (tfcomp.analysis), a column of them."""
    base = rows[0]
    predicted = any(r.get("predicted_ms") for r in rows)
    lines = [title, f"{'compression':<14}{'ms/step':>9}{'speed-up':>10}{'bytes/step/worker':>19}"
             f"{'vs dense':>10}{'accuracy':>10}" + (f"{'predicted ms':>14}" if predicted else "")]
    for r in rows:
        line = (f"{r['compression']:<14}{r['step_ms']:>9.2f}{base['step_ms'] / r['step_ms']:>9.2f}x"
                f"{r['bytes_per_step']:>19,.0f}{r['dense_bytes'] / r['bytes_per_step']:>9.1f}x"
                f"{100 * r['accuracy']:>9.1f}%")
        if predicted:
            line += f"{r['predicted_ms']:>14.2f}" if r.get("predicted_ms") else f"{'—':>14}"
        lines.append(line)
    return "\n".join(lines)


# Below this a speed-up is within the run-to-run noise of a shared machine.
MIN_SPEEDUP = 1.05


def verdict(model, results, accuracy_points):
    """One line: on which links compression pays for this model (at least MIN_SPEEDUP
    faster than dense at an accuracy within accuracy_points of dense's) and on which it
    does not."""
    pays, loses = [], []
    for link, rows in results.items():
        link = "unshaped loopback" if link == "loopback" else f"{link}/s links"
        dense, compressed = rows[0], rows[1:]
        good = [r for r in compressed if 100 * (dense["accuracy"] - r["accuracy"]) <= accuracy_points]
        best = max(good, key=lambda r: dense["step_ms"] / r["step_ms"], default=None)
        if best is not None and dense["step_ms"] >= MIN_SPEEDUP * best["step_ms"]:
            pays.append(f"{link} ({best['compression']} {dense['step_ms'] / best['step_ms']:.2f}x per step)")
        elif best is not None:
            loses.append(f"{link} (best {best['compression']} {dense['step_ms'] / best['step_ms']:.2f}x per step)")
        else:
            loses.append(f"{link} (none within {accuracy_points:g} points of dense accuracy)")
    said = [f"pays on {', '.join(pays)}"] if pays else []
    said += [f"does not pay on {', '.join(loses)}"] if loses else []
    return (f"Compression for {model} {' and '.join(said)} (counting compressors within {accuracy_points:g} "
            "points of dense accuracy).")
