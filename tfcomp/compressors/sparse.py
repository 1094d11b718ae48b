"""Sparsifiers: TopK, RandomK, DGC and DRAGONN, all with error feedback.

Each keeps a fixed number of slots, capacity = ceil(ratio * n), so payloads
have fixed shapes. TopK, DGC and DRAGONN send (values, indices) by allgather,
index -1 marking an empty slot, and decode all workers' lists in one
scatter-add (sparse decoding, DRAGONN section 4.3). RandomK draws its indices
from a seed all workers share, so it sends values only, by allreduce.

Error feedback: the residual keeps what was not sent, including what hash
collisions dropped; a sent element leaves 0 behind, a sent NaN or Inf too
(ops.scale_at: O(capacity) on the accumulated vector's own buffer, where
flat - decode(sent) cost three passes and kept NaN - NaN). With worker
momentum (DGC's momentum correction; see base.WorkerMomentum) the velocity
u <- momentum * u + g is what accumulates in the residual, and DGC's momentum factor masking drops momentum_masking of u
where an element was sent. TopK and DGC send the largest accumulated elements
and default to no masking (error feedback on the momentum update, which keeps
the sum of the updates dense's). RandomK, whose draw leaves large elements
behind at random, defaults to DGC's full masking, and DRAGONN, whose hash
collisions drop the smallest of the elements sharing a bucket, to half
(benchmarks/results/convergence.md, "masking" rows).
"""
import math

import tensorflow as tf

from tfcomp import ops
from tfcomp.compressors.base import EPOCH, Collective, Compressor, Payload, PayloadSpec, Round, checked_warmup_steps
from tfcomp.compressors.momentum import AUTO, WorkerMomentum

# 10% of the elements after a dense epoch trained like dense in tfcomp's convergence
# benchmark; 1% and 0.1% took 2.2-2.7x dense's steps (benchmarks/results/convergence.md).
DEFAULT_RATIO = 0.1


def estimate_threshold(values, k_fraction, seed, sample_fraction=0.01, min_samples=512):
    """DGC's threshold: the k-th largest |value| of a sample of sample_fraction of
    the elements (at least min_samples), k = k_fraction of the sample
    (ops.sampled_threshold: one pass over the sample, in contiguous runs)."""
    n = values.shape.num_elements()
    samples = max(1, min(n, max(min_samples, math.ceil(sample_fraction * n))))
    k = max(1, min(samples, math.ceil(k_fraction * samples)))
    return ops.sampled_threshold(values, seed, samples, k)


# DGC's adaptation bounds: a count within [LOWER, UPPER] x k is close enough.
ADAPT_UPPER = 1.3
ADAPT_LOWER = 0.8


def adapt_threshold(values, threshold, k, rounds):
    """DGC's threshold adaptation: up to `rounds` times, count the elements whose
    |value| reaches the threshold (one pass over values each); above
    ADAPT_UPPER * k the threshold grows by that factor, below ADAPT_LOWER * k
    it shrinks by that one, and in between it is kept and the loop stops."""
    if rounds == 0:
        return threshold
    magnitude = tf.abs(values)
    up = tf.constant(ADAPT_UPPER, threshold.dtype)
    down = tf.constant(ADAPT_LOWER, threshold.dtype)

    def step(i, t, _):
        count = tf.cast(tf.math.count_nonzero(magnitude >= t), tf.float64)
        adapted = tf.where(count > ADAPT_UPPER * k, t * up, tf.where(count < ADAPT_LOWER * k, t * down, t))
        return i + 1, adapted, tf.equal(adapted, t)

    _, threshold, _ = tf.while_loop(lambda i, _, settled: tf.logical_and(i < rounds, tf.logical_not(settled)),
                                    step, (tf.constant(0), threshold, tf.constant(False)))
    return threshold


