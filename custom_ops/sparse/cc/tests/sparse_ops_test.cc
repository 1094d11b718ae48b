// Runs the sparse ops of the built op library through the TensorFlow C API:
// TfcompHashSelect against a sequential reference (pass i = 0..n-1; a selected
// i claims slot h(i), which keeps the largest magnitude, float32(|g|) with NaN
// above +Inf, ties to the larger index) bit for bit, plus its invariants and
// certain collisions with their winners spelled out; TfcompSparseDecode
// (with and without a divisor) against an in-order reference bit for bit;
// TfcompScaleAt (factor 0, 1, 0.5, -3, repeated indices, NaN and Inf); TfcompSampledThreshold against a
// reference that samples at SamplePosition and sorts (bit for bit, but +0 and
// -0 match); and the argument errors.
//
// Usage: sparse_ops_test path/to/_tfcomp_ops.so   (or TFCOMP_OPS_LIB=...)
// Prints "N passed, M failed" and exits nonzero on a failure.
//
// The reference hash reuses HashFromSeed and HashSlot of sparse_core.h, which
// sparse_core_test checks against an __int128 reference, and the threshold's
// reference its SamplePosition. The collision rule is spelled out here
// (RefOutranks), not taken from SlotClaim.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "custom_ops/sparse/cc/kernels/sparse_core.h"
#include "custom_ops/testing/check.h"
#include "custom_ops/testing/tf_c_api.h"

namespace {

using namespace tfcomp::testing;  // NOLINT: Case and the C API helpers

// ---- The dtypes: storage, conversion, and the kernels' addition ------------
//
// TensorFlow runs kernels with denormals flushed to zero, so the test values
// stay normal (magnitudes >= 2^-5), and so do their sums.

template <typename F>
struct IeeeType {
  using S = F;
  static double ToDouble(S v) { return v; }
  static S FromDouble(double v) { return static_cast<S>(v); }
  static S Add(S a, S b) { return a + b; }
};

struct Float : IeeeType<float> {
  static constexpr TF_DataType kType = TF_FLOAT;
  static constexpr const char* kName = "float";
  static constexpr double kBig = 1e8;  // swamps the small values: order matters
};

struct Double : IeeeType<double> {
  static constexpr TF_DataType kType = TF_DOUBLE;
  static constexpr const char* kName = "double";
  static constexpr double kBig = 1e17;
};

// 16-bit types are passed to TensorFlow as their bit patterns; the kernels add
// them in float and round the sum back (Eigen's operator+=).
struct Half {
  using S = uint16_t;
  static constexpr TF_DataType kType = TF_HALF;
  static constexpr const char* kName = "half";
  static constexpr double kBig = 1024;  // ulp 1
  static double ToDouble(S h) { return HalfToDouble(h); }
  static S FromDouble(double v) { return HalfFromFloat(static_cast<float>(v)); }
  static S Add(S a, S b) {
    const float sum = static_cast<float>(ToDouble(a)) + static_cast<float>(ToDouble(b));
    return HalfFromFloat(sum);
  }
};

struct BFloat16 {
  using S = uint16_t;
  static constexpr TF_DataType kType = TF_BFLOAT16;
  static constexpr const char* kName = "bfloat16";
  static constexpr double kBig = 1024;  // ulp 8
  static double ToDouble(S b) { return BFloat16ToFloat(b); }
  static S FromDouble(double v) { return BFloat16FromFloat(static_cast<float>(v)); }
  static S Add(S a, S b) {
    const float sum = static_cast<float>(ToDouble(a)) + static_cast<float>(ToDouble(b));
    return BFloat16FromFloat(sum);
  }
};

struct Int32Index {
  using I = int32_t;
  static constexpr TF_DataType kType = TF_INT32;
  static constexpr const char* kName = "int32";
};

struct Int64Index {
  using I = int64_t;
  static constexpr TF_DataType kType = TF_INT64;
  static constexpr const char* kName = "int64";
};

// Magnitudes in [2^-5, 2^3), either sign; exactly representable in every dtype.
template <typename Tr>
typename Tr::S RandomValue(std::mt19937_64& rng) {
  const int exponent = -5 + static_cast<int>(rng() % 8);
  const double mantissa = 1.0 + static_cast<double>(rng() % 128) / 128;  // 8 bits
  return Tr::FromDouble((rng() & 1 ? -1 : 1) * std::ldexp(mantissa, exponent));
}

// ---- The graph -----------------------------------------------------------------

const int64_t kCapacities[] = {0, 1, 7, 1024};
// HashSelects with buckets of kBucketSize slots: 7 leaves a shorter last bucket.
const int64_t kBucketCapacities[] = {7, 1024};
constexpr int64_t kBucketSize = 4;

// One graph per dtype: placeholders of unknown shape (so the kernels, not the
// shape functions, see bad shapes) feeding a HashSelect per (capacity, index
// type) and a SparseDecode per index type.
class SparseGraph : public OpGraph {
 public:
  struct Select {
    TF_Output values, indices;
  };
  TF_Output g, threshold, seed;
  std::map<std::pair<int64_t, TF_DataType>, Select> select;
  std::map<std::pair<int64_t, TF_DataType>, Select> bucket_select;  // bucket_size kBucketSize
  TF_Output decode_values, decode_n;
  std::map<TF_DataType, TF_Output> decode_indices, decode_out;
  // TfcompSparseDecode with divisor kDivisor (the mean of kDivisor workers), and
  // TfcompScaleAt(scale_x, decode_indices, scale_factor), per index type.
  static constexpr int64_t kDivisor = 3;
  TF_Output scale_x, scale_factor;
  std::map<TF_DataType, TF_Output> decode_mean_out, scale_out;

  // TfcompSampledThreshold(g, seed) with these attrs, added on first use (the
  // session picks up nodes added to its graph before the next run).
  TF_Output Threshold(int64_t num_samples, int64_t k) {
    TF_Output& out = threshold_ops_[{num_samples, k}];
    if (out.oper == nullptr) {
      const std::string name =
          "threshold_" + std::to_string(num_samples) + "_" + std::to_string(k);
      TF_OperationDescription* d = TF_NewOperation(graph(), "TfcompSampledThreshold", name.c_str());
      TF_AddInput(d, g);
      TF_AddInput(d, seed);
      TF_SetAttrType(d, "T", type_);
      TF_SetAttrInt(d, "num_samples", num_samples);
      TF_SetAttrInt(d, "k", k);
      out = {FinishOrExit(d, name.c_str()), 0};
    }
    return out;
  }

