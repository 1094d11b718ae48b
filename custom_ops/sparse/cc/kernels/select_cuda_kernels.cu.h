// CUDA kernels of exact threshold/top-k selection (TfcompSelectLargest) and
// their launcher, on plain pointers and a stream: no TensorFlow, no Eigen.
// Included by select_kernels.cu.cc (T = Eigen::half, Eigen::bfloat16, float,
// double) and by the standalone test cuda_test/select_core_test.cu (T = __half,
// float, double); Index is int32_t or int64_t. The order is select_core.h's
// 64-bit Rank (MagnitudeKey above the index), so the result is the CPU
// kernel's, bit for bit, on any input.
//
// The passes (n elements of x, c = capacity):
//   1. HistogramKernel: hist[Bin(key)] over the qualifying elements (shared
//      memory per block, then 64-bit integer atomics: the counts do not depend
//      on the order). One read of x. The host copies the 4096 counts back
//      (the one synchronization) and finds the boundary bin b (FindBoundary).
//   2. CollectKernel, one block per tile of kTile elements: counts each tile's
//      qualifying elements in bins above b (all of bin b too when every
//      candidate wins), and appends the ranks of bin b's (hist[b] of them, in
//      no particular order) to a buffer. One read of x.
//   3. the cutoff: the (c - above)-th largest rank among bin b's, by a radix
//      select over the buffer, 8 bits a pass from bit 51 down (the bin's 12 bits
//      are already fixed), each pass a histogram of integer atomics and a
//      one-block kernel that picks the digit; the state stays on the device.
//      Ranks are unique, so the cutoff is one element's, and the winners,
//      qualifying elements with rank >= cutoff, number exactly c. Then each
//      winner of bin b adds 1 to its tile's count (integer atomics).
//   4. an exclusive scan of the tile counts (CUB), and WriteKernel: each tile
//      writes its winners at its offset in index order (a block scan per
//      step). One read of x.
//   5. the rest of the output padded with (0, -1).
// Three streaming reads of x, plus 8 bytes per bin-b candidate (written once,
// read 8 times) and the outputs. Every count is an integer, every position a
// scan: the result does not depend on the scheduling.
#ifndef TFCOMP_CUSTOM_OPS_SPARSE_CC_KERNELS_SELECT_CUDA_KERNELS_CU_H_
#define TFCOMP_CUSTOM_OPS_SPARSE_CC_KERNELS_SELECT_CUDA_KERNELS_CU_H_

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <cub/block/block_scan.cuh>
#include <cub/device/device_scan.cuh>
#include <vector>

#include "custom_ops/common/cuda_vec.cu.h"
#include "select_core.h"
#include "sparse_core.h"

