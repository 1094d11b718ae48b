// GPU functors of the sparse ops: the kernels of sparse_cuda_kernels.cu.h,
// launched on the op's stream. The OpKernels and their GPU registrations are in
// sparse_kernels.cc.
#if GOOGLE_CUDA
#define EIGEN_USE_GPU

#include "custom_ops/common/gpu_launch.h"
#include "sparse_cuda_kernels.cu.h"
#include "sparse_kernels.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/types.h"

namespace tfcomp {
namespace functor {

using GPUDevice = Eigen::GpuDevice;

namespace {

// Device scratch from the op's allocator. The tensor is freed when Compute
// returns: later users of the memory queue behind this op on the same stream.
struct TempAllocator {
  tensorflow::OpKernelContext* ctx;
  tensorflow::Tensor* scratch;
  void* operator()(size_t bytes) const {
    const tensorflow::Status s = ctx->allocate_temp(
        tensorflow::DT_INT8, tensorflow::TensorShape({static_cast<int64_t>(bytes)}), scratch);
    if (!s.ok()) {
      ctx->SetStatus(s);
      return nullptr;
    }
    return scratch->flat<int8_t>().data();
  }
};

}  // namespace

template <typename T, typename Index>
struct HashSelect<GPUDevice, T, Index> {
  void operator()(tensorflow::OpKernelContext* ctx, const T* g, int64_t n, const T* threshold,
                  sparse::HashParams hash, int64_t capacity, int64_t bucket_size, T* values,
                  Index* indices) {
    tensorflow::Tensor scratch;
    const cudaError_t err = sparse::cuda::LaunchHashSelect(
        g, n, threshold, hash, capacity, bucket_size, values, indices, TempAllocator{ctx, &scratch},
        StreamOf(ctx));
    if (ctx->status().ok()) CheckLaunch(ctx, err, "HashSelect");
  }
};

template <typename T>
struct SampledThreshold<GPUDevice, T> {
  void operator()(tensorflow::OpKernelContext* ctx, const T* g, int64_t n, sparse::HashParams hash,
                  int64_t num_samples, int64_t k, T* threshold) {
    tensorflow::Tensor scratch;
    const cudaError_t err = sparse::cuda::LaunchSampledThreshold(
        g, n, hash, num_samples, k, threshold, TempAllocator{ctx, &scratch}, StreamOf(ctx));
    if (ctx->status().ok()) CheckLaunch(ctx, err, "SampledThreshold");
  }
};

template <typename T, typename Index>
struct SparseDecode<GPUDevice, T, Index> {
  void operator()(tensorflow::OpKernelContext* ctx, const T* values, const Index* indices,
                  int64_t count, int64_t n, int64_t divisor, T* dense) {
    tensorflow::Tensor scratch;
    const TempAllocator allocate{ctx, &scratch};
    const cudaError_t err = sparse::cuda::LaunchSparseDecode(values, indices, count, n, dense,
                                                             allocate, StreamOf(ctx), divisor);
    if (ctx->status().ok()) CheckLaunch(ctx, err, "SparseDecode");
  }
};

template <typename T, typename Index>
struct ScaleAt<GPUDevice, T, Index> {
  void operator()(tensorflow::OpKernelContext* ctx, const T* x, const Index* indices,
                  int64_t count, int64_t n, T factor, T* out) {
    tensorflow::Tensor scratch;
    const cudaError_t err = sparse::cuda::LaunchScaleAt(
        x, indices, count, n, factor, out, TempAllocator{ctx, &scratch}, StreamOf(ctx));
    if (ctx->status().ok()) CheckLaunch(ctx, err, "ScaleAt");
  }
};

#define TFCOMP_INSTANTIATE_SPARSE_GPU(T)              \
  template struct SampledThreshold<GPUDevice, T>;      \
  template struct HashSelect<GPUDevice, T, int32_t>;   \
  template struct HashSelect<GPUDevice, T, int64_t>;   \
  template struct SparseDecode<GPUDevice, T, int32_t>; \
  template struct SparseDecode<GPUDevice, T, int64_t>; \
  template struct ScaleAt<GPUDevice, T, int32_t>;      \
  template struct ScaleAt<GPUDevice, T, int64_t>;
TFCOMP_INSTANTIATE_SPARSE_GPU(Eigen::half)
TFCOMP_INSTANTIATE_SPARSE_GPU(Eigen::bfloat16)
TFCOMP_INSTANTIATE_SPARSE_GPU(float)
TFCOMP_INSTANTIATE_SPARSE_GPU(double)
#undef TFCOMP_INSTANTIATE_SPARSE_GPU

}  // namespace functor
}  // namespace tfcomp

#endif  // GOOGLE_CUDA
