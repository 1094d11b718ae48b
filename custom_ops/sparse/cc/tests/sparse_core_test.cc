// Unit test of sparse_core.h (no TensorFlow): the hash against a
// straightforward __int128 reference, the seed expansion, an empirical
// universality check, the selection predicate, the slot claims' order against
// the collision rule spelled out, and every selection loop this CPU runs
// (on one thread and on several) against the sequential reference, plus
// certain collisions with their winners spelled out.
// Prints "N passed, M failed" and exits nonzero on a failure.
#include "custom_ops/sparse/cc/kernels/sparse_core.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <type_traits>
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

void Constants() {
  CHECK(tfcomp::sparse::kEmptyIndex == -1);
  CHECK(tfcomp::sparse::kMaxHashSelectElements == int64_t{1} << 32);  // the claim's 32-bit index
}

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

// The order a slot keeps, spelled out (sparse_core.h): NaN above every
// number, then the larger float32 magnitude (denormals as 0), then the larger
// index. a and b are magnitudes, >= 0 or NaN.
bool RefOutranks(float a, int64_t i, float b, int64_t j) {
  if (std::fpclassify(a) == FP_SUBNORMAL) a = 0;
  if (std::fpclassify(b) == FP_SUBNORMAL) b = 0;
  if (std::isnan(a) != std::isnan(b)) return std::isnan(a);
  if (!std::isnan(a) && a != b) return a > b;
  return i > j;
}

// float32(|x|), the magnitude a claim compares.
template <typename T>
float Magnitude(T x) {
  return static_cast<float>(std::fabs(x));
}

// NaNs of either sign with assorted payloads (quiet and signaling), which
// claim alike: all NaNs tie.
template <typename T>
std::vector<T> NaNs() {
  const std::vector<uint64_t> bits =
      sizeof(T) == 4 ? std::vector<uint64_t>{0x7fc00000, 0xffc00000, 0x7fffffff, 0x7f800001,
                                             0xffc00123, 0x7fa00000}
                     : std::vector<uint64_t>{0x7ff8000000000000, 0xfff8000000000000,
                                             0x7fffffffffffffff, 0x7ff0000000000001,
                                             0xfff8000000000123, 0x7ff4000000000000};
  std::vector<T> nans;
  for (uint64_t b : bits) {
    T x;
    std::memcpy(&x, &b, sizeof(T));
    nans.push_back(x);
  }
  return nans;
}

