// Runs TfcompCastDivide of the built op library through the TensorFlow C API
// for every (SrcT, DstT) pair and compares it with a reference written on
// doubles and tf_c_api.h's rounding helpers: bit for bit (NaN as NaN). Inputs
// stay clear of the subnormals TensorFlow's CPU threads flush (the Python and
// core tests cover those). Also checks shapes and the divisor's rank error.
//
// Usage: cast_ops_test path/to/_tfcomp_ops.so   (or TFCOMP_OPS_LIB=...)
// Prints "N passed, M failed" and exits nonzero on a failure.
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "custom_ops/testing/check.h"
#include "custom_ops/testing/tf_c_api.h"

namespace {

using namespace tfcomp::testing;  // NOLINT: Case and the C API helpers

// A dtype: its storage, its value as a double, rounding a double to it (a
// double reaches 16 bits through float, as tf.cast does), its accumulator.
struct HalfT {
  using S = uint16_t;
  static constexpr TF_DataType kType = TF_HALF;
  static constexpr const char* kName = "half";
  static double Value(S v) { return HalfToDouble(v); }
  static S Round(double v) { return HalfFromFloat(static_cast<float>(v)); }
  static constexpr bool kWide = false;
};
struct BFloat16T {
  using S = uint16_t;
  static constexpr TF_DataType kType = TF_BFLOAT16;
  static constexpr const char* kName = "bfloat16";
  static double Value(S v) { return BFloat16ToFloat(v); }
  static S Round(double v) { return BFloat16FromFloat(static_cast<float>(v)); }
  static constexpr bool kWide = false;
};
struct FloatT {
  using S = float;
  static constexpr TF_DataType kType = TF_FLOAT;
  static constexpr const char* kName = "float";
  static double Value(S v) { return v; }
  static S Round(double v) { return static_cast<float>(v); }
  static constexpr bool kWide = false;
};
struct DoubleT {
  using S = double;
  static constexpr TF_DataType kType = TF_DOUBLE;
  static constexpr const char* kName = "double";
  static double Value(S v) { return v; }
  static S Round(double v) { return v; }
  static constexpr bool kWide = true;
};

// Dst(x) / divisor: the division in float (exactly rounded through double) or double.
template <typename Src, typename Dst>
typename Dst::S Reference(typename Src::S x, double divisor) {
  const double t = Dst::Value(Dst::Round(Src::Value(x)));
  const double d = Dst::Value(Dst::Round(divisor));
  const double q = Dst::kWide ? t / d : static_cast<double>(static_cast<float>(t / d));
  return Dst::Round(q);
}

template <typename Src>
std::vector<typename Src::S> MakeInput(int64_t n, std::mt19937_64& rng) {
  const double specials[] = {0.0, -0.0, INFINITY, -INFINITY, NAN, 65504.0, 65520.0, -1e6, 1e-6, 1.0};
  std::vector<typename Src::S> x(n);
  for (int64_t i = 0; i < n; ++i) {
    const double r = std::uniform_real_distribution<double>(-1, 1)(rng) *
                     std::ldexp(1.0, static_cast<int>(rng() % 40) - 20);
    x[i] = Src::Round(i % 9 == 4 ? specials[(i / 9) % 10] : r);
  }
  return x;
}

template <typename Src, typename Dst>
void CheckPair() {
  OpGraph g;
  TF_Output x = Placeholder(g.graph(), "x", Src::kType);
  TF_Output divisor = Placeholder(g.graph(), "divisor", Dst::kType);
  TF_OperationDescription* d = TF_NewOperation(g.graph(), "TfcompCastDivide", "cast_divide");
  TF_AddInput(d, x);
  TF_AddInput(d, divisor);
  TF_Output y = {FinishOrExit(d, "cast_divide"), 0};
  std::mt19937_64 rng(7);
  for (int64_t n : {0, 1, 7, 9, 17, 1000, 100003}) {
    for (double div : {1.0, 2.0, 3.0, -0.5, 0.0}) {
      const std::vector<typename Src::S> input = MakeInput<Src>(n, rng);
      std::vector<std::pair<TF_Output, Tensor>> feeds;
      feeds.emplace_back(x, MakeTensor(Src::kType, {n}, input));
      feeds.emplace_back(divisor, MakeTensor<typename Dst::S>(Dst::kType, {}, {Dst::Round(div)}));
      std::vector<Tensor> out;
      const Status s = g.Run(std::move(feeds), {y}, &out);
      CHECK(s.ok()) << s.message;
      if (!s.ok()) return;
      CHECK(Shape(out[0]) == std::vector<int64_t>{n});
      CHECK(TF_TensorType(out[0].get()) == Dst::kType);
      const auto values = Values<typename Dst::S>(out[0]);
      int shown = 0;
      for (int64_t i = 0; i < n && i < static_cast<int64_t>(values.size()); ++i) {
        const auto want = Reference<Src, Dst>(input[i], div);
        const bool ok = std::isnan(Dst::Value(want)) ? std::isnan(Dst::Value(values[i]))
                                                     : Bits(values[i]) == Bits(want);
        if (!ok && shown++ < 3) {
          CHECK(ok) << Src::kName << "->" << Dst::kName << " n=" << n << " / " << div << " at " << i
                    << ": x=" << Src::Value(input[i]) << " got " << Dst::Value(values[i])
                    << " want " << Dst::Value(want);
        }
      }
    }
  }
  // The divisor must be a scalar (the placeholders' unknown shapes leave it to the kernel).
  std::vector<std::pair<TF_Output, Tensor>> feeds;
  feeds.emplace_back(x, MakeTensor(Src::kType, {3}, MakeInput<Src>(3, rng)));
  feeds.emplace_back(divisor, MakeTensor<typename Dst::S>(Dst::kType, {2}, {Dst::Round(1), Dst::Round(2)}));
  std::vector<Tensor> out;
  CheckError(g.Run(std::move(feeds), {y}, &out), "divisor must be a scalar");
}

template <typename Src>
void CheckFrom() {
  const std::string from = std::string(Src::kName) + "->";
  Case(from + "half", CheckPair<Src, HalfT>);
  Case(from + "bfloat16", CheckPair<Src, BFloat16T>);
  Case(from + "float", CheckPair<Src, FloatT>);
  Case(from + "double", CheckPair<Src, DoubleT>);
}

}  // namespace

int main(int argc, char** argv) {
  LoadOpLibraryOrExit(argc, argv);
  CheckFrom<HalfT>();
  CheckFrom<BFloat16T>();
  CheckFrom<FloatT>();
  CheckFrom<DoubleT>();
  return Summary();
}
