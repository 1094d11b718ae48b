// Runs TfcompLowRankResidual of the built op library through the TensorFlow C
// API, for float, double, half and bfloat16: against a double-precision
// reference m - p q^T within a rounding bound, and bit for bit against the
// documented evaluation (acc = m; acc = fma(-p[i, j], q[c, j], acc) for j in
// order, in float for the 16-bit types; rounded to T); NaN and Inf
// propagation; the argument errors of the kernel (placeholders of unknown
// shape) and of the shape function (placeholders of known shape). The same for
// TfcompLowRankProduct (acc = +0; acc = fma(p[i, j], q[c, j], acc)), and for
// TfcompLowRankCompensate (m = g + e rounded to T; p[i, j] summed in 16 lanes of
// fma from +0 over the zero-padded columns, the lanes added pairwise) with its
// kernel's argument errors, and for TfcompLowRankProject (q = m^T p: per block
// of 256 rows fma from +0 in row order, the blocks' sums added in order).
//
// Usage: lowrank_ops_test path/to/_tfcomp_ops.so   (or TFCOMP_OPS_LIB=...)
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

// ---- The dtypes ----------------------------------------------------------------

// S: the storage type handed to TensorFlow; Acc: what the kernel computes in;
// ToAcc / FromAcc: the exact widening and the kernel's rounding back.
struct Float {
  using S = float;
  using Acc = float;
  static constexpr TF_DataType kType = TF_FLOAT;
  static constexpr const char* kName = "float";
  static constexpr double kEps = 0x1p-24;  // unit roundoff of T
  static Acc ToAcc(S v) { return v; }
  static S FromAcc(Acc v) { return v; }
  static S FromDouble(double v) { return static_cast<S>(v); }
};

struct Double {
  using S = double;
  using Acc = double;
  static constexpr TF_DataType kType = TF_DOUBLE;
  static constexpr const char* kName = "double";
  static constexpr double kEps = 0x1p-53;
  static Acc ToAcc(S v) { return v; }
  static S FromAcc(Acc v) { return v; }
  static S FromDouble(double v) { return v; }
};

struct Half {
  using S = uint16_t;
  using Acc = float;
  static constexpr TF_DataType kType = TF_HALF;
  static constexpr const char* kName = "half";
  static constexpr double kEps = 0x1p-11;
  static Acc ToAcc(S v) { return static_cast<float>(HalfToDouble(v)); }
  static S FromAcc(Acc v) { return HalfFromFloat(v); }
  static S FromDouble(double v) { return HalfFromFloat(static_cast<float>(v)); }
};

struct BFloat16 {
  using S = uint16_t;
  using Acc = float;
  static constexpr TF_DataType kType = TF_BFLOAT16;
  static constexpr const char* kName = "bfloat16";
  static constexpr double kEps = 0x1p-8;
  static Acc ToAcc(S v) { return BFloat16ToFloat(v); }
  static S FromAcc(Acc v) { return BFloat16FromFloat(v); }
  static S FromDouble(double v) { return BFloat16FromFloat(static_cast<float>(v)); }
};

// ---- The graph -------------------------------------------------------------------

// Placeholders m, p, q of unknown shape feeding one
// TfcompLowRankResidual, and a session to run it.
class ResidualGraph : public OpGraph {
 public:
  TF_Output m, p, q, residual;

  explicit ResidualGraph(TF_DataType type) {
    m = Placeholder(graph(), "m", type);
    p = Placeholder(graph(), "p", type);
    q = Placeholder(graph(), "q", type);
    TF_Operation* op = nullptr;
    Require(AddResidual(graph(), type, m, p, q, &op), "TfcompLowRankResidual");
    residual = {op, 0};
  }

  Status Run(Tensor m_value, Tensor p_value, Tensor q_value, Tensor* out) {
    std::vector<std::pair<TF_Output, Tensor>> feeds;
    feeds.emplace_back(m, std::move(m_value));
    feeds.emplace_back(p, std::move(p_value));
    feeds.emplace_back(q, std::move(q_value));
    std::vector<Tensor> outputs;
    const Status s = OpGraph::Run(std::move(feeds), {residual}, &outputs);
    *out = std::move(outputs[0]);
    return s;
  }

  // Adds the op to `graph`; the status is the shape function's verdict.
  static Status AddResidual(TF_Graph* graph, TF_DataType type, TF_Output m, TF_Output p,
                            TF_Output q, TF_Operation** op) {
    TF_OperationDescription* d = TF_NewOperation(graph, "TfcompLowRankResidual", "residual");
    for (const TF_Output& in : {m, p, q}) TF_AddInput(d, in);
    TF_SetAttrType(d, "T", type);
    TF_Status* s = TF_NewStatus();
    *op = TF_FinishOperation(d, s);
    return TakeStatus(s);
  }
};

