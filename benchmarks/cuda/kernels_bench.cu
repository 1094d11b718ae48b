// GPU timings of tfcomp's CUDA kernels (no TensorFlow), beside what they are
// measured against:
//   read            one streaming 16-byte-wide read of the tensor: the memory floor
//   *_composed      the same algorithm as separate library/elementwise passes,
//                   the way TensorFlow runs it op by op (tf.abs, tf.reduce_mean,
//                   tf.less, a bit pack; tf.where + tf.gather)
//   cub_select_if   CUB's single-pass stream compaction of the indices above the
//                   threshold, plus the gather: the best exact selection
//   exact_topk_sort |x| radix-sorted with CUB: the exact top-k's cost
//   select_largest  TfcompSelectLargest's exact selection (threshold 0: the exact
//                   top-k; _threshold: DGC's, a threshold that passes `ratio`):
//                   three streaming reads of x by design, one host sync
//   cublas_gemm     C -= P Q^T with cuBLAS, against the fused low-rank residual
//   cast_*_composed a cast pass then a divide pass (tf.cast(x, DstT) / K), against
//                   the one-pass cast_divide (FP16's encode and decode)
// Each measurement is the median of --reps CUDA-event timings after warm-ups.
// Inputs rotate through a pool three times the L2 size, so no timing reads a
// tensor the previous one left in the cache.
//
//   kernels_bench [reps] > results.jsonl     (one JSON object per line)
#include <cublas_v2.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_reduce.cuh>
#include <cub/device/device_select.cuh>
#include <string>
#include <thrust/iterator/counting_iterator.h>
#include <vector>

#include "custom_ops/testing/cuda_test.h"
#include "custom_ops/sign/cc/kernels/sign_core.h"

template <>
struct tfcomp::sign::FloatLayout<__half> : tfcomp::sign::Binary16Layout {};

#include "custom_ops/cast/cc/kernels/cast_cuda_kernels.cu.h"
#include "custom_ops/lowrank/cc/kernels/lowrank_cuda_kernels.cu.h"
#include "custom_ops/sign/cc/kernels/sign_cuda_kernels.cu.h"
#include "custom_ops/sparse/cc/kernels/sparse_cuda_kernels.cu.h"
#include "custom_ops/sparse/cc/kernels/select_cuda_kernels.cu.h"

namespace sg = tfcomp::sign;
namespace sp = tfcomp::sparse;
using namespace tfcomp::cuda_test;  // NOLINT: the helpers of cuda_test.h

