// CUDA kernel of the cast-and-divide op and its launcher, on plain pointers and
// a stream: no TensorFlow, no Eigen. Included by cast_kernels.cu.cc and by the
// standalone test cuda_test/cast_core_test.cu, both with the core's element
// types (Half, BFloat16, float, double). The per-element logic is cast_core.h's,
// as on the CPU.
#ifndef TFCOMP_CUSTOM_OPS_CAST_CC_KERNELS_CAST_CUDA_KERNELS_CU_H_
#define TFCOMP_CUSTOM_OPS_CAST_CC_KERNELS_CAST_CUDA_KERNELS_CU_H_

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "cast_core.h"
#include "custom_ops/common/cuda_vec.cu.h"

namespace tfcomp {
namespace cast {
namespace cuda {

constexpr int kThreads = 256;

using cuda_vec::Vec;

// Elements per thread and access: 16 bytes of the wider of the two types.
template <typename Src, typename Dst>
constexpr int kWidth = static_cast<int>(16 / (sizeof(Src) > sizeof(Dst) ? sizeof(Src) : sizeof(Dst)));

// Thread t converts x[t V, t V + V) with one load and one store (x aligned to
// V * sizeof(Src), out to V * sizeof(Dst)); the last, partial pack element by
// element. Grid-stride. out may be x when Src is Dst.
template <typename Src, typename Dst, int V>
__global__ void __launch_bounds__(kThreads)
    CastDivideKernel(const Src* x, int64_t n, const Dst* __restrict__ divisor, Dst* out) {
  const Acc<Dst> d = Widen(*divisor);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t packs = (n + V - 1) / V;
  for (int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < packs;
       p += stride) {
    const int64_t i = p * V;
    if (i + V <= n) {
      const Vec<Src, V> in = *reinterpret_cast<const Vec<Src, V>*>(x + i);
      Vec<Dst, V> result;
#pragma unroll
      for (int e = 0; e < V; ++e) result.v[e] = CastDivide<Dst>(in.v[e], d);
      *reinterpret_cast<Vec<Dst, V>*>(out + i) = result;
    } else {
      for (int64_t j = i; j < n; ++j) out[j] = CastDivide<Dst>(x[j], d);
    }
  }
}

inline unsigned int Grid(int64_t packs) {
  const int64_t blocks = (packs + kThreads - 1) / kThreads;
  return static_cast<unsigned int>(blocks < (int64_t{1} << 20) ? blocks : (int64_t{1} << 20));
}

// out[n] = tf.cast(x[n], Dst) / divisor[0] (divisor in device memory). Wide
// accesses where x and out are 16-byte aligned (every TensorFlow allocation),
// else one element at a time; the bits are the same either way.
template <typename Src, typename Dst>
cudaError_t LaunchCastDivide(const Src* x, int64_t n, const Dst* divisor, Dst* out,
                             cudaStream_t stream) {
  if (n > 0) {
    constexpr int V = kWidth<Src, Dst>;
    if (cuda_vec::Aligned16(x) && cuda_vec::Aligned16(out)) {
      CastDivideKernel<Src, Dst, V><<<Grid((n + V - 1) / V), kThreads, 0, stream>>>(x, n, divisor, out);
    } else {
      CastDivideKernel<Src, Dst, 1><<<Grid(n), kThreads, 0, stream>>>(x, n, divisor, out);
    }
  }
  return cudaGetLastError();
}

}  // namespace cuda
}  // namespace cast
}  // namespace tfcomp

#endif  // TFCOMP_CUSTOM_OPS_CAST_CC_KERNELS_CAST_CUDA_KERNELS_CU_H_