// Placeholders p, q of unknown shape feeding one TfcompLowRankProduct.
class ProductGraph : public OpGraph {
 public:
  TF_Output p, q, product;

  explicit ProductGraph(TF_DataType type) {
    p = Placeholder(graph(), "p", type);
    q = Placeholder(graph(), "q", type);
    TF_Operation* op = nullptr;
    Require(AddProduct(graph(), type, p, q, &op), "TfcompLowRankProduct");
    product = {op, 0};
  }

  Status Run(Tensor p_value, Tensor q_value, Tensor* out) {
    std::vector<std::pair<TF_Output, Tensor>> feeds;
    feeds.emplace_back(p, std::move(p_value));
    feeds.emplace_back(q, std::move(q_value));
    std::vector<Tensor> outputs;
    const Status s = OpGraph::Run(std::move(feeds), {product}, &outputs);
    *out = std::move(outputs[0]);
    return s;
  }

  static Status AddProduct(TF_Graph* graph, TF_DataType type, TF_Output p, TF_Output q,
                           TF_Operation** op) {
    TF_OperationDescription* d = TF_NewOperation(graph, "TfcompLowRankProduct", "product");
    for (const TF_Output& in : {p, q}) TF_AddInput(d, in);
    TF_SetAttrType(d, "T", type);
    TF_Status* s = TF_NewStatus();
    *op = TF_FinishOperation(d, s);
    return TakeStatus(s);
  }
};

// Placeholders g, e, q of unknown shape feeding one TfcompLowRankCompensate.
class CompensateGraph : public OpGraph {
 public:
  TF_Output g, e, q, m, p;

  explicit CompensateGraph(TF_DataType type) {
    g = Placeholder(graph(), "g", type);
    e = Placeholder(graph(), "e", type);
    q = Placeholder(graph(), "q", type);
    TF_OperationDescription* d = TF_NewOperation(graph(), "TfcompLowRankCompensate", "compensate");
    for (const TF_Output& in : {g, e, q}) TF_AddInput(d, in);
    TF_SetAttrType(d, "T", type);
    TF_Status* s = TF_NewStatus();
    TF_Operation* op = TF_FinishOperation(d, s);
    Require(TakeStatus(s), "TfcompLowRankCompensate");
    m = {op, 0};
    p = {op, 1};
  }

  Status Run(Tensor g_value, Tensor e_value, Tensor q_value, std::vector<Tensor>* outputs) {
    std::vector<std::pair<TF_Output, Tensor>> feeds;
    feeds.emplace_back(g, std::move(g_value));
    feeds.emplace_back(e, std::move(e_value));
    feeds.emplace_back(q, std::move(q_value));
    return OpGraph::Run(std::move(feeds), {m, p}, outputs);
  }
};

// Placeholders m, p of unknown shape feeding one TfcompLowRankProject.
class ProjectGraph : public OpGraph {
 public:
  TF_Output m, p, q;

  explicit ProjectGraph(TF_DataType type) {
    m = Placeholder(graph(), "m", type);
    p = Placeholder(graph(), "p", type);
    TF_OperationDescription* d = TF_NewOperation(graph(), "TfcompLowRankProject", "project");
    for (const TF_Output& in : {m, p}) TF_AddInput(d, in);
    TF_SetAttrType(d, "T", type);
    TF_Status* s = TF_NewStatus();
    TF_Operation* op = TF_FinishOperation(d, s);
    Require(TakeStatus(s), "TfcompLowRankProject");
    q = {op, 0};
  }

  Status Run(Tensor m_value, Tensor p_value, Tensor* out) {
    std::vector<std::pair<TF_Output, Tensor>> feeds;
    feeds.emplace_back(m, std::move(m_value));
    feeds.emplace_back(p, std::move(p_value));
    std::vector<Tensor> outputs;
    const Status s = OpGraph::Run(std::move(feeds), {q}, &outputs);
    if (!outputs.empty()) *out = std::move(outputs[0]);
    return s;
  }
};

// ---- Values and references -------------------------------------------------------

// Magnitudes in [2^-5, 2^3), either sign, 8 significant bits: exact in every
// dtype, and far from the subnormals TensorFlow's CPU threads flush.
template <typename Tr>
std::vector<typename Tr::S> RandomValues(int64_t count, std::mt19937_64& rng) {
  std::vector<typename Tr::S> v(count);
  for (auto& x : v) {
    const int exponent = -5 + static_cast<int>(rng() % 8);
    const double mantissa = 1.0 + static_cast<double>(rng() % 128) / 128;
    x = Tr::FromDouble((rng() & 1 ? -1 : 1) * std::ldexp(mantissa, exponent));
  }
  return v;
}

