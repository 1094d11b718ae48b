// Standalone test of the sparse CUDA kernels (no TensorFlow): runs hashed
// selection and sparse decode on the GPU for __half, float and double with
// int32 and int64 indices, and the sampled threshold for each of those types,
// and compares them with sequential CPU references built from sparse_core.h.
// Hashed selection also checks the collision rule directly: each filled slot
// holds an element at least as large (float32(|g|), NaN above +Inf) as every
// selected element hashed to it, with tables far smaller than the selection
// and with many equal magnitudes (ties go to the larger index).
// Selected indices and values must match bit for bit; decoded values too,
// except that any NaN matches any NaN (GPU arithmetic returns the canonical
// NaN, x86 the operand's payload); thresholds too, except that +0 matches -0.
// Exit status: 0 pass, 1 failure, 77 no CUDA device (skip).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <vector>

#include "custom_ops/testing/cuda_test.h"
#include "../cc/kernels/sparse_core.h"
#include "../cc/kernels/sparse_cuda_kernels.cu.h"

namespace sp = tfcomp::sparse;
namespace cu = tfcomp::sparse::cuda;
using namespace tfcomp::cuda_test;  // NOLINT: the helpers of cuda_test.h

namespace {


template <typename T>
bool SameValue(const T& a, const T& b) {
  return SameBits(a, b) ||
         (std::isnan(static_cast<Acc<T>>(a)) && std::isnan(static_cast<Acc<T>>(b)));
}

// Values in [-1, 1) with +-0; with specials, every 13th element is +-Inf or NaN.
template <typename T>
std::vector<T> MakeValues(int64_t n, bool specials) {
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double special[] = {0.0, -0.0, inf, -inf, nan};
  std::vector<T> x(n);
  for (int64_t i = 0; i < n; ++i) {
    const double r = NextRandom() / 2147483648.0 - 1.0;
    x[i] = FromDouble<T>(i % 13 == 5 ? special[(i / 13) % (specials ? 5 : 2)] : r);
  }
  return x;
}

template <typename T, typename Index>
void Expect(bool ok, const char* what, int64_t n, int64_t capacity, double extra, int64_t at) {
  if (ok) return;
  if (++g_failures <= 20) {
    std::printf("FAIL %s/int%d %s n=%lld capacity=%lld (%g) at %lld\n", TypeName<T>(),
                static_cast<int>(8 * sizeof(Index)), what, static_cast<long long>(n),
                static_cast<long long>(capacity), extra, static_cast<long long>(at));
  }
}

// Values where most magnitudes repeat (+-0.5, +-0.25, +-0, Inf, NaN), so that
// many elements sharing a slot tie, and a few distinct ones in [-1, 1).
template <typename T>
std::vector<T> MakeTies(int64_t n) {
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double tie[] = {0.5, -0.5, 0.25, -0.25, 0.0, -0.0, inf, nan};
  std::vector<T> x(n);
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t r = NextRandom();
    // Inf and NaN rarely (1 in 64 each), so that slots also settle on finite ties.
    x[i] = FromDouble<T>(r % 8 == 0 ? r / 2147483648.0 - 1.0
                                    : tie[(r >> 3) % 64 < 62 ? (r >> 3) % 6 : 6 + (r >> 3) % 2]);
  }
  return x;
}

// Whether magnitude a ranks at least as high as b in the claims' order:
// float32(|g|), NaN above +Inf, denormals as 0 (ClaimMagnitude).
bool AtLeast(float a, float b) { return std::isnan(a) || (!std::isnan(b) && a >= b); }

template <typename T>
float ClaimMagnitude(const T& x) {
  const float m = static_cast<float>(tfcomp::AbsValue(x));
  return std::fpclassify(m) == FP_SUBNORMAL ? 0.0f : m;
}

