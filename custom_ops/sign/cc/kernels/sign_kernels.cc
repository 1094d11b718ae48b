// Sign-packing op kernels: argument checks, the CPU functors, and the
// registrations for CPU (always) and GPU (when built with GOOGLE_CUDA).
#define EIGEN_USE_THREADS
#include "sign_kernels.h"

#include <cstring>
#include <vector>

#include "custom_ops/common/cpu_isa.h"
#include "custom_ops/common/cpu_shard.h"
#include "custom_ops/common/kernel_names.h"
#include "sign_core.h"

namespace tfcomp {

namespace {

// Packs one scale block (at most kScaleBlockElements elements) and returns the
// sum of |x| over it. Generic path: the per-element logic of sign_core.h.
template <typename T>
typename sign::Accumulator<T>::type PackBlockGeneric(const T* x, int64_t count,
                                                     uint32_t* words) {
  typename sign::Accumulator<T>::type sum = 0;
  for (int64_t i = 0; i < count; i += sign::kBitsPerWord) {
    const int in_word = static_cast<int>(
        count - i < sign::kBitsPerWord ? count - i : sign::kBitsPerWord);
    words[i / sign::kBitsPerWord] = sign::PackWord(x + i, in_word, &sum);
  }
  return sum;
}

#if TFCOMP_X86
// float32 with AVX2: 8 elements per instruction. Same bit rule as
// sign::SignBit, on the bit patterns: 0 for NaN (magnitude above +Inf's) and
// for a set sign bit with a nonzero magnitude. movemask reads those 0s off.
__attribute__((target("avx2"))) inline uint32_t NegativeOrNanMask(__m256 v) {
  const __m256i bits = _mm256_castps_si256(v);
  const __m256i magnitude = _mm256_and_si256(bits, _mm256_set1_epi32(0x7fffffff));
  const __m256i is_nan = _mm256_cmpgt_epi32(magnitude, _mm256_set1_epi32(0x7f800000));
  const __m256i is_zero = _mm256_cmpeq_epi32(magnitude, _mm256_setzero_si256());
  const __m256i is_negative = _mm256_andnot_si256(is_zero, _mm256_srai_epi32(bits, 31));
  return static_cast<uint32_t>(
      _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_or_si256(is_nan, is_negative))));
}

__attribute__((target("avx2"))) float PackBlockFloatAvx2(const float* x, int64_t count,
                                                         uint32_t* words) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  __m256 acc2 = _mm256_setzero_ps(), acc3 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= count; i += 32) {
    const __m256 a = _mm256_loadu_ps(x + i);
    const __m256 b = _mm256_loadu_ps(x + i + 8);
    const __m256 c = _mm256_loadu_ps(x + i + 16);
    const __m256 d = _mm256_loadu_ps(x + i + 24);
    words[i / 32] = ~(NegativeOrNanMask(a) | NegativeOrNanMask(b) << 8 |
                      NegativeOrNanMask(c) << 16 | NegativeOrNanMask(d) << 24);
    acc0 = _mm256_add_ps(acc0, _mm256_and_ps(a, abs_mask));
    acc1 = _mm256_add_ps(acc1, _mm256_and_ps(b, abs_mask));
    acc2 = _mm256_add_ps(acc2, _mm256_and_ps(c, abs_mask));
    acc3 = _mm256_add_ps(acc3, _mm256_and_ps(d, abs_mask));
  }
  const __m256 acc = _mm256_add_ps(_mm256_add_ps(acc0, acc1), _mm256_add_ps(acc2, acc3));
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, acc);
  float sum = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) +
              ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
  if (i < count) sum += PackBlockGeneric(x + i, count - i, words + i / 32);
  return sum;
}
#endif

template <typename T>
typename sign::Accumulator<T>::type PackBlock(const T* x, int64_t count, uint32_t* words) {
  return PackBlockGeneric(x, count, words);
}

#if TFCOMP_X86
template <>
float PackBlock<float>(const float* x, int64_t count, uint32_t* words) {
  return IsaSupported(Isa::kAvx2) ? PackBlockFloatAvx2(x, count, words)
                                  : PackBlockGeneric(x, count, words);
}
#endif

// kSpreadByte[v] holds the 8 bits of byte v in 8 separate bytes, so that
// adding spread words counts each bit position in its own byte lane.
constexpr uint64_t SpreadByte(unsigned v) {
  uint64_t spread = 0;
  for (int j = 0; j < 8; ++j) spread |= static_cast<uint64_t>((v >> j) & 1u) << (8 * j);
  return spread;
}
struct SpreadTable {
  uint64_t entries[256];
  constexpr SpreadTable() : entries() {
    for (unsigned v = 0; v < 256; ++v) entries[v] = SpreadByte(v);
  }
};
constexpr SpreadTable kSpreadByte;