// SlotClaim orders like RefOutranks, from float and double magnitudes (double
// ones compare as float32: 3 + 2^-40 ties 3, 1e300 ties inf), over indices up
// to 2^32 - 1; no claim is 0 (empty), and ClaimedIndex gives the index back.
template <typename Acc>
void CheckSlotClaims() {
  using L = std::numeric_limits<Acc>;
  using tfcomp::sparse::ClaimedIndex;
  using tfcomp::sparse::SlotClaim;
  std::vector<Acc> magnitudes = {Acc(0),   L::denorm_min(), L::min(), Acc(1e-30),
                                 Acc(0.5), Acc(1), std::nextafter(Acc(1), Acc(2)),
                                 Acc(2),   Acc(3), L::max(),        L::infinity(),
                                 L::quiet_NaN()};
  if constexpr (std::is_same_v<Acc, double>) {
    for (double m : {3 + std::ldexp(1.0, -40), 1e300, 1e-50}) magnitudes.push_back(m);
  }
  const int64_t indices[] = {0, 1, 2, 1000, (int64_t{1} << 31) - 1, int64_t{1} << 31,
                             (int64_t{1} << 32) - 2, (int64_t{1} << 32) - 1};
  for (Acc a : magnitudes) {
    for (int64_t i : indices) {
      const uint64_t claim = SlotClaim(a, i);
      CHECK(claim != 0) << "|g| " << a << " index " << i << ": claim 0, an empty slot's";
      CHECK(ClaimedIndex(claim) == i) << "|g| " << a << " index " << i << ": ClaimedIndex "
                                      << ClaimedIndex(claim);
      for (Acc b : magnitudes) {
        for (int64_t j : indices) {
          CHECK((claim > SlotClaim(b, j)) == RefOutranks(Magnitude(a), i, Magnitude(b), j))
              << "(|g| " << a << ", index " << i << ") against (|g| " << b << ", index " << j
              << "): claims 0x" << std::hex << claim << ", 0x" << SlotClaim(b, j);
        }
      }
    }
  }
  // Through AbsValue, as the kernels call it: -0 claims as 0, -NaN as NaN.
  CHECK(SlotClaim(tfcomp::AbsValue(-Acc(0)), 5) == SlotClaim(Acc(0), 5));
  CHECK(SlotClaim(tfcomp::AbsValue(-L::quiet_NaN()), 5) == SlotClaim(L::quiet_NaN(), 5));
  CHECK(SlotClaim(tfcomp::AbsValue(-L::infinity()), 5) == SlotClaim(L::infinity(), 5));
  CHECK(SlotClaim(tfcomp::AbsValue(Acc(-2)), 5) == SlotClaim(Acc(2), 5));
  for (Acc nan : NaNs<Acc>()) {
    CHECK(SlotClaim(tfcomp::AbsValue(nan), 5) == SlotClaim(L::quiet_NaN(), 5))
        << "a NaN claims 0x" << std::hex << SlotClaim(tfcomp::AbsValue(nan), 5) << ", not 0x"
        << SlotClaim(L::quiet_NaN(), 5);
  }
  CHECK(ClaimedIndex(0) == tfcomp::sparse::kEmptyIndex);
}
void SlotClaimsFloat() { CheckSlotClaims<float>(); }
void SlotClaimsDouble() { CheckSlotClaims<double>(); }

// Algorithm 1 done sequentially with the collision rule of sparse_core.h: every
// index with |g| >= t (or NaN) claims bucket h(i) of bucket_size slots (the
// last shorter), and the bucket keeps its largest SlotClaims, largest first,
// sorted here rather than passed on slot to slot. The slot's index, -1 when empty.
template <typename T>
std::vector<int64_t> RefSelect(const std::vector<T>& g, int64_t begin, int64_t end, T t,
                               int64_t capacity, int64_t bucket_size, HashParams h) {
  const int64_t buckets = (capacity + bucket_size - 1) / bucket_size;
  std::vector<std::vector<uint64_t>> hashed(buckets);
  for (int64_t i = begin; i < end; ++i) {
    if (tfcomp::sparse::Selected(tfcomp::AbsValue(g[i]), t)) {
      hashed[tfcomp::sparse::HashSlot(h, i, buckets)].push_back(
          tfcomp::sparse::SlotClaim(tfcomp::AbsValue(g[i]), i));
    }
  }
  std::vector<int64_t> indices(capacity, tfcomp::sparse::kEmptyIndex);
  for (int64_t b = 0; b < buckets; ++b) {
    std::sort(hashed[b].begin(), hashed[b].end(), std::greater<uint64_t>());
    const int64_t slots = std::min(capacity, (b + 1) * bucket_size) - b * bucket_size;
    for (int64_t k = 0; k < std::min<int64_t>(slots, hashed[b].size()); ++k) {
      indices[b * bucket_size + k] = tfcomp::sparse::ClaimedIndex(hashed[b][k]);
    }
  }
  return indices;
}

// How a selection loop fills the slots: as the op does on one thread (one
// pass, each claim's value kept beside it), in chunks taken last first (the
// rule does not depend on the order), and as the op does on several threads
// (chunks on threads at once, claims settled by atomic max, values read
// afterwards).
enum class Fill { kOnePass, kChunksLastFirst, kThreads };
const Fill kFills[] = {Fill::kOnePass, Fill::kChunksLastFirst, Fill::kThreads};
const char* FillName(Fill fill) {
  switch (fill) {
    case Fill::kOnePass: return "one pass";
    case Fill::kChunksLastFirst: return "chunks, last first";
    default: return "threads";
  }
}

