// GPU functors of the sign-packing ops: the kernels of sign_cuda_kernels.cu.h,
// launched on the op's stream. The OpKernels and their GPU registrations are in
// sign_kernels.cc.
#if GOOGLE_CUDA
#define EIGEN_USE_GPU

#include "custom_ops/common/gpu_launch.h"
#include "sign_cuda_kernels.cu.h"
#include "sign_kernels.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/types.h"

namespace tfcomp {
namespace functor {

using GPUDevice = Eigen::GpuDevice;

template <typename T>
struct SignPack<GPUDevice, T> {
  void operator()(tensorflow::OpKernelContext* ctx, const T* x, int64_t n, uint32_t zero_bit,
                  uint32_t* words, T* scale) {
    using Acc = sign::cuda::Acc<T>;
    tensorflow::Tensor partials;
    OP_REQUIRES_OK(ctx, ctx->allocate_temp(tensorflow::DataTypeToEnum<Acc>::value,
                                           tensorflow::TensorShape({sign::NumScaleBlocks(n)}),
                                           &partials));
    CheckLaunch(ctx,
                sign::cuda::LaunchSignPack(x, n, zero_bit, words, partials.flat<Acc>().data(),
                                           scale, StreamOf(ctx)),
                "SignPack");
  }
};

template <typename T>
struct SignEfPack<GPUDevice, T> {
  void operator()(tensorflow::OpKernelContext* ctx, const T* g, const T* e, int64_t n,
                  uint32_t zero_bit, uint32_t* words, T* scale, T* residual) {
    using Acc = sign::cuda::Acc<T>;
    tensorflow::Tensor partials;
    OP_REQUIRES_OK(ctx, ctx->allocate_temp(tensorflow::DataTypeToEnum<Acc>::value,
                                           tensorflow::TensorShape({sign::NumScaleBlocks(n)}),
                                           &partials));
    CheckLaunch(ctx,
                sign::cuda::LaunchSignEfPack(g, e, n, zero_bit, words, partials.flat<Acc>().data(),
                                             scale, residual, StreamOf(ctx)),
                "SignEfPack");
  }
};

template <typename T>
struct SignScaledSum<GPUDevice, T> {
  void operator()(tensorflow::OpKernelContext* ctx, const uint32_t* words, const T* scales,
                  int64_t k, int64_t num_words, int64_t n, T weight, T* out) {
    CheckLaunch(ctx,
                sign::cuda::LaunchSignScaledSum(words, scales, k, num_words, n, weight, out,
                                                StreamOf(ctx)),
                "SignScaledSum");
  }
};

template <typename T>
struct SignUnpack<GPUDevice, T> {
  void operator()(tensorflow::OpKernelContext* ctx, const uint32_t* words, const T* scale,
                  int64_t n, T* out) {
    CheckLaunch(ctx, sign::cuda::LaunchSignUnpack(words, scale, n, out, StreamOf(ctx)),
                "SignUnpack");
  }
};

template <typename T>
struct SignMajority<GPUDevice, T> {
  void operator()(tensorflow::OpKernelContext* ctx, const uint32_t* words, int64_t k,
                  int64_t num_words, int64_t n, T* out) {
    CheckLaunch(ctx,
                sign::cuda::LaunchSignMajority(words, k, num_words, n, out, StreamOf(ctx)),
                "SignMajority");
  }
};

#define TFCOMP_INSTANTIATE_SIGN_GPU(T)      \
  template struct SignPack<GPUDevice, T>;   \
  template struct SignEfPack<GPUDevice, T>; \
  template struct SignScaledSum<GPUDevice, T>; \
  template struct SignUnpack<GPUDevice, T>; \
  template struct SignMajority<GPUDevice, T>;
TFCOMP_INSTANTIATE_SIGN_GPU(Eigen::half)
TFCOMP_INSTANTIATE_SIGN_GPU(Eigen::bfloat16)
TFCOMP_INSTANTIATE_SIGN_GPU(float)
TFCOMP_INSTANTIATE_SIGN_GPU(double)
#undef TFCOMP_INSTANTIATE_SIGN_GPU

}  // namespace functor
}  // namespace tfcomp

#endif  // GOOGLE_CUDA
