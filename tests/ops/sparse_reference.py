"""NumPy references of the sparse ops (custom_ops/sparse/cc/kernels/sparse_core.h)."""
import numpy as np

MASK64 = (1 << 64) - 1
MASK32 = (1 << 32) - 1


def splitmix64(x):
    x = (x + 0x9E3779B97F4A7C15) & MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
    return x ^ (x >> 31)


def hash_from_seed(seed0, seed1):
    r0 = splitmix64((seed0 & MASK64) ^ splitmix64(seed1 & MASK64))
    r1 = splitmix64(r0)
    return r0, r1, splitmix64(r1)


def hash_slot(params, i, m):
    """Multiply-add-shift: floor(((a0 i0 + a1 i1 + b) mod 2^64) m / 2^64), i = i1 2^32 + i0."""
    a0, a1, b = params
    i = int(i)
    return ((((a0 * (i & MASK32)) + a1 * (i >> 32) + b) & MASK64) * m) >> 64


def slot_claim(magnitude, i):
    """A selected element's claim on its slot (sparse_core.h's SlotClaim): float32(|g|)'s
    bits with the top bit set, then the index; the slot keeps the largest."""
    bits = int(np.array(magnitude, np.float32).view(np.uint32)) & 0x7FFFFFFF
    bits = 0x7FC00000 if bits > 0x7F800000 else 0 if bits < 0x00800000 else bits  # one NaN; denormals as 0
    return ((bits | 0x80000000) << 32) | (int(i) & MASK32)


def hash_select(g, threshold, seed, capacity, bucket_size=1):
    """Sequential Algorithm 1 in buckets of bucket_size slots (the last may be shorter): a
    bucket keeps the bucket_size largest magnitudes hashed to it, largest first
    (float32(|g|), NaN above +Inf, denormals as 0), ties to the larger index."""
    acc = np.float64 if g.dtype == np.float64 else np.float32
    flat = g.reshape(-1).astype(acc)
    with np.errstate(over="ignore"):  # the op takes the threshold in g's dtype
        t = np.array(threshold).astype(g.dtype).astype(acc)
    with np.errstate(invalid="ignore"):
        selected = np.nonzero(~(np.abs(flat) < t))[0]
    params = hash_from_seed(*seed)
    buckets = -(-capacity // bucket_size)
    hashed = [[] for _ in range(buckets)]
    with np.errstate(over="ignore"):  # float64 magnitudes beyond float32 claim as +Inf
        magnitudes = np.abs(flat[selected]).astype(np.float32)
    for i, magnitude in zip(selected if capacity else (), magnitudes):  # no slots: nothing is kept
        hashed[hash_slot(params, i, buckets)].append(slot_claim(magnitude, i))
    claims = [0] * capacity
    for b, bucket in enumerate(hashed):
        begin = b * bucket_size
        kept = sorted(bucket, reverse=True)[:min(capacity, begin + bucket_size) - begin]
        claims[begin:begin + len(kept)] = kept
    indices = np.array([c & MASK32 if c else -1 for c in claims], np.int64)
    values = np.zeros(capacity, g.dtype)
    values[indices >= 0] = g.reshape(-1)[indices[indices >= 0]]
    return values, indices, selected


def _acc(dtype):
    return np.float64 if dtype == np.float64 else np.float32


def sparse_decode(values, indices, n, divisor=1):
    """Entries added in list order in the element dtype, then, for divisor K > 1, each
    sum times 1 / K in the accumulation type (float32, float64 for float64), rounded once."""
    dense = np.zeros(n, values.dtype)
    for v, i in zip(values, indices):
        if i >= 0:
            dense[i] += v
    if divisor != 1:
        acc = _acc(values.dtype)
        with np.errstate(invalid="ignore", over="ignore"):
            dense = (dense.astype(acc) * (acc(1) / acc(divisor))).astype(values.dtype)
    return dense


def scale_at(x, indices, factor):
    """x with each distinct listed element (index >= 0) times factor in the accumulation
    type, rounded once; factor 0 clears it to +0 (NaN and Inf too)."""
    out = x.reshape(-1).copy()
    listed = np.unique(np.asarray(indices, np.int64)[np.asarray(indices) >= 0])
    acc = _acc(x.dtype)
    if factor == 0:
        out[listed] = 0
    elif factor != 1:
        with np.errstate(invalid="ignore", over="ignore"):
            out[listed] = (out[listed].astype(acc) * acc(factor)).astype(x.dtype)
    return out.reshape(x.shape)


SAMPLE_RUN = 256


def sample_positions(seed, num_samples, n):
    """Where ops.sampled_threshold samples a tensor of n > num_samples elements."""
    params = hash_from_seed(*seed)
    runs = -(-num_samples // SAMPLE_RUN)
    stratum = n // runs
    span = stratum - SAMPLE_RUN if stratum > SAMPLE_RUN else 0
    starts = [run * stratum + hash_slot(params, run, span + 1) for run in range(runs)]
    positions = np.array([starts[s // SAMPLE_RUN] + s % SAMPLE_RUN for s in range(num_samples)])
    return np.minimum(positions, n - 1)


def sampled_threshold(g, seed, num_samples, k):
    flat = g.reshape(-1)
    if flat.size == 0:
        return np.zeros((), g.dtype)
    sample = flat if flat.size <= num_samples else flat[sample_positions(seed, num_samples, flat.size)]
    magnitude = np.abs(sample.astype(np.float64 if g.dtype == np.float64 else np.float32))
    magnitude[np.isnan(magnitude)] = np.inf
    return np.sort(magnitude)[::-1][min(k, magnitude.size) - 1].astype(g.dtype)
