// Sign-packing op kernels: argument checks, the CPU functors, and the
// registrations for CPU (always) and GPU (when built with GOOGLE_CUDA).
#define EIGEN_USE_THREADS
#include "sign_kernels.h"

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "custom_ops/common/cpu_isa.h"
#include "custom_ops/common/cpu_shard.h"
#include "custom_ops/common/kernel_names.h"
#include "sign_core.h"

namespace tfcomp {

namespace {

// Packs one scale block (at most kScaleBlockElements elements) and returns the
// sum of |x| over it. Generic path: the per-element logic of sign_core.h.
template <typename T>
typename sign::Accumulator<T>::type PackBlockGeneric(const T* x, int64_t count,
                                                     uint32_t zero_bit, uint32_t* words) {
  typename sign::Accumulator<T>::type sum = 0;
  for (int64_t i = 0; i < count; i += sign::kBitsPerWord) {
    const int in_word = static_cast<int>(
        count - i < sign::kBitsPerWord ? count - i : sign::kBitsPerWord);
    words[i / sign::kBitsPerWord] = sign::PackWord(x + i, in_word, &sum, zero_bit);
  }
  return sum;
}

// The sum of |g + e| over one scale block, in PackBlockGeneric's order.
template <typename T>
typename sign::Accumulator<T>::type EfSumBlockGeneric(const T* g, const T* e, int64_t count) {
  typename sign::Accumulator<T>::type sum = 0;
  for (int64_t i = 0; i < count; i += sign::kBitsPerWord) {
    const int in_word = static_cast<int>(
        count - i < sign::kBitsPerWord ? count - i : sign::kBitsPerWord);
    sign::CorrectedAbsSum(g + i, e + i, in_word, &sum);
  }
  return sum;
}

// Words and residuals of one block of p = g + e.
template <typename T>
void EfPackBlockGeneric(const T* g, const T* e, int64_t count, T scale, uint32_t zero_bit,
                        uint32_t* words, T* residual) {
  for (int64_t i = 0; i < count; i += sign::kBitsPerWord) {
    const int in_word = static_cast<int>(
        count - i < sign::kBitsPerWord ? count - i : sign::kBitsPerWord);
    words[i / sign::kBitsPerWord] =
        sign::EfPackWord(g + i, e + i, in_word, scale, zero_bit, residual + i);
  }
}

// The K-row decodes (majority, scaled sum) read one word of every row in turn.
// Rows 4 KiB apart (any power-of-two tensor) share a cache set, and past the
// set's ways (8 on current x86) every read misses: at 16 workers decode took 3x
// its 8-worker time. Past kDirectRows rows they read a block of kBlockWords at a
// time instead, each row's block (one cache line) copied whole before any is
// used; at most kDirectRows rows are read in place, which costs no copy.
constexpr int64_t kBlockWords = 16;
constexpr int64_t kDirectRows = 8;

// fn(rows, stride, first_word, count) over words [w_begin, w_end) of the k rows
// of words (row stride num_words): rows[r * stride + i] is word first_word + i
// of row r.
template <typename Fn>
void InBlocks(const uint32_t* words, int64_t k, int64_t num_words, int64_t w_begin, int64_t w_end,
              Fn fn) {
  if (k <= kDirectRows) {
    fn(words + w_begin, num_words, w_begin, w_end - w_begin);
    return;
  }
  std::vector<uint32_t> block(static_cast<size_t>(k) * kBlockWords);
  for (int64_t first = w_begin; first < w_end; first += kBlockWords) {
    const int64_t count = std::min<int64_t>(kBlockWords, w_end - first);
    for (int64_t r = 0; r < k; ++r) {
      const uint32_t* from = words + r * num_words + first;
      uint32_t* to = block.data() + r * kBlockWords;
      if (count == kBlockWords) {
        std::memcpy(to, from, kBlockWords * sizeof(uint32_t));  // a fixed size: inlined
      } else {
        std::memcpy(to, from, static_cast<size_t>(count) * sizeof(uint32_t));
      }
    }
    fn(block.data(), kBlockWords, first, count);
  }
}

#if TFCOMP_X86
// float32 with AVX2: 8 elements per instruction. Same bit rule as
// sign::SignBit, on the bit patterns: 0 for NaN (magnitude above +Inf's), for a
// set sign bit with a nonzero magnitude, and for +-0 when zero_clear (all ones
// when zero_bit is 0, else all zeros). Returns the lanes whose bit is 0.
__attribute__((target("avx2"))) inline __m256i ClearLanes(__m256 v, __m256i zero_clear) {
  const __m256i bits = _mm256_castps_si256(v);
  const __m256i magnitude = _mm256_and_si256(bits, _mm256_set1_epi32(0x7fffffff));
  const __m256i is_nan = _mm256_cmpgt_epi32(magnitude, _mm256_set1_epi32(0x7f800000));
  const __m256i is_zero = _mm256_cmpeq_epi32(magnitude, _mm256_setzero_si256());
  const __m256i is_negative = _mm256_andnot_si256(is_zero, _mm256_srai_epi32(bits, 31));
  return _mm256_or_si256(_mm256_or_si256(is_nan, is_negative),
                         _mm256_and_si256(is_zero, zero_clear));
}

__attribute__((target("avx2"))) inline uint32_t MaskOf(__m256i lanes) {
  return static_cast<uint32_t>(_mm256_movemask_ps(_mm256_castsi256_ps(lanes)));
}

__attribute__((target("avx2"))) inline __m256i ZeroClear(uint32_t zero_bit) {
  return _mm256_set1_epi32(zero_bit ? 0 : -1);
}

// The sum of four accumulators' lanes, in a fixed order.
__attribute__((target("avx2"))) inline float SumLanes(__m256 acc0, __m256 acc1, __m256 acc2,
                                                      __m256 acc3) {
  const __m256 acc = _mm256_add_ps(_mm256_add_ps(acc0, acc1), _mm256_add_ps(acc2, acc3));
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, acc);
  return ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) +
         ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
}

