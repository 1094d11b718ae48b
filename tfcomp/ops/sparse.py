"""Hashed threshold selection, sampled threshold and sparse decode (DRAGONN, DGC);
custom_ops/sparse."""
import tensorflow as tf

from tfcomp.ops.loader import check_dtype, count_tensor, int_attr, integer_tensor, library, seed_tensor


def index_dtype(num_elements):
    """int32 indices while they fit, else int64."""
    return tf.int32 if num_elements <= 2**31 else tf.int64


def hash_select(g, threshold, seed, capacity, bucket_size=1):
    """DRAGONN's hashed threshold selection over g (any shape, flattened).

    Every element with |g| >= threshold (and every NaN) goes to bucket h(i) of
    the `capacity` slots cut into buckets of `bucket_size` consecutive slots (the
    last may be shorter), h a universal hash drawn from seed (int64[2]). A bucket
    keeps the bucket_size largest magnitudes hashed to it, largest first
    (float32(|g|), NaN above +Inf), ties to the larger index, on every device and
    thread count; bucket_size=1 is a slot per element, as in DRAGONN's paper. At
    most 2^32 elements. Returns (values[capacity], indices[capacity]); empty
    slots are (0, -1).
    """
    g = tf.convert_to_tensor(g)
    check_dtype(g.dtype, "hash_select's input")
    capacity = int_attr(capacity, "hash_select's capacity")
    if capacity < 0:
        raise ValueError(f"capacity must be >= 0, got {capacity}")
    bucket_size = int_attr(bucket_size, "hash_select's bucket_size")
    if bucket_size < 1:
        raise ValueError(f"bucket_size must be >= 1, got {bucket_size}")
    n = g.shape.num_elements()
    return library().tfcomp_hash_select(
        g, tf.cast(threshold, g.dtype), seed_tensor(seed, "hash_select's seed"), capacity=capacity,
        bucket_size=bucket_size, Tindex=tf.int64 if n is None else index_dtype(n))


def sampled_threshold(g, seed, num_samples, k):
    """DGC's threshold estimate: the k-th largest |g| among num_samples elements of
    g (flattened) sampled in contiguous runs at offsets drawn from seed (int64[2]);
    NaN counts as +Inf; 0 for an empty g. A scalar of g's dtype."""
    g = tf.convert_to_tensor(g)
    check_dtype(g.dtype, "sampled_threshold's input")
    num_samples = int_attr(num_samples, "sampled_threshold's num_samples")
    k = int_attr(k, "sampled_threshold's k")
    if not 1 <= k <= num_samples:
        raise ValueError(f"need 1 <= k <= num_samples, got k={k}, num_samples={num_samples}")
    return library().tfcomp_sampled_threshold(g, seed_tensor(seed, "sampled_threshold's seed"),
                                              num_samples=num_samples, k=k)


def sparse_decode(values, indices, n, divisor=1):
    """zeros(n) plus values scatter-added at indices, in order; index -1 is skipped.

    divisor K > 1 gives K workers' mean: each element's sum times 1 / K (in
    float, double for float64), once, after the sum, in the same pass. Memory
    floor: n elements written once plus the entries read, each a random
    read-modify-write of an output element.
    """
    values = tf.convert_to_tensor(values)
    check_dtype(values.dtype, "sparse_decode's values")
    indices = integer_tensor(indices, "sparse_decode's indices", (tf.int32, tf.int64))
    divisor = int_attr(divisor, "sparse_decode's divisor")
    if divisor < 1:
        raise ValueError(f"divisor must be >= 1, got {divisor}")
    return library().tfcomp_sparse_decode(values, indices, count_tensor(n, "sparse_decode's n"),
                                          divisor=divisor)


def select_largest(x, threshold, capacity):
    """Exact threshold/top-k selection over x (any shape, flattened).

    Among the elements with |x| >= threshold (and every NaN), the `capacity`
    largest by float32(|x|) (NaN above +Inf, denormals as 0, ties to the larger
    index), all of them if fewer qualify; threshold 0 is exact top-k. Returns
    (values[capacity], indices[capacity]) in increasing index order, padded
    with (0, -1); the same on every device and thread count. A radix select
    (custom_ops/sparse/cc/kernels/select_core.h): two streaming reads of x, no
    sort. At most 2^33 elements.
    """
    x = tf.convert_to_tensor(x)
    check_dtype(x.dtype, "select_largest's input")
    capacity = int_attr(capacity, "select_largest's capacity")
    if capacity < 0:
        raise ValueError(f"capacity must be >= 0, got {capacity}")
    n = x.shape.num_elements()
    return library().tfcomp_select_largest(x, tf.cast(threshold, x.dtype), capacity=capacity,
                                           Tindex=tf.int64 if n is None else index_dtype(n))


def scale_at(x, indices, factor):
    """x with the elements at indices (into x flattened; -1 skipped) multiplied by
    factor, each once however often it is listed; factor 0 clears them to 0 (NaN
    and Inf too). Error feedback's update in O(len(indices)): x's buffer is
    reused when TensorFlow allows (else copied first, one pass over x). factor
    is cast to x's dtype."""
    x = tf.convert_to_tensor(x)
    check_dtype(x.dtype, "scale_at's input")
    indices = integer_tensor(indices, "scale_at's indices", (tf.int32, tf.int64))
    return library().tfcomp_scale_at(x, indices, tf.cast(factor, x.dtype))
