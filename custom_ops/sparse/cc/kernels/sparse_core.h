// Per-element logic of the sparse ops (DRAGONN's hashed threshold selection
// and the batched sparse decode), shared by the CPU kernels, the CUDA kernels
// and the standalone CUDA test. No TensorFlow here.
//
// Hashed selection (DRAGONN, Algorithm 1): m slots start empty (index -1,
// value 0). Every element i with |g[i]| >= t, or g[i] NaN, claims slot h(i);
// when several land in one slot the largest magnitude wins (float32(|g|), NaN
// above +Inf, denormals as 0), ties to the larger index. The paper lets the last writer win;
// keeping the largest sends more of the gradient's energy in the same slots
// (benchmarks/results/dragonn_collisions.md) and is still one pass with no
// dependencies: a claim packs magnitude and index into one 64-bit word
// (SlotClaim), so atomic max settles a slot on any number of threads and every
// device and thread count selects the same. NaN is selected so that a
// diverged gradient reaches the optimizer instead of hiding in a residual; a
// NaN threshold selects everything. Each valid index is distinct and sits in
// its hash slot. Element 0 is an ordinary index. The index takes the claim's
// low 32 bits, so a tensor has at most 2^32 elements (kMaxHashSelectElements).
//
// h is Dietzfelbinger's multiply-add-shift onto [0, m). The index is split
// into 32-bit halves, i = i1 * 2^32 + i0, and (a0, a1, b) are drawn from a
// 64-bit seed: x = (a0 * i0 + a1 * i1 + b) mod 2^64, whose top 32 bits are
// strongly universal over 64-bit indices (pairwise independent and uniform
// for uniform a0, a1, b), and h(i) = floor(x * m / 2^64). Two indices share a
// slot with probability at most (1 + 2m / 2^32)^2 / m: 1/m to within 7% up to
// m = 2^26. Three multiplies and no modular reduction: about half the time of
// Carter-Wegman hashing modulo the prime 2^61 - 1, which tfcomp used before.
//
// Buckets: the m slots are cut into ceil(m / bucket_size) buckets of
// bucket_size consecutive slots (the last may be shorter), and h hashes an
// element onto a bucket (onto a slot when bucket_size is 1, as above). A
// bucket keeps the bucket_size largest claims hashed to it, largest first: a
// claim enters at the bucket's first slot, each slot keeps the larger of its
// claim and the arriving one and passes the smaller on, and what leaves the
// last slot is dropped (InsertClaim). Slot k of a bucket ends with the
// (k+1)-th largest claim whatever the order of arrival, so it is still one
// pass, settled by atomic maxima on any number of threads and devices. With
// twice as many candidates as slots, a slot of its own (bucket_size 1) keeps
// about 84% of the top-m's squared magnitude in 86% of the slots; buckets of 4
// keep about 97% in 98% of them (benchmarks/results/sparse_bench.md).
//
// Sparse decode: out = zeros(n); out[idx] += value for every entry whose index
// is >= 0 (empty slots, index -1, are skipped). Entries are added in list
// order, so duplicates across workers sum the same way everywhere. A divisor
// K (the K workers' mean) scales each element once, after its sum, by
// DecodeWeight(K) (Weighted). Memory floor: the output written once (n
// elements) plus the K * r * n (value, index) entries read, each a random
// read-modify-write of an output element; the CPU kernel applies them chunk
// by chunk of the output, held in cache: a list of a few sorted runs (TopK's
// and DGC's, one per worker) in place, any other partitioned by chunk first
// (one more read and write of the entries).
//
// Scale at indices (error feedback): x with the elements at the valid indices
// multiplied by a factor, each element once whatever its multiplicity in the
// list (ScaledAt, applied to the element as it was before the op), factor 0
// clearing them to +0 (NaN and Inf too: a sent element leaves nothing behind
// in the residual). Memory floor: the list read and a random read and write
// per entry, O(capacity), when x's buffer is forwarded to the output; a copy
// of x (n reads and writes) when it is not.
#ifndef TFCOMP_CUSTOM_OPS_SPARSE_CC_KERNELS_SPARSE_CORE_H_
#define TFCOMP_CUSTOM_OPS_SPARSE_CC_KERNELS_SPARSE_CORE_H_

