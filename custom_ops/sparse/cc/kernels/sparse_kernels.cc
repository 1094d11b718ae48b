// Sparse op kernels: argument checks, the CPU functors, and the registrations
// for CPU (always) and GPU (when built with GOOGLE_CUDA).
#define EIGEN_USE_THREADS
#include "sparse_kernels.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <limits>
#include <type_traits>
#include <vector>

#include "custom_ops/common/cpu_shard.h"
#include "custom_ops/common/kernel_names.h"
#include "sparse_core.h"
#include "sparse_select_cpu.h"

namespace tfcomp {

namespace {

constexpr int64_t kSelectBlock = 1 << 14;  // elements per unit of sharded work
constexpr int64_t kParallelReadBack = 1 << 16;  // slots from which HashSelect reads values on several threads

using sparse::cpu::SelectRange;
using sparse::cpu::Slots;

// The k-th largest of a stream of magnitudes. Values above a floor are appended
// branch-free to a buffer; when the buffer holds more than `limit`, a
// selection (nth_element) keeps the k largest and raises the floor to the k-th
// of them. Later values at or below the floor cannot be among the k largest
// (k values >= floor are already kept), so they are dropped. In a random order
// the floor soon passes most values, and the buffer is pruned
// O(log(count / k)) times, each in O(limit) time; a heap would pay O(log k)
// per value that enters the top k, with unpredictable branches.
template <typename Acc>
class KthLargest {
 public:
  // Values arrive in batches of at most max_batch.
  KthLargest(int64_t k, int64_t max_batch)
      : k_(k), limit_(std::max<int64_t>(2 * k, k + 1024)), buffer_(limit_ + max_batch) {}

  // Offers magnitude(x[0]), ..., magnitude(x[length - 1]), length <= max_batch.
  template <typename T, typename Magnitude>
  void Offer(const T* x, int64_t length, Magnitude magnitude) {
    Acc* out = buffer_.data();
    int64_t size = size_;
    const Acc floor = floor_;
    for (int64_t j = 0; j < length; ++j) {
      const Acc v = magnitude(x[j]);
      out[size] = v;
      size += v > floor;
    }
    size_ = size;
    if (size_ > limit_) Prune();
  }

  // Needs at least k values offered in all.
  Acc Get() {
    Prune();
    return buffer_[k_ - 1];
  }

 private:
  void Prune() {
    std::nth_element(buffer_.begin(), buffer_.begin() + (k_ - 1), buffer_.begin() + size_,
                     std::greater<Acc>());
    size_ = k_;
    floor_ = buffer_[k_ - 1];
  }

  const int64_t k_;
  const int64_t limit_;
  std::vector<Acc> buffer_;
  int64_t size_ = 0;
  Acc floor_ = -std::numeric_limits<Acc>::infinity();  // below every magnitude
};

// Prefetches the bytes [p, p + bytes) for reading.
inline void PrefetchRange(const void* p, int64_t bytes) {
  const char* c = static_cast<const char*>(p);
  for (int64_t offset = 0; offset < bytes; offset += 64) __builtin_prefetch(c + offset, 0);
}

// The first j with indices[j] outside [-1, n), or -1 if there is none. Blocks
// are checked on the op's threads (a vectorized test), the first bad block
// once more in order.
template <typename Index>
int64_t FirstIndexOutside(OpKernelContext* ctx, const Index* indices, int64_t count, int64_t n) {
  constexpr int64_t kBlock = 1 << 14;
  const int64_t blocks = (count + kBlock - 1) / kBlock;
  const auto outside = [n](Index i) {
    return static_cast<int64_t>(i) < sparse::kEmptyIndex || static_cast<int64_t>(i) >= n;
  };
  std::vector<char> bad(blocks, 0);
  ShardCpu(ctx, blocks, kBlock, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      unsigned any = 0;
      for (int64_t j = b * kBlock; j < std::min(count, (b + 1) * kBlock); ++j) any |= outside(indices[j]);
      bad[b] = any != 0;
    }
  });
  for (int64_t b = 0; b < blocks; ++b) {
    if (!bad[b]) continue;
    for (int64_t j = b * kBlock; j < count; ++j) {
      if (outside(indices[j])) return j;
    }
  }
  return -1;
}

}  // namespace

