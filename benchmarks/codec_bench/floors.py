"""The memory-traffic floor of each compressor's whole codec: the bytes per gradient
element that its encode and decode must at least read and write, whatever the kernels.
docs/compressors.md states the same table.

b is the gradient's element size, i an index's (4 for int32), r the fraction of elements
a sparsifier's slots hold (capacity / n) and K the number of workers. Error feedback
reads the gradient and the residual and writes the residual back (3b); a payload is
written once by encode and read once per worker by decode; the result is written once.
Worker momentum, which the benchmark leaves off, would add a read and a write of the
velocity (2b). The low-rank floors count the thin products' reads of M (one per
product) and leave out the factors, which are smaller than M by its compression rate.
"""
import tensorflow as tf

from tfcomp.compressors import lowrank, sign, sparse
from tfcomp.compressors.cast import FP16, NoCompression


def floor_bytes_per_element(compressor, shape, dtype, num_workers):
    """(encode, decode) bytes per element of a gradient of this shape and dtype."""
    b = tf.as_dtype(dtype).size
    k = num_workers
    n = max(1, tf.TensorShape(shape).num_elements())
    if isinstance(compressor, NoCompression):
        return 0.0, 2.0 * b  # the sum read, the mean written
    if isinstance(compressor, FP16):  # a float16 gradient is sent as it is
        return (0.0 if tf.as_dtype(dtype) == tf.float16 else b + 2.0), 2.0 + b
    if isinstance(compressor, sign.EFSignSGD):
        return 3.0 * b + 1 / 8, k / 8 + b
    if isinstance(compressor, sign.SignSGD):
        return b + 1 / 8, k / 8 + b
    if isinstance(compressor, sparse.RandomK):
        r = compressor.capacity(shape) / n
        return 3.0 * b + r * b, r * b + b
    if isinstance(compressor, sparse.Sparsifier):
        r = compressor.capacity(shape) / n
        entry = b + tf.as_dtype(compressor.payload_specs(shape, dtype)[0][1].dtype).size
        return 3.0 * b + r * entry, k * r * entry + b
    if isinstance(compressor, lowrank.PowerSGD):
        return 3.0 * b + b, b + b  # EF, M Q; then M^T P and the result
    if isinstance(compressor, lowrank.ACPSGD):
        return 3.0 * b + b, b  # EF, one product; the result
    raise ValueError(f"no memory floor stated for {type(compressor).__name__}")


def floor_in_reads(compressor, shape, dtype, num_workers):
    """The whole codec's floor in streaming reads of the gradient (b bytes per element)."""
    encode, decode = floor_bytes_per_element(compressor, shape, dtype, num_workers)
    return (encode + decode) / tf.as_dtype(dtype).size

