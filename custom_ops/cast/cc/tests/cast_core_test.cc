// Unit test of cast_core.h and the CPU loops of cast_cpu.h (no TensorFlow):
// the 16-bit conversions against references that search for the nearest
// value, every (SrcT, DstT) pair of CastDivide against a reference in double,
// and every instruction-set loop this CPU runs against the per-element logic,
// bit for bit, with and without flush-to-zero. Prints "N passed, M failed" and
// exits nonzero on a failure.
#include "custom_ops/cast/cc/kernels/cast_core.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "custom_ops/cast/cc/kernels/cast_cpu.h"
#include "custom_ops/testing/check.h"

#if TFCOMP_X86
#include <xmmintrin.h>
#endif

namespace {

using tfcomp::testing::Case;
using tfcomp::testing::Summary;
namespace cast = tfcomp::cast;
namespace cpu = tfcomp::cast::cpu;
using cast::BFloat16;
using cast::Half;

uint32_t FBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float FromFBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// ---- References --------------------------------------------------------------

// binary16 by its definition.
double RefHalfValue(uint16_t h) {
  const int exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
  const double sign = (h & 0x8000) ? -1.0 : 1.0;
  if (exponent == 0x1f) return mantissa ? std::numeric_limits<double>::quiet_NaN() : sign * INFINITY;
  if (exponent == 0) return sign * std::ldexp(mantissa, -24);
  return sign * std::ldexp(1024 + mantissa, exponent - 25);
}

// The nearest half to f by search over all finite halves; ties to the even
// pattern; beyond 65504 + half an ulp (65520) the infinity.
uint16_t RefFloatToHalf(float f) {
  if (std::isnan(f)) return std::signbit(f) ? 0xfe00 : 0x7e00;
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  const double a = std::fabs(static_cast<double>(f));
  if (a >= 65520.0) return sign | 0x7c00;
  // Positive finite halves are increasing in their bit patterns 0..0x7bff.
  int lo = 0, hi = 0x7bff;
  while (lo < hi) {  // the first pattern with value >= a
    const int mid = (lo + hi) / 2;
    if (RefHalfValue(static_cast<uint16_t>(mid)) >= a) hi = mid; else lo = mid + 1;
  }
  if (lo == 0) return sign;
  const double above = RefHalfValue(static_cast<uint16_t>(lo));
  const double below = RefHalfValue(static_cast<uint16_t>(lo - 1));
  int pick;
  if (above - a < a - below) pick = lo;
  else if (a - below < above - a) pick = lo - 1;
  else pick = (lo % 2 == 0) ? lo : lo - 1;
  return static_cast<uint16_t>(sign | pick);
}

// The nearest bfloat16: truncation or the next pattern up, ties to even.
uint16_t RefFloatToBFloat16(float f) {
  if (std::isnan(f)) return std::signbit(f) ? 0xffc0 : 0x7fc0;
  const uint32_t u = FBits(f);
  const uint32_t down = u & 0xffff0000u;
  const double a = std::fabs(static_cast<double>(f));
  const double below = std::fabs(static_cast<double>(FromFBits(down)));
  // The next magnitude up (0x7f7f -> 0x7f80 is the step to Inf; its distance is
  // taken as from max + one ulp, i.e. 2^128).
  const uint32_t up = down + 0x10000u;
  const double above = (up & 0x7fffffffu) == 0x7f800000u ? std::ldexp(1.0, 128)
                                                        : std::fabs(static_cast<double>(FromFBits(up)));
  if (u == down) return static_cast<uint16_t>(down >> 16);
  uint32_t pick;
  if (above - a < a - below) pick = up;
  else if (a - below < above - a) pick = down;
  else pick = ((down >> 16) & 1) ? up : down;
  return static_cast<uint16_t>(pick >> 16);
}

// The element types as doubles, and test values.
double ToDouble(Half h) { return RefHalfValue(h.bits); }
double ToDouble(BFloat16 b) { return FromFBits(static_cast<uint32_t>(b.bits) << 16); }
double ToDouble(float f) { return f; }
double ToDouble(double d) { return d; }

template <typename T> const char* Name();
template <> const char* Name<Half>() { return "half"; }
template <> const char* Name<BFloat16>() { return "bfloat16"; }
template <> const char* Name<float>() { return "float"; }
template <> const char* Name<double>() { return "double"; }

template <typename T>
uint64_t Bits(T v) {
  uint64_t b = 0;
  std::memcpy(&b, &v, sizeof(T));
  return b;
}

template <typename T>
T FromBits(uint64_t b) {
  T v;
  std::memcpy(&v, &b, sizeof(T));
  return v;
}

// Round a double to T by the references (a double reaches 16 bits through float).
template <typename T>
T RefRound(double v) {
  if constexpr (std::is_same<T, Half>::value) return Half{RefFloatToHalf(static_cast<float>(v))};
  else if constexpr (std::is_same<T, BFloat16>::value) return BFloat16{RefFloatToBFloat16(static_cast<float>(v))};
  else return static_cast<T>(v);
}

// tf.cast(x, Dst) / divisor with the division done in double and rounded to
// the accumulator type (exact for float: double has more than 2 * 24 + 2 bits).
template <typename Src, typename Dst>
Dst RefCastDivide(Src x, cast::Acc<Dst> divisor) {
  const double t = ToDouble(RefRound<Dst>(ToDouble(x)));
  const cast::Acc<Dst> q = static_cast<cast::Acc<Dst>>(t / static_cast<double>(divisor));
  return RefRound<Dst>(q);
}

template <typename T>
bool IsNan(T v) { return std::isnan(ToDouble(v)); }

// Random values of T: a mix of ordinary magnitudes, T's extremes, and raw bit
// patterns (every kind of value: subnormals, NaN, Inf).
template <typename T>
T RandomValue(std::mt19937_64& rng) {
  const int kind = static_cast<int>(rng() % 4);
  if (kind == 0) return FromBits<T>(rng());  // any pattern
  if (kind == 1) {
    const double v = std::ldexp(std::uniform_real_distribution<double>(-1, 1)(rng),
                                static_cast<int>(rng() % 60) - 30);
    return RefRound<T>(v);
  }
  if (kind == 2) {  // near the 16-bit types' edges
    const double edges[] = {65504.0, 65520.0, 65536.0, 6.103515625e-05, 5.9604644775390625e-08,
                            2.98023223876953125e-08, 1e-40, 3.3895313892515355e38, 1.0};
    const double e = edges[rng() % 9] * (1 + std::ldexp(static_cast<double>(rng() % 64) - 32, -30));
    return RefRound<T>(rng() % 2 ? e : -e);
  }
  return RefRound<T>(std::uniform_real_distribution<double>(-4, 4)(rng));
}

// ---- Tests -------------------------------------------------------------------

void HalfToFloatAll() {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float got = cast::HalfToFloat(static_cast<uint16_t>(h));
    const double want = RefHalfValue(static_cast<uint16_t>(h));
    if (std::isnan(want)) {
      // NaN keeps its payload and sign.
      CHECK(std::isnan(got) && (FBits(got) >> 13) == ((h & 0x8000u) << 3 | 0x3fc00u | (h & 0x3ffu)))
          << std::hex << "h=0x" << h << " got=0x" << FBits(got);
    } else {
      CHECK(Bits(got) == Bits(static_cast<float>(want))) << std::hex << "h=0x" << h;
    }
  }
}

