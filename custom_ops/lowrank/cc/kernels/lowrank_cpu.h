// The CPU loops of the low-rank residual and product ops, on plain pointers: no TensorFlow
// (lowrank_kernels.cc shards them over the op's threads; the core test runs
// every instruction-set path against lowrank_core.h's reference).
//
// q[k, r] is first packed into panels of W columns (W = kVectors vectors of
// the instruction set: 64 floats or 32 doubles with AVX-512, 16 floats or 8
// doubles with AVX2):
//
//   packed[(panel * r + j) * W + col] = q[panel * W + col, j],  zeros past k,
//
// so that one panel's q is a single contiguous r * W run. Rows of m are then
// taken 4 at a time; for each panel the 4 x W block of m is loaded into
// registers, all r updates acc = fma(-p[i, j], q[c, j], acc) are applied there
// (one broadcast of p and one vector load of q per 4 x 1 vector FMAs), and the
// block is stored: m is read once and the residual written once. The last
// partial panel uses masked loads and stores, so no scalar tail is needed.
//
// Measured on one thread of an AVX-512 CPU (float, 1024^2 and 4096^2 m), this
// beats streaming each row r + 1 times through L1 (for j: out_row -= p[i, j] *
// q^T[j, :], q transposed once) by 1.2-1.8x at r = 4 and 2.6-6x at r = 32, and
// the same register blocking on an unpacked transposed q (r strided streams
// per panel) by 1.25-1.75x at r >= 16; iterating columns outer and r inner on
// the unpacked q[k, r] does not vectorize and is 2x (r = 1) to 34x (r = 32)
// slower.
#ifndef TFCOMP_CUSTOM_OPS_LOWRANK_CC_KERNELS_LOWRANK_CPU_H_
#define TFCOMP_CUSTOM_OPS_LOWRANK_CC_KERNELS_LOWRANK_CPU_H_

#include <algorithm>
#include <cstdint>

#include "custom_ops/common/cpu_isa.h"
#include "lowrank_core.h"

