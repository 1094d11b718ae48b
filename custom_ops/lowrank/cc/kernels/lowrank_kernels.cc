// Low-rank residual, product, compensate and project op kernels: argument checks, the CPU functor, and the
// registrations for CPU (always) and GPU (when built with GOOGLE_CUDA).
#define EIGEN_USE_THREADS
#include "lowrank_kernels.h"

#include <algorithm>
#include <type_traits>
#include <vector>

#include "custom_ops/common/cpu_shard.h"
#include "custom_ops/common/kernel_names.h"
#include "lowrank_core.h"
#include "lowrank_cpu.h"

namespace tfcomp {

namespace functor {

namespace {

// out[n, k] = m - p q^T; product: p q^T, the residual of a zero m with -p (m is
// not read and may be out).
template <typename T>
void LowRankRowsCpu(OpKernelContext* ctx, const T* m, const T* p, const T* q, int64_t n, int64_t k,
                    int64_t r, T* out, bool product) {
  using Acc = typename Accumulator<T>::type;
  namespace cpu = lowrank::cpu;
  const cpu::Isa isa = cpu::BestIsa();
  const int64_t width = cpu::PanelWidth<Acc>(isa);
  const int64_t panels = cpu::NumPanels(k, width);

  // q packed into panels (and converted to Acc) once; r * k elements, small next to m.
  Tensor packed_tensor;
  OP_REQUIRES_OK(ctx, ctx->allocate_temp(tensorflow::DataTypeToEnum<Acc>::value,
                                         TensorShape({cpu::PackedSize(k, r, width)}),
                                         &packed_tensor));
  Acc* packed = packed_tensor.flat<Acc>().data();
  ShardCpu(ctx, panels, 2 * width * r + 1, [&](int64_t begin, int64_t end) {
    cpu::PackQ(q, k, r, width, begin, end, packed);
  });

  // Blocks of kRowBlock rows; an element costs about a load, a store and
  // r / 8 vector FMAs.
  const int64_t blocks = (n + cpu::kRowBlock - 1) / cpu::kRowBlock;
  const int64_t cost = cpu::kRowBlock * k * (4 + r / 2);
  if constexpr (std::is_same_v<T, Acc>) {
    const T* factor = p;
    Tensor negated;
    if (product) {  // -p: n * r elements, small next to the output
      OP_REQUIRES_OK(ctx, ctx->allocate_temp(tensorflow::DataTypeToEnum<T>::value,
                                             TensorShape({n * r}), &negated));
      T* minus_p = negated.flat<T>().data();
      for (int64_t e = 0; e < n * r; ++e) minus_p[e] = -p[e];
      factor = minus_p;
    }
    // A large result in a buffer of its own goes straight to memory (non-temporal
    // stores); in m's buffer its lines are in cache already, having just been read.
    const bool stream = (product || out != m) &&
                        n * k * static_cast<int64_t>(sizeof(T)) >= cpu::kStreamingBytes;
    ShardCpu(ctx, blocks, cost, [&](int64_t begin, int64_t end) {
      const int64_t first = begin * cpu::kRowBlock;
      const int64_t last = std::min(n, end * cpu::kRowBlock);
      cpu::ResidualRows(isa, m + first * k, factor + first * r, packed, out + first * k, last - first,
                        k, r, stream, product);
    });
  } else {
    // float16 / bfloat16: each block's rows of m and p in float, updated in place.
    ShardCpu(ctx, blocks, cost, [&](int64_t begin, int64_t end) {
      std::vector<Acc> rows(cpu::kRowBlock * k), p_rows(cpu::kRowBlock * r);
      for (int64_t block = begin; block < end; ++block) {
        const int64_t first = block * cpu::kRowBlock;
        const int64_t count = std::min<int64_t>(cpu::kRowBlock, n - first);
        if (!product) {
          for (int64_t e = 0; e < count * k; ++e) rows[e] = static_cast<Acc>(m[first * k + e]);
        }
        for (int64_t e = 0; e < count * r; ++e) {
          const Acc value = static_cast<Acc>(p[first * r + e]);
          p_rows[e] = product ? -value : value;
        }
        cpu::ResidualRows(isa, rows.data(), p_rows.data(), packed, rows.data(), count, k, r,
                          /*stream=*/false, product);
        for (int64_t e = 0; e < count * k; ++e) out[first * k + e] = static_cast<T>(rows[e]);
      }
    });
  }
}

}  // namespace

template <typename T>
struct LowRankResidual<CPUDevice, T> {
  void operator()(OpKernelContext* ctx, const T* m, const T* p, const T* q, int64_t n, int64_t k,
                  int64_t r, T* out) {
    LowRankRowsCpu(ctx, m, p, q, n, k, r, out, /*product=*/false);
  }
};

template <typename T>
struct LowRankProduct<CPUDevice, T> {
  void operator()(OpKernelContext* ctx, const T* p, const T* q, int64_t n, int64_t k, int64_t r,
                  T* out) {
    LowRankRowsCpu<T>(ctx, out, p, q, n, k, r, out, /*product=*/true);
  }
};

template <typename T>
struct LowRankCompensate<CPUDevice, T> {
  void operator()(OpKernelContext* ctx, const T* g, const T* e, const T* q, int64_t n, int64_t k,
                  int64_t r, T* m, T* p) {
    using Acc = typename Accumulator<T>::type;
    namespace cpu = lowrank::cpu;
    const cpu::Isa isa = cpu::BestIsa();
    const int64_t padded = cpu::PaddedColumns(k);
    Tensor qt_tensor;  // q transposed and padded, r * k elements: small next to g
    OP_REQUIRES_OK(ctx, ctx->allocate_temp(tensorflow::DataTypeToEnum<Acc>::value,
                                           TensorShape({std::max<int64_t>(1, r * padded)}),
                                           &qt_tensor));
    Acc* qt = qt_tensor.flat<Acc>().data();
    ShardCpu(ctx, r, 2 * padded + 1, [&](int64_t begin, int64_t end) {
      cpu::TransposeQ(q, k, r, begin, end, qt);
    });
    // Blocks of kRowBlock rows; an element costs two loads, a store and r / 8 vector FMAs.
    const int64_t blocks = (n + cpu::kRowBlock - 1) / cpu::kRowBlock;
    const int64_t cost = cpu::kRowBlock * (k + 1) * (5 + r / 2);
    if constexpr (std::is_same_v<T, Acc>) {
      const bool stream = n * k * static_cast<int64_t>(sizeof(T)) >= cpu::kStreamingBytes;
      ShardCpu(ctx, blocks, cost, [&](int64_t begin, int64_t end) {
        const int64_t first = begin * cpu::kRowBlock;
        const int64_t last = std::min(n, end * cpu::kRowBlock);
        cpu::CompensateRows(isa, g + first * k, e + first * k, qt, m + first * k, p + first * r,
                            last - first, k, r, /*add=*/true, stream);
      });
    } else {
      // float16 / bfloat16: m rounded to T and written, then summed in float from a copy.
      ShardCpu(ctx, blocks, cost, [&](int64_t begin, int64_t end) {
        std::vector<Acc> rows(cpu::kRowBlock * k), p_rows(cpu::kRowBlock * r);
        for (int64_t block = begin; block < end; ++block) {
          const int64_t first = block * cpu::kRowBlock;
          const int64_t count = std::min<int64_t>(cpu::kRowBlock, n - first);
          for (int64_t x = 0; x < count * k; ++x) {
            const T value = lowrank::CompensatedElement(g[first * k + x], e[first * k + x]);
            m[first * k + x] = value;
            rows[x] = static_cast<Acc>(value);
          }
          cpu::CompensateRows(isa, rows.data(), static_cast<const Acc*>(nullptr), qt,
                              static_cast<Acc*>(nullptr), p_rows.data(), count, k, r,
                              /*add=*/false);
          for (int64_t x = 0; x < count * r; ++x) p[first * r + x] = static_cast<T>(p_rows[x]);
        }
      });
    }
  }
};

template <typename T>
struct LowRankProject<CPUDevice, T> {
  void operator()(OpKernelContext* ctx, const T* m, const T* p, int64_t n, int64_t k, int64_t r,
                  T* q) {
    using Acc = typename Accumulator<T>::type;
    namespace cpu = lowrank::cpu;
    const cpu::Isa isa = cpu::BestIsa();
    // Work items: a block of rows times a chunk of columns, whose partial sums (r x
    // kColumns of Acc) stay in L1 while the block's rows stream through. float16 and
    // bfloat16 take whole rows, converted to float once.
    constexpr int64_t kColumns = 1024;
    const int64_t blocks = (n + lowrank::kProjectRows - 1) / lowrank::kProjectRows;
    const int64_t chunks = std::is_same_v<T, Acc> ? (k + kColumns - 1) / kColumns : 1;
    const int64_t width = std::is_same_v<T, Acc> ? kColumns : k;
    Tensor partial_tensor;  // [block][j][c]: r * k per block of rows, 1/64 of m at r = 4
    OP_REQUIRES_OK(ctx, ctx->allocate_temp(tensorflow::DataTypeToEnum<Acc>::value,
                                           TensorShape({std::max<int64_t>(1, blocks * r * k)}),
                                           &partial_tensor));
    Acc* partials = partial_tensor.flat<Acc>().data();
    ShardCpu(ctx, blocks * chunks, lowrank::kProjectRows * width * (2 + r), [&](int64_t begin, int64_t end) {
      std::vector<Acc> rows_acc, p_acc;
      for (int64_t item = begin; item < end; ++item) {
        const int64_t block = item / chunks, chunk = item % chunks;
        const int64_t first = block * lowrank::kProjectRows;
        const int64_t rows = std::min(lowrank::kProjectRows, n - first);
        const int64_t c0 = chunk * width, c1 = std::min(k, c0 + width);
        Acc* part = partials + block * r * k;
        if constexpr (std::is_same_v<T, Acc>) {
          cpu::ProjectBlock(isa, m + first * k, p + first * r, part, rows, k, r, c0, c1);
        } else {
          rows_acc.resize(rows * k);
          p_acc.resize(rows * r);
          for (int64_t x = 0; x < rows * k; ++x) rows_acc[x] = static_cast<Acc>(m[first * k + x]);
          for (int64_t x = 0; x < rows * r; ++x) p_acc[x] = static_cast<Acc>(p[first * r + x]);
          cpu::ProjectBlock(isa, rows_acc.data(), p_acc.data(), part, rows, k, r, c0, c1);
        }
      }
    });
    // The blocks' sums added in block order, per element, each block's run of
    // columns read in order.
    ShardCpu(ctx, k, (blocks + 1) * r * 2, [&](int64_t begin, int64_t end) {
      std::vector<Acc> total(end - begin);
      for (int64_t j = 0; j < r; ++j) {
        if (blocks == 0) std::fill(total.begin(), total.end(), Acc(0));
        for (int64_t b = 0; b < blocks; ++b) {
          const Acc* part = partials + (b * r + j) * k + begin;
          if (b == 0) {
            std::copy(part, part + (end - begin), total.begin());
          } else {
            for (int64_t c = 0; c < end - begin; ++c) total[c] = total[c] + part[c];
          }
        }
        for (int64_t c = begin; c < end; ++c) q[c * r + j] = static_cast<T>(total[c - begin]);
      }
    });
  }
};

}  // namespace functor

namespace {

// `name` is a matrix `dims` (rank 2).
tensorflow::Status CheckMatrix(const Tensor& t, const char* name, const char* dims) {
  if (TensorShapeUtils::IsMatrix(t.shape())) return tensorflow::Status();
  return InvalidArgument(name, " must be a matrix ", dims, " (rank 2), got shape ", t.shape().DebugString());
}

// b has one row per row (axis 0, n) or per column (axis 1, k) of the matrix a.
tensorflow::Status CheckRowsMatch(const Tensor& b, const char* b_name, const Tensor& a,
                                  const char* a_name, int axis) {
  if (b.dim_size(0) == a.dim_size(axis)) return tensorflow::Status();
  return InvalidArgument(b_name, " must have one row per ", axis == 0 ? "row" : "column", " of ", a_name,
                         ": ", a_name, " is ", a.shape().DebugString(), " (", axis == 0 ? "n" : "k",
                         " = ", a.dim_size(axis), ") but ", b_name, " is ", b.shape().DebugString());
}

// The factors p [n, r] and q [k, r]: matrices of one rank r.
tensorflow::Status CheckFactors(const Tensor& p, const Tensor& q) {
  TF_RETURN_IF_ERROR(CheckMatrix(p, "p", "[n, r]"));
  TF_RETURN_IF_ERROR(CheckMatrix(q, "q", "[k, r]"));
  if (q.dim_size(1) != p.dim_size(1)) {
    return InvalidArgument("p and q must have the same number of columns (the rank r): p is ",
                           p.shape().DebugString(), " but q is ", q.shape().DebugString());
  }
  return tensorflow::Status();
}

}  // namespace

template <typename Device, typename T>
class LowRankResidualOp : public OpKernel {
 public:
  explicit LowRankResidualOp(OpKernelConstruction* c) : OpKernel(c) {}

