"""DRAGONN with its paper's collision rule, for comparison in benchmarks.convergence:
when several elements above the threshold hash to one slot, the last written (in
index order, the largest index) stays. tfcomp's DRAGONN (ops.hash_select) keeps the
largest of them instead. TF ops, not a fast path: a convergence baseline only.
Its hash is Carter-Wegman's ((a i + b) mod p) mod m, p = 2^31 - 1, with a and b
drawn from the step's seed: universal, as the paper asks, though not the op's."""
import tensorflow as tf

from tfcomp import ops
from tfcomp.compressors.sparse import DRAGONN

_PRIME = 2 ** 31 - 1


class PaperRuleDRAGONN(DRAGONN):
    """DRAGONN whose shared slots keep the largest index (Algorithm 1's last writer), one
    slot per element (bucket_size=1)."""

    def __init__(self, ratio, **knobs):
        super().__init__(ratio, bucket_size=1, **knobs)

    def select(self, flat, ctx):
        n = flat.shape.num_elements()
        if n >= 2 ** 32:
            raise ValueError("PaperRuleDRAGONN hashes indices below 2^32 only")
        m = self.capacity(flat.shape)
        chosen = tf.reshape(tf.where(tf.abs(flat) >= self.threshold(flat, ctx)), [-1])
        seed = tf.cast(ctx.seed(salt=2), tf.int64)
        a = tf.math.floormod(seed[0], _PRIME - 1) + 1
        b = tf.math.floormod(seed[1], _PRIME)
        slots = tf.math.floormod(tf.math.floormod(a * chosen + b, _PRIME), m)
        kept = tf.maximum(tf.math.unsorted_segment_max(chosen, slots, m), -1)  # empty slots: -1
        values = tf.where(kept >= 0, tf.gather(flat, tf.maximum(kept, 0)), tf.zeros([], flat.dtype))
        return values, tf.cast(kept, ops.index_dtype(n))
