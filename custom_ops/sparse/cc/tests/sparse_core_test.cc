// Unit test of sparse_core.h (no TensorFlow): the hash against a
// straightforward __int128 reference, the seed expansion, an empirical
// universality check, the selection predicate, and every selection loop this
// CPU runs against the sequential reference.
// Prints "N passed, M failed" and exits nonzero on a failure.
#include "custom_ops/sparse/cc/kernels/sparse_core.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "custom_ops/sparse/cc/kernels/sparse_select_cpu.h"
#include "custom_ops/testing/check.h"

namespace {

using tfcomp::testing::Case;
using tfcomp::testing::Summary;
using tfcomp::sparse::HashParams;

using u128 = unsigned __int128;

constexpr uint64_t kMaxIndex = std::numeric_limits<int64_t>::max();  // indices are int64 >= 0
constexpr uint64_t k32 = uint64_t{1} << 32;

// ---- References ------------------------------------------------------------

// floor(((a0 * i0 + a1 * i1 + b) mod 2^64) * m / 2^64), i = i1 * 2^32 + i0,
// in 128-bit arithmetic.
int64_t RefHashSlot(HashParams h, uint64_t i, int64_t m) {
  const u128 sum = static_cast<u128>(h.a0) * (i % k32) + static_cast<u128>(h.a1) * (i / k32) + h.b;
  const u128 x = sum % (static_cast<u128>(1) << 64);
  return static_cast<int64_t>((x * static_cast<u128>(m)) >> 64);
}

// ---- Tests -----------------------------------------------------------------

void Constants() { CHECK(tfcomp::sparse::kEmptyIndex == -1); }

void CheckHashSlot(HashParams h, uint64_t i, int64_t m) {
  const int64_t got = tfcomp::sparse::HashSlot(h, i, m);
  CHECK(got >= 0 && got < m) << "slot " << got << " outside [0, " << m << ")";
  CHECK(got == RefHashSlot(h, i, m)) << "a0=" << h.a0 << " a1=" << h.a1 << " b=" << h.b
                                     << " i=" << i << " m=" << m << " got=" << got
                                     << " ref=" << RefHashSlot(h, i, m);
}

const int64_t kSlotCounts[] = {1, 2, 7, 1024, int64_t{1} << 31, int64_t{1} << 40, kMaxIndex};

void HashSlotEdges() {
  const uint64_t words[] = {0, 1, 2, k32 - 1, k32, ~uint64_t{0}, ~uint64_t{0} - 1, uint64_t{1} << 63,
                            0x123456789abcdefull};
  const uint64_t indices[] = {0, 1, 2, 63, 64, 1023, 1024, k32 - 1, k32, k32 + 1, 2 * k32,
                              uint64_t{1} << 62, kMaxIndex - 1, kMaxIndex};
  for (uint64_t a0 : words) {
    for (uint64_t a1 : {uint64_t{0}, uint64_t{3}, ~uint64_t{0}, uint64_t{0x9e3779b97f4a7c15}}) {
      for (uint64_t b : {uint64_t{0}, uint64_t{1} << 63, ~uint64_t{0}}) {
        for (uint64_t i : indices) {
          for (int64_t m : kSlotCounts) CheckHashSlot(HashParams{a0, a1, b}, i, m);
        }
      }
    }
  }
  // Spelled out: h(i) = floor(((a0 i0 + a1 i1 + b) mod 2^64) m / 2^64).
  using tfcomp::sparse::HashSlot;
  CHECK(HashSlot(HashParams{1, 0, 0}, 5, 7) == 0);                       // 35 / 2^64
  CHECK(HashSlot(HashParams{0, 0, uint64_t{1} << 63}, 12345, 2) == 1);    // the middle
  CHECK(HashSlot(HashParams{0, 0, (uint64_t{1} << 63) - 1}, 0, 2) == 0);  // just under it
  CHECK(HashSlot(HashParams{0, 0, ~uint64_t{0}}, 9, 1024) == 1023);      // the top
  CHECK(HashSlot(HashParams{uint64_t{1} << 63, 0, uint64_t{1} << 63}, 1, 2) == 0);  // 2^64 wraps
  CHECK(HashSlot(HashParams{uint64_t{1} << 62, 0, 0}, 3, 4) == 3);       // 3 * 2^62
  CHECK(HashSlot(HashParams{0, uint64_t{1} << 62, 0}, 2 * k32, 4) == 2);  // high half: 2 * 2^62
  CHECK(HashSlot(HashParams{0, uint64_t{1} << 62, 0}, k32 - 1, 4) == 0);  // low half ignored
  CHECK(HashSlot(HashParams{0, 0, ~uint64_t{0}}, 0, kMaxIndex) == kMaxIndex - 1);
}

void HashSlotRandom() {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 100000; ++trial) {
    const HashParams h{rng(), rng(), rng()};
    const uint64_t i = trial % 2 ? rng() >> 1 : rng() % 200000;  // int64 >= 0
    CheckHashSlot(h, i, kSlotCounts[trial % 5]);
    if (trial % 16 == 0) CheckHashSlot(h, i, 1 + static_cast<int64_t>(rng() % 100000));
  }
  // Seeds as the op draws them.
  for (int trial = 0; trial < 2000; ++trial) {
    const HashParams h = tfcomp::sparse::HashFromSeed(rng(), rng());
    for (int64_t m : kSlotCounts) CheckHashSlot(h, rng() >> 1, m);
  }
}