template <typename Tr>
typename Tr::S Documented(const std::vector<typename Tr::S>& m, const std::vector<typename Tr::S>& p,
                          const std::vector<typename Tr::S>& q, int64_t i, int64_t c, int64_t k,
                          int64_t r) {
  typename Tr::Acc acc = Tr::ToAcc(m[i * k + c]);
  for (int64_t j = 0; j < r; ++j) acc = std::fma(-Tr::ToAcc(p[i * r + j]), Tr::ToAcc(q[c * r + j]), acc);
  return Tr::FromAcc(acc);
}

template <typename Tr>
typename Tr::S DocumentedProduct(const std::vector<typename Tr::S>& p, const std::vector<typename Tr::S>& q,
                                 int64_t i, int64_t c, int64_t r) {
  typename Tr::Acc acc = 0;
  for (int64_t j = 0; j < r; ++j) acc = std::fma(Tr::ToAcc(p[i * r + j]), Tr::ToAcc(q[c * r + j]), acc);
  return Tr::FromAcc(acc);
}

// p[i, j] of the compensate op as documented, from m as the op wrote it.
template <typename Tr>
typename Tr::S DocumentedCompensated(const std::vector<typename Tr::S>& m,
                                     const std::vector<typename Tr::S>& q, int64_t i, int64_t j,
                                     int64_t k, int64_t r) {
  typename Tr::Acc lanes[16] = {};
  for (int64_t c = 0; c < (k + 15) / 16 * 16; ++c) {
    const typename Tr::Acc mv = c < k ? Tr::ToAcc(m[i * k + c]) : 0, qv = c < k ? Tr::ToAcc(q[c * r + j]) : 0;
    lanes[c % 16] = std::fma(mv, qv, lanes[c % 16]);
  }
  for (int half = 8; half >= 1; half /= 2) {
    for (int l = 0; l < half; ++l) lanes[l] = lanes[l] + lanes[l + half];
  }
  return Tr::FromAcc(lanes[0]);
}

// q[c, j] of the project op as documented.
template <typename Tr>
typename Tr::S DocumentedProjected(const std::vector<typename Tr::S>& m,
                                   const std::vector<typename Tr::S>& p, int64_t c, int64_t j,
                                   int64_t n, int64_t k, int64_t r) {
  typename Tr::Acc total = 0;
  for (int64_t first = 0; first < n; first += 256) {
    typename Tr::Acc s = 0;
    for (int64_t i = first; i < std::min(n, first + 256); ++i) {
      s = std::fma(Tr::ToAcc(m[i * k + c]), Tr::ToAcc(p[i * r + j]), s);
    }
    total = first == 0 ? s : total + s;
  }
  return Tr::FromAcc(total);
}

struct Problem {
  int64_t n, k, r;
};

std::string Describe(const Problem& pr) {
  return std::to_string(pr.n) + "x" + std::to_string(pr.k) + " r=" + std::to_string(pr.r);
}

template <typename Tr>
void CheckValues(ResidualGraph& graph, const Problem& pr, std::mt19937_64& rng) {
  using S = typename Tr::S;
  const int64_t n = pr.n, k = pr.k, r = pr.r;
  const auto m = RandomValues<Tr>(n * k, rng), p = RandomValues<Tr>(n * r, rng),
             q = RandomValues<Tr>(k * r, rng);
  Tensor out;
  const Status s = graph.Run(MakeTensor(Tr::kType, {n, k}, m), MakeTensor(Tr::kType, {n, r}, p),
                             MakeTensor(Tr::kType, {k, r}, q), &out);
  CHECK(s.ok()) << Describe(pr) << ": " << s.message;
  if (!s.ok()) return;
  CHECK((Shape(out) == std::vector<int64_t>{n, k})) << Describe(pr) << ": output shape";
  const std::vector<S> got = Values<S>(out);
  if (static_cast<int64_t>(got.size()) != n * k) return;
  const double unit = Tr::kEps, acc_unit = std::is_same_v<typename Tr::Acc, float> ? 0x1p-24 : 0x1p-53;
  int reported = 0;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t c = 0; c < k; ++c) {
      double exact = Tr::ToAcc(m[i * k + c]), magnitude = std::fabs(exact);
      for (int64_t j = 0; j < r; ++j) {
        const double term = static_cast<double>(Tr::ToAcc(p[i * r + j])) * Tr::ToAcc(q[c * r + j]);
        exact -= term;
        magnitude += std::fabs(term);
      }
      const double value = Tr::ToAcc(got[i * k + c]);
      // r roundings in Acc, one to T (relative, or absolute near T's subnormals).
      const double bound = r * acc_unit * magnitude * 1.01 + unit * std::fabs(exact) * 1.01 + 0x1p-24;
      const bool close = std::fabs(value - exact) <= bound;
      const bool exactly = Bits(got[i * k + c]) == Bits(Documented<Tr>(m, p, q, i, c, k, r));
      if ((!close || !exactly) && reported++ < 3) {
        CHECK(close) << Tr::kName << " " << Describe(pr) << " at (" << i << ", " << c
                     << "): " << value << ", exact " << exact << ", bound " << bound;
        CHECK(exactly) << Tr::kName << " " << Describe(pr) << " at (" << i << ", " << c
                       << "): bits 0x" << std::hex << Bits(got[i * k + c]) << " != 0x"
                       << Bits(Documented<Tr>(m, p, q, i, c, k, r));
      }
    }
  }
}

