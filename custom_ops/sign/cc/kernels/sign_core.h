// Per-element logic of the sign-packing ops, shared by the CPU kernels, the
// CUDA kernels and the standalone CUDA test. No TensorFlow here: the core
// compiles with g++ alone and with nvcc alone.
//
// Conventions (the ops' documentation in tfcomp/ops.py repeats them):
//   * Element i of a flattened tensor lives in word i / 32, bit i % 32
//     (least significant bit first).
//   * The bit is 0 for NaN and for negative values (sign bit set and a
//     nonzero magnitude), 1 for positive ones; +0 and -0 pack as zero_bit,
//     which the caller chooses (1 when it does not: sign_pack's default).
//     +Inf packs as 1, -Inf as 0, NaN as 0. It is read off the bit pattern,
//     not by a comparison, so negative subnormals pack as 0 on every device:
//     TensorFlow's CPU threads flush subnormals to zero and would compare
//     them as -0. (SignSGD and EF-SignSGD pass zero_bit = step is even, so an
//     exact zero is sent as + and - on alternate steps; an exact zero adds
//     nothing to mean |x|.)
//   * Padding bits past n in the last word are 0.
//   * scale = mean |x| over the n elements, 0 for an empty tensor. NaN or Inf
//     in x make the scale NaN or Inf, so a diverged gradient stays visible.
//   * Majority vote over K workers: sign(#positive - #negative), so a tie
//     (possible when K is even) gives 0, as sign(sum of +-1) does.
//   * EF-sign pack (error feedback): p = g + e rounded to T (as TensorFlow's
//     add of two T tensors rounds it), scale = mean |p| summed exactly as
//     sign_pack sums it, the words of p, and the new residual
//     p - (bit ? scale : -scale) rounded to T, scale being the T-rounded one.
//   * Scaled-sign sum over K workers: out[i] = weight * sum_k (bit i of row k
//     ? scales[k] : -scales[k]), the sum in the accumulator type starting at 0
//     and adding k = 0, 1, ..., K-1 in order, so every device and thread count
//     gives the same bits.
//
// Memory-traffic floor (bytes per element read + written, b = sizeof(T)),
// what each kernel should approach on a large tensor:
//   sign_pack          reads x once (b), writes 1/8 byte of words.
//   sign_unpack        reads 1/8 byte of words, writes out once (b).
//   sign_majority      reads K/8 bytes of words, writes out once (b).
//   sign_ef_pack       two passes: pass 1 reads g and e (2b) for the scale,
//                      pass 2 reads them again (2b), writes the residual (b)
//                      and 1/8 byte of words: 5b + 1/8 in all.
//   sign_scaled_sum    reads K/8 bytes of words (and K scales), writes out
//                      once (b).
#ifndef TFCOMP_CUSTOM_OPS_SIGN_CC_KERNELS_SIGN_CORE_H_
#define TFCOMP_CUSTOM_OPS_SIGN_CC_KERNELS_SIGN_CORE_H_

#include <cstdint>
#include <cstring>

#include "custom_ops/common/numeric.h"

