// CUDA kernels of the sparse ops and their launchers, on plain pointers and a
// stream: no TensorFlow, no Eigen. Included by sparse_kernels.cu.cc (T =
// Eigen::half, Eigen::bfloat16, float, double) and by the standalone test
// cuda_test/sparse_core_test.cu (T = __half, float, double); Index is int32_t
// or int64_t. The per-element logic is sparse_core.h's, and the results match
// the CPU kernels bit for bit (NaN payloads aside: GPU arithmetic gives the
// canonical NaN).
#ifndef TFCOMP_CUSTOM_OPS_SPARSE_CC_KERNELS_SPARSE_CUDA_KERNELS_CU_H_
#define TFCOMP_CUSTOM_OPS_SPARSE_CC_KERNELS_SPARSE_CUDA_KERNELS_CU_H_

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <cub/device/device_radix_sort.cuh>

#include "custom_ops/common/cuda_vec.cu.h"
#include "sparse_core.h"

namespace tfcomp {
namespace sparse {
namespace cuda {

constexpr int kThreads = 256;

template <typename T>
using Acc = typename Accumulator<T>::type;

// Grid for the grid-stride loops: enough blocks to cover n, capped well below
// CUDA's limit (the loop covers the rest).
inline unsigned int GridFor(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned int>(blocks < (int64_t{1} << 20) ? blocks : (int64_t{1} << 20));
}

__device__ inline int64_t GlobalThread() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ inline int64_t GridStride() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

template <typename V>
__global__ void FillKernel(V* __restrict__ out, int64_t n, V value) {
  for (int64_t i = GlobalThread(); i < n; i += GridStride()) out[i] = value;
}

// The sort's input: keys[j] = indices[j], or n for an index outside [0, n) (no
// valid index equals n, and SumRunsKernel skips it); positions[j] = j.
template <typename Index>
__global__ void SortInputKernel(const Index* __restrict__ indices, int64_t count, int64_t n,
                                Index* __restrict__ keys, int64_t* __restrict__ positions) {
  for (int64_t j = GlobalThread(); j < count; j += GridStride()) {
    const Index i = indices[j];
    keys[j] = i >= 0 && i < n ? i : static_cast<Index>(n);
    positions[j] = j;
  }
}

// Bits needed for the values 0..n: the radix sort looks at no others.
inline int BitsFor(int64_t n) {
  int bits = 1;
  while (bits < 63 && (n >> bits) != 0) ++bits;
  return bits;
}

// Inserts SlotClaim(|g[i]|, i) into element i's bucket of bucket_size slots
// (sparse_core.h's InsertClaim) for every selected i; claims[capacity] start
// at 0 (empty). Thread t reads g[t V, t V + V) as one access (g aligned to
// V * sizeof(T)). Each slot is settled by atomic maxima of (magnitude,
// index), which return what the slot held, so the table does not depend on
// the order of the writes.
template <typename T, int V>
__global__ void HashSelectKernel(const T* __restrict__ g, int64_t n,
                                 const T* __restrict__ threshold, HashParams hash,
                                 int64_t capacity, int64_t bucket_size,
                                 uint64_t* __restrict__ claims) {
  // uint64_t is unsigned long; CUDA's 64-bit atomicMax takes unsigned long long, the same bits.
  static_assert(sizeof(unsigned long long) == sizeof(uint64_t), "64-bit unsigned long long");
  const Acc<T> t = static_cast<Acc<T>>(*threshold);
  const int64_t buckets = BucketCount(capacity, bucket_size);
  const auto fetch_max = [claims](int64_t slot, uint64_t claim) -> uint64_t {
    return atomicMax(reinterpret_cast<unsigned long long*>(claims) + slot,
                     static_cast<unsigned long long>(claim));
  };
  const int64_t packs = (n + V - 1) / V;
  for (int64_t p = GlobalThread(); p < packs; p += GridStride()) {
    const int64_t first = p * V;
    const cuda_vec::Vec<T, V> values = cuda_vec::LoadVec<T, V>(g, first, n);
#pragma unroll
    for (int e = 0; e < V; ++e) {
      const int64_t i = first + e;
      if (i >= n) continue;
      const Acc<T> magnitude = AbsValue(values.v[e]);
      if (Selected(magnitude, t)) {
        const int64_t begin = BucketStart(hash, static_cast<uint64_t>(i), buckets, bucket_size);
        InsertClaim(SlotClaim(magnitude, i), begin, BucketEnd(begin, bucket_size, capacity),
                    fetch_max);
      }
    }
  }
}

// indices[j] = the index claims[j] names (kEmptyIndex for an empty slot),
// values[j] = g[indices[j]], or zero for an empty slot.
template <typename T, typename Index>
__global__ void GatherKernel(const T* __restrict__ g, const uint64_t* __restrict__ claims,
                             int64_t capacity, T zero, T* __restrict__ values,
                             Index* __restrict__ indices) {
  for (int64_t j = GlobalThread(); j < capacity; j += GridStride()) {
    const int64_t i = ClaimedIndex(claims[j]);
    indices[j] = static_cast<Index>(i);
    values[j] = i >= 0 ? g[i] : zero;
  }
}

// keys[count] are the indices sorted stably, positions[count] where each came
// from in the list. Thread p sums the run of equal keys that starts at p: in
// list order, from 0, rounding to T after every addition, as the CPU's
// dense[i] += values[j] does, then times weight unless it is 1 (Weighted).
// Runs outside [0, n) are skipped.
template <typename T, typename Index>
__global__ void SumRunsKernel(const T* __restrict__ values, const Index* __restrict__ keys,
                              const int64_t* __restrict__ positions, int64_t count, int64_t n,
                              T zero, Acc<T> weight, T* __restrict__ dense) {
  for (int64_t p = GlobalThread(); p < count; p += GridStride()) {
    const Index key = keys[p];
    if (key < 0 || key >= n || (p > 0 && keys[p - 1] == key)) continue;
    T sum = zero;
    for (int64_t q = p; q < count && keys[q] == key; ++q) {
      sum = static_cast<T>(static_cast<Acc<T>>(sum) + static_cast<Acc<T>>(values[positions[q]]));
    }
    dense[key] = weight == static_cast<Acc<T>>(1) ? sum : Weighted(sum, weight);
  }
}

// Writes indices[capacity] and values[capacity], in buckets of bucket_size (>= 1)
// slots; threshold is one element in device memory; n <= kMaxHashSelectElements
// (a claim holds 32 bits of index). allocate(bytes) returns device scratch that
// stays valid for the work queued on stream, or null on failure: capacity
// 64-bit claims, zeroed, that HashSelectKernel fills with each bucket's largest
// (magnitude, index) and GatherKernel reads back. Returns the first CUDA error.
template <typename T, typename Index, typename Allocate>
cudaError_t LaunchHashSelect(const T* g, int64_t n, const T* threshold, HashParams hash,
                             int64_t capacity, int64_t bucket_size, T* values, Index* indices,
                             Allocate&& allocate, cudaStream_t stream) {
  if (capacity <= 0) return cudaGetLastError();
  uint64_t* claims = static_cast<uint64_t*>(allocate(capacity * sizeof(uint64_t)));
  if (claims == nullptr) return cudaErrorMemoryAllocation;
  const unsigned int slot_grid = GridFor(capacity);
  FillKernel<uint64_t><<<slot_grid, kThreads, 0, stream>>>(claims, capacity, uint64_t{0});
  if (n > 0) {
    cuda_vec::WithVecWidth<T>(g, [&](auto width) {
      constexpr int V = decltype(width)::value;
      HashSelectKernel<T, V><<<GridFor((n + V - 1) / V), kThreads, 0, stream>>>(
          g, n, threshold, hash, capacity, bucket_size, claims);
    });
  }
  GatherKernel<T, Index><<<slot_grid, kThreads, 0, stream>>>(g, claims, capacity,
                                                             static_cast<T>(0.0f), values, indices);
  return cudaGetLastError();
}

inline size_t AlignScratch(size_t bytes) { return (bytes + 255) / 256 * 256; }

// dense[n] = 0, then dense[indices[j]] += values[j] in list order for every j
// with 0 <= indices[j] < n; other entries are skipped; then every sum times
// DecodeWeight(divisor) (divisor >= 1; untouched elements stay +0, which is 0
// times the weight). allocate(bytes) returns device scratch that stays valid
// for the work queued on stream, or null on failure. Returns the first CUDA
// error.
template <typename T, typename Index, typename Allocate>
cudaError_t LaunchSparseDecode(const T* values, const Index* indices, int64_t count, int64_t n,
                               T* dense, Allocate&& allocate, cudaStream_t stream,
                               int64_t divisor = 1) {
  if (n == 0) return cudaGetLastError();
  const T zero = static_cast<T>(0.0f);
  FillKernel<T><<<GridFor(n), kThreads, 0, stream>>>(dense, n, zero);
  if (count == 0) return cudaGetLastError();

  // Radix sort is stable: entries with equal indices keep their list order. Only
  // the low BitsFor(n) bits are sorted (27 instead of 64 for n = 2^26: half the
  // passes), which orders the keys correctly because SortInputKernel maps every
  // key into [0, n].
  const int end_bit = BitsFor(n);
  Index* no_keys = nullptr;
  int64_t* no_positions = nullptr;
  size_t sort_bytes = 0;
  cudaError_t err = cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, no_keys, no_keys,
                                                    no_positions, no_positions, count, 0, end_bit,
                                                    stream);
  if (err != cudaSuccess) return err;
  const size_t keys_bytes = AlignScratch(count * sizeof(Index));
  const size_t positions_bytes = AlignScratch(count * sizeof(int64_t));
  char* scratch =
      static_cast<char*>(allocate(2 * keys_bytes + 2 * positions_bytes + sort_bytes));
  if (scratch == nullptr) return cudaErrorMemoryAllocation;
  Index* list_keys = reinterpret_cast<Index*>(scratch);
  Index* keys = reinterpret_cast<Index*>(scratch + keys_bytes);
  int64_t* list_positions = reinterpret_cast<int64_t*>(scratch + 2 * keys_bytes);
  int64_t* sorted_positions =
      reinterpret_cast<int64_t*>(scratch + 2 * keys_bytes + positions_bytes);
  void* sort_scratch = scratch + 2 * keys_bytes + 2 * positions_bytes;

