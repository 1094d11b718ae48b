"""Fusion: many payloads into a few buffers per collective, and back.

Allreduce buffers hold one dtype each (they are summed). Allgather buffers are
plain bytes, so payloads of every dtype share them; the K gathered copies come
back stacked and are split and bitcast to their own dtypes again.

TensorFlow's collectives move only WIRE_DTYPES, so byte buffers travel as
int32 words (each payload padded to whole words) and allreduce payloads of
other float types (bfloat16) are summed in float32.
"""
import tensorflow as tf

from tfcomp.exchange.buckets import buckets
from tfcomp.compressors.base import Collective


WIRE_DTYPES = (tf.float16, tf.float32, tf.float64, tf.int32, tf.int64)


def nbytes(t):
    return t.shape.num_elements() * t.dtype.size


def _padded_nbytes(t):
    return -(-nbytes(t) // 4) * 4


def _to_words(t):
    """t's bytes, zero-padded to whole 4-byte words, as int32."""
    flat = tf.reshape(t, [-1])
    raw = flat if t.dtype == tf.uint8 else tf.reshape(tf.bitcast(flat, tf.uint8), [-1])
    raw = tf.pad(raw, [[0, _padded_nbytes(t) - nbytes(t)]])
    return tf.bitcast(tf.reshape(raw, [-1, 4]), tf.int32)


def _from_bytes(stacked, dtype, shape):
    """[K, nbytes] uint8 -> [K, *shape] of dtype."""
    k = tf.shape(stacked)[0]
    if dtype == tf.uint8:
        return tf.reshape(stacked, tf.concat([[k], shape], 0))
    if dtype.size == 1:
        return tf.reshape(tf.bitcast(stacked, dtype), tf.concat([[k], shape], 0))
    values = tf.bitcast(tf.reshape(stacked, [k, -1, dtype.size]), dtype)
    return tf.reshape(values, tf.concat([[k], shape], 0))


def positions_by_dtype(tensors):
    """{dtype: [positions of the tensors of that dtype]}, in order of first appearance."""
    positions = {}
    for i, t in enumerate(tensors):
        positions.setdefault(t.dtype, []).append(i)
    return positions


def allreduce_fused(tensors, collectives, cap_bytes):
    """Sums of tensors over workers, fused per dtype into buffers of at most cap_bytes."""
    results = [None] * len(tensors)
    groups = []
    for indices in positions_by_dtype(tensors).values():
        for group in buckets([nbytes(tensors[i]) for i in indices], cap_bytes):
            groups.append([indices[j] for j in group])
    buffers = [tf.concat([on_wire(tf.reshape(tensors[i], [-1])) for i in g], 0) for g in groups]
    for group, summed in zip(groups, collectives.allreduce(buffers)):
        parts = tf.split(summed, [tensors[i].shape.num_elements() for i in group])
        for i, part in zip(group, parts):
            results[i] = tf.reshape(tf.cast(part, tensors[i].dtype), tensors[i].shape)
    return results


def allgather_fused(tensors, collectives, cap_bytes):
    """Every worker's copy of each tensor, [K, *shape], through byte buffers of at most cap_bytes."""
    results = [None] * len(tensors)
    groups = buckets([_padded_nbytes(t) for t in tensors], cap_bytes)
    buffers = [tf.concat([_to_words(tensors[i]) for i in g], 0) for g in groups]
    for group, gathered in zip(groups, collectives.allgather(buffers)):
        sizes = [_padded_nbytes(tensors[i]) for i in group]
        stacked = tf.reshape(tf.bitcast(gathered, tf.uint8), [collectives.num_workers, sum(sizes)])
        for i, part in zip(group, tf.split(stacked, sizes, axis=1)):
            part = part[:, :nbytes(tensors[i])]
            results[i] = _from_bytes(part, tensors[i].dtype, tensors[i].shape)
    return results


def on_wire(t):
    """t as a dtype the collectives move (float32 for bfloat16 and the like)."""
    return t if t.dtype in WIRE_DTYPES else tf.cast(t, tf.float32)


def run_collective(kind, tensors, collectives, cap_bytes):
    if not tensors:
        return []
    if kind is Collective.ALLREDUCE:
        return allreduce_fused(tensors, collectives, cap_bytes)
    return allgather_fused(tensors, collectives, cap_bytes)
