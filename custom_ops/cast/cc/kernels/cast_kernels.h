// Device-dispatched functor of the cast-and-divide op; CPU in cast_kernels.cc
// (the loops of cast_cpu.h), GPU in cast_kernels.cu.cc (cast_cuda_kernels.cu.h),
// both on the per-element logic of cast_core.h.
#ifndef TFCOMP_CUSTOM_OPS_CAST_CC_KERNELS_CAST_KERNELS_H_
#define TFCOMP_CUSTOM_OPS_CAST_CC_KERNELS_CAST_KERNELS_H_

#include <cstdint>

#include "Eigen/Core"
#include "cast_core.h"

namespace tensorflow {
class OpKernelContext;
}

namespace tfcomp {
namespace cast {

// The core's type for a TensorFlow element type: Eigen::half and
// Eigen::bfloat16 travel as their bit patterns (the same layout).
template <typename T>
struct CoreType {
  using type = T;
};
template <>
struct CoreType<Eigen::half> {
  using type = Half;
};
template <>
struct CoreType<Eigen::bfloat16> {
  using type = BFloat16;
};
static_assert(sizeof(Eigen::half) == sizeof(Half) && sizeof(Eigen::bfloat16) == sizeof(BFloat16),
              "16-bit types must be their bit patterns");

template <typename T>
using Core = typename CoreType<T>::type;

}  // namespace cast

namespace functor {

// out[n] = tf.cast(x[n], Dst) / divisor[0] (cast_core.h). divisor is in the
// device's memory. out may be x when Src is Dst (the op forwards x's buffer).
template <typename Device, typename Src, typename Dst>
struct CastDivide {
  void operator()(tensorflow::OpKernelContext* ctx, const Src* x, int64_t n, const Dst* divisor,
                  Dst* out);
};

}  // namespace functor
}  // namespace tfcomp

#endif  // TFCOMP_CUSTOM_OPS_CAST_CC_KERNELS_CAST_KERNELS_H_
