// Unit test of select_core.h and select_cpu.h (no TensorFlow): the key's order
// (NaN above +Inf, zero and denormals as 0), the rank packing, FindBoundary,
// and the whole selection, on both paths (the sampled one-read path and the
// histogram passes), with every instruction set's loop this CPU runs, with
// scratch memory and without, and on one thread, several threads and blocks
// run in reverse, against a sort of the qualifying elements.
// Prints "N passed, M failed" and exits nonzero on a failure.
#include "custom_ops/sparse/cc/kernels/select_core.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <thread>
#include <tuple>
#include <vector>

#include "custom_ops/sparse/cc/kernels/select_cpu.h"
#include "custom_ops/testing/check.h"

namespace {

using tfcomp::testing::Case;
using tfcomp::testing::Summary;
namespace sel = tfcomp::select;

// The sort: qualifying elements by (key, index) descending, the first capacity, by index.
template <typename T>
std::vector<int64_t> Reference(const std::vector<T>& x, double t, int64_t capacity) {
  using Acc = typename tfcomp::Accumulator<T>::type;
  std::vector<std::pair<uint64_t, int64_t>> q;
  for (int64_t i = 0; i < static_cast<int64_t>(x.size()); ++i) {
    const Acc a = tfcomp::AbsValue(x[i]);
    if (!(a < static_cast<Acc>(t))) q.push_back({sel::Rank(sel::MagnitudeKey(a), i), i});
  }
  std::sort(q.begin(), q.end(), [](auto& a, auto& b) { return a.first > b.first; });
  std::vector<int64_t> out;
  for (int64_t j = 0; j < std::min<int64_t>(capacity, q.size()); ++j) out.push_back(q[j].second);
  std::sort(out.begin(), out.end());
  out.resize(capacity, -1);
  return out;
}

// Runs fn over [0, blocks) on `threads` threads, blocks interleaved, or in reverse on one.
struct Runner {
  int threads;
  bool reverse;
  template <typename Fn>
  void operator()(int64_t blocks, Fn&& fn) const {
    if (reverse) {
      for (int64_t b = blocks - 1; b >= 0; --b) fn(b, b + 1);
      return;
    }
    std::vector<std::thread> pool;
    for (int k = 0; k < threads; ++k) {
      pool.emplace_back([&, k] {
        for (int64_t b = k; b < blocks; b += threads) fn(b, b + 1);
      });
    }
    for (auto& th : pool) th.join();
  }
};

template <typename T>
void CheckSelect(const std::vector<T>& x, double t, int64_t capacity, const char* what) {
  const auto expected = Reference(x, t, capacity);
  // Scratch memory as the op gives it (filled with garbage), or none (the heap).
  std::vector<uint64_t> memory;
  const auto given = [&](int64_t bytes) -> void* {
    memory.assign((bytes + 7) / 8, 0x5a5a5a5a5a5a5a5aull);
    return memory.data();
  };
  const auto none = [](int64_t) -> void* { return nullptr; };
  for (const Runner runner : {Runner{1, false}, Runner{3, false}, Runner{1, true}}) {
   for (const bool scratch : {true, false}) {
   for (const tfcomp::Isa isa : {tfcomp::Isa::kGeneric, tfcomp::Isa::kAvx2, tfcomp::Isa::kAvx512}) {
    if (!tfcomp::IsaSupported(isa)) continue;
    std::vector<T> values(capacity, T(7));
    std::vector<int64_t> indices(capacity, 7);
    const auto t_acc = static_cast<typename tfcomp::Accumulator<T>::type>(t);
    if (scratch) {
      sel::cpu::SelectLargest(x.data(), static_cast<int64_t>(x.size()), t_acc, capacity, values.data(),
                              indices.data(), runner, given, isa);
    } else {
      sel::cpu::SelectLargest(x.data(), static_cast<int64_t>(x.size()), t_acc, capacity, values.data(),
                              indices.data(), runner, none, isa);
    }
    CHECK(indices == expected) << what << " n=" << x.size() << " capacity=" << capacity << " t=" << t
                               << " threads=" << runner.threads << " reverse=" << runner.reverse
                               << " scratch=" << scratch << " isa=" << tfcomp::IsaName(isa);
    for (int64_t j = 0; j < capacity; ++j) {
      const bool same = expected[j] < 0 ? values[j] == T(0)
                                        : std::memcmp(&values[j], &x[expected[j]], sizeof(T)) == 0;
      CHECK(same) << what << " value " << j;
    }
   }
   }
  }
}

std::vector<float> Gaussian(int64_t n, uint32_t seed, bool specials, bool ties) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> x(n);
  for (auto& v : x) v = normal(rng);
  if (ties) {
    for (int64_t i = 0; i < n; i += 3) x[i] = (i % 2) ? 1.5f : -1.5f;
    for (int64_t i = 1; i < n; i += 11) x[i] = 0.0f;
  }
  if (specials && n > 10) {
    x[3] = std::numeric_limits<float>::quiet_NaN();
    x[7] = std::numeric_limits<float>::infinity();
    x[9] = -std::numeric_limits<float>::infinity();
    x[n - 1] = -std::numeric_limits<float>::quiet_NaN();
  }
  return x;
}

}  // namespace

