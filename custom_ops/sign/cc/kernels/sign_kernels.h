// Device-dispatched functors of the sign-packing ops. The CPU
// specializations live in sign_kernels.cc, the GPU ones in sign_kernels.cu.cc;
// both build on the per-element logic of sign_core.h.
#ifndef TFCOMP_CUSTOM_OPS_SIGN_CC_KERNELS_SIGN_KERNELS_H_
#define TFCOMP_CUSTOM_OPS_SIGN_CC_KERNELS_SIGN_KERNELS_H_

#include <cstdint>

#include "sign_core.h"
#include "Eigen/Core"

namespace tensorflow {
class OpKernelContext;
}

namespace tfcomp {
namespace sign {
template <>
struct FloatLayout<Eigen::half> : Binary16Layout {};
template <>
struct FloatLayout<Eigen::bfloat16> : BFloat16Layout {};
}  // namespace sign
}  // namespace tfcomp

namespace tfcomp {
namespace functor {

// words[NumWords(n)] and scale[1] = mean |x| are written from x[n]; +-0
// pack as zero_bit.
template <typename Device, typename T>
struct SignPack {
  void operator()(tensorflow::OpKernelContext* ctx, const T* x, int64_t n, uint32_t zero_bit,
                  uint32_t* words, T* scale);
};

// Error-feedback sign pack: p = g + e; scale[1] = mean |p|, words[NumWords(n)]
// the signs of p (+-0 as zero_bit), residual[n] = p - (+-scale).
template <typename Device, typename T>
struct SignEfPack {
  void operator()(tensorflow::OpKernelContext* ctx, const T* g, const T* e, int64_t n,
                  uint32_t zero_bit, uint32_t* words, T* scale, T* residual);
};

// out[n] = weight * sum over the k rows of words[k, num_words] of
// +-scales[row], summed in row order.
template <typename Device, typename T>
struct SignScaledSum {
  void operator()(tensorflow::OpKernelContext* ctx, const uint32_t* words, const T* scales,
                  int64_t k, int64_t num_words, int64_t n, T weight, T* out);
};

// out[n] = +-scale[0] from the bits of words.
template <typename Device, typename T>
struct SignUnpack {
  void operator()(tensorflow::OpKernelContext* ctx, const uint32_t* words,
                  const T* scale, int64_t n, T* out);
};

// out[n] = majority vote of the k rows of words[k, num_words].
template <typename Device, typename T>
struct SignMajority {
  void operator()(tensorflow::OpKernelContext* ctx, const uint32_t* words,
                  int64_t k, int64_t num_words, int64_t n, T* out);
};

}  // namespace functor
}  // namespace tfcomp

#endif  // TFCOMP_CUSTOM_OPS_SIGN_CC_KERNELS_SIGN_KERNELS_H_