template <typename T, typename Index>
void CheckSelect(const std::vector<T>& g, const T* d_g, int64_t capacity, double threshold,
                 int64_t bucket_size) {
  const int64_t n = static_cast<int64_t>(g.size());
  const T t = FromDouble<T>(threshold);
  const sp::HashParams hash =
      sp::HashFromSeed(static_cast<uint64_t>(n), static_cast<uint64_t>(capacity));
  const int64_t buckets = sp::BucketCount(capacity, bucket_size);

  // Reference: each bucket keeps the largest claims (magnitude, then index) of
  // the selected elements hashed to it, largest first.
  std::vector<std::vector<uint64_t>> hashed(buckets);
  for (int64_t i = 0; i < n && capacity > 0; ++i) {
    const Acc<T> magnitude = tfcomp::AbsValue(g[i]);
    if (sp::Selected(magnitude, static_cast<Acc<T>>(t))) {
      hashed[sp::HashSlot(hash, static_cast<uint64_t>(i), buckets)].push_back(
          sp::SlotClaim(magnitude, i));
    }
  }
  std::vector<uint64_t> want_claims(capacity, 0);
  for (int64_t b = 0; b < buckets; ++b) {
    std::sort(hashed[b].begin(), hashed[b].end(), std::greater<uint64_t>());
    const int64_t slots = std::min(capacity, (b + 1) * bucket_size) - b * bucket_size;
    for (int64_t k = 0; k < slots && k < static_cast<int64_t>(hashed[b].size()); ++k) {
      want_claims[b * bucket_size + k] = hashed[b][k];
    }
  }
  std::vector<Index> want_indices(capacity, static_cast<Index>(sp::kEmptyIndex));
  std::vector<T> want_values(capacity, FromDouble<T>(0.0));
  for (int64_t j = 0; j < capacity; ++j) {
    want_indices[j] = static_cast<Index>(sp::ClaimedIndex(want_claims[j]));
    if (want_indices[j] >= 0) want_values[j] = g[want_indices[j]];
  }

  DeviceArray<T> d_t(std::vector<T>{t}), d_values(capacity);
  DeviceArray<Index> d_indices(capacity);
  Scratch allocate;
  CHECK_CUDA(cu::LaunchHashSelect(d_g, n, d_t.ptr, hash, capacity, bucket_size, d_values.ptr,
                                  d_indices.ptr, allocate, nullptr));
  const std::vector<Index> indices = d_indices.Download(capacity);
  const std::vector<T> values = d_values.Download(capacity);
  allocate.Free();
  for (int64_t j = 0; j < capacity; ++j) {
    Expect<T, Index>(indices[j] == want_indices[j], "select index", n, capacity, threshold, j);
    const bool same = SameBits(values[j], want_values[j]);
    Expect<T, Index>(same, "select value", n, capacity, threshold, j);
  }

  // The collision rule on its own terms, from the GPU's table: every selected
  // element is in its bucket, or the bucket is full of elements at least as
  // large, each not smaller than it only by losing a tie on the index.
  for (int64_t i = 0; i < n && capacity > 0; ++i) {
    if (!sp::Selected(tfcomp::AbsValue(g[i]), static_cast<Acc<T>>(t))) continue;
    const int64_t first = sp::HashSlot(hash, static_cast<uint64_t>(i), buckets) * bucket_size;
    const int64_t last = std::min(capacity, first + bucket_size);
    bool kept_i = false;
    for (int64_t slot = first; slot < last; ++slot) kept_i = kept_i || indices[slot] == i;
    for (int64_t slot = first; slot < last && !kept_i; ++slot) {
      const int64_t kept = indices[slot];
      if (kept < 0 || kept >= n) {
        Expect<T, Index>(false, "select empty slot", n, capacity, threshold, i);
        continue;
      }
      const float a = ClaimMagnitude(g[kept]), b = ClaimMagnitude(g[i]);
      Expect<T, Index>(AtLeast(a, b), "select smaller magnitude kept", n, capacity, threshold, i);
      const bool tie = AtLeast(b, a);
      Expect<T, Index>(!tie || kept > i, "select tie to smaller index", n, capacity, threshold, i);
    }
  }
}

