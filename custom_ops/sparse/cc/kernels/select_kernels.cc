// TfcompSelectLargest's kernel: argument checks, the CPU functor (select_cpu.h
// over the op's threads), and its registrations for CPU (always) and GPU (when
// built with GOOGLE_CUDA; the GPU functor is in select_kernels.cu.cc).
#define EIGEN_USE_THREADS
#include "select_kernels.h"

#include <limits>

#include "custom_ops/common/cpu_shard.h"
#include "custom_ops/common/kernel_names.h"
#include "select_core.h"
#include "select_cpu.h"

namespace tfcomp {
namespace functor {

template <typename T, typename Index>
struct SelectLargest<CPUDevice, T, Index> {
  void operator()(OpKernelContext* ctx, const T* x, int64_t n, const T* threshold, int64_t capacity,
                  T* values, Index* indices) {
    const auto t = static_cast<typename Accumulator<T>::type>(*threshold);
    Tensor holder;
    select::cpu::SelectLargest(x, n, t, capacity, values, indices, [ctx](int64_t blocks, auto&& fn) {
      // A block is tens of thousands of elements: worth a thread each.
      ShardCpu(ctx, blocks, int64_t{1} << 20, fn);
    }, OpScratch(ctx, &holder));
  }
};

}  // namespace functor

template <typename Device, typename T, typename Index>
class SelectLargestOp : public OpKernel {
 public:
  explicit SelectLargestOp(OpKernelConstruction* c) : OpKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("capacity", &capacity_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    const Tensor& threshold = ctx->input(1);
    OP_REQUIRES(ctx, TensorShapeUtils::IsScalar(threshold.shape()),
                InvalidArgument("threshold must be a scalar, got shape ",
                                threshold.shape().DebugString()));
    const int64_t n = x.NumElements();
    OP_REQUIRES(ctx, n - 1 <= static_cast<int64_t>(std::numeric_limits<Index>::max()),
                InvalidArgument("x has ", n, " elements, too many for ",
                                sizeof(Index) == 4 ? "int32" : "int64", " indices; use int64"));
    OP_REQUIRES(ctx, n <= select::kMaxSelectElements,
                InvalidArgument("x has ", n, " elements; select_largest takes at most ",
                                select::kMaxSelectElements, " (2^33): split the tensor"));
    Tensor* values = nullptr;
    Tensor* indices = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({capacity_}), &values));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({capacity_}), &indices));
    if (capacity_ == 0) return;
    functor::SelectLargest<Device, T, Index>()(ctx, x.flat<T>().data(), n,
                                               threshold.flat<T>().data(), capacity_,
                                               values->flat<T>().data(),
                                               indices->flat<Index>().data());
  }

 private:
  int64_t capacity_;
};

#define TFCOMP_REGISTER_SELECT_KERNEL(DEVICE, DEVICE_TYPE, T, INDEX) \
  REGISTER_KERNEL_BUILDER(Name("TfcompSelectLargest")               \
                              .Device(DEVICE)                       \
                              .TypeConstraint<T>("T")               \
                              .TypeConstraint<INDEX>("Tindex"),     \
                          SelectLargestOp<DEVICE_TYPE, T, INDEX>);

#define TFCOMP_REGISTER_SELECT_TYPES(DEVICE, DEVICE_TYPE)                      \
  TFCOMP_REGISTER_SELECT_KERNEL(DEVICE, DEVICE_TYPE, Eigen::half, int32_t)     \
  TFCOMP_REGISTER_SELECT_KERNEL(DEVICE, DEVICE_TYPE, Eigen::half, int64_t)     \
  TFCOMP_REGISTER_SELECT_KERNEL(DEVICE, DEVICE_TYPE, Eigen::bfloat16, int32_t) \
  TFCOMP_REGISTER_SELECT_KERNEL(DEVICE, DEVICE_TYPE, Eigen::bfloat16, int64_t) \
  TFCOMP_REGISTER_SELECT_KERNEL(DEVICE, DEVICE_TYPE, float, int32_t)           \
  TFCOMP_REGISTER_SELECT_KERNEL(DEVICE, DEVICE_TYPE, float, int64_t)           \
  TFCOMP_REGISTER_SELECT_KERNEL(DEVICE, DEVICE_TYPE, double, int32_t)          \
  TFCOMP_REGISTER_SELECT_KERNEL(DEVICE, DEVICE_TYPE, double, int64_t)

TFCOMP_REGISTER_SELECT_TYPES(DEVICE_CPU, CPUDevice)
#if GOOGLE_CUDA
// select_kernels.cu.cc: the same selection on the GPU (select_cuda_kernels.cu.h),
// threshold read in device memory.
TFCOMP_REGISTER_SELECT_TYPES(::tensorflow::DEVICE_GPU, GPUDevice)
#endif

#undef TFCOMP_REGISTER_SELECT_TYPES
#undef TFCOMP_REGISTER_SELECT_KERNEL

}  // namespace tfcomp
