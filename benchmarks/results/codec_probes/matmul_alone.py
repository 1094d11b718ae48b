import time, statistics, sys
import tensorflow as tf
def t(f, runs=31):
    f = tf.function(f); f(); xs = []
    for _ in range(runs):
        s = time.perf_counter(); f().numpy(); xs.append(time.perf_counter() - s)
    return statistics.median(xs) * 1e3
for (n, m, r) in [(4096, 4096, 4), (4096, 4096, 8), (1024, 1024, 4), (4608, 512, 4), (2048, 2048, 4), (8192, 8192, 4)]:
    g = tf.Variable(tf.random.normal([n, m])); p = tf.Variable(tf.random.normal([n, r])); q = tf.Variable(tf.random.normal([m, r]))
    rows = {"read": lambda: tf.reduce_max(tf.bitcast(g.read_value(), tf.int32)),
            "MQ": lambda: tf.matmul(g.read_value(), q.read_value()),
            "MQ b1": lambda: tf.matmul(g.read_value()[None], q.read_value())[0],
            "PtM": lambda: tf.transpose(tf.matmul(p.read_value(), g.read_value(), transpose_a=True)),
            "PtM b1": lambda: tf.transpose(tf.matmul(p.read_value()[None], g.read_value()[None], transpose_a=True)[0]),
            "MtP b1": lambda: tf.matmul(g.read_value()[None], p.read_value()[None], transpose_a=True)[0],
            "PtM b4 rows": lambda: tf.transpose(tf.reduce_sum(tf.matmul(tf.reshape(p.read_value(), [4, n // 4, r]), tf.reshape(g.read_value(), [4, n // 4, m]), transpose_a=True), 0)),
            }
    res = {k: [] for k in rows}
    for rnd in range(3):
        for k, f in rows.items(): res[k].append(t(f))
    base = statistics.median(res["read"])
    print(f"{n}x{m} r{r}: read {base:.3f} ms |", " | ".join(f"{k} {statistics.median(v)/base:.2f}" for k, v in res.items() if k != "read"), flush=True)