namespace tfcomp {
namespace lowrank {
namespace cpu {

// Rows of m handled together (they share each vector load of q).
constexpr int kRowBlock = 4;

using ::tfcomp::BestIsa;
using ::tfcomp::Isa;
using ::tfcomp::IsaName;
using ::tfcomp::IsaSupported;

// Columns per packed panel of q for an instruction set: kVectors vectors of Acc
// (4 of 64 bytes with AVX-512, 2 of 32 bytes with AVX2).
template <typename Acc>
constexpr int64_t PanelWidth(Isa isa) {
  return isa == Isa::kAvx512 ? 4 * 64 / sizeof(Acc) : isa == Isa::kAvx2 ? 2 * 32 / sizeof(Acc) : 8;
}

inline int64_t NumPanels(int64_t k, int64_t width) { return (k + width - 1) / width; }

// Elements of the packed q.
inline int64_t PackedSize(int64_t k, int64_t r, int64_t width) {
  return NumPanels(k, width) * width * r;
}

// Packs panels [panel_begin, panel_end) of q[k, r] (converted to Acc).
template <typename T, typename Acc>
void PackQ(const T* q, int64_t k, int64_t r, int64_t width, int64_t panel_begin,
           int64_t panel_end, Acc* packed) {
  for (int64_t panel = panel_begin; panel < panel_end; ++panel) {
    Acc* dst = packed + panel * r * width;
    const int64_t first = panel * width;
    const int64_t cols = std::min(width, k - first);
    for (int64_t j = 0; j < r; ++j) {
      for (int64_t col = 0; col < cols; ++col) {
        dst[j * width + col] = static_cast<Acc>(q[(first + col) * r + j]);
      }
      for (int64_t col = cols; col < width; ++col) dst[j * width + col] = Acc(0);
    }
  }
}

// out[rows, k] = m[rows, k] - p[rows, r] q^T, row-major, q packed with panels
// of `width` columns; zero: 0 - p q^T, m not read. Any instruction set; out may be m.
template <typename Acc>
void ResidualRowsGeneric(const Acc* m, const Acc* p, const Acc* packed, Acc* out, int64_t rows,
                         int64_t k, int64_t r, int64_t width, bool zero) {
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t c = 0; c < k; ++c) {
      const Acc* qc = packed + (c / width) * r * width + c % width;
      Acc acc = zero ? Acc(0) : m[i * k + c];
      for (int64_t j = 0; j < r; ++j) acc = ResidualStep(acc, p[i * r + j], qc[j * width]);
      out[i * k + c] = acc;
    }
  }
}

// The compensate op's q, transposed and padded: qt[j * PaddedColumns(k) + c] =
// q[c, j] (converted to Acc), zeros for c >= k, so a row's columns and each
// rank's q run side by side in whole groups of kDotLanes.
inline int64_t PaddedColumns(int64_t k) { return (k + kDotLanes - 1) / kDotLanes * kDotLanes; }

// Ranks [rank_begin, rank_end) of q[k, r] into qt (see PaddedColumns).
template <typename T, typename Acc>
void TransposeQ(const T* q, int64_t k, int64_t r, int64_t rank_begin, int64_t rank_end, Acc* qt) {
  const int64_t padded = PaddedColumns(k);
  for (int64_t j = rank_begin; j < rank_end; ++j) {
    for (int64_t c = 0; c < k; ++c) qt[j * padded + c] = static_cast<Acc>(q[c * r + j]);
    for (int64_t c = k; c < padded; ++c) qt[j * padded + c] = Acc(0);
  }
}

// The compensate op on `rows` rows (lowrank_core.h): m = g + e written to m_out
// (add; else m = g, e and m_out not touched), and p[rows, r] =
// m qt^T summed in kDotLanes lanes. Any instruction set; the reference's order.
template <typename Acc>
void CompensateRowsGeneric(const Acc* g, const Acc* e, const Acc* qt, Acc* m_out, Acc* p,
                           int64_t rows, int64_t k, int64_t r, bool add) {
  const int64_t padded = PaddedColumns(k);
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < r; ++j) {
      Acc s[kDotLanes];
      for (int l = 0; l < kDotLanes; ++l) s[l] = Acc(0);
      for (int64_t c = 0; c < padded; ++c) {
        Acc m = Acc(0);
        if (c < k) {
          m = add ? g[i * k + c] + e[i * k + c] : g[i * k + c];
          if (add && j == 0) m_out[i * k + c] = m;
        }
        s[c % kDotLanes] = FusedMulAdd(m, qt[j * padded + c], s[c % kDotLanes]);
      }
      p[i * r + j] = SumLanes(s);
    }
    if (add && r == 0) {
      for (int64_t c = 0; c < k; ++c) m_out[i * k + c] = g[i * k + c] + e[i * k + c];
    }
  }
}

// The project op's partial sum of one row block over columns [c0, c1): part[j * k
// + c] = sum over rows [0, rows) of m[i, c] p[i, j] (m and p pointing at the
// block's first row), fma from +0 row by row in order. Any instruction set.
template <typename Acc>
void ProjectBlockGeneric(const Acc* m, const Acc* p, Acc* part, int64_t rows, int64_t k,
                         int64_t r, int64_t c0, int64_t c1) {
  for (int64_t j = 0; j < r; ++j) {
    for (int64_t c = c0; c < c1; ++c) {
      Acc s = Acc(0);
      for (int64_t i = 0; i < rows; ++i) s = FusedMulAdd(m[i * k + c], p[i * r + j], s);
      part[j * k + c] = s;
    }
  }
}

#if TFCOMP_X86

