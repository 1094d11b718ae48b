#ifndef TFCOMP_CUSTOM_OPS_COMMON_KERNEL_NAMES_H_
#define TFCOMP_CUSTOM_OPS_COMMON_KERNEL_NAMES_H_

// The TensorFlow kernel-API names that every op family's kernels use, brought
// into tfcomp's namespace once.
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

}  // namespace tfcomp

#endif  // TFCOMP_CUSTOM_OPS_COMMON_KERNEL_NAMES_H_
