// The CPU passes of exact threshold/top-k selection (select_core.h) on plain
// pointers: no TensorFlow. select_kernels.cc runs them over the op's threads;
// the core test runs them on any number of threads against a sort.
//
// Work is cut into fixed blocks (SelectBlocks: a function of n only), each
// with its own histogram row and its own range of the candidate buffer, so
// the result does not depend on which thread runs which block.
#ifndef TFCOMP_CUSTOM_OPS_SPARSE_CC_KERNELS_SELECT_CPU_H_
#define TFCOMP_CUSTOM_OPS_SPARSE_CC_KERNELS_SELECT_CPU_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <type_traits>
#include <vector>

#include "custom_ops/common/cpu_isa.h"
#include "custom_ops/common/numeric.h"
#include "select_core.h"
#include "sparse_core.h"

namespace tfcomp {
namespace select {
namespace cpu {

// Elements per block: at least 2^15, at most 64 blocks (each keeps a
// histogram row of kBins counts).
inline int64_t SelectBlockSize(int64_t n) {
  constexpr int64_t kMinBlock = int64_t{1} << 15;
  constexpr int64_t kMaxBlocks = 64;
  const int64_t size = (n + kMaxBlocks - 1) / kMaxBlocks;
  return std::max(kMinBlock, (size + 63) / 64 * 64);
}

// hist[Bin(key)] += 1 for every qualifying x[i], i in [begin, end).
template <typename T>
void HistogramRange(const T* x, int64_t begin, int64_t end, typename Accumulator<T>::type t,
                    uint32_t* hist) {
  // Two interleaved rows: runs of equal bins (common in a gradient) do not wait
  // on the previous increment's store.
  uint32_t h2[kBins] = {};
  int64_t i = begin;
  for (; i + 2 <= end; i += 2) {
    const auto a0 = AbsValue(x[i]);
    const auto a1 = AbsValue(x[i + 1]);
    if (sparse::Selected(a0, t)) ++hist[Bin(MagnitudeKey(a0))];
    if (sparse::Selected(a1, t)) ++h2[Bin(MagnitudeKey(a1))];
  }
  for (; i < end; ++i) {
    const auto a = AbsValue(x[i]);
    if (sparse::Selected(a, t)) ++hist[Bin(MagnitudeKey(a))];
  }
  for (int b = 0; b < kBins; ++b) hist[b] += h2[b];
}

// Writes the ranks of the qualifying x[i] with Bin >= bin, i in [begin, end),
// to out in index order; returns how many.
template <typename T>
int64_t CollectRange(const T* x, int64_t begin, int64_t end, typename Accumulator<T>::type t,
                     int bin, uint64_t* out) {
  const uint32_t floor = static_cast<uint32_t>(bin) << kBinShift;
  int64_t count = 0;
  for (int64_t i = begin; i < end; ++i) {
    const auto a = AbsValue(x[i]);
    const uint32_t key = MagnitudeKey(a);
    if (key >= floor && sparse::Selected(a, t)) out[count++] = Rank(key, i);
  }
  return count;
}

// The qualifying x[i] with key >= lo (lo >= 0x00800000, the smallest normal:
// a key >= lo is then the raw |x| bits >= lo, NaN included), i in [begin,
// end): their ranks appended to out in index order.
template <typename T>
void CandidateRangeGeneric(const T* x, int64_t begin, int64_t end, typename Accumulator<T>::type t,
                           uint32_t lo, std::vector<uint64_t>* out) {
  for (int64_t i = begin; i < end; ++i) {
    const auto a = AbsValue(x[i]);
    const uint32_t key = MagnitudeKey(a);
    if (key >= lo && sparse::Selected(a, t)) out->push_back(Rank(key, i));
  }
}

#if TFCOMP_X86
// float32 with AVX2: two compares per 8 elements; candidates are rare.
__attribute__((target("avx2"))) inline void CandidateRangeFloatAvx2(
    const float* x, int64_t begin, int64_t end, float t, uint32_t lo, std::vector<uint64_t>* out) {
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
  const __m256 threshold = _mm256_set1_ps(t);
  // Signed compare: the bits are below 2^31. bits > lo - 1 is bits >= lo.
  const __m256i below = _mm256_set1_epi32(static_cast<int32_t>(lo - 1));
  int64_t i = begin;
  for (; i + 16 <= end; i += 16) {
    const __m256i b0 = _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i)), abs_mask);
    const __m256i b1 =
        _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i + 8)), abs_mask);
    const unsigned m0 =
        static_cast<unsigned>(_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(b0, below))));
    const unsigned m1 =
        static_cast<unsigned>(_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(b1, below))));
    unsigned mask = m0 | (m1 << 8);
    if (mask == 0) continue;
    // Not-less-than, unordered: NaN qualifies, as in sparse::Selected.
    const unsigned q0 = static_cast<unsigned>(
        _mm256_movemask_ps(_mm256_cmp_ps(_mm256_castsi256_ps(b0), threshold, _CMP_NLT_UQ)));
    const unsigned q1 = static_cast<unsigned>(
        _mm256_movemask_ps(_mm256_cmp_ps(_mm256_castsi256_ps(b1), threshold, _CMP_NLT_UQ)));
    mask &= q0 | (q1 << 8);
    while (mask != 0) {
      const int64_t index = i + __builtin_ctz(mask);
      out->push_back(Rank(MagnitudeKey(AbsValue(x[index])), index));
      mask &= mask - 1;
    }
  }
  CandidateRangeGeneric(x, i, end, t, lo, out);
}
#endif

