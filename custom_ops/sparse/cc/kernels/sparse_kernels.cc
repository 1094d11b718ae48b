// Sparse op kernels: argument checks, the CPU functors, and the registrations
// for CPU (always) and GPU (when built with GOOGLE_CUDA).
#define EIGEN_USE_THREADS
#include "sparse_kernels.h"

#include <algorithm>
#include <limits>
#include <type_traits>

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#define TFCOMP_X86 1
#endif

#include "custom_ops/common/cpu_shard.h"
#include "sparse_core.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/types.h"

namespace tfcomp {

using ::tensorflow::DEVICE_CPU;
using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;
using ::tensorflow::TensorShapeUtils;
using ::tensorflow::errors::InvalidArgument;
using CPUDevice = Eigen::ThreadPoolDevice;
using GPUDevice = Eigen::GpuDevice;

namespace {

constexpr int64_t kSelectBlock = 1 << 14;  // elements per unit of sharded work

// slot = max(slot, index), atomically: the largest index wins on any thread count.
template <typename Index>
inline void ClaimSlot(Index* slot, Index index) {
  Index seen = __atomic_load_n(slot, __ATOMIC_RELAXED);
  while (seen < index &&
         !__atomic_compare_exchange_n(slot, &seen, index, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
  }
}

template <typename T, typename Index>
void SelectRangeGeneric(const T* g, int64_t begin, int64_t end, typename Accumulator<T>::type t,
                        sparse::HashParams hash, int64_t capacity, Index* indices) {
  for (int64_t i = begin; i < end; ++i) {
    if (sparse::Selected(AbsValue(g[i]), t)) {
      ClaimSlot(indices + sparse::HashSlot(hash, i, capacity), static_cast<Index>(i));
    }
  }
}

#if TFCOMP_X86
// float32 with AVX2: one compare per 8 elements; selected elements are rare.
template <typename Index>
__attribute__((target("avx2"))) void SelectRangeFloatAvx2(const float* g, int64_t begin, int64_t end,
                                                          float t, sparse::HashParams hash,
                                                          int64_t capacity, Index* indices) {
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
      ClaimSlot(indices + sparse::HashSlot(hash, index, capacity), static_cast<Index>(index));
      mask &= mask - 1;
    }
  }
  SelectRangeGeneric(g, i, end, t, hash, capacity, indices);
}
#endif

template <typename T, typename Index>
void SelectRange(const T* g, int64_t begin, int64_t end, typename Accumulator<T>::type t,
                 sparse::HashParams hash, int64_t capacity, Index* indices) {
#if TFCOMP_X86
  if constexpr (std::is_same_v<T, float>) {
    static const bool has_avx2 = __builtin_cpu_supports("avx2");
    if (has_avx2) return SelectRangeFloatAvx2(g, begin, end, t, hash, capacity, indices);
  }
#endif
  SelectRangeGeneric(g, begin, end, t, hash, capacity, indices);
}

}  // namespace

namespace functor {

template <typename T, typename Index>
struct HashSelect<CPUDevice, T, Index> {
  void operator()(OpKernelContext* ctx, const T* g, int64_t n, const T* threshold,
                  sparse::HashParams hash, int64_t capacity, T* values, Index* indices) {
    const auto t = static_cast<typename Accumulator<T>::type>(*threshold);
    std::fill(indices, indices + capacity, static_cast<Index>(sparse::kEmptyIndex));
    const int64_t blocks = (n + kSelectBlock - 1) / kSelectBlock;
    ShardCpu(ctx, blocks, kSelectBlock * 2, [&](int64_t begin, int64_t end) {
      SelectRange(g, begin * kSelectBlock, std::min(n, end * kSelectBlock), t, hash, capacity,
                  indices);
    });
    for (int64_t j = 0; j < capacity; ++j) {
      values[j] = indices[j] >= 0 ? g[indices[j]] : T(0);
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
    for (int64_t j = 0; j < count; ++j) {
      if (indices[j] >= 0) dense[indices[j]] += values[j];
    }
  }
};

}  // namespace functor

template <typename Device, typename T, typename Index>
class HashSelectOp : public OpKernel {
 public:
  explicit HashSelectOp(OpKernelConstruction* c) : OpKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("capacity", &capacity_));
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
    Tensor* values = nullptr;
    Tensor* indices = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({capacity_}), &values));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({capacity_}), &indices));
    if (capacity_ == 0) return;
    const auto s = seed.flat<int64_t>();
    const sparse::HashParams hash =
        sparse::HashFromSeed(static_cast<uint64_t>(s(0)), static_cast<uint64_t>(s(1)));
    functor::HashSelect<Device, T, Index>()(ctx, g.flat<T>().data(), n, threshold.flat<T>().data(),
                                            hash, capacity_, values->flat<T>().data(),
                                            indices->flat<Index>().data());
  }

 private:
  int64_t capacity_;
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

#define TFCOMP_REGISTER_SPARSE_TYPES(DEVICE, DEVICE_TYPE)                           \
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

}  // namespace tfcomp
