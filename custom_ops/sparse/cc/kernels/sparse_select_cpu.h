// The CPU selection loops of hashed selection (DRAGONN, sparse_core.h), one
// per instruction set, on plain pointers: no TensorFlow. sparse_kernels.cc
// shards them over the op's threads; the core test runs every path this CPU
// supports against the sequential reference.
#ifndef TFCOMP_CUSTOM_OPS_SPARSE_CC_KERNELS_SPARSE_SELECT_CPU_H_
#define TFCOMP_CUSTOM_OPS_SPARSE_CC_KERNELS_SPARSE_SELECT_CPU_H_

#include <cstdint>
#include <limits>
#include <type_traits>
#include <utility>

#include "custom_ops/common/cpu_isa.h"
#include "custom_ops/common/numeric.h"
#include "sparse_core.h"

namespace tfcomp {
namespace sparse {
namespace cpu {

// The slots being filled: each bucket keeps the largest claims
// (sparse::SlotClaim: magnitude, then index) hashed to it, largest first
// (sparse::InsertClaim), on any thread count. One thread keeps each claim's
// value beside it (the value is in a register now; reading it back later
// would miss the cache once per slot). Several threads settle the claims by
// atomic max and read the values afterwards.
template <typename T, typename Index>
struct Slots {
  sparse::HashParams hash;
  int64_t capacity;
  int64_t bucket_size;
  int64_t buckets;   // sparse::BucketCount(capacity, bucket_size)
  uint64_t* claims;  // capacity of them, 0 (empty) at the start
  T* values;         // nullptr when several threads select
  int64_t SlotOf(int64_t i) const { return sparse::BucketStart(hash, i, buckets, bucket_size); }
  // Fetches a bucket's first line ahead of its claim: each claim reads its slots first.
  void Prefetch(int64_t slot) const {
    __builtin_prefetch(claims + slot, 1);
    if (values != nullptr) __builtin_prefetch(values + slot, 1);
  }
  void Claim(int64_t i, T value) const { ClaimSlot(SlotOf(i), i, value); }
  // Claims the bucket whose first slot is `slot`.
  void ClaimSlot(int64_t slot, int64_t i, T value) const {
    uint64_t claim = sparse::SlotClaim(AbsValue(value), i);
    const int64_t end = sparse::BucketEnd(slot, bucket_size, capacity);
    if (values != nullptr) {
      for (; slot < end && claim != 0; ++slot) {
        if (claim > claims[slot]) {
          std::swap(claim, claims[slot]);
          std::swap(value, values[slot]);
        }
      }
      return;
    }
    sparse::InsertClaim(claim, slot, end, [this](int64_t s, uint64_t c) {
      uint64_t seen = __atomic_load_n(claims + s, __ATOMIC_RELAXED);
      while (seen < c && !__atomic_compare_exchange_n(claims + s, &seen, c, true, __ATOMIC_RELAXED,
                                                      __ATOMIC_RELAXED)) {
      }
      return seen;
    });
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

// float32 with AVX-512: one compare per 16 elements, and where any is
// selected, a compress appends their indices and values to a buffer, which is
// claimed in index order when full, each slot fetched a few claims ahead (a
// claim reads its slot before it writes). Claiming between the vector loads,
// as the AVX2 loop does, was about 1.2 ms slower at 2^24 inside the op at
// every ratio (see benchmarks/results/sparse_bench.md). Indices are 32-bit lanes, so
// ranges past INT32_MAX take the AVX2 loop.
template <typename Index>
__attribute__((target("avx512f"))) void SelectRangeFloatAvx512(const float* g, int64_t begin,
                                                               int64_t end, float t,
                                                               const Slots<float, Index>& slots) {
  constexpr int64_t kBatch = 4096;
  constexpr int64_t kAhead = 16;
  int32_t batch_indices[kBatch + 16];
  float batch_values[kBatch + 16];
  int64_t batch_slots[kBatch + 16];
  int64_t size = 0;
  const auto claim_batch = [&] {
    for (int64_t j = 0; j < size; ++j) batch_slots[j] = slots.SlotOf(batch_indices[j]);
    for (int64_t j = 0; j < size; ++j) {
      if (j + kAhead < size) slots.Prefetch(batch_slots[j + kAhead]);
      slots.ClaimSlot(batch_slots[j], batch_indices[j], batch_values[j]);
    }
    size = 0;
  };
  const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff);
  const __m512 threshold = _mm512_set1_ps(t);
  const __m512i lanes = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  int64_t i = begin;
  for (; i + 16 <= end; i += 16) {
    const __m512 x = _mm512_loadu_ps(g + i);
    const __m512 magnitude = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(x), abs_mask));
    // Not-less-than, unordered: NaN is selected, as in sparse::Selected.
    const __mmask16 mask = _mm512_cmp_ps_mask(magnitude, threshold, _CMP_NLT_UQ);
    if (mask == 0) continue;
    // Compress in registers, then store: a compress to memory is microcoded
    // on some CPUs (AMD Zen 4) and several times slower.
    const __m512i index = _mm512_add_epi32(lanes, _mm512_set1_epi32(static_cast<int32_t>(i)));
    _mm512_storeu_si512(batch_indices + size, _mm512_maskz_compress_epi32(mask, index));
    _mm512_storeu_ps(batch_values + size, _mm512_maskz_compress_ps(mask, x));
    size += __builtin_popcount(mask);
    if (size >= kBatch) claim_batch();
  }
  claim_batch();
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
    if (isa >= Isa::kAvx512 && end - 1 <= std::numeric_limits<int32_t>::max()) {
      return SelectRangeFloatAvx512(g, begin, end, t, slots);
    }
    if (isa >= Isa::kAvx2) return SelectRangeFloatAvx2(g, begin, end, t, slots);
  }
#endif
  SelectRangeGeneric(g, begin, end, t, slots);
}

}  // namespace cpu
}  // namespace sparse
}  // namespace tfcomp

#endif  // TFCOMP_CUSTOM_OPS_SPARSE_CC_KERNELS_SPARSE_SELECT_CPU_H_
