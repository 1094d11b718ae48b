// CUDA kernels of the sign-packing ops and their launchers, on plain pointers
// and a stream: no TensorFlow, no Eigen. Included by sign_kernels.cu.cc (T =
// Eigen::half, Eigen::bfloat16, float, double) and by the standalone test
// cuda_test/sign_core_test.cu (T = __half, float, double). The per-element
// logic is sign_core.h's, as on the CPU.
#ifndef TFCOMP_CUSTOM_OPS_SIGN_CC_KERNELS_SIGN_CUDA_KERNELS_CU_H_
#define TFCOMP_CUSTOM_OPS_SIGN_CC_KERNELS_SIGN_CUDA_KERNELS_CU_H_

#include <cuda_runtime.h>

#include <cstdint>

#include "custom_ops/common/cuda_vec.cu.h"
#include "sign_core.h"

namespace tfcomp {
namespace sign {
namespace cuda {

// One CUDA block packs one scale block; each of its threads handles one element
// of every kPackThreads-element stripe. 32 consecutive elements sit in one warp,
// so a ballot forms their word.
constexpr int kPackThreads = 256;
constexpr int kFinalizeThreads = 256;
constexpr int kElementThreads = 256;
static_assert(kScaleBlockElements % kPackThreads == 0, "a stripe must not cross scale blocks");

template <typename T>
using Acc = typename Accumulator<T>::type;
using cuda_vec::LoadVec;
using cuda_vec::StoreVec;
using cuda_vec::Vec;

// Adds and multiplies that nvcc may not contract into an FMA, so the GPU
// rounds as the CPU does.
__device__ inline float AddRn(float a, float b) { return __fadd_rn(a, b); }
__device__ inline double AddRn(double a, double b) { return __dadd_rn(a, b); }
__device__ inline float MulRn(float a, float b) { return __fmul_rn(a, b); }
__device__ inline double MulRn(double a, double b) { return __dmul_rn(a, b); }

// Sums v over the block in a fixed order (shuffles, then warps in order), so the
// result depends only on the inputs. Thread 0 gets the total.
template <typename V, int kThreads>
__device__ V BlockSum(V v) {
  __shared__ V warp_sums[kThreads / 32];
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = v;
  __syncthreads();
  V total = 0;
  if (threadIdx.x == 0) {
    for (int w = 0; w < kThreads / 32; ++w) total += warp_sums[w];
  }
  return total;
}

// Grid: NumScaleBlocks(n) blocks of kPackThreads. Writes the words of scale
// block blockIdx.x and the sum of |x| over it to partials[blockIdx.x]. Each
// thread reads V consecutive elements at once (x must then be aligned to
// V * sizeof(T)), so one word is made by 32 / V lanes, whose bits are OR-ed
// together with shuffles.
template <typename T, int V>
__global__ void __launch_bounds__(kPackThreads)
    SignPackKernel(const T* __restrict__ x, int64_t n, uint32_t zero_bit,
                   uint32_t* __restrict__ words, Acc<T>* __restrict__ partials) {
  static_assert(V >= 1 && V <= 32 && 32 % V == 0, "a word must be made by whole lanes");
  constexpr int kLanesPerWord = 32 / V;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kScaleBlockElements;
  const int64_t count = n - first < kScaleBlockElements ? n - first : kScaleBlockElements;
  const int lane_in_word = threadIdx.x % kLanesPerWord;
  Acc<T> sum = 0;
  // The loop bound is the same for the whole block, so every lane reaches the shuffles.
  for (int64_t stripe = 0; stripe < count; stripe += kPackThreads * V) {
    const int64_t i = stripe + static_cast<int64_t>(threadIdx.x) * V;
    uint32_t bits = 0;
    if (i < count) {
      const Vec<T, V> values = LoadVec<T, V>(x + first, i, count);
#pragma unroll
      for (int e = 0; e < V; ++e) {
        if (i + e < count) {  // padding past n gives 0 bits and adds nothing
          bits |= SignBit(values.v[e], zero_bit) << e;
          sum += AbsValue(values.v[e]);
        }
      }
    }
    uint32_t word = bits << (lane_in_word * V);
#pragma unroll
    for (int offset = 1; offset < kLanesPerWord; offset *= 2) {
      word |= __shfl_xor_sync(0xffffffffu, word, offset);
    }
    const int64_t word_first = i - lane_in_word * V;
    if (lane_in_word == 0 && word_first < count) words[(first + word_first) / kBitsPerWord] = word;
  }
  sum = BlockSum<Acc<T>, kPackThreads>(sum);
  if (threadIdx.x == 0) partials[blockIdx.x] = sum;
}

// One block: scale = (sum of partials[0, num_partials) in double) / n, 0 when
// n == 0. Thread t sums a contiguous run in order, then thread 0 sums the runs
// in order: the result depends on n only, never on timing.
template <typename T>
__global__ void __launch_bounds__(kFinalizeThreads)
    SignScaleKernel(const Acc<T>* __restrict__ partials, int64_t num_partials, int64_t n,
                    T* __restrict__ scale) {
  __shared__ double run_sums[kFinalizeThreads];
  const int64_t per_thread = (num_partials + kFinalizeThreads - 1) / kFinalizeThreads;
  const int64_t begin = threadIdx.x * per_thread;
  const int64_t end = begin + per_thread < num_partials ? begin + per_thread : num_partials;
  double run = 0;
  for (int64_t p = begin; p < end; ++p) run += static_cast<double>(partials[p]);
  run_sums[threadIdx.x] = run;
  __syncthreads();
  if (threadIdx.x == 0) {
    double total = 0;
    for (int t = 0; t < kFinalizeThreads; ++t) total += run_sums[t];
    // Through the accumulator type, as the CPU's static_cast<Eigen::half>(double) does.
    *scale = static_cast<T>(static_cast<Acc<T>>(n > 0 ? total / static_cast<double>(n) : 0.0));
  }
}

// Pass 1 of the EF-sign pack. Grid: NumScaleBlocks(n) blocks of kPackThreads.
// partials[blockIdx.x] = the sum of |g + e| over scale block blockIdx.x, in
// SignPackKernel's order (each thread its V elements per stripe, then
// BlockSum), so the scale is sign_pack's scale of g + e on this device.
template <typename T, int V>
__global__ void __launch_bounds__(kPackThreads)
    SignEfSumKernel(const T* __restrict__ g, const T* __restrict__ e, int64_t n,
                    Acc<T>* __restrict__ partials) {
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kScaleBlockElements;
  const int64_t count = n - first < kScaleBlockElements ? n - first : kScaleBlockElements;
  Acc<T> sum = 0;
  for (int64_t stripe = 0; stripe < count; stripe += kPackThreads * V) {
    const int64_t i = stripe + static_cast<int64_t>(threadIdx.x) * V;
    if (i < count) {
      const Vec<T, V> gv = LoadVec<T, V>(g + first, i, count);
      const Vec<T, V> ev = LoadVec<T, V>(e + first, i, count);
#pragma unroll
      for (int k = 0; k < V; ++k) {
        if (i + k < count) sum += AbsValue(Corrected(gv.v[k], ev.v[k]));
      }
    }
  }
  sum = BlockSum<Acc<T>, kPackThreads>(sum);
  if (threadIdx.x == 0) partials[blockIdx.x] = sum;
}

// Pass 2 of the EF-sign pack, after SignScaleKernel wrote *scale: the words of
// p = g + e (+-0 as zero_bit) and residual = p - (+-scale), made as
// SignPackKernel makes its words. Grid: NumScaleBlocks(n) blocks.
template <typename T, int V>
__global__ void __launch_bounds__(kPackThreads)
    SignEfPackKernel(const T* __restrict__ g, const T* __restrict__ e, int64_t n,
                     uint32_t zero_bit, const T* __restrict__ scale,
                     uint32_t* __restrict__ words, T* __restrict__ residual) {
  constexpr int kLanesPerWord = 32 / V;
  const T s = *scale;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kScaleBlockElements;
  const int64_t count = n - first < kScaleBlockElements ? n - first : kScaleBlockElements;
  const int lane_in_word = threadIdx.x % kLanesPerWord;
  for (int64_t stripe = 0; stripe < count; stripe += kPackThreads * V) {
    const int64_t i = stripe + static_cast<int64_t>(threadIdx.x) * V;
    uint32_t bits = 0;
    if (i < count) {
      const Vec<T, V> gv = LoadVec<T, V>(g + first, i, count);
      const Vec<T, V> ev = LoadVec<T, V>(e + first, i, count);
      Vec<T, V> out;
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const T p = Corrected(gv.v[k], ev.v[k]);
        const uint32_t bit = SignBit(p, zero_bit);
        out.v[k] = Residual(p, bit, s);
        if (i + k < count) bits |= bit << k;
      }
      StoreVec<T, V>(residual + first, i, count, out);
    }
    uint32_t word = bits << (lane_in_word * V);
#pragma unroll
    for (int offset = 1; offset < kLanesPerWord; offset *= 2) {
      word |= __shfl_xor_sync(0xffffffffu, word, offset);
    }
    const int64_t word_first = i - lane_in_word * V;
    if (lane_in_word == 0 && word_first < count) words[(first + word_first) / kBitsPerWord] = word;
  }
}

// Thread t sums out[t V, t V + V): each worker's word read once (V divides 32)
// serves V elements; the terms are added in worker order from 0, then times
// weight, as on the CPU.
template <typename T, int V>
__global__ void SignScaledSumKernel(const uint32_t* __restrict__ words,
                                    const T* __restrict__ scales, int64_t k, int64_t num_words,
                                    int64_t n, Acc<T> weight, T* __restrict__ out) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t packs = (n + V - 1) / V;
  for (int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < packs;
       p += stride) {
    const int64_t i = p * V;
    const int64_t w = i / kBitsPerWord;
    const int bit0 = static_cast<int>(i % kBitsPerWord);
    Acc<T> acc[V];
#pragma unroll
    for (int e = 0; e < V; ++e) acc[e] = 0;
    for (int64_t r = 0; r < k; ++r) {
      const uint32_t word = words[r * num_words + w];
      const Acc<T> s = static_cast<Acc<T>>(scales[r]);
#pragma unroll
      for (int e = 0; e < V; ++e) acc[e] = AddRn(acc[e], ScaledSign(word, bit0 + e, s));
    }
    Vec<T, V> values;
#pragma unroll
    for (int e = 0; e < V; ++e) values.v[e] = static_cast<T>(MulRn(acc[e], weight));
    StoreVec<T, V>(out, i, n, values);
  }
}

// Thread t writes out[t V, t V + V) with one store (out aligned to V * sizeof(T)).
template <typename T, int V>
__global__ void SignUnpackKernel(const uint32_t* __restrict__ words, const T* __restrict__ scale,
                                 int64_t n, T* __restrict__ out) {
  const T s = *scale;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t packs = (n + V - 1) / V;
  for (int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < packs;
       p += stride) {
    const int64_t i = p * V;
    const uint32_t word = words[i / kBitsPerWord];  // V divides 32: one word per pack
    Vec<T, V> values;
#pragma unroll
    for (int e = 0; e < V; ++e) {
      values.v[e] = UnpackValue(word, static_cast<int>((i + e) % kBitsPerWord), s);
    }
    StoreVec<T, V>(out, i, n, values);
  }
}

// Thread t votes on out[t V, t V + V): one read of each worker's word (V
// divides 32) serves V elements, and one store writes them.
template <typename T, int V>
__global__ void SignMajorityKernel(const uint32_t* __restrict__ words, int64_t k, int64_t num_words,
                                   int64_t n, T* __restrict__ out) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t packs = (n + V - 1) / V;
  for (int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < packs;
       p += stride) {
    const int64_t i = p * V;
    const int64_t w = i / kBitsPerWord;
    const int bit0 = static_cast<int>(i % kBitsPerWord);
    int64_t positives[V] = {};
    for (int64_t r = 0; r < k; ++r) {
      const uint32_t word = words[r * num_words + w];
#pragma unroll
      for (int e = 0; e < V; ++e) positives[e] += BitOf(word, bit0 + e);
    }
    Vec<T, V> values;
#pragma unroll
    for (int e = 0; e < V; ++e) {
      values.v[e] = static_cast<T>(static_cast<float>(MajorityVote(positives[e], k)));
    }
    StoreVec<T, V>(out, i, n, values);
  }
}