class Sparsifier(WorkerMomentum, Compressor):
    """Common part: ratio, error feedback, momentum correction, allgather decode."""

    efficiency_aware = True
    #: The momentum_masking a None asks for: what trained best in tfcomp's convergence benchmark.
    default_momentum_masking = 1.0

    def __init__(self, ratio=DEFAULT_RATIO, momentum=AUTO, momentum_masking=None, warmup_steps=EPOCH):
        if not (isinstance(ratio, (int, float)) and 0 < ratio <= 1):
            raise ValueError(f"{type(self).__name__}: ratio is the fraction of elements kept and must "
                             f"be in (0, 1], got {ratio!r}")
        if momentum_masking is None:
            momentum_masking = self.default_momentum_masking
        if not (isinstance(momentum_masking, (int, float)) and 0 <= momentum_masking <= 1):
            raise ValueError(f"{type(self).__name__}: momentum_masking is the fraction of the velocity dropped "
                             f"where an element was sent and must be in [0, 1], got {momentum_masking!r}")
        self.ratio = float(ratio)
        self.momentum_masking = float(momentum_masking)
        self.warmup_steps = checked_warmup_steps(type(self).__name__, warmup_steps)
        self._init_momentum(momentum)

    def capacity(self, shape):
        n = tf.TensorShape(shape).num_elements()
        return max(1, math.ceil(self.ratio * n))

    def state_specs(self, shape, dtype):
        return {"residual": (tuple(shape), tf.as_dtype(dtype)), **self.momentum_state_specs(shape, dtype)}

    def payload_specs(self, shape, dtype):
        m = self.capacity(shape)
        index = ops.index_dtype(tf.TensorShape(shape).num_elements())
        return [[PayloadSpec((m,), tf.as_dtype(dtype), Collective.ALLGATHER),
                 PayloadSpec((m,), index, Collective.ALLGATHER)]]

    def select(self, flat, ctx):
        """(values[m], indices[m]) of the elements to send from flat; index -1 = empty."""
        raise NotImplementedError

    def _accumulate(self, grad, state):
        """The vector to select from (flat), after error feedback and momentum."""
        return tf.reshape(self.corrected(grad, state), [-1])

    def _clear_sent(self, flat, indices, shape, state):
        """Error feedback's update in O(capacity) (ops.scale_at, on flat's buffer when
        TensorFlow allows): the residual is flat with the sent elements (indices; -1
        skipped, repeats once) cleared to 0, and DGC's momentum factor masking drops
        momentum_masking of the velocity where an element was sent."""
        state["residual"].assign(tf.reshape(ops.scale_at(flat, indices, 0), shape))
        if self.worker_momentum is None or not self.momentum_masking:
            return
        velocity = state["velocity"]
        keep = 1 - tf.constant(self.momentum_masking, velocity.dtype)
        masked = ops.scale_at(tf.reshape(velocity.read_value(), [-1]), indices, keep)
        velocity.assign(tf.reshape(masked, velocity.shape))

    def compress(self, grad, state, ctx):
        n = grad.shape.num_elements()
        flat = self._accumulate(grad, state)
        values, indices = self.select(flat, ctx)
        # After the values are read from flat, so that its buffer can become the residual.
        with tf.control_dependencies([values]):
            self._clear_sent(flat, indices, grad.shape, state)

        def finish(gathered):
            all_values, all_indices = gathered
            # The mean's 1/K is applied in the decode's pass (sparse_decode's divisor).
            decoded = ops.sparse_decode(tf.reshape(all_values, [-1]), tf.reshape(all_indices, [-1]), n,
                                        divisor=ctx.num_workers if ctx.average else 1)
            return self.hand_off(tf.reshape(decoded, grad.shape), state)
        return Round([Payload(values, Collective.ALLGATHER), Payload(indices, Collective.ALLGATHER)], finish)


class TopK(Sparsifier):
    """Exact top-k by magnitude (ops.select_largest at threshold 0: a radix select in two
    streaming reads, indices in increasing order): the quality reference."""

    default_momentum_masking = 0.0

    def select(self, flat, ctx):
        return ops.select_largest(flat, 0, self.capacity(flat.shape))


