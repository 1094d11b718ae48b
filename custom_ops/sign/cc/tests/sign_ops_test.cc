// Runs the sign ops of the built op library through the TensorFlow C API and
// compares them with scalar references: words bit-exact, unpack and majority
// bit-exact, scale within a relative tolerance; and checks the errors.
//
// Usage: sign_ops_test path/to/_tfcomp_ops.so   (or TFCOMP_OPS_LIB=...)
// Prints "N passed, M failed" and exits nonzero on a failure.
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "custom_ops/testing/check.h"
#include "custom_ops/testing/tf_c_api.h"

namespace {

using namespace tfcomp::testing;  // NOLINT: Case and the C API helpers

// ---- The dtypes: storage, conversion to double, and test values ------------
//
// TensorFlow's CPU executor and thread pools run kernels with denormals flushed
// to zero (FTZ/DAZ), so a float, double or bfloat16 subnormal reads as +-0 in
// the kernel and a negative one packs as 1. Half subnormals are normal floats
// after conversion, so they keep their sign.

template <typename F>
struct IeeeType {
  using S = F;
  using L = std::numeric_limits<F>;
  static double ToDouble(S v) { return v; }
  static bool IsSubnormal(S v) { return std::fpclassify(v) == FP_SUBNORMAL; }
  static S Negate(S v) { return -v; }
  static S FromVote(int v) { return static_cast<S>(v); }
  static S FromAcc(double v) { return static_cast<S>(v); }  // v is already an F
  static double Acc(double v) { return static_cast<F>(v); }  // rounding of the accumulator
  static S Random(std::mt19937_64& rng) { return std::uniform_real_distribution<F>(-2, 2)(rng); }
  static std::vector<S> Finite() {
    return {F(0), -F(0), L::denorm_min(), -L::denorm_min(), -L::min() / 2, L::min(), -L::min()};
  }
  static std::vector<S> NonFinite() { return {L::quiet_NaN(), L::infinity(), -L::infinity()}; }
};

struct Float : IeeeType<float> {
  static constexpr TF_DataType kType = TF_FLOAT;
  static constexpr const char* kName = "float";
  static constexpr double kScaleRtol = 1e-5;  // float sums over 4096-element blocks
};

struct Double : IeeeType<double> {
  static constexpr TF_DataType kType = TF_DOUBLE;
  static constexpr const char* kName = "double";
  static constexpr double kScaleRtol = 1e-12;
};

// 16-bit types are passed to TensorFlow as their bit patterns.
struct Half {
  using S = uint16_t;
  static constexpr TF_DataType kType = TF_HALF;
  static constexpr const char* kName = "half";
  static constexpr double kScaleRtol = 1e-3;  // 2^-11 rounding of the result
  static double ToDouble(S h) { return HalfToDouble(h); }
  static bool IsSubnormal(S h) { return (h & 0x7c00) == 0 && (h & 0x3ff) != 0; }
  static S Negate(S h) { return h ^ 0x8000; }
  static S FromVote(int v) { return v > 0 ? 0x3c00 : (v < 0 ? 0xbc00 : 0); }
  static S FromAcc(double v) { return HalfFromFloat(static_cast<float>(v)); }
  static double Acc(double v) { return static_cast<float>(v); }
  static S Random(std::mt19937_64& rng) {  // magnitudes in [2^-5, 2^3)
    return static_cast<S>((rng() & 0x8000) | (10 + rng() % 8) << 10 | (rng() & 0x3ff));
  }
  static std::vector<S> Finite() { return {0x0000, 0x8000, 0x0001, 0x8001, 0x83ff, 0x0400}; }
  static std::vector<S> NonFinite() { return {0x7e00, 0x7c00, 0xfc00}; }
};

struct BFloat16 {
  using S = uint16_t;
  static constexpr TF_DataType kType = TF_BFLOAT16;
  static constexpr const char* kName = "bfloat16";
  static constexpr double kScaleRtol = 8e-3;  // 2^-8 rounding of the result
  static double ToDouble(S b) { return BFloat16ToFloat(b); }
  static bool IsSubnormal(S b) { return (b & 0x7f80) == 0 && (b & 0x7f) != 0; }
  static S Negate(S b) { return b ^ 0x8000; }
  static S FromVote(int v) { return v > 0 ? 0x3f80 : (v < 0 ? 0xbf80 : 0); }
  static S FromAcc(double v) { return BFloat16FromFloat(static_cast<float>(v)); }
  static double Acc(double v) { return static_cast<float>(v); }
  static S Random(std::mt19937_64& rng) {  // magnitudes in [2^-5, 2^3)
    return static_cast<S>((rng() & 0x8000) | (122 + rng() % 8) << 7 | (rng() & 0x7f));
  }
  static std::vector<S> Finite() { return {0x0000, 0x8000, 0x0001, 0x8001, 0x807f, 0x0080}; }
  static std::vector<S> NonFinite() { return {0x7fc0, 0x7f80, 0xff80}; }
};

// ---- References --------------------------------------------------------------

constexpr int64_t NumWords(int64_t n) { return (n + 31) / 32; }

template <typename Tr>
uint32_t RefSignBit(typename Tr::S v, uint32_t zero_bit = 1) {
  const double d = Tr::ToDouble(v);
  if (std::isnan(d)) return 0;
  if (d == 0) return zero_bit;
  return d < 0 ? 0 : 1;
}

template <typename Tr>
std::vector<uint32_t> RefPack(const std::vector<typename Tr::S>& x, uint32_t zero_bit = 1) {
  std::vector<uint32_t> words(NumWords(x.size()), 0);
  for (size_t i = 0; i < x.size(); ++i) words[i / 32] |= RefSignBit<Tr>(x[i], zero_bit) << (i % 32);
  return words;
}

template <typename Tr>
double RefScale(const std::vector<typename Tr::S>& x) {
  double sum = 0;
  for (auto v : x) sum += std::fabs(Tr::ToDouble(v));
  return x.empty() ? 0.0 : sum / static_cast<double>(x.size());
}

// ---- The graph -----------------------------------------------------------------

// One graph per dtype: placeholders of unknown shape (so the kernels, not the
// shape functions, see bad shapes) feeding the three ops.
class SignGraph : public OpGraph {
 public:
  TF_Output x, zero_bit, pack_words, pack_scale;
  TF_Output unpack_words, unpack_scale, unpack_n, unpack_out;
  TF_Output majority_words, majority_n, majority_out;
  TF_Output ef_g, ef_e, ef_words, ef_scale, ef_residual;
  TF_Output sum_words, sum_scales, sum_n, sum_weight, sum_out;

