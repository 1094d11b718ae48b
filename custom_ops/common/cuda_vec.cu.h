// 16-byte loads and stores for the memory-bound CUDA kernels: a thread moves
// V = 16 / sizeof(T) elements at once where the pointer is 16-byte aligned
// (every TensorFlow allocation is), so a warp moves 512 bytes per access instead
// of 64 for 16-bit types. Launchers pick V with WithVecWidth (V = 1 when unaligned).
#ifndef TFCOMP_CUSTOM_OPS_COMMON_CUDA_VEC_CU_H_
#define TFCOMP_CUSTOM_OPS_COMMON_CUDA_VEC_CU_H_

#include <cstdint>
#include <type_traits>

namespace tfcomp {
namespace cuda_vec {

template <typename T, int V>
struct alignas(sizeof(T) * V) Vec {
  T v[V];
};

// Elements per 16-byte access.
template <typename T>
constexpr int kVec = static_cast<int>(16 / sizeof(T));

inline bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// launch(std::integral_constant<int, V>{}): V = kVec<T> where p is 16-byte aligned,
// else 1. The launchers' one choice of kernel instance.
template <typename T, typename Launch>
void WithVecWidth(const void* p, Launch&& launch) {
  if (Aligned16(p)) {
    launch(std::integral_constant<int, kVec<T>>{});
  } else {
    launch(std::integral_constant<int, 1>{});
  }
}

// x[first, first + V) as one access; past `count` the lanes are 0 (then the
// elements are read one at a time). x + first must be aligned to the Vec.
template <typename T, int V>
__device__ inline Vec<T, V> LoadVec(const T* x, int64_t first, int64_t count) {
  if (first + V <= count) return *reinterpret_cast<const Vec<T, V>*>(x + first);
  Vec<T, V> out;
#pragma unroll
  for (int e = 0; e < V; ++e) out.v[e] = first + e < count ? x[first + e] : static_cast<T>(0.0f);
  return out;
}

// x[first, first + V) = values, as one access where all V fit before `count`.
template <typename T, int V>
__device__ inline void StoreVec(T* x, int64_t first, int64_t count, const Vec<T, V>& values) {
  if (first + V <= count) {
    *reinterpret_cast<Vec<T, V>*>(x + first) = values;
    return;
  }
#pragma unroll
  for (int e = 0; e < V; ++e) {
    if (first + e < count) x[first + e] = values.v[e];
  }
}

}  // namespace cuda_vec
}  // namespace tfcomp

#endif  // TFCOMP_CUSTOM_OPS_COMMON_CUDA_VEC_CU_H_
