"""Plan.table: what every tensor runs with under a tfcomp.Plan, and what it sends."""
import tensorflow as tf

from tfcomp.compressors.cast import NoCompression
from tfcomp.compressors.registry import short_repr
from tfcomp.exchange.step import Exchange

MIB = 2**20


def table(plan, shapes_and_dtypes, names, num_workers, **exchange_options):
    """The text table of Plan.table: tensor, shape, MiB, choice, bytes sent per step."""
    if len(shapes_and_dtypes) != len(names):
        raise ValueError(f"Plan.table: {len(shapes_and_dtypes)} shapes for {len(names)} names")
    exchange = Exchange(plan, **exchange_options)
    rows = [("tensor", "shape", "MiB", "runs with", "sent/step")]
    dense_total = sent_total = 0
    for (shape, dtype), name in zip(shapes_and_dtypes, names):
        shape, dtype = tf.TensorShape(shape), tf.as_dtype(dtype)
        runs = exchange.plan(shape, dtype, num_workers, name)
        dense = shape.num_elements() * dtype.size
        sent = runs.payload_bytes(shape, dtype)
        dense_total += dense
        sent_total += sent
        rows.append((name, "x".join(map(str, shape.as_list())) or "scalar", f"{dense / MIB:.3f}",
                     _choice(exchange, plan.choose(name), runs, shape, dtype), _bytes(sent)))
    rows.append(("total", "", f"{dense_total / MIB:.3f}", f"{dense_total / max(sent_total, 1):.1f}x smaller",
                 _bytes(sent_total)))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    right = (False, False, True, False, True)
    lines = ["  ".join(cell.rjust(w) if r else cell.ljust(w) for cell, w, r in zip(row, widths, right)).rstrip()
             for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines.insert(len(lines) - 1, lines[1])
    unmatched = plan.unmatched(names)
    if unmatched:
        lines.append(f"keys that match no tensor: {', '.join(unmatched)}")
    return "\n".join(lines)


def label(compressor):
    return "dense" if isinstance(compressor, NoCompression) else short_repr(compressor)


def _choice(exchange, chosen, runs, shape, dtype):
    if isinstance(runs, NoCompression) and not isinstance(chosen, NoCompression):
        return f"dense ({label(chosen)}: {_why_dense(exchange, chosen, shape, dtype)})"
    return label(runs)


def _why_dense(exchange, chosen, shape, dtype):
    if not dtype.is_floating:
        return "not floating point"
    if shape.rank <= 1:
        return f"{shape.rank}-D"
    if shape.num_elements() < exchange.min_compress_elements:
        return f"under {exchange.min_compress_elements} elements"
    return chosen.accepts(shape, dtype)[1]


def _bytes(n):
    return f"{int(round(n)):,} B"
