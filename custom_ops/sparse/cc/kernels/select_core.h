// Per-element logic of exact threshold/top-k selection (TfcompSelectLargest,
// TopK and DGC), shared by the CPU kernel (select_cpu.h), the CUDA kernels
// (select_cuda_kernels.cu.h) and their standalone test. No TensorFlow here.
//
// select(x, t, capacity): among the elements with |x| >= t (and every NaN:
// sparse::Selected), the `capacity` largest (all of them if fewer qualify),
// emitted in increasing index order and padded with (0, -1). The order is
// TfcompHashSelect's (sparse_core.h's SlotClaim): float32(|x|)'s bit pattern,
// NaN (every NaN as 0x7fc00000) above +Inf, zero and denormals as 0, ties to
// the larger index. An element's Rank packs that key (31 bits) above its index
// (33 bits), so ranks are distinct and one 64-bit compare orders them: the
// result is unique, identical on every device and thread count. t = 0 is exact
// top-k. At most 2^33 elements (kMaxSelectElements).
//
// Algorithm (a radix select, no sort of n elements):
//   1. histogram of Bin(key) = key's top 12 bits (sign excluded; exponent and
//      4 mantissa bits, kBins bins) over the qualifying elements: one
//      streaming read of x. Counts are integers, so any summation order gives
//      the same histogram (CPU: a histogram per fixed block; GPU: atomics).
//   2. FindBoundary: the bin b holding the capacity-th largest, and how many
//      lie above it. If no more than capacity qualify, every qualifying element
//      wins (b = 0, cutoff rank 0).
//   3. collect the candidates, qualifying elements with Bin >= b, as ranks in
//      index order (per-block counts + prefix offsets): a second streaming read
//      of x, writing ~capacity + hist[b] ranks (8 bytes each).
//   4. the cutoff: the capacity-th largest candidate rank (a selection among
//      the hist[b] candidates of bin b on the CPU, a radix sort of the
//      candidates on the GPU). Winners are the candidates with rank >= cutoff.
//   5. emit the winners in index order, gathering their values from x.
// The CPU kernel first tries a one-read path: a sample of kSelectSamples
// elements (runs of kSelectSampleRun at hashed offsets, a fixed hash) bounds
// the capacity-th largest key between lo and hi with a wide margin; one
// streaming read collects the qualifying elements with key >= lo (about 1.2 x
// capacity of them, counted exactly), with their values, and a histogram of
// the keys of those below hi; those >= hi are winners if they number at most
// capacity, and a selection among the candidates of the one histogram bin
// that holds the capacity-th largest gives the cutoff (select_cpu.h). When
// the bounds miss (fewer than capacity at or above lo) it runs the histogram
// passes above. Both give the one exact result.
// Memory-traffic floor: 1 streaming read of x (sizeof(T) bytes per element)
// on the CPU's sampled path (plus the sample's 4096 cache lines), 2 on the
// histogram path (the GPU twin takes it, plus a third read to write the
// winners in index order: select_cuda_kernels.cu.h), plus
// O(capacity) candidate traffic (about 1.2 x capacity 8-byte ranks and their
// values on the sampled path, capacity + hist[b] ranks on the histogram path;
// a bin holds under 2% of a Gaussian tensor around its 1% quantile) and the
// outputs (capacity x (sizeof(T) + sizeof(Index)) bytes).
#ifndef TFCOMP_CUSTOM_OPS_SPARSE_CC_KERNELS_SELECT_CORE_H_
#define TFCOMP_CUSTOM_OPS_SPARSE_CC_KERNELS_SELECT_CORE_H_

#include <cstdint>
#include <cstring>

#include "custom_ops/common/numeric.h"
#include "sparse_core.h"