  void Compute(OpKernelContext* ctx) override {
    const Tensor& m = ctx->input(0);
    const Tensor& p = ctx->input(1);
    const Tensor& q = ctx->input(2);
    OP_REQUIRES_OK(ctx, CheckMatrix(m, "m", "[n, k]"));
    OP_REQUIRES_OK(ctx, CheckFactors(p, q));
    OP_REQUIRES_OK(ctx, CheckRowsMatch(p, "p", m, "m", 0));
    OP_REQUIRES_OK(ctx, CheckRowsMatch(q, "q", m, "m", 1));
    const int64_t n = m.dim_size(0), k = m.dim_size(1), r = p.dim_size(1);
    // The residual may take over m's buffer (each element is read before it is written).
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->forward_input_or_allocate_output({0}, 0, m.shape(), &out));
    if (n == 0 || k == 0) return;
    functor::LowRankResidual<Device, T>()(ctx, m.flat<T>().data(), p.flat<T>().data(),
                                          q.flat<T>().data(), n, k, r, out->flat<T>().data());
  }
};

template <typename Device, typename T>
class LowRankProductOp : public OpKernel {
 public:
  explicit LowRankProductOp(OpKernelConstruction* c) : OpKernel(c) {}

  void Compute(OpKernelContext* ctx) override {
    const Tensor& p = ctx->input(0);
    const Tensor& q = ctx->input(1);
    OP_REQUIRES_OK(ctx, CheckFactors(p, q));
    const int64_t n = p.dim_size(0), k = q.dim_size(0), r = p.dim_size(1);
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({n, k}), &out));
    if (n == 0 || k == 0) return;
    functor::LowRankProduct<Device, T>()(ctx, p.flat<T>().data(), q.flat<T>().data(), n, k, r,
                                         out->flat<T>().data());
  }
};