__attribute__((target("avx2"))) float PackBlockFloatAvx2(const float* x, int64_t count,
                                                         uint32_t zero_bit, uint32_t* words) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256i zero_clear = ZeroClear(zero_bit);
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  __m256 acc2 = _mm256_setzero_ps(), acc3 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= count; i += 32) {
    const __m256 a = _mm256_loadu_ps(x + i);
    const __m256 b = _mm256_loadu_ps(x + i + 8);
    const __m256 c = _mm256_loadu_ps(x + i + 16);
    const __m256 d = _mm256_loadu_ps(x + i + 24);
    words[i / 32] = ~(MaskOf(ClearLanes(a, zero_clear)) | MaskOf(ClearLanes(b, zero_clear)) << 8 |
                      MaskOf(ClearLanes(c, zero_clear)) << 16 |
                      MaskOf(ClearLanes(d, zero_clear)) << 24);
    acc0 = _mm256_add_ps(acc0, _mm256_and_ps(a, abs_mask));
    acc1 = _mm256_add_ps(acc1, _mm256_and_ps(b, abs_mask));
    acc2 = _mm256_add_ps(acc2, _mm256_and_ps(c, abs_mask));
    acc3 = _mm256_add_ps(acc3, _mm256_and_ps(d, abs_mask));
  }
  float sum = SumLanes(acc0, acc1, acc2, acc3);
  if (i < count) sum += PackBlockGeneric(x + i, count - i, zero_bit, words + i / 32);
  return sum;
}

// PackBlockFloatAvx2's sum for p = g + e, in the same order, so that the EF
// scale equals sign_pack's scale of g + e.
__attribute__((target("avx2"))) float EfSumBlockFloatAvx2(const float* g, const float* e,
                                                          int64_t count) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  __m256 acc2 = _mm256_setzero_ps(), acc3 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= count; i += 32) {
    const __m256 a = _mm256_add_ps(_mm256_loadu_ps(g + i), _mm256_loadu_ps(e + i));
    const __m256 b = _mm256_add_ps(_mm256_loadu_ps(g + i + 8), _mm256_loadu_ps(e + i + 8));
    const __m256 c = _mm256_add_ps(_mm256_loadu_ps(g + i + 16), _mm256_loadu_ps(e + i + 16));
    const __m256 d = _mm256_add_ps(_mm256_loadu_ps(g + i + 24), _mm256_loadu_ps(e + i + 24));
    acc0 = _mm256_add_ps(acc0, _mm256_and_ps(a, abs_mask));
    acc1 = _mm256_add_ps(acc1, _mm256_and_ps(b, abs_mask));
    acc2 = _mm256_add_ps(acc2, _mm256_and_ps(c, abs_mask));
    acc3 = _mm256_add_ps(acc3, _mm256_and_ps(d, abs_mask));
  }
  float sum = SumLanes(acc0, acc1, acc2, acc3);
  if (i < count) sum += EfSumBlockGeneric(g + i, e + i, count - i);
  return sum;
}

// 8 elements of p = g + e: their clear-bit lanes, and the residuals
// p - (+-scale) stored to residual.
template <bool kStream>
__attribute__((target("avx2"))) inline uint32_t EfPack8(const float* g, const float* e,
                                                       __m256 scale, __m256 neg_scale,
                                                       __m256i zero_clear, float* residual) {
  const __m256 p = _mm256_add_ps(_mm256_loadu_ps(g), _mm256_loadu_ps(e));
  const __m256i clear = ClearLanes(p, zero_clear);
  // A clear bit was sent as -scale, a set one as +scale.
  const __m256 sent = _mm256_blendv_ps(scale, neg_scale, _mm256_castsi256_ps(clear));
  if (kStream) {
    _mm256_stream_ps(residual, _mm256_sub_ps(p, sent));
  } else {
    _mm256_storeu_ps(residual, _mm256_sub_ps(p, sent));
  }
  return MaskOf(clear);
}

