// GPU functor of the cast-and-divide op: the kernel of cast_cuda_kernels.cu.h,
// launched on the op's stream. The OpKernel and its GPU registrations are in
// cast_kernels.cc.
#if GOOGLE_CUDA
#define EIGEN_USE_GPU

#include "cast_cuda_kernels.cu.h"
#include "cast_kernels.h"
#include "custom_ops/common/gpu_launch.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace tfcomp {
namespace functor {

using GPUDevice = Eigen::GpuDevice;

template <typename Src, typename Dst>
struct CastDivide<GPUDevice, Src, Dst> {
  void operator()(tensorflow::OpKernelContext* ctx, const Src* x, int64_t n, const Dst* divisor,
                  Dst* out) {
    using CoreSrc = cast::Core<Src>;
    using CoreDst = cast::Core<Dst>;
    CheckLaunch(ctx,
                cast::cuda::LaunchCastDivide(reinterpret_cast<const CoreSrc*>(x), n,
                                             reinterpret_cast<const CoreDst*>(divisor),
                                             reinterpret_cast<CoreDst*>(out), StreamOf(ctx)),
                "CastDivide");
  }
};

#define TFCOMP_INSTANTIATE_CAST_GPU(SRC)                \
  template struct CastDivide<GPUDevice, SRC, Eigen::half>;     \
  template struct CastDivide<GPUDevice, SRC, Eigen::bfloat16>; \
  template struct CastDivide<GPUDevice, SRC, float>;           \
  template struct CastDivide<GPUDevice, SRC, double>;
TFCOMP_INSTANTIATE_CAST_GPU(Eigen::half)
TFCOMP_INSTANTIATE_CAST_GPU(Eigen::bfloat16)
TFCOMP_INSTANTIATE_CAST_GPU(float)
TFCOMP_INSTANTIATE_CAST_GPU(double)
#undef TFCOMP_INSTANTIATE_CAST_GPU

}  // namespace functor
}  // namespace tfcomp

#endif  // GOOGLE_CUDA