template <typename Tr>
void CheckSpecials(ResidualGraph& graph) {
  using S = typename Tr::S;
  const int64_t n = 5, k = 70, r = 3;
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  std::vector<S> m(n * k, Tr::FromDouble(1)), p(n * r, Tr::FromDouble(0.5)), q(k * r, Tr::FromDouble(0.25));
  m[0 * k + 3] = Tr::FromDouble(nan);   // element (0, 3)
  m[1 * k + 4] = Tr::FromDouble(-inf);  // element (1, 4)
  p[2 * r + 1] = Tr::FromDouble(nan);   // row 2
  q[60 * r + 2] = Tr::FromDouble(inf);  // column 60 ...
  p[3 * r + 2] = Tr::FromDouble(0);     // ... NaN in row 3 (0 * Inf)
  Tensor out;
  const Status s = graph.Run(MakeTensor(Tr::kType, {n, k}, m), MakeTensor(Tr::kType, {n, r}, p),
                             MakeTensor(Tr::kType, {k, r}, q), &out);
  CHECK(s.ok()) << s.message;
  if (!s.ok()) return;
  const std::vector<S> got = Values<S>(out);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t c = 0; c < k; ++c) {
      const double v = Tr::ToAcc(got[i * k + c]);
      if (i == 2 || (i == 0 && c == 3) || (i == 3 && c == 60)) {
        CHECK(std::isnan(v)) << "(" << i << ", " << c << ") = " << v << ", want NaN";
      } else if (c == 60) {
        CHECK(v == -inf) << "(" << i << ", " << c << ") = " << v << ", want -Inf";
      } else if (i == 1 && c == 4) {
        CHECK(v == -inf) << "(" << i << ", " << c << ") = " << v << ", want -Inf";
      } else {
        const double want = i == 3 ? 1 - 2 * 0.125 : 1 - 3 * 0.125;  // p[3, 2] = 0
        CHECK(v == want) << "(" << i << ", " << c << ") = " << v << ", want " << want;
      }
    }
  }
}

// The product against the documented evaluation, bit for bit, and NaN / Inf where the
// arithmetic puts them.
template <typename Tr>
void CheckProduct(ProductGraph& graph, const Problem& pr, std::mt19937_64& rng) {
  using S = typename Tr::S;
  const int64_t n = pr.n, k = pr.k, r = pr.r;
  auto p = RandomValues<Tr>(n * r, rng), q = RandomValues<Tr>(k * r, rng);
  if (n > 1 && k > 1 && r > 0) {
    p[(n - 1) * r] = Tr::FromDouble(std::numeric_limits<double>::quiet_NaN());  // a row of NaNs
    q[(k - 1) * r] = Tr::FromDouble(std::numeric_limits<double>::infinity());   // a column of +-Inf
  }
  Tensor out;
  const Status s = graph.Run(MakeTensor(Tr::kType, {n, r}, p), MakeTensor(Tr::kType, {k, r}, q), &out);
  CHECK(s.ok()) << Describe(pr) << ": " << s.message;
  if (!s.ok()) return;
  CHECK((Shape(out) == std::vector<int64_t>{n, k})) << Describe(pr) << ": output shape";
  const std::vector<S> got = Values<S>(out);
  if (static_cast<int64_t>(got.size()) != n * k) return;
  int reported = 0;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t c = 0; c < k; ++c) {
      const S want = DocumentedProduct<Tr>(p, q, i, c, r);
      const bool both_nan = std::isnan(Tr::ToAcc(got[i * k + c])) && std::isnan(Tr::ToAcc(want));
      if (Bits(got[i * k + c]) != Bits(want) && !both_nan && reported++ < 3) {
        CHECK(false) << Tr::kName << " product " << Describe(pr) << " at (" << i << ", " << c
                     << "): bits 0x" << std::hex << Bits(got[i * k + c]) << " != 0x" << Bits(want);
      }
    }
  }
}