  explicit SignGraph(TF_DataType type) {
    x = Placeholder(graph(), "x", type);
    zero_bit = Placeholder(graph(), "zero_bit", TF_BOOL);
    TF_Operation* pack = AddOp("TfcompSignPack", "pack", {x, zero_bit}, "T", type);
    ef_g = Placeholder(graph(), "ef_g", type);
    ef_e = Placeholder(graph(), "ef_e", type);
    TF_Operation* ef = AddOp("TfcompSignEfPack", "ef", {ef_g, ef_e, zero_bit}, "T", type);
    ef_words = {ef, 0};
    ef_scale = {ef, 1};
    ef_residual = {ef, 2};
    sum_words = Placeholder(graph(), "sum_words", TF_UINT32);
    sum_scales = Placeholder(graph(), "sum_scales", type);
    sum_n = Placeholder(graph(), "sum_n", TF_INT64);
    sum_weight = Placeholder(graph(), "sum_weight", type);
    sum_out = {AddOp("TfcompSignScaledSum", "scaled_sum",
                     {sum_words, sum_scales, sum_n, sum_weight}, "T", type),
               0};
    pack_words = {pack, 0};
    pack_scale = {pack, 1};
    unpack_words = Placeholder(graph(), "unpack_words", TF_UINT32);
    unpack_scale = Placeholder(graph(), "unpack_scale", type);
    unpack_n = Placeholder(graph(), "unpack_n", TF_INT64);
    unpack_out = {AddOp("TfcompSignUnpack", "unpack", {unpack_words, unpack_scale, unpack_n},
                        "T", type),
                  0};
    majority_words = Placeholder(graph(), "majority_words", TF_UINT32);
    majority_n = Placeholder(graph(), "majority_n", TF_INT64);
    majority_out = {
        AddOp("TfcompSignMajority", "majority", {majority_words, majority_n}, "dtype", type), 0};
  }