namespace tfcomp {
namespace select {

constexpr int kIndexBits = 33;
constexpr int64_t kMaxSelectElements = int64_t{1} << kIndexBits;
constexpr uint64_t kIndexMask = (uint64_t{1} << kIndexBits) - 1;
constexpr int kBinShift = 19;  // keys are < 2^31: 12 bits of bin
constexpr int kBins = 1 << (31 - kBinShift);

// The ordering key of a magnitude |x| = abs_value (>= 0 or NaN), as
// sparse::SlotClaim orders it: float32(abs_value)'s bits, NaN as 0x7fc00000,
// zero and denormals as 0. Below 2^31.
template <typename Acc>
TFCOMP_HOST_DEVICE inline uint32_t MagnitudeKey(Acc abs_value) {
  const float magnitude = static_cast<float>(abs_value);
#if defined(__CUDA_ARCH__)
  uint32_t bits = __float_as_uint(magnitude) & 0x7fffffffu;
#else
  uint32_t bits;
  std::memcpy(&bits, &magnitude, sizeof(bits));
  bits &= 0x7fffffffu;
#endif
  if (bits > 0x7f800000u) bits = 0x7fc00000u;  // NaN
  if (bits < 0x00800000u) bits = 0;            // zero or denormal
  return bits;
}

// The threshold as TensorFlow's CPU threads compare it (FTZ/DAZ): a subnormal
// as 0. The GPU kernels, which compare subnormals exactly, apply it to the
// threshold, and then agree with the CPU on every element (a subnormal |x| is
// below every normal threshold and at least every zero one either way).
template <typename Acc>
TFCOMP_HOST_DEVICE inline Acc FlushSubnormal(Acc t) {
  const Acc tiny = sizeof(Acc) == 4 ? static_cast<Acc>(1.17549435e-38f)
                                    : static_cast<Acc>(2.2250738585072014e-308);
  return (t < tiny && t > -tiny) ? Acc(0) : t;
}

TFCOMP_HOST_DEVICE inline int Bin(uint32_t key) { return static_cast<int>(key >> kBinShift); }

// Element i's rank: larger ranks win.
TFCOMP_HOST_DEVICE inline uint64_t Rank(uint32_t key, int64_t i) {
  return (static_cast<uint64_t>(key) << kIndexBits) | static_cast<uint64_t>(i);
}

TFCOMP_HOST_DEVICE inline int64_t RankIndex(uint64_t rank) {
  return static_cast<int64_t>(rank & kIndexMask);
}

TFCOMP_HOST_DEVICE inline int RankBin(uint64_t rank) {
  return Bin(static_cast<uint32_t>(rank >> kIndexBits));
}

// The sample of the one-read path: kSelectSamples / kSelectSampleRun strata,
// a run of kSelectSampleRun contiguous elements (one cache line of float32) at
// a hashed offset in each.
constexpr int64_t kSelectSamples = int64_t{1} << 16;
constexpr int64_t kSelectSampleRun = 16;

// Where sample run `run` starts in a tensor of n >= kSelectSamples elements.
TFCOMP_HOST_DEVICE inline int64_t SelectSampleRunStart(int64_t run, int64_t n) {
  constexpr int64_t runs = kSelectSamples / kSelectSampleRun;
  const int64_t stratum = n / runs;
  const int64_t span = stratum - kSelectSampleRun + 1;
  const sparse::HashParams h{0x9e3779b97f4a7c15ull, 0xbf58476d1ce4e5b9ull, 0x94d049bb133111ebull};
  return run * stratum + sparse::HashSlot(h, static_cast<uint64_t>(run), span);
}

// Where the capacity-th largest lies, from the histogram of the qualifying elements.
struct Boundary {
  int bin;             // candidates are the qualifying elements with Bin >= bin
  int64_t above;       // qualifying elements in bins above `bin`
  int64_t candidates;  // qualifying elements in bins >= bin
  bool all;            // no more than capacity qualify: every candidate wins
};

// hist[kBins] of counts, capacity >= 1.
template <typename Count>
TFCOMP_HOST_DEVICE inline Boundary FindBoundary(const Count* hist, int64_t capacity) {
  int64_t above = 0;
  for (int b = kBins - 1; b >= 0; --b) {
    const int64_t here = static_cast<int64_t>(hist[b]);
    if (above + here >= capacity) {
      return Boundary{b, above, above + here, above + here == capacity};
    }
    above += here;
  }
  return Boundary{0, above, above, true};
}

}  // namespace select
}  // namespace tfcomp

#endif  // TFCOMP_CUSTOM_OPS_SPARSE_CC_KERNELS_SELECT_CORE_H_