namespace functor {

template <typename T, typename Index>
struct HashSelect<CPUDevice, T, Index> {
  void operator()(OpKernelContext* ctx, const T* g, int64_t n, const T* threshold,
                  sparse::HashParams hash, int64_t capacity, int64_t bucket_size, T* values,
                  Index* indices) {
    const auto t = static_cast<typename Accumulator<T>::type>(*threshold);
    std::vector<uint64_t> claims(capacity, 0);
    std::fill(values, values + capacity, T(0));
    const int64_t blocks = (n + kSelectBlock - 1) / kSelectBlock;
    const bool threaded = ctx->device()->tensorflow_cpu_worker_threads()->num_threads > 1 && blocks > 1;
    const Slots<T, Index> slots{hash, capacity, bucket_size, sparse::BucketCount(capacity, bucket_size),
                                claims.data(), threaded ? nullptr : values};
    ShardCpu(ctx, blocks, kSelectBlock * 2, [&](int64_t begin, int64_t end) {
      SelectRange(BestIsa(), g, begin * kSelectBlock, std::min(n, end * kSelectBlock), t, slots);
    });
    const auto read_back = [&](int64_t begin, int64_t end) {
      for (int64_t j = begin; j < end; ++j) {
        const int64_t index = sparse::ClaimedIndex(claims[j]);
        indices[j] = static_cast<Index>(index);
        if (threaded && index >= 0) values[j] = g[index];
      }
    };
    // Each value is a random read of g, a cache miss in a large tensor: many slots are
    // read on the op's threads, a few (where handing them out costs more) on this one.
    if (threaded && capacity >= kParallelReadBack) {
      ShardCpu(ctx, capacity, 256, read_back);
    } else {
      read_back(0, capacity);
    }
  }
};

// The decode and ScaleAt work on output chunks of kChunk elements, small
// enough to stay in cache while their entries are applied: a list of a few
// sorted runs (a TopK or DGC selection, one run per worker) is read in place,
// each chunk's entries found in each run by binary search (SortedRunStarts);
// any other list's entries are first partitioned by chunk, stably
// (ChunkPartition). Each chunk is then read and written once, in cache, by one
// thread, its entries in list order. Every element is the same computation in
// the same order however the work is cut, so results do not depend on the
// thread count.
constexpr int kChunkShift = 16;
constexpr int64_t kChunk = int64_t{1} << kChunkShift;

// A stable partition of a list's entries with index >= 0 by chunk (index >>
// kChunkShift): a counting sort over the list cut into at most kSegments
// segments (counts per segment and chunk, then offsets in chunk-major,
// segment-minor order, then each segment places its entries), so a chunk's
// entries keep their list order.
template <typename Index>
class ChunkPartition {
 public:
  static constexpr int64_t kSegment = int64_t{1} << 16;  // entries, at least, per segment
  static constexpr int64_t kSegments = 64;

  ChunkPartition(OpKernelContext* ctx, const Index* indices, int64_t count, int64_t n)
      : ctx_(ctx),
        indices_(indices),
        count_(count),
        chunks_((n + kChunk - 1) >> kChunkShift),
        segments_(std::max<int64_t>(1, std::min(kSegments, (count + kSegment - 1) / kSegment))),
        segment_length_((count + segments_ - 1) / segments_),
        next_(segments_ * chunks_, 0),
        start_(chunks_ + 1) {
    ShardCpu(ctx, segments_, segment_length_ * 4, [&](int64_t begin, int64_t end) {
      for (int64_t s = begin; s < end; ++s) {
        int64_t* counts = next_.data() + s * chunks_;
        for (int64_t j = s * segment_length_; j < SegmentEnd(s); ++j) {
          if (indices[j] >= 0) ++counts[static_cast<int64_t>(indices[j]) >> kChunkShift];
        }
      }
    });
    int64_t total = 0;
    for (int64_t c = 0; c < chunks_; ++c) {
      start_[c] = total;
      for (int64_t s = 0; s < segments_; ++s) {
        const int64_t entries = next_[s * chunks_ + c];
        next_[s * chunks_ + c] = total;
        total += entries;
      }
    }
    start_[chunks_] = total;
  }