// Collisions on purpose: tables far smaller than the selection, over values
// with many equal magnitudes, so that most slots settle among dozens of
// candidates and many of those tie.
template <typename T, typename Index>
void CheckCollisions() {
  for (bool ties : {false, true}) {
    const int64_t n = (int64_t{1} << 16) + 3;
    const std::vector<T> g = ties ? MakeTies<T>(n) : MakeValues<T>(n, true);
    const DeviceArray<T> d_g(g);
    for (int64_t capacity : {int64_t{2}, int64_t{61}, int64_t{1000}}) {
      for (double t : {0.0, 0.25, 0.5}) {
        int64_t selected = 0;
        for (const T& x : g) {
          selected += sp::Selected(tfcomp::AbsValue(x), static_cast<Acc<T>>(FromDouble<T>(t)));
        }
        // The case is only worth its name if slots see many candidates each.
        Expect<T, Index>(selected >= 8 * capacity, "collision case too sparse", n, capacity, t,
                         selected);
        for (int64_t bucket_size : {int64_t{1}, int64_t{4}}) {
          CheckSelect<T, Index>(g, d_g.ptr, capacity, t, bucket_size);
        }
      }
    }
  }
}

// k concatenated lists of capacity entries over a dense vector of n: indices
// drawn from a pool small enough to repeat across lists, -1 for a quarter of
// the slots, and a few out of range (skipped on the GPU, rejected by the op).
template <typename T, typename Index>
void CheckDecode(int64_t n, int64_t capacity, int k, bool specials, int64_t divisor = 1) {
  const int64_t count = k * capacity;
  const int64_t pool = n < 2 * capacity + 1 ? n : 2 * capacity + 1;
  const std::vector<T> values = MakeValues<T>(count, specials);
  std::vector<Index> indices(count);
  for (int64_t j = 0; j < count; ++j) {
    const uint32_t r = NextRandom();
    if (j % 97 == 50) {
      indices[j] = static_cast<Index>(j % 2 ? n + j : -2 - j);
    } else if (r % 4 == 0 || pool == 0) {
      indices[j] = static_cast<Index>(sp::kEmptyIndex);
    } else {
      const int64_t slot = (r >> 2) % pool;
      indices[j] = static_cast<Index>(slot * (n / pool));  // spread over [0, n)
    }
  }

  std::vector<T> want(n, FromDouble<T>(0.0));
  for (int64_t j = 0; j < count; ++j) {
    const int64_t i = indices[j];
    if (i < 0 || i >= n) continue;
    want[i] = static_cast<T>(static_cast<Acc<T>>(want[i]) + static_cast<Acc<T>>(values[j]));
  }
  if (divisor != 1) {
    for (T& w : want) w = sp::Weighted(w, sp::DecodeWeight<T>(divisor));
  }

  DeviceArray<T> d_values(values), d_dense(n);
  DeviceArray<Index> d_indices(indices);
  Scratch allocate;
  CHECK_CUDA(cu::LaunchSparseDecode(d_values.ptr, d_indices.ptr, count, n, d_dense.ptr, allocate,
                                    nullptr, divisor));
  const std::vector<T> dense = d_dense.Download(n);
  allocate.Free();
  for (int64_t i = 0; i < n; ++i) {
    Expect<T, Index>(SameValue(dense[i], want[i]), "decode", n, capacity, k, i);
  }
}

// ScaleAt on a copy and in place (out == x): capacity indices into x[n] drawn
// with repeats (RandomK draws with replacement), -1 for a quarter of them and a
// few out of range (skipped); factors 0 (clears, NaN and Inf too), 1, 0.5 and
// -3 (each element scaled once however often it is listed).
template <typename T, typename Index>
void CheckScaleAt(int64_t n, int64_t capacity, bool specials) {
  const std::vector<T> x = MakeValues<T>(n, specials);
  std::vector<Index> indices(capacity);
  for (int64_t j = 0; j < capacity; ++j) {
    const uint32_t r = NextRandom();
    if (j % 97 == 50) {
      indices[j] = static_cast<Index>(j % 2 ? n + j : -2 - j);
    } else if (r % 4 == 0 || n == 0) {
      indices[j] = static_cast<Index>(sp::kEmptyIndex);
    } else {
      indices[j] = static_cast<Index>((r >> 2) % (n < 2 * capacity + 1 ? n : 2 * capacity + 1));
    }
  }
  for (double factor : {0.0, 1.0, 0.5, -3.0}) {
    const T f = FromDouble<T>(factor);
    std::vector<T> want = x;
    for (int64_t j = 0; j < capacity; ++j) {
      const int64_t i = indices[j];
      if (i >= 0 && i < n) want[i] = factor == 1.0 ? x[i] : sp::ScaledAt(x[i], static_cast<Acc<T>>(f));
    }
    for (bool in_place : {false, true}) {
      DeviceArray<T> d_x(x), d_out(n);
      DeviceArray<Index> d_indices(indices);
      Scratch allocate;
      T* out = in_place ? d_x.ptr : d_out.ptr;
      CHECK_CUDA(cu::LaunchScaleAt(d_x.ptr, d_indices.ptr, capacity, n, f, out, allocate, nullptr));
      const std::vector<T> got = in_place ? d_x.Download(n) : d_out.Download(n);
      allocate.Free();
      for (int64_t i = 0; i < n; ++i) {
        Expect<T, Index>(SameValue(got[i], want[i]), in_place ? "scale_at in place" : "scale_at", n,
                         capacity, factor, i);
      }
    }
  }
}