bool SameParams(HashParams x, HashParams y) { return x.a0 == y.a0 && x.a1 == y.a1 && x.b == y.b; }

void HashFromSeed() {
  const uint64_t edges[] = {0, 1, 2, k32 - 1, k32, kMaxIndex, uint64_t{1} << 63, ~uint64_t{0}};
  for (uint64_t s0 : edges) {
    for (uint64_t s1 : edges) {
      CHECK(SameParams(tfcomp::sparse::HashFromSeed(s0, s1), tfcomp::sparse::HashFromSeed(s0, s1)))
          << "not deterministic for (" << s0 << ", " << s1 << ")";
    }
  }
  std::mt19937_64 rng(3);
  std::set<std::tuple<uint64_t, uint64_t, uint64_t>> seen;
  std::set<uint64_t> seen_a0;
  const int kSeeds = 20000;
  for (int trial = 0; trial < kSeeds; ++trial) {
    const uint64_t s0 = rng(), s1 = trial % 3 ? rng() : 0;
    const HashParams h = tfcomp::sparse::HashFromSeed(s0, s1);
    CHECK(SameParams(h, tfcomp::sparse::HashFromSeed(s0, s1)))
        << "not deterministic for (" << s0 << ", " << s1 << ")";
    seen.insert({h.a0, h.a1, h.b});
    seen_a0.insert(h.a0);
    // Both words of the seed matter.
    CHECK(!SameParams(tfcomp::sparse::HashFromSeed(s0 ^ 1, s1), h))
        << "seed[0] ignored: (" << s0 << ", " << s1 << ")";
    CHECK(!SameParams(tfcomp::sparse::HashFromSeed(s0, s1 ^ 1), h))
        << "seed[1] ignored: (" << s0 << ", " << s1 << ")";
  }
  // Distinct seeds give distinct functions (64-bit draws: no repeats expected).
  CHECK(seen.size() == kSeeds) << seen.size() << " distinct (a0, a1, b) of " << kSeeds;
  CHECK(seen_a0.size() == kSeeds) << seen_a0.size() << " distinct a0 of " << kSeeds;
}