template <typename Device, typename T>
class LowRankCompensateOp : public OpKernel {
 public:
  explicit LowRankCompensateOp(OpKernelConstruction* c) : OpKernel(c) {}

  void Compute(OpKernelContext* ctx) override {
    const Tensor& g = ctx->input(0);
    const Tensor& e = ctx->input(1);
    const Tensor& q = ctx->input(2);
    OP_REQUIRES_OK(ctx, CheckMatrix(g, "g", "[n, k]"));
    OP_REQUIRES(ctx, e.shape() == g.shape(),
                InvalidArgument("e must have g's shape: g is ", g.shape().DebugString(),
                                " but e is ", e.shape().DebugString()));
    OP_REQUIRES_OK(ctx, CheckMatrix(q, "q", "[k, r]"));
    OP_REQUIRES_OK(ctx, CheckRowsMatch(q, "q", g, "g", 1));
    const int64_t n = g.dim_size(0), k = g.dim_size(1), r = q.dim_size(1);
    // m in a buffer of its own: a rank block after the first reads g and e again.
    Tensor* m = nullptr;
    Tensor* p = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, g.shape(), &m));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({n, r}), &p));
    if (n == 0 || (r == 0 && k == 0)) return;  // k == 0 alone still writes p: sums of no columns, +0
    functor::LowRankCompensate<Device, T>()(ctx, g.flat<T>().data(), e.flat<T>().data(),
                                            q.flat<T>().data(), n, k, r, m->flat<T>().data(),
                                            p->flat<T>().data());
  }
};

