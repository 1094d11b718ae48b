// Unit test of sign_core.h (no TensorFlow) against straightforward scalar
// references. Prints "N passed, M failed" and exits nonzero on a failure.
#include "custom_ops/sign/cc/kernels/sign_core.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "custom_ops/testing/check.h"

namespace {

using tfcomp::testing::Case;
using tfcomp::testing::Summary;

// ---- References ------------------------------------------------------------

using tfcomp::sign::kBitsPerWord;

// The documented convention, spelled by classification: NaN -> 0, either zero
// -> 1, otherwise the sign.
template <typename T>
uint32_t RefSignBit(T x) {
  if (std::isnan(x)) return 0;
  if (std::fpclassify(x) == FP_ZERO) return 1;
  return std::signbit(x) ? 0 : 1;
}

int RefVote(int64_t positives, int64_t k) {
  const int64_t negatives = k - positives;
  return positives > negatives ? 1 : (positives < negatives ? -1 : 0);
}

template <typename T>
std::vector<T> Specials() {
  using L = std::numeric_limits<T>;
  return {T(0),           -T(0),          L::quiet_NaN(), -L::quiet_NaN(),
          L::infinity(),  -L::infinity(), L::denorm_min(), -L::denorm_min(),
          L::min(),       -L::min(),      L::min() / 2,    -L::min() / 2,
          L::max(),       L::lowest(),    T(1),            T(-1)};
}

template <typename T>
uint64_t Bits(T x) {
  uint64_t b = 0;
  std::memcpy(&b, &x, sizeof(T));
  return b;
}

// ---- Tests -----------------------------------------------------------------

void NumWords() {
  const int64_t cases[][2] = {{0, 0}, {1, 1}, {31, 1}, {32, 1}, {33, 2},
                              {64, 2}, {65, 3}, {int64_t{1} << 40, int64_t{1} << 35}};
  for (const auto& c : cases) {
    CHECK(tfcomp::sign::NumWords(c[0]) == c[1]) << "n=" << c[0];
  }
  CHECK(tfcomp::sign::NumScaleBlocks(0) == 0);
  CHECK(tfcomp::sign::NumScaleBlocks(1) == 1);
  CHECK(tfcomp::sign::NumScaleBlocks(tfcomp::sign::kScaleBlockElements) == 1);
  CHECK(tfcomp::sign::NumScaleBlocks(tfcomp::sign::kScaleBlockElements + 1) == 2);
}

void AccumulatorTypes() {
  CHECK((std::is_same<tfcomp::sign::Accumulator<float>::type, float>::value));
  CHECK((std::is_same<tfcomp::sign::Accumulator<double>::type, double>::value));
}

template <typename T>
void CheckSignBitSpecials() {
  for (T x : Specials<T>()) {
    CHECK(tfcomp::sign::SignBit(x) == RefSignBit(x)) << "x=" << x << " bits=0x" << std::hex
                                                     << Bits(x);
  }
  // Spelled out, so a wrong reference cannot hide a wrong kernel.
  using L = std::numeric_limits<T>;
  CHECK(tfcomp::sign::SignBit(-T(0)) == 1);
  CHECK(tfcomp::sign::SignBit(L::quiet_NaN()) == 0);
  CHECK(tfcomp::sign::SignBit(-L::quiet_NaN()) == 0);
  CHECK(tfcomp::sign::SignBit(L::infinity()) == 1);
  CHECK(tfcomp::sign::SignBit(-L::infinity()) == 0);
  CHECK(tfcomp::sign::SignBit(L::denorm_min()) == 1);
  CHECK(tfcomp::sign::SignBit(-L::denorm_min()) == 0);
}
void SignBitSpecialsFloat() { CheckSignBitSpecials<float>(); }
void SignBitSpecialsDouble() { CheckSignBitSpecials<double>(); }

template <typename T>
void CheckAbsValue() {
  for (T x : Specials<T>()) {
    const T got = tfcomp::sign::AbsValue(x);
    if (std::isnan(x)) {
      CHECK(std::isnan(got)) << "x=" << x;
    } else {
      // By value: AbsValue(-0) may be -0, which adds like +0.
      CHECK(got == std::fabs(x)) << "x=" << x << " got=" << got;
    }
  }
}
void AbsValueFloat() { CheckAbsValue<float>(); }
void AbsValueDouble() { CheckAbsValue<double>(); }

template <typename T>
void CheckPackWord() {
  std::mt19937_64 rng(1);
  std::uniform_real_distribution<T> uniform(-2, 2);
  const std::vector<T> specials = Specials<T>();
  for (int count = 0; count <= kBitsPerWord; ++count) {
    for (int trial = 0; trial < 50; ++trial) {
      T x[kBitsPerWord];
      for (int b = 0; b < count; ++b) {
        x[b] = trial % 2 ? specials[rng() % specials.size()] : uniform(rng);
      }
      uint32_t ref_word = 0;
      double ref_sum = 0.5;  // PackWord adds to what is already there.
      for (int b = 0; b < count; ++b) {
        if (RefSignBit(x[b])) ref_word |= uint32_t{1} << b;
        ref_sum += std::fabs(static_cast<double>(x[b]));
      }
      typename tfcomp::sign::Accumulator<T>::type sum = 0.5;
      const uint32_t word = tfcomp::sign::PackWord(x, count, &sum);
      CHECK(word == ref_word) << "count=" << count << std::hex << " word=0x" << word
                              << " ref=0x" << ref_word;
      if (std::isnan(ref_sum) || std::isinf(ref_sum)) {
        CHECK(std::isnan(sum) == std::isnan(ref_sum) && std::isinf(sum) == std::isinf(ref_sum))
            << "sum=" << sum << " ref=" << ref_sum;
      } else if (trial % 2 == 0) {  // finite specials include max: no rtol there
        CHECK(std::fabs(sum - ref_sum) <= 1e-5 * ref_sum) << "sum=" << sum << " ref=" << ref_sum;
      }
    }
  }
}
void PackWordFloat() { CheckPackWord<float>(); }
void PackWordDouble() { CheckPackWord<double>(); }

void PackWordBitOrder() {
  // One negative element at position b clears exactly bit b (LSB first).
  for (int b = 0; b < kBitsPerWord; ++b) {
    float x[kBitsPerWord];
    for (float& v : x) v = 1.0f;
    x[b] = -1.0f;
    float sum = 0;
    CHECK(tfcomp::sign::PackWord(x, kBitsPerWord, &sum) == ~(uint32_t{1} << b)) << "b=" << b;
    CHECK(sum == 32.0f);
  }
  // Padding bits past count stay 0.
  const float ones[kBitsPerWord] = {1, 1, 1, 1, 1};
  float sum = 0;
  CHECK(tfcomp::sign::PackWord(ones, 5, &sum) == 0x1fu);
  CHECK(tfcomp::sign::PackWord(ones, 0, &sum) == 0u);
}

template <typename T>
void CheckZeroBit() {
  using L = std::numeric_limits<T>;
  for (uint32_t zero_bit : {0u, 1u}) {
    CHECK(tfcomp::sign::SignBit(T(0), zero_bit) == zero_bit);
    CHECK(tfcomp::sign::SignBit(-T(0), zero_bit) == zero_bit);
    // Nothing else depends on it.
    for (T x : Specials<T>()) {
      if (x != T(0)) CHECK(tfcomp::sign::SignBit(x, zero_bit) == RefSignBit(x)) << "x=" << x;
    }
    CHECK(tfcomp::sign::SignBit(L::denorm_min(), zero_bit) == 1);
    CHECK(tfcomp::sign::SignBit(-L::denorm_min(), zero_bit) == 0);
  }
  const T x[4] = {T(0), -T(0), T(1), T(-1)};
  typename tfcomp::sign::Accumulator<T>::type sum = 0;
  CHECK(tfcomp::sign::PackWord(x, 4, &sum, 0u) == 0b0100u);
  CHECK(tfcomp::sign::PackWord(x, 4, &sum, 1u) == 0b0111u);
  CHECK(sum == 4);
}
void ZeroBitFloat() { CheckZeroBit<float>(); }
void ZeroBitDouble() { CheckZeroBit<double>(); }

template <typename T>
void CheckEfPackWord() {
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<T> uniform(-2, 2);
  for (int count = 0; count <= kBitsPerWord; ++count) {
    for (uint32_t zero_bit : {0u, 1u}) {
      T g[kBitsPerWord], e[kBitsPerWord], p[kBitsPerWord], residual[kBitsPerWord];
      for (int b = 0; b < count; ++b) {
        g[b] = uniform(rng);
        e[b] = b % 5 == 0 ? -g[b] : uniform(rng);  // exact zeros of p
        p[b] = g[b] + e[b];
      }
      const T scale = T(0.375);
      const uint32_t word = tfcomp::sign::EfPackWord(g, e, count, scale, zero_bit, residual);
      typename tfcomp::sign::Accumulator<T>::type sum = 0, ef_sum = 0;
      CHECK(word == tfcomp::sign::PackWord(p, count, &sum, zero_bit)) << "count=" << count;
      tfcomp::sign::CorrectedAbsSum(g, e, count, &ef_sum);
      CHECK(Bits(sum) == Bits(ef_sum)) << "sum=" << sum << " ef_sum=" << ef_sum;
      for (int b = 0; b < count; ++b) {
        const bool set = (word >> b) & 1u;
        CHECK(set == (p[b] == 0 ? zero_bit == 1 : p[b] > 0)) << "b=" << b;
        CHECK(Bits(residual[b]) == Bits(T(p[b] - (set ? scale : -scale)))) << "b=" << b;
      }
    }
  }
  // NaN packs as 0 and stays in the residual.
  const T g[1] = {std::numeric_limits<T>::quiet_NaN()}, e[1] = {T(1)};
  T residual[1];
  CHECK(tfcomp::sign::EfPackWord(g, e, 1, T(1), 1u, residual) == 0u);
  CHECK(std::isnan(residual[0]));
}
void EfPackWordFloat() { CheckEfPackWord<float>(); }
void EfPackWordDouble() { CheckEfPackWord<double>(); }

void ScaledSign() {
  const uint32_t word = 0xa5c3f00fu;
  for (int b = 0; b < kBitsPerWord; ++b) {
    const bool set = (word >> b) & 1u;
    CHECK(tfcomp::sign::ScaledSign(word, b, 0.5f) == (set ? 0.5f : -0.5f)) << "b=" << b;
    CHECK(tfcomp::sign::ScaledSign(word, b, 2.0) == (set ? 2.0 : -2.0)) << "b=" << b;
  }
}

void BitOf() {
  const uint32_t words[] = {0u, ~0u, 0x80000001u, 0x5555aaaau};
  for (uint32_t w : words) {
    for (int b = 0; b < kBitsPerWord; ++b) {
      CHECK(tfcomp::sign::BitOf(w, b) == ((w & (uint32_t{1} << b)) ? 1u : 0u))
          << std::hex << "w=0x" << w << std::dec << " b=" << b;
    }
  }
}

template <typename T>
void CheckUnpackValue() {
  const uint32_t word = 0xa5c3f00fu;
  for (T scale : Specials<T>()) {
    for (int b = 0; b < kBitsPerWord; ++b) {
      const T got = tfcomp::sign::UnpackValue(word, b, scale);
      const bool set = (word >> b) & 1u;
      // +scale for a set bit, the negation (sign bit flipped) otherwise.
      const uint64_t want = set ? Bits(scale) : Bits(scale) ^ Bits(-T(0));
      CHECK(Bits(got) == want) << "scale=" << scale << " b=" << b << " got=" << got;
    }
  }
}
void UnpackValueFloat() { CheckUnpackValue<float>(); }
void UnpackValueDouble() { CheckUnpackValue<double>(); }

void MajorityVote() {
  for (int64_t k = 1; k <= 9; ++k) {
    for (int64_t p = 0; p <= k; ++p) {
      CHECK(tfcomp::sign::MajorityVote(p, k) == RefVote(p, k)) << "k=" << k << " p=" << p;
    }
  }
  // Ties (even k) give 0; large counts do not overflow.
  CHECK(tfcomp::sign::MajorityVote(1, 2) == 0);
  CHECK(tfcomp::sign::MajorityVote(2, 4) == 0);
  const int64_t big = int64_t{1} << 40;
  CHECK(tfcomp::sign::MajorityVote(big, 2 * big) == 0);
  CHECK(tfcomp::sign::MajorityVote(big + 1, 2 * big) == 1);
  CHECK(tfcomp::sign::MajorityVote(big - 1, 2 * big) == -1);
}

}  // namespace

int main() {
  Case("NumWords", NumWords);
  Case("AccumulatorTypes", AccumulatorTypes);
  Case("SignBitSpecialsFloat", SignBitSpecialsFloat);
  Case("SignBitSpecialsDouble", SignBitSpecialsDouble);
  Case("AbsValueFloat", AbsValueFloat);
  Case("AbsValueDouble", AbsValueDouble);
  Case("PackWordFloat", PackWordFloat);
  Case("PackWordDouble", PackWordDouble);
  Case("PackWordBitOrder", PackWordBitOrder);
  Case("ZeroBitFloat", ZeroBitFloat);
  Case("ZeroBitDouble", ZeroBitDouble);
  Case("EfPackWordFloat", EfPackWordFloat);
  Case("EfPackWordDouble", EfPackWordDouble);
  Case("ScaledSign", ScaledSign);
  Case("BitOf", BitOf);
  Case("UnpackValueFloat", UnpackValueFloat);
  Case("UnpackValueDouble", UnpackValueDouble);
  Case("MajorityVote", MajorityVote);
  return Summary();
}