  int64_t total() const { return start_[chunks_]; }
  int64_t chunks() const { return chunks_; }
  int64_t begin(int64_t chunk) const { return start_[chunk]; }
  int64_t end(int64_t chunk) const { return start_[chunk + 1]; }

  // place(p, j, offset): entry j goes to position p of the partition; offset is
  // its index within its chunk. Once.
  template <typename Place>
  void Fill(Place&& place) {
    ShardCpu(ctx_, segments_, segment_length_ * 8, [&](int64_t begin, int64_t end) {
      for (int64_t s = begin; s < end; ++s) {
        int64_t* next = next_.data() + s * chunks_;
        for (int64_t j = s * segment_length_; j < SegmentEnd(s); ++j) {
          const int64_t i = static_cast<int64_t>(indices_[j]);
          if (i >= 0) place(next[i >> kChunkShift]++, j, static_cast<uint32_t>(i & (kChunk - 1)));
        }
      }
    });
  }

 private:
  int64_t SegmentEnd(int64_t s) const { return std::min(count_, (s + 1) * segment_length_); }

  OpKernelContext* ctx_;
  const Index* indices_;
  const int64_t count_;
  const int64_t chunks_;
  const int64_t segments_;
  const int64_t segment_length_;
  std::vector<int64_t> next_;   // [segment][chunk]: where the segment's next entry goes
  std::vector<int64_t> start_;  // [chunk + 1]: where the chunk's entries start
};

// The starts of a list's non-decreasing runs of indices (compared as signed
// integers, so a run's -1 slots come first in it), then count; empty where the
// list has more than kMaxSortedRuns runs. select_largest emits a worker's
// indices in increasing order, padded with -1, so K workers' gathered lists
// make at most 2K runs. Within a run a chunk's entries are contiguous, and a
// chunk's entries in list order are each run's range in turn
// (ForChunkRanges): the decode and ScaleAt then need no partition, and read
// the list once. Blocks are scanned on the op's threads and stop at the first
// block past the limit, so an unsorted list costs a few hundred reads.
constexpr int64_t kMaxSortedRuns = 64;

template <typename Index>
std::vector<int64_t> SortedRunStarts(OpKernelContext* ctx, const Index* indices, int64_t count) {
  constexpr int64_t kBlock = 1 << 14;
  const int64_t blocks = (count + kBlock - 1) / kBlock;
  std::vector<std::vector<int64_t>> found(blocks);
  std::atomic<bool> too_many{false};
  ShardCpu(ctx, blocks, kBlock, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end && !too_many.load(std::memory_order_relaxed); ++b) {
      for (int64_t j = std::max<int64_t>(1, b * kBlock); j < std::min(count, (b + 1) * kBlock); ++j) {
        if (indices[j] >= indices[j - 1]) continue;
        found[b].push_back(j);
        if (static_cast<int64_t>(found[b].size()) >= kMaxSortedRuns) {
          too_many.store(true, std::memory_order_relaxed);
          break;
        }
      }
    }
  });
  std::vector<int64_t> starts{0};
  if (too_many.load()) return {};
  for (const auto& f : found) starts.insert(starts.end(), f.begin(), f.end());
  if (static_cast<int64_t>(starts.size()) > kMaxSortedRuns) return {};
  starts.push_back(count);
  return starts;
}