#define CHECK_CUBLAS(call)                                                        \
  do {                                                                            \
    if ((call) != CUBLAS_STATUS_SUCCESS) {                                        \
      std::fprintf(stderr, "%s:%d: %s failed\n", __FILE__, __LINE__, #call);      \
      std::exit(1);                                                               \
    }                                                                             \
  } while (0)

namespace {

int g_reps = 31;
constexpr int kWarmups = 5;
size_t g_l2_bytes = 0;
std::string g_device;

// Scratch that lives for the whole program; grows on demand.
struct Scratch {
  void* ptr = nullptr;
  size_t bytes = 0;
  void* Get(size_t want) {
    if (want > bytes) {
      if (ptr) CHECK_CUDA(cudaFree(ptr));
      CHECK_CUDA(cudaMalloc(&ptr, want));
      bytes = want;
    }
    return ptr;
  }
};
Scratch g_scratch;
void* Allocate(size_t bytes) { return g_scratch.Get(bytes ? bytes : 1); }

// Input tensors of n elements, uniform in [-1, 1), enough copies that cycling
// through them evicts each from L2 before it comes round again.
template <typename T>
struct InputPool {
  std::vector<T*> buffers;
  size_t next = 0;
  InputPool(int64_t n, int min_copies) {
    const size_t bytes = static_cast<size_t>(n) * sizeof(T);
    size_t copies = (3 * g_l2_bytes + bytes - 1) / bytes;
    copies = std::max<size_t>(copies, min_copies);
    copies = std::min<size_t>(copies, 1024);
    std::vector<T> host(n);
    for (size_t c = 0; c < copies; ++c) {
      for (int64_t i = 0; i < n; ++i) host[i] = FromDouble<T>(NextRandom() / 2147483648.0 - 1.0);
      T* d = nullptr;
      CHECK_CUDA(cudaMalloc(&d, bytes));
      CHECK_CUDA(cudaMemcpy(d, host.data(), bytes, cudaMemcpyHostToDevice));
      buffers.push_back(d);
      if (n >= (int64_t{1} << 24)) {  // large: one random copy, the others shifted copies
        for (size_t c2 = 1; c2 < copies; ++c2) {
          T* d2 = nullptr;
          CHECK_CUDA(cudaMalloc(&d2, bytes));
          CHECK_CUDA(cudaMemcpy(d2, d, bytes, cudaMemcpyDeviceToDevice));
          buffers.push_back(d2);
        }
        break;
      }
    }
  }
  ~InputPool() {
    for (T* d : buffers) cudaFree(d);
  }
  T* Next() { return buffers[next++ % buffers.size()]; }
};

// Median milliseconds of run(), timed with CUDA events.
template <typename Run>
double MedianMs(Run&& run) {
  cudaEvent_t start, stop;
  CHECK_CUDA(cudaEventCreate(&start));
  CHECK_CUDA(cudaEventCreate(&stop));
  std::vector<float> ms;
  for (int rep = 0; rep < kWarmups + g_reps; ++rep) {
    CHECK_CUDA(cudaEventRecord(start));
    run();
    CHECK_CUDA(cudaEventRecord(stop));
    CHECK_CUDA(cudaEventSynchronize(stop));
    CHECK_CUDA(cudaGetLastError());
    float t = 0;
    CHECK_CUDA(cudaEventElapsedTime(&t, start, stop));
    if (rep >= kWarmups) ms.push_back(t);
  }
  CHECK_CUDA(cudaEventDestroy(start));
  CHECK_CUDA(cudaEventDestroy(stop));
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

template <typename T> const char* DtypeName();
template <> const char* DtypeName<__half>() { return "float16"; }
template <> const char* DtypeName<float>() { return "float32"; }

void Emit(const char* op, const char* dtype, int64_t n, double param, double ms, double min_bytes,
          double extra = -1) {
  std::printf("{\"device\": \"%s\", \"op\": \"%s\", \"dtype\": \"%s\", \"n\": %lld, "
              "\"param\": %g, \"ms\": %.5f, \"min_bytes\": %.0f, \"gbps\": %.1f",
              g_device.c_str(), op, dtype, static_cast<long long>(n), param, ms, min_bytes,
              ms > 0 ? min_bytes / (ms * 1e6) : 0.0);
  if (extra >= 0) std::printf(", \"fill\": %.4f", extra);
  std::printf("}\n");
  std::fflush(stdout);
}

// ---- the memory floor: one read of every byte, 16 bytes per load ----
__global__ void StreamReadKernel(const uint4* __restrict__ x, int64_t words, uint32_t* sink) {
  uint32_t acc = 0;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < words;
       i += stride) {
    const uint4 v = x[i];
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9E3779B9u) *sink = acc;  // keeps the loads; practically never taken
}

int g_sm_count = 0;
unsigned int StreamGrid(int64_t items) {
  const int64_t blocks = (items + 255) / 256;
  return static_cast<unsigned int>(std::max<int64_t>(1, std::min<int64_t>(blocks, 8 * g_sm_count)));
}

template <typename T>
void StreamRead(const T* x, int64_t n, uint32_t* sink) {
  const int64_t words = n * static_cast<int64_t>(sizeof(T)) / 16;
  StreamReadKernel<<<StreamGrid(words), 256>>>(reinterpret_cast<const uint4*>(x), words, sink);
}

// ---- sign compression composed of separate passes, as TensorFlow runs it ----
template <typename T>
__global__ void AbsKernel(const T* __restrict__ x, int64_t n, float* __restrict__ out) {
  for (int64_t i = sp::cuda::GlobalThread(); i < n; i += sp::cuda::GridStride()) {
    out[i] = fabsf(static_cast<float>(x[i]));
  }
}
template <typename T>
__global__ void NegativeKernel(const T* __restrict__ x, int64_t n, uint8_t* __restrict__ out) {
  for (int64_t i = sp::cuda::GlobalThread(); i < n; i += sp::cuda::GridStride()) {
    out[i] = static_cast<float>(x[i]) < 0.0f;
  }
}
__global__ void PackBytesKernel(const uint8_t* __restrict__ flags, int64_t n,
                                uint32_t* __restrict__ words) {
  const int64_t num_words = (n + 31) / 32;
  for (int64_t w = sp::cuda::GlobalThread(); w < num_words; w += sp::cuda::GridStride()) {
    uint32_t word = 0;
    for (int b = 0; b < 32 && w * 32 + b < n; ++b) word |= uint32_t{flags[w * 32 + b]} << b;
    words[w] = word;
  }
}

template <typename T>
void SignComposed(const T* x, int64_t n, float* abs_tmp, uint8_t* flags, float* sum,
                  uint32_t* words) {
  const unsigned grid = sp::cuda::GridFor(n);
  AbsKernel<T><<<grid, 256>>>(x, n, abs_tmp);
  size_t bytes = 0;
  CHECK_CUDA(cub::DeviceReduce::Sum(nullptr, bytes, abs_tmp, sum, n));
  CHECK_CUDA(cub::DeviceReduce::Sum(Allocate(bytes), bytes, abs_tmp, sum, n));
  NegativeKernel<T><<<grid, 256>>>(x, n, flags);
  PackBytesKernel<<<sp::cuda::GridFor((n + 31) / 32), 256>>>(flags, n, words);
}

template <typename T>
void BenchSign(int64_t n) {
  const char* dt = DtypeName<T>();
  InputPool<T> pool(n, 2);
  const int64_t num_words = sg::NumWords(n);
  DeviceArray<uint32_t> words(num_words * 8), sink(1);
  DeviceArray<Acc<T>> partials(sg::NumScaleBlocks(n));
  DeviceArray<T> scale(8), out(n);
  DeviceArray<float> abs_tmp(n), sum(1);
  DeviceArray<uint8_t> flags(n);
  const double in_bytes = static_cast<double>(n) * sizeof(T);
  const double packed_bytes = 4.0 * num_words;
  CHECK_CUDA(cudaMemset(words.ptr, 0x5A, num_words * 8 * sizeof(uint32_t)));

  Emit("read", dt, n, 0, MedianMs([&] { StreamRead(pool.Next(), n, sink.ptr); }), in_bytes);
  Emit("sign_pack", dt, n, 0, MedianMs([&] {
         CHECK_CUDA(sg::cuda::LaunchSignPack(pool.Next(), n, 1u, words.ptr, partials.ptr,
                                             scale.ptr, nullptr));
       }), in_bytes + packed_bytes);
  Emit("sign_pack_composed", dt, n, 0, MedianMs([&] {
         SignComposed(pool.Next(), n, abs_tmp.ptr, flags.ptr, sum.ptr, words.ptr);
       }), in_bytes + packed_bytes);
  Emit("sign_unpack", dt, n, 0, MedianMs([&] {
         CHECK_CUDA(sg::cuda::LaunchSignUnpack(words.ptr, scale.ptr, n, out.ptr, nullptr));
       }), in_bytes + packed_bytes);
  Emit("sign_majority", dt, n, 8, MedianMs([&] {
         CHECK_CUDA(sg::cuda::LaunchSignMajority(words.ptr, 8, num_words, n, out.ptr, nullptr));
       }), in_bytes + 8 * packed_bytes);
  Emit("sign_majority", dt, n, 2, MedianMs([&] {
         CHECK_CUDA(sg::cuda::LaunchSignMajority(words.ptr, 2, num_words, n, out.ptr, nullptr));
       }), in_bytes + 2 * packed_bytes);
  // EF-sign encode: reads g and e twice, writes the residual and the words.
  DeviceArray<T> residual(n);
  Emit("sign_ef_pack", dt, n, 0, MedianMs([&] {
         const T* g = pool.Next();
         CHECK_CUDA(sg::cuda::LaunchSignEfPack(g, out.ptr, n, 0u, words.ptr, partials.ptr,
                                               scale.ptr, residual.ptr, nullptr));
       }), 5 * in_bytes + packed_bytes);
  for (int k : {2, 8}) {
    Emit("sign_scaled_sum", dt, n, k, MedianMs([&] {
           CHECK_CUDA(sg::cuda::LaunchSignScaledSum(words.ptr, scale.ptr, k, num_words, n,
                                                    static_cast<T>(0.5f), out.ptr, nullptr));
         }), in_bytes + k * packed_bytes);
  }
}

// ---- cast and divide (FP16): one pass against a cast pass and a divide pass ----
namespace cst = tfcomp::cast;
template <typename Src, typename Dst>
__global__ void CastOnlyKernel(const Src* __restrict__ x, int64_t n, Dst* __restrict__ out) {
  for (int64_t i = sp::cuda::GlobalThread(); i < n; i += sp::cuda::GridStride()) {
    out[i] = cst::Convert<Dst>(x[i]);
  }
}
template <typename T>
__global__ void DivideOnlyKernel(T* __restrict__ x, int64_t n, const T* __restrict__ divisor) {
  const cst::Acc<T> d = cst::Widen(*divisor);
  for (int64_t i = sp::cuda::GlobalThread(); i < n; i += sp::cuda::GridStride()) {
    x[i] = cst::Narrow<T>(cst::Widen(x[i]) / d);
  }
}

template <typename T> struct CoreOf { using type = T; };
template <> struct CoreOf<__half> { using type = cst::Half; };

// op names: cast_<src>_<dst>, param = the divisor.
template <typename SrcT, typename DstT>
void BenchCast(int64_t n, float divisor_value) {
  using Src = typename CoreOf<SrcT>::type;
  using Dst = typename CoreOf<DstT>::type;
  InputPool<SrcT> pool(n, 2);
  DeviceArray<Dst> out(n), divisor(std::vector<Dst>{cst::Narrow<Dst>(divisor_value)});
  const double bytes = static_cast<double>(n) * (sizeof(Src) + sizeof(Dst));
  const std::string name = std::string("cast_") + DtypeName<SrcT>() + "_" + DtypeName<DstT>();
  Emit(name.c_str(), DtypeName<SrcT>(), n, divisor_value, MedianMs([&] {
         CHECK_CUDA(cst::cuda::LaunchCastDivide(reinterpret_cast<const Src*>(pool.Next()), n,
                                                divisor.ptr, out.ptr, nullptr));
       }), bytes);
  Emit((name + "_composed").c_str(), DtypeName<SrcT>(), n, divisor_value, MedianMs([&] {
         const unsigned grid = sp::cuda::GridFor(n);
         CastOnlyKernel<Src, Dst><<<grid, 256>>>(reinterpret_cast<const Src*>(pool.Next()), n, out.ptr);
         DivideOnlyKernel<Dst><<<grid, 256>>>(out.ptr, n, divisor.ptr);
       }), bytes);
}

// ---- selection ----
__global__ void IotaKernel(int64_t* __restrict__ out, int64_t n) {
  for (int64_t i = sp::cuda::GlobalThread(); i < n; i += sp::cuda::GridStride()) out[i] = i;
}
template <typename T>
struct AboveThreshold {
  const T* x;
  float t;
  __device__ bool operator()(int64_t i) const { return fabsf(static_cast<float>(x[i])) >= t; }
};
template <typename T>
__global__ void FlagKernel(const T* __restrict__ x, int64_t n, float t, uint8_t* __restrict__ f) {
  for (int64_t i = sp::cuda::GlobalThread(); i < n; i += sp::cuda::GridStride()) {
    f[i] = fabsf(static_cast<float>(x[i])) >= t;
  }
}
template <typename T>
__global__ void GatherSelectedKernel(const T* __restrict__ x, const int64_t* __restrict__ idx,
                                     const int64_t* __restrict__ count, T* __restrict__ out) {
  const int64_t c = *count;
  for (int64_t j = sp::cuda::GlobalThread(); j < c; j += sp::cuda::GridStride()) out[j] = x[idx[j]];
}
__global__ void CountFilledKernel(const int64_t* idx, int64_t capacity, unsigned long long* filled) {
  for (int64_t j = sp::cuda::GlobalThread(); j < capacity; j += sp::cuda::GridStride()) {
    if (idx[j] >= 0) atomicAdd(filled, 1ull);
  }
}

template <typename T>
void BenchSelect(int64_t n) {
  const char* dt = DtypeName<T>();
  InputPool<T> pool(n, 2);
  DeviceArray<int64_t> iota(n), selected(n), count(1);
  DeviceArray<T> values(n), dense(n);
  DeviceArray<uint8_t> flags(n);
  DeviceArray<float> keys(n), keys_out(n);
  DeviceArray<int64_t> order_out(n);
  DeviceArray<unsigned long long> filled(1);
  IotaKernel<<<sp::cuda::GridFor(n), 256>>>(iota.ptr, n);
  const double in_bytes = static_cast<double>(n) * sizeof(T);

  for (double ratio : {0.01, 0.001}) {
    const int64_t capacity = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(ratio * n)));
    // |x| is uniform in [0, 1): this threshold passes a fraction `ratio`, the
    // case the hash table's capacity is sized for.
    const float t_host = static_cast<float>(1.0 - ratio);
    DeviceArray<T> t(std::vector<T>{FromDouble<T>(t_host)});
    const sp::HashParams hash = sp::HashFromSeed(7, static_cast<uint64_t>(capacity));
    const double out_bytes = capacity * (sizeof(T) + sizeof(int64_t));

    Emit("hash_select", dt, n, ratio, MedianMs([&] {
           CHECK_CUDA(sp::cuda::LaunchHashSelect(pool.Next(), n, t.ptr, hash, capacity, 1,
                                                 values.ptr, selected.ptr, Allocate, nullptr));
         }), in_bytes + out_bytes);
    // How full the table came out (DRAGONN's 1 - 1/e when as many pass as there are slots).
    CHECK_CUDA(cudaMemset(filled.ptr, 0, sizeof(unsigned long long)));
    CountFilledKernel<<<sp::cuda::GridFor(capacity), 256>>>(selected.ptr, capacity, filled.ptr);
    const double fill = static_cast<double>(filled.Download(1)[0]) / capacity;
    Emit("hash_select_fill", dt, n, ratio, 0, 0, fill);
    // Buckets of 4 slots (DRAGONN's default): a claim may pass through 4 atomics.
    Emit("hash_select_bucket4", dt, n, ratio, MedianMs([&] {
           CHECK_CUDA(sp::cuda::LaunchHashSelect(pool.Next(), n, t.ptr, hash, capacity, 4,
                                                 values.ptr, selected.ptr, Allocate, nullptr));
         }), in_bytes + out_bytes);

    Emit("cub_select_if", dt, n, ratio, MedianMs([&] {
           const T* x = pool.Next();
           size_t bytes = 0;
           const AboveThreshold<T> pred{x, t_host};
           thrust::counting_iterator<int64_t> first(0);
           CHECK_CUDA(cub::DeviceSelect::If(nullptr, bytes, first, selected.ptr, count.ptr, n, pred));
           CHECK_CUDA(cub::DeviceSelect::If(Allocate(bytes), bytes, first, selected.ptr, count.ptr, n,
                                            pred));
           GatherSelectedKernel<T><<<sp::cuda::GridFor(capacity), 256>>>(x, selected.ptr, count.ptr,
                                                                         values.ptr);
         }), in_bytes + out_bytes);
    Emit("select_composed", dt, n, ratio, MedianMs([&] {
           const T* x = pool.Next();
           FlagKernel<T><<<sp::cuda::GridFor(n), 256>>>(x, n, t_host, flags.ptr);
           size_t bytes = 0;
           CHECK_CUDA(cub::DeviceSelect::Flagged(nullptr, bytes, iota.ptr, flags.ptr, selected.ptr,
                                                 count.ptr, n));
           CHECK_CUDA(cub::DeviceSelect::Flagged(Allocate(bytes), bytes, iota.ptr, flags.ptr,
                                                 selected.ptr, count.ptr, n));
           GatherSelectedKernel<T><<<sp::cuda::GridFor(capacity), 256>>>(x, selected.ptr, count.ptr,
                                                                         values.ptr);
         }), in_bytes + out_bytes);

    // Exact selection (TopK's and DGC's): the capacity largest by (|x|, index),
    // in index order. Its floor is the one read of x and the outputs.
    DeviceArray<T> zero(std::vector<T>{FromDouble<T>(0.0)});
    Emit("select_largest", dt, n, ratio, MedianMs([&] {
           CHECK_CUDA(tfcomp::select::cuda::LaunchSelectLargest(pool.Next(), n, zero.ptr, capacity,
                                                                values.ptr, selected.ptr, Allocate,
                                                                nullptr));
         }), in_bytes + out_bytes);
    Emit("select_largest_threshold", dt, n, ratio, MedianMs([&] {
           CHECK_CUDA(tfcomp::select::cuda::LaunchSelectLargest(pool.Next(), n, t.ptr, capacity,
                                                                values.ptr, selected.ptr, Allocate,
                                                                nullptr));
         }), in_bytes + out_bytes);

    const int64_t num_samples = std::max<int64_t>(512, static_cast<int64_t>(std::ceil(0.01 * n)));
    const int64_t k = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(ratio * num_samples)));
    Emit("sampled_threshold", dt, n, ratio, MedianMs([&] {
           CHECK_CUDA(sp::cuda::LaunchSampledThreshold(pool.Next(), n, hash, num_samples, k, t.ptr,
                                                       Allocate, nullptr));
         }), std::min(n, num_samples) * static_cast<double>(sizeof(T)));

    // What two workers' lists decode into: 2 x capacity entries, a quarter empty.
    std::vector<int64_t> list(2 * capacity);
    for (int64_t& i : list) i = NextRandom() % 4 == 0 ? sp::kEmptyIndex : NextRandom() % n;
    const DeviceArray<int64_t> list_indices(list);
    DeviceArray<T> list_values(2 * capacity);
    CHECK_CUDA(cudaMemcpy(list_values.ptr, pool.Next(), 2 * capacity * sizeof(T),
                          cudaMemcpyDeviceToDevice));
    Emit("sparse_decode", dt, n, ratio, MedianMs([&] {
           CHECK_CUDA(sp::cuda::LaunchSparseDecode(list_values.ptr, list_indices.ptr, 2 * capacity, n,
                                                   dense.ptr, Allocate, nullptr));
         }), in_bytes + 2 * out_bytes);
    // The mean of the two (TfcompSparseDecode's divisor): 1/2 applied as each sum is written.
    Emit("sparse_decode_mean", dt, n, ratio, MedianMs([&] {
           CHECK_CUDA(sp::cuda::LaunchSparseDecode(list_values.ptr, list_indices.ptr, 2 * capacity, n,
                                                   dense.ptr, Allocate, nullptr, 2));
         }), in_bytes + 2 * out_bytes);
    // Error feedback's update in place (TfcompScaleAt on a forwarded buffer): the residual
    // (factor 0) and the velocity's masking (0.5) at one worker's capacity indices; the
    // floor is the indices read and one element read and written per index.
    const double scale_bytes = capacity * (sizeof(int64_t) + 2.0 * sizeof(T));
    Emit("scale_at_clear", dt, n, ratio, MedianMs([&] {
           CHECK_CUDA(sp::cuda::LaunchScaleAt(dense.ptr, list_indices.ptr, capacity, n,
                                              static_cast<T>(0.0f), dense.ptr, Allocate, nullptr));
         }), scale_bytes);
    Emit("scale_at_half", dt, n, ratio, MedianMs([&] {
           CHECK_CUDA(sp::cuda::LaunchScaleAt(dense.ptr, list_indices.ptr, capacity, n,
                                              static_cast<T>(0.5f), dense.ptr, Allocate, nullptr));
         }), scale_bytes);
  }
  {
    Emit("exact_topk_sort", dt, n, 0, MedianMs([&] {
           AbsKernel<T><<<sp::cuda::GridFor(n), 256>>>(pool.Next(), n, keys.ptr);
           size_t bytes = 0;
           CHECK_CUDA(cub::DeviceRadixSort::SortPairsDescending(nullptr, bytes, keys.ptr, keys_out.ptr,
                                                               iota.ptr, order_out.ptr, n));
           CHECK_CUDA(cub::DeviceRadixSort::SortPairsDescending(Allocate(bytes), bytes, keys.ptr,
                                                               keys_out.ptr, iota.ptr,
                                                               order_out.ptr, n));
         }), in_bytes);
  }
}