class ThresholdSparsifier(Sparsifier):
    """A threshold from a sample of the tensor (DGC's estimate) that passes about
    candidates_per_slot x capacity elements, optionally adapted toward that
    count by adapt_rounds counting passes."""

    #: The candidates_per_slot a None asks for (see DGC and DRAGONN).
    default_candidates_per_slot = 1.0

    def __init__(self, ratio=DEFAULT_RATIO, momentum=AUTO, sample_fraction=0.01, min_samples=512,
                 adapt_rounds=0, momentum_masking=None, candidates_per_slot=None, warmup_steps=EPOCH):
        super().__init__(ratio, momentum, momentum_masking, warmup_steps)
        if not isinstance(adapt_rounds, int) or adapt_rounds < 0:
            raise ValueError(f"{type(self).__name__}: adapt_rounds must be an integer >= 0, got {adapt_rounds!r}")
        if candidates_per_slot is None:
            candidates_per_slot = self.default_candidates_per_slot
        if not (isinstance(candidates_per_slot, (int, float)) and candidates_per_slot >= 1):
            raise ValueError(f"{type(self).__name__}: candidates_per_slot is how many elements the threshold "
                             f"aims to pass per slot sent and must be >= 1, got {candidates_per_slot!r}")
        self.sample_fraction = sample_fraction
        self.min_samples = min_samples
        self.adapt_rounds = adapt_rounds
        self.candidates_per_slot = float(candidates_per_slot)

    def threshold(self, flat, ctx):
        passing = min(1.0, self.candidates_per_slot * self.ratio)
        threshold = estimate_threshold(flat, passing, ctx.seed(salt=1), self.sample_fraction, self.min_samples)
        target = min(flat.shape.num_elements(), math.ceil(self.candidates_per_slot * self.capacity(flat.shape)))
        return adapt_threshold(flat, threshold, target, self.adapt_rounds)


class DGC(ThresholdSparsifier):
    """Deep Gradient Compression's selection: a threshold from a 1% sample, then
    every element above it, compacted into the capacity (the largest ones if
    more were selected, DGC's hierarchical selection). The
    threshold aims at twice the capacity, so the slots fill with the largest
    of the elements above it, not with fewer when the sample's estimate runs
    high (benchmarks/results/convergence.md, "candidates" rows). The selection is
    ops.select_largest: the largest elements at or above the threshold, exactly, in
    two streaming reads (indices in increasing order, empty slots -1)."""

    default_momentum_masking = 0.0
    default_candidates_per_slot = 2.0

    def select(self, flat, ctx):
        return ops.select_largest(flat, self.threshold(flat, ctx), self.capacity(flat.shape))


class DRAGONN(ThresholdSparsifier):
    """DRAGONN (Wang et al., ICML'22): DGC's sampled threshold, then one pass that
    hashes every element above it into the capacity's slots (ops.hash_select):
    no prefix sum, no compaction. The threshold aims at twice the slots, and
    the slots are cut into buckets of bucket_size; an element hashes to a
    bucket, which keeps the largest elements hashed to it. The paper hashes to
    single slots and keeps the last written: with one slot per bucket, kept the
    largest, about 86% of the slots fill, with 84% of the top-k's squared
    magnitude; buckets of 4 fill 98%, with 97% of it (a bucket settles by up to
    bucket_size atomic maxima per element above the threshold, still in one
    pass). On the digits MLP under Adam, over 6 seeds, DRAGONN(0.1) reached the
    target accuracy in 1.22x dense's steps with buckets of 4, 1.15x with buckets
    of 2 and 1.34x with single slots, where DGC, which keeps the exact largest,
    took 1.14x (benchmarks/results/dragonn_mlp_adam_6seeds.md). adapt_rounds > 0 adds
    counting passes, which DRAGONN's one-pass design leaves out by default."""

    default_momentum_masking = 0.5
    default_candidates_per_slot = 2.0

    def __init__(self, ratio=DEFAULT_RATIO, momentum=AUTO, sample_fraction=0.01, min_samples=512,
                 adapt_rounds=0, momentum_masking=None, candidates_per_slot=None, bucket_size=4,
                 warmup_steps=EPOCH):
        super().__init__(ratio, momentum, sample_fraction, min_samples, adapt_rounds, momentum_masking,
                         candidates_per_slot, warmup_steps)
        if not isinstance(bucket_size, int) or isinstance(bucket_size, bool) or bucket_size < 1:
            raise ValueError(f"{type(self).__name__}: bucket_size is how many slots an element hashes to "
                             f"and must be an integer >= 1, got {bucket_size!r}")
        self.bucket_size = bucket_size

    def select(self, flat, ctx):
        return ops.hash_select(flat, self.threshold(flat, ctx), ctx.seed(salt=2), self.capacity(flat.shape),
                               self.bucket_size)