// Grid for the grid-stride loops: enough blocks to cover n, capped well below
// CUDA's limit (the loop covers the rest).
inline unsigned int ElementGrid(int64_t n) {
  const int64_t blocks = (n + kElementThreads - 1) / kElementThreads;
  return static_cast<unsigned int>(blocks < (int64_t{1} << 20) ? blocks : (int64_t{1} << 20));
}

// partials: device scratch of NumScaleBlocks(n) accumulators (may be null when
// n == 0). Writes words[NumWords(n)] and scale[0]. Returns the launch error.
// 16-byte accesses where x is 16-byte aligned (every TensorFlow allocation),
// else one element at a time; words and scale are the same either way.
// +-0 pack as zero_bit (0 or 1).
template <typename T>
cudaError_t LaunchSignPack(const T* x, int64_t n, uint32_t zero_bit, uint32_t* words,
                           Acc<T>* partials, T* scale, cudaStream_t stream) {
  const int64_t blocks = NumScaleBlocks(n);
  if (blocks > 0) {
    cuda_vec::WithVecWidth<T>(x, [&](auto width) {
      SignPackKernel<T, decltype(width)::value>
          <<<static_cast<unsigned int>(blocks), kPackThreads, 0, stream>>>(x, n, zero_bit, words,
                                                                          partials);
    });
  }
  SignScaleKernel<T><<<1, kFinalizeThreads, 0, stream>>>(partials, blocks, n, scale);
  return cudaGetLastError();
}