template <typename T>
void CandidateRange(const T* x, int64_t begin, int64_t end, typename Accumulator<T>::type t,
                    uint32_t lo, std::vector<uint64_t>* out) {
#if TFCOMP_X86
  if constexpr (std::is_same_v<T, float>) {
    if (BestIsa() >= Isa::kAvx2) return CandidateRangeFloatAvx2(x, begin, end, t, lo, out);
  }
#endif
  CandidateRangeGeneric(x, begin, end, t, lo, out);
}

// The one-read path (select_core.h). Returns false, having written nothing,
// where the sample's lower bound missed; values/indices start filled with (0, -1).
template <typename T, typename Index, typename ParallelFor>
bool SelectLargestSampled(const T* x, int64_t n, typename Accumulator<T>::type t, int64_t capacity,
                          T* values, Index* indices, ParallelFor&& parallel_for) {
  if (n < 4 * kSelectSamples) return false;
  // Keys of the qualifying sampled elements.
  std::vector<uint32_t> keys;
  keys.reserve(kSelectSamples);
  for (int64_t run = 0; run < kSelectSamples / kSelectSampleRun; ++run) {
    const int64_t start = SelectSampleRunStart(run, n);
    for (int64_t i = start; i < start + kSelectSampleRun; ++i) {
      const auto a = AbsValue(x[i]);
      if (sparse::Selected(a, t)) keys.push_back(MagnitudeKey(a));
    }
  }
  // The capacity-th largest of n lies around rank e of the sample; 6 sigma and
  // more either side.
  const double e = static_cast<double>(capacity) * kSelectSamples / n;
  const double margin = 6 * std::sqrt(e) + 0.02 * e + 16;
  const int64_t r_lo = static_cast<int64_t>(std::ceil(e + margin));
  const int64_t r_hi = static_cast<int64_t>(std::floor(e - margin));
  const int64_t q = static_cast<int64_t>(keys.size());
  const auto kth = [&](int64_t r) {  // the r-th largest sampled key, 1 <= r <= q
    std::nth_element(keys.begin(), keys.begin() + (r - 1), keys.end(), std::greater<uint32_t>());
    return keys[r - 1];
  };
  uint32_t lo = r_lo <= q ? kth(r_lo) : 0;
  const uint32_t hi = r_hi >= 1 && r_hi <= q ? kth(r_hi) : 0x80000000u;  // 0x80000000: above every key
  if (lo < 0x00800000u) lo = 0x00800000u;  // zeros (and denormals) are never candidates here
  const int64_t block = SelectBlockSize(n);
  const int64_t blocks = (n + block - 1) / block;
  std::vector<std::vector<uint64_t>> found(blocks);
  const size_t expect = static_cast<size_t>(1.3 * (e + margin) * block / kSelectSamples) + 64;
  parallel_for(blocks, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      found[b].reserve(expect);
      CandidateRange(x, b * block, std::min(n, (b + 1) * block), t, lo, &found[b]);
    }
  });
  int64_t total = 0;
  int64_t at_hi = 0;
  const uint64_t hi_rank = static_cast<uint64_t>(hi) << kIndexBits;  // below every rank of key hi
  for (const auto& f : found) {
    total += static_cast<int64_t>(f.size());
    for (const uint64_t r : f) at_hi += r >= hi_rank;
  }
  if (total < capacity) return false;  // qualifying elements below lo may win
  uint64_t cutoff = 0;
  if (total > capacity) {
    // The contenders: every candidate if more than capacity reach hi, else those below hi.
    const bool below_hi = at_hi <= capacity;
    const uint64_t top = below_hi ? hi_rank : ~uint64_t{0};
    const int64_t need = below_hi ? capacity - at_hi : capacity;
    if (need == 0) {
      cutoff = hi_rank;
    } else {
      std::vector<uint64_t> contenders;
      contenders.reserve(below_hi ? total - at_hi : total);
      for (const auto& f : found) {
        for (const uint64_t r : f) {
          if (r < top) contenders.push_back(r);
        }
      }
      std::nth_element(contenders.begin(), contenders.begin() + (need - 1), contenders.end(),
                       std::greater<uint64_t>());
      cutoff = contenders[need - 1];
    }
  }
  int64_t j = 0;
  for (const auto& f : found) {
    for (const uint64_t r : f) {
      if (r < cutoff) continue;
      const int64_t i = RankIndex(r);
      indices[j] = static_cast<Index>(i);
      values[j] = x[i];
      ++j;
    }
  }
  return true;
}

