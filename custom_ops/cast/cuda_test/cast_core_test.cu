// Standalone test of the cast-and-divide CUDA kernel (no TensorFlow): runs it on
// the GPU for every (SrcT, DstT) pair of half, bfloat16, float and double and
// compares it with the CPU's per-element logic of cast_core.h, bit for bit
// (NaN only as NaN: its bits are not part of the contract). Aligned and
// unaligned pointers (the wide and the element-at-a-time kernels), in place.
// Exit status: 0 pass, 1 failure, 77 no CUDA device (skip).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "custom_ops/testing/cuda_test.h"
#include "../cc/kernels/cast_core.h"
#include "../cc/kernels/cast_cuda_kernels.cu.h"

namespace cc = tfcomp::cast;
using cc::BFloat16;
using cc::Half;
using namespace tfcomp::cuda_test;           // NOLINT: the helpers of cuda_test.h

namespace {

template <typename T> const char* Name();
template <> const char* Name<Half>() { return "half"; }
template <> const char* Name<BFloat16>() { return "bfloat16"; }
template <> const char* Name<float>() { return "float"; }
template <> const char* Name<double>() { return "double"; }

template <typename T>
uint64_t Bits(T v) {
  uint64_t b = 0;
  std::memcpy(&b, &v, sizeof(T));
  return b;
}

template <typename T>
bool IsNan(T v) { return std::isnan(static_cast<double>(cc::Widen(v))); }

// Ordinary values over a wide range of scales, every special, raw bit patterns.
template <typename T>
std::vector<T> MakeInput(int64_t n) {
  const double specials[] = {0.0, -0.0, INFINITY, -INFINITY, NAN, 65504.0, 65520.0, -70000.0,
                             5.9604644775390625e-08, 2.98023223876953125e-08, 1e-40, 3.4e38, 1.0};
  std::vector<T> x(n);
  for (int64_t i = 0; i < n; ++i) {
    if (i % 11 == 5) {
      uint64_t b = (uint64_t{NextRandom()} << 32) | NextRandom();
      std::memcpy(&x[i], &b, sizeof(T));
    } else {
      const double r = (NextRandom() / 2147483648.0 - 1.0) * std::ldexp(1.0, static_cast<int>(NextRandom() % 60) - 30);
      x[i] = cc::Convert<T>(i % 7 == 3 ? specials[(i / 7) % 13] : r);
    }
  }
  return x;
}

template <typename Src, typename Dst>
void CheckPair(int64_t n, double divisor_value, int offset, bool in_place) {
  const std::vector<Src> x = MakeInput<Src>(n);
  const Dst divisor = cc::Convert<Dst>(divisor_value);
  std::vector<Src> padded(offset, cc::Convert<Src>(-7.0));
  padded.insert(padded.end(), x.begin(), x.end());
  DeviceArray<Src> d_x(padded);
  DeviceArray<Dst> d_out(n + offset), d_divisor(std::vector<Dst>{divisor});
  Dst* out = in_place ? reinterpret_cast<Dst*>(d_x.ptr) + offset : d_out.ptr + offset;
  CHECK_CUDA(cc::cuda::LaunchCastDivide(d_x.ptr + offset, n, d_divisor.ptr, out, nullptr));
  CHECK_CUDA(cudaDeviceSynchronize());
  std::vector<Dst> got(n);
  if (n) CHECK_CUDA(cudaMemcpy(got.data(), out, n * sizeof(Dst), cudaMemcpyDeviceToHost));
  const cc::Acc<Dst> d = cc::Widen(divisor);
  int shown = 0;
  for (int64_t i = 0; i < n; ++i) {
    const Dst want = cc::CastDivide<Dst>(x[i], d);
    const bool ok = IsNan(want) ? IsNan(got[i]) : Bits(got[i]) == Bits(want);
    if (!ok) {
      ++g_failures;
      if (shown++ < 3) {
        std::printf("FAIL %s->%s n=%lld / %g offset %d%s at %lld: x=0x%llx got 0x%llx want 0x%llx\n",
                    Name<Src>(), Name<Dst>(), static_cast<long long>(n), divisor_value, offset,
                    in_place ? " in place" : "", static_cast<long long>(i),
                    static_cast<unsigned long long>(Bits(x[i])),
                    static_cast<unsigned long long>(Bits(got[i])),
                    static_cast<unsigned long long>(Bits(want)));
      }
    }
  }
}

template <typename Src, typename Dst>
void CheckPairAll() {
  const int before = g_failures;
  const int64_t sizes[] = {0, 1, 3, 4, 7, 8, 9, 17, 1000, 4097, (int64_t{1} << 20) + 7};
  for (int64_t n : sizes) {
    for (double d : {1.0, 2.0, 3.0, 7.0, 0.5, -2.0, 0.0, static_cast<double>(INFINITY), static_cast<double>(NAN)}) {
      for (int offset : {0, 1}) CheckPair<Src, Dst>(n, d, offset, false);
    }
    if (std::is_same<Src, Dst>::value) CheckPair<Src, Dst>(n, 3.0, 0, true);
  }
  std::printf("%-8s -> %-8s: %s\n", Name<Src>(), Name<Dst>(), g_failures > before ? "FAILED" : "ok");
}

template <typename Src>
void CheckFrom() {
  CheckPairAll<Src, Half>();
  CheckPairAll<Src, BFloat16>();
  CheckPairAll<Src, float>();
  CheckPairAll<Src, double>();
}

}  // namespace

int main() {
  if (!FoundDevice()) return kSkip;
  CheckFrom<Half>();
  CheckFrom<BFloat16>();
  CheckFrom<float>();
  CheckFrom<double>();
  return Finish("cast_core_test");
}