#pragma GCC push_options
#pragma GCC target("avx2,fma")
namespace avx2 {

struct FloatOps {
  using Acc = float;
  using V = __m256;
  static constexpr int kLanes = 8;
  static constexpr int kVectors = 2;  // 4 x 2 accumulators + 2 of q + p: 11 of 16 registers
  static V Load(const float* x) { return _mm256_loadu_ps(x); }
  static void Store(float* x, V v) { _mm256_storeu_ps(x, v); }
  static void Stream(float* x, V v) { _mm256_stream_ps(x, v); }  // x 32-byte aligned
  static __m256i Mask(int count) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(count), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  static V LoadPartial(const float* x, int count) { return _mm256_maskload_ps(x, Mask(count)); }
  static void StorePartial(float* x, V v, int count) { _mm256_maskstore_ps(x, Mask(count), v); }
  static V Broadcast(const float* x) { return _mm256_broadcast_ss(x); }
  static V Zero() { return _mm256_setzero_ps(); }
  static V FnmAdd(V a, V b, V c) { return _mm256_fnmadd_ps(a, b, c); }  // c - a * b, rounded once
  static V FmAdd(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }    // a * b + c, rounded once
  static V Add(V a, V b) { return _mm256_add_ps(a, b); }
  static constexpr int kRegisters = 16;
};

struct DoubleOps {
  using Acc = double;
  using V = __m256d;
  static constexpr int kLanes = 4;
  static constexpr int kVectors = 2;
  static V Load(const double* x) { return _mm256_loadu_pd(x); }
  static void Store(double* x, V v) { _mm256_storeu_pd(x, v); }
  static void Stream(double* x, V v) { _mm256_stream_pd(x, v); }  // x 32-byte aligned
  static __m256i Mask(int count) {
    return _mm256_cmpgt_epi64(_mm256_set1_epi64x(count), _mm256_setr_epi64x(0, 1, 2, 3));
  }
  static V LoadPartial(const double* x, int count) { return _mm256_maskload_pd(x, Mask(count)); }
  static void StorePartial(double* x, V v, int count) { _mm256_maskstore_pd(x, Mask(count), v); }
  static V Broadcast(const double* x) { return _mm256_broadcast_sd(x); }
  static V Zero() { return _mm256_setzero_pd(); }
  static V FnmAdd(V a, V b, V c) { return _mm256_fnmadd_pd(a, b, c); }
  static V FmAdd(V a, V b, V c) { return _mm256_fmadd_pd(a, b, c); }
  static V Add(V a, V b) { return _mm256_add_pd(a, b); }
  static constexpr int kRegisters = 16;
};

#include "custom_ops/lowrank/cc/kernels/lowrank_cpu_panel.inc"

}  // namespace avx2
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f")
namespace avx512 {

struct FloatOps {
  using Acc = float;
  using V = __m512;
  static constexpr int kLanes = 16;
  static constexpr int kVectors = 4;  // 4 x 4 accumulators + 4 of q + p: 21 of 32 registers
  static V Load(const float* x) { return _mm512_loadu_ps(x); }
  static void Store(float* x, V v) { _mm512_storeu_ps(x, v); }
  static void Stream(float* x, V v) { _mm512_stream_ps(x, v); }  // x 64-byte aligned
  static __mmask16 Mask(int count) { return static_cast<__mmask16>((1u << count) - 1); }
  static V LoadPartial(const float* x, int count) { return _mm512_maskz_loadu_ps(Mask(count), x); }
  static void StorePartial(float* x, V v, int count) { _mm512_mask_storeu_ps(x, Mask(count), v); }
  static V Broadcast(const float* x) { return _mm512_set1_ps(*x); }
  static V Zero() { return _mm512_setzero_ps(); }
  static V FnmAdd(V a, V b, V c) { return _mm512_fnmadd_ps(a, b, c); }
  static V FmAdd(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V Add(V a, V b) { return _mm512_add_ps(a, b); }
  static constexpr int kRegisters = 32;
};

struct DoubleOps {
  using Acc = double;
  using V = __m512d;
  static constexpr int kLanes = 8;
  static constexpr int kVectors = 4;
  static V Load(const double* x) { return _mm512_loadu_pd(x); }
  static void Store(double* x, V v) { _mm512_storeu_pd(x, v); }
  static void Stream(double* x, V v) { _mm512_stream_pd(x, v); }  // x 64-byte aligned
  static __mmask8 Mask(int count) { return static_cast<__mmask8>((1u << count) - 1); }
  static V LoadPartial(const double* x, int count) { return _mm512_maskz_loadu_pd(Mask(count), x); }
  static void StorePartial(double* x, V v, int count) { _mm512_mask_storeu_pd(x, Mask(count), v); }
  static V Broadcast(const double* x) { return _mm512_set1_pd(*x); }
  static V Zero() { return _mm512_setzero_pd(); }
  static V FnmAdd(V a, V b, V c) { return _mm512_fnmadd_pd(a, b, c); }
  static V FmAdd(V a, V b, V c) { return _mm512_fmadd_pd(a, b, c); }
  static V Add(V a, V b) { return _mm512_add_pd(a, b); }
  static constexpr int kRegisters = 32;
};

#include "custom_ops/lowrank/cc/kernels/lowrank_cpu_panel.inc"

}  // namespace avx512
#pragma GCC pop_options

#endif  // TFCOMP_X86

template <typename Acc>
struct IsaOps;
#if TFCOMP_X86
template <>
struct IsaOps<float> {
  using Avx2 = avx2::FloatOps;
  using Avx512 = avx512::FloatOps;
};
template <>
struct IsaOps<double> {
  using Avx2 = avx2::DoubleOps;
  using Avx512 = avx512::DoubleOps;
};
#endif

// Outputs of at least this many bytes are written with non-temporal stores
// (straight to memory, without first reading each line for ownership) where
// their rows are 64-byte aligned. Measured on one thread of an AVX-512 CPU
// (32 MB L3): the residual of a 2048^2 or 4096^2 float m runs 1.1-2x faster
// that way (most at small r, where it is bound by memory), that of a 1024^2 one
// about as fast. Not for out == m: those lines were just read into the cache,
// there is no read for ownership to save, and streaming them out is slower.
constexpr int64_t kStreamingBytes = int64_t{8} << 20;

// out[rows, k] = m[rows, k] - p[rows, r] q^T with the loop of `isa` (which the
// CPU must run, see IsaSupported); q packed by PackQ with PanelWidth<Acc>(isa).
// Row-major, leading dimensions k and r; out may be m. stream: non-temporal
// stores (see kStreamingBytes), where out's rows are 64-byte aligned. zero:
// 0 - p q^T, m not read (the product op passes -p).
template <typename Acc>
void ResidualRows(Isa isa, const Acc* m, const Acc* p, const Acc* packed, Acc* out, int64_t rows,
                  int64_t k, int64_t r, bool stream = false, bool zero = false) {
#if TFCOMP_X86
  if (isa == Isa::kAvx512) {
    avx512::ResidualRows<typename IsaOps<Acc>::Avx512>(m, p, packed, out, rows, k, r, stream, zero);
    return;
  }
  if (isa == Isa::kAvx2) {
    avx2::ResidualRows<typename IsaOps<Acc>::Avx2>(m, p, packed, out, rows, k, r, stream, zero);
    return;
  }
#else
  (void)stream;
#endif
  ResidualRowsGeneric(m, p, packed, out, rows, k, r, PanelWidth<Acc>(Isa::kGeneric), zero);
}

// The compensate op on `rows` rows with the loop of `isa` (see
// CompensateRowsGeneric; qt from TransposeQ). stream: non-temporal stores of
// m where its rows are 64-byte aligned.
template <typename Acc>
void CompensateRows(Isa isa, const Acc* g, const Acc* e, const Acc* qt, Acc* m_out, Acc* p,
                    int64_t rows, int64_t k, int64_t r, bool add, bool stream = false) {
#if TFCOMP_X86
  if (isa == Isa::kAvx512) {
    avx512::CompensateRows<typename IsaOps<Acc>::Avx512>(g, e, qt, m_out, p, rows, k, r, add, stream);
    return;
  }
  if (isa == Isa::kAvx2) {
    avx2::CompensateRows<typename IsaOps<Acc>::Avx2>(g, e, qt, m_out, p, rows, k, r, add, stream);
    return;
  }
#else
  (void)stream;
#endif
  CompensateRowsGeneric(g, e, qt, m_out, p, rows, k, r, add);
}

// The project op's partial sum of one row block (see ProjectBlockGeneric) with the
// loop of `isa`.
template <typename Acc>
void ProjectBlock(Isa isa, const Acc* m, const Acc* p, Acc* part, int64_t rows, int64_t k,
                  int64_t r, int64_t c0, int64_t c1) {
#if TFCOMP_X86
  if (isa == Isa::kAvx512) {
    avx512::ProjectBlock<typename IsaOps<Acc>::Avx512>(m, p, part, rows, k, r, c0, c1);
    return;
  }
  if (isa == Isa::kAvx2) {
    avx2::ProjectBlock<typename IsaOps<Acc>::Avx2>(m, p, part, rows, k, r, c0, c1);
    return;
  }
#endif
  ProjectBlockGeneric(m, p, part, rows, k, r, c0, c1);
}

}  // namespace cpu
}  // namespace lowrank
}  // namespace tfcomp

#endif  // TFCOMP_CUSTOM_OPS_LOWRANK_CC_KERNELS_LOWRANK_CPU_H_