// For two fixed keys, Pr over the seed [h(x) == h(y)] is about 1/m for a
// universal family; the bound here is loose (within [1/2m, 2/m)). The pairs
// differ in the low half, the high half, or both.
void Universality() {
  const int64_t m = 64;
  const int kSeeds = 40000;
  const std::pair<uint64_t, uint64_t> pairs[] = {
      {0, 1}, {0, 64}, {1, 65}, {3, 3 + 64 * 1000}, {0, k32}, {7, 7 + 64 * k32},
      {k32 - 1, k32}, {5, uint64_t{1} << 40}, {12345, kMaxIndex}, {100, 101}};
  std::mt19937_64 rng(64);
  for (const auto& keys : pairs) {
    int collisions = 0;
    for (int s = 0; s < kSeeds; ++s) {
      const HashParams h = tfcomp::sparse::HashFromSeed(rng(), rng());
      collisions += tfcomp::sparse::HashSlot(h, keys.first, m) ==
                    tfcomp::sparse::HashSlot(h, keys.second, m);
    }
    const double rate = static_cast<double>(collisions) / kSeeds;
    CHECK(rate < 2.0 / m && rate > 0.5 / m)
        << "keys (" << keys.first << ", " << keys.second << "): collision rate " << rate
        << ", 1/m = " << 1.0 / m;
  }
  // And one key's slot is about uniform over the seeds.
  std::vector<int> counts(m, 0);
  for (int s = 0; s < kSeeds; ++s) {
    ++counts[tfcomp::sparse::HashSlot(tfcomp::sparse::HashFromSeed(rng(), rng()), 42, m)];
  }
  for (int64_t j = 0; j < m; ++j) {
    const double expected = static_cast<double>(kSeeds) / m;
    CHECK(counts[j] > 0.7 * expected && counts[j] < 1.3 * expected)
        << "slot " << j << ": " << counts[j] << " of " << kSeeds << " seeds";
  }
}

template <typename Acc>
void CheckSelected() {
  using L = std::numeric_limits<Acc>;
  using tfcomp::sparse::Selected;
  const Acc nan = L::quiet_NaN(), inf = L::infinity();
  for (Acc t : {Acc(0), Acc(0.5), Acc(1), Acc(1e6), L::max(), inf}) {
    CHECK(Selected(nan, t)) << "NaN at threshold " << t;
    CHECK(Selected(-nan, t)) << "-NaN at threshold " << t;
    CHECK(Selected(t, t)) << "|g| == threshold " << t;
    CHECK(Selected(inf, t)) << "inf at threshold " << t;
    if (t > 0) {
      CHECK(!Selected(std::nextafter(t, Acc(0)), t)) << "just below threshold " << t;
      CHECK(!Selected(Acc(0), t)) << "0 at threshold " << t;
    }
    if (t < inf) {
      CHECK(Selected(std::nextafter(t, inf), t)) << "just above threshold " << t;
    }
  }
  CHECK(!Selected(L::max(), inf));
  CHECK(Selected(Acc(0), Acc(0)));
  CHECK(Selected(Acc(0), -Acc(0)));
  CHECK(Selected(Acc(3), Acc(2)));
  CHECK(!Selected(Acc(1), Acc(2)));
  // Through AbsValue, as the kernels call it: the sign does not matter.
  CHECK(Selected(tfcomp::AbsValue(-inf), Acc(1)));
  CHECK(Selected(tfcomp::AbsValue(Acc(-2)), Acc(2)));
  CHECK(!Selected(tfcomp::AbsValue(Acc(-1.5)), Acc(2)));
  CHECK(Selected(tfcomp::AbsValue(-nan), Acc(2)));
}
void SelectedFloat() { CheckSelected<float>(); }
void SelectedDouble() { CheckSelected<double>(); }

