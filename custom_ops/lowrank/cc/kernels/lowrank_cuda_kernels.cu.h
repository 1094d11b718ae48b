// CUDA kernels of the low-rank residual, product, compensate and project ops and their launchers, on plain pointers
// and a stream: no TensorFlow, no Eigen. Included by lowrank_kernels.cu.cc (T =
// Eigen::half, Eigen::bfloat16, float, double) and by the standalone test
// cuda_test/lowrank_core_test.cu (T = __half, float, double). Every element is
// evaluated as lowrank_core.h says (ResidualStep for j in order), so the
// results match the CPU kernels bit for bit (subnormals aside: the CPU flushes
// them, the GPU keeps them).
#ifndef TFCOMP_CUSTOM_OPS_LOWRANK_CC_KERNELS_LOWRANK_CUDA_KERNELS_CU_H_
#define TFCOMP_CUSTOM_OPS_LOWRANK_CC_KERNELS_LOWRANK_CUDA_KERNELS_CU_H_

#include <cuda_runtime.h>

#include <cstdint>

#include "lowrank_core.h"

namespace tfcomp {
namespace lowrank {
namespace cuda {

// A block computes a tile of kTileRows x kTileCols elements with kTileCols x
// kBlockRows threads, each thread kTileRows / kBlockRows rows of one column. The
// rank is walked in chunks of kRankChunk: the chunk of p (tile rows) and of q
// (tile columns) is staged in shared memory, so each value of q read from
// global memory serves kTileRows elements and each value of p kTileCols.
// Consecutive threads take consecutive columns: m and the residual move in
// coalesced rows. product: the residual of a zero m with -p (p q^T; m, which
// may be null, is not read).
constexpr int kTileCols = 32;
constexpr int kBlockRows = 8;
constexpr int kTileRows = 64;
constexpr int kRowsPerThread = kTileRows / kBlockRows;
constexpr int kRankChunk = 32;
constexpr int64_t kMaxGridRows = 65535;  // CUDA's limit on gridDim.y

template <typename T>
using Acc = typename Accumulator<T>::type;

template <typename T>
__global__ void __launch_bounds__(kTileCols* kBlockRows)
    LowRankResidualKernel(const T* m, const T* __restrict__ p,
                          const T* __restrict__ q, int64_t n, int64_t k, int64_t r,
                          T* out,  // may be m: each element is read before it is written
                          bool product) {
  __shared__ Acc<T> q_tile[kRankChunk][kTileCols + 1];  // [j][col], padded against bank conflicts
  __shared__ Acc<T> p_tile[kTileRows][kRankChunk + 1];  // [row][j]
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int thread = ty * kTileCols + tx;
  const int64_t col0 = static_cast<int64_t>(blockIdx.x) * kTileCols;
  const int64_t c = col0 + tx;
  for (int64_t row0 = static_cast<int64_t>(blockIdx.y) * kTileRows; row0 < n;
       row0 += static_cast<int64_t>(gridDim.y) * kTileRows) {
    Acc<T> acc[kRowsPerThread];
#pragma unroll
    for (int u = 0; u < kRowsPerThread; ++u) {
      const int64_t i = row0 + ty + u * kBlockRows;
      acc[u] = i < n && c < k && !product ? static_cast<Acc<T>>(m[i * k + c]) : Acc<T>(0);
    }
    for (int64_t j0 = 0; j0 < r; j0 += kRankChunk) {
      // Only the chunk's own columns are staged: at rank 1, 1/32 of a full chunk.
      const int chunk = r - j0 < kRankChunk ? static_cast<int>(r - j0) : kRankChunk;
      __syncthreads();  // the previous chunk is used up
      // Consecutive threads read consecutive j of one row of q (or p).
      for (int e = thread; e < chunk * kTileCols; e += kTileCols * kBlockRows) {
        const int jj = e % chunk, cc = e / chunk;
        const int64_t col = col0 + cc;
        q_tile[jj][cc] = col < k ? static_cast<Acc<T>>(q[col * r + j0 + jj]) : Acc<T>(0);
      }
      for (int e = thread; e < chunk * kTileRows; e += kTileCols * kBlockRows) {
        const int jj = e % chunk, rr = e / chunk;
        const int64_t row = row0 + rr;
        const Acc<T> value = row < n ? static_cast<Acc<T>>(p[row * r + j0 + jj]) : Acc<T>(0);
        p_tile[rr][jj] = product ? -value : value;
      }
      __syncthreads();
      for (int jj = 0; jj < chunk; ++jj) {
        const Acc<T> qv = q_tile[jj][tx];
#pragma unroll
        for (int u = 0; u < kRowsPerThread; ++u) {
          acc[u] = ResidualStep(acc[u], p_tile[ty + u * kBlockRows][jj], qv);
        }
      }
    }
#pragma unroll
    for (int u = 0; u < kRowsPerThread; ++u) {
      const int64_t i = row0 + ty + u * kBlockRows;
      if (i < n && c < k) out[i * k + c] = static_cast<T>(acc[u]);
    }
    __syncthreads();  // the next row tile overwrites p_tile
  }
}

template <typename T>
cudaError_t LaunchLowRank(const T* m, const T* p, const T* q, int64_t n, int64_t k, int64_t r,
                          T* out, bool product, cudaStream_t stream) {
  if (n > 0 && k > 0) {
    const int64_t col_tiles = (k + kTileCols - 1) / kTileCols;
    const int64_t row_tiles = (n + kTileRows - 1) / kTileRows;
    const dim3 grid(static_cast<unsigned int>(col_tiles),
                    static_cast<unsigned int>(row_tiles < kMaxGridRows ? row_tiles : kMaxGridRows));
    LowRankResidualKernel<T><<<grid, dim3(kTileCols, kBlockRows), 0, stream>>>(m, p, q, n, k, r,
                                                                               out, product);
  }
  return cudaGetLastError();
}

// out[n, k] = m[n, k] - p[n, r] q[k, r]^T on the stream; out may be m.
// Returns the launch error.
template <typename T>
cudaError_t LaunchLowRankResidual(const T* m, const T* p, const T* q, int64_t n, int64_t k,
                                  int64_t r, T* out, cudaStream_t stream) {
  return LaunchLowRank(m, p, q, n, k, r, out, /*product=*/false, stream);
}

// out[n, k] = p[n, r] q[k, r]^T on the stream (ProductElement). Returns the launch error.
template <typename T>
cudaError_t LaunchLowRankProduct(const T* p, const T* q, int64_t n, int64_t k, int64_t r, T* out,
                                 cudaStream_t stream) {
  return LaunchLowRank<T>(nullptr, p, q, n, k, r, out, /*product=*/true, stream);
}

// The compensate op (lowrank_core.h): a block is kCompensateRows rows of
// kDotLanes threads, thread l of a row walking the row's columns l, l + 16, ...
// (lane l of the reference): it writes m there and keeps the sums of up to
// kCompensateRanks ranks, which the row's 16 threads then add by shuffles in
// the reference's order (lane l takes lane l + 8, then l + 4, l + 2, l + 1).
// More ranks take further passes over the row, which only the first writes.
constexpr int kCompensateRows = 16;
constexpr int kCompensateRanks = 8;

template <typename T>
__global__ void __launch_bounds__(kCompensateRows* kDotLanes)
    LowRankCompensateKernel(const T* __restrict__ g, const T* __restrict__ e,
                            const T* __restrict__ q, int64_t n, int64_t k, int64_t r,
                            T* __restrict__ m, T* __restrict__ p) {
  const int lane = threadIdx.x;
  // The 16 threads of a row: half of a warp, which rows past n leave together.
  const unsigned mask = 0xffffu << (16 * (threadIdx.y & 1));
  const int64_t padded = (k + kDotLanes - 1) / kDotLanes * kDotLanes;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kCompensateRows + threadIdx.y; i < n;
       i += static_cast<int64_t>(gridDim.x) * kCompensateRows) {
    for (int64_t j0 = 0; j0 < r || j0 == 0; j0 += kCompensateRanks) {  // r == 0 still writes m
      const int ranks = r - j0 < kCompensateRanks ? static_cast<int>(r - j0) : kCompensateRanks;
      Acc<T> s[kCompensateRanks];
#pragma unroll
      for (int a = 0; a < kCompensateRanks; ++a) s[a] = Acc<T>(0);
      for (int64_t c = lane; c < padded; c += kDotLanes) {
        Acc<T> mv = Acc<T>(0);
        if (c < k) {
          const T value = CompensatedElement(g[i * k + c], e[i * k + c]);
          if (j0 == 0) m[i * k + c] = value;
          mv = static_cast<Acc<T>>(value);
        }
#pragma unroll
        for (int a = 0; a < kCompensateRanks; ++a) {
          if (a < ranks) {
            const Acc<T> qv = c < k ? static_cast<Acc<T>>(q[c * r + j0 + a]) : Acc<T>(0);
            s[a] = FusedMulAdd(mv, qv, s[a]);
          }
        }
      }
#pragma unroll
      for (int a = 0; a < kCompensateRanks; ++a) {
        if (a < ranks) {
          Acc<T> v = s[a];
          for (int offset = kDotLanes / 2; offset >= 1; offset /= 2) {
            v = v + __shfl_down_sync(mask, v, offset, kDotLanes);
          }
          if (lane == 0) p[i * r + j0 + a] = static_cast<T>(v);
        }
      }
      if (r == 0) break;
    }
  }
}

// m[n, k] = g + e and p[n, r] = m q[k, r] on the stream (CompensatedElement,
// CompensatedProductElement); m is neither g nor e. Returns the launch error.
template <typename T>
cudaError_t LaunchLowRankCompensate(const T* g, const T* e, const T* q, int64_t n, int64_t k,
                                    int64_t r, T* m, T* p, cudaStream_t stream) {
  if (n > 0) {
    const int64_t blocks = (n + kCompensateRows - 1) / kCompensateRows;
    const unsigned int grid = static_cast<unsigned int>(blocks < (int64_t{1} << 30) ? blocks : (int64_t{1} << 30));
    LowRankCompensateKernel<T><<<grid, dim3(kDotLanes, kCompensateRows), 0, stream>>>(g, e, q, n, k, r,
                                                                                      m, p);
  }
  return cudaGetLastError();
}

// The project op (lowrank_core.h): a thread per element (c, j) of q, walking the
// rows block by block in order; consecutive threads take consecutive columns, so
// each row of m is read in coalesced runs (and again, from cache, per rank).
constexpr int kProjectThreads = 256;

template <typename T>
__global__ void __launch_bounds__(kProjectThreads)
    LowRankProjectKernel(const T* __restrict__ m, const T* __restrict__ p, int64_t n, int64_t k,
                         int64_t r, T* __restrict__ q) {
  for (int64_t c = static_cast<int64_t>(blockIdx.x) * kProjectThreads + threadIdx.x; c < k;
       c += static_cast<int64_t>(gridDim.x) * kProjectThreads) {
    for (int64_t j = blockIdx.y; j < r; j += gridDim.y) {
      Acc<T> total = Acc<T>(0);
      for (int64_t first = 0; first < n; first += kProjectRows) {
        const int64_t last = first + kProjectRows < n ? first + kProjectRows : n;
        Acc<T> s = Acc<T>(0);
        for (int64_t i = first; i < last; ++i) {
          s = FusedMulAdd(static_cast<Acc<T>>(m[i * k + c]), static_cast<Acc<T>>(p[i * r + j]), s);
        }
        total = first == 0 ? s : total + s;
      }
      q[c * r + j] = static_cast<T>(total);
    }
  }
}

// q[k, r] = m[n, k]^T p[n, r] on the stream (ProjectElement). Returns the launch error.
template <typename T>
cudaError_t LaunchLowRankProject(const T* m, const T* p, int64_t n, int64_t k, int64_t r, T* q,
                                 cudaStream_t stream) {
  if (k > 0 && r > 0) {
    const int64_t col_blocks = (k + kProjectThreads - 1) / kProjectThreads;
    const dim3 grid(static_cast<unsigned int>(col_blocks < (int64_t{1} << 30) ? col_blocks : (int64_t{1} << 30)),
                    static_cast<unsigned int>(r < kMaxGridRows ? r : kMaxGridRows));
    LowRankProjectKernel<T><<<grid, kProjectThreads, 0, stream>>>(m, p, n, k, r, q);
  }
  return cudaGetLastError();
}

}  // namespace cuda
}  // namespace lowrank
}  // namespace tfcomp

#endif  // TFCOMP_CUSTOM_OPS_LOWRANK_CC_KERNELS_LOWRANK_CUDA_KERNELS_CU_H_
