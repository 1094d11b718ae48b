// Unit test of lowrank_core.h and the CPU loops of lowrank_cpu.h (no
// TensorFlow): ResidualElement against a double-precision reference within a
// rounding bound, and every instruction-set loop this CPU runs (generic, AVX2,
// AVX-512) against ResidualElement bit for bit, over ragged shapes (partial
// panels, partial row blocks, r = 0), in place and with non-temporal stores;
// the same loops from zero with -p against ProductElement (the product op);
// CompensatedProductElement against a double-precision reference and its
// documented lane order, and every compensate loop against it bit for bit
// (ragged columns and ranks, NaN and Inf, -0 lanes, with and without the add
// and non-temporal stores); every project loop against ProjectElement, block
// by block, bit for bit.
// Prints "N passed, M failed" and exits nonzero on a failure.
#include "custom_ops/lowrank/cc/kernels/lowrank_core.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "custom_ops/lowrank/cc/kernels/lowrank_cpu.h"
#include "custom_ops/testing/check.h"

namespace {

namespace lr = tfcomp::lowrank;
namespace cpu = tfcomp::lowrank::cpu;
using tfcomp::testing::Case;

template <typename T>
bool SameBits(T a, T b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

template <typename T>
std::vector<T> Random(int64_t count, std::mt19937_64& rng) {
  std::normal_distribution<double> normal;
  std::vector<T> v(count);
  for (T& x : v) x = static_cast<T>(normal(rng));
  return v;
}

template <typename T>
const char* Name() {
  return sizeof(T) == 4 ? "float" : "double";
}

// |ResidualElement - exact| <= (r + 1) eps (|m| + sum |p q|): each of the r
// fused steps rounds once, with a value bounded by that sum.
template <typename T>
void CheckElementAgainstDouble(int64_t n, int64_t k, int64_t r, std::mt19937_64& rng) {
  const auto m = Random<T>(n * k, rng), p = Random<T>(n * r, rng), q = Random<T>(k * r, rng);
  const double eps = std::numeric_limits<T>::epsilon();
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t c = 0; c < k; ++c) {
      double exact = m[i * k + c], magnitude = std::fabs(m[i * k + c]);
      for (int64_t j = 0; j < r; ++j) {
        const double term = static_cast<double>(p[i * r + j]) * q[c * r + j];
        exact -= term;
        magnitude += std::fabs(term);
      }
      const double got = lr::ResidualElement(m.data(), p.data(), q.data(), i, c, k, r);
      const double bound = (r + 1) * eps * magnitude * (sizeof(T) == 8 ? 2 : 1);
      CHECK(std::fabs(got - exact) <= bound)
          << Name<T>() << " (" << i << ", " << c << ") of " << n << "x" << k << " r=" << r
          << ": " << got << " vs " << exact;
    }
  }
}