// kStream: the residual is written with non-temporal stores (residual must be
// 32-byte aligned), which skip reading its lines into the cache first: on a
// tensor larger than the cache that read would be a sixth pass.
template <bool kStream>
__attribute__((target("avx2"))) void EfPackBlockFloatAvx2(const float* g, const float* e,
                                                          int64_t count, float scale,
                                                          uint32_t zero_bit, uint32_t* words,
                                                          float* residual) {
  const __m256 s = _mm256_set1_ps(scale), neg_s = _mm256_set1_ps(-scale);
  const __m256i zero_clear = ZeroClear(zero_bit);
  int64_t i = 0;
  for (; i + 32 <= count; i += 32) {
    const uint32_t clear =
        EfPack8<kStream>(g + i, e + i, s, neg_s, zero_clear, residual + i) |
        EfPack8<kStream>(g + i + 8, e + i + 8, s, neg_s, zero_clear, residual + i + 8) << 8 |
        EfPack8<kStream>(g + i + 16, e + i + 16, s, neg_s, zero_clear, residual + i + 16) << 16 |
        EfPack8<kStream>(g + i + 24, e + i + 24, s, neg_s, zero_clear, residual + i + 24) << 24;
    words[i / 32] = ~clear;
  }
  if (kStream) _mm_sfence();
  if (i < count) {
    EfPackBlockGeneric(g + i, e + i, count - i, scale, zero_bit, words + i / 32, residual + i);
  }
}

// Broadcasts word's 32 bits to 32 byte lanes: 0xff where the bit is set.
__attribute__((target("avx2"))) inline __m256i BitsToBytes(uint32_t word) {
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(static_cast<int>(word)),
      _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,  //
                       2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
  const __m256i select = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ull));
  return _mm256_cmpeq_epi8(_mm256_and_si256(spread, select), select);
}

// The votes of the k (<= 127) rows words[r * stride] as 32 int8 lanes in
// {-1, 0, +1}: positives counted per byte lane, then sign(2 positives - k),
// which fits in an int8 for k <= 127.
__attribute__((target("avx2"))) inline __m256i VotesAvx2(const uint32_t* words, int64_t stride,
                                                        int64_t k) {
  __m256i positives = _mm256_setzero_si256();
  for (int64_t r = 0; r < k; ++r) {
    positives = _mm256_sub_epi8(positives, BitsToBytes(words[r * stride]));  // 0xff is -1
  }
  const __m256i margin = _mm256_sub_epi8(_mm256_add_epi8(positives, positives),
                                         _mm256_set1_epi8(static_cast<char>(k)));
  const __m256i zero = _mm256_setzero_si256();
  // (margin < 0 ? -1 : 0) - (margin > 0 ? -1 : 0)
  return _mm256_sub_epi8(_mm256_cmpgt_epi8(zero, margin), _mm256_cmpgt_epi8(margin, zero));
}

// Stores 32 int8 votes as T: float and double by conversion, the 16-bit types
// by building the patterns of -1, 0, +1 (sign bit | (vote != 0 ? one : 0)).
template <typename T>
struct StoreVotes;
template <>
struct StoreVotes<float> {
  __attribute__((target("avx2"))) static void Store(__m256i votes, float* out) {
    const __m128i lo = _mm256_castsi256_si128(votes), hi = _mm256_extracti128_si256(votes, 1);
    _mm256_storeu_ps(out, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo)));
    _mm256_storeu_ps(out + 8, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8))));
    _mm256_storeu_ps(out + 16, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi)));
    _mm256_storeu_ps(out + 24, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8))));
  }
};
template <>
struct StoreVotes<double> {
  __attribute__((target("avx2"))) static void Store(__m256i votes, double* out) {
    const __m128i lo = _mm256_castsi256_si128(votes), hi = _mm256_extracti128_si256(votes, 1);
    const __m128i quarters[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
    for (int q = 0; q < 4; ++q) {
      const __m256i wide = _mm256_cvtepi8_epi32(quarters[q]);
      _mm256_storeu_pd(out + 8 * q, _mm256_cvtepi32_pd(_mm256_castsi256_si128(wide)));
      _mm256_storeu_pd(out + 8 * q + 4, _mm256_cvtepi32_pd(_mm256_extracti128_si256(wide, 1)));
    }
  }
};
template <uint16_t kOne>
struct StoreVotes16 {
  __attribute__((target("avx2"))) static void Store(__m256i votes, uint16_t* out) {
    const __m128i halves[2] = {_mm256_castsi256_si128(votes), _mm256_extracti128_si256(votes, 1)};
    for (int h = 0; h < 2; ++h) {
      const __m256i v = _mm256_cvtepi8_epi16(halves[h]);
      const __m256i nonzero = _mm256_xor_si256(_mm256_cmpeq_epi16(v, _mm256_setzero_si256()),
                                               _mm256_set1_epi16(-1));
      const __m256i bits = _mm256_or_si256(
          _mm256_and_si256(nonzero, _mm256_set1_epi16(static_cast<int16_t>(kOne))),
          _mm256_and_si256(v, _mm256_set1_epi16(static_cast<int16_t>(0x8000))));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 16 * h), bits);
    }
  }
};
template <>
struct StoreVotes<Eigen::half> {
  __attribute__((target("avx2"))) static void Store(__m256i votes, Eigen::half* out) {
    StoreVotes16<0x3c00>::Store(votes, reinterpret_cast<uint16_t*>(out));
  }
};
template <>
struct StoreVotes<Eigen::bfloat16> {
  __attribute__((target("avx2"))) static void Store(__m256i votes, Eigen::bfloat16* out) {
    StoreVotes16<0x3f80>::Store(votes, reinterpret_cast<uint16_t*>(out));
  }
};

