// What the standalone CUDA tests (custom_ops/*/cuda_test/*.cu) share, for
// T = __half, float and double:
//
//   #include "custom_ops/testing/cuda_test.h"
//   using namespace tfcomp::cuda_test;
//
//   int main() {
//     if (!FoundDevice()) return kSkip;      // 77: no CUDA device
//     ...                                    // ++g_failures on each failure
//     return Finish("example_core_test");  // 0, or 1 after a failure
//   }
//
// CHECK_CUDA(call) exits with 1 when a CUDA runtime call fails. Also:
// DeviceArray, NextRandom (reproducible), TypeName, ToDouble / FromDouble
// (through the accumulator type), SameBits.
#ifndef TFCOMP_CUSTOM_OPS_TESTING_CUDA_TEST_H_
#define TFCOMP_CUSTOM_OPS_TESTING_CUDA_TEST_H_

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "custom_ops/common/numeric.h"

#define CHECK_CUDA(call)                                                                   \
  do {                                                                                     \
    const cudaError_t err_ = (call);                                                       \
    if (err_ != cudaSuccess) {                                                             \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call,                   \
                   cudaGetErrorString(err_));                                              \
      std::exit(1);                                                                        \
    }                                                                                      \
  } while (0)

namespace tfcomp {
namespace cuda_test {

constexpr int kSkip = 77;  // the exit status for "no CUDA device"

inline int g_failures = 0;

// Prints device 0, or "SKIP: ..." and returns false when there is no device.
inline bool FoundDevice() {
  int devices = 0;
  const cudaError_t err = cudaGetDeviceCount(&devices);
  if (err != cudaSuccess || devices == 0) {
    std::printf("SKIP: no CUDA device (%s)\n",
                err != cudaSuccess ? cudaGetErrorString(err) : "0 devices");
    return false;
  }
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf("device 0: %s (sm_%d%d)\n", prop.name, prop.major, prop.minor);
  return true;
}

// Prints the verdict and returns the exit status: 1 after a failure, else 0.
inline int Finish(const char* test_name) {
  if (g_failures) {
    std::printf("%s: %d failure(s)\n", test_name, g_failures);
    return 1;
  }
  std::printf("%s: all passed\n", test_name);
  return 0;
}

template <typename T> const char* TypeName();
template <> inline const char* TypeName<__half>() { return "half"; }
template <> inline const char* TypeName<float>() { return "float"; }
template <> inline const char* TypeName<double>() { return "double"; }

template <typename T>
using Acc = typename Accumulator<T>::type;

template <typename T>
double ToDouble(T v) { return static_cast<double>(static_cast<Acc<T>>(v)); }
template <typename T>
T FromDouble(double v) { return static_cast<T>(static_cast<Acc<T>>(v)); }

template <typename T>
bool SameBits(const T& a, const T& b) { return std::memcmp(&a, &b, sizeof(T)) == 0; }

// count elements of device memory (at least one allocated), freed at the end.
template <typename T>
struct DeviceArray {
  T* ptr = nullptr;
  explicit DeviceArray(size_t count) { CHECK_CUDA(cudaMalloc(&ptr, (count ? count : 1) * sizeof(T))); }
  DeviceArray(const std::vector<T>& host) : DeviceArray(host.size()) {
    if (!host.empty()) {
      CHECK_CUDA(cudaMemcpy(ptr, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
    }
  }
  DeviceArray(const DeviceArray&) = delete;
  ~DeviceArray() { cudaFree(ptr); }
  std::vector<T> Download(size_t count) const {
    std::vector<T> host(count);
    if (count) CHECK_CUDA(cudaMemcpy(host.data(), ptr, count * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
  }
};

inline uint64_t g_rng = 0x9E3779B97F4A7C15ull;
inline uint32_t NextRandom() {  // xorshift64*: reproducible across platforms
  g_rng ^= g_rng >> 12;
  g_rng ^= g_rng << 25;
  g_rng ^= g_rng >> 27;
  return static_cast<uint32_t>((g_rng * 0x2545F4914F6CDD1Dull) >> 32);
}

// Device scratch for a launcher (allocate(bytes), null on failure), freed
// once the results are downloaded.
struct Scratch {
  std::vector<void*> blocks;
  void* operator()(size_t bytes) {
    void* p = nullptr;
    if (cudaMalloc(&p, bytes) != cudaSuccess) return nullptr;
    blocks.push_back(p);
    return p;
  }
  void Free() {
    for (void* p : blocks) CHECK_CUDA(cudaFree(p));
    blocks.clear();
  }
};

}  // namespace cuda_test
}  // namespace tfcomp

#endif  // TFCOMP_CUSTOM_OPS_TESTING_CUDA_TEST_H_
