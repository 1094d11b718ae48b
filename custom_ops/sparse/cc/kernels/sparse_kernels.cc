// Sparse op kernels: argument checks, the CPU functors, and the registrations
// for CPU (always) and GPU (when built with GOOGLE_CUDA).
#define EIGEN_USE_THREADS
#include "sparse_kernels.h"

#include <algorithm>
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
    for (int64_t j = 0; j < capacity; ++j) {
      const int64_t index = sparse::ClaimedIndex(claims[j]);
      indices[j] = static_cast<Index>(index);
      if (threaded && index >= 0) values[j] = g[index];
    }
  }
};

template <typename T, typename Index>
struct SparseDecode<CPUDevice, T, Index> {
  void operator()(OpKernelContext* ctx, const T* values, const Index* indices, int64_t count,
                  int64_t n, T* dense) {
    ShardCpu(ctx, n, 1, [&](int64_t begin, int64_t end) {
      std::fill(dense + begin, dense + end, T(0));
    });
    // One thread, in order: duplicates sum in the same order on every worker.
    // The targets are scattered over n, so fetch a few entries ahead.
    constexpr int64_t kAhead = 64;
    for (int64_t j = 0; j < count; ++j) {
      if (j + kAhead < count && indices[j + kAhead] >= 0) {
        __builtin_prefetch(dense + indices[j + kAhead], 1);
      }
      if (indices[j] >= 0) dense[indices[j]] += values[j];
    }
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

template <typename Device, typename T, typename Index>
class SparseDecodeOp : public OpKernel {
 public:
  explicit SparseDecodeOp(OpKernelConstruction* c) : OpKernel(c) {}

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
    const int64_t count = indices.NumElements();
    if (std::is_same_v<Device, CPUDevice>) {
      const auto idx = indices.flat<Index>();
      for (int64_t j = 0; j < count; ++j) {
        OP_REQUIRES(ctx, idx(j) >= sparse::kEmptyIndex && idx(j) < n,
                    InvalidArgument("indices[", j, "] = ", static_cast<int64_t>(idx(j)),
                                    " is outside [0, n = ", n, ") and not -1 (an empty slot)"));
      }
    }
    Tensor* dense = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({n}), &dense));
    if (n == 0) return;
    functor::SparseDecode<Device, T, Index>()(ctx, values.flat<T>().data(),
                                              indices.flat<Index>().data(), count, n,
                                              dense->flat<T>().data());
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
                          SparseDecodeOp<DEVICE_TYPE, T, INDEX>);

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