// The compensate op against the documented evaluation, bit for bit: m = g + e (in Acc,
// rounded to T), p from that m; NaN in g reaches its row of p.
template <typename Tr>
void CheckCompensate(CompensateGraph& graph, const Problem& pr, std::mt19937_64& rng) {
  using S = typename Tr::S;
  const int64_t n = pr.n, k = pr.k, r = pr.r;
  auto g = RandomValues<Tr>(n * k, rng);
  const auto e = RandomValues<Tr>(n * k, rng), q = RandomValues<Tr>(k * r, rng);
  if (n > 1 && k > 1) g[(n - 1) * k + 1] = Tr::FromDouble(std::numeric_limits<double>::quiet_NaN());
  std::vector<Tensor> out;
  const Status s = graph.Run(MakeTensor(Tr::kType, {n, k}, g), MakeTensor(Tr::kType, {n, k}, e),
                             MakeTensor(Tr::kType, {k, r}, q), &out);
  CHECK(s.ok()) << Describe(pr) << ": " << s.message;
  if (!s.ok()) return;
  CHECK((Shape(out[0]) == std::vector<int64_t>{n, k} && Shape(out[1]) == std::vector<int64_t>{n, r}))
      << Describe(pr) << ": output shapes";
  const std::vector<S> m = Values<S>(out[0]), p = Values<S>(out[1]);
  if (static_cast<int64_t>(m.size()) != n * k || static_cast<int64_t>(p.size()) != n * r) return;
  int reported = 0;
  const auto same = [](S a, S b) {
    return Bits(a) == Bits(b) || (std::isnan(Tr::ToAcc(a)) && std::isnan(Tr::ToAcc(b)));
  };
  for (int64_t x = 0; x < n * k; ++x) {
    const S want = Tr::FromAcc(Tr::ToAcc(g[x]) + Tr::ToAcc(e[x]));
    if (!same(m[x], want) && reported++ < 3) {
      CHECK(false) << Tr::kName << " compensate m " << Describe(pr) << " at " << x << ": bits 0x"
                   << std::hex << Bits(m[x]) << " != 0x" << Bits(want);
    }
  }
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < r; ++j) {
      const S want = DocumentedCompensated<Tr>(m, q, i, j, k, r);
      const bool nan_row = n > 1 && k > 1 && i == n - 1;
      if ((!same(p[i * r + j], want) || (nan_row && !std::isnan(Tr::ToAcc(p[i * r + j])))) &&
          reported++ < 3) {
        CHECK(false) << Tr::kName << " compensate p " << Describe(pr) << " at (" << i << ", " << j
                     << "): bits 0x" << std::hex << Bits(p[i * r + j]) << " != 0x" << Bits(want);
      }
    }
  }
}

// The project op against the documented evaluation, bit for bit.
template <typename Tr>
void CheckProject(ProjectGraph& graph, const Problem& pr, std::mt19937_64& rng) {
  using S = typename Tr::S;
  const int64_t n = pr.n, k = pr.k, r = pr.r;
  const auto m = RandomValues<Tr>(n * k, rng), p = RandomValues<Tr>(n * r, rng);
  Tensor out;
  const Status s = graph.Run(MakeTensor(Tr::kType, {n, k}, m), MakeTensor(Tr::kType, {n, r}, p), &out);
  CHECK(s.ok()) << Describe(pr) << ": " << s.message;
  if (!s.ok()) return;
  CHECK((Shape(out) == std::vector<int64_t>{k, r})) << Describe(pr) << ": output shape";
  const std::vector<S> q = Values<S>(out);
  if (static_cast<int64_t>(q.size()) != k * r) return;
  int reported = 0;
  for (int64_t c = 0; c < k; ++c) {
    for (int64_t j = 0; j < r; ++j) {
      const S want = DocumentedProjected<Tr>(m, p, c, j, n, k, r);
      if (Bits(q[c * r + j]) != Bits(want) && reported++ < 3) {
        CHECK(false) << Tr::kName << " project " << Describe(pr) << " at (" << c << ", " << j
                     << "): bits 0x" << std::hex << Bits(q[c * r + j]) << " != 0x" << Bits(want);
      }
    }
  }
}

const Problem kProblems[] = {{1, 1, 1},   {7, 5, 2},   {256, 256, 4}, {300, 17, 32}, {65, 130, 64},
                             {9, 33, 1},  {4, 3, 0},   {0, 5, 2},     {5, 0, 2},     {0, 0, 0},
                             {1023, 97, 8},
                             {1024, 2048, 4}};  // 8 MiB of float: non-temporal stores

