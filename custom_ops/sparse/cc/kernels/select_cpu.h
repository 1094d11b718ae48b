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
#include <memory>
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

// A block's candidates on the one-read path: their ranks and their values, in
// index order. Appended to with room for a vector's worth past size(), and
// left uninitialized until written (a std::vector would zero what it grows).
// A block starts in a slice of the caller's scratch memory (the op's
// allocator, which reuses its buffers: fresh pages for tens of megabytes of
// candidates cost more than collecting them) and moves to the heap if it
// outgrows it.
template <typename T>
class Candidates {
 public:
  static constexpr int64_t kRoom = 16;
  static constexpr int64_t kBytesPerEntry = sizeof(uint64_t) + sizeof(T);

  // Storage for `entries` candidates, room included, at scratch (kBytesPerEntry * entries bytes).
  void Use(char* scratch, int64_t entries) {
    ranks_ = reinterpret_cast<uint64_t*>(scratch);
    values_ = reinterpret_cast<T*>(scratch + sizeof(uint64_t) * entries);
    capacity_ = entries;
  }
  // Room for capacity candidates and kRoom more; growing doubles it.
  void Reserve(int64_t capacity) {
    if (capacity + kRoom <= capacity_) return;
    const int64_t grown = std::max(capacity + kRoom, 2 * capacity_);
    std::unique_ptr<uint64_t[]> ranks(new uint64_t[grown]);
    std::unique_ptr<T[]> values(new T[grown]);
    std::copy(ranks_, ranks_ + size_, ranks.get());
    std::copy(values_, values_ + size_, values.get());
    own_ranks_ = std::move(ranks);
    own_values_ = std::move(values);
    ranks_ = own_ranks_.get();
    values_ = own_values_.get();
    capacity_ = grown;
  }
  // Room for kRoom more at ranks()/values() + size().
  void MakeRoom() { Reserve(size_); }
  void Append(uint64_t rank, T value) {
    MakeRoom();
    ranks_[size_] = rank;
    values_[size_] = value;
    ++size_;
  }
  void Added(int64_t count) { size_ += count; }
  uint64_t* ranks() { return ranks_; }
  T* values() { return values_; }
  const uint64_t* ranks() const { return ranks_; }
  const T* values() const { return values_; }
  int64_t size() const { return size_; }

 private:
  uint64_t* ranks_ = nullptr;
  T* values_ = nullptr;
  std::unique_ptr<uint64_t[]> own_ranks_;
  std::unique_ptr<T[]> own_values_;
  int64_t size_ = 0;
  int64_t capacity_ = 0;
};

// The qualifying x[i] with key >= lo (lo >= 0x00800000, the smallest normal,
// so no zero or denormal is a candidate), i in [begin, end): appended to out
// in index order.
template <typename T>
void CandidateRangeGeneric(const T* x, int64_t begin, int64_t end, typename Accumulator<T>::type t,
                           uint32_t lo, Candidates<T>* out) {
  for (int64_t i = begin; i < end; ++i) {
    const auto a = AbsValue(x[i]);
    const uint32_t key = MagnitudeKey(a);
    if (key >= lo && sparse::Selected(a, t)) out->Append(Rank(key, i), x[i]);
  }
}

#if TFCOMP_X86
// float32 with AVX2: two compares per 8 elements; candidates are rare.
__attribute__((target("avx2"))) inline void CandidateRangeFloatAvx2(
    const float* x, int64_t begin, int64_t end, float t, uint32_t lo, Candidates<float>* out) {
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
  const __m256 threshold = _mm256_set1_ps(t);
  // Signed compare: the bits are below 2^31. Every NaN's key is 0x7fc00000,
  // so a NaN qualifies by key where lo <= 0x7fc00000, whatever its payload.
  const __m256i below = _mm256_set1_epi32(static_cast<int32_t>(std::min(lo - 1, 0x7f800000u)));
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
      const uint32_t key = MagnitudeKey(AbsValue(x[index]));
      if (key >= lo) out->Append(Rank(key, index), x[index]);
      mask &= mask - 1;
    }
  }
  CandidateRangeGeneric(x, i, end, t, lo, out);
}

