// Per-element logic of the sign-packing ops, shared by the CPU kernels, the
// CUDA kernels and the standalone CUDA test. No TensorFlow here: the core
// compiles with g++ alone and with nvcc alone.
//
// Conventions (the ops' documentation in tfcomp/ops.py repeats them):
//   * Element i of a flattened tensor lives in word i / 32, bit i % 32
//     (least significant bit first).
//   * The bit is 0 for NaN and for negative values (sign bit set and a
//     nonzero magnitude), 1 otherwise: +0 and -0 pack as 1, +Inf as 1, -Inf
//     as 0, NaN as 0. It is read off the bit pattern, not by a comparison,
//     so negative subnormals pack as 0 on every device: TensorFlow's CPU
//     threads flush subnormals to zero and would compare them as -0.
//   * Padding bits past n in the last word are 0.
//   * scale = mean |x| over the n elements, 0 for an empty tensor. NaN or Inf
//     in x make the scale NaN or Inf, so a diverged gradient stays visible.
//   * Majority vote over K workers: sign(#positive - #negative), so a tie
//     (possible when K is even) gives 0, as sign(sum of +-1) does.
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

template <typename T>
TFCOMP_HOST_DEVICE inline uint32_t SignBit(T x) {
  using L = FloatLayout<T>;
  typename L::Bits bits;
  memcpy(&bits, &x, sizeof(bits));
  const typename L::Bits magnitude = bits & static_cast<typename L::Bits>(~L::kSign);
  const bool is_nan = magnitude > L::kInf;
  const bool is_negative = (bits & L::kSign) != 0 && magnitude != 0;
  return (is_nan || is_negative) ? 0u : 1u;
}

// Packs x[0, count), count <= 32, into one word and adds |x| to *abs_sum.
template <typename T>
TFCOMP_HOST_DEVICE inline uint32_t PackWord(const T* x, int count,
                                            typename Accumulator<T>::type* abs_sum) {
  uint32_t word = 0;
  typename Accumulator<T>::type sum = 0;
  for (int b = 0; b < count; ++b) {
    word |= SignBit(x[b]) << b;
    sum += AbsValue(x[b]);
  }
  *abs_sum += sum;
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

// positives of k workers voted +1, the rest -1: +1, -1, or 0 on a tie.
TFCOMP_HOST_DEVICE inline int MajorityVote(int64_t positives, int64_t k) {
  const int64_t margin = 2 * positives - k;
  return static_cast<int>(margin > 0) - static_cast<int>(margin < 0);
}

}  // namespace sign
}  // namespace tfcomp

#endif  // TFCOMP_CUSTOM_OPS_SIGN_CC_KERNELS_SIGN_CORE_H_
