// Standalone test of the sign-packing CUDA kernels (no TensorFlow): runs
// pack, unpack and majority on the GPU for __half, float and double and
// compares them with a CPU reference built from sign_core.h. Words, unpacked
// values and votes must match bit for bit; the scale within a tolerance.
// Exit status: 0 pass, 1 failure, 77 no CUDA device (skip).
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <vector>

#include "../cc/kernels/sign_core.h"

template <>
struct tfcomp::sign::FloatLayout<__half> : tfcomp::sign::Binary16Layout {};

#include "../cc/kernels/sign_cuda_kernels.cu.h"

namespace sc = tfcomp::sign;
namespace cu = tfcomp::sign::cuda;

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
using Acc = typename sc::Accumulator<T>::type;

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
    CHECK_CUDA(cudaMemcpy(ptr, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
  ~DeviceArray() { cudaFree(ptr); }
  std::vector<T> Download(size_t count) const {
    std::vector<T> host(count);
    CHECK_CUDA(cudaMemcpy(host.data(), ptr, count * sizeof(T), cudaMemcpyDeviceToHost));
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

// variant 0: finite values with +-0; 1: also +-Inf; 2: also NaN.
template <typename T>
std::vector<T> MakeInput(int64_t n, int variant) {
  const double inf = std::numeric_limits<double>::infinity();
  const double specials[] = {0.0, -0.0, inf, -inf, std::numeric_limits<double>::quiet_NaN()};
  const int num_specials = variant == 0 ? 2 : (variant == 1 ? 4 : 5);
  std::vector<T> x(n);
  for (int64_t i = 0; i < n; ++i) {
    const double r = NextRandom() / 2147483648.0 - 1.0;  // [-1, 1)
    x[i] = FromDouble<T>(i % 7 == 0 ? specials[(i / 7) % num_specials] : r);
  }
  return x;
}

template <typename T>
void Expect(bool ok, int64_t n, const char* what, int64_t index) {
  if (ok) return;
  if (++g_failures <= 20) {
    std::printf("FAIL %s n=%lld: %s at %lld\n", TypeName<T>(), static_cast<long long>(n), what,
                static_cast<long long>(index));
  }
}

template <typename T>
void CheckPackUnpack(int64_t n, int variant) {
  const std::vector<T> x = MakeInput<T>(n, variant);
  const int64_t num_words = sc::NumWords(n), blocks = sc::NumScaleBlocks(n);

  // Reference: the same per-element logic and summation order as the kernels.
  std::vector<uint32_t> ref_words(num_words);
  double total = 0;
  for (int64_t b = 0; b < blocks; ++b) {
    Acc<T> block_sum = 0;
    const int64_t first = b * sc::kScaleBlockElements;
    const int64_t last = std::min(n, first + sc::kScaleBlockElements);
    for (int64_t i = first; i < last; i += sc::kBitsPerWord) {
      const int count = static_cast<int>(std::min<int64_t>(sc::kBitsPerWord, last - i));
      ref_words[i / sc::kBitsPerWord] = sc::PackWord(x.data() + i, count, &block_sum);
    }
    total += static_cast<double>(block_sum);
  }
  const T ref_scale = FromDouble<T>(n > 0 ? total / static_cast<double>(n) : 0.0);

  DeviceArray<T> d_x(x), d_scale(1), d_out(n);
  DeviceArray<uint32_t> d_words(num_words);
  DeviceArray<Acc<T>> d_partials(blocks);
  CHECK_CUDA(cu::LaunchSignPack(d_x.ptr, n, d_words.ptr, d_partials.ptr, d_scale.ptr, nullptr));
  const std::vector<uint32_t> words = d_words.Download(num_words);
  const T scale = d_scale.Download(1)[0];
  CHECK_CUDA(cu::LaunchSignPack(d_x.ptr, n, d_words.ptr, d_partials.ptr, d_scale.ptr, nullptr));
  Expect<T>(SameBits(scale, d_scale.Download(1)[0]), n, "scale differs between two runs", 0);

  for (int64_t w = 0; w < num_words; ++w) Expect<T>(words[w] == ref_words[w], n, "pack word", w);
  const double got = ToDouble(scale), want = ToDouble(ref_scale);
  const double tol = sizeof(T) == 8 ? 1e-12 : (sizeof(T) == 4 ? 1e-5 : 2e-3);
  bool scale_ok;
  if (n == 0) scale_ok = SameBits(scale, ref_scale);
  else if (std::isnan(want)) scale_ok = std::isnan(got);
  else if (std::isinf(want)) scale_ok = got == want;
  else scale_ok = std::fabs(got - want) <= tol * std::fabs(want);
  if (!scale_ok) std::printf("  scale: gpu %.17g, reference %.17g\n", got, want);
  Expect<T>(scale_ok, n, "scale", 0);

  // Unpack the reference words with the reference scale.
  DeviceArray<uint32_t> d_ref_words(ref_words);
  DeviceArray<T> d_ref_scale(std::vector<T>{ref_scale});
  CHECK_CUDA(cu::LaunchSignUnpack(d_ref_words.ptr, d_ref_scale.ptr, n, d_out.ptr, nullptr));
  const std::vector<T> out = d_out.Download(n);
  for (int64_t i = 0; i < n; ++i) {
    const T want_i = sc::UnpackValue(ref_words[i / 32], static_cast<int>(i % 32), ref_scale);
    const bool both_nan = std::isnan(ToDouble(out[i])) && std::isnan(ToDouble(want_i));
    Expect<T>(both_nan || SameBits(out[i], want_i), n, "unpack", i);
  }
}

template <typename T>
void CheckMajority(int64_t n, int64_t k) {
  const int64_t num_words = sc::NumWords(n) + 1;  // rows longer than needed: stride matters
  std::vector<uint32_t> rows(k * num_words);
  for (uint32_t& w : rows) w = NextRandom();
  DeviceArray<uint32_t> d_rows(rows);
  DeviceArray<T> d_out(n);
  CHECK_CUDA(cu::LaunchSignMajority(d_rows.ptr, k, num_words, n, d_out.ptr, nullptr));
  const std::vector<T> out = d_out.Download(n);
  for (int64_t i = 0; i < n; ++i) {
    int64_t positives = 0;
    for (int64_t r = 0; r < k; ++r) {
      positives += sc::BitOf(rows[r * num_words + i / 32], static_cast<int>(i % 32));
    }
    const T want = static_cast<T>(static_cast<float>(sc::MajorityVote(positives, k)));
    Expect<T>(SameBits(out[i], want), n, "majority", i);
  }
}

template <typename T>
void CheckType() {
  const int64_t sizes[] = {0, 1, 31, 32, 33, 1000, 4096, 4097, (int64_t{1} << 20) + 7};
  for (int64_t n : sizes) {
    for (int variant = 0; variant < 3; ++variant) CheckPackUnpack<T>(n, variant);
    for (int64_t k : {1, 2, 5}) CheckMajority<T>(n, k);
  }
  CHECK_CUDA(cudaDeviceSynchronize());
  std::printf("%-6s pack/unpack/majority: %s\n", TypeName<T>(), g_failures ? "FAILED" : "ok");
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
    std::printf("sign_core_test: %d failure(s)\n", g_failures);
    return 1;
  }
  std::printf("sign_core_test: all passed\n");
  return 0;
}
