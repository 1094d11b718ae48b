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
//
// The compensate op is the encode's first pass (PowerSGD's P = M Q, ACP-SGD's
// even steps): from the gradient g[n, k] and the residual e[n, k] it writes the
// compensated gradient m = g + e (added in Acc, rounded once to T) and, in the
// same pass, the factor p = m q for q[k, r], so m is not read again for it.
// p[i, j] is a sum over the k columns, evaluated in kDotLanes = 16 lanes the
// way a vector unit does, which every device follows: the columns are padded
// with zeros to a multiple of 16; lane l starts at +0 and takes
//
//   s_l = fma(m[i, c], q[c, j], s_l)   for c = l, l + 16, l + 32, ...,
//
// using m[i, c] as written (rounded to T); then s_l += s_{l+8} for l < 8,
// s_l += s_{l+4} for l < 4, s_l += s_{l+2} for l < 2, and p = s_0 + s_1,
// rounded to T. A padded column takes fma(0, 0, s_l), which turns a -0 lane
// into +0, as the vector loops' zero-filled tails do.
//
// The project op is the other factor (PowerSGD's Q = M^T P, ACP-SGD's odd
// steps): q[c, j] = sum_i m[i, c] p[i, j] for m [n, k] and p [n, r]. The rows
// are cut into blocks of kProjectRows; block b's sum s_b starts at +0 and takes
// s_b = fma(m[i, c], p[i, j], s_b) for its rows i in order, and q = s_0 + s_1 +
// ... + s_last added left to right (+0 for n = 0), rounded to T. Blocks let
// threads split a matrix of few columns while every device and thread count
// still adds in one order.
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

// The compensated gradient's element: g + e in Acc, rounded once to T.
template <typename T>
TFCOMP_HOST_DEVICE inline T CompensatedElement(T g, T e) {
  using Acc = typename Accumulator<T>::type;
  return static_cast<T>(static_cast<Acc>(g) + static_cast<Acc>(e));
}

// Lanes of the compensate op's sums over columns (see above).
constexpr int kDotLanes = 16;

// Sums 16 lanes in the order above: halves, quarters, eighths, then the last two.
template <typename Acc>
TFCOMP_HOST_DEVICE inline Acc SumLanes(Acc* s) {
  for (int half = kDotLanes / 2; half >= 1; half /= 2) {
    for (int l = 0; l < half; ++l) s[l] = s[l] + s[l + half];
  }
  return s[0];
}

// Element (i, j) of p = (g + e) q for row-major g, e [n, k] and q [k, r], as the
// compensate op computes it (see above): the reference every kernel matches.
template <typename T>
TFCOMP_HOST_DEVICE inline T CompensatedProductElement(const T* g, const T* e, const T* q, int64_t i,
                                                      int64_t j, int64_t k, int64_t r) {
  using Acc = typename Accumulator<T>::type;
  Acc s[kDotLanes];
  for (int l = 0; l < kDotLanes; ++l) s[l] = Acc(0);
  const int64_t padded = (k + kDotLanes - 1) / kDotLanes * kDotLanes;
  for (int64_t c = 0; c < padded; ++c) {
    const Acc m = c < k ? static_cast<Acc>(CompensatedElement(g[i * k + c], e[i * k + c])) : Acc(0);
    const Acc qv = c < k ? static_cast<Acc>(q[c * r + j]) : Acc(0);
    s[c % kDotLanes] = FusedMulAdd(m, qv, s[c % kDotLanes]);
  }
  return static_cast<T>(SumLanes(s));
}

// Rows per block of the project op's sums (see above).
constexpr int64_t kProjectRows = 256;

// Element (c, j) of q = m^T p for row-major m [n, k] and p [n, r], as the
// project op computes it (see above): the reference every kernel matches.
template <typename T>
TFCOMP_HOST_DEVICE inline T ProjectElement(const T* m, const T* p, int64_t c, int64_t j, int64_t n,
                                           int64_t k, int64_t r) {
  using Acc = typename Accumulator<T>::type;
  Acc total = Acc(0);
  for (int64_t first = 0; first < n; first += kProjectRows) {
    const int64_t last = first + kProjectRows < n ? first + kProjectRows : n;
    Acc s = Acc(0);
    for (int64_t i = first; i < last; ++i) {
      s = FusedMulAdd(static_cast<Acc>(m[i * k + c]), static_cast<Acc>(p[i * r + j]), s);
    }
    total = first == 0 ? s : total + s;
  }
  return static_cast<T>(total);
}

}  // namespace lowrank
}  // namespace tfcomp

#endif  // TFCOMP_CUSTOM_OPS_LOWRANK_CC_KERNELS_LOWRANK_CORE_H_