template <typename T, typename Index>
struct Selection {
  std::vector<Index> indices;
  std::vector<T> values;
};

// Runs the selection loop of `isa` on g[begin, end) and converts the claims
// to (index, value) slots as the HashSelect CPU functor does.
template <typename T, typename Index>
Selection<T, Index> RunSelect(tfcomp::Isa isa, Fill fill, const std::vector<T>& g, int64_t begin,
                              int64_t end, T t, int64_t capacity, HashParams h,
                              int64_t bucket_size = 1) {
  std::vector<uint64_t> claims(capacity, 0);
  Selection<T, Index> out{std::vector<Index>(capacity), std::vector<T>(capacity, T(0))};
  const bool threaded = fill == Fill::kThreads;
  const tfcomp::sparse::cpu::Slots<T, Index> slots{
      h, capacity, bucket_size, tfcomp::sparse::BucketCount(capacity, bucket_size), claims.data(),
      threaded ? nullptr : out.values.data()};
  // Three chunks of unequal length, off the vector widths.
  const int64_t length = end - begin;
  const int64_t cut1 = begin + std::min(length, length / 3 + 5);
  const int64_t cuts[] = {begin, cut1, std::max(cut1, begin + 2 * length / 3), end};
  if (fill == Fill::kOnePass) {
    tfcomp::sparse::cpu::SelectRange(isa, g.data(), begin, end, t, slots);
  } else if (fill == Fill::kChunksLastFirst) {
    for (int c = 2; c >= 0; --c) {
      tfcomp::sparse::cpu::SelectRange(isa, g.data(), cuts[c], cuts[c + 1], t, slots);
    }
  } else {
    std::vector<std::thread> threads;
    for (int c = 0; c < 3; ++c) {
      threads.emplace_back([&, c] {
        tfcomp::sparse::cpu::SelectRange(isa, g.data(), cuts[c], cuts[c + 1], t, slots);
      });
    }
    for (auto& thread : threads) thread.join();
  }
  for (int64_t j = 0; j < capacity; ++j) {
    const int64_t index = tfcomp::sparse::ClaimedIndex(claims[j]);
    out.indices[j] = static_cast<Index>(index);
    if (threaded && index >= 0) out.values[j] = g[index];
  }
  return out;
}

