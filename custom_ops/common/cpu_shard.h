// Runs work over the op's intra-op thread pool (TensorFlow's CPU devices).
#ifndef TFCOMP_CUSTOM_OPS_COMMON_CPU_SHARD_H_
#define TFCOMP_CUSTOM_OPS_COMMON_CPU_SHARD_H_

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

}  // namespace tfcomp

#endif  // TFCOMP_CUSTOM_OPS_COMMON_CPU_SHARD_H_
