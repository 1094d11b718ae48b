// Per-element logic of the cast-and-divide op, shared by the CPU loops, the
// CUDA kernels and the standalone CUDA test. No TensorFlow here: the core
// compiles with g++ alone and with nvcc alone.
//
//   out[i] = DstT(x[i]) / divisor
//
// computed as TensorFlow computes tf.cast(x, DstT) / divisor:
//   1. x[i] is rounded to DstT (round to nearest even, overflow to +-Inf). A
//      double becomes a 16-bit type through float, as Eigen converts it (NumPy
//      rounds once; the two differ only for doubles within 2^-29 of a midpoint
//      between two 16-bit values).
//   2. That value is widened, exactly, to the accumulator type (float for
//      half, bfloat16 and float; double for double), divided by the divisor
//      there, and the quotient rounded once to DstT: Eigen's half and bfloat16
//      division is float division rounded back.
// With divisor 1 it is tf.cast(x, DstT) (step 2 is exact), except that on
// TensorFlow's CPU threads the division flushes a subnormal float, double or
// bfloat16 value to zero (not where half is either side: half values are
// normal floats, and float subnormals round to a half zero anyway). Where DstT
// is at least as wide as SrcT step 1 is exact and the result is rounded once. NaN
// stays NaN; its bits are not part of the contract (the 16-bit conversions
// here give the quiet NaN 0x7e00 / 0x7fc0 with x's sign, as Eigen's software
// conversions do, but float division may propagate a payload).
//
// The 16-bit types travel as their bit patterns in the tag types Half and
// BFloat16 (TensorFlow's Eigen::half and Eigen::bfloat16 have that layout).
// The conversions are written on the bits, without floating-point arithmetic
// that a flush-to-zero mode would change; the division is ordinary arithmetic,
// so on TensorFlow's CPU threads (FTZ/DAZ) a subnormal float or double operand
// or quotient is flushed, exactly as in TensorFlow's own divide.
#ifndef TFCOMP_CUSTOM_OPS_CAST_CC_KERNELS_CAST_CORE_H_
#define TFCOMP_CUSTOM_OPS_CAST_CC_KERNELS_CAST_CORE_H_

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#include <cuda_fp16.h>
#endif

#include "custom_ops/common/numeric.h"

namespace tfcomp {
namespace cast {

// IEEE binary16 and bfloat16, as stored.
struct Half {
  uint16_t bits;
};
struct BFloat16 {
  uint16_t bits;
};

// float for Half, BFloat16 and float; double for double.
template <typename T>
using Acc = typename ::tfcomp::Accumulator<T>::type;

TFCOMP_HOST_DEVICE inline uint32_t FloatBits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  memcpy(&u, &f, sizeof(u));
  return u;
#endif
}

TFCOMP_HOST_DEVICE inline float BitsFloat(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  memcpy(&f, &u, sizeof(f));
  return f;
#endif
}

// Exact: every binary16 value is a float (subnormals become normal floats).
// NaN keeps its payload.
TFCOMP_HOST_DEVICE inline float HalfToFloat(uint16_t h) {
#if defined(__CUDA_ARCH__)
  return __half2float(__ushort_as_half(h));
#else
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = h & 0x7c00u;
  const uint32_t mantissa = h & 0x03ffu;
  if (exponent == 0x7c00u) return BitsFloat(sign | 0x7f800000u | mantissa << 13);  // Inf, NaN
  if (exponent != 0) return BitsFloat(sign | (((exponent >> 10) + 112) << 23 | mantissa << 13));
  // Zero or subnormal: mantissa * 2^-24, a normal float (or zero), so exact
  // under flush-to-zero too.
  const float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-8f;
  return sign ? -magnitude : magnitude;
#endif
}

// Round to nearest even; |f| >= 65520 gives +-Inf; NaN gives 0x7e00 with f's sign.
TFCOMP_HOST_DEVICE inline uint16_t FloatToHalf(float f) {
  uint32_t u = FloatBits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  u &= 0x7fffffffu;
  if (u > 0x7f800000u) return sign | 0x7e00u;  // NaN
#if defined(__CUDA_ARCH__)
  return __half_as_ushort(__float2half_rn(f));  // the hardware's rounding, the same bits
#else
  if (u >= 0x47800000u) return sign | 0x7c00u;  // >= 2^16 (and Inf): Inf
  if (u >= 0x38800000u) {                       // a normal half: >= 2^-14
    // Rebias the exponent (127 -> 15) and round the 13 dropped bits half to even;
    // a carry out of the mantissa moves to the next binade, or to Inf.
    u += 0xc8000000u + 0x0fffu + ((u >> 13) & 1u);
    return static_cast<uint16_t>(sign | (u >> 13));
  }
  const uint32_t exponent = u >> 23;
  if (exponent < 102) return sign;  // below 2^-25: rounds to zero
  // A half subnormal (units of 2^-24): the 24-bit significand shifted right by
  // 126 - exponent (14..24 bits), rounded half to even; 0x400 is 2^-14.
  const uint32_t significand = (u & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126 - exponent;
  const uint32_t kept = significand >> shift;
  const uint32_t dropped = significand & ((1u << shift) - 1);
  const uint32_t halfway = 1u << (shift - 1);
  const uint32_t round_up = (dropped > halfway) | ((dropped == halfway) & kept);
  return static_cast<uint16_t>(sign | (kept + round_up));
#endif
}

// Exact.
TFCOMP_HOST_DEVICE inline float BFloat16ToFloat(uint16_t b) {
  return BitsFloat(static_cast<uint32_t>(b) << 16);
}

// Round to nearest even (subnormal floats too: nothing is flushed); overflow
// to +-Inf; NaN gives 0x7fc0 with f's sign.
TFCOMP_HOST_DEVICE inline uint16_t FloatToBFloat16(float f) {
  const uint32_t u = FloatBits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>(((u >> 16) & 0x8000u) | 0x7fc0u);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// x in its accumulator type, exactly.
TFCOMP_HOST_DEVICE inline float Widen(Half x) { return HalfToFloat(x.bits); }
TFCOMP_HOST_DEVICE inline float Widen(BFloat16 x) { return BFloat16ToFloat(x.bits); }
TFCOMP_HOST_DEVICE inline float Widen(float x) { return x; }
TFCOMP_HOST_DEVICE inline double Widen(double x) { return x; }

// v rounded to T, once.
template <typename T>
TFCOMP_HOST_DEVICE inline T Narrow(Acc<T> v) {
  return v;
}
template <>
TFCOMP_HOST_DEVICE inline Half Narrow<Half>(float v) {
  return Half{FloatToHalf(v)};
}
template <>
TFCOMP_HOST_DEVICE inline BFloat16 Narrow<BFloat16>(float v) {
  return BFloat16{FloatToBFloat16(v)};
}

// tf.cast(x, Dst): through Dst's accumulator type (so a double reaches a 16-bit
// type through float).
template <typename Dst, typename Src>
TFCOMP_HOST_DEVICE inline Dst Convert(Src x) {
  return Narrow<Dst>(static_cast<Acc<Dst>>(Widen(x)));
}

// tf.cast(x, Dst) / divisor, the division in Dst's accumulator type.
template <typename Dst, typename Src>
TFCOMP_HOST_DEVICE inline Dst CastDivide(Src x, Acc<Dst> divisor) {
  return Narrow<Dst>(Widen(Convert<Dst>(x)) / divisor);
}

}  // namespace cast
}  // namespace tfcomp

#endif  // TFCOMP_CUSTOM_OPS_CAST_CC_KERNELS_CAST_CORE_H_