// Majority over words of k <= 127 rows (InBlocks' rows, stride, first_word and
// count); the last word of n may be partial.
template <typename T>
__attribute__((target("avx2"))) void MajorityAvx2(const uint32_t* rows, int64_t stride, int64_t k,
                                                  int64_t n, int64_t first_word, int64_t count,
                                                  T* out) {
  for (int64_t i = 0; i < count; ++i) {
    const int64_t w = first_word + i;
    const __m256i votes = VotesAvx2(rows + i, stride, k);
    const int64_t first = w * sign::kBitsPerWord;
    if (n - first >= sign::kBitsPerWord) {
      StoreVotes<T>::Store(votes, out + first);
    } else {
      T tail[sign::kBitsPerWord];
      StoreVotes<T>::Store(votes, tail);
      for (int64_t i = first; i < n; ++i) out[i] = tail[i - first];
    }
  }
}

// The scaled-sign sum over words [w_begin, w_end) for float: 8 elements per
// instruction, each worker's term added in row order from +0, as the generic
// path. Lane j of group q shifts bit 8q + j of the word into the sign bit, and
// -scale with that sign bit flipped is the term: +scale for a set bit.
__attribute__((target("avx2"))) void ScaledSumFloatAvx2(const uint32_t* rows, int64_t stride,
                                                        const float* scales, int64_t k, int64_t n,
                                                        float weight, int64_t first_word,
                                                        int64_t count, float* out) {
  const __m256i sign_bit = _mm256_set1_epi32(static_cast<int>(0x80000000u));
  const __m256i shifts[4] = {_mm256_setr_epi32(31, 30, 29, 28, 27, 26, 25, 24),
                             _mm256_setr_epi32(23, 22, 21, 20, 19, 18, 17, 16),
                             _mm256_setr_epi32(15, 14, 13, 12, 11, 10, 9, 8),
                             _mm256_setr_epi32(7, 6, 5, 4, 3, 2, 1, 0)};
  const __m256 w8 = _mm256_set1_ps(weight);
  for (int64_t i = 0; i < count; ++i) {
    const int64_t w = first_word + i;
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                     _mm256_setzero_ps()};
    for (int64_t r = 0; r < k; ++r) {
      const __m256i word = _mm256_set1_epi32(static_cast<int>(rows[r * stride + i]));
      const __m256i neg_scale = _mm256_castps_si256(_mm256_set1_ps(-scales[r]));
      for (int q = 0; q < 4; ++q) {
        const __m256i bit = _mm256_and_si256(_mm256_sllv_epi32(word, shifts[q]), sign_bit);
        acc[q] = _mm256_add_ps(acc[q], _mm256_castsi256_ps(_mm256_xor_si256(neg_scale, bit)));
      }
    }
    const int64_t first = w * sign::kBitsPerWord;
    if (n - first >= sign::kBitsPerWord) {
      for (int q = 0; q < 4; ++q) _mm256_storeu_ps(out + first + 8 * q, _mm256_mul_ps(acc[q], w8));
    } else {
      alignas(32) float values[sign::kBitsPerWord];
      for (int q = 0; q < 4; ++q) _mm256_store_ps(values + 8 * q, _mm256_mul_ps(acc[q], w8));
      std::memcpy(out + first, values, (n - first) * sizeof(float));
    }
  }
}
#endif

template <typename T>
typename sign::Accumulator<T>::type PackBlock(const T* x, int64_t count, uint32_t zero_bit,
                                              uint32_t* words) {
  return PackBlockGeneric(x, count, zero_bit, words);
}

template <typename T>
typename sign::Accumulator<T>::type EfSumBlock(const T* g, const T* e, int64_t count) {
  return EfSumBlockGeneric(g, e, count);
}

// Tensors of at least this many bytes write their outputs with non-temporal
// stores where the kernel has them: they would not stay in the cache anyway.
constexpr int64_t kStreamBytes = int64_t{8} << 20;

template <typename T>
void EfPackBlock(const T* g, const T* e, int64_t count, T scale, uint32_t zero_bit,
                 uint32_t* words, T* residual, bool /*stream*/) {
  EfPackBlockGeneric(g, e, count, scale, zero_bit, words, residual);
}

#if TFCOMP_X86
template <>
float PackBlock<float>(const float* x, int64_t count, uint32_t zero_bit, uint32_t* words) {
  return IsaSupported(Isa::kAvx2) ? PackBlockFloatAvx2(x, count, zero_bit, words)
                                  : PackBlockGeneric(x, count, zero_bit, words);
}

