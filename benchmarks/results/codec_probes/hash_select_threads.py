import sys, time, statistics
import numpy as np, tensorflow as tf
threads = int(sys.argv[1])
tf.config.threading.set_intra_op_parallelism_threads(threads)
from tfcomp import ops
n = 1 << 24
g = tf.Variable(tf.random.normal([n], seed=1))
cap = n // 10
t = float(np.quantile(np.abs(g.numpy()), 0.8))
f = tf.function(lambda: ops.hash_select(g.read_value(), t, [1, 2], cap, 4)[0][:1])
r = tf.function(lambda: tf.reduce_max(tf.bitcast(g.read_value(), tf.int32)))
f(); r()
def tm(fn):
    xs = []
    for _ in range(15):
        s = time.perf_counter(); fn().numpy(); xs.append(time.perf_counter() - s)
    return statistics.median(xs) * 1e3
for _ in range(2):
    print(f"threads={threads} hash_select {tm(f):.1f} ms, read {tm(r):.2f} ms", flush=True)
