// A marker string that tfcomp/ops.py reads from the library file before
// loading it, so that a library built against another TensorFlow is refused
// with a message instead of crashing or misbehaving at run time.
#include "tensorflow/core/public/version.h"

// The builder names the TensorFlow it compiles against (setup.py does): from
// TensorFlow 2.16 on, version.h no longer defines the release macros (they are
// build-time defines of TensorFlow's own build). 2.15's headers still have them.
#if !defined(TFCOMP_TENSORFLOW_VERSION)
#if defined(TF_MAJOR_VERSION)
#define TFCOMP_TENSORFLOW_VERSION                                                              \
  TF_STR(TF_MAJOR_VERSION) "." TF_STR(TF_MINOR_VERSION) "." TF_STR(TF_PATCH_VERSION) \
  TF_VERSION_SUFFIX
#else
#error "Define TFCOMP_TENSORFLOW_VERSION as the TensorFlow version string, e.g. -DTFCOMP_TENSORFLOW_VERSION='\"2.21.0\"'"
#endif
#endif

#if GOOGLE_CUDA
#define TFCOMP_BUILT_WITH_CUDA "1"
#else
#define TFCOMP_BUILT_WITH_CUDA "0"
#endif

extern "C" __attribute__((used, visibility("default"))) const char tfcomp_build_info[] =
    "tfcomp-build-info: tensorflow=" TFCOMP_TENSORFLOW_VERSION " cuda=" TFCOMP_BUILT_WITH_CUDA ";";