template <>
float EfSumBlock<float>(const float* g, const float* e, int64_t count) {
  return IsaSupported(Isa::kAvx2) ? EfSumBlockFloatAvx2(g, e, count)
                                  : EfSumBlockGeneric(g, e, count);
}

template <>
void EfPackBlock<float>(const float* g, const float* e, int64_t count, float scale,
                        uint32_t zero_bit, uint32_t* words, float* residual, bool stream) {
  if (IsaSupported(Isa::kAvx2)) {
    if (stream && reinterpret_cast<uintptr_t>(residual) % 32 == 0) {
      EfPackBlockFloatAvx2<true>(g, e, count, scale, zero_bit, words, residual);
    } else {
      EfPackBlockFloatAvx2<false>(g, e, count, scale, zero_bit, words, residual);
    }
  } else {
    EfPackBlockGeneric(g, e, count, scale, zero_bit, words, residual);
  }
}
#endif

// kSpreadByte[v] holds the 8 bits of byte v in 8 separate bytes, so that
// adding spread words counts each bit position in its own byte lane.
constexpr uint64_t SpreadByte(unsigned v) {
  uint64_t spread = 0;
  for (int j = 0; j < 8; ++j) spread |= static_cast<uint64_t>((v >> j) & 1u) << (8 * j);
  return spread;
}
struct SpreadTable {
  uint64_t entries[256];
  constexpr SpreadTable() : entries() {
    for (unsigned v = 0; v < 256; ++v) entries[v] = SpreadByte(v);
  }
};
constexpr SpreadTable kSpreadByte;

// positives[b] = number of the k words rows[r * stride] with bit b set.
// Counts 8 bit positions per 64-bit add; byte lanes are flushed every 255 rows.
void CountSetBits(const uint32_t* rows, int64_t stride, int64_t k, int32_t* positives) {
  for (int b = 0; b < sign::kBitsPerWord; ++b) positives[b] = 0;
  for (int64_t r0 = 0; r0 < k; r0 += 255) {
    const int64_t r1 = std::min<int64_t>(k, r0 + 255);
    uint64_t lanes[4] = {0, 0, 0, 0};
    for (int64_t r = r0; r < r1; ++r) {
      const uint32_t word = rows[r * stride];
      for (int c = 0; c < 4; ++c) lanes[c] += kSpreadByte.entries[(word >> (8 * c)) & 0xffu];
    }
    for (int c = 0; c < 4; ++c) {
      for (int j = 0; j < 8; ++j) positives[8 * c + j] += static_cast<int32_t>((lanes[c] >> (8 * j)) & 0xffu);
    }
  }
}

// Generic majority (InBlocks' rows, stride, first_word and count).
template <typename T>
void MajorityGeneric(const uint32_t* rows, int64_t stride, int64_t k, int64_t n, int64_t first_word,
                     int64_t count, T* out) {
  // The three values, converted once: a conversion per element (half, bfloat16)
  // would cost more than the memory traffic.
  const T choices[3] = {static_cast<T>(-1.0f), static_cast<T>(0.0f), static_cast<T>(1.0f)};
  for (int64_t i = 0; i < count; ++i) {
    const int64_t w = first_word + i;
    int32_t positives[sign::kBitsPerWord];
    CountSetBits(rows + i, stride, k, positives);
    const int64_t first = w * sign::kBitsPerWord;
    const int bits = static_cast<int>(std::min<int64_t>(sign::kBitsPerWord, n - first));
    for (int b = 0; b < bits; ++b) out[first + b] = choices[sign::MajorityVote(positives[b], k) + 1];
  }
}

// Generic scaled-sign sum (InBlocks' rows, stride, first_word and count): for
// each element, the rows' terms added in row order from 0, then times weight.
template <typename T>
void ScaledSumGeneric(const uint32_t* rows, int64_t stride,
                      const typename sign::Accumulator<T>::type* scales,
                      int64_t k, int64_t n, typename sign::Accumulator<T>::type weight,
                      int64_t first_word, int64_t count, T* out) {
  using Acc = typename sign::Accumulator<T>::type;
  for (int64_t i = 0; i < count; ++i) {
    const int64_t w = first_word + i;
    Acc acc[sign::kBitsPerWord] = {};
    for (int64_t r = 0; r < k; ++r) {
      const uint32_t word = rows[r * stride + i];
      for (int b = 0; b < sign::kBitsPerWord; ++b) acc[b] += sign::ScaledSign(word, b, scales[r]);
    }
    const int64_t first = w * sign::kBitsPerWord;
    const int bits = static_cast<int>(std::min<int64_t>(sign::kBitsPerWord, n - first));
    for (int b = 0; b < bits; ++b) out[first + b] = static_cast<T>(acc[b] * weight);
  }
}

}  // namespace

