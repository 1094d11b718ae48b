// Device-dispatched functor of exact threshold/top-k selection
// (select_core.h); CPU in select_kernels.cc, GPU in select_kernels.cu.cc.
#ifndef TFCOMP_CUSTOM_OPS_SPARSE_CC_KERNELS_SELECT_KERNELS_H_
#define TFCOMP_CUSTOM_OPS_SPARSE_CC_KERNELS_SELECT_KERNELS_H_

#include <cstdint>

#include "select_core.h"

namespace tensorflow {
class OpKernelContext;
}

namespace tfcomp {
namespace functor {

// values[capacity], indices[capacity] (capacity >= 1): the capacity largest
// qualifying elements of x[n] in index order, padded with (0, -1); threshold
// points to one element (device memory on GPUs).
template <typename Device, typename T, typename Index>
struct SelectLargest {
  void operator()(tensorflow::OpKernelContext* ctx, const T* x, int64_t n, const T* threshold,
                  int64_t capacity, T* values, Index* indices);
};

}  // namespace functor
}  // namespace tfcomp

#endif  // TFCOMP_CUSTOM_OPS_SPARSE_CC_KERNELS_SELECT_KERNELS_H_