// A loop of one instruction set against ResidualElement, bit for bit; also in place.
template <typename Acc>
void CheckLoop(cpu::Isa isa, int64_t n, int64_t k, int64_t r, std::mt19937_64& rng,
               bool specials) {
  auto m = Random<Acc>(n * k, rng), p = Random<Acc>(n * r, rng), q = Random<Acc>(k * r, rng);
  if (specials && n * k > 3 && r > 0) {
    const Acc inf = std::numeric_limits<Acc>::infinity(), nan = std::numeric_limits<Acc>::quiet_NaN();
    m[1] = nan;
    m[n * k - 1] = -inf;
    p[(n - 1) * r] = nan;                 // a row of NaNs
    q[(k / 2) * r + r - 1] = inf;         // a column of +-Inf
    if (n > 1) p[0 * r + r - 1] = Acc(0);  // 0 * Inf = NaN in row 0 of that column
  }
  const int64_t width = cpu::PanelWidth<Acc>(isa);
  std::vector<Acc> packed(cpu::PackedSize(k, r, width), Acc(-7));
  cpu::PackQ(q.data(), k, r, width, 0, cpu::NumPanels(k, width), packed.data());
  std::vector<Acc> out(n * k, Acc(-3));
  cpu::ResidualRows(isa, m.data(), p.data(), packed.data(), out.data(), n, k, r);
  std::vector<Acc> in_place = m;
  cpu::ResidualRows(isa, in_place.data(), p.data(), packed.data(), in_place.data(), n, k, r);
  // Non-temporal stores, into a 64-byte aligned buffer (used where k * sizeof(Acc) is a
  // multiple of 64, ignored elsewhere).
  std::vector<Acc> storage(n * k + 64 / sizeof(Acc));
  Acc* streamed = storage.data();
  while (reinterpret_cast<uintptr_t>(streamed) % 64 != 0) ++streamed;
  cpu::ResidualRows(isa, m.data(), p.data(), packed.data(), streamed, n, k, r, /*stream=*/true);
  int reported = 0;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t c = 0; c < k; ++c) {
      const Acc want = lr::ResidualElement(m.data(), p.data(), q.data(), i, c, k, r);
      const Acc got = out[i * k + c];
      const bool ok = SameBits(got, want) || (std::isnan(got) && std::isnan(want));
      const bool ok_in_place = SameBits(in_place[i * k + c], got) ||
                               (std::isnan(got) && std::isnan(in_place[i * k + c]));
      const bool ok_streamed = SameBits(streamed[i * k + c], got) ||
                               (std::isnan(got) && std::isnan(streamed[i * k + c]));
      if ((!ok || !ok_in_place || !ok_streamed) && reported++ < 3) {
        CHECK(ok) << cpu::IsaName(isa) << " " << Name<Acc>() << " " << n << "x" << k << " r=" << r
                  << " at (" << i << ", " << c << "): " << got << " vs " << want;
        CHECK(ok_in_place) << cpu::IsaName(isa) << " in place at (" << i << ", " << c << ")";
        CHECK(ok_streamed) << cpu::IsaName(isa) << " streamed at (" << i << ", " << c << ")";
      }
    }
  }
}

// The loop of one instruction set from zero with -p (what the product op runs) against
// ProductElement, bit for bit, with and without non-temporal stores; the output's old
// values must not leak in.
template <typename Acc>
void CheckProductLoop(cpu::Isa isa, int64_t n, int64_t k, int64_t r, std::mt19937_64& rng,
                      bool specials) {
  auto p = Random<Acc>(n * r, rng), q = Random<Acc>(k * r, rng);
  if (specials && r > 0) {
    p[(n - 1) * r] = std::numeric_limits<Acc>::quiet_NaN();  // a row of NaNs
    q[(k / 2) * r + r - 1] = std::numeric_limits<Acc>::infinity();  // a column of +-Inf
  }
  std::vector<Acc> minus_p(p.size());
  for (size_t e = 0; e < p.size(); ++e) minus_p[e] = -p[e];
  const int64_t width = cpu::PanelWidth<Acc>(isa);
  std::vector<Acc> packed(cpu::PackedSize(k, r, width), Acc(-7));
  cpu::PackQ(q.data(), k, r, width, 0, cpu::NumPanels(k, width), packed.data());
  std::vector<Acc> storage(n * k + 64 / sizeof(Acc), std::numeric_limits<Acc>::quiet_NaN());
  Acc* streamed = storage.data();
  while (reinterpret_cast<uintptr_t>(streamed) % 64 != 0) ++streamed;
  std::vector<Acc> out(n * k, std::numeric_limits<Acc>::quiet_NaN());
  cpu::ResidualRows(isa, out.data(), minus_p.data(), packed.data(), out.data(), n, k, r,
                    /*stream=*/false, /*zero=*/true);
  cpu::ResidualRows(isa, streamed, minus_p.data(), packed.data(), streamed, n, k, r,
                    /*stream=*/true, /*zero=*/true);
  int reported = 0;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t c = 0; c < k; ++c) {
      const Acc want = lr::ProductElement(p.data(), q.data(), i, c, k, r);
      for (const Acc got : {out[i * k + c], streamed[i * k + c]}) {
        const bool ok = SameBits(got, want) || (std::isnan(got) && std::isnan(want));
        if (!ok && reported++ < 3) {
          CHECK(ok) << cpu::IsaName(isa) << " product " << Name<Acc>() << " " << n << "x" << k
                    << " r=" << r << " at (" << i << ", " << c << "): " << got << " vs " << want;
        }
      }
    }
  }
}