// The whole selection. parallel_for(blocks, fn) runs fn(begin, end) over
// [0, blocks) on any threads. values/indices hold capacity >= 1 entries.
template <typename T, typename Index, typename ParallelFor>
void SelectLargest(const T* x, int64_t n, typename Accumulator<T>::type t, int64_t capacity,
                   T* values, Index* indices, ParallelFor&& parallel_for) {
  std::fill(values, values + capacity, T(0));
  std::fill(indices, indices + capacity, Index(-1));
  if (n == 0) return;
  if (SelectLargestSampled(x, n, t, capacity, values, indices, parallel_for)) return;
  const int64_t block = SelectBlockSize(n);
  const int64_t blocks = (n + block - 1) / block;
  std::vector<uint32_t> rows(blocks * kBins, 0);
  parallel_for(blocks, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      HistogramRange(x, b * block, std::min(n, (b + 1) * block), t, rows.data() + b * kBins);
    }
  });
  std::vector<int64_t> hist(kBins, 0);
  for (int64_t b = 0; b < blocks; ++b) {
    const uint32_t* row = rows.data() + b * kBins;
    for (int k = 0; k < kBins; ++k) hist[k] += row[k];
  }
  const Boundary boundary = FindBoundary(hist.data(), capacity);
  if (boundary.candidates == 0) return;
  // Each block's candidates go to its own range, in block order.
  std::vector<int64_t> offsets(blocks + 1, 0);
  for (int64_t b = 0; b < blocks; ++b) {
    const uint32_t* row = rows.data() + b * kBins;
    int64_t count = 0;
    for (int k = boundary.bin; k < kBins; ++k) count += row[k];
    offsets[b + 1] = offsets[b] + count;
  }
  std::vector<uint64_t> ranks(boundary.candidates);
  parallel_for(blocks, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      CollectRange(x, b * block, std::min(n, (b + 1) * block), t, boundary.bin,
                   ranks.data() + offsets[b]);
    }
  });
  uint64_t cutoff = 0;
  if (!boundary.all) {
    // The (capacity - above)-th largest rank of the boundary bin.
    std::vector<uint64_t> in_bin;
    in_bin.reserve(boundary.candidates - boundary.above);
    for (const uint64_t r : ranks) {
      if (RankBin(r) == boundary.bin) in_bin.push_back(r);
    }
    const int64_t need = capacity - boundary.above;
    std::nth_element(in_bin.begin(), in_bin.begin() + (need - 1), in_bin.end(),
                     std::greater<uint64_t>());
    cutoff = in_bin[need - 1];
  }
  int64_t j = 0;
  for (const uint64_t r : ranks) {
    if (r < cutoff) continue;
    const int64_t i = RankIndex(r);
    indices[j] = static_cast<Index>(i);
    values[j] = x[i];
    ++j;
  }
}

}  // namespace cpu
}  // namespace select
}  // namespace tfcomp

#endif  // TFCOMP_CUSTOM_OPS_SPARSE_CC_KERNELS_SELECT_CPU_H_