namespace functor {

template <typename T>
struct SignPack<CPUDevice, T> {
  void operator()(OpKernelContext* ctx, const T* x, int64_t n, uint32_t zero_bit,
                  uint32_t* words, T* scale) {
    const int64_t blocks = sign::NumScaleBlocks(n);
    std::vector<double> block_sums(blocks);
    ShardCpu(ctx, blocks, sign::kScaleBlockElements * 2, [&](int64_t begin, int64_t end) {
      for (int64_t b = begin; b < end; ++b) {
        const int64_t first = b * sign::kScaleBlockElements;
        const int64_t count = std::min(sign::kScaleBlockElements, n - first);
        block_sums[b] = static_cast<double>(
            PackBlock(x + first, count, zero_bit, words + first / sign::kBitsPerWord));
      }
    });
    double total = 0;
    for (double s : block_sums) total += s;
    *scale = static_cast<T>(n > 0 ? total / static_cast<double>(n) : 0.0);
  }
};

template <typename T>
struct SignEfPack<CPUDevice, T> {
  void operator()(OpKernelContext* ctx, const T* g, const T* e, int64_t n, uint32_t zero_bit,
                  uint32_t* words, T* scale, T* residual) {
    const int64_t blocks = sign::NumScaleBlocks(n);
    std::vector<double> block_sums(blocks);
    // Pass 1: the scale, in sign_pack's blocks and order.
    ShardCpu(ctx, blocks, sign::kScaleBlockElements * 2, [&](int64_t begin, int64_t end) {
      for (int64_t b = begin; b < end; ++b) {
        const int64_t first = b * sign::kScaleBlockElements;
        const int64_t count = std::min(sign::kScaleBlockElements, n - first);
        block_sums[b] = static_cast<double>(EfSumBlock(g + first, e + first, count));
      }
    });
    double total = 0;
    for (double s : block_sums) total += s;
    const T s = static_cast<T>(n > 0 ? total / static_cast<double>(n) : 0.0);
    *scale = s;
    // Pass 2: the words and the residuals.
    const bool stream = n * static_cast<int64_t>(sizeof(T)) >= kStreamBytes;
    ShardCpu(ctx, blocks, sign::kScaleBlockElements * 4, [&](int64_t begin, int64_t end) {
      for (int64_t b = begin; b < end; ++b) {
        const int64_t first = b * sign::kScaleBlockElements;
        const int64_t count = std::min(sign::kScaleBlockElements, n - first);
        EfPackBlock(g + first, e + first, count, s, zero_bit, words + first / sign::kBitsPerWord,
                    residual + first, stream);
      }
    });
  }
};

template <typename T>
struct SignUnpack<CPUDevice, T> {
  void operator()(OpKernelContext* ctx, const uint32_t* words, const T* scale, int64_t n,
                  T* out) {
    const T s = *scale;
    ShardCpu(ctx, sign::NumWords(n), 32 * 2, [&](int64_t begin, int64_t end) {
      for (int64_t w = begin; w < end; ++w) {
        const int64_t first = w * sign::kBitsPerWord;
        const int bits = static_cast<int>(std::min<int64_t>(sign::kBitsPerWord, n - first));
        const uint32_t word = words[w];
        if (bits == sign::kBitsPerWord) {
          // A fixed trip count lets the compiler turn this into vector blends.
          for (int b = 0; b < sign::kBitsPerWord; ++b) out[first + b] = sign::UnpackValue(word, b, s);
        } else {
          for (int b = 0; b < bits; ++b) out[first + b] = sign::UnpackValue(word, b, s);
        }
      }
    });
  }
};

template <typename T>
struct SignMajority<CPUDevice, T> {
  void operator()(OpKernelContext* ctx, const uint32_t* words, int64_t k,
                  int64_t num_words, int64_t n, T* out) {
    ShardCpu(ctx, sign::NumWords(n), 8 * (k + 4), [&](int64_t begin, int64_t end) {
      InBlocks(words, k, num_words, begin, end,
               [&](const uint32_t* rows, int64_t stride, int64_t first, int64_t count) {
#if TFCOMP_X86
                 // Byte counters: up to 127 rows (a wider K takes the generic path).
                 if (k <= 127 && IsaSupported(Isa::kAvx2)) {
                   MajorityAvx2(rows, stride, k, n, first, count, out);
                   return;
                 }
#endif
                 MajorityGeneric(rows, stride, k, n, first, count, out);
               });
    });
  }
};

template <typename T>
struct SignScaledSum<CPUDevice, T> {
  void operator()(OpKernelContext* ctx, const uint32_t* words, const T* scales, int64_t k,
                  int64_t num_words, int64_t n, T weight, T* out) {
    using Acc = typename sign::Accumulator<T>::type;
    std::vector<Acc> wide(k);
    for (int64_t r = 0; r < k; ++r) wide[r] = static_cast<Acc>(scales[r]);
    const Acc wide_weight = static_cast<Acc>(weight);
    ShardCpu(ctx, sign::NumWords(n), 32 * (k + 2), [&](int64_t begin, int64_t end) {
      InBlocks(words, k, num_words, begin, end,
               [&](const uint32_t* rows, int64_t stride, int64_t first, int64_t count) {
#if TFCOMP_X86
                 if constexpr (std::is_same<T, float>::value) {
                   if (IsaSupported(Isa::kAvx2)) {
                     ScaledSumFloatAvx2(rows, stride, wide.data(), k, n, wide_weight, first, count, out);
                     return;
                   }
                 }
#endif
                 ScaledSumGeneric(rows, stride, wide.data(), k, n, wide_weight, first, count, out);
               });
    });
  }
};

}  // namespace functor