// Calls visit(first, last) for each run's range of entries [first, last)
// whose indices lie in chunk c, run by run: the chunk's entries in list
// order, from the list's sorted runs (SortedRunStarts).
template <typename Index, typename Visit>
void ForChunkRanges(const Index* indices, const std::vector<int64_t>& runs, int64_t c, Visit&& visit) {
  const auto below = [](Index i, int64_t bound) { return static_cast<int64_t>(i) < bound; };
  const int64_t lo = c << kChunkShift;
  for (size_t r = 0; r + 1 < runs.size(); ++r) {
    const Index* begin = std::lower_bound(indices + runs[r], indices + runs[r + 1], lo, below);
    const Index* end = std::lower_bound(begin, indices + runs[r + 1], lo + kChunk, below);
    if (begin != end) visit(begin - indices, end - indices);
  }
}

// Scratch of `elements` values of type V (OpScratch).
template <typename V>
V* TempArray(OpKernelContext* ctx, int64_t elements, Tensor* holder) {
  return static_cast<V*>(OpScratch(ctx, holder)(elements * int64_t{sizeof(V)}));
}

// Writes a chunk summed in a thread's own buffer to the output, times weight
// unless divisor is 1. float32 goes by streaming stores: the output's lines
// are written without being read first, so the decode writes its n elements
// once instead of reading them in (to zero them in place) and writing them back.
template <typename T>
void WriteChunk(const T* sums, int64_t length, int64_t divisor, typename Accumulator<T>::type weight, T* out) {
  int64_t i = 0;
#if TFCOMP_X86
  if constexpr (std::is_same_v<T, float>) {
    if (reinterpret_cast<uintptr_t>(out) % 16 == 0) {
      const __m128 w = _mm_set1_ps(weight);
      for (; i + 4 <= length; i += 4) {
        const __m128 v = _mm_loadu_ps(sums + i);
        _mm_stream_ps(out + i, divisor == 1 ? v : _mm_mul_ps(v, w));
      }
      _mm_sfence();
    }
  }
#endif
  for (; i < length; ++i) out[i] = divisor == 1 ? sums[i] : sparse::Weighted(sums[i], weight);
}

template <typename T, typename Index>
struct SparseDecode<CPUDevice, T, Index> {
  void operator()(OpKernelContext* ctx, const T* values, const Index* indices, int64_t count,
                  int64_t n, int64_t divisor, T* dense) {
    const auto weight = sparse::DecodeWeight<T>(divisor);
    const int64_t chunks = (n + kChunk - 1) >> kChunkShift;
    // Chunk c summed in the thread's buffer by add(c, sums), then written out.
    const auto decode = [&](int64_t cost, auto&& add) {
      ShardCpu(ctx, chunks, cost, [&](int64_t begin, int64_t end) {
        std::vector<T> sums(std::min(kChunk, n));
        for (int64_t c = begin; c < end; ++c) {
          const int64_t length = std::min(kChunk, n - (c << kChunkShift));
          std::fill(sums.begin(), sums.begin() + length, T(0));
          add(c, sums.data());
          WriteChunk(sums.data(), length, divisor, weight, dense + (c << kChunkShift));
        }
      });
    };
    const std::vector<int64_t> runs = SortedRunStarts(ctx, indices, count);
    if (!runs.empty()) {
      decode(2 * kChunk + 8 * count / chunks, [&](int64_t c, T* sums) {
        ForChunkRanges(indices, runs, c, [&, sums](int64_t first, int64_t last) {
          const Index* in = indices + first;
          const T* v = values + first;
          const int64_t base = c << kChunkShift;
          for (int64_t j = 0; j < last - first; ++j) sums[static_cast<int64_t>(in[j]) - base] += v[j];
        });
      });
      return;
    }
    ChunkPartition<Index> partition(ctx, indices, count, n);
    struct Entry {
      uint32_t offset;  // within the chunk
      T value;
    };
    Tensor holder;
    Entry* entries = TempArray<Entry>(ctx, partition.total(), &holder);
    if (entries == nullptr) return;
    partition.Fill([&](int64_t p, int64_t j, uint32_t offset) { entries[p] = Entry{offset, values[j]}; });
    decode(2 * kChunk + 8 * partition.total() / chunks, [&](int64_t c, T* sums) {
      for (int64_t p = partition.begin(c); p < partition.end(c); ++p) {
        sums[entries[p].offset] += entries[p].value;
      }
    });
  }
};