namespace tfcomp {
namespace select {
namespace cuda {

constexpr int kThreads = 256;
// Elements per block in the tile passes: a whole number of 16-byte steps of
// the block for every V in {1, 2, 4, 8, 16}, so every thread runs the same steps.
constexpr int64_t kTile = 4096;
constexpr int kDigitBits = 8;
constexpr int kDigits = 1 << kDigitBits;
constexpr int kHistogramBlocks = 1024;  // at most, in the grid-stride histogram

template <typename T>
using Acc = typename Accumulator<T>::type;

using Count = unsigned long long;  // CUDA's 64-bit atomics take unsigned long long
static_assert(sizeof(Count) == sizeof(uint64_t), "64-bit unsigned long long");

// The radix select's state: the cutoff's bits found so far (the bin's first),
// and which rank is wanted among the candidates that share them (1 = largest).
struct CutoffState {
  Count prefix;
  long long need;
};

__device__ inline int64_t GlobalThread() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ inline int64_t GridStride() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

template <typename V>
__global__ void FillKernel(V* __restrict__ out, int64_t n, V value) {
  for (int64_t i = GlobalThread(); i < n; i += GridStride()) out[i] = value;
}

// hist[Bin(key)] += 1 for every qualifying x[i] (hist zeroed before).
template <typename T, int V>
__global__ void __launch_bounds__(kThreads)
    HistogramKernel(const T* __restrict__ x, int64_t n, const T* __restrict__ threshold,
                    Count* __restrict__ hist) {
  __shared__ unsigned int local[kBins];
  for (int b = threadIdx.x; b < kBins; b += kThreads) local[b] = 0;
  __syncthreads();
  const Acc<T> t = FlushSubnormal(static_cast<Acc<T>>(*threshold));
  const int64_t packs = (n + V - 1) / V;
  for (int64_t p = GlobalThread(); p < packs; p += GridStride()) {
    const cuda_vec::Vec<T, V> v = cuda_vec::LoadVec<T, V>(x, p * V, n);
#pragma unroll
    for (int e = 0; e < V; ++e) {
      if (p * V + e >= n) continue;
      const Acc<T> a = AbsValue(v.v[e]);
      if (sparse::Selected(a, t)) atomicAdd(&local[Bin(MagnitudeKey(a))], 1u);
    }
  }
  __syncthreads();
  for (int b = threadIdx.x; b < kBins; b += kThreads) {
    if (local[b] != 0) atomicAdd(&hist[b], static_cast<Count>(local[b]));
  }
}

// Tile blockIdx.x of x: tile_counts[tile] = its qualifying elements with Bin >
// bin (>= bin when !collect); when collect, the ranks of its qualifying
// elements with Bin == bin are appended to ranks (*appended counts them).
template <typename T, int V>
__global__ void __launch_bounds__(kThreads)
    CollectKernel(const T* __restrict__ x, int64_t n, const T* __restrict__ threshold, int bin,
                  bool collect, Count* __restrict__ tile_counts, uint64_t* __restrict__ ranks,
                  Count* __restrict__ appended) {
  __shared__ unsigned int tile_count;
  if (threadIdx.x == 0) tile_count = 0;
  __syncthreads();
  const Acc<T> t = FlushSubnormal(static_cast<Acc<T>>(*threshold));
  const uint32_t floor = static_cast<uint32_t>(bin) << kBinShift;
  const uint32_t above = static_cast<uint32_t>(bin + 1) << kBinShift;  // <= 2^31
  const int64_t begin = static_cast<int64_t>(blockIdx.x) * kTile;
  const int64_t end = begin + kTile < n ? begin + kTile : n;
  const unsigned int lane = threadIdx.x % 32;
  unsigned int mine = 0;
  // The same number of steps in every thread: the warp votes below see all 32 lanes.
  for (int64_t first = begin + threadIdx.x * V; first < begin + kTile; first += kThreads * V) {
    const cuda_vec::Vec<T, V> v = cuda_vec::LoadVec<T, V>(x, first, end);
#pragma unroll
    for (int e = 0; e < V; ++e) {
      const int64_t i = first + e;
      bool in_bin = false;
      uint32_t key = 0;
      if (i < end) {
        const Acc<T> a = AbsValue(v.v[e]);
        key = MagnitudeKey(a);
        if (sparse::Selected(a, t) && key >= floor) {
          if (key >= above || !collect) {
            ++mine;
          } else {
            in_bin = true;
          }
        }
      }
      if (collect) {
        const unsigned int vote = __ballot_sync(0xffffffffu, in_bin);
        if (vote != 0) {
          const int leader = __ffs(vote) - 1;
          Count base = 0;
          if (static_cast<int>(lane) == leader) base = atomicAdd(appended, static_cast<Count>(__popc(vote)));
          base = __shfl_sync(0xffffffffu, base, leader);
          if (in_bin) ranks[base + __popc(vote & ((1u << lane) - 1))] = Rank(key, i);
        }
      }
    }
  }
  if (mine != 0) atomicAdd(&tile_count, mine);
  __syncthreads();
  if (threadIdx.x == 0) tile_counts[blockIdx.x] = tile_count;
}

__global__ void SetCutoffKernel(CutoffState* state, Count prefix, long long need) {
  if (GlobalThread() == 0) *state = CutoffState{prefix, need};
}

// digits[(r >> shift) % 2^width] += 1 for each rank r that shares the state's
// prefix above bit shift + width (width <= kDigitBits).
__global__ void __launch_bounds__(kThreads)
    DigitHistogramKernel(const uint64_t* __restrict__ ranks, int64_t count,
                         const CutoffState* __restrict__ state, int shift, int width,
                         Count* __restrict__ digits) {
  __shared__ unsigned int local[kDigits];
  for (int d = threadIdx.x; d < kDigits; d += kThreads) local[d] = 0;
  __syncthreads();
  const int high = shift + width;
  const uint64_t prefix = state->prefix >> high;
  const uint64_t mask = (uint64_t{1} << width) - 1;
  for (int64_t j = GlobalThread(); j < count; j += GridStride()) {
    const uint64_t r = ranks[j];
    if ((r >> high) == prefix) atomicAdd(&local[(r >> shift) & mask], 1u);
  }
  __syncthreads();
  for (int d = threadIdx.x; d < kDigits; d += kThreads) {
    if (local[d] != 0) atomicAdd(&digits[d], static_cast<Count>(local[d]));
  }
}

// One block of kDigits threads: the digit that holds the need-th largest,
// into the state's prefix; the histogram zeroed for the next pass.
__global__ void PickDigitKernel(Count* __restrict__ digits, CutoffState* __restrict__ state,
                                int shift) {
  __shared__ Count local[kDigits];
  local[threadIdx.x] = digits[threadIdx.x];
  digits[threadIdx.x] = 0;
  __syncthreads();
  if (threadIdx.x != 0) return;
  long long need = state->need;
  for (int d = kDigits - 1; d >= 0; --d) {
    const long long here = static_cast<long long>(local[d]);
    if (need <= here) {
      state->prefix |= static_cast<Count>(d) << shift;
      state->need = need;
      return;
    }
    need -= here;
  }
}

// tile_counts[tile of i] += 1 for each collected rank (index i) at or above the cutoff.
__global__ void CountBinWinnersKernel(const uint64_t* __restrict__ ranks, int64_t count,
                                      const CutoffState* __restrict__ state,
                                      Count* __restrict__ tile_counts) {
  const uint64_t cutoff = state->prefix;
  for (int64_t j = GlobalThread(); j < count; j += GridStride()) {
    const uint64_t r = ranks[j];
    if (r >= cutoff) atomicAdd(&tile_counts[RankIndex(r) / kTile], Count{1});
  }
}

// Tile blockIdx.x writes its winners (qualifying, rank >= cutoff) in index
// order from offsets[tile] on: per step, a block scan of each thread's count.
template <typename T, typename Index, int V>
__global__ void __launch_bounds__(kThreads)
    WriteKernel(const T* __restrict__ x, int64_t n, const T* __restrict__ threshold,
                const CutoffState* __restrict__ state, const Count* __restrict__ offsets,
                int64_t capacity, T* __restrict__ values, Index* __restrict__ indices) {
  using Scan = cub::BlockScan<unsigned int, kThreads>;
  __shared__ typename Scan::TempStorage scan_storage;
  const Acc<T> t = FlushSubnormal(static_cast<Acc<T>>(*threshold));
  const uint64_t cutoff = state->prefix;
  const int64_t begin = static_cast<int64_t>(blockIdx.x) * kTile;
  const int64_t end = begin + kTile < n ? begin + kTile : n;
  int64_t offset = static_cast<int64_t>(offsets[blockIdx.x]);
  for (int64_t first = begin + threadIdx.x * V; first < begin + kTile; first += kThreads * V) {
    const cuda_vec::Vec<T, V> v = cuda_vec::LoadVec<T, V>(x, first, end);
    unsigned int wins = 0;  // bit e: element first + e wins
#pragma unroll
    for (int e = 0; e < V; ++e) {
      const int64_t i = first + e;
      if (i >= end) continue;
      const Acc<T> a = AbsValue(v.v[e]);
      if (sparse::Selected(a, t) && Rank(MagnitudeKey(a), i) >= cutoff) wins |= 1u << e;
    }
    unsigned int position = 0;
    unsigned int step_total = 0;
    Scan(scan_storage).ExclusiveSum(static_cast<unsigned int>(__popc(wins)), position, step_total);
    __syncthreads();  // scan_storage is reused by the next step
    while (wins != 0) {
      const int e = __ffs(wins) - 1;
      wins &= wins - 1;
      const int64_t j = offset + position++;
      if (j < capacity) {
        indices[j] = static_cast<Index>(first + e);
        values[j] = v.v[e];
      }
    }
    offset += step_total;
  }
}

inline size_t AlignScratch(size_t bytes) { return (bytes + 255) / 256 * 256; }

template <typename T>
using Vec16 = std::integral_constant<int, cuda_vec::kVec<T>>;

// values[capacity], indices[capacity] = the capacity largest qualifying
// elements of x[n] (|x| >= *threshold, or NaN) by select_core.h's Rank, in
// index order, padded with (0, -1); threshold is one element in device
// memory; n <= kMaxSelectElements. allocate(bytes) returns device scratch that
// stays valid for the work queued on stream, or null on failure; it is called
// twice, and the first buffer (the histogram) is dead once the host has its
// copy, so the second may reuse it. Synchronizes with the stream once
// (after the histogram: the host sizes the candidate buffer). Returns the
// first CUDA error.
template <typename T, typename Index, typename Allocate>
cudaError_t LaunchSelectLargest(const T* x, int64_t n, const T* threshold, int64_t capacity,
                                T* values, Index* indices, Allocate&& allocate,
                                cudaStream_t stream) {
  if (capacity <= 0) return cudaGetLastError();
  const auto pad = [&](int64_t from) {
    const int64_t count = capacity - from;
    if (count <= 0) return;
    const int64_t blocks64 = (count + kThreads - 1) / kThreads;
    const unsigned int blocks = static_cast<unsigned int>(blocks64 < 65536 ? blocks64 : 65536);
    FillKernel<T><<<blocks, kThreads, 0, stream>>>(values + from, count, static_cast<T>(0.0f));
    FillKernel<Index><<<blocks, kThreads, 0, stream>>>(indices + from, count, Index(-1));
  };
  if (n == 0) {
    pad(0);
    return cudaGetLastError();
  }
  const bool aligned = cuda_vec::Aligned16(x);
  // Runs launch(V) with the vector width for x: 16 bytes where x is aligned, else 1.
  const auto with_width = [&](auto launch) {
    if (aligned) {
      launch(Vec16<T>{});
    } else {
      launch(std::integral_constant<int, 1>{});
    }
  };

  // 1. The histogram, then the boundary on the host.
  Count* hist = static_cast<Count*>(allocate(kBins * sizeof(Count)));
  if (hist == nullptr) return cudaErrorMemoryAllocation;
  cudaError_t err = cudaMemsetAsync(hist, 0, kBins * sizeof(Count), stream);
  if (err != cudaSuccess) return err;
  with_width([&](auto width) {
    constexpr int V = decltype(width)::value;
    const int64_t packs = (n + V - 1) / V;
    const int64_t blocks = (packs + kThreads - 1) / kThreads;
    HistogramKernel<T, V>
        <<<static_cast<unsigned int>(blocks < kHistogramBlocks ? blocks : kHistogramBlocks),
           kThreads, 0, stream>>>(x, n, threshold, hist);
  });
  std::vector<Count> host_hist(kBins);
  err = cudaMemcpyAsync(host_hist.data(), hist, kBins * sizeof(Count), cudaMemcpyDeviceToHost,
                        stream);
  if (err != cudaSuccess) return err;
  err = cudaStreamSynchronize(stream);
  if (err != cudaSuccess) return err;
  const Boundary boundary = FindBoundary(host_hist.data(), capacity);
  if (boundary.candidates == 0) {
    pad(0);
    return cudaGetLastError();
  }
  const bool collect = !boundary.all;
  const int64_t in_bin = collect ? static_cast<int64_t>(host_hist[boundary.bin]) : 0;
  const int64_t winners = boundary.all ? boundary.candidates : capacity;

  // Scratch: tile counts, their offsets, the state, the digit histogram, bin
  // b's ranks, the appended counter and CUB's scan.
  const int64_t tiles = (n + kTile - 1) / kTile;
  size_t scan_bytes = 0;
  err = cub::DeviceScan::ExclusiveSum(nullptr, scan_bytes, static_cast<Count*>(nullptr),
                                      static_cast<Count*>(nullptr), static_cast<int>(tiles), stream);
  if (err != cudaSuccess) return err;
  const size_t tiles_bytes = AlignScratch(tiles * sizeof(Count));
  const size_t small_bytes = AlignScratch(sizeof(CutoffState) + (kDigits + 1) * sizeof(Count));
  const size_t ranks_bytes = AlignScratch((in_bin > 0 ? in_bin : 1) * sizeof(uint64_t));
  char* scratch =
      static_cast<char*>(allocate(2 * tiles_bytes + small_bytes + ranks_bytes + scan_bytes));
  if (scratch == nullptr) return cudaErrorMemoryAllocation;
  Count* tile_counts = reinterpret_cast<Count*>(scratch);
  Count* offsets = reinterpret_cast<Count*>(scratch + tiles_bytes);
  CutoffState* state = reinterpret_cast<CutoffState*>(scratch + 2 * tiles_bytes);
  Count* digits = reinterpret_cast<Count*>(scratch + 2 * tiles_bytes + sizeof(CutoffState));
  Count* appended = digits + kDigits;
  uint64_t* ranks = reinterpret_cast<uint64_t*>(scratch + 2 * tiles_bytes + small_bytes);
  void* scan_scratch = scratch + 2 * tiles_bytes + small_bytes + ranks_bytes;
  err = cudaMemsetAsync(digits, 0, (kDigits + 1) * sizeof(Count), stream);
  if (err != cudaSuccess) return err;

  // 2. Tile counts and bin b's ranks.
  with_width([&](auto width) {
    constexpr int V = decltype(width)::value;
    CollectKernel<T, V><<<static_cast<unsigned int>(tiles), kThreads, 0, stream>>>(
        x, n, threshold, boundary.bin, collect, tile_counts, ranks, appended);
  });

  // 3. The cutoff: bin b's floor when every candidate wins, else the radix select.
  const Count floor_rank = Rank(static_cast<uint32_t>(boundary.bin) << kBinShift, 0);
  SetCutoffKernel<<<1, 1, 0, stream>>>(state, floor_rank,
                                       static_cast<long long>(capacity - boundary.above));
  if (collect) {
    const int64_t blocks64 = (in_bin + kThreads - 1) / kThreads;
    const unsigned int blocks = static_cast<unsigned int>(blocks64 < 1024 ? blocks64 : 1024);
    for (int top = kBinShift + kIndexBits; top > 0;) {
      const int shift = top > kDigitBits ? top - kDigitBits : 0;
      DigitHistogramKernel<<<blocks, kThreads, 0, stream>>>(ranks, in_bin, state, shift,
                                                           top - shift, digits);
      PickDigitKernel<<<1, kDigits, 0, stream>>>(digits, state, shift);
      top = shift;
    }
    CountBinWinnersKernel<<<blocks, kThreads, 0, stream>>>(ranks, in_bin, state, tile_counts);
  }

  // 4. Offsets, and the winners in index order.
  err = cub::DeviceScan::ExclusiveSum(scan_scratch, scan_bytes, tile_counts, offsets,
                                      static_cast<int>(tiles), stream);
  if (err != cudaSuccess) return err;
  with_width([&](auto width) {
    constexpr int V = decltype(width)::value;
    WriteKernel<T, Index, V><<<static_cast<unsigned int>(tiles), kThreads, 0, stream>>>(
        x, n, threshold, state, offsets, capacity, values, indices);
  });

  // 5. Padding.
  pad(winners);
  return cudaGetLastError();
}

}  // namespace cuda
}  // namespace select
}  // namespace tfcomp

#endif  // TFCOMP_CUSTOM_OPS_SPARSE_CC_KERNELS_SELECT_CUDA_KERNELS_CU_H_