  explicit SparseGraph(TF_DataType type) : type_(type) {
    g = Placeholder(graph(), "g", type);
    threshold = Placeholder(graph(), "threshold", type);
    seed = Placeholder(graph(), "seed", TF_INT64);
    decode_values = Placeholder(graph(), "decode_values", type);
    decode_n = Placeholder(graph(), "decode_n", TF_INT64);
    scale_x = Placeholder(graph(), "scale_x", type);
    scale_factor = Placeholder(graph(), "scale_factor", type);
    for (TF_DataType index_type : {TF_INT32, TF_INT64}) {
      const std::string suffix = index_type == TF_INT32 ? "_int32" : "_int64";
      // bucket_size 0: the attr left to its default (1).
      const auto add_select = [&](int64_t capacity, int64_t bucket_size) {
        const std::string name = "select_" + std::to_string(capacity) + "_bucket" +
                                 std::to_string(bucket_size) + suffix;
        TF_OperationDescription* d = TF_NewOperation(graph(), "TfcompHashSelect", name.c_str());
        for (const TF_Output& in : {g, threshold, seed}) TF_AddInput(d, in);
        TF_SetAttrType(d, "T", type);
        TF_SetAttrType(d, "Tindex", index_type);
        TF_SetAttrInt(d, "capacity", capacity);
        if (bucket_size > 0) TF_SetAttrInt(d, "bucket_size", bucket_size);
        TF_Operation* op = FinishOrExit(d, name.c_str());
        return Select{{op, 0}, {op, 1}};
      };
      for (int64_t capacity : kCapacities) select[{capacity, index_type}] = add_select(capacity, 0);
      for (int64_t capacity : kBucketCapacities) {
        bucket_select[{capacity, index_type}] = add_select(capacity, kBucketSize);
      }
      const std::string indices_name = "decode_indices" + suffix;
      decode_indices[index_type] = Placeholder(graph(), indices_name.c_str(), index_type);
      const std::string name = "decode" + suffix;
      TF_OperationDescription* d = TF_NewOperation(graph(), "TfcompSparseDecode", name.c_str());
      for (const TF_Output& in : {decode_values, decode_indices[index_type], decode_n}) {
        TF_AddInput(d, in);
      }
      TF_SetAttrType(d, "T", type);
      TF_SetAttrType(d, "Tindex", index_type);
      decode_out[index_type] = {FinishOrExit(d, name.c_str()), 0};
      const std::string mean_name = "decode_mean" + suffix;
      d = TF_NewOperation(graph(), "TfcompSparseDecode", mean_name.c_str());
      for (const TF_Output& in : {decode_values, decode_indices[index_type], decode_n}) {
        TF_AddInput(d, in);
      }
      TF_SetAttrType(d, "T", type);
      TF_SetAttrType(d, "Tindex", index_type);
      TF_SetAttrInt(d, "divisor", kDivisor);
      decode_mean_out[index_type] = {FinishOrExit(d, mean_name.c_str()), 0};
      const std::string scale_name = "scale_at" + suffix;
      d = TF_NewOperation(graph(), "TfcompScaleAt", scale_name.c_str());
      for (const TF_Output& in : {scale_x, decode_indices[index_type], scale_factor}) {
        TF_AddInput(d, in);
      }
      TF_SetAttrType(d, "T", type);
      TF_SetAttrType(d, "Tindex", index_type);
      scale_out[index_type] = {FinishOrExit(d, scale_name.c_str()), 0};
    }
  }

