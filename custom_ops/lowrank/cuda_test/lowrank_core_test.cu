// Standalone test of the low-rank residual CUDA kernel (no TensorFlow): runs
// it on the GPU for __half, float and double and compares every element with
// the CPU reference lowrank_core.h's ResidualElement, bit for bit (NaN
// payloads aside), over ragged shapes (partial tiles, r = 0, r across several
// rank chunks), with NaN and Inf, in place (out = m), and with more row tiles
// than the grid has rows (the grid-stride loop); and the product kernel against
// ProductElement the same way, and the compensate kernel against
// CompensatedElement and CompensatedProductElement (ragged columns, ranks
// across several passes, NaN and Inf, -0), and the project kernel against
// ProjectElement (row counts across the 256-row blocks, NaN and Inf).
// Exit status: 0 pass, 1 failure, 77 no CUDA device (skip).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <vector>

#include "custom_ops/testing/cuda_test.h"
#include "../cc/kernels/lowrank_core.h"
#include "../cc/kernels/lowrank_cuda_kernels.cu.h"

namespace lr = tfcomp::lowrank;
namespace cu = tfcomp::lowrank::cuda;
using namespace tfcomp::cuda_test;  // NOLINT: the helpers of cuda_test.h

namespace {

template <typename T>
std::vector<T> RandomValues(int64_t count) {
  std::vector<T> v(count);
  for (T& x : v) x = FromDouble<T>(NextRandom() / 2147483648.0 - 1.0);  // [-1, 1)
  return v;
}

template <typename T>
void Check(int64_t n, int64_t k, int64_t r, bool specials, bool in_place) {
  std::vector<T> m = RandomValues<T>(n * k), p = RandomValues<T>(n * r), q = RandomValues<T>(k * r);
  if (specials && n * k > 2 && r > 0) {
    const double inf = std::numeric_limits<double>::infinity();
    m[1] = FromDouble<T>(std::nan(""));
    m[n * k - 1] = FromDouble<T>(-inf);
    p[(n - 1) * r] = FromDouble<T>(std::nan(""));  // a row of NaNs
    q[(k / 2) * r + r - 1] = FromDouble<T>(inf);    // a column of +-Inf
    p[r - 1] = FromDouble<T>(0.0);                  // 0 * Inf = NaN in row 0
  }
  DeviceArray<T> d_m(m), d_p(p), d_q(q), d_out(n * k);
  T* out = in_place ? d_m.ptr : d_out.ptr;
  CHECK_CUDA(cu::LaunchLowRankResidual(d_m.ptr, d_p.ptr, d_q.ptr, n, k, r, out, nullptr));
  CHECK_CUDA(cudaDeviceSynchronize());
  const std::vector<T> got = (in_place ? d_m : d_out).Download(n * k);
  int reported = 0;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t c = 0; c < k; ++c) {
      const T want = lr::ResidualElement(m.data(), p.data(), q.data(), i, c, k, r);
      const T g = got[i * k + c];
      const bool ok = SameBits(g, want) || (std::isnan(ToDouble(g)) && std::isnan(ToDouble(want)));
      if (!ok) {
        ++g_failures;
        if (reported++ < 3) {
          std::printf("FAIL %s %lldx%lld r=%lld%s%s at (%lld, %lld): gpu %.17g, reference %.17g\n",
                      TypeName<T>(), static_cast<long long>(n), static_cast<long long>(k),
                      static_cast<long long>(r), specials ? " nan/inf" : "",
                      in_place ? " in place" : "", static_cast<long long>(i),
                      static_cast<long long>(c), ToDouble(g), ToDouble(want));
        }
      }
    }
  }
}

template <typename T>
void CheckProduct(int64_t n, int64_t k, int64_t r, bool specials) {
  std::vector<T> p = RandomValues<T>(n * r), q = RandomValues<T>(k * r);
  if (specials && n * k > 2 && r > 0) {
    p[(n - 1) * r] = FromDouble<T>(std::nan(""));                               // a row of NaNs
    q[(k / 2) * r + r - 1] = FromDouble<T>(std::numeric_limits<double>::infinity());  // +-Inf
  }
  DeviceArray<T> d_p(p), d_q(q), d_out(n * k);
  CHECK_CUDA(cu::LaunchLowRankProduct(d_p.ptr, d_q.ptr, n, k, r, d_out.ptr, nullptr));
  CHECK_CUDA(cudaDeviceSynchronize());
  const std::vector<T> got = d_out.Download(n * k);
  int reported = 0;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t c = 0; c < k; ++c) {
      const T want = lr::ProductElement(p.data(), q.data(), i, c, k, r);
      const T g = got[i * k + c];
      const bool ok = SameBits(g, want) || (std::isnan(ToDouble(g)) && std::isnan(ToDouble(want)));
      if (!ok) {
        ++g_failures;
        if (reported++ < 3) {
          std::printf("FAIL %s product %lldx%lld r=%lld at (%lld, %lld): gpu %.17g, reference %.17g\n",
                      TypeName<T>(), static_cast<long long>(n), static_cast<long long>(k),
                      static_cast<long long>(r), static_cast<long long>(i), static_cast<long long>(c),
                      ToDouble(g), ToDouble(want));
        }
      }
    }
  }
}