void FloatToHalfRoundTrip() {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = cast::HalfToFloat(static_cast<uint16_t>(h));
    const uint16_t got = cast::FloatToHalf(f);
    const bool nan = (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu);
    CHECK(got == (nan ? ((h & 0x8000u) | 0x7e00u) : h)) << std::hex << "h=0x" << h << " got=0x" << got;
  }
}

// Every midpoint between neighbouring halves and the floats next to it.
void FloatToHalfMidpoints() {
  for (uint32_t h = 0; h < 0x7c00u; ++h) {
    const double lo = RefHalfValue(static_cast<uint16_t>(h));
    const double hi = h + 1 == 0x7c00u ? 65536.0 : RefHalfValue(static_cast<uint16_t>(h + 1));
    const float mid = static_cast<float>((lo + hi) / 2);  // exact in float
    for (float f : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, INFINITY), -mid}) {
      CHECK(cast::FloatToHalf(f) == RefFloatToHalf(f)) << "f=" << f << std::hex << " got=0x"
                                                       << cast::FloatToHalf(f);
    }
  }
}

void FloatToHalfRandom() {
  std::mt19937_64 rng(1);
  for (int i = 0; i < 2000000; ++i) {
    // Exponents around half's range more often than uniformly.
    uint32_t u = static_cast<uint32_t>(rng());
    if (i % 2) u = (u & 0x807fffffu) | ((95 + static_cast<uint32_t>(rng() % 50)) << 23);
    const float f = FromFBits(u);
    CHECK(cast::FloatToHalf(f) == RefFloatToHalf(f)) << std::hex << "u=0x" << u;
  }
  CHECK(cast::FloatToHalf(65519.99f) == 0x7bff);
  CHECK(cast::FloatToHalf(65520.0f) == 0x7c00);
  CHECK(cast::FloatToHalf(-INFINITY) == 0xfc00);
  CHECK(cast::FloatToHalf(std::ldexp(1.0f, -25)) == 0);  // a tie to even zero
  CHECK(cast::FloatToHalf(std::nextafter(std::ldexp(1.0f, -25), 1.0f)) == 1);
  CHECK(cast::FloatToHalf(-1e-40f) == 0x8000);
}

