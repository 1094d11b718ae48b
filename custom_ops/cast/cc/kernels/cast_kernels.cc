// Cast-and-divide op kernel: argument checks, the CPU functor, and the
// registrations for CPU (always) and GPU (when built with GOOGLE_CUDA), for
// every (SrcT, DstT) pair of half, bfloat16, float and double.
#define EIGEN_USE_THREADS
#include "cast_kernels.h"

#include <type_traits>

#include "cast_core.h"
#include "cast_cpu.h"
#include "custom_ops/common/cpu_shard.h"
#include "custom_ops/common/kernel_names.h"

namespace tfcomp {

namespace functor {

template <typename Src, typename Dst>
struct CastDivide<CPUDevice, Src, Dst> {
  void operator()(OpKernelContext* ctx, const Src* x, int64_t n, const Dst* divisor, Dst* out) {
    using CoreSrc = cast::Core<Src>;
    using CoreDst = cast::Core<Dst>;
    const cast::Acc<CoreDst> d = cast::Widen(*reinterpret_cast<const CoreDst*>(divisor));
    const cast::cpu::Isa isa = cast::cpu::BestIsa();
    const CoreSrc* in = reinterpret_cast<const CoreSrc*>(x);
    CoreDst* result = reinterpret_cast<CoreDst*>(out);
    // Elementwise: any split gives the same bits. ~1 cycle per element on the
    // vector paths; Shard keeps shards of at least ~10^4 elements.
    ShardCpu(ctx, n, 2, [&](int64_t begin, int64_t end) {
      cast::cpu::CastDivideLoop<CoreSrc, CoreDst>(isa, in + begin, end - begin, d, result + begin);
    });
  }
};

}  // namespace functor

template <typename Device, typename Src, typename Dst>
class CastDivideOp : public OpKernel {
 public:
  explicit CastDivideOp(OpKernelConstruction* c) : OpKernel(c) {}

  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    const Tensor& divisor = ctx->input(1);
    OP_REQUIRES(ctx, TensorShapeUtils::IsScalar(divisor.shape()),
                InvalidArgument("divisor must be a scalar, got shape ",
                                divisor.shape().DebugString()));
    Tensor* out = nullptr;
    if (std::is_same<Src, Dst>::value) {
      OP_REQUIRES_OK(ctx, ctx->forward_input_or_allocate_output({0}, 0, x.shape(), &out));
    } else {
      OP_REQUIRES_OK(ctx, ctx->allocate_output(0, x.shape(), &out));
    }
    const int64_t n = x.NumElements();
    if (n == 0) return;
    functor::CastDivide<Device, Src, Dst>()(ctx, x.flat<Src>().data(), n,
                                            divisor.flat<Dst>().data(), out->flat<Dst>().data());
  }
};

#define TFCOMP_REGISTER_CAST_KERNEL(DEVICE, DEVICE_TYPE, SRC, DST)                            \
  REGISTER_KERNEL_BUILDER(                                                                   \
      Name("TfcompCastDivide").Device(DEVICE).TypeConstraint<SRC>("SrcT").TypeConstraint<DST>( \
          "DstT"),                                                                           \
      CastDivideOp<DEVICE_TYPE, SRC, DST>);
#define TFCOMP_REGISTER_CAST_FROM(DEVICE, DEVICE_TYPE, SRC)                \
  TFCOMP_REGISTER_CAST_KERNEL(DEVICE, DEVICE_TYPE, SRC, Eigen::half)      \
  TFCOMP_REGISTER_CAST_KERNEL(DEVICE, DEVICE_TYPE, SRC, Eigen::bfloat16)  \
  TFCOMP_REGISTER_CAST_KERNEL(DEVICE, DEVICE_TYPE, SRC, float)            \
  TFCOMP_REGISTER_CAST_KERNEL(DEVICE, DEVICE_TYPE, SRC, double)
#define TFCOMP_REGISTER_CAST_ALL(DEVICE, DEVICE_TYPE)                 \
  TFCOMP_REGISTER_CAST_FROM(DEVICE, DEVICE_TYPE, Eigen::half)         \
  TFCOMP_REGISTER_CAST_FROM(DEVICE, DEVICE_TYPE, Eigen::bfloat16)     \
  TFCOMP_REGISTER_CAST_FROM(DEVICE, DEVICE_TYPE, float)               \
  TFCOMP_REGISTER_CAST_FROM(DEVICE, DEVICE_TYPE, double)

TFCOMP_REGISTER_CAST_ALL(DEVICE_CPU, CPUDevice)
#if GOOGLE_CUDA
TFCOMP_REGISTER_CAST_ALL(::tensorflow::DEVICE_GPU, GPUDevice)
#endif  // GOOGLE_CUDA

#undef TFCOMP_REGISTER_CAST_ALL
#undef TFCOMP_REGISTER_CAST_FROM
#undef TFCOMP_REGISTER_CAST_KERNEL

}  // namespace tfcomp