template <typename T, typename Index>
struct ScaleAt<CPUDevice, T, Index> {
  void operator()(OpKernelContext* ctx, const T* x, const Index* indices, int64_t count,
                  int64_t n, T factor, T* out) {
    using Acc = typename Accumulator<T>::type;
    const Acc f = static_cast<Acc>(factor);
    if (f == Acc(1) || count == 0) {
      if (out != x) {
        ShardCpu(ctx, n, 1, [&](int64_t begin, int64_t end) { std::copy(x + begin, x + end, out + begin); });
      }
      return;
    }
    // Chunk c of out, with the elements at its entries' offsets scaled.
    const auto scale_chunk = [&](int64_t c, const uint32_t* first, int64_t entries, std::vector<T>* sent) {
      T* chunk = out + (c << kChunkShift);
      if (out != x) {
        const T* from = x + (c << kChunkShift);
        std::copy(from, from + std::min(kChunk, n - (c << kChunkShift)), chunk);
      }
      if (f == Acc(0)) {
        for (int64_t k = 0; k < entries; ++k) chunk[first[k]] = T(0);
        return;
      }
      // Every element is read before any is written: an index listed twice is scaled once.
      sent->resize(entries);
      for (int64_t k = 0; k < entries; ++k) (*sent)[k] = chunk[first[k]];
      for (int64_t k = 0; k < entries; ++k) chunk[first[k]] = sparse::ScaledAt((*sent)[k], f);
    };
    const int64_t chunks = (n + kChunk - 1) >> kChunkShift;
    const int64_t cost = (out != x ? 2 * kChunk : 0) + 16 * count / chunks;
    const std::vector<int64_t> runs = SortedRunStarts(ctx, indices, count);
    if (!runs.empty()) {
      ShardCpu(ctx, chunks, cost, [&](int64_t begin, int64_t end) {
        std::vector<T> sent;
        std::vector<uint32_t> offsets;
        for (int64_t c = begin; c < end; ++c) {
          offsets.clear();
          ForChunkRanges(indices, runs, c, [&](int64_t first, int64_t last) {
            for (int64_t j = first; j < last; ++j) {
              offsets.push_back(static_cast<uint32_t>(static_cast<int64_t>(indices[j]) & (kChunk - 1)));
            }
          });
          scale_chunk(c, offsets.data(), static_cast<int64_t>(offsets.size()), &sent);
        }
      });
      return;
    }
    ChunkPartition<Index> partition(ctx, indices, count, n);
    Tensor holder;
    uint32_t* offsets = TempArray<uint32_t>(ctx, partition.total(), &holder);
    if (offsets == nullptr) return;
    partition.Fill([&](int64_t p, int64_t, uint32_t offset) { offsets[p] = offset; });
    ShardCpu(ctx, chunks, cost, [&](int64_t begin, int64_t end) {
      std::vector<T> sent;
      for (int64_t c = begin; c < end; ++c) {
        scale_chunk(c, offsets + partition.begin(c), partition.end(c) - partition.begin(c), &sent);
      }
    });
  }
};