// positives[b] = number of the k words rows[r * stride] with bit b set.
// Counts 8 bit positions per 64-bit add; byte lanes are flushed every 255 rows.
void CountSetBits(const uint32_t* rows, int64_t stride, int64_t k, int32_t* positives) {
  for (int b = 0; b < sign::kBitsPerWord; ++b) positives[b] = 0;
  for (int64_t r0 = 0; r0 < k; r0 += 255) {
    const int64_t r1 = std::min<int64_t>(k, r0 + 255);
    uint64_t lanes[4] = {0, 0, 0, 0};
    for (int64_t r = r0; r < r1; ++r) {
      const uint32_t word = rows[r * stride];
      for (int c = 0; c < 4; ++c) lanes[c] += kSpreadByte.entries[(word >> (8 * c)) & 0xffu];
    }
    for (int c = 0; c < 4; ++c) {
      for (int j = 0; j < 8; ++j) positives[8 * c + j] += static_cast<int32_t>((lanes[c] >> (8 * j)) & 0xffu);
    }
  }
}

}  // namespace

namespace functor {

template <typename T>
struct SignPack<CPUDevice, T> {
  void operator()(OpKernelContext* ctx, const T* x, int64_t n, uint32_t* words,
                  T* scale) {
    const int64_t blocks = sign::NumScaleBlocks(n);
    std::vector<double> block_sums(blocks);
    ShardCpu(ctx, blocks, sign::kScaleBlockElements * 2, [&](int64_t begin, int64_t end) {
      for (int64_t b = begin; b < end; ++b) {
        const int64_t first = b * sign::kScaleBlockElements;
        const int64_t count = std::min(sign::kScaleBlockElements, n - first);
        block_sums[b] = static_cast<double>(
            PackBlock(x + first, count, words + first / sign::kBitsPerWord));
      }
    });
    double total = 0;
    for (double s : block_sums) total += s;
    *scale = static_cast<T>(n > 0 ? total / static_cast<double>(n) : 0.0);
  }
};

template <typename T>
struct SignUnpack<CPUDevice, T> {
  void operator()(OpKernelContext* ctx, const uint32_t* words, const T* scale, int64_t n,
                  T* out) {
    const T s = *scale;
    ShardCpu(ctx, sign::NumWords(n), 32 * 2, [&](int64_t begin, int64_t end) {
      for (int64_t w = begin; w < end; ++w) {
        const int64_t first = w * sign::kBitsPerWord;
        const int bits = static_cast<int>(std::min<int64_t>(sign::kBitsPerWord, n - first));
        const uint32_t word = words[w];
        if (bits == sign::kBitsPerWord) {
          // A fixed trip count lets the compiler turn this into vector blends.
          for (int b = 0; b < sign::kBitsPerWord; ++b) out[first + b] = sign::UnpackValue(word, b, s);
        } else {
          for (int b = 0; b < bits; ++b) out[first + b] = sign::UnpackValue(word, b, s);
        }
      }
    });
  }
};

template <typename T>
struct SignMajority<CPUDevice, T> {
  void operator()(OpKernelContext* ctx, const uint32_t* words, int64_t k,
                  int64_t num_words, int64_t n, T* out) {
    ShardCpu(ctx, sign::NumWords(n), 32 * (k + 2), [&](int64_t begin, int64_t end) {
      for (int64_t w = begin; w < end; ++w) {
        int32_t positives[sign::kBitsPerWord];
        CountSetBits(words + w, num_words, k, positives);
        const int64_t first = w * sign::kBitsPerWord;
        const int bits = static_cast<int>(std::min<int64_t>(sign::kBitsPerWord, n - first));
        for (int b = 0; b < bits; ++b) {
          out[first + b] = static_cast<T>(static_cast<float>(sign::MajorityVote(positives[b], k)));
        }
      }
    });
  }
};

}  // namespace functor

namespace {

// Reads the scalar element count n and checks it fits in num_words words.
tensorflow::Status ReadCount(OpKernelContext* ctx, int index, int64_t num_words, int64_t* n) {
  const Tensor& t = ctx->input(index);
  if (!TensorShapeUtils::IsScalar(t.shape())) {
    return InvalidArgument("n must be a scalar int64, got shape ", t.shape().DebugString());
  }
  *n = t.scalar<int64_t>()();
  if (*n < 0) return InvalidArgument("n must be >= 0, got ", *n);
  if (*n > num_words * sign::kBitsPerWord) {
    return InvalidArgument("n = ", *n, " is larger than 32 * W = ", num_words * sign::kBitsPerWord,
                           " (W = ", num_words, " words hold at most that many signs)");
  }
  return tensorflow::Status();
}

}  // namespace

