// Standalone test of the exact threshold/top-k selection CUDA kernels (no
// TensorFlow): runs LaunchSelectLargest for __half, float and double with int32
// and int64 indices and compares it, bit for bit (indices and values), with the
// CPU core (select_cpu.h's SelectLargest on one thread, which the C++ core test
// checks against a sort), and with a sort of the ranks for the small sizes.
// Sizes 0, 1, odd and 2^20 + 3, capacities 0, 1, about 1%, n and past n,
// thresholds 0, 1, 2.5 and +Inf; Gaussian values with NaN, +-Inf, denormals and
// many ties; x one element past a 16-byte boundary (the element-at-a-time path).
// Exit status: 0 pass, 1 failure, 77 no CUDA device (skip).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <random>
#include <vector>

#include "custom_ops/testing/cuda_test.h"
#include "../cc/kernels/select_core.h"
#include "../cc/kernels/select_cpu.h"
#include "../cc/kernels/select_cuda_kernels.cu.h"

namespace sel = tfcomp::select;
namespace cu = tfcomp::select::cuda;
using namespace tfcomp::cuda_test;  // NOLINT: the helpers of cuda_test.h

namespace {

struct Serial {
  template <typename Fn>
  void operator()(int64_t blocks, Fn&& fn) const {
    if (blocks > 0) fn(int64_t{0}, blocks);
  }
};

// Gaussian values; with specials, NaN, +-Inf, +-0 and denormals here and
// there; with ties, a third of the elements +-1.5 and a tenth 0.
template <typename T>
std::vector<T> MakeValues(int64_t n, uint32_t seed, bool specials, bool ties) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> normal;
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double special[] = {nan, inf, -inf, 0.0, -0.0, 1e-40, -nan, 1e-310};
  std::vector<T> x(n);
  for (int64_t i = 0; i < n; ++i) {
    double v = normal(rng);
    if (ties && i % 3 == 0) v = i % 2 ? 1.5 : -1.5;
    if (ties && i % 10 == 1) v = 0.0;
    if (specials && i % 97 == 13) v = special[(i / 97) % 8];
    x[i] = FromDouble<T>(v);
  }
  return x;
}

template <typename T, typename Index>
void Fail(const char* what, int64_t n, int64_t capacity, double t, int64_t at) {
  if (++g_failures <= 20) {
    std::printf("FAIL %s/int%d %s n=%lld capacity=%lld t=%g at %lld\n", TypeName<T>(),
                static_cast<int>(8 * sizeof(Index)), what, static_cast<long long>(n),
                static_cast<long long>(capacity), t, static_cast<long long>(at));
  }
}

// The sort: qualifying elements by rank, the first capacity, in index order, padded with -1.
template <typename T>
std::vector<int64_t> SortReference(const std::vector<T>& x, Acc<T> t, int64_t capacity) {
  std::vector<uint64_t> q;
  for (int64_t i = 0; i < static_cast<int64_t>(x.size()); ++i) {
    const Acc<T> a = tfcomp::AbsValue(x[i]);
    if (tfcomp::sparse::Selected(a, t)) q.push_back(sel::Rank(sel::MagnitudeKey(a), i));
  }
  std::sort(q.begin(), q.end(), std::greater<uint64_t>());
  std::vector<int64_t> out;
  for (int64_t j = 0; j < capacity && j < static_cast<int64_t>(q.size()); ++j) {
    out.push_back(sel::RankIndex(q[j]));
  }
  std::sort(out.begin(), out.end());
  out.resize(capacity, -1);
  return out;
}