template <typename T>
struct SampledThreshold<CPUDevice, T> {
  void operator()(OpKernelContext* ctx, const T* g, int64_t n, sparse::HashParams hash,
                  int64_t num_samples, int64_t k, T* threshold) {
    using Acc = typename Accumulator<T>::type;
    const int64_t count = std::min(n, num_samples);
    if (count == 0) {
      *threshold = T(0);
      return;
    }
    // |x| with NaN as +Inf (and -0 as +0, which compares equal anyway).
    const auto magnitude = [](T x) {
      return sparse::SampleMagnitude(AbsValue(x)) + Acc(0);
    };
    KthLargest<Acc> top(std::min(k, count), sparse::kSampleRun);
    if (n <= num_samples) {
      for (int64_t i = 0; i < n; i += sparse::kSampleRun) {
        top.Offer(g + i, std::min(sparse::kSampleRun, n - i), magnitude);
      }
      *threshold = static_cast<T>(top.Get());
      return;
    }
    // The runs lie at random offsets of a tensor far larger than the cache:
    // fetch a few runs ahead, or each run waits on memory.
    constexpr int64_t kAhead = 4;
    const int64_t runs = sparse::NumSampleRuns(num_samples);
    auto run_start = [&](int64_t run) { return sparse::SampleRunStart(hash, run, num_samples, n); };
    auto run_length = [&](int64_t run) {
      return std::min(sparse::kSampleRun, num_samples - run * sparse::kSampleRun);
    };
    auto prefetch = [&](int64_t run) {
      const int64_t s = run_start(run);
      PrefetchRange(g + std::min(s, n - 1), std::min(run_length(run), n - s) * int64_t{sizeof(T)});
    };
    for (int64_t run = 0; run < std::min(kAhead, runs); ++run) prefetch(run);
    for (int64_t run = 0; run < runs; ++run) {
      if (run + kAhead < runs) prefetch(run + kAhead);
      const int64_t s = run_start(run);
      const int64_t length = run_length(run);
      const int64_t inside = std::min(length, n - s);  // positions past the end read g[n - 1]
      top.Offer(g + s, inside, magnitude);
      for (int64_t j = inside; j < length; ++j) top.Offer(g + n - 1, 1, magnitude);
    }
    *threshold = static_cast<T>(top.Get());
  }
};

}  // namespace functor

template <typename Device, typename T>
class SampledThresholdOp : public OpKernel {
 public:
  explicit SampledThresholdOp(OpKernelConstruction* c) : OpKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("num_samples", &num_samples_));
    OP_REQUIRES_OK(c, c->GetAttr("k", &k_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& g = ctx->input(0);
    const Tensor& seed = ctx->input(1);
    OP_REQUIRES(ctx, seed.dims() == 1 && seed.NumElements() == 2,
                InvalidArgument("seed must be an int64 vector of 2 elements, got shape ",
                                seed.shape().DebugString()));
    OP_REQUIRES(ctx, k_ <= num_samples_,
                InvalidArgument("k = ", k_, " is larger than num_samples = ", num_samples_));
    Tensor* threshold = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({}), &threshold));
    const auto s = seed.flat<int64_t>();
    functor::SampledThreshold<Device, T>()(
        ctx, g.flat<T>().data(), g.NumElements(),
        sparse::HashFromSeed(static_cast<uint64_t>(s(0)), static_cast<uint64_t>(s(1))), num_samples_,
        k_, threshold->flat<T>().data());
  }

 private:
  int64_t num_samples_;
  int64_t k_;
};

template <typename Device, typename T, typename Index>
class HashSelectOp : public OpKernel {
 public:
  explicit HashSelectOp(OpKernelConstruction* c) : OpKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("capacity", &capacity_));
    OP_REQUIRES_OK(c, c->GetAttr("bucket_size", &bucket_size_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& g = ctx->input(0);
    const Tensor& threshold = ctx->input(1);
    const Tensor& seed = ctx->input(2);
    OP_REQUIRES(ctx, TensorShapeUtils::IsScalar(threshold.shape()),
                InvalidArgument("threshold must be a scalar, got shape ",
                                threshold.shape().DebugString()));
    OP_REQUIRES(ctx, seed.dims() == 1 && seed.NumElements() == 2,
                InvalidArgument("seed must be an int64 vector of 2 elements, got shape ",
                                seed.shape().DebugString()));
    const int64_t n = g.NumElements();
    OP_REQUIRES(ctx, n - 1 <= static_cast<int64_t>(std::numeric_limits<Index>::max()),
                InvalidArgument("g has ", n, " elements, too many for ",
                                sizeof(Index) == 4 ? "int32" : "int64", " indices; use int64"));
    OP_REQUIRES(ctx, n <= sparse::kMaxHashSelectElements,
                InvalidArgument("g has ", n, " elements; hashed selection takes at most ",
                                sparse::kMaxHashSelectElements, " (2^32): split the tensor"));
    Tensor* values = nullptr;
    Tensor* indices = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({capacity_}), &values));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({capacity_}), &indices));
    if (capacity_ == 0) return;
    const auto s = seed.flat<int64_t>();
    const sparse::HashParams hash =
        sparse::HashFromSeed(static_cast<uint64_t>(s(0)), static_cast<uint64_t>(s(1)));
    functor::HashSelect<Device, T, Index>()(ctx, g.flat<T>().data(), n, threshold.flat<T>().data(),
                                            hash, capacity_, bucket_size_, values->flat<T>().data(),
                                            indices->flat<Index>().data());
  }

 private:
  int64_t capacity_;
  int64_t bucket_size_;
};