template <typename T>
bool SameBits(T a, T b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

// One selection loop on g[begin, end), filled every way, against the
// sequential reference, value bits included; and each selected element is kept
// in its bucket, or the bucket is full of elements that outrank it
// (RefOutranks, not SlotClaim), the kept ones in decreasing order.
template <typename T, typename Index>
void CheckSelectLoop(tfcomp::Isa isa, const std::vector<T>& g, int64_t begin, int64_t end, T t,
                     int64_t capacity, int64_t bucket_size, HashParams h) {
  const std::vector<int64_t> want = RefSelect(g, begin, end, t, capacity, bucket_size, h);
  for (Fill fill : kFills) {
    const Selection<T, Index> got =
        RunSelect<T, Index>(isa, fill, g, begin, end, t, capacity, h, bucket_size);
    for (int64_t j = 0; j < capacity; ++j) {
      const T want_value = want[j] >= 0 ? g[want[j]] : T(0);  // +0 in an empty slot
      CHECK(got.indices[j] == want[j] && SameBits(got.values[j], want_value))
          << tfcomp::IsaName(isa) << ", " << FillName(fill) << " [" << begin << ", " << end
          << ") t=" << t << " m=" << capacity << " bucket " << bucket_size << " slot " << j
          << ": index " << got.indices[j] << " value " << got.values[j] << ", want " << want[j]
          << " value " << want_value;
    }
  }
  const auto outranks = [&](int64_t a, int64_t b) {
    return RefOutranks(Magnitude(g[a]), a, Magnitude(g[b]), b);
  };
  const int64_t buckets = tfcomp::sparse::BucketCount(capacity, bucket_size);
  for (int64_t i = begin; i < end; ++i) {
    if (!tfcomp::sparse::Selected(tfcomp::AbsValue(g[i]), t)) continue;
    const int64_t first = tfcomp::sparse::HashSlot(h, i, buckets) * bucket_size;
    const int64_t last = std::min(capacity, first + bucket_size);
    bool kept = false, beaten = true;
    for (int64_t j = first; j < last; ++j) {
      kept = kept || want[j] == i;
      beaten = beaten && want[j] >= 0 && want[j] != i && outranks(want[j], i);
      if (j > first && want[j] >= 0) CHECK(outranks(want[j - 1], want[j])) << "slot " << j;
    }
    CHECK(kept || beaten) << tfcomp::IsaName(isa) << " [" << begin << ", " << end << ") t=" << t
                          << " m=" << capacity << " bucket " << bucket_size << ": selected index "
                          << i << " (" << g[i] << ") lost its bucket at slot " << first;
  }
}

// Ranges that start and end off the vector width, chunk boundaries, 0 to all
// selected, NaN, +-Inf, -0 and +-3 (ties of magnitude, either sign) in the
// data, thresholds 0 and NaN.
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
      for (int64_t i = 4; i < static_cast<int64_t>(g.size()); i += 13) g[i] = i % 2 ? T(3) : -T(3);
    }
    const int64_t n = g.size();
    const std::vector<std::pair<int64_t, int64_t>> ranges = {
        {0, 0}, {0, 1}, {0, 15}, {0, 16}, {0, 17}, {3, 500}, {0, 512}, {1, 513},
        {511, 1040}, {16384 - 3, n}, {0, n}, {7, n - 5}};
    for (const auto& [begin, end] : ranges) {
      for (T t : {T(0), T(1), T(2.5), T(4), inf, nan}) {
        for (int64_t capacity : {1, 97, 1024, 5003}) {
          // Buckets of 4 leave 97 and 5003 a shorter last one, and 1 one bucket of 1.
          for (int64_t bucket_size : {1, 4}) {
            CheckSelectLoop<T, Index>(isa, g, begin, end, t, capacity, bucket_size,
                                      tfcomp::sparse::HashFromSeed(begin + 1, capacity));
          }
        }
      }
    }
  }
}