// ---- low rank: out = m - p q^T, m = g + e with p = m q, and q = m^T p: fused kernels against cuBLAS ----
void BenchLowRank(int64_t rows, int64_t cols, int64_t rank, cublasHandle_t blas) {
  const int64_t n = rows * cols;
  InputPool<float> pool(n, 2);
  std::vector<float> host_p(rows * rank), host_q(cols * rank);
  for (float& v : host_p) v = NextRandom() / 2147483648.0f - 1.0f;
  for (float& v : host_q) v = NextRandom() / 2147483648.0f - 1.0f;
  DeviceArray<float> p(host_p), q(host_q), out(n);
  DeviceArray<uint32_t> sink(1);
  const double bytes = 2.0 * n * sizeof(float);  // read m, write out
  Emit("read", "float32", n, 0, MedianMs([&] { StreamRead(pool.Next(), n, sink.ptr); }), 0.5 * bytes);
  Emit("lowrank_residual", "float32", n, rank, MedianMs([&] {
         CHECK_CUDA(tfcomp::lowrank::cuda::LaunchLowRankResidual(pool.Next(), p.ptr, q.ptr, rows, cols,
                                                                 rank, out.ptr, nullptr));
       }), bytes);
  // Row-major out[rows, cols] is column-major [cols, rows]: out^T = m^T - q p^T.
  const float minus_one = -1.0f, one = 1.0f;
  Emit("cublas_gemm", "float32", n, rank, MedianMs([&] {
         CHECK_CUDA(cudaMemcpyAsync(out.ptr, pool.Next(), n * sizeof(float), cudaMemcpyDeviceToDevice));
         CHECK_CUBLAS(cublasSgemm(blas, CUBLAS_OP_T, CUBLAS_OP_N, cols, rows, rank, &minus_one, q.ptr,
                                  rank, p.ptr, rank, &one, out.ptr, cols));
       }), bytes);
  Emit("cublas_gemm_inplace", "float32", n, rank, MedianMs([&] {
         CHECK_CUBLAS(cublasSgemm(blas, CUBLAS_OP_T, CUBLAS_OP_N, cols, rows, rank, &minus_one, q.ptr,
                                  rank, p.ptr, rank, &one, pool.Next(), cols));
       }), bytes);
  // m = g + e and p = m q in one pass (reads g and e, writes m), against the add and
  // cuBLAS's p^T = q^T m^T on the column-major view.
  DeviceArray<float> m(n), p_out(rows * rank);
  Emit("lowrank_compensate", "float32", n, rank, MedianMs([&] {
         CHECK_CUDA(tfcomp::lowrank::cuda::LaunchLowRankCompensate(pool.Next(), pool.Next(), q.ptr, rows,
                                                                   cols, rank, m.ptr, p_out.ptr, nullptr));
       }), 1.5 * bytes);
  Emit("add_then_cublas_gemm", "float32", n, rank, MedianMs([&] {
         const float* g = pool.Next();
         const float* e = pool.Next();
         CHECK_CUBLAS(cublasSgeam(blas, CUBLAS_OP_N, CUBLAS_OP_N, cols, rows, &one, g, cols, &one, e, cols,
                                  m.ptr, cols));
         const float zero = 0.0f;
         // q is [cols, rank] row-major, i.e. column-major [rank, cols]: p^T[rank, rows] = q^T m^T.
         CHECK_CUBLAS(cublasSgemm(blas, CUBLAS_OP_N, CUBLAS_OP_N, rank, rows, cols, &one, q.ptr, rank,
                                  m.ptr, cols, &zero, p_out.ptr, rank));
       }), 1.5 * bytes);
  // q = m^T p in one pass over m (reads m), against cuBLAS's q^T = p^T m on the
  // column-major views.
  DeviceArray<float> q_out(cols * rank);
  Emit("lowrank_project", "float32", n, rank, MedianMs([&] {
         CHECK_CUDA(tfcomp::lowrank::cuda::LaunchLowRankProject(pool.Next(), p.ptr, rows, cols, rank,
                                                                q_out.ptr, nullptr));
       }), 0.5 * bytes);
  Emit("cublas_gemm_project", "float32", n, rank, MedianMs([&] {
         const float zero = 0.0f;
         // Column-major views: p is [rank, rows], m is [cols, rows], q is [rank, cols] = p m^T.
         CHECK_CUBLAS(cublasSgemm(blas, CUBLAS_OP_N, CUBLAS_OP_T, rank, cols, rows, &one, p.ptr, rank,
                                  pool.Next(), cols, &zero, q_out.ptr, rank));
       }), 0.5 * bytes);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1) g_reps = std::max(3, std::atoi(argv[1]));
  if (!FoundDevice()) return kSkip;
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  g_l2_bytes = prop.l2CacheSize;
  g_sm_count = prop.multiProcessorCount;
  g_device = prop.name;
  std::fprintf(stderr, "L2 %zu MiB, %d SMs, %d reps\n", g_l2_bytes >> 20, g_sm_count, g_reps);

  for (int e : {16, 18, 20, 22, 24, 26}) {
    const int64_t n = int64_t{1} << e;
    std::fprintf(stderr, "n = 2^%d\n", e);
    BenchSign<float>(n);
    BenchSign<__half>(n);
    BenchCast<float, __half>(n, 1.0f);   // FP16's encode
    BenchCast<__half, float>(n, 2.0f);   // its decode, K = 2
    BenchCast<__half, __half>(n, 2.0f);  // a float16 gradient's decode
    BenchSelect<float>(n);
    BenchSelect<__half>(n);
  }
  cublasHandle_t blas;
  CHECK_CUBLAS(cublasCreate(&blas));
  for (int64_t side : {1024, 2048, 4096, 8192}) {
    for (int64_t rank : {1, 4, 16}) BenchLowRank(side, side, rank, blas);
  }
  CHECK_CUBLAS(cublasDestroy(blas));
  return 0;
}