namespace {

// Reads the scalar element count n and checks it fits in num_words words.
tensorflow::Status ReadCount(OpKernelContext* ctx, int index, int64_t num_words, int64_t* n) {
  const Tensor& t = ctx->input(index);
  if (!TensorShapeUtils::IsScalar(t.shape())) {
    return InvalidArgument("n must be a scalar int64, got shape ", t.shape().DebugString());
  }
  *n = t.scalar<int64_t>()();
  if (*n < 0) return InvalidArgument("n must be >= 0, got ", *n);
  if (*n > num_words * sign::kBitsPerWord) {
    return InvalidArgument("n = ", *n, " is larger than 32 * W = ", num_words * sign::kBitsPerWord,
                           " (W = ", num_words, " words hold at most that many signs)");
  }
  return tensorflow::Status();
}

// Reads the bool scalar zero_bit as 0 or 1.
tensorflow::Status ReadZeroBit(OpKernelContext* ctx, int index, uint32_t* zero_bit) {
  const Tensor& t = ctx->input(index);
  if (!TensorShapeUtils::IsScalar(t.shape())) {
    return InvalidArgument("zero_bit must be a scalar bool, got shape ", t.shape().DebugString());
  }
  *zero_bit = t.scalar<bool>()() ? 1u : 0u;
  return tensorflow::Status();
}

}  // namespace

template <typename Device, typename T>
class SignPackOp : public OpKernel {
 public:
  explicit SignPackOp(OpKernelConstruction* c) : OpKernel(c) {}

  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    const int64_t n = x.NumElements();
    uint32_t zero_bit = 1;
    OP_REQUIRES_OK(ctx, ReadZeroBit(ctx, 1, &zero_bit));
    Tensor* words = nullptr;
    Tensor* scale = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({sign::NumWords(n)}), &words));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({}), &scale));
    functor::SignPack<Device, T>()(ctx, x.flat<T>().data(), n, zero_bit,
                                   words->flat<uint32_t>().data(), scale->flat<T>().data());
  }
};

template <typename Device, typename T>
class SignEfPackOp : public OpKernel {
 public:
  explicit SignEfPackOp(OpKernelConstruction* c) : OpKernel(c) {}

  void Compute(OpKernelContext* ctx) override {
    const Tensor& g = ctx->input(0);
    const Tensor& e = ctx->input(1);
    OP_REQUIRES(ctx, g.shape() == e.shape(),
                InvalidArgument("grad and residual must have the same shape, got ",
                                g.shape().DebugString(), " and ", e.shape().DebugString()));
    uint32_t zero_bit = 1;
    OP_REQUIRES_OK(ctx, ReadZeroBit(ctx, 2, &zero_bit));
    const int64_t n = g.NumElements();
    Tensor* words = nullptr;
    Tensor* scale = nullptr;
    Tensor* residual = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({sign::NumWords(n)}), &words));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({}), &scale));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, g.shape(), &residual));
    functor::SignEfPack<Device, T>()(ctx, g.flat<T>().data(), e.flat<T>().data(), n, zero_bit,
                                     words->flat<uint32_t>().data(), scale->flat<T>().data(),
                                     residual->flat<T>().data());
  }
};

template <typename Device, typename T>
class SignUnpackOp : public OpKernel {
 public:
  explicit SignUnpackOp(OpKernelConstruction* c) : OpKernel(c) {}

  void Compute(OpKernelContext* ctx) override {
    const Tensor& words = ctx->input(0);
    const Tensor& scale = ctx->input(1);
    OP_REQUIRES(ctx, TensorShapeUtils::IsVector(words.shape()),
                InvalidArgument("words must be a vector (rank 1) of uint32, got shape ",
                                words.shape().DebugString()));
    OP_REQUIRES(ctx, TensorShapeUtils::IsScalar(scale.shape()),
                InvalidArgument("scale must be a scalar, got shape ", scale.shape().DebugString()));
    int64_t n = 0;
    OP_REQUIRES_OK(ctx, ReadCount(ctx, 2, words.NumElements(), &n));
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({n}), &out));
    if (n == 0) return;
    functor::SignUnpack<Device, T>()(ctx, words.flat<uint32_t>().data(),
                                     scale.flat<T>().data(), n, out->flat<T>().data());
  }
};

template <typename Device, typename T>
class SignMajorityOp : public OpKernel {
 public:
  explicit SignMajorityOp(OpKernelConstruction* c) : OpKernel(c) {}

