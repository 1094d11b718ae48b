// The CPU loops of the cast-and-divide op, on plain pointers: no TensorFlow
// (cast_kernels.cc shards them over the op's threads; the core test runs every
// instruction-set path against cast_core.h's per-element logic, bit for bit).
//
// The pairs the compressors use, float <-> half, half -> half and float ->
// float, have AVX2 + F16C loops: vcvtps2ph / vcvtph2ps convert 8 elements per
// instruction with the same rounding as cast_core.h (round to nearest even;
// half subnormals are produced and read without flushing), and NaN is made
// 0x7e00 with its sign before the final conversion, as cast_core.h makes it,
// so every path gives the same bits. The other pairs use the generic loop.
//
// Memory-traffic floor per element: sizeof(Src) read + sizeof(Dst) written.
// The loops read each element once and write it once; stores are ordinary
// (the output is usually read right after, from cache where it fits).
#ifndef TFCOMP_CUSTOM_OPS_CAST_CC_KERNELS_CAST_CPU_H_
#define TFCOMP_CUSTOM_OPS_CAST_CC_KERNELS_CAST_CPU_H_

#include <cstdint>
#include <type_traits>

#include "cast_core.h"
#include "custom_ops/common/cpu_isa.h"

namespace tfcomp {
namespace cast {
namespace cpu {

using ::tfcomp::BestIsa;
using ::tfcomp::Isa;
using ::tfcomp::IsaName;
using ::tfcomp::IsaSupported;

// Whether the AVX2 loops can run: AVX2 and F16C (every AVX2 CPU has F16C; checked anyway).
inline bool HasAvx2F16c() {
#if TFCOMP_X86
  static const bool ok = IsaSupported(Isa::kAvx2) && __builtin_cpu_supports("f16c");
  return ok;
#else
  return false;
#endif
}

template <typename Src, typename Dst>
void CastDivideGeneric(const Src* x, int64_t n, Acc<Dst> divisor, Dst* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = CastDivide<Dst>(x[i], divisor);
}

// Whether the AVX2 loop exists for this pair.
template <typename Src, typename Dst>
constexpr bool kHasAvx2Loop =
    (std::is_same<Src, float>::value || std::is_same<Src, Half>::value) &&
    (std::is_same<Dst, float>::value || std::is_same<Dst, Half>::value);

#if TFCOMP_X86
#define TFCOMP_CAST_AVX2 __attribute__((target("avx2,f16c,fma")))

// NaN lanes replaced by the float NaN 0x7fc00000 with their sign, which
// vcvtps2ph turns into 0x7e00 with the sign: FloatToHalf's NaN.
TFCOMP_CAST_AVX2 inline __m256 CanonicalNan(__m256 v) {
  const __m256 sign = _mm256_and_ps(v, _mm256_castsi256_ps(_mm256_set1_epi32(INT32_MIN)));
  const __m256 nan = _mm256_or_ps(sign, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fc00000)));
  return _mm256_blendv_ps(v, nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
}

constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;

TFCOMP_CAST_AVX2 inline __m256 Load8(const float* x) { return _mm256_loadu_ps(x); }
TFCOMP_CAST_AVX2 inline __m256 Load8(const Half* x) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x)));
}
TFCOMP_CAST_AVX2 inline void Store8(float* out, __m256 v) { _mm256_storeu_ps(out, v); }
TFCOMP_CAST_AVX2 inline void Store8(Half* out, __m256 v) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm256_cvtps_ph(CanonicalNan(v), kRound));
}

// Src -> Dst rounding of 8 floats read from Src: only float -> half rounds.
template <typename Src, typename Dst>
TFCOMP_CAST_AVX2 inline __m256 ConvertTo(__m256 v) {
  if (std::is_same<Src, float>::value && std::is_same<Dst, Half>::value) {
    return _mm256_cvtph_ps(_mm256_cvtps_ph(v, kRound));  // NaN stays NaN; Store8 fixes its bits
  }
  return v;
}

template <typename Src, typename Dst>
TFCOMP_CAST_AVX2 void CastDivideAvx2(const Src* x, int64_t n, float divisor, Dst* out) {
  const __m256 d = _mm256_set1_ps(divisor);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 a = ConvertTo<Src, Dst>(Load8(x + i));
    const __m256 b = ConvertTo<Src, Dst>(Load8(x + i + 8));
    Store8(out + i, _mm256_div_ps(a, d));
    Store8(out + i + 8, _mm256_div_ps(b, d));
  }
  for (; i + 8 <= n; i += 8) Store8(out + i, _mm256_div_ps(ConvertTo<Src, Dst>(Load8(x + i)), d));
  CastDivideGeneric<Src, Dst>(x + i, n - i, divisor, out + i);
}
#undef TFCOMP_CAST_AVX2
#endif  // TFCOMP_X86

// out[0, n) from x[0, n) with the loop of this instruction set (the generic
// one where the pair has none). out may be x when Src is Dst.
template <typename Src, typename Dst>
void CastDivideLoop(Isa isa, const Src* x, int64_t n, Acc<Dst> divisor, Dst* out) {
#if TFCOMP_X86
  if constexpr (kHasAvx2Loop<Src, Dst>) {
    if (isa >= Isa::kAvx2 && HasAvx2F16c()) {
      CastDivideAvx2<Src, Dst>(x, n, divisor, out);
      return;
    }
  }
#endif
  CastDivideGeneric<Src, Dst>(x, n, divisor, out);
}

}  // namespace cpu
}  // namespace cast
}  // namespace tfcomp

#endif  // TFCOMP_CUSTOM_OPS_CAST_CC_KERNELS_CAST_CPU_H_
