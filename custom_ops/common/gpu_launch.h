// The GPU functors' two pieces of glue: the op's CUDA stream, and a launch
// error turned into the op's status. Included only by *.cu.cc files.
#ifndef TFCOMP_CUSTOM_OPS_COMMON_GPU_LAUNCH_H_
#define TFCOMP_CUSTOM_OPS_COMMON_GPU_LAUNCH_H_

#if GOOGLE_CUDA
#ifndef EIGEN_USE_GPU
#define EIGEN_USE_GPU
#endif

#include "tensorflow/core/framework/op_kernel.h"

namespace tfcomp {

inline cudaStream_t StreamOf(tensorflow::OpKernelContext* ctx) {
  return ctx->eigen_device<Eigen::GpuDevice>().stream();
}

// Sets ctx's status to Internal("tfcomp <what>: CUDA launch failed: ...") if err is an error.
inline void CheckLaunch(tensorflow::OpKernelContext* ctx, cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    ctx->SetStatus(tensorflow::errors::Internal("tfcomp ", what, ": CUDA launch failed: ",
                                                cudaGetErrorString(err)));
  }
}

}  // namespace tfcomp

#endif  // GOOGLE_CUDA
#endif  // TFCOMP_CUSTOM_OPS_COMMON_GPU_LAUNCH_H_
