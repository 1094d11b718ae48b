// What the C++ op tests share: they load the built op library and run its ops
// through the TensorFlow C API.
//
//   int main(int argc, char** argv) {
//     tfcomp::testing::LoadOpLibraryOrExit(argc, argv);  // argv[1] or $TFCOMP_OPS_LIB
//     ...
//   }
//
// OpGraph owns a graph and a session on it; a test derives from it, adds its
// ops with Placeholder, FinishOrExit or its own TF_* calls, and runs them with
// Run. Tensor, MakeTensor, Values, Shape: TF_Tensor as a std::unique_ptr.
// Status, CheckError: a run's outcome and the CHECKs on an expected error.
// Bits, HalfToDouble, HalfFromFloat, ...: half and bfloat16 go through the C
// API as their bit patterns (uint16_t).
#ifndef TFCOMP_CUSTOM_OPS_TESTING_TF_C_API_H_
#define TFCOMP_CUSTOM_OPS_TESTING_TF_C_API_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "custom_ops/testing/check.h"
#include "tensorflow/c/c_api.h"

namespace tfcomp {
namespace testing {

// ---- Bit patterns and the 16-bit dtypes --------------------------------------

template <typename S>
uint64_t Bits(S x) {
  uint64_t b = 0;
  std::memcpy(&b, &x, sizeof(S));
  return b;
}

template <typename S>
S FromBits(uint64_t b) {
  S x;
  std::memcpy(&x, &b, sizeof(S));
  return x;
}

inline double HalfToDouble(uint16_t h) {
  const int exponent = (h >> 10) & 31, mantissa = h & 1023;
  const double v = exponent == 0    ? std::ldexp(mantissa, -24)
                   : exponent == 31 ? (mantissa ? NAN : INFINITY)
                                    : std::ldexp(1024 + mantissa, exponent - 25);
  return (h & 0x8000) ? -v : v;
}

inline float BFloat16ToFloat(uint16_t b) { return FromBits<float>(uint64_t{b} << 16); }

// float -> half, round to nearest even (what Eigen::half's conversion does).
inline uint16_t HalfFromFloat(float f) {
  const uint16_t sign = static_cast<uint16_t>((Bits(f) >> 16) & 0x8000);
  if (std::isnan(f)) return sign | 0x7e00;
  const float a = std::fabs(f);
  if (a >= 65520.0f) return sign | 0x7c00;
  if (a == 0) return sign;
  const int e = std::ilogb(a);
  const int q = std::max(e, -14) - 10;  // the quantum: 2^q
  const double r = std::nearbyint(std::ldexp(static_cast<double>(a), -q));  // ties to even
  // Subnormal: r units of 2^-24 (r = 1024 is the smallest normal). Normal: the
  // exponent field plus the mantissa; r = 2048 carries into the exponent.
  const uint32_t bits = e < -14 ? static_cast<uint32_t>(r)
                                : ((e + 15) << 10) + static_cast<uint32_t>(r) - 1024;
  return static_cast<uint16_t>(sign | bits);
}

// float -> bfloat16, round to nearest even (Eigen::bfloat16's conversion).
inline uint16_t BFloat16FromFloat(float f) {
  if (std::isnan(f)) return std::signbit(f) ? 0xffc0 : 0x7fc0;
  const uint32_t x = static_cast<uint32_t>(Bits(f));
  return static_cast<uint16_t>((x + 0x7fff + ((x >> 16) & 1)) >> 16);
}

// ---- Tensors -------------------------------------------------------------------

struct TensorDeleter {
  void operator()(TF_Tensor* t) const { TF_DeleteTensor(t); }
};
using Tensor = std::unique_ptr<TF_Tensor, TensorDeleter>;

template <typename S>
Tensor MakeTensor(TF_DataType type, std::vector<int64_t> dims, const std::vector<S>& values) {
  TF_Tensor* t = TF_AllocateTensor(type, dims.data(), static_cast<int>(dims.size()),
                                   values.size() * sizeof(S));
  if (!values.empty()) std::memcpy(TF_TensorData(t), values.data(), values.size() * sizeof(S));
  return Tensor(t);
}

inline Tensor Scalar64(int64_t v) { return MakeTensor<int64_t>(TF_INT64, {}, {v}); }

template <typename S>
std::vector<S> Values(const Tensor& t) {
  std::vector<S> v(TF_TensorElementCount(t.get()));
  if (!v.empty()) std::memcpy(v.data(), TF_TensorData(t.get()), v.size() * sizeof(S));
  return v;
}

inline std::vector<int64_t> Shape(const Tensor& t) {
  std::vector<int64_t> dims(TF_NumDims(t.get()));
  for (size_t i = 0; i < dims.size(); ++i) dims[i] = TF_Dim(t.get(), static_cast<int>(i));
  return dims;
}

// ---- Status --------------------------------------------------------------------

struct Status {
  TF_Code code = TF_OK;
  std::string message;
  bool ok() const { return code == TF_OK; }
};

// Takes the code and message of s, and deletes it.
inline Status TakeStatus(TF_Status* s) {
  Status out{TF_GetCode(s), TF_Message(s)};
  TF_DeleteStatus(s);
  return out;
}

// For setting up a test: prints "what: message" and exits with 2 on an error.
inline void Require(const Status& s, const char* what) {
  if (!s.ok()) {
    std::fprintf(stderr, "%s: %s\n", what, s.message.c_str());
    std::exit(2);
  }
}

// CHECKs that s is an InvalidArgument whose message contains needle.
inline void CheckError(const Status& s, const std::string& needle) {
  CHECK(s.code == TF_INVALID_ARGUMENT) << "code " << s.code << " (" << s.message << ")";
  CHECK(s.message.find(needle) != std::string::npos)
      << "message \"" << s.message << "\" does not name \"" << needle << "\"";
}

// ---- Graphs and sessions ---------------------------------------------------------

// TF_FinishOperation(d), exiting with 2 when it fails (name: the node).
inline TF_Operation* FinishOrExit(TF_OperationDescription* d, const char* name) {
  TF_Status* s = TF_NewStatus();
  TF_Operation* op = TF_FinishOperation(d, s);
  Require(TakeStatus(s), name);
  return op;
}

// A placeholder in graph, of shape *dims, or of unknown shape (so the kernels,
// not the shape functions, see bad shapes) when dims is null.
inline TF_Output Placeholder(TF_Graph* graph, const char* name, TF_DataType type,
                             const std::vector<int64_t>* dims = nullptr) {
  TF_OperationDescription* d = TF_NewOperation(graph, "Placeholder", name);
  TF_SetAttrType(d, "dtype", type);
  if (dims) TF_SetAttrShape(d, "shape", dims->data(), static_cast<int>(dims->size()));
  return {FinishOrExit(d, name), 0};
}

// A graph and a session on it. The session picks up the nodes added to the
// graph before each Run.
class OpGraph {
 public:
  OpGraph() : graph_(TF_NewGraph()) {
    TF_Status* s = TF_NewStatus();
    TF_SessionOptions* options = TF_NewSessionOptions();
    session_ = TF_NewSession(graph_, options, s);
    TF_DeleteSessionOptions(options);
    Require(TakeStatus(s), "TF_NewSession");
  }