// float32 with AVX-512: two compares per 16 elements, then the qualifying
// elements' ranks and values compressed in registers and stored (a compress
// to memory is microcoded on some CPUs), with no branch per element: at a
// ratio of 10% most vectors hold a candidate.
__attribute__((target("avx512f"))) inline void CandidateRangeFloatAvx512(
    const float* x, int64_t begin, int64_t end, float t, uint32_t lo, Candidates<float>* out) {
  const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff);
  const __m512i infinity = _mm512_set1_epi32(0x7f800000);
  const __m512i nan_key = _mm512_set1_epi32(0x7fc00000);
  const __m512i lo_key = _mm512_set1_epi32(static_cast<int32_t>(lo));
  const __m512 threshold = _mm512_set1_ps(t);
  const __m512i lanes = _mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7);
  int64_t i = begin;
  for (; i + 16 <= end; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);
    __m512i key = _mm512_and_si512(_mm512_castps_si512(v), abs_mask);
    key = _mm512_mask_mov_epi32(key, _mm512_cmpgt_epu32_mask(key, infinity), nan_key);
    __mmask16 mask = _mm512_cmpge_epu32_mask(key, lo_key);
    if (mask == 0) continue;
    // Not-less-than, unordered: NaN qualifies, as in sparse::Selected.
    mask &= _mm512_cmp_ps_mask(_mm512_abs_ps(v), threshold, _CMP_NLT_UQ);
    if (mask == 0) continue;
    out->MakeRoom();
    uint64_t* ranks = out->ranks() + out->size();
    const __m512i index = _mm512_add_epi64(lanes, _mm512_set1_epi64(i));
    const __m512i r0 = _mm512_or_si512(
        _mm512_slli_epi64(_mm512_cvtepu32_epi64(_mm512_castsi512_si256(key)), kIndexBits), index);
    const __m512i r1 = _mm512_or_si512(
        _mm512_slli_epi64(_mm512_cvtepu32_epi64(_mm512_extracti64x4_epi64(key, 1)), kIndexBits),
        _mm512_add_epi64(index, _mm512_set1_epi64(8)));
    const __mmask8 low = static_cast<__mmask8>(mask);
    _mm512_storeu_si512(ranks, _mm512_maskz_compress_epi64(low, r0));
    _mm512_storeu_si512(ranks + __builtin_popcount(low), _mm512_maskz_compress_epi64(mask >> 8, r1));
    _mm512_storeu_ps(out->values() + out->size(), _mm512_maskz_compress_ps(mask, v));
    out->Added(__builtin_popcount(mask));
  }
  CandidateRangeGeneric(x, i, end, t, lo, out);
}
#endif

// Collects with the loop of instruction set `isa` (which the CPU must run, see
// IsaSupported); float32 has vector loops.
template <typename T>
void CandidateRange(Isa isa, const T* x, int64_t begin, int64_t end, typename Accumulator<T>::type t,
                    uint32_t lo, Candidates<T>* out) {
#if TFCOMP_X86
  if constexpr (std::is_same_v<T, float>) {
    if (isa >= Isa::kAvx512) return CandidateRangeFloatAvx512(x, begin, end, t, lo, out);
    if (isa >= Isa::kAvx2) return CandidateRangeFloatAvx2(x, begin, end, t, lo, out);
  }
#endif
  CandidateRangeGeneric(x, begin, end, t, lo, out);
}

// Bins of the candidates below hi by key, for the cutoff (kCutoffBins of them).
constexpr int kCutoffBins = 1024;

// The shift that maps keys in [lo, hi) to bins (key - lo) >> shift below kCutoffBins.
inline int CutoffShift(uint32_t lo, uint32_t hi) {
  int shift = 0;
  while (((hi - lo) >> shift) >= static_cast<uint32_t>(kCutoffBins)) ++shift;
  return shift;
}

