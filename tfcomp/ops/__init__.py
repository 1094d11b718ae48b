"""tfcomp's custom ops: loads the one op library and wraps its ops.

The library (the file named by $TFCOMP_OPS_LIBRARY, else
tfcomp/_tfcomp_ops.tf<installed TensorFlow version>.so where a checkout holds
one per stack, else tfcomp/_tfcomp_ops.so) is loaded once, on first use. If it is missing or was built against another
TensorFlow, OpLibraryError says how to rebuild it: tfcomp never falls back to
slower code behind the user's back.

Cast and divide in one pass (FP16, the dense mean): see cast_divide, and
custom_ops/cast/cc/kernels/cast_core.h.

The low-rank compressors' error feedback, estimate and factors (PowerSGD,
ACP-SGD): see lowrank_residual, lowrank_product, lowrank_compensate and
lowrank_project, and custom_ops/lowrank/cc/kernels/lowrank_core.h.

Hashed selection and sparse decoding (DRAGONN): see hash_select and
sparse_decode, and custom_ops/sparse/cc/kernels/sparse_core.h; scale_at is
error feedback's update of the residual and the velocity at the sent indices.

Sign packing (signSGD, EF-signSGD):
  * element i of the flattened tensor is bit i % 32 of word i // 32, least
    significant bit first; padding bits past n are 0;
  * the bit is 0 for NaN and for negative values (sign bit set, nonzero
    magnitude), 1 for positive ones; +0 and -0 pack as the caller's zero_bit
    (positive by default), +Inf as positive, -Inf and negative subnormals as
    negative, NaN as negative. The rule reads the bit pattern, so it does not
    depend on a device flushing subnormals to zero;
  * scale = mean |x| (0 for an empty tensor); NaN or Inf in x make the scale
    NaN or Inf, so a diverged gradient stays visible after unpacking;
  * the majority vote of K workers is sign(#positive - #negative) per element:
    +1, -1, or 0 on a tie (possible when K is even), as sign(sum of +-1) is;
  * sign_ef_pack fuses EF-signSGD's encode (p = g + e; words of p, mean |p|,
    the new residual) and sign_scaled_sum its decode (weight * the sum of the
    workers' +-scale, in worker order).

Malformed input (a wrong rank, shape, length or dtype, a negative count or one
the words cannot hold, an index outside [0, n) other than -1, a seed that is not
an int64 vector of 2) raises tf.errors.InvalidArgumentError from the kernel,
ValueError from shape inference when the graph's static shapes show it, or
TypeError here for a dtype an op does not take. Integer inputs are checked here
rather than converted, since TensorFlow casts a NumPy array to an op's input
dtype silently (int64 indices would wrap to int32). The GPU sparse_decode and
scale_at skip out-of-range indices instead of checking them (they stay in device memory).

TensorFlow runs CPU kernels with subnormals flushed to zero (FTZ/DAZ): there the
sparse ops and the low-rank ops compare and add a subnormal input as +-0; CUDA
does not flush. Only sign_pack's sign bits read the bit pattern.
"""
import tensorflow as tf

import tfcomp.autograph  # noqa: F401  # pylint: disable=unused-import  # before any tfcomp graph is traced

from tfcomp.ops.loader import FLOAT_DTYPES, REBUILD_HINT, OpLibraryError, build_info, library, library_path
from tfcomp.ops.cast import cast_divide
from tfcomp.ops.lowrank import lowrank_compensate, lowrank_product, lowrank_project, lowrank_residual
from tfcomp.ops.sign import sign_ef_pack, sign_majority, sign_pack, sign_scaled_sum, sign_unpack
from tfcomp.ops.sparse import hash_select, index_dtype, sampled_threshold, scale_at, select_largest, sparse_decode

__all__ = ["FLOAT_DTYPES", "REBUILD_HINT", "OpLibraryError", "build_info", "library", "library_path",
           "cast_divide", "lowrank_compensate", "lowrank_product", "lowrank_project", "lowrank_residual", "sign_ef_pack", "sign_majority", "sign_pack",
           "sign_scaled_sum", "sign_unpack", "hash_select", "index_dtype", "sampled_threshold", "scale_at", "select_largest",
           "sparse_decode"]

for _op in ("TfcompCastDivide", "TfcompSignPack", "TfcompSignEfPack", "TfcompSignUnpack", "TfcompSignMajority",
            "TfcompSignScaledSum", "TfcompHashSelect", "TfcompSampledThreshold", "TfcompSparseDecode",
            "TfcompLowRankResidual", "TfcompLowRankProduct", "TfcompSelectLargest", "TfcompScaleAt"):
    tf.no_gradient(_op)