template <typename T, typename Index>
void CheckType() {
  const int failures_before = g_failures;
  const int64_t sizes[] = {0, 1, 1000, (int64_t{1} << 20) + 7};
  const int64_t capacities[] = {0, 1, 7, 1024};
  // 2 selects no finite element, +Inf only +-Inf and NaN, NaN everything.
  const double thresholds[] = {0.0, 0.5, 2.0, std::numeric_limits<double>::infinity(),
                               std::numeric_limits<double>::quiet_NaN()};
  for (int64_t n : sizes) {
    for (bool specials : {false, true}) {
      const std::vector<T> g = MakeValues<T>(n, specials);
      const DeviceArray<T> d_g(g);
      // g one element past a 16-byte boundary: the element-at-a-time path.
      std::vector<T> shifted(1, FromDouble<T>(3.0));
      shifted.insert(shifted.end(), g.begin(), g.end());
      const DeviceArray<T> d_shifted(shifted);
      for (int64_t capacity : capacities) {
        for (double t : thresholds) {
          // Buckets of 4 leave capacity 7 a shorter last one, and 1 one bucket of 1.
          for (int64_t bucket_size : {int64_t{1}, int64_t{4}}) {
            CheckSelect<T, Index>(g, d_g.ptr, capacity, t, bucket_size);
            CheckSelect<T, Index>(g, d_shifted.ptr + 1, capacity, t, bucket_size);
          }
        }
        for (int k = 1; k <= 5; ++k) CheckDecode<T, Index>(n, capacity, k, specials);
        for (int k = 2; k <= 3; ++k) CheckDecode<T, Index>(n, capacity, k, specials, k);  // the mean
        CheckScaleAt<T, Index>(n, capacity, specials);
      }
    }
  }
  CheckCollisions<T, Index>();
  CheckDecode<T, Index>(1000, 1 << 16, 5, true);  // long runs of duplicates
  CheckDecode<T, Index>(1000, 1 << 16, 3, true, 3);
  CheckScaleAt<T, Index>(1000, 1 << 16, true);  // every element listed many times
  CHECK_CUDA(cudaDeviceSynchronize());
  std::printf("%-6s int%d select/decode/scale_at: %s\n", TypeName<T>(), static_cast<int>(8 * sizeof(Index)),
              g_failures > failures_before ? "FAILED" : "ok");
}

