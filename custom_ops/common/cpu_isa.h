// The x86 instruction sets the CPU loops have paths for, detected once. Each
// op family's core test runs every path this CPU supports against its
// reference, so a path is never used untested on the machine that tests it.
#ifndef TFCOMP_CUSTOM_OPS_COMMON_CPU_ISA_H_
#define TFCOMP_CUSTOM_OPS_COMMON_CPU_ISA_H_

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#define TFCOMP_X86 1
#else
#define TFCOMP_X86 0
#endif

namespace tfcomp {

// In increasing order: a CPU that runs one runs those before it.
enum class Isa { kGeneric = 0, kAvx2 = 1, kAvx512 = 2 };

inline const char* IsaName(Isa isa) {
  switch (isa) {
    case Isa::kAvx512: return "avx512";
    case Isa::kAvx2: return "avx2";
    default: return "generic";
  }
}

inline Isa DetectIsa() {
#if TFCOMP_X86
  if (__builtin_cpu_supports("avx512f")) return Isa::kAvx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return Isa::kAvx2;
#endif
  return Isa::kGeneric;
}

// The widest instruction set this CPU runs.
inline Isa BestIsa() {
  static const Isa isa = DetectIsa();
  return isa;
}

inline bool IsaSupported(Isa isa) { return static_cast<int>(isa) <= static_cast<int>(BestIsa()); }

}  // namespace tfcomp

#endif  // TFCOMP_CUSTOM_OPS_COMMON_CPU_ISA_H_