// The compensate loop of one instruction set against CompensatedElement and
// CompensatedProductElement, bit for bit: m = g + e written (also with
// non-temporal stores), and m read as given where there is no e (the float16
// path: m rounded first, then summed).
template <typename Acc>
void CheckCompensateLoop(cpu::Isa isa, int64_t n, int64_t k, int64_t r, std::mt19937_64& rng,
                         bool specials) {
  auto g = Random<Acc>(n * k, rng), e = Random<Acc>(n * k, rng), q = Random<Acc>(k * r, rng);
  if (specials && n * k > 3) {
    const Acc inf = std::numeric_limits<Acc>::infinity(), nan = std::numeric_limits<Acc>::quiet_NaN();
    g[1] = nan;                                  // a NaN row of p
    e[n * k - 1] = -inf;                         // -Inf (or NaN) in the last row's p
    g[0] = Acc(-0.0);                            // -0 + -0 = -0: the lanes' zeros
    e[0] = Acc(-0.0);
    if (r > 0) q[(k / 2) * r + r - 1] = inf;     // a column of q at Inf
  }
  std::vector<Acc> qt(cpu::PaddedColumns(k) * r, Acc(-7));
  cpu::TransposeQ(q.data(), k, r, 0, r, qt.data());
  std::vector<Acc> m(n * k, Acc(-3)), p(n * r, Acc(-5)), p_from_m(n * r, Acc(-5));
  cpu::CompensateRows(isa, g.data(), e.data(), qt.data(), m.data(), p.data(), n, k, r,
                      /*add=*/true);
  std::vector<Acc> storage(n * k + 64 / sizeof(Acc), Acc(-3)), p_streamed(n * r, Acc(-5));
  Acc* streamed = storage.data();
  while (reinterpret_cast<uintptr_t>(streamed) % 64 != 0) ++streamed;
  cpu::CompensateRows(isa, g.data(), e.data(), qt.data(), streamed, p_streamed.data(), n, k, r,
                      /*add=*/true, /*stream=*/true);
  cpu::CompensateRows(isa, m.data(), static_cast<const Acc*>(nullptr), qt.data(),
                      static_cast<Acc*>(nullptr), p_from_m.data(), n, k, r, /*add=*/false);
  int reported = 0;
  const auto same = [](Acc a, Acc b) { return SameBits(a, b) || (std::isnan(a) && std::isnan(b)); };
  for (int64_t x = 0; x < n * k; ++x) {
    const Acc want = lr::CompensatedElement(g[x], e[x]);
    if ((!same(m[x], want) || !same(streamed[x], want)) && reported++ < 3) {
      CHECK(false) << cpu::IsaName(isa) << " compensated m " << Name<Acc>() << " " << n << "x" << k
                   << " r=" << r << " at " << x << ": " << m[x] << " / " << streamed[x] << " vs "
                   << want;
    }
  }
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < r; ++j) {
      const Acc want = lr::CompensatedProductElement(g.data(), e.data(), q.data(), i, j, k, r);
      const Acc got = p[i * r + j];
      const bool ok = same(got, want) && same(p_streamed[i * r + j], want) &&
                      same(p_from_m[i * r + j], want);  // m holds g + e's very bits
      if (!ok && reported++ < 3) {
        CHECK(false) << cpu::IsaName(isa) << " compensated p " << Name<Acc>() << " " << n << "x"
                     << k << " r=" << r << " at (" << i << ", " << j << "): " << got << " / "
                     << p_streamed[i * r + j] << " / " << p_from_m[i * r + j] << " vs " << want;
      }
    }
  }
}