void FloatToBFloat16() {
  std::mt19937_64 rng(2);
  for (int i = 0; i < 2000000; ++i) {
    const float f = FromFBits(static_cast<uint32_t>(rng()));
    CHECK(cast::FloatToBFloat16(f) == RefFloatToBFloat16(f)) << std::hex << "u=0x" << FBits(f);
  }
  for (uint32_t b = 0; b < 65536; ++b) {  // every bfloat16, its midpoints up, and neighbours
    const uint32_t u = b << 16;
    for (uint32_t v : {u, u + 0x8000u, u + 0x7fffu, u + 0x8001u}) {
      const float f = FromFBits(v);
      CHECK(cast::FloatToBFloat16(f) == RefFloatToBFloat16(f)) << std::hex << "u=0x" << v;
    }
    CHECK(cast::BFloat16ToFloat(static_cast<uint16_t>(b)) == FromFBits(u) ||
          std::isnan(FromFBits(u)));
  }
  CHECK(cast::FloatToBFloat16(3.4e38f) == 0x7f80);  // rounds up to Inf
  CHECK(cast::FloatToBFloat16(1e-40f) == RefFloatToBFloat16(1e-40f));  // subnormals are kept
}

template <typename Src, typename Dst>
std::vector<cast::Acc<Dst>> Divisors() {
  using A = cast::Acc<Dst>;
  std::vector<A> d = {A(1), A(2), A(3), A(7), A(0.5), A(-2), A(0), -A(0), A(INFINITY), A(NAN)};
  // Divisors as the op receives them: values of Dst.
  for (A& v : d) v = static_cast<A>(ToDouble(RefRound<Dst>(v)));
  return d;
}

// Per element: CastDivide against the double reference, every pair.
template <typename Src, typename Dst>
void CheckCastDividePair() {
  std::mt19937_64 rng(3);
  for (cast::Acc<Dst> d : Divisors<Src, Dst>()) {
    for (int i = 0; i < 20000; ++i) {
      const Src x = RandomValue<Src>(rng);
      const Dst got = cast::CastDivide<Dst>(x, d);
      const Dst want = RefCastDivide<Src, Dst>(x, d);
      const bool ok = IsNan(want) ? IsNan(got) : Bits(got) == Bits(want);
      CHECK(ok) << Name<Src>() << "->" << Name<Dst>() << " x=" << ToDouble(x) << " (0x" << std::hex
                << Bits(x) << std::dec << ") / " << d << ": got " << ToDouble(got) << " want "
                << ToDouble(want);
    }
  }
}

template <typename Src>
void CheckCastDivideFrom() {
  CheckCastDividePair<Src, Half>();
  CheckCastDividePair<Src, BFloat16>();
  CheckCastDividePair<Src, float>();
  CheckCastDividePair<Src, double>();
}

// The flush-to-zero state of TensorFlow's CPU threads, set for a scope.
struct ScopedFlush {
#if TFCOMP_X86
  explicit ScopedFlush(bool on) : saved(_mm_getcsr()) {
    if (on) _mm_setcsr(saved | 0x8040u);  // FTZ | DAZ
  }
  ~ScopedFlush() { _mm_setcsr(saved); }
  unsigned saved;
#else
  explicit ScopedFlush(bool) {}
#endif
};

