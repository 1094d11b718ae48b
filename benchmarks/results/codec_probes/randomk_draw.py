import time, statistics
import tensorflow as tf
from tfcomp import ops
from tfcomp.compressors.sparse import sorted_uniform_positions
n = 1 << 24; k = n // 10; seed = tf.constant([3, 4], tf.int64)
ROW = 1024
def f32rows(n, k, seed):
    gaps = -tf.math.log1p(-tf.random.stateless_uniform([k + 1], seed, dtype=tf.float32))
    rows = -(-(k + 1) // ROW)
    within = tf.cumsum(tf.reshape(tf.pad(gaps, [[0, rows * ROW - (k + 1)]]), [rows, ROW]), axis=1)
    offsets = tf.cumsum(tf.cast(within[:, -1], tf.float64), exclusive=True)
    ends = tf.reshape(tf.cast(within, tf.float64) + offsets[:, None], [-1])
    positions = tf.cast(ends[:k] / ends[k] * n, tf.int64)
    return tf.cast(tf.minimum(positions, n - 1), ops.index_dtype(n))
def pieces_uniform(): return tf.reduce_max(tf.random.stateless_uniform([k + 1], seed, dtype=tf.float32))
def pieces_log(): return tf.reduce_max(-tf.math.log1p(-tf.random.stateless_uniform([k + 1], seed, dtype=tf.float32)))
rows = {"current": lambda: tf.reduce_max(sorted_uniform_positions(n, k, seed)),
        "f32 rows": lambda: tf.reduce_max(f32rows(n, k, seed)),
        "uniform only": pieces_uniform, "uniform+log": pieces_log}
fs = {name: tf.function(f) for name, f in rows.items()}
for f in fs.values(): f()
for rnd in range(3):
    out = []
    for name, f in fs.items():
        xs = []
        for _ in range(15):
            s = time.perf_counter(); f().numpy(); xs.append(time.perf_counter() - s)
        out.append(f"{name} {statistics.median(xs)*1e3:.2f}")
    print(" | ".join(out), flush=True)