// The EF-sign pack: pass 1 (partial sums), the scale, pass 2 (words and
// residual[n], which must not alias g or e). partials: device scratch of
// NumScaleBlocks(n) accumulators. 16-byte accesses where g, e and residual are
// all 16-byte aligned (the OR of their addresses is), else one at a time.
template <typename T>
cudaError_t LaunchSignEfPack(const T* g, const T* e, int64_t n, uint32_t zero_bit,
                             uint32_t* words, Acc<T>* partials, T* scale, T* residual,
                             cudaStream_t stream) {
  const int64_t blocks = NumScaleBlocks(n);
  const void* all = reinterpret_cast<const void*>(reinterpret_cast<uintptr_t>(g) |
                                                  reinterpret_cast<uintptr_t>(e) |
                                                  reinterpret_cast<uintptr_t>(residual));
  if (blocks > 0) {
    cuda_vec::WithVecWidth<T>(all, [&](auto width) {
      SignEfSumKernel<T, decltype(width)::value>
          <<<static_cast<unsigned int>(blocks), kPackThreads, 0, stream>>>(g, e, n, partials);
    });
  }
  SignScaleKernel<T><<<1, kFinalizeThreads, 0, stream>>>(partials, blocks, n, scale);
  if (blocks > 0) {
    cuda_vec::WithVecWidth<T>(all, [&](auto width) {
      SignEfPackKernel<T, decltype(width)::value>
          <<<static_cast<unsigned int>(blocks), kPackThreads, 0, stream>>>(g, e, n, zero_bit,
                                                                          scale, words, residual);
    });
  }
  return cudaGetLastError();
}

