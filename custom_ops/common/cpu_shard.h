// Runs work over the op's intra-op thread pool (TensorFlow's CPU devices), and
// gives it scratch memory.
#ifndef TFCOMP_CUSTOM_OPS_COMMON_CPU_SHARD_H_
#define TFCOMP_CUSTOM_OPS_COMMON_CPU_SHARD_H_

#include <algorithm>
#include <cstdint>

#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/util/work_sharder.h"

namespace tfcomp {

// Runs fn(begin, end) over [0, total) on the op's intra-op threads;
// cost_per_unit (in cycles) decides how finely the range is split.
template <typename Fn>
void ShardCpu(tensorflow::OpKernelContext* ctx, int64_t total, int64_t cost_per_unit, Fn fn) {
  auto* workers = ctx->device()->tensorflow_cpu_worker_threads();
  tensorflow::Shard(workers->num_threads, workers->workers, total, cost_per_unit,
                    [&fn](int64_t begin, int64_t end) { fn(begin, end); });
}

// scratch(bytes): memory for the rest of the op's Compute, uninitialized and
// 8-byte aligned, from the op's allocator (which under
// TF_CPU_ALLOCATOR_USE_BFC hands back the same pages each step: fresh pages
// for tens of megabytes cost more than the work written to them), kept alive
// by *holder; nullptr, with the allocator's error as the op's status, if it
// cannot be had.
inline auto OpScratch(tensorflow::OpKernelContext* ctx, tensorflow::Tensor* holder) {
  return [ctx, holder](int64_t bytes) -> void* {
    const tensorflow::TensorShape shape({std::max<int64_t>(1, (bytes + 7) / 8)});
    const auto status = ctx->allocate_temp(tensorflow::DT_INT64, shape, holder);
    if (!status.ok()) {
      ctx->SetStatus(status);
      return nullptr;
    }
    return holder->flat<int64_t>().data();
  };
}

}  // namespace tfcomp

#endif  // TFCOMP_CUSTOM_OPS_COMMON_CPU_SHARD_H_