template <typename T, typename Index>
void CheckSelect(const std::vector<T>& x, const T* d_x, int64_t capacity, double threshold) {
  const int64_t n = static_cast<int64_t>(x.size());
  const T t = FromDouble<T>(threshold);
  // The CPU kernel runs under TensorFlow's FTZ/DAZ, which this process does not set.
  const Acc<T> t_acc = sel::FlushSubnormal(static_cast<Acc<T>>(t));
  std::vector<T> want_values(capacity > 0 ? capacity : 1);
  std::vector<Index> want_indices(capacity > 0 ? capacity : 1);
  if (capacity > 0) {
    sel::cpu::SelectLargest(x.data(), n, t_acc, capacity, want_values.data(), want_indices.data(),
                            Serial{}, [](int64_t) -> void* { return nullptr; });  // candidates on the heap
  }
  if (n <= 5000 && capacity > 0) {
    const std::vector<int64_t> sorted = SortReference(x, t_acc, capacity);
    for (int64_t j = 0; j < capacity; ++j) {
      if (sorted[j] != static_cast<int64_t>(want_indices[j])) {
        Fail<T, Index>("CPU core differs from the sort", n, capacity, threshold, j);
        break;
      }
    }
  }

  DeviceArray<T> d_t(std::vector<T>{t}), d_values(capacity);
  DeviceArray<Index> d_indices(capacity);
  // Poison the outputs: a kernel that leaves an entry unwritten fails.
  CHECK_CUDA(cudaMemset(d_values.ptr, 0x7b, (capacity ? capacity : 1) * sizeof(T)));
  CHECK_CUDA(cudaMemset(d_indices.ptr, 0x7b, (capacity ? capacity : 1) * sizeof(Index)));
  Scratch allocate;
  CHECK_CUDA(cu::LaunchSelectLargest(d_x, n, d_t.ptr, capacity, d_values.ptr, d_indices.ptr,
                                     allocate, nullptr));
  CHECK_CUDA(cudaDeviceSynchronize());
  const std::vector<Index> indices = d_indices.Download(capacity);
  const std::vector<T> values = d_values.Download(capacity);
  allocate.Free();
  for (int64_t j = 0; j < capacity; ++j) {
    if (indices[j] != want_indices[j]) {
      Fail<T, Index>("index", n, capacity, threshold, j);
      break;
    }
    if (!SameBits(values[j], want_values[j])) {
      Fail<T, Index>("value", n, capacity, threshold, j);
      break;
    }
  }
}

template <typename T, typename Index>
void CheckType() {
  const int failures_before = g_failures;
  const double inf = std::numeric_limits<double>::infinity();
  const int64_t sizes[] = {0, 1, 2, 33, 1000, 4097, 40001, (int64_t{1} << 20) + 3};
  for (int64_t n : sizes) {
    for (int variant = 0; variant < 3; ++variant) {
      const bool specials = variant >= 1;
      const bool ties = variant == 2;
      const std::vector<T> x = MakeValues<T>(n, static_cast<uint32_t>(n + variant), specials, ties);
      const DeviceArray<T> d_x(x);
      // x one element past a 16-byte boundary: the element-at-a-time kernels.
      std::vector<T> shifted(1, FromDouble<T>(3.0));
      shifted.insert(shifted.end(), x.begin(), x.end());
      const DeviceArray<T> d_shifted(shifted);
      const int64_t capacities[] = {0, 1, 7, n / 100 + 1, n / 3 + 1, n, n + 5};
      for (int64_t capacity : capacities) {
        for (double t : {0.0, 1.0, 2.5, inf}) {
          CheckSelect<T, Index>(x, d_x.ptr, capacity, t);
          if (n < 100000 || t == 0.0) CheckSelect<T, Index>(x, d_shifted.ptr + 1, capacity, t);
        }
      }
    }
  }
  // Constant tensors: every qualifying element ties, the index decides.
  for (double v : {0.0, -2.0}) {
    const std::vector<T> x((int64_t{1} << 16) + 1, FromDouble<T>(v));
    const DeviceArray<T> d_x(x);
    for (int64_t capacity : {int64_t{1}, int64_t{1000}, int64_t{1} << 16}) {
      CheckSelect<T, Index>(x, d_x.ptr, capacity, 0.0);
    }
  }
  // A subnormal threshold counts as 0 (FTZ/DAZ on the CPU): every element qualifies.
  {
    const std::vector<T> x = MakeValues<T>(5003, 5, true, true);
    const DeviceArray<T> d_x(x);
    for (double t : {1e-40, 1e-310}) {
      for (int64_t capacity : {int64_t{1}, int64_t{100}, int64_t{5003}}) {
        CheckSelect<T, Index>(x, d_x.ptr, capacity, t);
      }
    }
  }
  std::printf("%-6s int%d select_largest: %s\n", TypeName<T>(), static_cast<int>(8 * sizeof(Index)),
              g_failures > failures_before ? "FAILED" : "ok");
}

}  // namespace

int main() {
  if (!FoundDevice()) return kSkip;
  CheckType<float, int32_t>();
  CheckType<float, int64_t>();
  CheckType<__half, int32_t>();
  CheckType<__half, int64_t>();
  CheckType<double, int32_t>();
  CheckType<double, int64_t>();
  return Finish("select_core_test");
}
