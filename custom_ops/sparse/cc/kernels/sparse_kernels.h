// Device-dispatched functors of the sparse ops; CPU in sparse_kernels.cc, GPU
// in sparse_kernels.cu.cc, both on the per-element logic of sparse_core.h.
#ifndef TFCOMP_CUSTOM_OPS_SPARSE_CC_KERNELS_SPARSE_KERNELS_H_
#define TFCOMP_CUSTOM_OPS_SPARSE_CC_KERNELS_SPARSE_KERNELS_H_

#include <cstdint>

#include "sparse_core.h"

namespace tensorflow {
class OpKernelContext;
}

namespace tfcomp {
namespace functor {

// indices[capacity] and values[capacity] from g[n] in buckets of bucket_size
// slots, empty slots (-1, 0) included; threshold points to one element
// (device memory on GPUs).
template <typename Device, typename T, typename Index>
struct HashSelect {
  void operator()(tensorflow::OpKernelContext* ctx, const T* g, int64_t n, const T* threshold,
                  sparse::HashParams hash, int64_t capacity, int64_t bucket_size, T* values,
                  Index* indices);
};

// threshold[0] = the k-th largest sampled magnitude of g[n] (see sparse_core.h).
template <typename Device, typename T>
struct SampledThreshold {
  void operator()(tensorflow::OpKernelContext* ctx, const T* g, int64_t n, sparse::HashParams hash,
                  int64_t num_samples, int64_t k, T* threshold);
};

// dense[n] = 0, then dense[indices[j]] += values[j] for j in [0, count) with
// indices[j] >= 0, in order, then each element times DecodeWeight(divisor)
// (skipped for divisor 1). Indices were checked to lie in [-1, n) on CPUs.
template <typename Device, typename T, typename Index>
struct SparseDecode {
  void operator()(tensorflow::OpKernelContext* ctx, const T* values, const Index* indices,
                  int64_t count, int64_t n, int64_t divisor, T* dense);
};

// out[n] = x[n] (out may be x itself: the buffer forwarded), then out[i] =
// ScaledAt(x[i], factor) for every distinct i among indices[0, count) with
// 0 <= i < n (checked to lie in [-1, n) on CPUs).
template <typename Device, typename T, typename Index>
struct ScaleAt {
  void operator()(tensorflow::OpKernelContext* ctx, const T* x, const Index* indices,
                  int64_t count, int64_t n, T factor, T* out);
};

}  // namespace functor
}  // namespace tfcomp

#endif  // TFCOMP_CUSTOM_OPS_SPARSE_CC_KERNELS_SPARSE_KERNELS_H_