 private:
  TF_DataType type_;
  std::map<std::pair<int64_t, int64_t>, TF_Output> threshold_ops_;
};

const int64_t kSizes[] = {0, 1, 1000, 100003};

// ---- HashSelect ----------------------------------------------------------------

template <typename Tr>
bool RefSelected(typename Tr::S v, double threshold) {
  return !(std::fabs(Tr::ToDouble(v)) < threshold);  // NaN is selected
}

// The magnitude a slot compares: float32(|g|).
template <typename Tr>
float RefMagnitude(typename Tr::S v) {  // float32(|v|), denormals as 0
  const float m = static_cast<float>(std::fabs(Tr::ToDouble(v)));
  return std::fpclassify(m) == FP_SUBNORMAL ? 0.0f : m;
}

// Whether element i of g outranks element j in a slot: NaN above every number
// (NaNs tie, whatever their payload), then the larger magnitude, then the
// larger index.
template <typename Tr>
bool RefOutranks(const std::vector<typename Tr::S>& g, int64_t i, int64_t j) {
  const float a = RefMagnitude<Tr>(g[i]), b = RefMagnitude<Tr>(g[j]);
  if (std::isnan(a) != std::isnan(b)) return std::isnan(a);
  if (!std::isnan(a) && a != b) return a > b;
  return i > j;
}

// The sequential pass: in index order, a selected element takes its slot when
// the slot is empty or it outranks the slot's element.
template <typename Tr>
std::vector<int64_t> RefSelect(const std::vector<typename Tr::S>& g, double threshold,
                               tfcomp::sparse::HashParams hash, int64_t capacity) {
  std::vector<int64_t> slots(capacity, -1);
  for (int64_t i = 0; i < static_cast<int64_t>(g.size()); ++i) {
    if (!RefSelected<Tr>(g[i], threshold)) continue;
    int64_t& kept = slots[tfcomp::sparse::HashSlot(hash, i, capacity)];
    if (kept < 0 || RefOutranks<Tr>(g, i, kept)) kept = i;
  }
  return slots;
}

// Buckets of bucket_size slots (the last shorter): each keeps the selected
// elements hashed to it that outrank the rest, in decreasing order.
template <typename Tr>
std::vector<int64_t> RefSelectBuckets(const std::vector<typename Tr::S>& g, double threshold,
                                      tfcomp::sparse::HashParams hash, int64_t capacity,
                                      int64_t bucket_size) {
  const int64_t buckets = (capacity + bucket_size - 1) / bucket_size;
  std::vector<std::vector<int64_t>> hashed(buckets);
  for (int64_t i = 0; i < static_cast<int64_t>(g.size()); ++i) {
    if (!RefSelected<Tr>(g[i], threshold)) continue;
    hashed[tfcomp::sparse::HashSlot(hash, i, buckets)].push_back(i);
  }
  std::vector<int64_t> slots(capacity, -1);
  for (int64_t b = 0; b < buckets; ++b) {
    std::sort(hashed[b].begin(), hashed[b].end(),
              [&](int64_t i, int64_t j) { return RefOutranks<Tr>(g, i, j); });
    const int64_t size = std::min(capacity, (b + 1) * bucket_size) - b * bucket_size;
    for (int64_t k = 0; k < size && k < static_cast<int64_t>(hashed[b].size()); ++k) {
      slots[b * bucket_size + k] = hashed[b][k];
    }
  }
  return slots;
}

// The bucketed HashSelect of capacity slots against RefSelectBuckets, index and value bits.
template <typename Tr, typename Ix>
void CheckBucketSelect(SparseGraph& graph, const std::vector<typename Tr::S>& g, double threshold,
                       int64_t capacity, int64_t seed0, int64_t seed1, const std::string& what) {
  using S = typename Tr::S;
  const SparseGraph::Select& op = graph.bucket_select.at({capacity, Ix::kType});
  const int64_t n = static_cast<int64_t>(g.size());
  std::vector<Tensor> out;
  std::vector<std::pair<TF_Output, Tensor>> feeds;
  feeds.emplace_back(graph.g, MakeTensor(Tr::kType, {n}, g));
  feeds.emplace_back(graph.threshold, MakeTensor<S>(Tr::kType, {}, {Tr::FromDouble(threshold)}));
  feeds.emplace_back(graph.seed, MakeTensor<int64_t>(TF_INT64, {2}, {seed0, seed1}));
  const Status s = graph.Run(std::move(feeds), {op.values, op.indices}, &out);
  CHECK(s.ok()) << what << ": " << s.message;
  if (!s.ok()) return;
  const std::vector<S> values = Values<S>(out[0]);
  const std::vector<typename Ix::I> indices = Values<typename Ix::I>(out[1]);
  CHECK(static_cast<int64_t>(indices.size()) == capacity) << what << ": indices shape";
  if (static_cast<int64_t>(indices.size()) != capacity) return;
  const std::vector<int64_t> ref = RefSelectBuckets<Tr>(
      g, Tr::ToDouble(Tr::FromDouble(threshold)),
      tfcomp::sparse::HashFromSeed(static_cast<uint64_t>(seed0), static_cast<uint64_t>(seed1)),
      capacity, kBucketSize);
  for (int64_t j = 0; j < capacity; ++j) {
    CHECK(indices[j] == ref[j]) << what << ": slot " << j << " holds index " << indices[j]
                                << ", the reference " << ref[j];
    const uint64_t want = ref[j] >= 0 ? Bits(g[ref[j]]) : 0;
    CHECK(Bits(values[j]) == want) << what << ": slot " << j << " value bits";
  }
}

struct SelectRun {
  std::vector<int64_t> indices;  // widened; empty when the run failed
  bool ok = false;
};

// Runs HashSelect and checks it against the reference and its invariants.
template <typename Tr, typename Ix>
SelectRun CheckSelect(SparseGraph& graph, const std::vector<typename Tr::S>& g,
                      std::vector<int64_t> dims, typename Tr::S threshold, int64_t capacity,
                      int64_t seed0, int64_t seed1, const std::string& what) {
  using S = typename Tr::S;
  using I = typename Ix::I;
  const SparseGraph::Select& op = graph.select.at({capacity, Ix::kType});
  std::vector<Tensor> out;
  std::vector<std::pair<TF_Output, Tensor>> feeds;
  feeds.emplace_back(graph.g, MakeTensor(Tr::kType, dims, g));
  feeds.emplace_back(graph.threshold, MakeTensor<S>(Tr::kType, {}, {threshold}));
  feeds.emplace_back(graph.seed, MakeTensor<int64_t>(TF_INT64, {2}, {seed0, seed1}));
  const Status s = graph.Run(std::move(feeds), {op.values, op.indices}, &out);
  CHECK(s.ok()) << what << ": " << s.message;
  SelectRun run;
  if (!s.ok()) return run;

  // Fixed output size, whatever is selected.
  CHECK(Shape(out[0]) == std::vector<int64_t>{capacity}) << what << ": values shape";
  CHECK(Shape(out[1]) == std::vector<int64_t>{capacity}) << what << ": indices shape";
  const std::vector<S> values = Values<S>(out[0]);
  const std::vector<I> indices = Values<I>(out[1]);
  if (static_cast<int64_t>(values.size()) != capacity ||
      static_cast<int64_t>(indices.size()) != capacity) {
    return run;
  }

  const double t = Tr::ToDouble(threshold);
  const tfcomp::sparse::HashParams hash = tfcomp::sparse::HashFromSeed(
      static_cast<uint64_t>(seed0), static_cast<uint64_t>(seed1));
  const int64_t n = static_cast<int64_t>(g.size());

  // Bit-exact against the sequential reference.
  if (capacity > 0) {
    const std::vector<int64_t> ref = RefSelect<Tr>(g, t, hash, capacity);
    for (int64_t j = 0; j < capacity; ++j) {
      CHECK(indices[j] == ref[j]) << what << ": slot " << j << " holds index " << indices[j]
                                  << ", the reference " << ref[j];
      const uint64_t want = ref[j] >= 0 ? Bits(g[ref[j]]) : 0;  // +0 in an empty slot
      CHECK(Bits(values[j]) == want) << what << ": slot " << j << " value bits 0x" << std::hex
                                     << Bits(values[j]) << " != 0x" << want;
    }
  }

  // Invariants, independent of the reference: valid indices are distinct,
  // selected, in their hash slot, with their value; empty slots are (-1, +0);
  // every selected element's slot holds it or an element that outranks it
  // (magnitude at least as large, NaN above all, ties to the larger index).
  std::set<int64_t> seen;
  for (int64_t j = 0; j < capacity; ++j) {
    const int64_t idx = indices[j];
    if (idx == -1) {
      CHECK(Bits(values[j]) == 0) << what << ": empty slot " << j << " value bits 0x" << std::hex
                                  << Bits(values[j]);
      continue;
    }
    CHECK(idx >= 0 && idx < n) << what << ": slot " << j << " index " << idx << " outside [-1, "
                               << n << ")";
    if (idx < 0 || idx >= n) continue;
    CHECK(seen.insert(idx).second) << what << ": index " << idx << " appears twice";
    CHECK(RefSelected<Tr>(g[idx], t)) << what << ": index " << idx << " is not selected";
    CHECK(tfcomp::sparse::HashSlot(hash, idx, capacity) == j)
        << what << ": index " << idx << " in slot " << j << ", hashes to "
        << tfcomp::sparse::HashSlot(hash, idx, capacity);
    CHECK(Bits(values[j]) == Bits(g[idx])) << what << ": slot " << j << " value is not g[" << idx
                                           << "]";
  }
  if (capacity > 0) {
    for (int64_t i = 0; i < n; ++i) {
      if (!RefSelected<Tr>(g[i], t)) continue;
      const int64_t j = tfcomp::sparse::HashSlot(hash, i, capacity);
      const int64_t kept = indices[j];
      const bool valid = kept >= 0 && kept < n;
      CHECK(kept == i || (valid && RefOutranks<Tr>(g, kept, i)))
          << what << ": selected index " << i << " (|g| " << RefMagnitude<Tr>(g[i])
          << ") lost slot " << j << " to " << kept << " (|g| "
          << (valid ? RefMagnitude<Tr>(g[kept]) : 0.0f) << ")";
    }
  }
  run.indices.assign(indices.begin(), indices.end());
  run.ok = true;
  return run;
}

// g: random magnitudes in [2^-5, 2^3), some exactly +-2 (at the "some"
// threshold), g[0] = 12 the largest, and with specials NaN, -NaN, +-inf at
// every seventh element.
template <typename Tr>
std::vector<typename Tr::S> MakeG(int64_t n, bool specials, std::mt19937_64& rng) {
  using S = typename Tr::S;
  const double inf = std::numeric_limits<double>::infinity();
  const S special[] = {Tr::FromDouble(NAN), Tr::FromDouble(inf), Tr::FromDouble(-inf),
                       Tr::FromDouble(-NAN)};
  std::vector<S> g(n);
  for (int64_t i = 0; i < n; ++i) {
    if (specials && i % 7 == 3) {
      g[i] = special[(i / 7) % 4];
    } else if (i % 11 == 5) {
      g[i] = Tr::FromDouble(i % 2 ? 2.0 : -2.0);
    } else {
      g[i] = RandomValue<Tr>(rng);
    }
  }
  if (n > 0) g[0] = Tr::FromDouble(12.0);
  return g;
}

struct Threshold {
  const char* name;
  double value;
};
const Threshold kThresholds[] = {
    {"none", 16},     // above every finite |g|
    {"some", 2},      // about a third, and the elements equal to 2
    {"all", 0},       // every element, zeros included
    {"only g[0]", 12},  // of the finite elements, only element 0
    {"inf", std::numeric_limits<double>::infinity()},  // only +-inf and NaN
};

const int64_t kSeeds[][2] = {{1, 2}, {-1, std::numeric_limits<int64_t>::min()}, {0, 0}};

template <typename Tr, typename Ix>
void TestSelect(SparseGraph& graph, int64_t n, int64_t capacity, std::mt19937_64& rng) {
  for (bool specials : {false, true}) {
    const auto g = MakeG<Tr>(n, specials, rng);
    for (const Threshold& th : kThresholds) {
      for (const auto& seed : kSeeds) {
        const std::string what = std::string(specials ? "nan/inf, " : "") + "threshold " +
                                 th.name + ", seed (" + std::to_string(seed[0]) + ", " +
                                 std::to_string(seed[1]) + ")";
        const SelectRun run = CheckSelect<Tr, Ix>(graph, g, {n}, Tr::FromDouble(th.value),
                                                  capacity, seed[0], seed[1], what);
        if (!run.ok || capacity == 0) continue;
        // Spelled out for the thresholds with an obvious answer.
        const int64_t valid = std::count_if(run.indices.begin(), run.indices.end(),
                                            [](int64_t i) { return i >= 0; });
        const auto hash = tfcomp::sparse::HashFromSeed(seed[0], seed[1]);
        if (!specials && (th.value == 16 || std::isinf(th.value))) {
          CHECK(valid == 0) << what << ": " << valid << " selected, none expected";
        }
        if (!specials && th.value == 12 && n > 0) {
          CHECK(valid == 1) << what << ": " << valid << " selected, only element 0 expected";
          CHECK(run.indices[tfcomp::sparse::HashSlot(hash, 0, capacity)] == 0)
              << what << ": element 0 missing from its slot";
        }
        if (th.value == 0 && n > 0) {  // every slot some index hashes to is filled
          std::set<int64_t> slots;
          for (int64_t i = 0; i < n; ++i) slots.insert(tfcomp::sparse::HashSlot(hash, i, capacity));
          CHECK(valid == static_cast<int64_t>(slots.size()))
              << what << ": " << valid << " filled slots, " << slots.size() << " hit";
        }
        if (!specials && th.value <= 12 && n > 0) {
          // g[0] = 12 is selected and the largest magnitude: it always wins its slot.
          CHECK(run.indices[tfcomp::sparse::HashSlot(hash, 0, capacity)] == 0)
              << what << ": element 0 lost its slot";
        }
      }
    }
  }
}

// NaNs of the dtype besides FromDouble(NAN)'s, as bit patterns: every bit set
// (-NaN, the largest payload), a signaling -NaN, a signaling +NaN.
template <typename Tr>
std::vector<uint64_t> OtherNaNBits() {
  switch (Tr::kType) {
    case TF_FLOAT: return {0xffffffff, 0xff800001, 0x7fa00000};
    case TF_DOUBLE: return {0xffffffffffffffff, 0xfff0000000000001, 0x7ff4000000000000};
    case TF_HALF: return {0xffff, 0xfc01, 0x7d00};
    default: return {0xffff, 0xff81, 0x7fa0};  // bfloat16
  }
}

// Certain collisions, winners spelled out: one slot (capacity 1) for short
// g's; then g long enough for the op to select on several threads, with one
// slot and with seven, ties planted in each.
template <typename Tr, typename Ix>
void TestSelectCollisions(SparseGraph& graph, std::mt19937_64& rng) {
  using S = typename Tr::S;
  const double inf = std::numeric_limits<double>::infinity();
  const auto from = [](const std::vector<double>& values) {
    std::vector<S> g;
    for (double v : values) g.push_back(Tr::FromDouble(v));
    return g;
  };
  // g's slots at threshold t hold `winners` (-1: empty), value bits g[winner].
  const auto check = [&](const std::string& what, const std::vector<S>& g, double t,
                         int64_t capacity, const std::vector<int64_t>& winners) {
    const int64_t n = static_cast<int64_t>(g.size());
    const SelectRun run =
        CheckSelect<Tr, Ix>(graph, g, {n}, Tr::FromDouble(t), capacity, 5, 6, what);
    if (!run.ok) return;
    CHECK(run.indices == winners) << what << ": not the winners spelled out";
  };
  // |-3| ties |3| ties |-3|: the largest index of the three.
  check("ties", from({2, -3, 0.25, 3, -3, 2.5, -0.5, 1}), 1, 1, {4});
  check("first is largest", from({-3, 2, 0.25, 2.5, -1}), 1, 1, {0});
  check("none selected", from({-9, 2, 0.25}), 10, 1, {-1});
  check("-inf ties +inf", from({1, -inf, 5, inf, -inf, 2}), 1, 1, {4});
  // NaN outranks +-inf and is selected at any threshold; NaNs tie, either sign.
  check("NaN", from({-inf, -3, NAN, 3, inf, -7}), 1, 1, {2});
  check("NaN ties -NaN", from({NAN, -3, inf, -NAN, 3}), 1, 1, {3});
  check("NaN below t", from({0.5, NAN, -0.25}), 4, 1, {1});
  check("zeros", from({0, -0.0, 0, -0.0}), 0, 1, {3});  // the value stays -0
  // NaNs tie whatever their sign and payload (quiet or signaling): the last
  // one wins, its bits kept.
  for (uint64_t bits : OtherNaNBits<Tr>()) {
    const S other = FromBits<S>(bits);
    std::vector<S> g = from({NAN, inf, 2, 0, -3});
    g[3] = other;
    check("NaN bits " + std::to_string(bits) + " last", g, 1, 1, {3});
    g[3] = Tr::FromDouble(NAN);
    g[0] = other;
    check("NaN bits " + std::to_string(bits) + " first", g, 1, 1, {3});
  }

  // Long: magnitudes below 8, then planted ones. One slot: 12 at several
  // indices of either sign, the last at 45000; then a NaN.
  const int64_t n = 50000;
  std::vector<S> g(n);
  for (auto& x : g) x = RandomValue<Tr>(rng);
  for (int64_t i : {100, 20000, 45000}) g[i] = Tr::FromDouble(i % 3 ? -12 : 12);
  g[49999] = Tr::FromDouble(11);
  check("long", g, 2, 1, {45000});
  g[30000] = Tr::FromDouble(-NAN);
  check("long, NaN", g, 2, 1, {30000});

  // Seven slots: in each, -12 and 12 at the first two indices hashed to it (a
  // tie) and 11 at the last; the second wins.
  for (auto& x : g) x = RandomValue<Tr>(rng);
  const int64_t capacity = 7;
  const auto hash = tfcomp::sparse::HashFromSeed(5, 6);
  std::vector<std::vector<int64_t>> hashed(capacity);
  for (int64_t i = 0; i < n; ++i) hashed[tfcomp::sparse::HashSlot(hash, i, capacity)].push_back(i);
  std::vector<int64_t> winners(capacity, -1);
  for (int64_t j = 0; j < capacity; ++j) {
    CHECK(hashed[j].size() >= 3) << "slot " << j << " has " << hashed[j].size() << " indices";
    if (hashed[j].size() < 3) return;
    g[hashed[j][0]] = Tr::FromDouble(-12);
    g[hashed[j][1]] = Tr::FromDouble(12);
    g[hashed[j].back()] = Tr::FromDouble(11);
    winners[j] = hashed[j][1];
  }
  for (double t : {0.0, 2.0, 12.0}) {
    check("seven slots, threshold " + std::to_string(t), g, t, capacity, winners);
  }
}

template <typename Tr>
void TestSelectShapes(SparseGraph& graph, std::mt19937_64& rng) {
  // g of any shape is flattened; a scalar g is one element.
  const auto g = MakeG<Tr>(33, true, rng);
  CheckSelect<Tr, Int64Index>(graph, g, {3, 11}, Tr::FromDouble(2), 7, 5, 6, "g [3, 11]");
  CheckSelect<Tr, Int32Index>(graph, g, {3, 1, 11}, Tr::FromDouble(0), 1024, 5, 6,
                              "g [3, 1, 11]");
  const auto one = MakeG<Tr>(1, false, rng);
  CheckSelect<Tr, Int32Index>(graph, one, {}, Tr::FromDouble(1), 7, 5, 6, "scalar g");
  // A negative threshold selects everything, as 0 does.
  CheckSelect<Tr, Int32Index>(graph, g, {33}, Tr::FromDouble(-1), 7, 5, 6, "threshold -1");
}

// ---- SparseDecode --------------------------------------------------------------

// out = zeros(n); out[idx[j]] += values[j] for idx[j] >= 0, j in order, with
// the dtype's own addition.
template <typename Tr>
std::vector<typename Tr::S> RefDecode(const std::vector<typename Tr::S>& values,
                                      const std::vector<int64_t>& indices, int64_t n) {
  std::vector<typename Tr::S> dense(n, Tr::FromDouble(0));
  for (size_t j = 0; j < indices.size(); ++j) {
    if (indices[j] >= 0) dense[indices[j]] = Tr::Add(dense[indices[j]], values[j]);
  }
  return dense;
}

// K lists of `length` entries, concatenated: about a fifth empty (-1, with a
// value that must not be added: NaN or big), the rest drawn from a small pool
// of positions (duplicates within and across lists) with values mixing
// +-big and small ones, so that the order of the additions shows; with K >= 4
// the lists add +inf and -inf at one position (NaN).
template <typename Tr, typename Ix>
void CheckDecode(SparseGraph& graph, int64_t n, int k, int64_t length, std::mt19937_64& rng) {
  using S = typename Tr::S;
  using I = typename Ix::I;
  std::vector<int64_t> pool;
  for (int64_t p = 0; p < std::min<int64_t>(n, 41); ++p) {
    pool.push_back(p < 2 ? p * (n - 1) : static_cast<int64_t>(rng() % n));  // 0, n-1, random
  }
  std::vector<S> values;
  std::vector<int64_t> indices;
  const double inf = std::numeric_limits<double>::infinity();
  for (int list = 0; list < k; ++list) {
    for (int64_t e = 0; e < length; ++e) {
      if (pool.empty() || rng() % 5 == 0) {
        indices.push_back(-1);
        values.push_back(Tr::FromDouble(rng() % 2 ? NAN : Tr::kBig));
        continue;
      }
      indices.push_back(pool[rng() % pool.size()]);
      const uint64_t kind = rng() % 4;
      values.push_back(kind == 0 ? Tr::FromDouble(Tr::kBig)
                                 : kind == 1 ? Tr::FromDouble(-Tr::kBig) : RandomValue<Tr>(rng));
    }
    if (k >= 4 && list >= 2 && !pool.empty() && length > 0) {
      indices.push_back(pool.back());
      values.push_back(Tr::FromDouble(list == 2 ? inf : -inf));
    }
  }
  const std::vector<I> typed_indices(indices.begin(), indices.end());
  const int64_t count = static_cast<int64_t>(indices.size());

  std::vector<Tensor> out;
  std::vector<std::pair<TF_Output, Tensor>> feeds;
  feeds.emplace_back(graph.decode_values, MakeTensor(Tr::kType, {count}, values));
  feeds.emplace_back(graph.decode_indices.at(Ix::kType),
                     MakeTensor(Ix::kType, {count}, typed_indices));
  feeds.emplace_back(graph.decode_n, Scalar64(n));
  const Status s = graph.Run(std::move(feeds),
                             {graph.decode_out.at(Ix::kType), graph.decode_mean_out.at(Ix::kType)},
                             &out);
  CHECK(s.ok()) << "K=" << k << ": " << s.message;
  if (!s.ok()) return;

  const std::vector<S> sums = RefDecode<Tr>(values, indices, n);
  for (int mean = 0; mean < 2; ++mean) {
  CHECK(Shape(out[mean]) == std::vector<int64_t>{n}) << "K=" << k << ": dense shape";
  const std::vector<S> dense = Values<S>(out[mean]);
  // The mean: each sum times 1 / kDivisor in the accumulation type, rounded once.
  std::vector<S> ref = sums;
  if (mean) {
    using Acc = std::conditional_t<Tr::kType == TF_DOUBLE, double, float>;
    const Acc weight = Acc(1) / Acc(SparseGraph::kDivisor);
    for (S& v : ref) v = Tr::FromDouble(static_cast<Acc>(Tr::ToDouble(v)) * weight);
  }
  for (int64_t i = 0; i < n && i < static_cast<int64_t>(dense.size()); ++i) {
    const double want = Tr::ToDouble(ref[i]);
    if (std::isnan(want)) {
      CHECK(std::isnan(Tr::ToDouble(dense[i]))) << "K=" << k << ": element " << i << " is "
                                                << Tr::ToDouble(dense[i]) << ", not NaN";
    } else {
      CHECK(Bits(dense[i]) == Bits(ref[i]))
          << "K=" << k << ": element " << i << " is " << Tr::ToDouble(dense[i])
          << " (bits 0x" << std::hex << Bits(dense[i]) << "), the reference " << std::dec << want
          << " (bits 0x" << std::hex << Bits(ref[i]) << ")" << (mean ? " (mean)" : "");
    }
  }
  }
}

// ScaleAt: x (with NaN and +-Inf when n allows) at `length` indices drawn from
// a small pool (repeats), a fifth -1, for factors 0 (clears), 1, 0.5 and -3:
// each listed element scaled once, the others untouched, bit for bit.
template <typename Tr, typename Ix>
void CheckScaleAt(SparseGraph& graph, int64_t n, int64_t length, std::mt19937_64& rng) {
  using S = typename Tr::S;
  using I = typename Ix::I;
  using Acc = std::conditional_t<Tr::kType == TF_DOUBLE, double, float>;
  std::vector<S> x(n);
  for (S& v : x) v = RandomValue<Tr>(rng);
  const double inf = std::numeric_limits<double>::infinity();
  if (n > 3) {
    x[1] = Tr::FromDouble(NAN);
    x[2] = Tr::FromDouble(inf);
    x[3] = Tr::FromDouble(-inf);
  }
  std::vector<int64_t> indices;
  for (int64_t e = 0; e < length; ++e) {
    indices.push_back(n == 0 || rng() % 5 == 0 ? -1 : static_cast<int64_t>(rng() % std::min<int64_t>(n, 50)));
  }
  const std::vector<I> typed_indices(indices.begin(), indices.end());
  for (double factor : {0.0, 1.0, 0.5, -3.0}) {
    std::vector<Tensor> out;
    std::vector<std::pair<TF_Output, Tensor>> feeds;
    feeds.emplace_back(graph.scale_x, MakeTensor(Tr::kType, {n}, x));
    feeds.emplace_back(graph.decode_indices.at(Ix::kType),
                       MakeTensor(Ix::kType, {length}, typed_indices));
    feeds.emplace_back(graph.scale_factor,
                       MakeTensor(Tr::kType, {}, std::vector<S>{Tr::FromDouble(factor)}));
    const Status s = graph.Run(std::move(feeds), {graph.scale_out.at(Ix::kType)}, &out);
    CHECK(s.ok()) << "factor " << factor << ": " << s.message;
    if (!s.ok()) continue;
    CHECK(Shape(out[0]) == std::vector<int64_t>{n}) << "factor " << factor << ": shape";
    const std::vector<S> got = Values<S>(out[0]);
    std::vector<S> want = x;
    for (int64_t i : indices) {
      if (i < 0 || factor == 1.0) continue;
      want[i] = factor == 0.0 ? Tr::FromDouble(0.0)
                              : Tr::FromDouble(static_cast<Acc>(Tr::ToDouble(x[i])) * static_cast<Acc>(factor));
    }
    for (int64_t i = 0; i < n && i < static_cast<int64_t>(got.size()); ++i) {
      const bool both_nan = std::isnan(Tr::ToDouble(want[i])) && std::isnan(Tr::ToDouble(got[i]));
      CHECK(Bits(got[i]) == Bits(want[i]) || both_nan)
          << "factor " << factor << ": element " << i << " is " << Tr::ToDouble(got[i])
          << ", want " << Tr::ToDouble(want[i]);
    }
  }
}

// ---- SampledThreshold ----------------------------------------------------------

// The sample's magnitudes, largest first: all of g when n <= num_samples, else
// g at SamplePosition(s) for s < num_samples; |NaN| counts as +Inf.
template <typename Tr>
std::vector<double> RefSortedSample(const std::vector<typename Tr::S>& g,
                                    tfcomp::sparse::HashParams hash, int64_t num_samples) {
  const int64_t n = static_cast<int64_t>(g.size());
  std::vector<double> sample;
  for (int64_t s = 0; s < std::min(n, num_samples); ++s) {
    const int64_t i = n <= num_samples ? s : tfcomp::sparse::SamplePosition(hash, s, num_samples, n);
    const double magnitude = std::fabs(Tr::ToDouble(g[i]));
    sample.push_back(std::isnan(magnitude) ? std::numeric_limits<double>::infinity() : magnitude);
  }
  std::sort(sample.begin(), sample.end(), std::greater<double>());
  return sample;
}

// The k-th largest (k clipped to the sample size) in g's dtype; 0 for an empty g.
template <typename Tr>
typename Tr::S RefThreshold(const std::vector<double>& sorted_sample, int64_t k) {
  if (sorted_sample.empty()) return Tr::FromDouble(0);
  return Tr::FromDouble(sorted_sample[std::min<int64_t>(k, sorted_sample.size()) - 1]);
}

// Runs the op on g (shape dims) and checks it against the reference for every k.
template <typename Tr>
void CheckThreshold(SparseGraph& graph, const std::vector<typename Tr::S>& g,
                    std::vector<int64_t> dims, int64_t num_samples, const std::vector<int64_t>& ks,
                    int64_t seed0, int64_t seed1, const std::string& what) {
  using S = typename Tr::S;
  const std::vector<double> sorted = RefSortedSample<Tr>(
      g, tfcomp::sparse::HashFromSeed(static_cast<uint64_t>(seed0), static_cast<uint64_t>(seed1)),
      num_samples);
  for (int64_t k : ks) {
    const std::string where = what + ", num_samples " + std::to_string(num_samples) + ", k " +
                              std::to_string(k);
    std::vector<Tensor> out;
    std::vector<std::pair<TF_Output, Tensor>> feeds;
    feeds.emplace_back(graph.g, MakeTensor(Tr::kType, dims, g));
    feeds.emplace_back(graph.seed, MakeTensor<int64_t>(TF_INT64, {2}, {seed0, seed1}));
    const Status s = graph.Run(std::move(feeds), {graph.Threshold(num_samples, k)}, &out);
    CHECK(s.ok()) << where << ": " << s.message;
    if (!s.ok()) continue;
    CHECK(Shape(out[0]).empty()) << where << ": the threshold is not a scalar";
    const std::vector<S> got = Values<S>(out[0]);
    CHECK(got.size() == 1) << where << ": " << got.size() << " elements";
    if (got.size() != 1) continue;
    const S want = RefThreshold<Tr>(sorted, k);
    // +0 and -0 are one magnitude to the order; which of them a tie leaves is open.
    const bool zeros = Tr::ToDouble(got[0]) == 0 && Tr::ToDouble(want) == 0;
    CHECK(Bits(got[0]) == Bits(want) || zeros)
        << where << ": " << Tr::ToDouble(got[0]) << " (bits 0x" << std::hex << Bits(got[0])
        << "), the reference " << std::dec << Tr::ToDouble(want) << " (bits 0x" << std::hex
        << Bits(want) << ")";
  }
}

// 1, 2, the middle and num_samples; more than the sample holds when n is smaller.
std::vector<int64_t> ThresholdKs(int64_t num_samples) {
  std::set<int64_t> ks = {1, std::min<int64_t>(2, num_samples), (num_samples + 1) / 2, num_samples};
  return std::vector<int64_t>(ks.begin(), ks.end());
}

// Few distinct magnitudes, +-0 among them: ties at every rank.
template <typename Tr>
std::vector<typename Tr::S> MakeTies(int64_t n, std::mt19937_64& rng) {
  const double inf = std::numeric_limits<double>::infinity();
  const double choices[] = {0.0, -0.0, 0.5, -0.5, 2.0, -2.0, inf, NAN};
  std::vector<typename Tr::S> g(n);
  for (int64_t i = 0; i < n; ++i) g[i] = Tr::FromDouble(choices[rng() % (i % 50 ? 6 : 8)]);
  return g;
}

template <typename Tr>
void TestThreshold(SparseGraph& graph, int64_t n, std::mt19937_64& rng) {
  // 1, 7 (one partial run), 512 (two full runs), 1000, 5000, n - 1 (the most
  // that is still sampled), n (all of g) and 2^17 > every n.
  std::set<int64_t> sample_counts = {1, 7, 512, 1000, 5000, int64_t{1} << 17};
  if (n > 1) sample_counts.insert(n - 1);
  if (n > 0) sample_counts.insert(n);
  const char* kinds[] = {"finite", "nan/inf", "ties"};
  for (int kind = 0; kind < 3; ++kind) {
    const auto g = kind < 2 ? MakeG<Tr>(n, kind == 1, rng) : MakeTies<Tr>(n, rng);
    for (const auto& seed : kSeeds) {
      const std::string what = std::string(kinds[kind]) + ", seed (" + std::to_string(seed[0]) +
                               ", " + std::to_string(seed[1]) + ")";
      for (int64_t num_samples : sample_counts) {
        CheckThreshold<Tr>(graph, g, {n}, num_samples, ThresholdKs(num_samples), seed[0], seed[1],
                           what);
      }
    }
  }
}

template <typename Tr>
void TestThresholdSpelledOut(SparseGraph& graph, std::mt19937_64& rng) {
  using S = typename Tr::S;
  auto run = [&](const std::vector<S>& g, std::vector<int64_t> dims, int64_t num_samples,
                 int64_t k) -> double {
    std::vector<Tensor> out;
    std::vector<std::pair<TF_Output, Tensor>> feeds;
    feeds.emplace_back(graph.g, MakeTensor(Tr::kType, dims, g));
    feeds.emplace_back(graph.seed, MakeTensor<int64_t>(TF_INT64, {2}, {4, 5}));
    const Status s = graph.Run(std::move(feeds), {graph.Threshold(num_samples, k)}, &out);
    CHECK(s.ok()) << s.message;
    return s.ok() ? Tr::ToDouble(Values<S>(out[0]).at(0)) : -1;
  };
  std::vector<S> g;
  const double inf = std::numeric_limits<double>::infinity();
  for (double v : {-3.0, 0.5, std::nan(""), 2.0, -inf, 1.0}) g.push_back(Tr::FromDouble(v));
  // The whole of g: |.| = 3, 0.5, +inf (NaN), 2, +inf, 1.
  CHECK(std::isinf(run(g, {6}, 6, 1)));
  CHECK(std::isinf(run(g, {6}, 6, 2)));
  CHECK(run(g, {6}, 6, 3) == 3);
  CHECK(run(g, {2, 3}, 100, 4) == 2);  // any shape; num_samples > n
  CHECK(run(g, {6}, 6, 6) == 0.5);
  CHECK(run(g, {6}, 100, 100) == 0.5);  // k clipped to the sample: the smallest
  CHECK(run({}, {0}, 7, 7) == 0);
  CHECK(run({Tr::FromDouble(-0.25)}, {}, 3, 2) == 0.25);  // a scalar g
  // n > num_samples: every sample lies in g.
  const auto big = MakeG<Tr>(20000, false, rng);
  double largest = 0;
  for (const S& v : big) largest = std::max(largest, std::fabs(Tr::ToDouble(v)));
  const double t = run(big, {20000}, 300, 1);
  CHECK(t > 0 && t <= largest) << t;
  CHECK(std::find_if(big.begin(), big.end(), [&](S v) {
          return std::fabs(Tr::ToDouble(v)) == t;
        }) != big.end())
      << t << " is not a magnitude of g";
}

// ---- Per dtype -----------------------------------------------------------------

template <typename Tr, typename Ix>
void TestDtypeIndex(SparseGraph& graph, std::mt19937_64& rng) {
  const std::string prefix = std::string(Tr::kName) + "/" + Ix::kName;
  for (int64_t n : kSizes) {
    for (int64_t capacity : kCapacities) {
      Case("select/" + prefix + "/n=" + std::to_string(n) + "/capacity=" +
               std::to_string(capacity),
           [&] { TestSelect<Tr, Ix>(graph, n, capacity, rng); });
    }
    Case("decode/" + prefix + "/n=" + std::to_string(n), [&] {
      for (int k = 1; k <= 5; ++k) CheckDecode<Tr, Ix>(graph, n, k, 1024, rng);
      CheckDecode<Tr, Ix>(graph, n, 3, 0, rng);  // empty lists
    });
    Case("scale_at/" + prefix + "/n=" + std::to_string(n), [&] {
      for (int64_t length : {0, 1, 7, 1024}) CheckScaleAt<Tr, Ix>(graph, n, length, rng);
    });
  }
  Case("select/" + prefix + "/collisions", [&] { TestSelectCollisions<Tr, Ix>(graph, rng); });
  Case("select/" + prefix + "/buckets of " + std::to_string(kBucketSize), [&] {
    for (int64_t n : kSizes) {
      for (bool specials : {false, true}) {
        const auto g = MakeG<Tr>(n, specials, rng);
        for (const Threshold& th : kThresholds) {
          for (int64_t capacity : kBucketCapacities) {
            CheckBucketSelect<Tr, Ix>(graph, g, th.value, capacity, 3, capacity,
                                      std::string(specials ? "nan/inf, " : "") + "n " +
                                          std::to_string(n) + ", threshold " + th.name +
                                          ", capacity " + std::to_string(capacity));
          }
        }
      }
    }
  });
  Case("decode/" + prefix + "/round trip", [&] {
    // Decoding one HashSelect output gives g at the selected indices, 0 elsewhere.
    const int64_t n = 5000, capacity = 1024;
    const auto g = MakeG<Tr>(n, false, rng);
    const SelectRun run = CheckSelect<Tr, Ix>(graph, g, {n}, Tr::FromDouble(2), capacity, 9, 9,
                                              "round trip");
    if (!run.ok) return;
    std::vector<typename Tr::S> values(capacity);
    for (int64_t j = 0; j < capacity; ++j) {
      values[j] = run.indices[j] >= 0 ? g[run.indices[j]] : Tr::FromDouble(0);
    }
    const std::vector<typename Ix::I> idx(run.indices.begin(), run.indices.end());
    std::vector<Tensor> out;
    std::vector<std::pair<TF_Output, Tensor>> feeds;
    feeds.emplace_back(graph.decode_values, MakeTensor(Tr::kType, {capacity}, values));
    feeds.emplace_back(graph.decode_indices.at(Ix::kType), MakeTensor(Ix::kType, {capacity}, idx));
    feeds.emplace_back(graph.decode_n, Scalar64(n));
    const Status s = graph.Run(std::move(feeds), {graph.decode_out.at(Ix::kType)}, &out);
    CHECK(s.ok()) << s.message;
    if (!s.ok()) return;
    const auto dense = Values<typename Tr::S>(out[0]);
    std::vector<bool> kept(n, false);
    for (int64_t i : run.indices) {
      if (i >= 0) kept[i] = true;
    }
    for (int64_t i = 0; i < n && i < static_cast<int64_t>(dense.size()); ++i) {
      const uint64_t want = kept[i] ? Bits(g[i]) : 0;
      CHECK(Bits(dense[i]) == want) << "element " << i << (kept[i] ? " (kept)" : "");
    }
  });
}

template <typename Tr>
void TestDtype() {
  SparseGraph graph(Tr::kType);
  std::mt19937_64 rng(42);
  TestDtypeIndex<Tr, Int32Index>(graph, rng);
  TestDtypeIndex<Tr, Int64Index>(graph, rng);
  Case(std::string("select/") + Tr::kName + "/shapes", [&] { TestSelectShapes<Tr>(graph, rng); });
  for (int64_t n : kSizes) {
    Case(std::string("threshold/") + Tr::kName + "/n=" + std::to_string(n),
         [&] { TestThreshold<Tr>(graph, n, rng); });
  }
  Case(std::string("threshold/") + Tr::kName + "/spelled out",
       [&] { TestThresholdSpelledOut<Tr>(graph, rng); });
}

// ---- Errors --------------------------------------------------------------------

void TestErrors() {
  SparseGraph graph(TF_FLOAT);
  std::vector<Tensor> out;
  auto select = [&](std::vector<int64_t> threshold_dims, std::vector<int64_t> seed_dims) {
    std::vector<std::pair<TF_Output, Tensor>> feeds;
    feeds.emplace_back(graph.g, MakeTensor<float>(TF_FLOAT, {4}, {1, -3, 0.5, 2}));
    int64_t threshold_count = 1, seed_count = 1;
    for (int64_t d : threshold_dims) threshold_count *= d;
    for (int64_t d : seed_dims) seed_count *= d;
    feeds.emplace_back(graph.threshold, MakeTensor(TF_FLOAT, threshold_dims,
                                                   std::vector<float>(threshold_count, 1.f)));
    feeds.emplace_back(graph.seed,
                       MakeTensor(TF_INT64, seed_dims, std::vector<int64_t>(seed_count, 3)));
    const SparseGraph::Select& op = graph.select.at({7, TF_INT64});
    return graph.Run(std::move(feeds), {op.values, op.indices}, &out);
  };
  auto decode = [&](TF_DataType index_type, int64_t value_count, std::vector<int64_t> indices,
                    int64_t n) {
    std::vector<std::pair<TF_Output, Tensor>> feeds;
    feeds.emplace_back(graph.decode_values,
                       MakeTensor(TF_FLOAT, {value_count}, std::vector<float>(value_count, 1.f)));
    const int64_t count = static_cast<int64_t>(indices.size());
    if (index_type == TF_INT32) {
      feeds.emplace_back(
          graph.decode_indices.at(TF_INT32),
          MakeTensor(TF_INT32, {count}, std::vector<int32_t>(indices.begin(), indices.end())));
    } else {
      feeds.emplace_back(graph.decode_indices.at(TF_INT64), MakeTensor(TF_INT64, {count}, indices));
    }
    feeds.emplace_back(graph.decode_n, Scalar64(n));
    return graph.Run(std::move(feeds), {graph.decode_out.at(index_type)}, &out);
  };

  for (TF_DataType index_type : {TF_INT32, TF_INT64}) {
    const std::string suffix = index_type == TF_INT32 ? " (int32)" : " (int64)";
    Case("errors/decode index n" + suffix, [&] {
      CheckError(decode(index_type, 4, {0, 9, 10, -1}, 10), "indices[2] = 10 is outside [0, n = 10)");
    });
    Case("errors/decode index -2" + suffix, [&] {
      CheckError(decode(index_type, 3, {0, -2, 1}, 10), "indices[1] = -2 is outside");
    });
    Case("errors/decode index 0 with n = 0" + suffix, [&] {
      CheckError(decode(index_type, 2, {-1, 0}, 0), "indices[1] = 0 is outside [0, n = 0)");
    });
    Case("errors/decode values and indices lengths" + suffix, [&] {
      CheckError(decode(index_type, 3, {0, 1, 2, 3}, 10),
                 "values and indices must be vectors of one length");
      CheckError(decode(index_type, 5, {0, 1, 2, 3}, 10),
                 "values and indices must be vectors of one length");
    });
    Case("errors/decode n < 0" + suffix,
         [&] { CheckError(decode(index_type, 2, {-1, -1}, -1), "n must be >= 0"); });
    Case("errors/decode edges are fine" + suffix, [&] {
      Status s = decode(index_type, 3, {-1, 9, 0}, 10);
      CHECK(s.ok()) << s.message;
      s = decode(index_type, 2, {-1, -1}, 0);  // n = 0: only empty slots
      CHECK(s.ok()) << s.message;
      s = decode(index_type, 0, {}, 0);
      CHECK(s.ok()) << s.message;
    });
  }
  auto scale = [&](TF_DataType index_type, int64_t n, std::vector<int64_t> indices,
                   std::vector<int64_t> factor_dims) {
    std::vector<std::pair<TF_Output, Tensor>> feeds;
    feeds.emplace_back(graph.scale_x, MakeTensor(TF_FLOAT, {n}, std::vector<float>(n, 1.f)));
    const int64_t count = static_cast<int64_t>(indices.size());
    if (index_type == TF_INT32) {
      feeds.emplace_back(
          graph.decode_indices.at(TF_INT32),
          MakeTensor(TF_INT32, {count}, std::vector<int32_t>(indices.begin(), indices.end())));
    } else {
      feeds.emplace_back(graph.decode_indices.at(TF_INT64), MakeTensor(TF_INT64, {count}, indices));
    }
    int64_t factor_count = 1;
    for (int64_t d : factor_dims) factor_count *= d;
    feeds.emplace_back(graph.scale_factor,
                       MakeTensor(TF_FLOAT, factor_dims, std::vector<float>(factor_count, 0.f)));
    return graph.Run(std::move(feeds), {graph.scale_out.at(index_type)}, &out);
  };
  for (TF_DataType index_type : {TF_INT32, TF_INT64}) {
    const std::string suffix = index_type == TF_INT32 ? " (int32)" : " (int64)";
    Case("errors/scale_at index" + suffix, [&] {
      CheckError(scale(index_type, 10, {0, 9, 10, -1}, {}), "indices[2] = 10 is outside [0, n = 10)");
      CheckError(scale(index_type, 10, {0, -2}, {}), "indices[1] = -2 is outside");
      CheckError(scale(index_type, 0, {-1, 0}, {}), "indices[1] = 0 is outside [0, n = 0)");
    });
    Case("errors/scale_at factor not scalar" + suffix,
         [&] { CheckError(scale(index_type, 10, {0}, {2}), "factor must be a scalar"); });
    Case("errors/scale_at edges are fine" + suffix, [&] {
      for (int64_t n : {0, 10}) {
        const Status s = scale(index_type, n, {-1, -1}, {});
        CHECK(s.ok()) << s.message;
      }
    });
  }
  Case("errors/decode values rank 2", [&] {
    std::vector<std::pair<TF_Output, Tensor>> feeds;
    feeds.emplace_back(graph.decode_values, MakeTensor<float>(TF_FLOAT, {2, 1}, {1, 2}));
    feeds.emplace_back(graph.decode_indices.at(TF_INT32), MakeTensor<int32_t>(TF_INT32, {2}, {0, 1}));
    feeds.emplace_back(graph.decode_n, Scalar64(4));
    CheckError(graph.Run(std::move(feeds), {graph.decode_out.at(TF_INT32)}, &out),
               "values and indices must be vectors");
  });
  Case("errors/select threshold not scalar", [&] {
    CheckError(select({1}, {2}), "threshold must be a scalar");
    CheckError(select({2}, {2}), "threshold must be a scalar");
  });
  Case("errors/select seed shape", [&] {
    for (const std::vector<int64_t>& dims : std::vector<std::vector<int64_t>>{{}, {1}, {3}, {2, 1}, {1, 2}}) {
      CheckError(select({}, dims), "seed must be an int64 vector of 2 elements");
    }
  });
  Case("errors/select edges are fine", [&] {
    const Status s = select({}, {2});
    CHECK(s.ok()) << s.message;
  });

  auto threshold = [&](int64_t n, std::vector<int64_t> seed_dims, int64_t num_samples, int64_t k) {
    std::vector<std::pair<TF_Output, Tensor>> feeds;
    feeds.emplace_back(graph.g, MakeTensor(TF_FLOAT, {n}, std::vector<float>(n, 1.f)));
    int64_t seed_count = 1;
    for (int64_t d : seed_dims) seed_count *= d;
    feeds.emplace_back(graph.seed,
                       MakeTensor(TF_INT64, seed_dims, std::vector<int64_t>(seed_count, 3)));
    return graph.Run(std::move(feeds), {graph.Threshold(num_samples, k)}, &out);
  };
  Case("errors/threshold seed shape", [&] {
    for (const std::vector<int64_t>& dims : std::vector<std::vector<int64_t>>{{}, {1}, {3}, {2, 1}, {1, 2}}) {
      CheckError(threshold(10, dims, 4, 2), "seed must be an int64 vector of 2 elements");
      CheckError(threshold(0, dims, 4, 2), "seed must be an int64 vector of 2 elements");
    }
  });
  Case("errors/threshold k > num_samples", [&] {
    CheckError(threshold(10, {2}, 2, 3), "k = 3 is larger than num_samples = 2");
    CheckError(threshold(1, {2}, 1, 2), "k = 2 is larger than num_samples = 1");
    CheckError(threshold(0, {2}, 5, 6), "k = 6 is larger than num_samples = 5");  // even for an empty g
  });
  Case("errors/threshold edges are fine", [&] {
    for (int64_t n : {0, 1, 10}) {
      Status s = threshold(n, {2}, 2, 2);
      CHECK(s.ok()) << "n = " << n << ": " << s.message;
      s = threshold(n, {2}, 1, 1);
      CHECK(s.ok()) << "n = " << n << ": " << s.message;
    }
  });
}

}  // namespace