// The sampled threshold (TfcompSampledThreshold's kernel) against the CPU
// functor's definition: the sample is g itself when n <= num_samples, else the
// elements at SamplePosition; its magnitudes (SampleMagnitude: NaN as +Inf)
// sorted in descending order; the k-th (k clipped to the sample size), cast to
// T; 0 for n == 0. Bit for bit, except that +0 and -0 match each other: they
// are one value to the threshold's order, so which of the two a tie leaves is
// not defined (the CPU functor's heap and CUB's sort may differ).
template <typename T>
void CheckThreshold(const std::vector<T>& g, const DeviceArray<T>& d_g, int64_t num_samples,
                    int64_t k) {
  const int64_t n = static_cast<int64_t>(g.size());
  const sp::HashParams hash =
      sp::HashFromSeed(static_cast<uint64_t>(num_samples), static_cast<uint64_t>(n + k));
  std::vector<Acc<T>> sample;
  for (int64_t s = 0; s < (n < num_samples ? n : num_samples); ++s) {
    const int64_t i = n <= num_samples ? s : sp::SamplePosition(hash, s, num_samples, n);
    if (i < 0 || i >= n) {
      Expect<T, int64_t>(false, "threshold sample position", n, num_samples, k, s);
      return;
    }
    sample.push_back(sp::SampleMagnitude(tfcomp::AbsValue(g[i])));
  }
  std::sort(sample.begin(), sample.end(), [](Acc<T> a, Acc<T> b) { return a > b; });
  const int64_t count = static_cast<int64_t>(sample.size());
  const T want = count == 0 ? FromDouble<T>(0.0)
                            : static_cast<T>(sample[(k < count ? k : count) - 1]);

  DeviceArray<T> d_threshold(1);
  CHECK_CUDA(cudaMemset(d_threshold.ptr, 0xff, sizeof(T)));  // NaN: a kernel that writes nothing fails
  Scratch allocate;
  CHECK_CUDA(cu::LaunchSampledThreshold(d_g.ptr, n, hash, num_samples, k, d_threshold.ptr,
                                        allocate, nullptr));
  const T got = d_threshold.Download(1)[0];
  allocate.Free();
  const bool zeros = static_cast<Acc<T>>(got) == 0 && static_cast<Acc<T>>(want) == 0;
  if (!SameBits(got, want) && !zeros && ++g_failures <= 20) {
    std::printf("FAIL %s threshold n=%lld num_samples=%lld k=%lld: got %g, want %g\n",
                TypeName<T>(), static_cast<long long>(n), static_cast<long long>(num_samples),
                static_cast<long long>(k), static_cast<double>(static_cast<Acc<T>>(got)),
                static_cast<double>(static_cast<Acc<T>>(want)));
  }
}

template <typename T>
void CheckThresholdType() {
  const int failures_before = g_failures;
  const int64_t sizes[] = {0, 1, 1000, (int64_t{1} << 20) + 7};
  for (int64_t n : sizes) {
    for (bool specials : {false, true}) {
      const std::vector<T> g = MakeValues<T>(n, specials);
      const DeviceArray<T> d_g(g);
      // 1, 100, 4096 (16 full runs), more than n, and n itself (all of g).
      const int64_t sample_counts[] = {1, 100, 4096, 2 * n + 1, n > 0 ? n : 1};
      for (int64_t num_samples : sample_counts) {
        const int64_t ks[] = {1, 2, (num_samples + 1) / 2, num_samples - 1, num_samples};
        for (int64_t k : ks) {
          if (k >= 1 && k <= num_samples) CheckThreshold<T>(g, d_g, num_samples, k);
        }
      }
    }
  }
  // Mostly equal magnitudes: ties (+-0 among them) around every rank.
  std::vector<T> ties(5000);
  for (size_t i = 0; i < ties.size(); ++i) {
    const double v[] = {0.0, -0.0, 0.5, -0.5, 0.25};
    ties[i] = FromDouble<T>(v[NextRandom() % 5]);
  }
  const DeviceArray<T> d_ties(ties);
  for (int64_t k : {1, 100, 1000, 2000, 3000, 4000, 4096}) {
    CheckThreshold<T>(ties, d_ties, 4096, k);  // sampled
    CheckThreshold<T>(ties, d_ties, 8192, k);  // all of it
  }
  CHECK_CUDA(cudaDeviceSynchronize());
  std::printf("%-6s sampled threshold: %s\n", TypeName<T>(),
              g_failures > failures_before ? "FAILED" : "ok");
}

}  // namespace

int main() {
  if (!FoundDevice()) return kSkip;
  CheckType<__half, int32_t>();
  CheckType<__half, int64_t>();
  CheckType<float, int32_t>();
  CheckType<float, int64_t>();
  CheckType<double, int32_t>();
  CheckType<double, int64_t>();
  CheckThresholdType<__half>();
  CheckThresholdType<float>();
  CheckThresholdType<double>();
  return Finish("sparse_core_test");
}
