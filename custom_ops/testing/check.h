// A minimal test harness for the C++ op tests, header only and without
// TensorFlow:
//
//   #include "custom_ops/testing/check.h"
//   using tfcomp::testing::Case;
//
//   int main() {
//     Case("adds", [] { CHECK(1 + 1 == 2) << "context for the message"; });
//     return tfcomp::testing::Summary();  // "N passed, M failed"; 1 on a failure
//   }
//
// A case passes when none of its CHECKs fail. A failed CHECK does not stop
// the case; the first kMaxMessagesPerCase failures of a case go to stderr,
// followed by "FAILED <name> (<count> failed checks)".
#ifndef TFCOMP_CUSTOM_OPS_TESTING_CHECK_H_
#define TFCOMP_CUSTOM_OPS_TESTING_CHECK_H_

#include <cstdio>
#include <ostream>
#include <sstream>
#include <string>
#include <utility>

namespace tfcomp {
namespace testing {

constexpr int kMaxMessagesPerCase = 5;

namespace internal {

struct State {
  int passed = 0;
  int failed = 0;
  bool in_case = false;
  int case_failures = 0;     // in the running case
  int outside_failures = 0;  // CHECKs that failed outside any case
};

inline State& GetState() {
  static State state;
  return state;
}

}  // namespace internal

// One failed CHECK: collects the streamed context and reports it when the
// CHECK's full expression ends.
class Failure {
 public:
  Failure(const char* file, int line, const char* cond) {
    msg_ << file << ":" << line << ": CHECK(" << cond << ") failed: ";
  }
  ~Failure() {
    internal::State& state = internal::GetState();
    int count;
    if (state.in_case) {
      count = ++state.case_failures;
    } else {
      count = ++state.outside_failures;
    }
    if (count <= kMaxMessagesPerCase) std::fprintf(stderr, "  %s\n", msg_.str().c_str());
  }
  Failure(const Failure&) = delete;
  Failure& operator=(const Failure&) = delete;

  std::ostream& stream() { return msg_; }

 private:
  std::ostringstream msg_;
};

// Runs one named case; it passes when none of its CHECKs fail.
template <typename Fn>
void Case(const std::string& name, Fn&& fn) {
  internal::State& state = internal::GetState();
  state.in_case = true;
  state.case_failures = 0;
  std::forward<Fn>(fn)();
  state.in_case = false;
  if (state.case_failures == 0) {
    ++state.passed;
  } else {
    ++state.failed;
    std::fprintf(stderr, "FAILED %s (%d failed checks)\n", name.c_str(), state.case_failures);
  }
}

// Prints "N passed, M failed" on its own line and returns the process exit
// code: 0 when every case passed (and no CHECK failed outside a case), else 1.
inline int Summary() {
  const internal::State& state = internal::GetState();
  if (state.outside_failures > 0) {
    std::fprintf(stderr, "%d failed checks outside any case\n", state.outside_failures);
  }
  std::fflush(stderr);
  std::printf("%d passed, %d failed\n", state.passed, state.failed);
  std::fflush(stdout);
  return state.failed == 0 && state.outside_failures == 0 ? 0 : 1;
}

}  // namespace testing
}  // namespace tfcomp

// CHECK(cond) << "context": records a failure of the running case when cond is
// false. The if/else form keeps a following `else` bound to the caller's `if`.
#ifdef CHECK
#error "custom_ops/testing/check.h: CHECK is already defined (TensorFlow's logging?)"
#endif
#define CHECK(cond) \
  if (cond) {       \
  } else            \
    ::tfcomp::testing::Failure(__FILE__, __LINE__, #cond).stream()

#endif  // TFCOMP_CUSTOM_OPS_TESTING_CHECK_H_