// out[n] = weight * sum over the k rows of +-scales[row]; scales on the device.
template <typename T>
cudaError_t LaunchSignScaledSum(const uint32_t* words, const T* scales, int64_t k,
                                int64_t num_words, int64_t n, T weight, T* out,
                                cudaStream_t stream) {
  if (n > 0) {
    cuda_vec::WithVecWidth<T>(out, [&](auto width) {
      constexpr int V = decltype(width)::value;
      SignScaledSumKernel<T, V><<<ElementGrid((n + V - 1) / V), kElementThreads, 0, stream>>>(
          words, scales, k, num_words, n, static_cast<Acc<T>>(weight), out);
    });
  }
  return cudaGetLastError();
}

template <typename T>
cudaError_t LaunchSignUnpack(const uint32_t* words, const T* scale, int64_t n, T* out,
                             cudaStream_t stream) {
  if (n > 0) {
    cuda_vec::WithVecWidth<T>(out, [&](auto width) {
      constexpr int V = decltype(width)::value;
      SignUnpackKernel<T, V><<<ElementGrid((n + V - 1) / V), kElementThreads, 0, stream>>>(
          words, scale, n, out);
    });
  }
  return cudaGetLastError();
}

template <typename T>
cudaError_t LaunchSignMajority(const uint32_t* words, int64_t k, int64_t num_words, int64_t n,
                               T* out, cudaStream_t stream) {
  if (n > 0) {
    cuda_vec::WithVecWidth<T>(out, [&](auto width) {
      constexpr int V = decltype(width)::value;
      SignMajorityKernel<T, V><<<ElementGrid((n + V - 1) / V), kElementThreads, 0, stream>>>(
          words, k, num_words, n, out);
    });
  }
  return cudaGetLastError();
}

}  // namespace cuda
}  // namespace sign
}  // namespace tfcomp

#endif  // TFCOMP_CUSTOM_OPS_SIGN_CC_KERNELS_SIGN_CUDA_KERNELS_CU_H_
