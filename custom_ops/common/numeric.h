// Numeric helpers shared by every op family's per-element logic (CPU, CUDA and
// the standalone CUDA tests). No TensorFlow here.
#ifndef TFCOMP_CUSTOM_OPS_COMMON_NUMERIC_H_
#define TFCOMP_CUSTOM_OPS_COMMON_NUMERIC_H_

#include <cmath>

#if defined(__CUDACC__)
#define TFCOMP_HOST_DEVICE __host__ __device__
#else
#define TFCOMP_HOST_DEVICE
#endif

namespace tfcomp {

// The type elements are compared and summed in: float for float16, bfloat16
// and float32; double for float64.
template <typename T>
struct Accumulator {
  using type = float;
};
template <>
struct Accumulator<double> {
  using type = double;
};

// |x| in the accumulator type, by clearing the sign bit (NaN stays NaN, -0 is
// +0). Not `v < 0 ? -v : v`, which keeps -0 and NaN's sign and so compiles to
// a branch, mispredicted on half of a gradient's elements: the sampled
// threshold took ~20 cycles per sample with it, ~4 without.
template <typename T>
TFCOMP_HOST_DEVICE inline typename Accumulator<T>::type AbsValue(T x) {
  using Acc = typename Accumulator<T>::type;
  const Acc v = static_cast<Acc>(x);
#if defined(__CUDA_ARCH__)
  return fabs(v);
#else
  return std::fabs(v);
#endif
}

}  // namespace tfcomp

#endif  // TFCOMP_CUSTOM_OPS_COMMON_NUMERIC_H_