  const unsigned int grid = GridFor(count);
  SortInputKernel<Index><<<grid, kThreads, 0, stream>>>(indices, count, n, list_keys,
                                                        list_positions);
  err = cub::DeviceRadixSort::SortPairs(sort_scratch, sort_bytes, list_keys, keys, list_positions,
                                        sorted_positions, count, 0, end_bit, stream);
  if (err != cudaSuccess) return err;
  SumRunsKernel<T, Index><<<grid, kThreads, 0, stream>>>(values, keys, sorted_positions, count, n,
                                                         zero, DecodeWeight<T>(divisor), dense);
  return cudaGetLastError();
}

// sent[j] = x[indices[j]] for 0 <= indices[j] < n (else zero): every element
// is read before ScaleAtKernel writes any.
template <typename T, typename Index>
__global__ void GatherAtKernel(const T* __restrict__ x, const Index* __restrict__ indices,
                               int64_t count, int64_t n, T zero, T* __restrict__ sent) {
  for (int64_t j = GlobalThread(); j < count; j += GridStride()) {
    const Index i = indices[j];
    sent[j] = i >= 0 && i < n ? x[i] : zero;
  }
}

// out[indices[j]] = ScaledAt(sent[j], factor) for 0 <= indices[j] < n; sent
// is null for factor 0 (the element is cleared). An index listed twice writes
// the same value twice.
template <typename T, typename Index>
__global__ void ScaleAtKernel(const T* __restrict__ sent, const Index* __restrict__ indices,
                              int64_t count, int64_t n, T zero, Acc<T> factor, T* __restrict__ out) {
  for (int64_t j = GlobalThread(); j < count; j += GridStride()) {
    const Index i = indices[j];
    if (i >= 0 && i < n) out[i] = ScaledAt(sent == nullptr ? zero : sent[j], factor);
  }
}

// out[n] = x[n] (a device copy unless out is x), then out[i] = ScaledAt(x[i],
// factor) for every distinct i among indices[0, count) with 0 <= i < n; other
// indices are skipped. allocate and the returned error as for
// LaunchSparseDecode (scratch: count elements, for a factor other than 0 and 1).
template <typename T, typename Index, typename Allocate>
cudaError_t LaunchScaleAt(const T* x, const Index* indices, int64_t count, int64_t n, T factor,
                          T* out, Allocate&& allocate, cudaStream_t stream) {
  if (n == 0) return cudaGetLastError();
  if (out != x) {
    const cudaError_t err =
        cudaMemcpyAsync(out, x, n * sizeof(T), cudaMemcpyDeviceToDevice, stream);
    if (err != cudaSuccess) return err;
  }
  const Acc<T> f = static_cast<Acc<T>>(factor);
  if (f == static_cast<Acc<T>>(1) || count == 0) return cudaGetLastError();
  const T zero = static_cast<T>(0.0f);
  T* sent = nullptr;
  if (f != static_cast<Acc<T>>(0)) {
    sent = static_cast<T*>(allocate(count * sizeof(T)));
    if (sent == nullptr) return cudaErrorMemoryAllocation;
    GatherAtKernel<T, Index><<<GridFor(count), kThreads, 0, stream>>>(out, indices, count, n, zero,
                                                                      sent);
  }
  ScaleAtKernel<T, Index><<<GridFor(count), kThreads, 0, stream>>>(sent, indices, count, n, zero,
                                                                   f, out);
  return cudaGetLastError();
}

// keys[s] = the magnitude of sample s, as the threshold's order sees it (NaN
// counts as +Inf): element s itself when n <= num_samples (then count = n),
// else the element at SamplePosition (count = num_samples).
template <typename T>
__global__ void GatherSampleKernel(const T* __restrict__ g, int64_t n, HashParams hash,
                                   int64_t num_samples, int64_t count, Acc<T>* __restrict__ keys) {
  for (int64_t s = GlobalThread(); s < count; s += GridStride()) {
    const int64_t i = n <= num_samples ? s : SamplePosition(hash, s, num_samples, n);
    keys[s] = SampleMagnitude(AbsValue(g[i]));
  }
}

// threshold[0] = sorted[rank] cast back to T: exact, the magnitude of an element of g.
template <typename T>
__global__ void PickKernel(const Acc<T>* __restrict__ sorted, int64_t rank, T* __restrict__ threshold) {
  if (GlobalThread() == 0) threshold[0] = static_cast<T>(sorted[rank]);
}

// threshold[0] (device memory) = the k-th largest sampled magnitude of g[n],
// k clipped to the sample count (min(n, num_samples)); 0 when n == 0. The
// sample's magnitudes are sorted in descending order with CUB's radix sort,
// which orders like the CPU's comparisons (-0.0 and +0.0 are one key; NaN is
// already +Inf), so the k-th element is the CPU's k-th largest. allocate and
// the returned error as for LaunchSparseDecode.
template <typename T, typename Allocate>
cudaError_t LaunchSampledThreshold(const T* g, int64_t n, HashParams hash, int64_t num_samples,
                                   int64_t k, T* threshold, Allocate&& allocate,
                                   cudaStream_t stream) {
  const int64_t count = n < num_samples ? n : num_samples;
  if (count == 0) {
    FillKernel<T><<<1, 1, 0, stream>>>(threshold, 1, static_cast<T>(0.0f));
    return cudaGetLastError();
  }
  using Key = Acc<T>;
  cub::DoubleBuffer<Key> keys(nullptr, nullptr);
  size_t sort_bytes = 0;
  cudaError_t err = cub::DeviceRadixSort::SortKeysDescending(nullptr, sort_bytes, keys, count, 0,
                                                             static_cast<int>(sizeof(Key) * 8),
                                                             stream);
  if (err != cudaSuccess) return err;
  const size_t keys_bytes = AlignScratch(count * sizeof(Key));
  char* scratch = static_cast<char*>(allocate(2 * keys_bytes + sort_bytes));
  if (scratch == nullptr) return cudaErrorMemoryAllocation;
  keys = cub::DoubleBuffer<Key>(reinterpret_cast<Key*>(scratch),
                                reinterpret_cast<Key*>(scratch + keys_bytes));
  GatherSampleKernel<T><<<GridFor(count), kThreads, 0, stream>>>(g, n, hash, num_samples, count,
                                                                 keys.Current());
  err = cub::DeviceRadixSort::SortKeysDescending(scratch + 2 * keys_bytes, sort_bytes, keys, count,
                                                 0, static_cast<int>(sizeof(Key) * 8), stream);
  if (err != cudaSuccess) return err;
  // The sort left its output in keys.Current() (chosen on the host, at the call).
  PickKernel<T><<<1, 1, 0, stream>>>(keys.Current(), (k < count ? k : count) - 1, threshold);
  return cudaGetLastError();
}

}  // namespace cuda
}  // namespace sparse
}  // namespace tfcomp

#endif  // TFCOMP_CUSTOM_OPS_SPARSE_CC_KERNELS_SPARSE_CUDA_KERNELS_CU_H_