// The one-read path (select_core.h). Returns false, having written nothing,
// where the sample's lower bound missed; values/indices start filled with (0, -1).
template <typename T, typename Index, typename ParallelFor, typename Scratch>
bool SelectLargestSampled(const T* x, int64_t n, typename Accumulator<T>::type t, int64_t capacity,
                          T* values, Index* indices, ParallelFor&& parallel_for, Scratch&& scratch,
                          Isa isa) {
  if (n < 4 * kSelectSamples) return false;
  // Keys of the qualifying sampled elements.
  std::vector<uint32_t> keys;
  keys.reserve(kSelectSamples);
  constexpr int64_t kRuns = kSelectSamples / kSelectSampleRun;
  constexpr int64_t kAhead = 8;  // the runs lie far apart: fetch a few ahead, or each waits on memory
  for (int64_t run = 0; run < kRuns; ++run) {
    if (run + kAhead < kRuns) {
      const T* ahead = x + SelectSampleRunStart(run + kAhead, n);
      for (int64_t b = 0; b < kSelectSampleRun * static_cast<int64_t>(sizeof(T)); b += 64) {
        __builtin_prefetch(reinterpret_cast<const char*>(ahead) + b, 0);
      }
    }
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
  uint32_t hi = r_hi >= 1 && r_hi <= q ? kth(r_hi) : 0x80000000u;  // 0x80000000: above every key
  if (lo < 0x00800000u) lo = 0x00800000u;  // zeros (and denormals) are never candidates here
  if (hi < lo) hi = lo;
  const int shift = CutoffShift(lo, hi);
  const uint64_t hi_rank = static_cast<uint64_t>(hi) << kIndexBits;  // below every rank of key hi
  const auto bin_of = [&](uint64_t rank) {
    return static_cast<int>((static_cast<uint32_t>(rank >> kIndexBits) - lo) >> shift);
  };
  const int64_t block = SelectBlockSize(n);
  const int64_t blocks = (n + block - 1) / block;
  // Each block's candidates, how many reach hi, and a histogram of the others by key.
  std::vector<Candidates<T>> found(blocks);
  std::vector<int64_t> at_hi_in(blocks, 0);
  std::vector<uint32_t> rows(blocks * kCutoffBins, 0);
  const int64_t expect = static_cast<int64_t>(1.3 * (e + margin) * block / kSelectSamples) + 64;
  // Each block's slice starts on a cache line (its ranks are 8-byte words).
  const int64_t slice = ((expect + Candidates<T>::kRoom) * Candidates<T>::kBytesPerEntry + 63) / 64 * 64;
  char* memory = static_cast<char*>(scratch(blocks * slice));
  parallel_for(blocks, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      if (memory != nullptr) found[b].Use(memory + b * slice, expect + Candidates<T>::kRoom);
      found[b].Reserve(expect);
      CandidateRange(isa, x, b * block, std::min(n, (b + 1) * block), t, lo, &found[b]);
      // Two interleaved rows (summed into the block's): neighbouring candidates often
      // share a bin, and would each wait on the previous increment's store.
      uint32_t* row = rows.data() + b * kCutoffBins;
      uint32_t second[kCutoffBins] = {};
      const uint64_t* ranks = found[b].ranks();
      const int64_t size = found[b].size();
      int64_t at = 0;
      for (int64_t k = 0; k < size; ++k) {
        const bool high = ranks[k] >= hi_rank;
        at += high;
        if (!high) ++((k & 1) ? second : row)[bin_of(ranks[k])];
      }
      for (int k = 0; k < kCutoffBins; ++k) row[k] += second[k];
      at_hi_in[b] = at;
    }
  });
  int64_t total = 0;
  int64_t at_hi = 0;
  for (int64_t b = 0; b < blocks; ++b) {
    total += found[b].size();
    at_hi += at_hi_in[b];
  }
  if (total < capacity) return false;  // qualifying elements below lo may win
  // The cutoff: the capacity-th largest rank, found among the candidates of one
  // bin (the one holding it) when fewer than capacity reach hi, else among all.
  uint64_t cutoff = 0;
  if (total > capacity && at_hi == capacity) {
    cutoff = hi_rank;
  } else if (total > capacity) {
    // The contenders' ranks are in [from, to): every candidate's, or the bin's.
    uint64_t from = 0;
    uint64_t to = ~uint64_t{0};
    int64_t need = capacity;
    if (at_hi < capacity) {
      std::vector<int64_t> hist(kCutoffBins, 0);
      for (int64_t b = 0; b < blocks; ++b) {
        for (int k = 0; k < kCutoffBins; ++k) hist[k] += rows[b * kCutoffBins + k];
      }
      int64_t above = at_hi;
      int bin = kCutoffBins - 1;
      for (; above + hist[bin] < capacity; --bin) above += hist[bin];
      need = capacity - above;
      from = static_cast<uint64_t>(lo + (static_cast<uint32_t>(bin) << shift)) << kIndexBits;
      to = std::min(hi_rank, static_cast<uint64_t>(lo + (static_cast<uint32_t>(bin + 1) << shift)) << kIndexBits);
    }
    std::vector<std::vector<uint64_t>> in_block(blocks);
    parallel_for(blocks, [&](int64_t b0, int64_t b1) {
      for (int64_t b = b0; b < b1; ++b) {
        const uint64_t* ranks = found[b].ranks();
        for (int64_t k = 0; k < found[b].size(); ++k) {
          if (ranks[k] >= from && ranks[k] < to) in_block[b].push_back(ranks[k]);
        }
      }
    });
    std::vector<uint64_t> contenders;
    for (const auto& c : in_block) contenders.insert(contenders.end(), c.begin(), c.end());
    std::nth_element(contenders.begin(), contenders.begin() + (need - 1), contenders.end(),
                     std::greater<uint64_t>());
    cutoff = contenders[need - 1];
  }
  // The winners, block by block in index order: counted, then written from each block's offset.
  std::vector<int64_t> offsets(blocks + 1, 0);
  parallel_for(blocks, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      int64_t wins = 0;
      const uint64_t* ranks = found[b].ranks();
      for (int64_t k = 0; k < found[b].size(); ++k) wins += ranks[k] >= cutoff;
      offsets[b + 1] = wins;
    }
  });
  for (int64_t b = 0; b < blocks; ++b) offsets[b + 1] += offsets[b];
  parallel_for(blocks, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      int64_t j = offsets[b];
      const uint64_t* ranks = found[b].ranks();
      const T* found_values = found[b].values();
      for (int64_t k = 0; k < found[b].size(); ++k) {
        if (ranks[k] < cutoff) continue;
        indices[j] = static_cast<Index>(RankIndex(ranks[k]));
        values[j] = found_values[k];
        ++j;
      }
    }
  });
  return true;
}

// The whole selection. parallel_for(blocks, fn) runs fn(begin, end) over
// [0, blocks) on any threads; scratch(bytes) returns memory for the call,
// 8-byte aligned, or nullptr (then the heap is used); isa is the instruction
// set the one-read path's loop uses. values/indices hold capacity >= 1 entries.
template <typename T, typename Index, typename ParallelFor, typename Scratch>
void SelectLargest(const T* x, int64_t n, typename Accumulator<T>::type t, int64_t capacity,
                   T* values, Index* indices, ParallelFor&& parallel_for, Scratch&& scratch,
                   Isa isa = BestIsa()) {
  std::fill(values, values + capacity, T(0));
  std::fill(indices, indices + capacity, Index(-1));
  if (n == 0) return;
  if (SelectLargestSampled(x, n, t, capacity, values, indices, parallel_for, scratch, isa)) return;
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