template <typename Tr>
void TestDtype() {
  ResidualGraph graph(Tr::kType);
  std::mt19937_64 rng(11);
  for (const Problem& pr : kProblems) {
    Case(std::string("values/") + Tr::kName + "/" + Describe(pr),
         [&] { CheckValues<Tr>(graph, pr, rng); });
  }
  Case(std::string("specials/") + Tr::kName, [&] { CheckSpecials<Tr>(graph); });
  ProductGraph product(Tr::kType);
  for (const Problem& pr : kProblems) {
    Case(std::string("product/") + Tr::kName + "/" + Describe(pr),
         [&] { CheckProduct<Tr>(product, pr, rng); });
  }
  CompensateGraph compensate(Tr::kType);
  for (const Problem& pr : kProblems) {
    Case(std::string("compensate/") + Tr::kName + "/" + Describe(pr),
         [&] { CheckCompensate<Tr>(compensate, pr, rng); });
  }
  ProjectGraph project(Tr::kType);
  for (const Problem& pr : kProblems) {
    Case(std::string("project/") + Tr::kName + "/" + Describe(pr),
         [&] { CheckProject<Tr>(project, pr, rng); });
  }
  Case(std::string("project/") + Tr::kName + "/600x70 r=3 (three blocks of rows)",
       [&] { CheckProject<Tr>(project, Problem{600, 70, 3}, rng); });
}

void TestCompensateErrors() {
  CompensateGraph graph(TF_FLOAT);
  auto run = [&](std::vector<int64_t> g_dims, std::vector<int64_t> e_dims, std::vector<int64_t> q_dims) {
    auto filled = [](const std::vector<int64_t>& dims) {
      int64_t count = 1;
      for (int64_t d : dims) count *= d;
      return MakeTensor(TF_FLOAT, dims, std::vector<float>(count, 1.0f));
    };
    std::vector<Tensor> out;
    return graph.Run(filled(g_dims), filled(e_dims), filled(q_dims), &out);
  };
  ProjectGraph project(TF_FLOAT);
  auto run_project = [&](std::vector<int64_t> m_dims, std::vector<int64_t> p_dims) {
    auto filled = [](const std::vector<int64_t>& dims) {
      int64_t count = 1;
      for (int64_t d : dims) count *= d;
      return MakeTensor(TF_FLOAT, dims, std::vector<float>(count, 1.0f));
    };
    Tensor out;
    return project.Run(filled(m_dims), filled(p_dims), &out);
  };
  Case("project errors/kernel", [&] {
    CheckError(run_project({6}, {6, 2}), "m must be a matrix [n, k] (rank 2), got shape [6]");
    CheckError(run_project({4, 3}, {4}), "p must be a matrix [n, r] (rank 2), got shape [4]");
    CheckError(run_project({4, 3}, {5, 2}), "p must have one row per row of m: m is [4,3] (n = 4) but p is [5,2]");
    for (const auto& dims : std::vector<std::vector<std::vector<int64_t>>>{
             {{4, 3}, {4, 2}}, {{0, 3}, {0, 2}}, {{4, 0}, {4, 2}}, {{4, 3}, {4, 0}}}) {
      const Status s = run_project(dims[0], dims[1]);
      CHECK(s.ok()) << s.message;
    }
  });
  Case("compensate errors/kernel", [&] {
    CheckError(run({6}, {6}, {6, 2}), "g must be a matrix [n, k] (rank 2), got shape [6]");
    CheckError(run({4, 3}, {3, 4}, {3, 2}), "e must have g's shape: g is [4,3] but e is [3,4]");
    CheckError(run({4, 3}, {4, 3}, {3}), "q must be a matrix [k, r] (rank 2), got shape [3]");
    CheckError(run({4, 3}, {4, 3}, {2, 2}), "q must have one row per column of g: g is [4,3] (k = 3) but q is [2,2]");
    for (const auto& dims : std::vector<std::vector<std::vector<int64_t>>>{
             {{4, 3}, {4, 3}, {3, 2}}, {{0, 3}, {0, 3}, {3, 2}}, {{4, 0}, {4, 0}, {0, 2}}, {{4, 3}, {4, 3}, {3, 0}}}) {
      const Status s = run(dims[0], dims[1], dims[2]);
      CHECK(s.ok()) << s.message;
    }
  });
}