int main() {
  Case("keys order magnitudes, NaN above +Inf, denormals as 0", [] {
    const float inf = std::numeric_limits<float>::infinity();
    const float nan = std::numeric_limits<float>::quiet_NaN();
    CHECK(sel::MagnitudeKey(nan) > sel::MagnitudeKey(inf));
    CHECK(sel::MagnitudeKey(inf) > sel::MagnitudeKey(std::numeric_limits<float>::max()));
    CHECK(sel::MagnitudeKey(2.0f) > sel::MagnitudeKey(1.5f));
    CHECK(sel::MagnitudeKey(std::numeric_limits<float>::denorm_min()) == 0);
    CHECK(sel::MagnitudeKey(0.0f) == 0);
    CHECK(sel::MagnitudeKey(1e300) == sel::MagnitudeKey(inf));  // double beyond float32
    CHECK(sel::MagnitudeKey(nan) < (1u << 31));
    CHECK(sel::Bin(sel::MagnitudeKey(nan)) < sel::kBins);
  });
  Case("ranks pack key above index; ties go to the larger index", [] {
    const int64_t big = sel::kMaxSelectElements - 1;
    CHECK(sel::RankIndex(sel::Rank(0x7fc00000u, big)) == big);
    CHECK(sel::Rank(5, 2) > sel::Rank(5, 1));
    CHECK(sel::Rank(6, 0) > sel::Rank(5, big));
    CHECK(sel::RankBin(sel::Rank(0x7f800000u, 3)) == sel::Bin(0x7f800000u));
  });
  Case("FindBoundary", [] {
    std::vector<int64_t> hist(sel::kBins, 0);
    hist[10] = 5;
    hist[20] = 3;
    hist[30] = 2;
    auto b = sel::FindBoundary(hist.data(), 4);
    CHECK(b.bin == 20 && b.above == 2 && b.candidates == 5 && !b.all);
    b = sel::FindBoundary(hist.data(), 5);
    CHECK(b.bin == 20 && b.all);
    b = sel::FindBoundary(hist.data(), 11);
    CHECK(b.all && b.candidates == 10);
  });
  Case("small and odd sizes (histogram path)", [] {
    for (const int64_t n : {0, 1, 2, 31, 33, 1000, 40001}) {
      for (const bool specials : {false, true}) {
        for (const bool ties : {false, true}) {
          const auto x = Gaussian(n, n + 1, specials, ties);
          for (const int64_t capacity : {int64_t{1}, int64_t{7}, n / 3 + 1, n, n + 5}) {
            for (const double t : {0.0, 1.0, 2.5}) CheckSelect(x, t, capacity, "float");
          }
        }
      }
    }
  });
  Case("large tensors (sampled path and its fallbacks)", [] {
    for (const int64_t n : {int64_t{1} << 18, (int64_t{1} << 20) + 3}) {
      for (const bool ties : {false, true}) {
        const auto x = Gaussian(n, 3, true, ties);
        for (const int64_t capacity : {int64_t{1}, n / 100, n / 10, n / 2}) {
          for (const double t : {0.0, 1.0, 1e9}) CheckSelect(x, t, capacity, "float");
        }
      }
    }
    // The large elements all in one block, far more than the sample leads it to expect:
    // its candidates outgrow their slice of the scratch memory.
    {
      auto x = Gaussian(int64_t{1} << 20, 5, false, false);
      for (int64_t i = 0; i < (int64_t{1} << 20); ++i) x[i] *= i < (int64_t{1} << 15) ? 100.0f : 0.01f;
      for (const int64_t capacity : {int64_t{1} << 14, int64_t{1} << 15, int64_t{40000}}) {
        CheckSelect(x, 0.0, capacity, "clustered");
      }
    }
    // NaNs of every payload sort as one NaN, above +Inf, on every path (so many that the
    // sample's bounds are NaN keys).
    {
      auto x = Gaussian(int64_t{1} << 18, 6, false, false);
      uint32_t payload = 0x7f800001u;
      for (int64_t i = 0; i < (int64_t{1} << 18); i += 5) {
        float nan;
        std::memcpy(&nan, &payload, sizeof(nan));
        x[i] = (i % 2) ? nan : -nan;
        payload = payload == 0x7fffffffu ? 0x7f800001u : payload + 0x1235u;
        if (payload > 0x7fffffffu || payload < 0x7f800001u) payload = 0x7f800001u;
      }
      for (const int64_t capacity : {int64_t{100}, int64_t{1} << 14, int64_t{60000}}) {
        CheckSelect(x, 0.0, capacity, "NaN payloads");
      }
    }
    CheckSelect(std::vector<float>((1 << 18) + 1, 0.0f), 0.0, 1000, "zeros");
    CheckSelect(std::vector<float>((1 << 18) + 1, -2.0f), 0.0, 1000, "constant");
  });
  Case("double", [] {
    const auto f = Gaussian((1 << 18) + 9, 4, true, false);
    std::vector<double> x(f.begin(), f.end());
    x[11] = 1e300;
    x[12] = 1e-310;
    for (const int64_t capacity : {int64_t{1}, int64_t{2621}, int64_t{30000}}) {
      CheckSelect(x, 0.0, capacity, "double");
      CheckSelect(x, 1.5, capacity, "double");
    }
  });
  return Summary();
}