  void Compute(OpKernelContext* ctx) override {
    const Tensor& words = ctx->input(0);
    OP_REQUIRES(ctx, TensorShapeUtils::IsMatrix(words.shape()),
                InvalidArgument("words must be a matrix [workers, words_per_worker] (rank 2) "
                                "of uint32, got shape ", words.shape().DebugString()));
    const int64_t k = words.dim_size(0);
    const int64_t num_words = words.dim_size(1);
    OP_REQUIRES(ctx, k >= 1, InvalidArgument("words must hold at least one worker's row, got 0"));
    int64_t n = 0;
    OP_REQUIRES_OK(ctx, ReadCount(ctx, 1, num_words, &n));
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({n}), &out));
    if (n == 0) return;
    functor::SignMajority<Device, T>()(ctx, words.flat<uint32_t>().data(), k, num_words, n,
                                       out->flat<T>().data());
  }
};

template <typename Device, typename T>
class SignScaledSumOp : public OpKernel {
 public:
  explicit SignScaledSumOp(OpKernelConstruction* c) : OpKernel(c) {}

  void Compute(OpKernelContext* ctx) override {
    const Tensor& words = ctx->input(0);
    const Tensor& scales = ctx->input(1);
    const Tensor& weight = ctx->input(3);
    OP_REQUIRES(ctx, TensorShapeUtils::IsMatrix(words.shape()),
                InvalidArgument("words must be a matrix [workers, words_per_worker] (rank 2) "
                                "of uint32, got shape ", words.shape().DebugString()));
    const int64_t k = words.dim_size(0);
    const int64_t num_words = words.dim_size(1);
    OP_REQUIRES(ctx, k >= 1, InvalidArgument("words must hold at least one worker's row, got 0"));
    OP_REQUIRES(ctx, TensorShapeUtils::IsVector(scales.shape()) && scales.dim_size(0) == k,
                InvalidArgument("scales must be a vector of one scale per worker (", k,
                                "), got shape ", scales.shape().DebugString()));
    OP_REQUIRES(ctx, TensorShapeUtils::IsScalar(weight.shape()),
                InvalidArgument("weight must be a scalar, got shape ",
                                weight.shape().DebugString()));
    int64_t n = 0;
    OP_REQUIRES_OK(ctx, ReadCount(ctx, 2, num_words, &n));
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({n}), &out));
    if (n == 0) return;
    functor::SignScaledSum<Device, T>()(ctx, words.flat<uint32_t>().data(),
                                        scales.flat<T>().data(), k, num_words, n,
                                        weight.scalar<T>()(), out->flat<T>().data());
  }
};

#define TFCOMP_REGISTER_SIGN_KERNELS(DEVICE, DEVICE_TYPE, T)                           \
  REGISTER_KERNEL_BUILDER(                                                              \
      Name("TfcompSignPack").Device(DEVICE).HostMemory("zero_bit").TypeConstraint<T>("T"), \
      SignPackOp<DEVICE_TYPE, T>);                                                      \
  REGISTER_KERNEL_BUILDER(                                                              \
      Name("TfcompSignEfPack").Device(DEVICE).HostMemory("zero_bit").TypeConstraint<T>("T"), \
      SignEfPackOp<DEVICE_TYPE, T>);                                                    \
  REGISTER_KERNEL_BUILDER(Name("TfcompSignScaledSum")                                   \
                              .Device(DEVICE)                                           \
                              .HostMemory("n")                                          \
                              .HostMemory("weight")                                     \
                              .TypeConstraint<T>("T"),                                  \
                          SignScaledSumOp<DEVICE_TYPE, T>);                             \
  REGISTER_KERNEL_BUILDER(                                                              \
      Name("TfcompSignUnpack").Device(DEVICE).HostMemory("n").TypeConstraint<T>("T"),   \
      SignUnpackOp<DEVICE_TYPE, T>);                                                    \
  REGISTER_KERNEL_BUILDER(                                                              \
      Name("TfcompSignMajority").Device(DEVICE).HostMemory("n").TypeConstraint<T>("dtype"), \
      SignMajorityOp<DEVICE_TYPE, T>);

#define TFCOMP_REGISTER_SIGN_CPU(T) TFCOMP_REGISTER_SIGN_KERNELS(DEVICE_CPU, CPUDevice, T)
TFCOMP_REGISTER_SIGN_CPU(Eigen::half)
TFCOMP_REGISTER_SIGN_CPU(Eigen::bfloat16)
TFCOMP_REGISTER_SIGN_CPU(float)
TFCOMP_REGISTER_SIGN_CPU(double)
#undef TFCOMP_REGISTER_SIGN_CPU

#if GOOGLE_CUDA
#define TFCOMP_REGISTER_SIGN_GPU(T) \
  TFCOMP_REGISTER_SIGN_KERNELS(::tensorflow::DEVICE_GPU, GPUDevice, T)
TFCOMP_REGISTER_SIGN_GPU(Eigen::half)
TFCOMP_REGISTER_SIGN_GPU(Eigen::bfloat16)
TFCOMP_REGISTER_SIGN_GPU(float)
TFCOMP_REGISTER_SIGN_GPU(double)
#undef TFCOMP_REGISTER_SIGN_GPU
#endif  // GOOGLE_CUDA

#undef TFCOMP_REGISTER_SIGN_KERNELS

}  // namespace tfcomp