class RandomK(Sparsifier):
    """k uniformly drawn elements (with replacement), the same k on every worker
    (a seed of tensor name and step), so their values add up: allreduce.

    The k positions are drawn in increasing order (sorted_uniform_positions), so
    the gather, the residual's update and the decode read and write memory in
    order, and a position drawn twice sits next to its repeat, which the decode
    skips (ops.sparse_decode adds each entry)."""

    def payload_specs(self, shape, dtype):
        return [[PayloadSpec((self.capacity(shape),), tf.as_dtype(dtype), Collective.ALLREDUCE)]]

    def compress(self, grad, state, ctx):
        n = grad.shape.num_elements()
        flat = self._accumulate(grad, state)
        positions = sorted_uniform_positions(n, self.capacity(grad.shape), ctx.seed(salt=3))
        values = tf.gather(flat, positions)
        with tf.control_dependencies([values]):
            self._clear_sent(flat, positions, grad.shape, state)
        repeat = tf.concat([[False], tf.equal(positions[1:], positions[:-1])], axis=0)
        decode_at = tf.where(repeat, tf.constant(-1, positions.dtype), positions)

        def finish(summed):
            # The mean's 1/K is applied in the decode's pass (sparse_decode's divisor).
            dense = ops.sparse_decode(summed[0], decode_at, n, divisor=ctx.num_workers if ctx.average else 1)
            return self.hand_off(tf.reshape(dense, grad.shape), state)
        return Round([Payload(values, Collective.ALLREDUCE)], finish)


# Gaps summed per row of this many before the rows' offsets are added: TensorFlow's
# cumsum runs on one thread, so one long scan costs twice what the rows do.
_SCAN_ROW = 1024


def sorted_uniform_positions(n, k, seed):
    """k positions drawn uniformly from [0, n) with replacement, in increasing
    order, without a sort: the order statistics of k uniform draws are the
    cumulative sums of k + 1 exponential draws over their total. The draws are
    float32 (an exponential's tail is cut at 16, where its chance per draw is
    1e-7), their sums float64, so that positions up to 2^31 keep their
    resolution. Index dtype as ops.index_dtype(n)."""
    gaps = tf.cast(-tf.math.log1p(-tf.random.stateless_uniform([k + 1], seed, dtype=tf.float32)), tf.float64)
    rows = -(-(k + 1) // _SCAN_ROW)
    within = tf.cumsum(tf.reshape(tf.pad(gaps, [[0, rows * _SCAN_ROW - (k + 1)]]), [rows, _SCAN_ROW]), axis=1)
    ends = tf.reshape(within + tf.cumsum(within[:, -1], exclusive=True)[:, None], [-1])
    positions = tf.cast(ends[:k] / ends[k] * n, tf.int64)
    return tf.cast(tf.minimum(positions, n - 1), ops.index_dtype(n))