  ~OpGraph() {
    TF_Status* s = TF_NewStatus();
    TF_CloseSession(session_, s);
    TF_DeleteSession(session_, s);
    TF_DeleteStatus(s);
    TF_DeleteGraph(graph_);
  }

  OpGraph(const OpGraph&) = delete;
  OpGraph& operator=(const OpGraph&) = delete;

  TF_Graph* graph() const { return graph_; }

  // Feeds the placeholders, runs, and puts one tensor per fetch in *outputs
  // (null ones when the run fails).
  Status Run(std::vector<std::pair<TF_Output, Tensor>> feeds, std::vector<TF_Output> fetches,
             std::vector<Tensor>* outputs) {
    std::vector<TF_Output> inputs;
    std::vector<TF_Tensor*> values;
    for (auto& f : feeds) {
      inputs.push_back(f.first);
      values.push_back(f.second.get());
    }
    std::vector<TF_Tensor*> raw(fetches.size(), nullptr);
    TF_Status* s = TF_NewStatus();
    TF_SessionRun(session_, nullptr, inputs.data(), values.data(), static_cast<int>(inputs.size()),
                  fetches.data(), raw.data(), static_cast<int>(fetches.size()), nullptr, 0,
                  nullptr, s);
    outputs->clear();
    for (TF_Tensor* t : raw) outputs->emplace_back(t);
    return TakeStatus(s);
  }

 private:
  TF_Graph* graph_;
  TF_Session* session_ = nullptr;
};

// ---- The op library --------------------------------------------------------------

// Loads the op library named by argv[1] or $TFCOMP_OPS_LIB for the rest of
// the process; prints the usage or the error and exits with 2 when it cannot.
inline void LoadOpLibraryOrExit(int argc, char** argv) {
  const char* env_path = std::getenv("TFCOMP_OPS_LIB");
  std::string path = argc > 1 ? argv[1] : (env_path ? env_path : "");
  if (path.empty()) {
    std::fprintf(stderr, "usage: %s path/to/_tfcomp_ops.so (or set TFCOMP_OPS_LIB)\n", argv[0]);
    std::exit(2);
  }
  if (path.find('/') == std::string::npos) path = "./" + path;  // dlopen would search the lib path

  TF_Status* s = TF_NewStatus();
  TF_Library* library = TF_LoadLibrary(path.c_str(), s);
  Require(TakeStatus(s), ("TF_LoadLibrary(" + path + ")").c_str());
  // Frees the handle (the op list TF_LoadLibrary returns); the library itself
  // stays loaded, and its ops registered, for the rest of the process.
  TF_DeleteLibraryHandle(library);
}

}  // namespace testing
}  // namespace tfcomp

#endif  // TFCOMP_CUSTOM_OPS_TESTING_TF_C_API_H_
