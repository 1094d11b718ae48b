// Per-element logic of the low-rank residual and product ops, shared by the
// CPU kernels, the CUDA kernels and the standalone CUDA test. No TensorFlow here.
//
// The op is the error-feedback update of low-rank gradient compression
// (PowerSGD, ACP-SGD): given the compensated gradient m[n, k] and its rank-r
// approximation p[n, r] q[k, r]^T, the residual kept for the next step is
//
//   residual[i, c] = m[i, c] - sum_j p[i, j] * q[c, j],
//
// computed in one pass over m. Every device evaluates an element the same way:
// the accumulator (float for float16, bfloat16 and float32; double for
// float64) starts at m[i, c], then for j = 0, 1, ..., r - 1 in that order
//
//   acc = fma(-p[i, j], q[c, j], acc)     (acc - p q, rounded once),
//
// and the result is acc rounded to T. So the CPU (any instruction set, any
// number of threads) and the GPU give the same bits, except where a device
// flushes subnormals to zero (TensorFlow's CPU threads do, CUDA does not).
// NaN and Inf propagate as in the arithmetic: a NaN in m[i, c] gives a NaN
// there, a NaN in p[i, :] a row of NaNs, an Inf in q[c, :] a column of +-Inf
// (NaN where it meets p = 0 or an opposite Inf).
//
// The product op is the decode of the same compressors: the estimate
//
//   product[i, c] = sum_j p[i, j] * q[c, j],
//
// written once. Its accumulator starts at +0 and takes acc = fma(p[i, j],
// q[c, j], acc) for j = 0, 1, ..., r - 1, which is ResidualStep(acc, -p, q): the
// product is the residual of a zero m with p negated, and the kernels compute it
// that way, without reading an m.
#ifndef TFCOMP_CUSTOM_OPS_LOWRANK_CC_KERNELS_LOWRANK_CORE_H_
#define TFCOMP_CUSTOM_OPS_LOWRANK_CC_KERNELS_LOWRANK_CORE_H_

#include <cstdint>
#if !defined(__CUDA_ARCH__)
#include <cmath>
#endif

#include "custom_ops/common/numeric.h"

namespace tfcomp {
namespace lowrank {

using ::tfcomp::Accumulator;

// a * b + c, rounded once.
TFCOMP_HOST_DEVICE inline float FusedMulAdd(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return fmaf(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}
TFCOMP_HOST_DEVICE inline double FusedMulAdd(double a, double b, double c) {
#if defined(__CUDA_ARCH__)
  return fma(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}

// One step of an element: acc - p * q, rounded once.
template <typename Acc>
TFCOMP_HOST_DEVICE inline Acc ResidualStep(Acc acc, Acc p, Acc q) {
  return FusedMulAdd(-p, q, acc);
}

// Element (i, c) of m - p q^T for row-major m[n, k], p[n, r], q[k, r]: the
// reference every kernel matches bit for bit (subnormals aside, see above).
template <typename T>
TFCOMP_HOST_DEVICE inline T ResidualElement(const T* m, const T* p, const T* q, int64_t i,
                                            int64_t c, int64_t k, int64_t r) {
  using Acc = typename Accumulator<T>::type;
  Acc acc = static_cast<Acc>(m[i * k + c]);
  for (int64_t j = 0; j < r; ++j) {
    acc = ResidualStep(acc, static_cast<Acc>(p[i * r + j]), static_cast<Acc>(q[c * r + j]));
  }
  return static_cast<T>(acc);
}

// Element (i, c) of p q^T for row-major p[n, r], q[k, r], as the product op
// computes it (see above).
template <typename T>
TFCOMP_HOST_DEVICE inline T ProductElement(const T* p, const T* q, int64_t i, int64_t c, int64_t k,
                                           int64_t r) {
  using Acc = typename Accumulator<T>::type;
  Acc acc = Acc(0);
  for (int64_t j = 0; j < r; ++j) {
    acc = ResidualStep(acc, -static_cast<Acc>(p[i * r + j]), static_cast<Acc>(q[c * r + j]));
  }
  return static_cast<T>(acc);
}

}  // namespace lowrank
}  // namespace tfcomp

#endif  // TFCOMP_CUSTOM_OPS_LOWRANK_CC_KERNELS_LOWRANK_CORE_H_