// The shape function's verdict when `add` puts the op on float placeholders of the
// given known shapes (in order), and the output's inferred dims.
template <typename Add>
std::pair<Status, std::vector<int64_t>> InferShape(std::vector<std::vector<int64_t>> dims, Add add) {
  TF_Graph* g = TF_NewGraph();
  std::vector<TF_Output> inputs;
  for (size_t i = 0; i < dims.size(); ++i) {
    inputs.push_back(Placeholder(g, ("input" + std::to_string(i)).c_str(), TF_FLOAT, &dims[i]));
  }
  TF_Operation* op = nullptr;
  const Status s = add(g, inputs, &op);
  std::vector<int64_t> out_dims;
  if (s.ok()) {
    TF_Status* st = TF_NewStatus();
    const TF_Output out{op, 0};
    out_dims.resize(TF_GraphGetTensorNumDims(g, out, st));
    TF_GraphGetTensorShape(g, out, out_dims.data(), static_cast<int>(out_dims.size()), st);
    TF_DeleteStatus(st);
  }
  TF_DeleteGraph(g);
  return std::make_pair(s, out_dims);
}

// ---- Errors ----------------------------------------------------------------------

void TestErrors() {
  ResidualGraph graph(TF_FLOAT);
  auto run = [&](std::vector<int64_t> m_dims, std::vector<int64_t> p_dims, std::vector<int64_t> q_dims) {
    auto filled = [](const std::vector<int64_t>& dims) {
      int64_t count = 1;
      for (int64_t d : dims) count *= d;
      return MakeTensor(TF_FLOAT, dims, std::vector<float>(count, 1.0f));
    };
    Tensor out;
    return graph.Run(filled(m_dims), filled(p_dims), filled(q_dims), &out);
  };
  Case("errors/kernel ranks", [&] {
    CheckError(run({6}, {6, 2}, {1, 2}), "m must be a matrix [n, k] (rank 2), got shape [6]");
    CheckError(run({2, 3, 1}, {2, 2}, {3, 2}), "m must be a matrix [n, k] (rank 2), got shape [2,3,1]");
    CheckError(run({}, {2, 2}, {3, 2}), "m must be a matrix");
    CheckError(run({2, 3}, {2}, {3, 2}), "p must be a matrix [n, r] (rank 2), got shape [2]");
    CheckError(run({2, 3}, {2, 2}, {3, 2, 1}), "q must be a matrix [k, r] (rank 2), got shape [3,2,1]");
  });
  Case("errors/kernel n", [&] {
    CheckError(run({4, 3}, {5, 2}, {3, 2}),
               "p must have one row per row of m: m is [4,3] (n = 4) but p is [5,2]");
  });
  Case("errors/kernel k", [&] {
    CheckError(run({4, 3}, {4, 2}, {2, 2}),
               "q must have one row per column of m: m is [4,3] (k = 3) but q is [2,2]");
    CheckError(run({4, 3}, {4, 2}, {4, 2}), "q must have one row per column of m");
  });
  Case("errors/kernel r", [&] {
    CheckError(run({4, 3}, {4, 2}, {3, 1}),
               "p and q must have the same number of columns (the rank r): p is [4,2] but q is [3,1]");
    CheckError(run({4, 3}, {4, 0}, {3, 1}), "the same number of columns");
  });
  Case("errors/kernel edges are fine", [&] {
    for (const auto& dims : std::vector<std::vector<std::vector<int64_t>>>{
             {{4, 3}, {4, 2}, {3, 2}}, {{0, 3}, {0, 2}, {3, 2}}, {{4, 0}, {4, 2}, {0, 2}},
             {{4, 3}, {4, 0}, {3, 0}}, {{1, 1}, {1, 64}, {1, 64}}}) {
      const Status s = run(dims[0], dims[1], dims[2]);
      CHECK(s.ok()) << s.message;
    }
  });

  // The shape function, with placeholders of known shape.
  auto build = [](std::vector<int64_t> m_dims, std::vector<int64_t> p_dims, std::vector<int64_t> q_dims) {
    return InferShape({m_dims, p_dims, q_dims}, [](TF_Graph* g, const std::vector<TF_Output>& in, TF_Operation** op) {
      return ResidualGraph::AddResidual(g, TF_FLOAT, in[0], in[1], in[2], op);
    });
  };
  Case("errors/shape function", [&] {
    CheckError(build({6}, {6, 2}, {1, 2}).first, "m must be a matrix [n, k] (rank 2)");
    CheckError(build({2, 3}, {2, 2, 1}, {3, 2}).first, "p must be a matrix [n, r] (rank 2)");
    CheckError(build({2, 3}, {2, 2}, {3}).first, "q must be a matrix [k, r] (rank 2)");
    CheckError(build({4, 3}, {5, 2}, {3, 2}).first, "p must have one row per row of m");
    CheckError(build({4, 3}, {4, 2}, {2, 2}).first, "q must have one row per column of m");
    CheckError(build({4, 3}, {4, 2}, {3, 1}).first, "p and q must have the same number of columns");
  });
  Case("shape function infers [n, k]", [&] {
    const auto known = build({4, 3}, {4, 2}, {3, 2});
    CHECK(known.first.ok()) << known.first.message;
    CHECK((known.second == std::vector<int64_t>{4, 3}));
    const auto partial = build({-1, 3}, {4, -1}, {-1, 2});  // n from p, k from m
    CHECK(partial.first.ok()) << partial.first.message;
    CHECK((partial.second == std::vector<int64_t>{4, 3}));
  });
}