// Fails ctx unless every index lies in [-1, n) (CPU only: the GPU kernels skip
// the others).
template <typename Device, typename Index>
bool IndicesInRange(OpKernelContext* ctx, const Tensor& indices, int64_t n) {
  if (!std::is_same_v<Device, CPUDevice>) return true;
  const Index* idx = indices.flat<Index>().data();
  const int64_t j = FirstIndexOutside(ctx, idx, indices.NumElements(), n);
  if (j < 0) return true;
  ctx->CtxFailure(__FILE__, __LINE__,
                  InvalidArgument("indices[", j, "] = ", static_cast<int64_t>(idx[j]),
                                  " is outside [0, n = ", n, ") and not -1 (an empty slot)"));
  return false;
}

template <typename Device, typename T, typename Index>
class SparseDecodeOp : public OpKernel {
 public:
  explicit SparseDecodeOp(OpKernelConstruction* c) : OpKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("divisor", &divisor_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& values = ctx->input(0);
    const Tensor& indices = ctx->input(1);
    const Tensor& n_tensor = ctx->input(2);
    OP_REQUIRES(ctx, TensorShapeUtils::IsVector(values.shape()) &&
                         TensorShapeUtils::IsVector(indices.shape()) &&
                         values.NumElements() == indices.NumElements(),
                InvalidArgument("values and indices must be vectors of one length, got shapes ",
                                values.shape().DebugString(), " and ",
                                indices.shape().DebugString()));
    OP_REQUIRES(ctx, TensorShapeUtils::IsScalar(n_tensor.shape()),
                InvalidArgument("n must be a scalar int64, got shape ", n_tensor.shape().DebugString()));
    const int64_t n = n_tensor.scalar<int64_t>()();
    OP_REQUIRES(ctx, n >= 0, InvalidArgument("n must be >= 0, got ", n));
    if (!IndicesInRange<Device, Index>(ctx, indices, n)) return;
    Tensor* dense = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({n}), &dense));
    if (n == 0) return;
    functor::SparseDecode<Device, T, Index>()(ctx, values.flat<T>().data(),
                                              indices.flat<Index>().data(), indices.NumElements(),
                                              n, divisor_, dense->flat<T>().data());
  }

 private:
  int64_t divisor_;
};

template <typename Device, typename T, typename Index>
class ScaleAtOp : public OpKernel {
 public:
  explicit ScaleAtOp(OpKernelConstruction* c) : OpKernel(c) {}

  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    const Tensor& indices = ctx->input(1);
    const Tensor& factor = ctx->input(2);
    OP_REQUIRES(ctx, TensorShapeUtils::IsVector(indices.shape()),
                InvalidArgument("indices must be a vector, got shape ", indices.shape().DebugString()));
    OP_REQUIRES(ctx, TensorShapeUtils::IsScalar(factor.shape()),
                InvalidArgument("factor must be a scalar, got shape ", factor.shape().DebugString()));
    const int64_t n = x.NumElements();
    if (!IndicesInRange<Device, Index>(ctx, indices, n)) return;
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->forward_input_or_allocate_output({0}, 0, x.shape(), &out));
    if (n == 0) return;
    functor::ScaleAt<Device, T, Index>()(ctx, x.flat<T>().data(), indices.flat<Index>().data(),
                                         indices.NumElements(), n, factor.scalar<T>()(),
                                         out->flat<T>().data());
  }
};