namespace tfcomp {
namespace sign {

using ::tfcomp::AbsValue;
using ::tfcomp::Accumulator;

constexpr int kBitsPerWord = 32;

// The scale is summed in fixed blocks of this many elements, each block in the
// accumulator type, then the blocks in double and in order. The result depends
// only on the input, not on how many threads computed it.
constexpr int64_t kScaleBlockElements = 4096;

TFCOMP_HOST_DEVICE inline int64_t NumWords(int64_t n) {
  return (n + kBitsPerWord - 1) / kBitsPerWord;
}

TFCOMP_HOST_DEVICE inline int64_t NumScaleBlocks(int64_t n) {
  return (n + kScaleBlockElements - 1) / kScaleBlockElements;
}

// IEEE-754 layout of an element type: its bits, the sign bit, +Inf's pattern.
template <typename UInt, UInt kSignBit, UInt kInfinity>
struct Layout {
  using Bits = UInt;
  static constexpr UInt kSign = kSignBit;
  static constexpr UInt kInf = kInfinity;
};
using Binary16Layout = Layout<uint16_t, 0x8000u, 0x7c00u>;   // float16
using BFloat16Layout = Layout<uint16_t, 0x8000u, 0x7f80u>;   // bfloat16
template <typename T>
struct FloatLayout;  // specialized where the 16-bit types are known
template <>
struct FloatLayout<float> : Layout<uint32_t, 0x80000000u, 0x7f800000u> {};
template <>
struct FloatLayout<double>
    : Layout<uint64_t, 0x8000000000000000ull, 0x7ff0000000000000ull> {};

// zero_bit (0 or 1): what +0 and -0 pack as.
template <typename T>
TFCOMP_HOST_DEVICE inline uint32_t SignBit(T x, uint32_t zero_bit) {
  using L = FloatLayout<T>;
  typename L::Bits bits;
  memcpy(&bits, &x, sizeof(bits));
  const typename L::Bits magnitude = bits & static_cast<typename L::Bits>(~L::kSign);
  const bool is_nan = magnitude > L::kInf;
  const bool is_negative = (bits & L::kSign) != 0;
  return magnitude == 0 ? zero_bit : ((is_nan || is_negative) ? 0u : 1u);
}

template <typename T>
TFCOMP_HOST_DEVICE inline uint32_t SignBit(T x) {
  return SignBit(x, 1u);
}

// Packs x[0, count), count <= 32, into one word and adds |x| to *abs_sum.
template <typename T>
TFCOMP_HOST_DEVICE inline uint32_t PackWord(const T* x, int count,
                                            typename Accumulator<T>::type* abs_sum,
                                            uint32_t zero_bit = 1u) {
  uint32_t word = 0;
  typename Accumulator<T>::type sum = 0;
  for (int b = 0; b < count; ++b) {
    word |= SignBit(x[b], zero_bit) << b;
    sum += AbsValue(x[b]);
  }
  *abs_sum += sum;
  return word;
}

// p = g + e in the accumulator type, rounded to T: what TensorFlow's add of
// two T tensors gives.
template <typename T>
TFCOMP_HOST_DEVICE inline T Corrected(T g, T e) {
  using Acc = typename Accumulator<T>::type;
  return static_cast<T>(static_cast<Acc>(g) + static_cast<Acc>(e));
}

// Sum of |g + e| over [0, count), count <= 32, added to *abs_sum as PackWord
// adds its sum: sign_ef_pack's scale is sign_pack's scale of g + e.
template <typename T>
TFCOMP_HOST_DEVICE inline void CorrectedAbsSum(const T* g, const T* e, int count,
                                               typename Accumulator<T>::type* abs_sum) {
  typename Accumulator<T>::type sum = 0;
  for (int b = 0; b < count; ++b) sum += AbsValue(Corrected(g[b], e[b]));
  *abs_sum += sum;
}

// The residual after p was sent as bit with scale: p - (bit ? scale : -scale),
// rounded to T (scale is already a T, as the unpacked value was).
template <typename T>
TFCOMP_HOST_DEVICE inline T Residual(T p, uint32_t bit, T scale) {
  using Acc = typename Accumulator<T>::type;
  const Acc s = static_cast<Acc>(scale);
  return static_cast<T>(static_cast<Acc>(p) - (bit ? s : -s));
}

// Packs the signs of p = g + e over [0, count), count <= 32, into one word and
// writes the residuals p - (+-scale) to residual[0, count).
template <typename T>
TFCOMP_HOST_DEVICE inline uint32_t EfPackWord(const T* g, const T* e, int count, T scale,
                                              uint32_t zero_bit, T* residual) {
  uint32_t word = 0;
  for (int b = 0; b < count; ++b) {
    const T p = Corrected(g[b], e[b]);
    const uint32_t bit = SignBit(p, zero_bit);
    word |= bit << b;
    residual[b] = Residual(p, bit, scale);
  }
  return word;
}

TFCOMP_HOST_DEVICE inline uint32_t BitOf(uint32_t word, int bit) {
  return (word >> bit) & 1u;
}

// +scale for a set bit, -scale for a clear one. Signs are random, so the CPU
// indexes instead of branching: a mispredicted branch per element costs more
// than the memory traffic. The GPU selects (one instruction; an indexed array
// would live in local memory).
template <typename T>
TFCOMP_HOST_DEVICE inline T UnpackValue(uint32_t word, int bit, T scale) {
#ifdef __CUDA_ARCH__
  return BitOf(word, bit) ? scale : static_cast<T>(-scale);
#else
  const T choices[2] = {static_cast<T>(-scale), scale};
  return choices[BitOf(word, bit)];
#endif
}

// One worker's term of the scaled-sign sum: +scale for a set bit, -scale
// otherwise (scale in the accumulator type).
template <typename Acc>
TFCOMP_HOST_DEVICE inline Acc ScaledSign(uint32_t word, int bit, Acc scale) {
  return BitOf(word, bit) ? scale : -scale;
}

// positives of k workers voted +1, the rest -1: +1, -1, or 0 on a tie.
TFCOMP_HOST_DEVICE inline int MajorityVote(int64_t positives, int64_t k) {
  const int64_t margin = 2 * positives - k;
  return static_cast<int>(margin > 0) - static_cast<int>(margin < 0);
}

}  // namespace sign
}  // namespace tfcomp

#endif  // TFCOMP_CUSTOM_OPS_SIGN_CC_KERNELS_SIGN_CORE_H_