void TestProductErrors() {
  ProductGraph graph(TF_FLOAT);
  auto run = [&](std::vector<int64_t> p_dims, std::vector<int64_t> q_dims) {
    auto filled = [](const std::vector<int64_t>& dims) {
      int64_t count = 1;
      for (int64_t d : dims) count *= d;
      return MakeTensor(TF_FLOAT, dims, std::vector<float>(count, 1.0f));
    };
    Tensor out;
    return graph.Run(filled(p_dims), filled(q_dims), &out);
  };
  Case("product errors/kernel", [&] {
    CheckError(run({6}, {1, 2}), "p must be a matrix [n, r] (rank 2), got shape [6]");
    CheckError(run({2, 2}, {3, 2, 1}), "q must be a matrix [k, r] (rank 2), got shape [3,2,1]");
    CheckError(run({4, 2}, {3, 1}),
               "p and q must have the same number of columns (the rank r): p is [4,2] but q is [3,1]");
    for (const auto& dims : std::vector<std::vector<std::vector<int64_t>>>{
             {{4, 2}, {3, 2}}, {{0, 2}, {3, 2}}, {{4, 2}, {0, 2}}, {{4, 0}, {3, 0}}}) {
      const Status s = run(dims[0], dims[1]);
      CHECK(s.ok()) << s.message;
    }
  });
  Case("product/rank 0 is +0", [&] {
    Tensor out;
    const Status s = graph.Run(MakeTensor(TF_FLOAT, {2, 0}, std::vector<float>{}),
                               MakeTensor(TF_FLOAT, {3, 0}, std::vector<float>{}), &out);
    CHECK(s.ok()) << s.message;
    if (s.ok()) {
      for (float v : Values<float>(out)) CHECK(v == 0.0f && !std::signbit(v)) << v;
    }
  });
  auto build = [](std::vector<int64_t> p_dims, std::vector<int64_t> q_dims) {
    return InferShape({p_dims, q_dims}, [](TF_Graph* g, const std::vector<TF_Output>& in, TF_Operation** op) {
      return ProductGraph::AddProduct(g, TF_FLOAT, in[0], in[1], op);
    });
  };
  Case("product errors/shape function", [&] {
    CheckError(build({2, 2, 1}, {3, 2}).first, "p must be a matrix [n, r] (rank 2)");
    CheckError(build({2, 2}, {3}).first, "q must be a matrix [k, r] (rank 2)");
    CheckError(build({4, 2}, {3, 1}).first, "p and q must have the same number of columns");
    const auto known = build({4, 2}, {3, 2});
    CHECK(known.first.ok() && (known.second == std::vector<int64_t>{4, 3})) << known.first.message;
  });
}

}  // namespace

int main(int argc, char** argv) {
  LoadOpLibraryOrExit(argc, argv);

  Case("reference conversions", [] {
    CHECK(HalfFromFloat(1.0f) == 0x3c00);
    CHECK(HalfFromFloat(1.0f + 1.0f / 2048) == 0x3c00);  // tie to even
    CHECK(HalfFromFloat(1.0f + 3.0f / 2048) == 0x3c02);
    CHECK(HalfFromFloat(std::ldexp(1.0f, -24)) == 0x0001);
    for (uint32_t h = 0; h < 0x7c00; ++h) {
      CHECK(HalfFromFloat(static_cast<float>(HalfToDouble(h))) == h) << std::hex << h;
    }
    CHECK(BFloat16FromFloat(1.0f + 1.0f / 256) == 0x3f80);  // tie to even
    CHECK(BFloat16FromFloat(1.0f + 3.0f / 256) == 0x3f82);
  });
  TestDtype<Float>();
  TestDtype<Double>();
  TestDtype<Half>();
  TestDtype<BFloat16>();
  TestErrors();
  TestProductErrors();
  TestCompensateErrors();
  return tfcomp::testing::Summary();
}