// One selection loop on g[begin, end) against Algorithm 1 done sequentially:
// every index with |g| >= t (or NaN) in index order, the last writer winning.
template <typename T, typename Index>
void CheckSelectLoop(tfcomp::Isa isa, const std::vector<T>& g, int64_t begin, int64_t end, T t,
                     int64_t capacity, HashParams h) {
  std::vector<Index> indices(capacity, -1), want_indices(capacity, -1);
  std::vector<T> values(capacity, T(0)), want_values(capacity, T(0));
  for (int64_t i = begin; i < end; ++i) {
    if (tfcomp::sparse::Selected(tfcomp::AbsValue(g[i]), t)) {
      const int64_t slot = tfcomp::sparse::HashSlot(h, i, capacity);
      want_indices[slot] = static_cast<Index>(i);
      want_values[slot] = g[i];
    }
  }
  const tfcomp::sparse::cpu::Slots<T, Index> slots{h, capacity, indices.data(), values.data()};
  tfcomp::sparse::cpu::SelectRange(isa, g.data(), begin, end, t, slots);
  for (int64_t j = 0; j < capacity; ++j) {
    const bool same_value = std::memcmp(&values[j], &want_values[j], sizeof(T)) == 0;
    CHECK(indices[j] == want_indices[j] && same_value)
        << tfcomp::IsaName(isa) << " [" << begin << ", " << end << ") t=" << t << " m=" << capacity
        << " slot " << j << ": index " << indices[j] << " want " << want_indices[j];
  }
}

// Ranges that start and end off the vector width, chunk boundaries, 0 to all
// selected, NaN, +-Inf and -0 in the data, thresholds 0 and NaN.
template <typename T, typename Index>
void SelectLoops(tfcomp::Isa isa) {
  std::mt19937_64 rng(7);
  std::normal_distribution<double> normal;
  const T nan = std::numeric_limits<T>::quiet_NaN(), inf = std::numeric_limits<T>::infinity();
  for (bool specials : {false, true}) {
    std::vector<T> g(20011);
    for (auto& x : g) x = static_cast<T>(normal(rng));
    if (specials) {
      for (int64_t i = 0; i < static_cast<int64_t>(g.size()); i += 37) g[i] = nan;
      for (int64_t i = 5; i < static_cast<int64_t>(g.size()); i += 101) g[i] = inf;
      for (int64_t i = 9; i < static_cast<int64_t>(g.size()); i += 103) g[i] = -inf;
      for (int64_t i = 2; i < static_cast<int64_t>(g.size()); i += 7) g[i] = -T(0);
    }
    const int64_t n = g.size();
    const std::vector<std::pair<int64_t, int64_t>> ranges = {
        {0, 0}, {0, 1}, {0, 15}, {0, 16}, {0, 17}, {3, 500}, {0, 512}, {1, 513},
        {511, 1040}, {16384 - 3, n}, {0, n}, {7, n - 5}};
    for (const auto& [begin, end] : ranges) {
      for (T t : {T(0), T(1), T(2.5), T(4), inf, nan}) {
        for (int64_t capacity : {1, 97, 1024, 5003}) {
          CheckSelectLoop<T, Index>(isa, g, begin, end, t, capacity,
                                    tfcomp::sparse::HashFromSeed(begin + 1, capacity));
        }
      }
    }
  }
}

void SelectLoopsEveryIsa() {
  std::printf("CPU: %s\n", tfcomp::IsaName(tfcomp::BestIsa()));
  for (tfcomp::Isa isa : {tfcomp::Isa::kGeneric, tfcomp::Isa::kAvx2, tfcomp::Isa::kAvx512}) {
    if (!tfcomp::IsaSupported(isa)) {
      std::printf("skipping the %s selection loop: this CPU does not run it\n", tfcomp::IsaName(isa));
      continue;
    }
    const std::string name = std::string("SelectLoop/") + tfcomp::IsaName(isa);
    Case(name + "/float/int32", [isa] { SelectLoops<float, int32_t>(isa); });
    Case(name + "/float/int64", [isa] { SelectLoops<float, int64_t>(isa); });
    Case(name + "/double/int32", [isa] { SelectLoops<double, int32_t>(isa); });
  }
}

}  // namespace

int main() {
  Case("Constants", Constants);
  Case("HashSlotEdges", HashSlotEdges);
  Case("HashSlotRandom", HashSlotRandom);
  Case("HashFromSeed", HashFromSeed);
  Case("Universality", Universality);
  Case("SelectedFloat", SelectedFloat);
  Case("SelectedDouble", SelectedDouble);
  SelectLoopsEveryIsa();
  return Summary();
}