template <typename Device, typename T>
class SignPackOp : public OpKernel {
 public:
  explicit SignPackOp(OpKernelConstruction* c) : OpKernel(c) {}

  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    const int64_t n = x.NumElements();
    Tensor* words = nullptr;
    Tensor* scale = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({sign::NumWords(n)}), &words));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({}), &scale));
    functor::SignPack<Device, T>()(ctx, x.flat<T>().data(), n,
                                   words->flat<uint32_t>().data(), scale->flat<T>().data());
  }
};

template <typename Device, typename T>
class SignUnpackOp : public OpKernel {
 public:
  explicit SignUnpackOp(OpKernelConstruction* c) : OpKernel(c) {}

  void Compute(OpKernelContext* ctx) override {
    const Tensor& words = ctx->input(0);
    const Tensor& scale = ctx->input(1);
    OP_REQUIRES(ctx, TensorShapeUtils::IsVector(words.shape()),
                InvalidArgument("words must be a vector (rank 1) of uint32, got shape ",
                                words.shape().DebugString()));
    OP_REQUIRES(ctx, TensorShapeUtils::IsScalar(scale.shape()),
                InvalidArgument("scale must be a scalar, got shape ", scale.shape().DebugString()));
    int64_t n = 0;
    OP_REQUIRES_OK(ctx, ReadCount(ctx, 2, words.NumElements(), &n));
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({n}), &out));
    if (n == 0) return;
    functor::SignUnpack<Device, T>()(ctx, words.flat<uint32_t>().data(),
                                     scale.flat<T>().data(), n, out->flat<T>().data());
  }
};

template <typename Device, typename T>
class SignMajorityOp : public OpKernel {
 public:
  explicit SignMajorityOp(OpKernelConstruction* c) : OpKernel(c) {}

  void Compute(OpKernelContext* ctx) override {
    const Tensor& words = ctx->input(0);
    OP_REQUIRES(ctx, TensorShapeUtils::IsMatrix(words.shape()),
                InvalidArgument("words must be a matrix [workers, words_per_worker] (rank 2) "
                                "of uint32, got shape ", words.shape().DebugString()));
    const int64_t k = words.dim_size(0);
    const int64_t num_words = words.dim_size(1);
    OP_REQUIRES(ctx, k >= 1, InvalidArgument("words must hold at least one worker's row, got 0"));
    int64_t n = 0;
    OP_REQUIRES_OK(ctx, ReadCount(ctx, 1, num_words, &n));
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({n}), &out));
    if (n == 0) return;
    functor::SignMajority<Device, T>()(ctx, words.flat<uint32_t>().data(), k, num_words, n,
                                       out->flat<T>().data());
  }
};

#define TFCOMP_REGISTER_SIGN_KERNELS(DEVICE, DEVICE_TYPE, T)                           \
  REGISTER_KERNEL_BUILDER(                                                              \
      Name("TfcompSignPack").Device(DEVICE).TypeConstraint<T>("T"),                     \
      SignPackOp<DEVICE_TYPE, T>);                                                      \
  REGISTER_KERNEL_BUILDER(                                                              \
      Name("TfcompSignUnpack").Device(DEVICE).HostMemory("n").TypeConstraint<T>("T"),   \
      SignUnpackOp<DEVICE_TYPE, T>);                                                    \
  REGISTER_KERNEL_BUILDER(                                                              \
      Name("TfcompSignMajority").Device(DEVICE).HostMemory("n").TypeConstraint<T>("dtype"), \
      SignMajorityOp<DEVICE_TYPE, T>);

#define TFCOMP_REGISTER_SIGN_CPU(T) TFCOMP_REGISTER_SIGN_KERNELS(DEVICE_CPU, CPUDevice, T)
TFCOMP_REGISTER_SIGN_CPU(Eigen::half)
TFCOMP_REGISTER_SIGN_CPU(Eigen::bfloat16)
TFCOMP_REGISTER_SIGN_CPU(float)
TFCOMP_REGISTER_SIGN_CPU(double)
#undef TFCOMP_REGISTER_SIGN_CPU

#if GOOGLE_CUDA
#define TFCOMP_REGISTER_SIGN_GPU(T) \
  TFCOMP_REGISTER_SIGN_KERNELS(::tensorflow::DEVICE_GPU, GPUDevice, T)
TFCOMP_REGISTER_SIGN_GPU(Eigen::half)
TFCOMP_REGISTER_SIGN_GPU(Eigen::bfloat16)
TFCOMP_REGISTER_SIGN_GPU(float)
TFCOMP_REGISTER_SIGN_GPU(double)
#undef TFCOMP_REGISTER_SIGN_GPU
#endif  // GOOGLE_CUDA

#undef TFCOMP_REGISTER_SIGN_KERNELS

}  // namespace tfcomp