template <typename Device, typename T>
class LowRankProjectOp : public OpKernel {
 public:
  explicit LowRankProjectOp(OpKernelConstruction* c) : OpKernel(c) {}

  void Compute(OpKernelContext* ctx) override {
    const Tensor& m = ctx->input(0);
    const Tensor& p = ctx->input(1);
    OP_REQUIRES_OK(ctx, CheckMatrix(m, "m", "[n, k]"));
    OP_REQUIRES_OK(ctx, CheckMatrix(p, "p", "[n, r]"));
    OP_REQUIRES_OK(ctx, CheckRowsMatch(p, "p", m, "m", 0));
    const int64_t n = m.dim_size(0), k = m.dim_size(1), r = p.dim_size(1);
    Tensor* q = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({k, r}), &q));
    if (k == 0 || r == 0) return;
    functor::LowRankProject<Device, T>()(ctx, m.flat<T>().data(), p.flat<T>().data(), n, k, r,
                                         q->flat<T>().data());
  }
};

#define TFCOMP_REGISTER_LOWRANK_KERNEL(DEVICE, DEVICE_TYPE, T)                                \
  REGISTER_KERNEL_BUILDER(Name("TfcompLowRankResidual").Device(DEVICE).TypeConstraint<T>("T"),   \
                          LowRankResidualOp<DEVICE_TYPE, T>);                                   \
  REGISTER_KERNEL_BUILDER(Name("TfcompLowRankProduct").Device(DEVICE).TypeConstraint<T>("T"),    \
                          LowRankProductOp<DEVICE_TYPE, T>);                                    \
  REGISTER_KERNEL_BUILDER(Name("TfcompLowRankCompensate").Device(DEVICE).TypeConstraint<T>("T"), \
                          LowRankCompensateOp<DEVICE_TYPE, T>);                                 \
  REGISTER_KERNEL_BUILDER(Name("TfcompLowRankProject").Device(DEVICE).TypeConstraint<T>("T"),    \
                          LowRankProjectOp<DEVICE_TYPE, T>);

#define TFCOMP_REGISTER_LOWRANK_TYPES(DEVICE, DEVICE_TYPE)              \
  TFCOMP_REGISTER_LOWRANK_KERNEL(DEVICE, DEVICE_TYPE, Eigen::half)      \
  TFCOMP_REGISTER_LOWRANK_KERNEL(DEVICE, DEVICE_TYPE, Eigen::bfloat16)  \
  TFCOMP_REGISTER_LOWRANK_KERNEL(DEVICE, DEVICE_TYPE, float)            \
  TFCOMP_REGISTER_LOWRANK_KERNEL(DEVICE, DEVICE_TYPE, double)

TFCOMP_REGISTER_LOWRANK_TYPES(DEVICE_CPU, CPUDevice)
#if GOOGLE_CUDA
TFCOMP_REGISTER_LOWRANK_TYPES(::tensorflow::DEVICE_GPU, GPUDevice)
#endif

#undef TFCOMP_REGISTER_LOWRANK_TYPES
#undef TFCOMP_REGISTER_LOWRANK_KERNEL

}  // namespace tfcomp