// Certain collisions, winners spelled out: one slot, or a few slots with
// planted ties.
template <typename T>
void SelectCollisions(tfcomp::Isa isa) {
  using Index = int64_t;
  const T nan = std::numeric_limits<T>::quiet_NaN(), inf = std::numeric_limits<T>::infinity();
  const HashParams h = tfcomp::sparse::HashFromSeed(11, 12);
  // One slot: g's winner at threshold t is (index, value).
  const auto one_slot = [&](const std::string& what, const std::vector<T>& g, T t, int64_t index,
                            T value) {
    for (Fill fill : kFills) {
      const Selection<T, Index> got =
          RunSelect<T, Index>(isa, fill, g, 0, static_cast<int64_t>(g.size()), t, 1, h);
      CHECK(got.indices[0] == index && SameBits(got.values[0], value))
          << tfcomp::IsaName(isa) << ", " << FillName(fill) << ", " << what << ": index "
          << got.indices[0] << " value " << got.values[0] << ", want " << index << " value "
          << value;
    }
  };
  // |-3| ties |3| ties |-3|: the largest index of the three, its sign kept.
  one_slot("ties", {T(2), T(-3), T(0.25), T(3), T(-3), T(2.5), T(-0.5), T(1)}, T(1), 4, T(-3));
  one_slot("first is largest", {T(-3), T(2), T(0.25), T(2.5), T(-1)}, T(1), 0, T(-3));
  one_slot("below t not selected", {T(-9), T(2), T(0.25), T(1.5), T(-1)}, T(10), -1, T(0));
  one_slot("-inf ties +inf", {T(1), -inf, T(5), inf, -inf, T(2)}, T(1), 4, -inf);
  // NaN outranks +-inf; NaNs tie (either sign).
  one_slot("NaN", {-inf, T(-3), nan, T(3), inf, T(-7)}, T(1), 2, nan);
  one_slot("NaN ties -NaN", {nan, T(-3), inf, -nan, T(3)}, T(1), 3, -nan);
  one_slot("NaN below t", {T(0.5), nan, T(-0.25)}, T(4), 1, nan);
  // NaNs tie whatever their payloads: the last NaN wins.
  const std::vector<T> nans = NaNs<T>();
  for (size_t a = 0; a < nans.size(); ++a) {
    for (size_t b = 0; b < nans.size(); ++b) {
      one_slot("NaN payloads " + std::to_string(a) + ", " + std::to_string(b),
               {nans[a], inf, T(2), nans[b], T(-3)}, T(1), 3, nans[b]);
    }
  }
  // Zeros tie; the value keeps its sign. A NaN threshold selects everything.
  one_slot("zeros", {T(0), -T(0), T(0), -T(0)}, T(0), 3, -T(0));
  one_slot("NaN threshold", {T(0), T(-1), -T(0)}, nan, 1, T(-1));
  if constexpr (std::is_same_v<T, double>) {
    // The magnitude is float32(|g|): 3 + 2^-40 and 3 tie, as do 1e300 and inf.
    one_slot("float32 tie", {T(3 + std::ldexp(1.0, -40)), T(-3), T(2)}, T(1), 1, T(-3));
    one_slot("float32 inf tie", {T(1), inf, T(-1e300), T(5)}, T(1), 2, T(-1e300));
  }

  // One bucket of three slots: its three largest, largest first, ties to the
  // larger index; then a NaN (above +-inf) and an empty last slot.
  const auto one_bucket = [&](const std::string& what, const std::vector<T>& g, T t,
                              std::vector<int64_t> indices) {
    for (Fill fill : kFills) {
      const Selection<T, Index> got =
          RunSelect<T, Index>(isa, fill, g, 0, static_cast<int64_t>(g.size()), t, 3, h, 3);
      CHECK(std::vector<int64_t>(got.indices.begin(), got.indices.end()) == indices)
          << tfcomp::IsaName(isa) << ", " << FillName(fill) << ", one bucket, " << what;
      for (int k = 0; k < 3; ++k) {
        CHECK(SameBits(got.values[k], indices[k] >= 0 ? g[indices[k]] : T(0))) << what << " " << k;
      }
    }
  };
  one_bucket("ties", {T(2), T(-3), T(0.25), T(3), T(-3), T(2.5), T(-0.5), T(1)}, T(1), {4, 3, 1});
  one_bucket("NaN, two selected", {T(0.5), nan, T(-0.25), -inf}, T(1), {1, 3, -1});

  // Long, so that the vector loops see it: magnitudes below 1, then planted
  // ones. One slot: 7 at several indices of either sign, the last at 3001;
  // then a NaN early on.
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<double> uniform(-1, 1);
  std::vector<T> g(5003);
  for (auto& x : g) x = static_cast<T>(uniform(rng));
  for (int64_t i : {17, 100, 2048, 3001}) g[i] = i % 2 ? T(7) : T(-7);
  g[4000] = T(6.5);
  one_slot("long", g, T(0.5), 3001, T(7));
  g[10] = -nan;
  one_slot("long, NaN", g, T(0.5), 10, -nan);

  // Four slots: in each, -7 and 7 at the first two indices hashed to it (a
  // tie), 6.5 at the last. The second index wins each.
  for (auto& x : g) x = static_cast<T>(uniform(rng));
  const int64_t capacity = 4;
  std::vector<std::vector<int64_t>> hashed(capacity);
  for (int64_t i = 0; i < static_cast<int64_t>(g.size()); ++i) {
    hashed[tfcomp::sparse::HashSlot(h, i, capacity)].push_back(i);
  }
  std::vector<int64_t> winners(capacity, -1);
  for (int64_t j = 0; j < capacity; ++j) {
    CHECK(hashed[j].size() >= 3) << "slot " << j << " has " << hashed[j].size() << " indices";
    if (hashed[j].size() < 3) return;
    g[hashed[j][0]] = T(-7);
    g[hashed[j][1]] = T(7);
    g[hashed[j].back()] = T(6.5);
    winners[j] = hashed[j][1];
  }
  for (T t : {T(0), T(0.5), T(7), nan}) {
    for (Fill fill : kFills) {
      const Selection<T, Index> got =
          RunSelect<T, Index>(isa, fill, g, 0, static_cast<int64_t>(g.size()), t, capacity, h);
      for (int64_t j = 0; j < capacity; ++j) {
        CHECK(got.indices[j] == winners[j] && SameBits(got.values[j], T(7)))
            << tfcomp::IsaName(isa) << ", " << FillName(fill) << ", four slots, t=" << t
            << ": slot " << j << " index " << got.indices[j] << ", want " << winners[j];
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
    Case(name + "/collisions/float", [isa] { SelectCollisions<float>(isa); });
    Case(name + "/collisions/double", [isa] { SelectCollisions<double>(isa); });
  }
}

// DecodeWeight is 1/K in the accumulation type; Weighted multiplies once and
// rounds to T (exact for a power of two, the nearest for float and double).
void DecodeWeights() {
  using tfcomp::sparse::DecodeWeight;
  using tfcomp::sparse::Weighted;
  CHECK(DecodeWeight<float>(1) == 1.0f && DecodeWeight<float>(2) == 0.5f);
  CHECK(DecodeWeight<float>(3) == 1.0f / 3.0f);
  CHECK(DecodeWeight<double>(3) == 1.0 / 3.0);
  CHECK(Weighted(6.0f, DecodeWeight<float>(2)) == 3.0f);
  CHECK(Weighted(3.0, DecodeWeight<double>(3)) == 3.0 * (1.0 / 3.0));
  CHECK(Weighted(-0.0f, DecodeWeight<float>(4)) == 0.0f && std::signbit(Weighted(-0.0f, 0.25f)));
  CHECK(std::isnan(Weighted(std::numeric_limits<float>::quiet_NaN(), 0.5f)));
  CHECK(Weighted(std::numeric_limits<float>::infinity(), 0.5f) == std::numeric_limits<float>::infinity());
}

// ScaledAt: x * factor, but factor 0 clears to +0 whatever x is (NaN and Inf too).
void ScaledAtRule() {
  using tfcomp::sparse::ScaledAt;
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (float x : {1.5f, -2.0f, -0.0f, inf, -inf, nan}) {
    const float cleared = ScaledAt(x, 0.0f);
    CHECK(cleared == 0.0f && !std::signbit(cleared)) << "x=" << x;
    CHECK(ScaledAt(x, -0.0f) == 0.0f && !std::signbit(ScaledAt(x, -0.0f))) << "x=" << x;
  }
  CHECK(ScaledAt(3.0f, 0.5f) == 1.5f && ScaledAt(-3.0, 0.5) == -1.5);
  CHECK(ScaledAt(inf, 0.5f) == inf && std::isnan(ScaledAt(nan, 0.5f)));
  CHECK(ScaledAt(0.1f, 0.7f) == 0.1f * 0.7f);
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
  Case("SlotClaimsFloat", SlotClaimsFloat);
  Case("SlotClaimsDouble", SlotClaimsDouble);
  Case("DecodeWeights", DecodeWeights);
  Case("ScaledAtRule", ScaledAtRule);
  SelectLoopsEveryIsa();
  return Summary();
}