int main(int argc, char** argv) {
  LoadOpLibraryOrExit(argc, argv);

  Case("reference conversions", [] {
    // tf_c_api.h's float -> half and float -> bfloat16 rounding.
    CHECK(HalfFromFloat(1.0f) == 0x3c00);
    CHECK(HalfFromFloat(-2.0f) == 0xc000);
    CHECK(HalfFromFloat(65504.0f) == 0x7bff);
    CHECK(HalfFromFloat(65520.0f) == 0x7c00);
    CHECK(HalfFromFloat(1.0f + 1.0f / 2048) == 0x3c00);  // tie to even
    CHECK(HalfFromFloat(1.0f + 3.0f / 2048) == 0x3c02);  // tie to even, up
    CHECK(HalfFromFloat(2047.0f / 1024) == 0x3fff);
    CHECK(HalfFromFloat(4095.0f / 2048) == 0x4000);  // carries into the exponent
    CHECK(HalfFromFloat(std::ldexp(1.0f, -24)) == 0x0001);
    CHECK(HalfFromFloat(std::ldexp(1.0f, -14)) == 0x0400);
    CHECK(HalfFromFloat(std::ldexp(1023.0f, -24)) == 0x03ff);
    CHECK(HalfFromFloat(std::ldexp(1.0f, -25)) == 0x0000);  // tie to even (0)
    for (uint32_t h = 0; h < 0x7c00; ++h) {
      CHECK(HalfFromFloat(static_cast<float>(Half::ToDouble(h))) == h) << std::hex << h;
    }
    CHECK(BFloat16FromFloat(1.0f) == 0x3f80);
    CHECK(BFloat16FromFloat(1.0f + 1.0f / 256) == 0x3f80);  // tie to even
    CHECK(BFloat16FromFloat(1.0f + 3.0f / 256) == 0x3f82);
  });
  TestDtype<Float>();
  TestDtype<Double>();
  TestDtype<Half>();
  TestDtype<BFloat16>();
  TestErrors();
  return tfcomp::testing::Summary();
}
