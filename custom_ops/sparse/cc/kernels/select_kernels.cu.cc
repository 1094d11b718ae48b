// GPU functor of exact threshold/top-k selection: select_cuda_kernels.cu.h's
// launcher on the op's stream. The OpKernel and its GPU registration are in
// select_kernels.cc.
#if GOOGLE_CUDA
#define EIGEN_USE_GPU

#include <vector>

#include "custom_ops/common/gpu_launch.h"
#include "select_cuda_kernels.cu.h"
#include "select_kernels.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/types.h"

namespace tfcomp {
namespace functor {

using GPUDevice = Eigen::GpuDevice;

namespace {

// Device scratch from the op's allocator, one tensor per request, all held
// until Compute returns (the launcher asks twice and uses both buffers
// together; later users of the memory queue behind this op on the same stream).
struct TempAllocators {
  tensorflow::OpKernelContext* ctx;
  std::vector<tensorflow::Tensor>* held;
  void* operator()(size_t bytes) const {
    held->emplace_back();
    const tensorflow::Status s = ctx->allocate_temp(
        tensorflow::DT_INT8, tensorflow::TensorShape({static_cast<int64_t>(bytes)}), &held->back());
    if (!s.ok()) {
      ctx->SetStatus(s);
      return nullptr;
    }
    return held->back().flat<int8_t>().data();
  }
};

}  // namespace

template <typename T, typename Index>
struct SelectLargest<GPUDevice, T, Index> {
  void operator()(tensorflow::OpKernelContext* ctx, const T* x, int64_t n, const T* threshold,
                  int64_t capacity, T* values, Index* indices) {
    std::vector<tensorflow::Tensor> held;
    held.reserve(4);
    const cudaError_t err = select::cuda::LaunchSelectLargest(
        x, n, threshold, capacity, values, indices, TempAllocators{ctx, &held}, StreamOf(ctx));
    if (ctx->status().ok()) CheckLaunch(ctx, err, "SelectLargest");
  }
};

#define TFCOMP_INSTANTIATE_SELECT_GPU(T)               \
  template struct SelectLargest<GPUDevice, T, int32_t>; \
  template struct SelectLargest<GPUDevice, T, int64_t>;
TFCOMP_INSTANTIATE_SELECT_GPU(Eigen::half)
TFCOMP_INSTANTIATE_SELECT_GPU(Eigen::bfloat16)
TFCOMP_INSTANTIATE_SELECT_GPU(float)
TFCOMP_INSTANTIATE_SELECT_GPU(double)
#undef TFCOMP_INSTANTIATE_SELECT_GPU

}  // namespace functor
}  // namespace tfcomp

#endif  // GOOGLE_CUDA