// One instruction set's loop against the per-element logic: same bits, every
// size from 0 to 40 and some long odd ones, in place where Src is Dst.
template <typename Src, typename Dst>
void CheckLoop(cpu::Isa isa, bool flush) {
  ScopedFlush scoped(flush);
  std::mt19937_64 rng(4);
  for (cast::Acc<Dst> d : Divisors<Src, Dst>()) {
    for (int64_t n : {0, 1, 7, 8, 9, 15, 16, 17, 31, 33, 40, 1000, 4099}) {
      std::vector<Src> x(n);
      for (Src& v : x) v = RandomValue<Src>(rng);
      std::vector<Dst> out(n);
      cpu::CastDivideLoop<Src, Dst>(isa, x.data(), n, d, out.data());
      for (int64_t i = 0; i < n; ++i) {
        const Dst want = cast::CastDivide<Dst>(x[i], d);
        CHECK(Bits(out[i]) == Bits(want))
            << cpu::IsaName(isa) << (flush ? " ftz" : "") << " " << Name<Src>() << "->" << Name<Dst>()
            << " n=" << n << " i=" << i << " x=0x" << std::hex << Bits(x[i]) << " / " << d
            << ": 0x" << Bits(out[i]) << " != 0x" << Bits(want);
      }
      if constexpr (std::is_same<Src, Dst>::value) {
        cpu::CastDivideLoop<Src, Dst>(isa, x.data(), n, d, x.data());  // in place
        for (int64_t i = 0; i < n; ++i) CHECK(Bits(x[i]) == Bits(out[i])) << "in place, i=" << i;
      }
    }
  }
}

template <typename Src>
void CheckLoopsFrom(cpu::Isa isa, bool flush) {
  CheckLoop<Src, Half>(isa, flush);
  CheckLoop<Src, BFloat16>(isa, flush);
  CheckLoop<Src, float>(isa, flush);
  CheckLoop<Src, double>(isa, flush);
}

// Under flush-to-zero the division flushes; the conversions do not.
void FlushSemantics() {
  ScopedFlush scoped(true);
  const float tiny = 1e-40f;  // a float subnormal, a normal bfloat16 neighbourhood
  volatile float v = tiny;
  const bool flushes = (v * 1.0f) == 0.0f;
  if (!flushes) return;  // not x86: nothing to check
  CHECK(cast::FloatToBFloat16(tiny) != 0) << "the bfloat16 conversion must not flush";
  // bfloat16 subnormal / 1 in float: flushed, as TensorFlow's divide does.
  // (A divisor the compiler cannot see, as in the kernels: x / 1.0f folds to x.)
  volatile float one_v = 1.0f;
  const float one = one_v;
  const BFloat16 b{cast::FloatToBFloat16(tiny)};
  CHECK((cast::CastDivide<BFloat16>(b, one).bits & 0x7fffu) == 0);
  // Half subnormals are normal floats: nothing to flush.
  CHECK(cast::CastDivide<Half>(Half{0x0001}, one).bits == 0x0001);
  CHECK(cast::CastDivide<float>(Half{0x0003}, one) == 3 * 5.9604644775390625e-8f);
}

}  // namespace

int main() {
  Case("HalfToFloatAll", HalfToFloatAll);
  Case("FloatToHalfRoundTrip", FloatToHalfRoundTrip);
  Case("FloatToHalfMidpoints", FloatToHalfMidpoints);
  Case("FloatToHalfRandom", FloatToHalfRandom);
  Case("FloatToBFloat16", FloatToBFloat16);
  Case("CastDivideFromHalf", CheckCastDivideFrom<Half>);
  Case("CastDivideFromBFloat16", CheckCastDivideFrom<BFloat16>);
  Case("CastDivideFromFloat", CheckCastDivideFrom<float>);
  Case("CastDivideFromDouble", CheckCastDivideFrom<double>);
  Case("FlushSemantics", FlushSemantics);
  std::printf("CPU: %s\n", cpu::IsaName(cpu::BestIsa()));
  for (cpu::Isa isa : {cpu::Isa::kGeneric, cpu::Isa::kAvx2, cpu::Isa::kAvx512}) {
    if (!cpu::IsaSupported(isa)) {
      std::printf("skipping the %s loop: this CPU does not run it\n", cpu::IsaName(isa));
      continue;
    }
    for (bool flush : {false, true}) {
      const std::string name = std::string("loop/") + cpu::IsaName(isa) + (flush ? "/ftz" : "");
      Case(name + "/half", [&] { CheckLoopsFrom<Half>(isa, flush); });
      Case(name + "/bfloat16", [&] { CheckLoopsFrom<BFloat16>(isa, flush); });
      Case(name + "/float", [&] { CheckLoopsFrom<float>(isa, flush); });
      Case(name + "/double", [&] { CheckLoopsFrom<double>(isa, flush); });
    }
  }
  return Summary();
}