template <typename T>
void CheckCompensate(int64_t n, int64_t k, int64_t r, bool specials) {
  std::vector<T> g = RandomValues<T>(n * k), e = RandomValues<T>(n * k), q = RandomValues<T>(k * r);
  if (specials && n * k > 2) {
    g[1] = FromDouble<T>(std::nan(""));                             // a NaN in row 0's sums
    e[n * k - 1] = FromDouble<T>(-std::numeric_limits<double>::infinity());
    g[0] = FromDouble<T>(-0.0);                                     // -0 + -0 = -0
    e[0] = FromDouble<T>(-0.0);
    if (r > 0) q[(k / 2) * r + r - 1] = FromDouble<T>(std::numeric_limits<double>::infinity());
  }
  DeviceArray<T> d_g(g), d_e(e), d_q(q), d_m(n * k), d_p(n * r);
  CHECK_CUDA(cu::LaunchLowRankCompensate(d_g.ptr, d_e.ptr, d_q.ptr, n, k, r, d_m.ptr, d_p.ptr, nullptr));
  CHECK_CUDA(cudaDeviceSynchronize());
  const std::vector<T> m = d_m.Download(n * k), p = d_p.Download(n * r);
  int reported = 0;
  const auto report = [&](const char* what, int64_t at, T got, T want) {
    const bool ok = SameBits(got, want) || (std::isnan(ToDouble(got)) && std::isnan(ToDouble(want)));
    if (ok) return;
    ++g_failures;
    if (reported++ < 3) {
      std::printf("FAIL %s compensate %s %lldx%lld r=%lld%s at %lld: gpu %.17g, reference %.17g\n",
                  TypeName<T>(), what, static_cast<long long>(n), static_cast<long long>(k),
                  static_cast<long long>(r), specials ? " nan/inf" : "", static_cast<long long>(at),
                  ToDouble(got), ToDouble(want));
    }
  };
  for (int64_t x = 0; x < n * k; ++x) report("m", x, m[x], lr::CompensatedElement(g[x], e[x]));
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < r; ++j) {
      report("p", i * r + j, p[i * r + j],
             lr::CompensatedProductElement(g.data(), e.data(), q.data(), i, j, k, r));
    }
  }
}

template <typename T>
void CheckProject(int64_t n, int64_t k, int64_t r, bool specials) {
  std::vector<T> m = RandomValues<T>(n * k), p = RandomValues<T>(n * r);
  if (specials && n * k > 2 && r > 0) {
    m[1] = FromDouble<T>(std::nan(""));                                          // column 1: NaN
    p[(n - 1) * r] = FromDouble<T>(std::numeric_limits<double>::infinity());      // rank 0: +-Inf
  }
  DeviceArray<T> d_m(m), d_p(p), d_q(k * r);
  CHECK_CUDA(cu::LaunchLowRankProject(d_m.ptr, d_p.ptr, n, k, r, d_q.ptr, nullptr));
  CHECK_CUDA(cudaDeviceSynchronize());
  const std::vector<T> q = d_q.Download(k * r);
  int reported = 0;
  for (int64_t c = 0; c < k; ++c) {
    for (int64_t j = 0; j < r; ++j) {
      const T want = lr::ProjectElement(m.data(), p.data(), c, j, n, k, r), got = q[c * r + j];
      const bool ok = SameBits(got, want) || (std::isnan(ToDouble(got)) && std::isnan(ToDouble(want)));
      if (!ok) {
        ++g_failures;
        if (reported++ < 3) {
          std::printf("FAIL %s project %lldx%lld r=%lld at (%lld, %lld): gpu %.17g, reference %.17g\n",
                      TypeName<T>(), static_cast<long long>(n), static_cast<long long>(k),
                      static_cast<long long>(r), static_cast<long long>(c), static_cast<long long>(j),
                      ToDouble(got), ToDouble(want));
        }
      }
    }
  }
}

template <typename T>
void CheckType() {
  const int64_t shapes[][2] = {{1, 1}, {7, 5}, {31, 33}, {32, 32}, {33, 31}, {65, 130}, {300, 17},
                               {256, 256}, {1000, 3}};
  for (const auto& shape : shapes) {
    for (int64_t r : {0, 1, 2, 4, 31, 32, 33, 64}) {
      Check<T>(shape[0], shape[1], r, false, false);
      Check<T>(shape[0], shape[1], r, true, false);
      Check<T>(shape[0], shape[1], r, false, true);
      CheckProduct<T>(shape[0], shape[1], r, false);
      CheckProduct<T>(shape[0], shape[1], r, true);
      CheckCompensate<T>(shape[0], shape[1], r, false);
      CheckCompensate<T>(shape[0], shape[1], r, true);
    }
  }
  CheckCompensate<T>(3, 0, 4, false);  // sums of no columns: +0
  for (int64_t n : {0, 1, 255, 256, 257, 600}) {  // across the 256-row blocks
    for (int64_t r : {1, 4, 9}) {
      CheckProject<T>(n, 70, r, false);
      CheckProject<T>(n, 70, r, true);
    }
  }
  Check<T>(0, 5, 3, false, false);
  Check<T>(5, 0, 3, false, false);
  // More row tiles (65540) than a grid's 65535 rows: the grid-stride loop.
  Check<T>(cu::kMaxGridRows * cu::kTileRows + 100, 1, 2, false, false);
  CheckProduct<T>(cu::kMaxGridRows * cu::kTileRows + 100, 1, 2, false);
  std::printf("%-6s low-rank residual, product, compensate and project: %s\n", TypeName<T>(), g_failures ? "FAILED" : "ok");
}

}  // namespace

int main() {
  if (!FoundDevice()) return kSkip;
  CheckType<__half>();
  CheckType<float>();
  CheckType<double>();
  return Finish("lowrank_core_test");
}
