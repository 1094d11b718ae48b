// Standalone test of the sign-packing CUDA kernels (no TensorFlow): runs
// pack (both zero bits), unpack, majority, the EF-sign pack and the
// scaled-sign sum on the GPU for __half, float and double and
// compares them with a CPU reference built from sign_core.h. Words, unpacked
// values and votes must match bit for bit; the scale within a tolerance.
// Exit status: 0 pass, 1 failure, 77 no CUDA device (skip).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <vector>

#include "custom_ops/testing/cuda_test.h"
#include "../cc/kernels/sign_core.h"

template <>
struct tfcomp::sign::FloatLayout<__half> : tfcomp::sign::Binary16Layout {};

#include "../cc/kernels/sign_cuda_kernels.cu.h"

namespace sc = tfcomp::sign;
namespace cu = tfcomp::sign::cuda;
using namespace tfcomp::cuda_test;  // NOLINT: the helpers of cuda_test.h

namespace {

// variant 0: finite values with +-0; 1: also +-Inf; 2: also NaN.
template <typename T>
std::vector<T> MakeInput(int64_t n, int variant) {
  const double inf = std::numeric_limits<double>::infinity();
  const double specials[] = {0.0, -0.0, inf, -inf, std::numeric_limits<double>::quiet_NaN()};
  const int num_specials = variant == 0 ? 2 : (variant == 1 ? 4 : 5);
  std::vector<T> x(n);
  for (int64_t i = 0; i < n; ++i) {
    const double r = NextRandom() / 2147483648.0 - 1.0;  // [-1, 1)
    x[i] = FromDouble<T>(i % 7 == 0 ? specials[(i / 7) % num_specials] : r);
  }
  return x;
}

template <typename T>
void Expect(bool ok, int64_t n, const char* what, int64_t index) {
  if (ok) return;
  if (++g_failures <= 20) {
    std::printf("FAIL %s n=%lld: %s at %lld\n", TypeName<T>(), static_cast<long long>(n), what,
                static_cast<long long>(index));
  }
}

// offset > 0 puts x and the unpacked output `offset` elements past a 16-byte
// boundary: the kernels' element-at-a-time path instead of their 16-byte one.
template <typename T>
void CheckPackUnpack(int64_t n, int variant, int offset, uint32_t zero_bit) {
  const std::vector<T> x = MakeInput<T>(n, variant);
  const int64_t num_words = sc::NumWords(n), blocks = sc::NumScaleBlocks(n);

  // Reference: the same per-element logic and summation order as the kernels.
  std::vector<uint32_t> ref_words(num_words);
  double total = 0;
  for (int64_t b = 0; b < blocks; ++b) {
    Acc<T> block_sum = 0;
    const int64_t first = b * sc::kScaleBlockElements;
    const int64_t last = std::min(n, first + sc::kScaleBlockElements);
    for (int64_t i = first; i < last; i += sc::kBitsPerWord) {
      const int count = static_cast<int>(std::min<int64_t>(sc::kBitsPerWord, last - i));
      ref_words[i / sc::kBitsPerWord] = sc::PackWord(x.data() + i, count, &block_sum, zero_bit);
    }
    total += static_cast<double>(block_sum);
  }
  const T ref_scale = FromDouble<T>(n > 0 ? total / static_cast<double>(n) : 0.0);

  std::vector<T> padded(offset, FromDouble<T>(-7.0));
  padded.insert(padded.end(), x.begin(), x.end());
  DeviceArray<T> d_padded(padded), d_scale(1), d_padded_out(n + offset);
  const T* d_x = d_padded.ptr + offset;
  T* d_out = d_padded_out.ptr + offset;
  DeviceArray<uint32_t> d_words(num_words);
  DeviceArray<Acc<T>> d_partials(blocks);
  CHECK_CUDA(cu::LaunchSignPack(d_x, n, zero_bit, d_words.ptr, d_partials.ptr, d_scale.ptr, nullptr));
  const std::vector<uint32_t> words = d_words.Download(num_words);
  const T scale = d_scale.Download(1)[0];
  CHECK_CUDA(cu::LaunchSignPack(d_x, n, zero_bit, d_words.ptr, d_partials.ptr, d_scale.ptr, nullptr));
  Expect<T>(SameBits(scale, d_scale.Download(1)[0]), n, "scale differs between two runs", 0);

  for (int64_t w = 0; w < num_words; ++w) Expect<T>(words[w] == ref_words[w], n, "pack word", w);
  const double got = ToDouble(scale), want = ToDouble(ref_scale);
  const double tol = sizeof(T) == 8 ? 1e-12 : (sizeof(T) == 4 ? 1e-5 : 2e-3);
  bool scale_ok;
  if (n == 0) scale_ok = SameBits(scale, ref_scale);
  else if (std::isnan(want)) scale_ok = std::isnan(got);
  else if (std::isinf(want)) scale_ok = got == want;
  else scale_ok = std::fabs(got - want) <= tol * std::fabs(want);
  if (!scale_ok) std::printf("  scale: gpu %.17g, reference %.17g\n", got, want);
  Expect<T>(scale_ok, n, "scale", 0);

  // Unpack the reference words with the reference scale.
  DeviceArray<uint32_t> d_ref_words(ref_words);
  DeviceArray<T> d_ref_scale(std::vector<T>{ref_scale});
  CHECK_CUDA(cu::LaunchSignUnpack(d_ref_words.ptr, d_ref_scale.ptr, n, d_out, nullptr));
  const std::vector<T> out_padded = d_padded_out.Download(n + offset);
  const std::vector<T> out(out_padded.begin() + offset, out_padded.end());
  for (int64_t i = 0; i < n; ++i) {
    const T want_i = sc::UnpackValue(ref_words[i / 32], static_cast<int>(i % 32), ref_scale);
    const bool both_nan = std::isnan(ToDouble(out[i])) && std::isnan(ToDouble(want_i));
    Expect<T>(both_nan || SameBits(out[i], want_i), n, "unpack", i);
  }
}

template <typename T>
void CheckMajority(int64_t n, int64_t k, int offset) {
  const int64_t num_words = sc::NumWords(n) + 1;  // rows longer than needed: stride matters
  std::vector<uint32_t> rows(k * num_words);
  for (uint32_t& w : rows) w = NextRandom();
  DeviceArray<uint32_t> d_rows(rows);
  DeviceArray<T> d_padded_out(n + offset);
  CHECK_CUDA(cu::LaunchSignMajority(d_rows.ptr, k, num_words, n, d_padded_out.ptr + offset, nullptr));
  const std::vector<T> out_padded = d_padded_out.Download(n + offset);
  const std::vector<T> out(out_padded.begin() + offset, out_padded.end());
  for (int64_t i = 0; i < n; ++i) {
    int64_t positives = 0;
    for (int64_t r = 0; r < k; ++r) {
      positives += sc::BitOf(rows[r * num_words + i / 32], static_cast<int>(i % 32));
    }
    const T want = static_cast<T>(static_cast<float>(sc::MajorityVote(positives, k)));
    Expect<T>(SameBits(out[i], want), n, "majority", i);
  }
}

// The EF-sign pack against the CPU reference of sign_core.h: words bit for
// bit, the scale within a tolerance, and the residual bit for bit given the
// GPU's own scale.
template <typename T>
void CheckEfPack(int64_t n, int variant, int offset, uint32_t zero_bit) {
  const std::vector<T> g = MakeInput<T>(n, variant), e = MakeInput<T>(n, 0);
  const int64_t num_words = sc::NumWords(n), blocks = sc::NumScaleBlocks(n);
  std::vector<uint32_t> ref_words(num_words);
  std::vector<T> p(n);
  double total = 0;
  for (int64_t i = 0; i < n; ++i) p[i] = sc::Corrected(g[i], e[i]);
  for (int64_t b = 0; b < blocks; ++b) {
    Acc<T> block_sum = 0;
    const int64_t first = b * sc::kScaleBlockElements;
    const int64_t last = std::min(n, first + sc::kScaleBlockElements);
    for (int64_t i = first; i < last; i += sc::kBitsPerWord) {
      const int count = static_cast<int>(std::min<int64_t>(sc::kBitsPerWord, last - i));
      ref_words[i / sc::kBitsPerWord] = sc::PackWord(p.data() + i, count, &block_sum, zero_bit);
    }
    total += static_cast<double>(block_sum);
  }
  const double want = n > 0 ? total / static_cast<double>(n) : 0.0;

  std::vector<T> pg(offset, FromDouble<T>(-7.0)), pe(offset, FromDouble<T>(3.0));
  pg.insert(pg.end(), g.begin(), g.end());
  pe.insert(pe.end(), e.begin(), e.end());
  DeviceArray<T> d_g(pg), d_e(pe), d_scale(1), d_residual(n + offset);
  DeviceArray<uint32_t> d_words(num_words);
  DeviceArray<Acc<T>> d_partials(blocks);
  CHECK_CUDA(cu::LaunchSignEfPack(d_g.ptr + offset, d_e.ptr + offset, n, zero_bit, d_words.ptr,
                                  d_partials.ptr, d_scale.ptr, d_residual.ptr + offset, nullptr));
  const std::vector<uint32_t> words = d_words.Download(num_words);
  const T scale = d_scale.Download(1)[0];
  const std::vector<T> residual_padded = d_residual.Download(n + offset);
  for (int64_t w = 0; w < num_words; ++w) Expect<T>(words[w] == ref_words[w], n, "ef words", w);
  const double got = ToDouble(scale);
  const double tol = sizeof(T) == 8 ? 1e-12 : (sizeof(T) == 4 ? 1e-5 : 2e-3);
  bool scale_ok;
  if (n == 0) scale_ok = got == 0.0;
  else if (std::isnan(want)) scale_ok = std::isnan(got);
  else if (std::isinf(want)) scale_ok = got == want;
  else scale_ok = std::fabs(got - want) <= tol * std::fabs(want) + 1e-30;
  Expect<T>(scale_ok, n, "ef scale", 0);
  for (int64_t i = 0; i < n; ++i) {
    const T want_i = sc::Residual(p[i], sc::BitOf(ref_words[i / 32], static_cast<int>(i % 32)),
                                  scale);
    const T got_i = residual_padded[offset + i];
    const bool both_nan = std::isnan(ToDouble(got_i)) && std::isnan(ToDouble(want_i));
    Expect<T>(both_nan || SameBits(got_i, want_i), n, "ef residual", i);
  }
}

template <typename T>
void CheckScaledSum(int64_t n, int64_t k, int offset) {
  const int64_t num_words = sc::NumWords(n) + 1;
  std::vector<uint32_t> rows(k * num_words);
  for (uint32_t& w : rows) w = NextRandom();
  std::vector<T> scales(k);
  for (T& s : scales) s = FromDouble<T>(NextRandom() / 2147483648.0);
  const T weight = FromDouble<T>(1.0 / static_cast<double>(k));
  DeviceArray<uint32_t> d_rows(rows);
  DeviceArray<T> d_scales(scales), d_padded_out(n + offset);
  CHECK_CUDA(cu::LaunchSignScaledSum(d_rows.ptr, d_scales.ptr, k, num_words, n, weight,
                                     d_padded_out.ptr + offset, nullptr));
  const std::vector<T> out_padded = d_padded_out.Download(n + offset);
  for (int64_t i = 0; i < n; ++i) {
    Acc<T> acc = 0;
    for (int64_t r = 0; r < k; ++r) {
      acc += sc::ScaledSign(rows[r * num_words + i / 32], static_cast<int>(i % 32),
                            static_cast<Acc<T>>(ToDouble(scales[r])));
    }
    const T want = FromDouble<T>(static_cast<double>(acc * static_cast<Acc<T>>(ToDouble(weight))));
    Expect<T>(SameBits(out_padded[offset + i], want), n, "scaled sum", i);
  }
}

template <typename T>
void CheckType() {
  const int64_t sizes[] = {0, 1, 31, 32, 33, 1000, 4096, 4097, (int64_t{1} << 20) + 7};
  for (int64_t n : sizes) {
    for (int variant = 0; variant < 3; ++variant) {
      for (int offset : {0, 1}) {
        for (uint32_t zero_bit : {0u, 1u}) {
          CheckPackUnpack<T>(n, variant, offset, zero_bit);
          CheckEfPack<T>(n, variant, offset, zero_bit);
        }
      }
    }
    for (int64_t k : {1, 2, 3, 8}) {
      for (int offset : {0, 1}) CheckScaledSum<T>(n, k, offset);
    }
    for (int64_t k : {1, 2, 5}) {
      for (int offset : {0, 1}) CheckMajority<T>(n, k, offset);
    }
  }
  CHECK_CUDA(cudaDeviceSynchronize());
  std::printf("%-6s pack/unpack/majority/ef_pack/scaled_sum: %s\n", TypeName<T>(), g_failures ? "FAILED" : "ok");
}

}  // namespace

int main() {
  if (!FoundDevice()) return kSkip;
  CheckType<__half>();
  CheckType<float>();
  CheckType<double>();
  return Finish("sign_core_test");
}