// The project loop of one instruction set, block by block and column range by
// column range as the kernel cuts it, the blocks' sums then added in order,
// against ProjectElement bit for bit.
template <typename Acc>
void CheckProjectLoop(cpu::Isa isa, int64_t n, int64_t k, int64_t r, std::mt19937_64& rng,
                      bool specials) {
  auto m = Random<Acc>(n * k, rng), p = Random<Acc>(n * r, rng);
  if (specials && n * k > 3 && r > 0) {
    m[1] = std::numeric_limits<Acc>::quiet_NaN();              // column 1: NaN
    p[(n - 1) * r] = std::numeric_limits<Acc>::infinity();     // rank 0: +-Inf
    m[0] = Acc(-0.0);
  }
  const int64_t blocks = (n + lr::kProjectRows - 1) / lr::kProjectRows;
  std::vector<Acc> part(blocks * r * k, Acc(-9));
  const int64_t cut = k / 3;  // two column ranges, one of them ragged
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t first = b * lr::kProjectRows, rows = std::min(lr::kProjectRows, n - first);
    cpu::ProjectBlock(isa, m.data() + first * k, p.data() + first * r, part.data() + b * r * k, rows, k,
                      r, 0, cut);
    cpu::ProjectBlock(isa, m.data() + first * k, p.data() + first * r, part.data() + b * r * k, rows, k,
                      r, cut, k);
  }
  int reported = 0;
  for (int64_t c = 0; c < k; ++c) {
    for (int64_t j = 0; j < r; ++j) {
      Acc total = blocks > 0 ? part[j * k + c] : Acc(0);
      for (int64_t b = 1; b < blocks; ++b) total = total + part[(b * r + j) * k + c];
      const Acc want = lr::ProjectElement(m.data(), p.data(), c, j, n, k, r);
      const bool ok = SameBits(total, want) || (std::isnan(total) && std::isnan(want));
      if (!ok && reported++ < 3) {
        CHECK(false) << cpu::IsaName(isa) << " project " << Name<Acc>() << " " << n << "x" << k
                     << " r=" << r << " at (" << c << ", " << j << "): " << total << " vs " << want;
      }
    }
  }
}

}  // namespace

