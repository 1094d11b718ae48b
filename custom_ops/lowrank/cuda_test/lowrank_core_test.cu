// Standalone test of the low-rank residual CUDA kernel (no TensorFlow): runs
// it on the GPU for __half, float and double and compares every element with
// the CPU reference lowrank_core.h's ResidualElement, bit for bit (NaN
// payloads aside), over ragged shapes (partial tiles, r = 0, r across several
// rank chunks), with NaN and Inf, in place (out = m), and with more row tiles
// than the grid has rows (the grid-stride loop).
// Exit status: 0 pass, 1 failure, 77 no CUDA device (skip).
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <vector>

#include "../cc/kernels/lowrank_core.h"
#include "../cc/kernels/lowrank_cuda_kernels.cu.h"

namespace lr = tfcomp::lowrank;
namespace cu = tfcomp::lowrank::cuda;

#define CHECK_CUDA(call)                                                                   \
  do {                                                                                     \
    const cudaError_t err_ = (call);                                                       \
    if (err_ != cudaSuccess) {                                                             \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call,                   \
                   cudaGetErrorString(err_));                                              \
      std::exit(1);                                                                        \
    }                                                                                      \
  } while (0)

namespace {

int g_failures = 0;

template <typename T> const char* TypeName();
template <> const char* TypeName<__half>() { return "half"; }
template <> const char* TypeName<float>() { return "float"; }
template <> const char* TypeName<double>() { return "double"; }

template <typename T>
using Acc = typename lr::Accumulator<T>::type;

template <typename T>
double ToDouble(T v) { return static_cast<double>(static_cast<Acc<T>>(v)); }
template <typename T>
T FromDouble(double v) { return static_cast<T>(static_cast<Acc<T>>(v)); }

template <typename T>
bool SameBits(const T& a, const T& b) { return std::memcmp(&a, &b, sizeof(T)) == 0; }

template <typename T>
struct DeviceArray {
  T* ptr = nullptr;
  explicit DeviceArray(size_t count) { CHECK_CUDA(cudaMalloc(&ptr, (count ? count : 1) * sizeof(T))); }
  DeviceArray(const std::vector<T>& host) : DeviceArray(host.size()) {
    if (!host.empty()) {
      CHECK_CUDA(cudaMemcpy(ptr, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
    }
  }
  ~DeviceArray() { cudaFree(ptr); }
  std::vector<T> Download(size_t count) const {
    std::vector<T> host(count);
    if (count) CHECK_CUDA(cudaMemcpy(host.data(), ptr, count * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
  }
};

uint64_t g_rng = 0x9E3779B97F4A7C15ull;
uint32_t NextRandom() {  // xorshift64*: reproducible across platforms
  g_rng ^= g_rng >> 12;
  g_rng ^= g_rng << 25;
  g_rng ^= g_rng >> 27;
  return static_cast<uint32_t>((g_rng * 0x2545F4914F6CDD1Dull) >> 32);
}

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
void CheckType() {
  const int64_t shapes[][2] = {{1, 1}, {7, 5}, {31, 33}, {32, 32}, {33, 31}, {65, 130}, {300, 17},
                               {256, 256}, {1000, 3}};
  for (const auto& shape : shapes) {
    for (int64_t r : {0, 1, 2, 4, 31, 32, 33, 64}) {
      Check<T>(shape[0], shape[1], r, false, false);
      Check<T>(shape[0], shape[1], r, true, false);
      Check<T>(shape[0], shape[1], r, false, true);
    }
  }
  Check<T>(0, 5, 3, false, false);
  Check<T>(5, 0, 3, false, false);
  // More row tiles (65540) than a grid's 65535 rows: the grid-stride loop.
  Check<T>(cu::kMaxGridRows * cu::kTileRows + 100, 1, 2, false, false);
  std::printf("%-6s low-rank residual: %s\n", TypeName<T>(), g_failures ? "FAILED" : "ok");
}

}  // namespace

int main() {
  int devices = 0;
  const cudaError_t err = cudaGetDeviceCount(&devices);
  if (err != cudaSuccess || devices == 0) {
    std::printf("SKIP: no CUDA device (%s)\n",
                err != cudaSuccess ? cudaGetErrorString(err) : "0 devices");
    return 77;
  }
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf("device 0: %s (sm_%d%d)\n", prop.name, prop.major, prop.minor);
  CheckType<__half>();
  CheckType<float>();
  CheckType<double>();
  if (g_failures) {
    std::printf("lowrank_core_test: %d failure(s)\n", g_failures);
    return 1;
  }
  std::printf("lowrank_core_test: all passed\n");
  return 0;
}