#include <cstdint>
#include <cstring>
#include <limits>

#include "custom_ops/common/numeric.h"

namespace tfcomp {
namespace sparse {

constexpr int64_t kEmptyIndex = -1;

struct HashParams {
  uint64_t a0;  // multiplies the low 32 bits of the index
  uint64_t a1;  // multiplies the high 32 bits
  uint64_t b;
};

// SplitMix64's finalizer: a bijection of 64-bit words that mixes every bit.
TFCOMP_HOST_DEVICE inline uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// The hash function of a seed: the same seed gives the same h on every worker.
TFCOMP_HOST_DEVICE inline HashParams HashFromSeed(uint64_t seed0, uint64_t seed1) {
  const uint64_t r0 = SplitMix64(seed0 ^ SplitMix64(seed1));
  const uint64_t r1 = SplitMix64(r0);
  return HashParams{r0, r1, SplitMix64(r1)};
}

TFCOMP_HOST_DEVICE inline uint64_t MulHi64(uint64_t a, uint64_t b) {
#if defined(__CUDA_ARCH__)
  return __umul64hi(a, b);
#else
  return static_cast<uint64_t>((static_cast<unsigned __int128>(a) * b) >> 64);
#endif
}

// h(i) in [0, m), m >= 1.
TFCOMP_HOST_DEVICE inline int64_t HashSlot(HashParams h, uint64_t i, int64_t m) {
  const uint64_t x = h.a0 * (i & 0xffffffffu) + h.a1 * (i >> 32) + h.b;  // mod 2^64
  return static_cast<int64_t>(MulHi64(x, static_cast<uint64_t>(m)));  // x * m / 2^64
}

constexpr int64_t kMaxHashSelectElements = int64_t{1} << 32;

// How many buckets of bucket_size (>= 1) slots m slots make.
TFCOMP_HOST_DEVICE inline int64_t BucketCount(int64_t m, int64_t bucket_size) {
  return (m + bucket_size - 1) / bucket_size;
}

// The first slot of element i's bucket, of `buckets` buckets of bucket_size slots.
TFCOMP_HOST_DEVICE inline int64_t BucketStart(HashParams h, uint64_t i, int64_t buckets,
                                              int64_t bucket_size) {
  return HashSlot(h, i, buckets) * bucket_size;
}

// One past the last slot of the bucket that starts at `start` (the last bucket
// of m slots may be shorter).
TFCOMP_HOST_DEVICE inline int64_t BucketEnd(int64_t start, int64_t bucket_size, int64_t m) {
  return start + bucket_size < m ? start + bucket_size : m;
}

// Inserts claim into the bucket of slots [begin, end): fetch_max(slot, c) sets
// the slot to the larger of its claim and c and returns the claim it held
// before (an atomic max on several threads). The smaller of the two moves on.
template <typename FetchMax>
TFCOMP_HOST_DEVICE inline void InsertClaim(uint64_t claim, int64_t begin, int64_t end,
                                           FetchMax&& fetch_max) {
  for (int64_t slot = begin; slot < end && claim != 0; ++slot) {
    const uint64_t held = fetch_max(slot, claim);
    if (held < claim) claim = held;
  }
}

// Element i's claim on its slot, from its magnitude |g[i]| (abs_value, >= 0 or
// NaN): the slot keeps the largest claim. High 32 bits: float32(abs_value)'s bit
// pattern, which orders like the magnitudes with NaN above +Inf, with the top bit
// set so that an empty slot (claim 0) loses to every claim. Low 32 bits: i.
// Every NaN claims as the one NaN 0x7fc00000: devices differ in which NaN bits
// fabs and narrowing keep, and the choice must not. Denormal magnitudes claim
// as 0: TensorFlow runs CPU kernels with denormals flushed to zero, and the
// choice must not depend on whether a conversion or a device flushed them.
template <typename Acc>
TFCOMP_HOST_DEVICE inline uint64_t SlotClaim(Acc abs_value, int64_t i) {
  const float magnitude = static_cast<float>(abs_value);
#if defined(__CUDA_ARCH__)
  uint32_t bits = __float_as_uint(magnitude);
#else
  uint32_t bits;
  std::memcpy(&bits, &magnitude, sizeof(bits));
#endif
  if (magnitude != magnitude) bits = 0x7fc00000u;
  if ((bits & 0x7fffffffu) < 0x00800000u) bits = 0;  // zero or denormal
  return (static_cast<uint64_t>(bits | 0x80000000u) << 32) | (static_cast<uint64_t>(i) & 0xffffffffu);
}

// The index a slot's claim names, kEmptyIndex for an empty slot (claim 0).
TFCOMP_HOST_DEVICE inline int64_t ClaimedIndex(uint64_t claim) {
  return claim == 0 ? kEmptyIndex : static_cast<int64_t>(claim & 0xffffffffu);
}

// Threshold estimation (as DGC does it) samples num_samples elements in runs of
// kSampleRun contiguous ones: run r starts at a hashed offset inside the r-th
// of ceil(num_samples / kSampleRun) equal strata of the tensor. Runs keep the
// read to a few kB per stratum instead of a cache miss per sample.
constexpr int64_t kSampleRun = 256;

TFCOMP_HOST_DEVICE inline int64_t NumSampleRuns(int64_t num_samples) {
  return (num_samples + kSampleRun - 1) / kSampleRun;
}

// Where run `run` of a tensor of n > num_samples elements starts; its samples
// are the kSampleRun elements from there (clipped to n - 1).
TFCOMP_HOST_DEVICE inline int64_t SampleRunStart(HashParams h, int64_t run, int64_t num_samples,
                                                 int64_t n) {
  const int64_t stratum = n / NumSampleRuns(num_samples);
  const int64_t span = stratum > kSampleRun ? stratum - kSampleRun : 0;
  return run * stratum + HashSlot(h, static_cast<uint64_t>(run), span + 1);
}

// Position of sample s (0 <= s < num_samples) in a tensor of n > num_samples elements.
TFCOMP_HOST_DEVICE inline int64_t SamplePosition(HashParams h, int64_t s, int64_t num_samples,
                                                 int64_t n) {
  const int64_t position = SampleRunStart(h, s / kSampleRun, num_samples, n) + s % kSampleRun;
  return position < n ? position : n - 1;
}

// A sampled magnitude as the threshold's order sees it: NaN counts as +Inf.
template <typename Acc>
TFCOMP_HOST_DEVICE inline Acc SampleMagnitude(Acc abs_value) {
  return abs_value == abs_value ? abs_value : std::numeric_limits<Acc>::infinity();
}

// Whether an element with magnitude |g| = abs_value is selected at threshold t.
template <typename Acc>
TFCOMP_HOST_DEVICE inline bool Selected(Acc abs_value, Acc threshold) {
  return !(abs_value < threshold);  // true for NaN
}

// The weight of a decode's sums for a divisor K >= 1: 1 / K in the accumulation type.
template <typename T>
TFCOMP_HOST_DEVICE inline typename Accumulator<T>::type DecodeWeight(int64_t divisor) {
  using Acc = typename Accumulator<T>::type;
  return static_cast<Acc>(1) / static_cast<Acc>(divisor);
}

// An output element of the decode: its sum (in T, entries added in list order) times weight.
template <typename T>
TFCOMP_HOST_DEVICE inline T Weighted(T sum, typename Accumulator<T>::type weight) {
  return static_cast<T>(static_cast<typename Accumulator<T>::type>(sum) * weight);
}

// An element x sent and scaled by factor: x * factor, or +0 for factor 0 (even for NaN or Inf x).
template <typename T>
TFCOMP_HOST_DEVICE inline T ScaledAt(T x, typename Accumulator<T>::type factor) {
  using Acc = typename Accumulator<T>::type;
  return factor == static_cast<Acc>(0) ? static_cast<T>(0.0f)
                                       : static_cast<T>(static_cast<Acc>(x) * factor);
}

}  // namespace sparse
}  // namespace tfcomp

#endif  // TFCOMP_CUSTOM_OPS_SPARSE_CC_KERNELS_SPARSE_CORE_H_