 private:
  TF_Operation* AddOp(const char* type, const char* name, std::vector<TF_Output> inputs,
                      const char* type_attr, TF_DataType dtype) {
    TF_OperationDescription* d = TF_NewOperation(graph(), type, name);
    for (const TF_Output& in : inputs) TF_AddInput(d, in);
    TF_SetAttrType(d, type_attr, dtype);
    return FinishOrExit(d, name);
  }
};

const int64_t kSizes[] = {0, 1, 31, 32, 33, 1000, 100003};

// ---- Op tests ------------------------------------------------------------------

// x: random values, with the given specials spread over every fifth element.
template <typename Tr>
std::vector<typename Tr::S> MakeInput(int64_t n, const std::vector<typename Tr::S>& specials,
                                      std::mt19937_64& rng) {
  std::vector<typename Tr::S> x(n);
  for (int64_t i = 0; i < n; ++i) {
    x[i] = specials.empty() || i % 5 != 3 ? Tr::Random(rng) : specials[(i / 5) % specials.size()];
  }
  return x;
}

Tensor Bool(bool v) { return MakeTensor<uint8_t>(TF_BOOL, {}, {static_cast<uint8_t>(v)}); }

template <typename Tr>
void CheckPack(SignGraph& g, const std::vector<typename Tr::S>& x, std::vector<int64_t> dims,
               uint32_t zero_bit = 1) {
  std::vector<Tensor> out;
  std::vector<std::pair<TF_Output, Tensor>> feeds;
  feeds.emplace_back(g.x, MakeTensor(Tr::kType, dims, x));
  feeds.emplace_back(g.zero_bit, Bool(zero_bit != 0));
  const Status s = g.Run(std::move(feeds), {g.pack_words, g.pack_scale}, &out);
  CHECK(s.ok()) << s.message;
  if (!s.ok()) return;

  const std::vector<uint32_t> ref_words = RefPack<Tr>(x, zero_bit);
  CHECK(Shape(out[0]) == std::vector<int64_t>{static_cast<int64_t>(ref_words.size())});
  CHECK(Shape(out[1]).empty()) << "scale must be a scalar";
  const std::vector<uint32_t> words = Values<uint32_t>(out[0]);
  for (size_t w = 0; w < ref_words.size() && w < words.size(); ++w) {
    CHECK(words[w] == ref_words[w]) << std::hex << "word " << std::dec << w << ": 0x" << std::hex
                                    << words[w] << " != reference 0x" << ref_words[w];
  }

  const double scale = Tr::ToDouble(Values<typename Tr::S>(out[1])[0]);
  const double ref = RefScale<Tr>(x);
  if (std::isnan(ref) || std::isinf(ref)) {
    CHECK(std::isnan(scale) == std::isnan(ref) && std::isinf(scale) == std::isinf(ref))
        << "scale " << scale << " != reference " << ref;
  } else {
    CHECK(std::fabs(scale - ref) <= Tr::kScaleRtol * ref)
        << "scale " << scale << " != reference " << ref << " (rtol " << Tr::kScaleRtol << ")";
  }
}

template <typename Tr>
void CheckUnpack(SignGraph& g, int64_t n, int64_t num_words, typename Tr::S scale,
                 std::mt19937_64& rng) {
  std::vector<uint32_t> words(num_words);
  for (uint32_t& w : words) w = static_cast<uint32_t>(rng());
  std::vector<Tensor> out;
  std::vector<std::pair<TF_Output, Tensor>> feeds;
  feeds.emplace_back(g.unpack_words, MakeTensor(TF_UINT32, {num_words}, words));
  feeds.emplace_back(g.unpack_scale, MakeTensor<typename Tr::S>(Tr::kType, {}, {scale}));
  feeds.emplace_back(g.unpack_n, Scalar64(n));
  const Status s = g.Run(std::move(feeds), {g.unpack_out}, &out);
  CHECK(s.ok()) << s.message;
  if (!s.ok()) return;

  CHECK(Shape(out[0]) == std::vector<int64_t>{n});
  const auto values = Values<typename Tr::S>(out[0]);
  for (int64_t i = 0; i < n && i < static_cast<int64_t>(values.size()); ++i) {
    const auto want = (words[i / 32] >> (i % 32)) & 1u ? scale : Tr::Negate(scale);
    CHECK(Bits(values[i]) == Bits(want)) << "element " << i << ": bits 0x" << std::hex
                                         << Bits(values[i]) << " != 0x" << Bits(want);
  }
}

template <typename Tr>
void CheckMajority(SignGraph& g, int64_t n, int64_t k, int64_t num_words, std::mt19937_64& rng) {
  std::vector<uint32_t> words(k * num_words);
  for (uint32_t& w : words) w = static_cast<uint32_t>(rng());
  std::vector<Tensor> out;
  std::vector<std::pair<TF_Output, Tensor>> feeds;
  feeds.emplace_back(g.majority_words, MakeTensor(TF_UINT32, {k, num_words}, words));
  feeds.emplace_back(g.majority_n, Scalar64(n));
  const Status s = g.Run(std::move(feeds), {g.majority_out}, &out);
  CHECK(s.ok()) << s.message;
  if (!s.ok()) return;

  CHECK(Shape(out[0]) == std::vector<int64_t>{n});
  const auto values = Values<typename Tr::S>(out[0]);
  for (int64_t i = 0; i < n && i < static_cast<int64_t>(values.size()); ++i) {
    int64_t positives = 0;
    for (int64_t r = 0; r < k; ++r) positives += (words[r * num_words + i / 32] >> (i % 32)) & 1u;
    const int64_t margin = positives - (k - positives);
    const auto want = Tr::FromVote(margin > 0 ? 1 : (margin < 0 ? -1 : 0));
    CHECK(Bits(values[i]) == Bits(want)) << "element " << i << " (k=" << k << ", " << positives
                                         << " positive): bits 0x" << std::hex << Bits(values[i])
                                         << " != 0x" << Bits(want);
  }
}

// p = g + e rounded to the dtype; words of p with zero_bit; the scale within
// the tolerance; the residual p - (+-scale) bit for bit given the op's scale.
template <typename Tr>
void CheckEfPack(SignGraph& g, const std::vector<typename Tr::S>& grad,
                 const std::vector<typename Tr::S>& e, uint32_t zero_bit) {
  using S = typename Tr::S;
  const int64_t n = grad.size();
  std::vector<Tensor> out;
  std::vector<std::pair<TF_Output, Tensor>> feeds;
  feeds.emplace_back(g.ef_g, MakeTensor(Tr::kType, {n}, grad));
  feeds.emplace_back(g.ef_e, MakeTensor(Tr::kType, {n}, e));
  feeds.emplace_back(g.zero_bit, Bool(zero_bit != 0));
  const Status s = g.Run(std::move(feeds), {g.ef_words, g.ef_scale, g.ef_residual}, &out);
  CHECK(s.ok()) << s.message;
  if (!s.ok()) return;
  std::vector<S> p(n);
  for (int64_t i = 0; i < n; ++i) {
    p[i] = Tr::FromAcc(Tr::Acc(Tr::ToDouble(grad[i]) + Tr::ToDouble(e[i])));
  }
  const std::vector<uint32_t> ref_words = RefPack<Tr>(p, zero_bit);
  const std::vector<uint32_t> words = Values<uint32_t>(out[0]);
  CHECK(words.size() == ref_words.size());
  for (size_t w = 0; w < ref_words.size() && w < words.size(); ++w) {
    CHECK(words[w] == ref_words[w]) << "ef word " << w;
  }
  const double scale = Tr::ToDouble(Values<S>(out[1])[0]);
  const double ref = RefScale<Tr>(p);
  CHECK(std::fabs(scale - ref) <= Tr::kScaleRtol * ref + 1e-30)
      << "ef scale " << scale << " != reference " << ref;
  CHECK(Shape(out[2]) == std::vector<int64_t>{n});
  const std::vector<S> residual = Values<S>(out[2]);
  for (int64_t i = 0; i < n && i < static_cast<int64_t>(residual.size()); ++i) {
    const bool set = (ref_words[i / 32] >> (i % 32)) & 1u;
    const S want = Tr::FromAcc(Tr::Acc(Tr::ToDouble(p[i]) - (set ? scale : -scale)));
    CHECK(Bits(residual[i]) == Bits(want)) << "ef residual " << i << ": " << Tr::ToDouble(residual[i])
                                           << " != " << Tr::ToDouble(want);
  }
}

// out = weight * the sum of +-scales[row] in row order, in the accumulator type.
template <typename Tr>
void CheckScaledSum(SignGraph& g, int64_t n, int64_t k, int64_t num_words, std::mt19937_64& rng) {
  using S = typename Tr::S;
  std::vector<uint32_t> words(k * num_words);
  for (uint32_t& w : words) w = static_cast<uint32_t>(rng());
  std::vector<S> scales(k);
  for (S& v : scales) v = Tr::Random(rng);
  const S weight = Tr::FromAcc(Tr::Acc(1.0 / static_cast<double>(k)));
  std::vector<Tensor> out;
  std::vector<std::pair<TF_Output, Tensor>> feeds;
  feeds.emplace_back(g.sum_words, MakeTensor(TF_UINT32, {k, num_words}, words));
  feeds.emplace_back(g.sum_scales, MakeTensor(Tr::kType, {k}, scales));
  feeds.emplace_back(g.sum_n, Scalar64(n));
  feeds.emplace_back(g.sum_weight, MakeTensor<S>(Tr::kType, {}, {weight}));
  const Status s = g.Run(std::move(feeds), {g.sum_out}, &out);
  CHECK(s.ok()) << s.message;
  if (!s.ok()) return;
  CHECK(Shape(out[0]) == std::vector<int64_t>{n});
  const auto values = Values<S>(out[0]);
  for (int64_t i = 0; i < n && i < static_cast<int64_t>(values.size()); ++i) {
    double acc = 0;
    for (int64_t r = 0; r < k; ++r) {
      const double sr = Tr::ToDouble(scales[r]);
      acc = Tr::Acc(acc + (((words[r * num_words + i / 32] >> (i % 32)) & 1u) ? sr : -sr));
    }
    const S want = Tr::FromAcc(Tr::Acc(acc * Tr::ToDouble(weight)));
    CHECK(Bits(values[i]) == Bits(want)) << "scaled sum " << i << " (k=" << k << ")";
  }
}

template <typename Tr>
void TestDtype() {
  using S = typename Tr::S;
  SignGraph g(Tr::kType);
  std::mt19937_64 rng(42);
  std::vector<S> nan_inf_and_finite = Tr::NonFinite();
  for (S v : Tr::Finite()) nan_inf_and_finite.push_back(v);
  const std::vector<S> infinities = {Tr::NonFinite()[1], Tr::NonFinite()[2]};

  for (int64_t n : kSizes) {
    const std::string suffix = std::string("/") + Tr::kName + "/n=" + std::to_string(n);
    Case("pack" + suffix, [&] { CheckPack<Tr>(g, MakeInput<Tr>(n, {}, rng), {n}); });
    Case("pack_zeros_subnormals" + suffix,
         [&] { CheckPack<Tr>(g, MakeInput<Tr>(n, Tr::Finite(), rng), {n}); });
    Case("pack_nan_inf" + suffix,
         [&] { CheckPack<Tr>(g, MakeInput<Tr>(n, nan_inf_and_finite, rng), {n}); });
    Case("pack_inf" + suffix, [&] { CheckPack<Tr>(g, MakeInput<Tr>(n, infinities, rng), {n}); });

    const S scales[] = {Tr::Random(rng), Tr::Finite()[1], Tr::NonFinite()[0], Tr::NonFinite()[2]};
    Case("unpack" + suffix, [&] {
      for (S scale : scales) CheckUnpack<Tr>(g, n, NumWords(n), scale, rng);
      CheckUnpack<Tr>(g, n, NumWords(n) + 2, scales[0], rng);  // spare words are allowed
    });
    Case("pack_zero_bit_0" + suffix,
         [&] { CheckPack<Tr>(g, MakeInput<Tr>(n, Tr::Finite(), rng), {n}, 0); });
    Case("ef_pack" + suffix, [&] {
      for (uint32_t zero_bit : {0u, 1u}) {
        std::vector<S> grad = MakeInput<Tr>(n, {}, rng), e = MakeInput<Tr>(n, {}, rng);
        for (int64_t i = 0; i < n; i += 3) e[i] = Tr::Negate(grad[i]);  // exact zeros of p
        CheckEfPack<Tr>(g, grad, e, zero_bit);
      }
    });
    Case("scaled_sum" + suffix, [&] {
      // Past 8 rows the kernel reads 16-word blocks (partial at the end).
      for (int64_t k : {1, 2, 3, 8, 9, 17}) CheckScaledSum<Tr>(g, n, k, NumWords(n), rng);
      CheckScaledSum<Tr>(g, n, 3, NumWords(n) + 1, rng);
      CheckScaledSum<Tr>(g, n, 17, NumWords(n) + 1, rng);
    });
    Case("majority" + suffix, [&] {
      // Past 8 rows in 16-word blocks; past 127 the generic path.
      for (int64_t k : {1, 2, 3, 4, 7, 8, 9, 17, 130}) CheckMajority<Tr>(g, n, k, NumWords(n), rng);
      CheckMajority<Tr>(g, n, 3, NumWords(n) + 1, rng);
      CheckMajority<Tr>(g, n, 17, NumWords(n) + 1, rng);
    });
  }
  Case(std::string("pack/") + Tr::kName + "/shape=[3,11] and scalar", [&] {
    CheckPack<Tr>(g, MakeInput<Tr>(33, Tr::Finite(), rng), {3, 11});
    CheckPack<Tr>(g, MakeInput<Tr>(1, {}, rng), {});
  });
  Case(std::string("pack/") + Tr::kName + "/all zeros", [&] {
    std::vector<S> zeros(70, Tr::Finite()[0]);
    for (size_t i = 1; i < zeros.size(); i += 2) zeros[i] = Tr::Finite()[1];  // -0
    CheckPack<Tr>(g, zeros, {70});
  });
}

// ---- Errors --------------------------------------------------------------------

void TestErrors() {
  SignGraph g(TF_FLOAT);
  std::vector<Tensor> out;
  auto unpack = [&](std::vector<int64_t> word_dims, std::vector<int64_t> scale_dims, int64_t n) {
    int64_t count = 1;
    for (int64_t d : word_dims) count *= d;
    std::vector<std::pair<TF_Output, Tensor>> feeds;
    feeds.emplace_back(g.unpack_words,
                       MakeTensor(TF_UINT32, word_dims, std::vector<uint32_t>(count, 0)));
    const size_t scale_count = scale_dims.empty() ? 1 : scale_dims[0];
    feeds.emplace_back(g.unpack_scale,
                       MakeTensor(TF_FLOAT, scale_dims, std::vector<float>(scale_count, 1.f)));
    feeds.emplace_back(g.unpack_n, Scalar64(n));
    return g.Run(std::move(feeds), {g.unpack_out}, &out);
  };
  auto majority = [&](std::vector<int64_t> word_dims, int64_t n) {
    int64_t count = 1;
    for (int64_t d : word_dims) count *= d;
    std::vector<std::pair<TF_Output, Tensor>> feeds;
    feeds.emplace_back(g.majority_words,
                       MakeTensor(TF_UINT32, word_dims, std::vector<uint32_t>(count, 0)));
    feeds.emplace_back(g.majority_n, Scalar64(n));
    return g.Run(std::move(feeds), {g.majority_out}, &out);
  };

  Case("errors/unpack n > 32*W", [&] { CheckError(unpack({2}, {}, 65), "larger than 32 * W"); });
  Case("errors/unpack n < 0", [&] { CheckError(unpack({2}, {}, -1), "n must be >= 0"); });
  Case("errors/unpack words rank 2",
       [&] { CheckError(unpack({2, 2}, {}, 10), "words must be a vector"); });
  Case("errors/unpack scale not scalar",
       [&] { CheckError(unpack({2}, {2}, 10), "scale must be a scalar"); });
  Case("errors/majority n > 32*W",
       [&] { CheckError(majority({3, 2}, 65), "larger than 32 * W"); });
  Case("errors/majority words rank 1",
       [&] { CheckError(majority({4}, 10), "words must be a matrix"); });
  Case("errors/majority K = 0 rows",
       [&] { CheckError(majority({0, 2}, 10), "at least one worker"); });
  Case("errors/edges are fine", [&] {  // n = 32*W and n = 0 with W = 0 are valid
    CHECK(unpack({2}, {}, 64).ok());
    CHECK(unpack({0}, {}, 0).ok());
    CHECK(majority({2, 0}, 0).ok());
  });

  // With shapes known when the graph is built, the shape function rejects a
  // wrong rank before anything runs.
  Case("errors/unpack rank checked at graph construction", [&] {
    TF_Graph* graph = TF_NewGraph();
    TF_Status* s = TF_NewStatus();
    auto constant = [&](const char* name, Tensor t) {
      TF_OperationDescription* d = TF_NewOperation(graph, "Const", name);
      TF_SetAttrTensor(d, "value", t.get(), s);
      TF_SetAttrType(d, "dtype", TF_TensorType(t.get()));
      return TF_Output{TF_FinishOperation(d, s), 0};
    };
    const TF_Output words = constant("words", MakeTensor<uint32_t>(TF_UINT32, {1, 2}, {0, 0}));
    const TF_Output scale = constant("scale", MakeTensor<float>(TF_FLOAT, {}, {1.f}));
    const TF_Output n = constant("n", Scalar64(3));
    CHECK(TF_GetCode(s) == TF_OK) << TF_Message(s);
    TF_OperationDescription* d = TF_NewOperation(graph, "TfcompSignUnpack", "unpack");
    for (const TF_Output& in : {words, scale, n}) TF_AddInput(d, in);
    TF_SetAttrType(d, "T", TF_FLOAT);
    TF_FinishOperation(d, s);
    CheckError(TakeStatus(s), "must be rank 1");
    TF_DeleteGraph(graph);
  });
}

}  // namespace

int main(int argc, char** argv) {
  LoadOpLibraryOrExit(argc, argv);

  TestDtype<Float>();
  TestDtype<Double>();
  TestDtype<Half>();
  TestDtype<BFloat16>();
  TestErrors();
  return tfcomp::testing::Summary();
}
