// Device-dispatched functors of the low-rank residual, product, compensate and project ops; CPU in
// lowrank_kernels.cc (the loops of lowrank_cpu.h), GPU in lowrank_kernels.cu.cc
// (lowrank_cuda_kernels.cu.h), both on the per-element logic of lowrank_core.h.
#ifndef TFCOMP_CUSTOM_OPS_LOWRANK_CC_KERNELS_LOWRANK_KERNELS_H_
#define TFCOMP_CUSTOM_OPS_LOWRANK_CC_KERNELS_LOWRANK_KERNELS_H_

#include <cstdint>

#include "lowrank_core.h"

namespace tensorflow {
class OpKernelContext;
}

namespace tfcomp {
namespace functor {

// out[n, k] = m[n, k] - p[n, r] q[k, r]^T, row-major, n, k >= 1, r >= 0.
// out may be m (the op forwards m's buffer when it can).
template <typename Device, typename T>
struct LowRankResidual {
  void operator()(tensorflow::OpKernelContext* ctx, const T* m, const T* p, const T* q, int64_t n,
                  int64_t k, int64_t r, T* out);
};

// out[n, k] = p[n, r] q[k, r]^T, row-major, n, k >= 1, r >= 0 (see ProductElement).
template <typename Device, typename T>
struct LowRankProduct {
  void operator()(tensorflow::OpKernelContext* ctx, const T* p, const T* q, int64_t n, int64_t k,
                  int64_t r, T* out);
};

// m[n, k] = g + e and p[n, r] = m q[k, r], row-major, n, k >= 1, r >= 0
// (CompensatedElement, CompensatedProductElement). m is neither g nor e.
template <typename Device, typename T>
struct LowRankCompensate {
  void operator()(tensorflow::OpKernelContext* ctx, const T* g, const T* e, const T* q, int64_t n,
                  int64_t k, int64_t r, T* m, T* p);
};

// q[k, r] = m[n, k]^T p[n, r], row-major, k, r >= 1, n >= 0 (ProjectElement).
template <typename Device, typename T>
struct LowRankProject {
  void operator()(tensorflow::OpKernelContext* ctx, const T* m, const T* p, int64_t n, int64_t k,
                  int64_t r, T* q);
};

}  // namespace functor
}  // namespace tfcomp

#endif  // TFCOMP_CUSTOM_OPS_LOWRANK_CC_KERNELS_LOWRANK_KERNELS_H_
