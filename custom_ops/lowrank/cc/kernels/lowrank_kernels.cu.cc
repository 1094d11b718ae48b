// GPU functors of the low-rank residual, product, compensate and project ops: the kernel of
// lowrank_cuda_kernels.cu.h, launched on the op's stream. The OpKernel and its
// GPU registrations are in lowrank_kernels.cc.
#if GOOGLE_CUDA
#define EIGEN_USE_GPU

#include "custom_ops/common/gpu_launch.h"
#include "lowrank_cuda_kernels.cu.h"
#include "lowrank_kernels.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/types.h"

namespace tfcomp {
namespace functor {

using GPUDevice = Eigen::GpuDevice;

template <typename T>
struct LowRankResidual<GPUDevice, T> {
  void operator()(tensorflow::OpKernelContext* ctx, const T* m, const T* p, const T* q, int64_t n,
                  int64_t k, int64_t r, T* out) {
    CheckLaunch(ctx, lowrank::cuda::LaunchLowRankResidual(m, p, q, n, k, r, out, StreamOf(ctx)),
                "LowRankResidual");
  }
};

template <typename T>
struct LowRankProduct<GPUDevice, T> {
  void operator()(tensorflow::OpKernelContext* ctx, const T* p, const T* q, int64_t n, int64_t k,
                  int64_t r, T* out) {
    CheckLaunch(ctx, lowrank::cuda::LaunchLowRankProduct(p, q, n, k, r, out, StreamOf(ctx)),
                "LowRankProduct");
  }
};

template <typename T>
struct LowRankCompensate<GPUDevice, T> {
  void operator()(tensorflow::OpKernelContext* ctx, const T* g, const T* e, const T* q, int64_t n,
                  int64_t k, int64_t r, T* m, T* p) {
    CheckLaunch(ctx, lowrank::cuda::LaunchLowRankCompensate(g, e, q, n, k, r, m, p, StreamOf(ctx)),
                "LowRankCompensate");
  }
};

template <typename T>
struct LowRankProject<GPUDevice, T> {
  void operator()(tensorflow::OpKernelContext* ctx, const T* m, const T* p, int64_t n, int64_t k,
                  int64_t r, T* q) {
    CheckLaunch(ctx, lowrank::cuda::LaunchLowRankProject(m, p, n, k, r, q, StreamOf(ctx)),
                "LowRankProject");
  }
};

template struct LowRankResidual<GPUDevice, Eigen::half>;
template struct LowRankResidual<GPUDevice, Eigen::bfloat16>;
template struct LowRankResidual<GPUDevice, float>;
template struct LowRankResidual<GPUDevice, double>;
template struct LowRankProduct<GPUDevice, Eigen::half>;
template struct LowRankProduct<GPUDevice, Eigen::bfloat16>;
template struct LowRankProduct<GPUDevice, float>;
template struct LowRankProduct<GPUDevice, double>;
template struct LowRankCompensate<GPUDevice, Eigen::half>;
template struct LowRankCompensate<GPUDevice, Eigen::bfloat16>;
template struct LowRankCompensate<GPUDevice, float>;
template struct LowRankCompensate<GPUDevice, double>;
template struct LowRankProject<GPUDevice, Eigen::half>;
template struct LowRankProject<GPUDevice, Eigen::bfloat16>;
template struct LowRankProject<GPUDevice, float>;
template struct LowRankProject<GPUDevice, double>;

}  // namespace functor
}  // namespace tfcomp

#endif  // GOOGLE_CUDA
