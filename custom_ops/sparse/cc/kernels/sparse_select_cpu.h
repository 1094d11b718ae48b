// The CPU selection loops of hashed selection (DRAGONN, sparse_core.h), one
// per instruction set, on plain pointers: no TensorFlow. sparse_kernels.cc
// shards them over the op's threads; the core test runs every path this CPU
// supports against the sequential reference.
#ifndef TFCOMP_CUSTOM_OPS_SPARSE_CC_KERNELS_SPARSE_SELECT_CPU_H_
#define TFCOMP_CUSTOM_OPS_SPARSE_CC_KERNELS_SPARSE_SELECT_CPU_H_

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "custom_ops/common/cpu_isa.h"
#include "custom_ops/common/numeric.h"
#include "sparse_core.h"

namespace tfcomp {
namespace sparse {
namespace cpu {

// The slots being filled. A slot keeps the largest index that hashes to it, on
// any thread count. One thread visits indices in ascending order, so it just
// overwrites, value included (the value is in a register now; reading it back
// later would miss the cache once per slot). Several threads settle the index
// by atomic max and read the values afterwards.
template <typename T, typename Index>
struct Slots {
  sparse::HashParams hash;
  int64_t capacity;
  Index* indices;
  T* values;  // nullptr when several threads select
  void Claim(int64_t i, T value) const {
    const int64_t slot = sparse::HashSlot(hash, i, capacity);
    const Index index = static_cast<Index>(i);
    if (values != nullptr) {
      indices[slot] = index;
      values[slot] = value;
      return;
    }
    Index seen = __atomic_load_n(indices + slot, __ATOMIC_RELAXED);
    while (seen < index && !__atomic_compare_exchange_n(indices + slot, &seen, index, true,
                                                        __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
  }
};

template <typename T, typename Index>
void SelectRangeGeneric(const T* g, int64_t begin, int64_t end, typename Accumulator<T>::type t,
                        const Slots<T, Index>& slots) {
  for (int64_t i = begin; i < end; ++i) {
    if (sparse::Selected(AbsValue(g[i]), t)) slots.Claim(i, g[i]);
  }
}

#if TFCOMP_X86
// float32 with AVX2: one compare per 8 elements; selected elements are rare.
template <typename Index>
__attribute__((target("avx2"))) void SelectRangeFloatAvx2(const float* g, int64_t begin, int64_t end,
                                                          float t, const Slots<float, Index>& slots) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256 threshold = _mm256_set1_ps(t);
  int64_t i = begin;
  for (; i + 8 <= end; i += 8) {
    const __m256 magnitude = _mm256_and_ps(_mm256_loadu_ps(g + i), abs_mask);
    // Not-less-than, unordered: NaN is selected, as in sparse::Selected.
    unsigned mask = static_cast<unsigned>(
        _mm256_movemask_ps(_mm256_cmp_ps(magnitude, threshold, _CMP_NLT_UQ)));
    while (mask != 0) {
      const int64_t index = i + __builtin_ctz(mask);
      slots.Claim(index, g[index]);
      mask &= mask - 1;
    }
  }
  SelectRangeGeneric(g, i, end, t, slots);
}
#endif

// Selects from g[begin, end) with the loop of instruction set `isa` (which
// the CPU must run, see IsaSupported); float32 has vector loops.
template <typename T, typename Index>
void SelectRange(Isa isa, const T* g, int64_t begin, int64_t end, typename Accumulator<T>::type t,
                 const Slots<T, Index>& slots) {
#if TFCOMP_X86
  if constexpr (std::is_same_v<T, float>) {
    // AVX-512 CPUs run the AVX2 loop: a branch-free AVX-512 compaction was
    // no faster inside the op (see benchmarks/results/sparse_bench.md).
    if (isa >= Isa::kAvx2) return SelectRangeFloatAvx2(g, begin, end, t, slots);
  }
#endif
  SelectRangeGeneric(g, begin, end, t, slots);
}

}  // namespace cpu
}  // namespace sparse
}  // namespace tfcomp

#endif  // TFCOMP_CUSTOM_OPS_SPARSE_CC_KERNELS_SPARSE_SELECT_CPU_H_