#define TFCOMP_REGISTER_SPARSE_KERNELS(DEVICE, DEVICE_TYPE, T, INDEX)                        \
  REGISTER_KERNEL_BUILDER(Name("TfcompHashSelect")                                          \
                              .Device(DEVICE)                                               \
                              .HostMemory("seed")                                           \
                              .TypeConstraint<T>("T")                                       \
                              .TypeConstraint<INDEX>("Tindex"),                             \
                          HashSelectOp<DEVICE_TYPE, T, INDEX>);                             \
  REGISTER_KERNEL_BUILDER(Name("TfcompSparseDecode")                                        \
                              .Device(DEVICE)                                               \
                              .HostMemory("n")                                              \
                              .TypeConstraint<T>("T")                                       \
                              .TypeConstraint<INDEX>("Tindex"),                             \
                          SparseDecodeOp<DEVICE_TYPE, T, INDEX>);                           \
  REGISTER_KERNEL_BUILDER(Name("TfcompScaleAt")                                             \
                              .Device(DEVICE)                                               \
                              .HostMemory("factor")                                         \
                              .TypeConstraint<T>("T")                                       \
                              .TypeConstraint<INDEX>("Tindex"),                             \
                          ScaleAtOp<DEVICE_TYPE, T, INDEX>);

#define TFCOMP_REGISTER_THRESHOLD_KERNEL(DEVICE, DEVICE_TYPE, T)                               \
  REGISTER_KERNEL_BUILDER(                                                                     \
      Name("TfcompSampledThreshold").Device(DEVICE).HostMemory("seed").TypeConstraint<T>("T"), \
      SampledThresholdOp<DEVICE_TYPE, T>);

#define TFCOMP_REGISTER_SPARSE_TYPES(DEVICE, DEVICE_TYPE)                           \
  TFCOMP_REGISTER_THRESHOLD_KERNEL(DEVICE, DEVICE_TYPE, Eigen::half)                \
  TFCOMP_REGISTER_THRESHOLD_KERNEL(DEVICE, DEVICE_TYPE, Eigen::bfloat16)            \
  TFCOMP_REGISTER_THRESHOLD_KERNEL(DEVICE, DEVICE_TYPE, float)                      \
  TFCOMP_REGISTER_THRESHOLD_KERNEL(DEVICE, DEVICE_TYPE, double)                     \
  TFCOMP_REGISTER_SPARSE_KERNELS(DEVICE, DEVICE_TYPE, Eigen::half, int32_t)          \
  TFCOMP_REGISTER_SPARSE_KERNELS(DEVICE, DEVICE_TYPE, Eigen::half, int64_t)          \
  TFCOMP_REGISTER_SPARSE_KERNELS(DEVICE, DEVICE_TYPE, Eigen::bfloat16, int32_t)      \
  TFCOMP_REGISTER_SPARSE_KERNELS(DEVICE, DEVICE_TYPE, Eigen::bfloat16, int64_t)      \
  TFCOMP_REGISTER_SPARSE_KERNELS(DEVICE, DEVICE_TYPE, float, int32_t)                \
  TFCOMP_REGISTER_SPARSE_KERNELS(DEVICE, DEVICE_TYPE, float, int64_t)                \
  TFCOMP_REGISTER_SPARSE_KERNELS(DEVICE, DEVICE_TYPE, double, int32_t)               \
  TFCOMP_REGISTER_SPARSE_KERNELS(DEVICE, DEVICE_TYPE, double, int64_t)

TFCOMP_REGISTER_SPARSE_TYPES(DEVICE_CPU, CPUDevice)
#if GOOGLE_CUDA
TFCOMP_REGISTER_SPARSE_TYPES(::tensorflow::DEVICE_GPU, GPUDevice)
#endif

#undef TFCOMP_REGISTER_SPARSE_TYPES
#undef TFCOMP_REGISTER_SPARSE_KERNELS
#undef TFCOMP_REGISTER_THRESHOLD_KERNEL

}  // namespace tfcomp