int main() {
  std::mt19937_64 rng(7);
  Case("element/float vs double", [&] {
    for (int64_t r : {0, 1, 4, 32, 64}) CheckElementAgainstDouble<float>(9, 33, r, rng);
  });
  Case("element/double vs double", [&] {
    for (int64_t r : {0, 1, 4, 32, 64}) CheckElementAgainstDouble<double>(9, 33, r, rng);
  });
  Case("element/order of the steps", [] {
    // 1 - 1 * 1 - 2^-30 * 1 in order: (1 - 1) - 2^-30 = -2^-30; summing p q
    // first would round 1 + 2^-30 to 1 in float and give 0.
    const float m[] = {1.0f}, p[] = {1.0f, std::ldexp(1.0f, -30)}, q[] = {1.0f, 1.0f};
    CHECK(lr::ResidualElement(m, p, q, 0, 0, 1, 2) == -std::ldexp(1.0f, -30));
  });
  Case("element/one rounding per step", [] {
    // (1 + 2^-12)^2 = 1 + 2^-11 + 2^-24 needs 25 bits: rounded on its own it
    // is 1 + 2^-11 and the residual 0; fused, the residual is -2^-24 exactly.
    const float x = 1.0f + std::ldexp(1.0f, -12);
    const float m[] = {1.0f + std::ldexp(1.0f, -11)}, p[] = {x}, q[] = {x};
    CHECK(lr::ResidualElement(m, p, q, 0, 0, 1, 1) == -std::ldexp(1.0f, -24));
  });
  Case("element/product vs double", [&] {
    for (int64_t r : {0, 1, 4, 32, 64}) {
      const auto p = Random<double>(9 * r, rng), q = Random<double>(33 * r, rng);
      for (int64_t i = 0; i < 9; ++i) {
        for (int64_t c = 0; c < 33; ++c) {
          double exact = 0, magnitude = 0;
          for (int64_t j = 0; j < r; ++j) {
            exact += p[i * r + j] * q[c * r + j];
            magnitude += std::fabs(p[i * r + j] * q[c * r + j]);
          }
          const double got = lr::ProductElement(p.data(), q.data(), i, c, 33, r);
          CHECK(std::fabs(got - exact) <= 2 * (r + 1) * 2.3e-16 * magnitude) << i << " " << c << " r=" << r;
        }
      }
    }
  });
  Case("element/product of rank 0 is +0", [] {
    const float p[] = {0.0f}, q[] = {0.0f};
    const float got = lr::ProductElement(p, q, 0, 0, 1, 0);
    CHECK(got == 0.0f && !std::signbit(got));
  });
  Case("pack/layout", [] {
    const int64_t k = 5, r = 2, width = 4;
    std::vector<float> q(k * r);
    for (int64_t e = 0; e < k * r; ++e) q[e] = static_cast<float>(e + 1);
    std::vector<float> packed(cpu::PackedSize(k, r, width), -1.0f);
    CHECK(packed.size() == 16u);
    cpu::PackQ(q.data(), k, r, width, 0, cpu::NumPanels(k, width), packed.data());
    for (int64_t panel = 0; panel < 2; ++panel) {
      for (int64_t j = 0; j < r; ++j) {
        for (int64_t col = 0; col < width; ++col) {
          const int64_t c = panel * width + col;
          const float want = c < k ? q[c * r + j] : 0.0f;
          CHECK(packed[(panel * r + j) * width + col] == want) << panel << " " << j << " " << col;
        }
      }
    }
  });
  Case("element/compensated product vs double", [&] {
    for (int64_t k : {1, 15, 16, 17, 100}) {
      for (int64_t r : {1, 4}) {
        const auto g = Random<float>(3 * k, rng), e = Random<float>(3 * k, rng), q = Random<float>(k * r, rng);
        for (int64_t i = 0; i < 3; ++i) {
          for (int64_t j = 0; j < r; ++j) {
            double exact = 0, magnitude = 0;
            for (int64_t c = 0; c < k; ++c) {
              const double m = lr::CompensatedElement(g[i * k + c], e[i * k + c]);
              exact += m * q[c * r + j];
              magnitude += std::fabs(m * q[c * r + j]);
            }
            const double got = lr::CompensatedProductElement(g.data(), e.data(), q.data(), i, j, k, r);
            // k / 16 fused steps per lane, then four additions: each rounds once.
            const double steps = static_cast<double>((k + 15) / 16 + 4);
            CHECK(std::fabs(got - exact) <= steps * 6e-8 * magnitude) << "k=" << k << " r=" << r;
          }
        }
      }
    }
  });
  Case("element/compensated product lane order", [] {
    // Lanes 0 and 8 hold 1 and 2^-30 and lane 1 holds -1: the halves give
    // (1 + 2^-30) = 1 in lane 0 (float), then 1 + -1 = 0. Summed in column
    // order it would be (1 + -1) + 2^-30 = 2^-30.
    float g[17] = {}, e[17] = {}, q[17];
    for (float& x : q) x = 1.0f;
    g[0] = 1.0f;
    g[1] = -1.0f;
    g[8] = std::ldexp(1.0f, -30);
    CHECK(lr::CompensatedProductElement(g, e, q, 0, 0, 17, 1) == 0.0f);
    // The padded columns take fma(0, 0, -0) = +0: a row of -0 products sums to +0.
    float mz[3] = {-0.0f, -0.0f, -0.0f}, qz[3] = {1.0f, 1.0f, 1.0f}, ez[3] = {-0.0f, -0.0f, -0.0f};
    const float zero = lr::CompensatedProductElement(mz, ez, qz, 0, 0, 3, 1);
    CHECK(zero == 0.0f && !std::signbit(zero));
  });
  std::printf("CPU: %s\n", cpu::IsaName(cpu::BestIsa()));
  for (cpu::Isa isa : {cpu::Isa::kGeneric, cpu::Isa::kAvx2, cpu::Isa::kAvx512}) {
    if (!cpu::IsaSupported(isa)) {
      std::printf("skipping the %s loop: this CPU does not run it\n", cpu::IsaName(isa));
      continue;
    }
    for (bool specials : {false, true}) {
      const std::string name = std::string("loop/") + cpu::IsaName(isa) + (specials ? "/nan_inf" : "");
      Case(name + "/float", [&] {
        for (int64_t n : {1, 3, 4, 5, 9}) {
          for (int64_t k : {1, 7, 8, 15, 16, 17, 31, 63, 64, 65, 130}) {
            for (int64_t r : {0, 1, 2, 5, 32, 64}) CheckLoop<float>(isa, n, k, r, rng, specials);
          }
        }
      });
      Case(name + "/double", [&] {
        for (int64_t n : {1, 3, 4, 5, 9}) {
          for (int64_t k : {1, 3, 4, 7, 8, 9, 31, 32, 33, 70}) {
            for (int64_t r : {0, 1, 2, 5, 32, 64}) CheckLoop<double>(isa, n, k, r, rng, specials);
          }
        }
      });
      Case(name + "/product/float", [&] {
        for (int64_t n : {1, 3, 4, 5, 9}) {
          for (int64_t k : {1, 7, 16, 17, 64, 65, 130}) {
            for (int64_t r : {0, 1, 2, 5, 32}) CheckProductLoop<float>(isa, n, k, r, rng, specials);
          }
        }
      });
      Case(name + "/product/double", [&] {
        for (int64_t n : {1, 4, 5, 9}) {
          for (int64_t k : {1, 4, 8, 9, 33, 70}) {
            for (int64_t r : {0, 1, 5, 32}) CheckProductLoop<double>(isa, n, k, r, rng, specials);
          }
        }
      });
      Case(name + "/compensate/float", [&] {
        for (int64_t n : {1, 3, 5, 8, 9}) {  // whole blocks of rows and a few left over
          for (int64_t k : {1, 7, 8, 15, 16, 17, 31, 33, 64, 65, 130}) {
            for (int64_t r : {0, 1, 2, 4, 5, 8, 9, 32}) CheckCompensateLoop<float>(isa, n, k, r, rng, specials);
          }
        }
      });
      Case(name + "/compensate/double", [&] {
        for (int64_t n : {1, 3, 5, 8}) {
          for (int64_t k : {1, 4, 7, 8, 16, 17, 33, 70}) {
            for (int64_t r : {0, 1, 2, 3, 5, 9}) CheckCompensateLoop<double>(isa, n, k, r, rng, specials);
          }
        }
      });
      Case(name + "/project/float", [&] {
        for (int64_t n : {0, 1, 3, 4, 7, 256, 300}) {
          for (int64_t k : {1, 7, 16, 17, 33, 70}) {
            for (int64_t r : {1, 2, 5}) CheckProjectLoop<float>(isa, n, k, r, rng, specials);
          }
        }
      });
      Case(name + "/project/double", [&] {
        for (int64_t n : {1, 5, 257}) {
          for (int64_t k : {1, 4, 9, 33}) {
            for (int64_t r : {1, 3}) CheckProjectLoop<double>(isa, n, k, r, rng, specials);
          }
        }
      });
    }
  }
  return tfcomp::testing::Summary();
}
